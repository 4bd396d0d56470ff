// The keepalive extension (docs/PROTOCOL.md section 8) in the browser client:
// protocol.js's negotiation and ping/pong, and the session's timers, with
// node's mock timers standing in for the clock.
import { mock, test } from "node:test";
import assert from "node:assert/strict";

import { Code, Connection, encodeMessage, Extension } from "../../rstreams/web/protocol.js";
import { connect, RemoteProtocolError, SessionBroken } from "../../rstreams/web/rstreams.js";
import { FakeWebSocket } from "../fake-websocket.mjs";
import { fromHex, loadJson, toHex } from "../helpers.mjs";

const KEEPALIVE_HELLO = [Code.hello, 0, [Extension.keepalive]];
const PLAIN_HELLO = [Code.hello, 0, []];

// setImmediate is not mocked: this lets microtasks and promise callbacks run.
const flush = () => new Promise((resolve) => setImmediate(resolve));

function mockTimers() {
  try {
    mock.timers.enable({ apis: ["setTimeout"] });
  } catch {
    mock.timers.enable(["setTimeout"]); // the older signature
  }
}

async function open(options = {}) {
  const pending = connect("ws://127.0.0.1:1/", { WebSocket: FakeWebSocket, goodbyeTimeout: 1000, ...options });
  const ws = FakeWebSocket.last;
  ws.open();
  const session = await pending;
  await flush();
  return { session, ws };
}

async function tick(ms) {
  mock.timers.tick(ms);
  await flush();
}

// ---- bytes ----

const vectors = loadJson("tests/data/keepalive-vectors.json");

test("keepalive vectors encode and decode", () => {
  assert.equal(vectors.extension.id, Extension.keepalive);
  for (const vector of vectors.vectors) {
    assert.equal(toHex(encodeMessage(vector.code, vector.fields)), toHex(fromHex(vector.hex)), vector.name);
  }
});

test("a Connection announces the extensions it is given", () => {
  assert.equal(toHex(new Connection({}, { extensions: [Extension.keepalive] }).dataToSend()), "9300009101");
  assert.equal(toHex(new Connection().dataToSend()), "93000090");
});

// ---- protocol.js, without I/O ----

function agreed() {
  const conn = new Connection({}, { extensions: [Extension.keepalive] });
  conn.dataToSend();
  conn.receive(encodeMessage(Code.hello, [0, [7, Extension.keepalive]])); // unknown ids are ignored
  return conn;
}

test("keepalive is in use only when both hellos list it", () => {
  assert.equal(agreed().keepalive, true);
  const theyDont = new Connection({}, { extensions: [Extension.keepalive] });
  theyDont.receive(encodeMessage(Code.hello, [0, []]));
  assert.equal(theyDont.keepalive, false);
  const weDont = new Connection();
  weDont.receive(encodeMessage(Code.hello, [0, [Extension.keepalive]]));
  assert.equal(weDont.keepalive, false);
  assert.throws(() => weDont.sendPing(), /keepalive extension/);
});

test("a ping is answered with its pong, and our pong is an event", () => {
  const conn = agreed();
  assert.deepStrictEqual(conn.receive(encodeMessage(Code.ping, [9])), [{ type: "ping", nonce: 9 }]);
  assert.equal(toHex(conn.dataToSend()), "920d09");
  const nonce = conn.sendPing();
  assert.equal(toHex(conn.dataToSend()), "920c01");
  assert.throws(() => conn.sendPing(), /still waiting/);
  assert.deepStrictEqual(conn.receive(encodeMessage(Code.pong, [nonce])), [{ type: "pong", nonce: 1 }]);
  assert.equal(conn.sendPing(), 2);
});

test("a pong for no ping of ours, or ping/pong without the extension, is a protocol error", () => {
  assert.throws(() => agreed().receive(encodeMessage(Code.pong, [1])), RemoteProtocolError);
  const conn = agreed();
  conn.sendPing();
  assert.throws(() => conn.receive(encodeMessage(Code.pong, [5])), /answers no ping/);
  const plain = new Connection({}, { extensions: [Extension.keepalive] });
  plain.receive(encodeMessage(Code.hello, [0, []]));
  assert.throws(() => plain.receive(encodeMessage(Code.ping, [1])), /without the keepalive extension/);
});

// ---- the session's timers ----

test("the session pings a server that agreed, and stays while it answers", async (t) => {
  mockTimers();
  t.after(() => mock.timers.reset());
  const { session, ws } = await open();
  assert.deepStrictEqual(ws.take()[0], KEEPALIVE_HELLO);
  ws.deliver(KEEPALIVE_HELLO);
  await flush();
  for (let nonce = 1; nonce <= 3; nonce++) {
    await tick(29_999);
    assert.deepStrictEqual(ws.take(), []);
    await tick(1);
    assert.deepStrictEqual(ws.take(), [[Code.ping, nonce]]);
    await tick(29_000);
    ws.deliver([Code.pong, nonce]);
    await flush();
  }
  assert.equal(session.isClosed, false);
  // The server's own ping is answered.
  ws.deliver([Code.ping, 42]);
  await flush();
  assert.deepStrictEqual(ws.take(), [[Code.pong, 42]]);
  const closing = session.close();
  await flush();
  ws.deliver([Code.goodbye, "goodbye"]);
  await closing;
});

test("a server that stops answering is detected: goodbye, then SessionBroken", async (t) => {
  mockTimers();
  t.after(() => mock.timers.reset());
  const { session, ws } = await open({ keepaliveInterval: 10_000, keepaliveTimeout: 5_000 });
  ws.deliver(KEEPALIVE_HELLO);
  await flush();
  ws.take();
  await tick(10_000);
  assert.deepStrictEqual(ws.take(), [[Code.ping, 1]]);
  await tick(4_999);
  assert.equal(session.isClosed, false);
  await tick(1);
  assert.deepStrictEqual(ws.take(), [[Code.goodbye, "keepalive timeout: no pong within 5 s"]]);
  const error = await session.closed;
  assert.ok(error instanceof SessionBroken);
  assert.equal(error.message.includes("keepalive timeout: no pong within 5 s"), true);
  assert.equal(ws.closedWith, 1000);
});

test("no pings to a server that did not agree, and none when not offered", async (t) => {
  mockTimers();
  t.after(() => mock.timers.reset());
  const { session, ws } = await open();
  ws.deliver(PLAIN_HELLO);
  await flush();
  ws.take();
  await tick(300_000);
  assert.deepStrictEqual(ws.take(), []);
  assert.equal(session.isClosed, false);
  const off = await open({ keepaliveInterval: null });
  assert.deepStrictEqual(off.ws.take()[0], PLAIN_HELLO);
  off.ws.deliver(KEEPALIVE_HELLO);
  await flush();
  await tick(300_000);
  assert.deepStrictEqual(off.ws.take(), []);
  for (const { session: s, ws: w } of [{ session, ws }, off]) {
    const closing = s.close();
    await flush();
    w.deliver([Code.goodbye, "goodbye"]);
    await closing;
  }
});
