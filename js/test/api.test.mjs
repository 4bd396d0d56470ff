// The public API of the browser client: rstreams.js is the one entry point and
// exports exactly the names it always has, each the very object its own module
// defines (so `instanceof` holds whichever module a class came through). And
// the module graph keeps its shape: relative imports only, no module but
// rstreams.js depends on the session layer, and protocol.js stays sans-I/O.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import path from "node:path";

import * as api from "../../rstreams/web/rstreams.js";
import * as errors from "../../rstreams/web/errors.js";
import * as msgpack from "../../rstreams/web/msgpack.js";
import * as protocol from "../../rstreams/web/protocol.js";
import * as demand from "../../rstreams/web/demand.js";
import { ROOT } from "../helpers.mjs";

const WEB = path.join(ROOT, "rstreams", "web");
const MODULES = ["errors.js", "msgpack.js", "protocol.js", "demand.js", "rstreams.js"];

// What rstreams.js exported when it was a single file. Pages may use any of
// these; removing or renaming one breaks them, adding one widens the API.
const PUBLIC = [
  "Code",
  "Connection",
  "DEFAULT_MSGPACK_LIMITS",
  "DEFAULT_PROTOCOL_LIMITS",
  "DemandWindow",
  "Extension",
  "GOODBYE_TIMEOUT_MS",
  "KEEPALIVE_INTERVAL_MS",
  "KEEPALIVE_TIMEOUT_MS",
  "LocalProtocolError",
  "MsgpackDecodeError",
  "MsgpackEncodeError",
  "MsgpackLimitError",
  "PROTOCOL_VERSION",
  "ProtocolError",
  "PublisherError",
  "RATE_WINDOW_MS",
  "RStreamsError",
  "RemoteProtocolError",
  "SEND_HIGH_WATER",
  "SUBPROTOCOL",
  "Session",
  "SessionBroken",
  "SessionClosed",
  "Subscription",
  "SubscriptionError",
  "UNBOUNDED",
  "UnknownPublisher",
  "connect",
  "decode",
  "decodeMulti",
  "encode",
  "encodeMessage",
];

function importsOf(name) {
  const source = readFileSync(path.join(WEB, name), "utf-8");
  return [...source.matchAll(/^\s*(?:import|export)\b[^;]*?\bfrom\s+"([^"]+)"/gms)].map((m) => m[1]);
}

test("rstreams.js exports exactly the public names", () => {
  assert.deepStrictEqual(Object.keys(api).sort(), [...PUBLIC].sort());
});

test("every re-export is the defining module's own object", () => {
  for (const module of [errors, msgpack, protocol, demand]) {
    for (const [name, value] of Object.entries(module)) {
      if (name in api) assert.equal(api[name], value, name);
    }
  }
  assert.ok(new api.UnknownPublisher("x", "x") instanceof errors.PublisherError);
});

test("helpers shared between modules stay out of the public API", () => {
  for (const name of ["Reader", "Writer", "toBytes"]) {
    assert.equal(typeof msgpack[name], "function", name);
    assert.ok(!(name in api), `${name} leaked into rstreams.js`);
  }
});

test("every public name comes from exactly one module", () => {
  const owners = new Map();
  for (const [file, module] of [["errors.js", errors], ["msgpack.js", msgpack], ["protocol.js", protocol], ["demand.js", demand]]) {
    for (const name of Object.keys(module)) {
      assert.ok(!owners.has(name), `${name} is exported by both ${owners.get(name)} and ${file}`);
      owners.set(name, file);
    }
  }
});

test("imports are relative to the module's own directory and only reach down the layers", () => {
  // Layers, bottom to top: what each module may import.
  const allowed = {
    "errors.js": [],
    "msgpack.js": ["./errors.js"],
    "protocol.js": ["./errors.js", "./msgpack.js"],
    "demand.js": [],
    "rstreams.js": ["./errors.js", "./msgpack.js", "./protocol.js", "./demand.js"],
  };
  for (const name of MODULES) {
    for (const specifier of importsOf(name)) {
      assert.ok(allowed[name].includes(specifier), `${name} imports ${specifier}`);
    }
  }
});

test("the protocol core and the codec never touch I/O or timers", () => {
  for (const name of ["errors.js", "msgpack.js", "protocol.js", "demand.js"]) {
    const code = readFileSync(path.join(WEB, name), "utf-8")
      .replace(/\/\*[\s\S]*?\*\//g, "")
      .replace(/\/\/.*$/gm, "");
    // Whole identifiers only: the limit maxWebSocketMessage is just a number.
    for (const word of ["WebSocket", "setTimeout", "setInterval", "queueMicrotask", "globalThis", "performance", "fetch"]) {
      assert.ok(!new RegExp(`(?<![\\w$])${word}(?![\\w$])`).test(code), `${name} uses ${word}`);
    }
  }
});
