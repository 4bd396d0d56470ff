// The bearer extension (docs/PROTOCOL.md section 9) in the browser client:
// the token in the hello, and as a second subprotocol of the upgrade.
import { test } from "node:test";
import assert from "node:assert/strict";

import { Code, Connection, Extension } from "../../rstreams/web/protocol.js";
import { connect, SessionClosed } from "../../rstreams/web/rstreams.js";
import { decodeMulti } from "../../rstreams/web/msgpack.js";
import { FakeWebSocket } from "../fake-websocket.mjs";
import { toHex } from "../helpers.mjs";

const flush = () => new Promise((resolve) => setImmediate(resolve));

test("the hello carries the token as [2, token], with the bytes of PROTOCOL.md", () => {
  const conn = new Connection({}, { extensions: [Extension.keepalive], token: "s3cret" });
  assert.equal(toHex(conn.dataToSend()), "93000092019202a6733363726574");
});

test("without a token the hello is plain, and an empty token is refused", () => {
  assert.equal(toHex(new Connection({}, { extensions: [Extension.keepalive, Extension.bearer] }).dataToSend()), "9300009101");
  assert.throws(() => new Connection({}, { token: "" }), TypeError);
});

test("connect offers the token as a second subprotocol when it can", async () => {
  connect("ws://127.0.0.1:1/", { WebSocket: FakeWebSocket, token: "abc.DEF-123" }).catch(() => {});
  assert.deepEqual(FakeWebSocket.last.protocols, ["rstreams.v0", "rstreams.bearer.abc.DEF-123"]);
  connect("ws://127.0.0.1:1/", { WebSocket: FakeWebSocket, token: "has space" }).catch(() => {});
  assert.deepEqual(FakeWebSocket.last.protocols, ["rstreams.v0"]); // the hello still carries it
  connect("ws://127.0.0.1:1/", { WebSocket: FakeWebSocket }).catch(() => {});
  assert.deepEqual(FakeWebSocket.last.protocols, ["rstreams.v0"]);
});

test("a refused session ends with authentication failed", async () => {
  const pending = connect("ws://127.0.0.1:1/", { WebSocket: FakeWebSocket, token: "wrong", keepaliveInterval: null, goodbyeTimeout: 10 });
  const ws = FakeWebSocket.last;
  ws.open();
  const session = await pending;
  await flush();
  const [hello] = decodeMulti(ws.sent[0]);
  assert.deepEqual(hello, [Code.hello, 0, [[Extension.bearer, "wrong"]]]);
  ws.deliver([Code.hello, 0, []], [Code.goodbye, "authentication failed"]);
  const ended = await session.closed;
  assert.ok(ended instanceof SessionClosed);
  assert.match(ended.message, /authentication failed/);
  ws.close();
});
