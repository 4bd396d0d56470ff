// The protocol state (protocol.js) and the session API (rstreams.js, imported
// as a page does), against the golden wire vectors and a fake WebSocket
// playing the server.
import { test } from "node:test";
import assert from "node:assert/strict";

import { decode, decodeMulti } from "../../rstreams/web/msgpack.js";
import { Code, Connection, encodeMessage, UNBOUNDED } from "../../rstreams/web/protocol.js";
import { connect, PublisherError, RemoteProtocolError, SessionBroken, SessionClosed, UnknownPublisher } from "../../rstreams/web/rstreams.js";
import { FakeWebSocket, settle } from "../fake-websocket.mjs";
import { fromHex, loadJson, toHex } from "../helpers.mjs";

const HELLO = [Code.hello, 0, []];

function u64(n) {
  const out = new Uint8Array(8);
  new DataView(out.buffer).setBigUint64(0, BigInt(n));
  return out;
}

function packed(from, count) {
  const out = new Uint8Array(8 * count);
  for (let i = 0; i < count; i++) out.set(u64(from + i), 8 * i);
  return out;
}

async function open(options = {}) {
  const pending = connect("ws://127.0.0.1:1/", { WebSocket: FakeWebSocket, ...options });
  const ws = FakeWebSocket.last;
  ws.open();
  const session = await pending;
  await settle();
  return { session, ws };
}

// ---- golden vectors ----

const wire = loadJson("tests/data/wire-v0-vectors.json");

function field(f) {
  if (f !== null && typeof f === "object" && !Array.isArray(f)) return fromHex(f.bin);
  if (typeof f === "number" && !Number.isSafeInteger(f)) throw new Error("vector JSON lost precision");
  return f;
}

for (const vector of wire.vectors) {
  // JSON.parse cannot hold 2^63 - 1 exactly: take it from the hex as BigInt.
  const fields = vector.fields.map((f) => (typeof f === "number" && f > Number.MAX_SAFE_INTEGER ? UNBOUNDED : field(f)));
  test(`wire vector encodes: ${vector.name}`, () => {
    assert.equal(toHex(encodeMessage(vector.code, fields)), toHex(fromHex(vector.hex)));
  });
  test(`wire vector decodes: ${vector.name}`, () => {
    assert.deepStrictEqual(decode(fromHex(vector.hex)), [vector.code, ...fields]);
  });
}

test("a new Connection queues hello(0, []) first", () => {
  const conn = new Connection();
  assert.equal(toHex(conn.dataToSend()), "93000090");
});

test("the session of docs/PROTOCOL.md section 7, byte for byte", async () => {
  // The client of section 7 does not offer keepalive.
  const { session, ws } = await open({ goodbyeTimeout: 60_000, keepaliveInterval: null });
  const sub = session.subscribe("range?count=3", { prefetch: 16 });
  await settle();
  assert.equal(
    ws.sent.map(toHex).join(""),
    "93000090" + "9401ad72616e67653f636f756e743d330110",
  );
  ws.deliver(HELLO, [Code.subscribed, 1, 8], [Code.onNextPacked, 1, 3, packed(0, 3)], [Code.onComplete, 1]);
  const got = [];
  for await (const x of sub) got.push(toHex(x));
  assert.deepStrictEqual(got, ["0000000000000000", "0000000000000001", "0000000000000002"]);
  const closing = session.close();
  await settle();
  assert.equal(toHex(ws.sent.at(-1)), "920ba7676f6f64627965");
  // Our goodbye is answered: close() resolves then, not at the timeout.
  const started = Date.now();
  ws.deliver([Code.goodbye, "goodbye"]);
  await closing;
  assert.ok(Date.now() - started < 1000);
  assert.equal(ws.closedWith, 1000);
});

test("an answered goodbye leaves no timer behind", async () => {
  // The goodbye timeout must be cleared once the peer answers: a pending
  // timer would keep a Node process alive, and a page's timer list growing.
  const pending = new Set();
  const realSet = globalThis.setTimeout;
  const realClear = globalThis.clearTimeout;
  globalThis.setTimeout = (fn, ms, ...args) => {
    const id = realSet(() => {
      pending.delete(id);
      fn(...args);
    }, ms);
    if (ms > 0) pending.add(id);
    return id;
  };
  globalThis.clearTimeout = (id) => {
    pending.delete(id);
    realClear(id);
  };
  try {
    const { session, ws } = await open({ goodbyeTimeout: 60_000 });
    ws.deliver(HELLO);
    const closing = session.close();
    await settle();
    assert.ok(pending.size > 0, "close() arms its goodbye timeout");
    ws.deliver([Code.goodbye, "goodbye"]);
    await closing;
    assert.equal(pending.size, 0);
  } finally {
    globalThis.setTimeout = realSet;
    globalThis.clearTimeout = realClear;
  }
});

test("after our goodbye, a subscribe from the peer starts nothing", async () => {
  const { session, ws } = await open({ goodbyeTimeout: 60_000 });
  let started = false;
  session.publish("p", function* () {
    started = true;
  });
  ws.deliver(HELLO);
  const closing = session.close();
  ws.deliver([Code.subscribe, "p", 1, 1], [Code.goodbye, "goodbye"]);
  await closing;
  assert.equal(started, false);
  assert.deepStrictEqual(ws.messages().at(-1), [Code.goodbye, "goodbye"]);
});

test("the client offers the rstreams.v0 subprotocol and asks for ArrayBuffers", async () => {
  const { ws } = await open();
  assert.deepStrictEqual(ws.protocols, ["rstreams.v0"]);
  assert.equal(ws.binaryType, "arraybuffer");
});

test("messages queued in one turn go out in one WebSocket message", async () => {
  const { session, ws } = await open();
  ws.sent.length = 0;
  session.subscribe("a");
  session.subscribe("b");
  session.subscribe("c");
  await settle();
  assert.equal(ws.sent.length, 1);
  assert.deepStrictEqual(
    ws.messages().map((m) => m.slice(0, 3)),
    [
      [Code.subscribe, "a", 1],
      [Code.subscribe, "b", 2],
      [Code.subscribe, "c", 3],
    ],
  );
});

// ---- demand ----

test("automatic demand: never more requested than consumed plus prefetch, and never starved", async () => {
  const { session, ws } = await open();
  const prefetch = 8;
  const sub = session.subscribe("range?count=100", { prefetch });
  await settle();
  ws.deliver(HELLO, [Code.subscribed, 1, 8]);
  let requested = prefetch;
  let sent = 0;
  let consumed = 0;
  ws.take();
  const iterator = sub[Symbol.asyncIterator]();
  while (sent < 100) {
    // The server sends everything it may.
    const n = Math.min(requested - sent, 100 - sent);
    // Starved: nothing buffered and nothing the publisher may send.
    assert.ok(n > 0 || sent > consumed, "the subscriber starved the publisher");
    if (n > 0) ws.deliver([Code.onNextPacked, 1, n, packed(sent, n)]);
    sent += n;
    // The consumer takes a few, then the test reads the requests it made.
    const take = Math.min(3, sent - consumed);
    for (let i = 0; i < take; i++) {
      const { value } = await iterator.next();
      assert.equal(new DataView(value.buffer, value.byteOffset).getBigUint64(0), BigInt(consumed));
      consumed++;
    }
    await settle();
    for (const m of ws.take()) {
      assert.equal(m[0], Code.request);
      requested += Number(m[2]);
    }
    assert.ok(requested <= consumed + prefetch, `requested ${requested} > consumed ${consumed} + ${prefetch}`);
    assert.equal(sub.stats().outstandingDemand, requested - sent);
  }
  assert.equal(sub.stats().elements, 100);
  assert.equal(sub.stats().bytes, 800);
});

test("no prefetch: an adaptive window that starts at 16 and grows while the consumer waits for elements", async () => {
  const { session, ws } = await open();
  ws.take();
  const sub = session.subscribe("range?count=10000");
  await settle();
  const [subscribe] = ws.take();
  assert.equal(subscribe[0], Code.subscribe);
  assert.equal(Number(subscribe[3]), 16);
  assert.equal(sub.window, 16);
  ws.deliver(HELLO, [Code.subscribed, 1, 8]);
  let requested = 16;
  let sent = 0;
  let consumed = 0;
  let largest = 16;
  const iterator = sub[Symbol.asyncIterator]();
  while (consumed < 2000) {
    // The consumer drains everything, then waits: the next elements come
    // only after it has waited, so it is starved every time.
    const waiting = iterator.next();
    await settle();
    const n = requested - sent;
    assert.ok(n > 0, "the subscriber starved the publisher");
    ws.deliver([Code.onNextPacked, 1, n, packed(sent, n)]);
    sent += n;
    await waiting;
    consumed++;
    while (consumed < sent) {
      await iterator.next();
      consumed++;
    }
    await settle();
    for (const m of ws.take()) {
      assert.equal(m[0], Code.request);
      requested += Number(m[2]);
    }
    largest = Math.max(largest, sub.window);
    assert.ok(requested - consumed <= largest, `requested ${requested} - consumed ${consumed} > window ${largest}`);
  }
  assert.ok(largest >= 1024, `the window did not grow: ${largest}`);
  sub.cancel();
});

test("prefetch: a bad value is refused; null or left out is adaptive", async () => {
  const { session } = await open();
  for (const bad of [-1, 1.5, "8"]) assert.throws(() => session.subscribe("range", { prefetch: bad }), RangeError);
  assert.equal(session.subscribe("range", { prefetch: null }).window, 16);
  assert.equal(session.subscribe("range", { prefetch: 5 }).window, 5);
  assert.equal(session.subscribe("range", { prefetch: 0 }).window, 0);
});

test("prefetch 0: nothing requested until request(n); n must be positive", async () => {
  const { session, ws } = await open();
  ws.take();
  const sub = session.subscribe("range", { prefetch: 0 });
  await settle();
  assert.deepStrictEqual(ws.take(), [[Code.subscribe, "range", 1, 0]]);
  assert.throws(() => sub.request(0), RangeError);
  assert.throws(() => sub.request(-1), RangeError);
  sub.request(5);
  sub.request(7n);
  await settle();
  assert.deepStrictEqual(ws.take(), [
    [Code.request, 1, 5],
    [Code.request, 1, 7],
  ]);
  assert.equal(sub.stats().outstandingDemand, 12);
});

test("demand saturates at 2^63 - 1 (unbounded) and then is not counted", async () => {
  const { session, ws } = await open();
  const sub = session.subscribe("range", { prefetch: 0 });
  sub.request(UNBOUNDED - 1n);
  sub.request(10);
  await settle();
  const requests = ws.messages().filter((m) => m[0] === Code.request);
  assert.deepStrictEqual(requests, [
    [Code.request, 1, UNBOUNDED - 1n],
    [Code.request, 1, 10],
  ]);
  assert.equal(sub.stats().outstandingDemand, Infinity);
  ws.deliver(HELLO, [Code.subscribed, 1, 8], [Code.onNextPacked, 1, 1000, packed(0, 1000)]);
  assert.equal(sub.stats().outstandingDemand, Infinity);
  assert.equal(sub.stats().buffered, 1000);
});

test("more elements than requested is a protocol error: goodbye, and the stream fails", async () => {
  const { session, ws } = await open();
  const sub = session.subscribe("range", { prefetch: 2 });
  ws.deliver(HELLO, [Code.subscribed, 1, 8], [Code.onNextPacked, 1, 3, packed(0, 3)]);
  await settle();
  const goodbye = ws.messages().at(-1);
  assert.equal(goodbye[0], Code.goodbye);
  assert.match(goodbye[1], /^protocol error: onNextPacked of 3 exceeds the outstanding demand 2/);
  await assert.rejects(sub.next(), (err) => err instanceof SessionClosed && err.reason.startsWith("protocol error:"));
  assert.equal(ws.closedWith, 1002);
});

// ---- elements: packed, split ----

test("packed runs are delivered one element at a time, or as batches", async () => {
  const { session, ws } = await open();
  const sub = session.subscribe("range?count=6", { prefetch: 6 });
  ws.deliver(HELLO, [Code.subscribed, 1, 8], [Code.onNextPacked, 1, 4, packed(0, 4)], [Code.onNextPacked, 1, 2, packed(4, 2)], [Code.onComplete, 1]);
  const first = await sub.next();
  assert.equal(toHex(first.value), "0000000000000000");
  const batches = [];
  for await (const batch of sub.batches()) batches.push(batch.map((b) => b[7]));
  assert.deepStrictEqual(batches, [[1, 2, 3, 4, 5]]);
});

test("split elements are joined, with other streams interleaved between parts", async () => {
  const { session, ws } = await open();
  const a = session.subscribe("blob?a", { prefetch: 4 });
  const b = session.subscribe("blob?b", { prefetch: 4 });
  ws.deliver(
    HELLO,
    [Code.subscribed, 1, 0],
    [Code.subscribed, 2, 0],
    [Code.onNextPart, 1, 0, new Uint8Array([1, 2])],
    [Code.onNext, 2, new Uint8Array([9])],
    [Code.onNextPart, 2, 0, new Uint8Array([7])],
    [Code.onNextPart, 1, 0, new Uint8Array([3])],
    [Code.onNextLastPart, 2, 0, new Uint8Array([8])],
    [Code.onNextLastPart, 1, 0, new Uint8Array([4, 5])],
    [Code.onComplete, 1],
    [Code.onComplete, 2],
  );
  const got = async (sub) => {
    const out = [];
    for await (const x of sub) out.push(Array.from(x));
    return out;
  };
  assert.deepStrictEqual(await got(a), [[1, 2, 3, 4, 5]]);
  assert.deepStrictEqual(await got(b), [[9], [7, 8]]);
  assert.equal(a.stats().bytes, 5);
});

test("a split element over the limit is a protocol error", async () => {
  const { session, ws } = await open({ limits: { maxElementBytes: 4 } });
  const sub = session.subscribe("blob", { prefetch: 4 });
  ws.deliver(HELLO, [Code.subscribed, 1, 0], [Code.onNextPart, 1, 0, new Uint8Array(3)], [Code.onNextLastPart, 1, 0, new Uint8Array(2)]);
  await settle();
  assert.match(ws.messages().at(-1)[1], /^protocol error: a split element exceeds the limit of 4 bytes/);
  await assert.rejects(sub.next(), SessionClosed);
});

test("parts of two elements interleaved in one stream, or onNext mid-element, are protocol errors", () => {
  for (const bad of [
    [Code.onNextPart, 1, 1, new Uint8Array(1)],
    [Code.onNext, 1, new Uint8Array(1)],
    [Code.onComplete, 1],
  ]) {
    const conn = new Connection();
    conn.subscribe("blob", 4n);
    conn.receive(encodeMessage(Code.hello, [0, []]));
    conn.receive(encodeMessage(Code.subscribed, [1, 0]));
    conn.receive(encodeMessage(Code.onNextPart, [1, 0, new Uint8Array(1)]));
    assert.throws(() => conn.receive(encodeMessage(bad[0], bad.slice(1))), RemoteProtocolError);
  }
});

test("elementSize is enforced: onNextPacked needs it, and sizes must match", () => {
  const cases = [
    [0, [Code.onNextPacked, 1, 1, new Uint8Array(8)], /without elementSize/],
    [8, [Code.onNextPacked, 1, 2, new Uint8Array(8)], /is not 2 × 8/],
    [8, [Code.onNext, 1, new Uint8Array(3)], /of 3 bytes on a stream of elementSize 8/],
  ];
  for (const [size, message, pattern] of cases) {
    const conn = new Connection();
    conn.subscribe("x", 4n);
    conn.receive(encodeMessage(Code.hello, [0, []]));
    conn.receive(encodeMessage(Code.subscribed, [1, size]));
    assert.throws(() => conn.receive(encodeMessage(message[0], message.slice(1))), pattern);
  }
});

// ---- errors, cancel, goodbye ----

test("onError rejects the iterator with PublisherError after the elements sent", async () => {
  const { session, ws } = await open();
  const sub = session.subscribe("fail?after=1", { prefetch: 4 });
  ws.deliver(HELLO, [Code.subscribed, 1, 8], [Code.onNextPacked, 1, 1, packed(0, 1)], [Code.onError, 1, "fail: failing after 1 elements as asked"]);
  assert.equal((await sub.next()).done, false);
  await assert.rejects(sub.next(), (err) => err instanceof PublisherError && err.message === "fail: failing after 1 elements as asked");
  assert.equal(sub.state, "failed");
});

test("a refusal 'no such publisher' is UnknownPublisher, and subscribed rejects", async () => {
  const { session, ws } = await open();
  const sub = session.subscribe("nope?x=1");
  ws.deliver(HELLO, [Code.onError, 1, "no such publisher: nope?x=1"]);
  await assert.rejects(sub.subscribed, UnknownPublisher);
  await assert.rejects(
    (async () => {
      for await (const _ of sub);
    })(),
    (err) => err instanceof UnknownPublisher && err instanceof PublisherError && err.publisherName === "nope?x=1",
  );
});

test("UnknownPublisher names the publisher asked for, whatever the server adds after it", async () => {
  const { session, ws } = await open();
  const sub = session.subscribe("rnage?count=3");
  ws.deliver(HELLO, [Code.onError, 1, "no such publisher: rnage?count=3 (closest: range)"]);
  await assert.rejects(
    sub.subscribed,
    (err) => err instanceof UnknownPublisher && err.publisherName === "rnage?count=3" && err.message.endsWith("(closest: range)"),
  );
});

test("break cancels; late messages for the cancelled Id are dropped silently", async () => {
  const { session, ws } = await open();
  const sub = session.subscribe("range?count=100", { prefetch: 4 });
  ws.deliver(HELLO, [Code.subscribed, 1, 8], [Code.onNextPacked, 1, 4, packed(0, 4)]);
  for await (const _ of sub) break;
  await settle();
  assert.deepStrictEqual(ws.messages().at(-1), [Code.cancel, 1]);
  assert.equal(sub.state, "cancelled");
  ws.deliver([Code.onNextPacked, 1, 2, packed(4, 2)], [Code.onComplete, 1]);
  await settle();
  assert.deepStrictEqual(ws.messages().at(-1), [Code.cancel, 1], "no goodbye for late messages");
  assert.equal((await sub.next()).done, true);
  sub.request(3); // after the end: a no-op
  sub.cancel();
  await settle();
  assert.deepStrictEqual(ws.messages().at(-1), [Code.cancel, 1]);
});

test("a message for an Id never used is a protocol error", async () => {
  const { ws } = await open();
  ws.deliver(HELLO, [Code.onComplete, 9]);
  await settle();
  assert.match(ws.messages().at(-1)[1], /^protocol error: onComplete for unknown subscriber Id 9/);
});

test("the peer's goodbye ends every stream with SessionClosed and is answered", async () => {
  const { session, ws } = await open();
  const a = session.subscribe("ticker");
  const b = session.subscribe("range");
  ws.deliver(HELLO, [Code.subscribed, 1, 0], [Code.goodbye, "server shutting down"]);
  await settle();
  assert.deepStrictEqual(ws.messages().at(-1), [Code.goodbye, "goodbye"]);
  for (const sub of [a, b]) {
    await assert.rejects(sub.next(), (err) => err instanceof SessionClosed && err.byPeer && err.reason === "server shutting down");
  }
  const closed = await session.closed;
  assert.equal(closed.reason, "server shutting down");
  assert.throws(() => session.subscribe("x"), SessionClosed);
});

test("a lost connection ends every stream with SessionBroken", async () => {
  const { session, ws } = await open();
  const sub = session.subscribe("ticker");
  ws.drop(1006);
  await assert.rejects(sub.next(), (err) => err instanceof SessionBroken && err instanceof SessionClosed && /1006/.test(err.message));
});

test("close() ends local streams with SessionClosed(byPeer false) and closes after the timeout", async () => {
  const { session, ws } = await open({ goodbyeTimeout: 20 });
  const sub = session.subscribe("ticker");
  await session.close("done here");
  assert.deepStrictEqual(ws.messages().at(-1), [Code.goodbye, "done here"]);
  assert.equal(ws.closedWith, 1000);
  await assert.rejects(sub.next(), (err) => err instanceof SessionClosed && !err.byPeer);
});

test("handshake: another version is refused with a goodbye naming it", async () => {
  const { ws, session } = await open();
  ws.deliver([Code.hello, 7, []]);
  await settle();
  assert.deepStrictEqual(ws.messages().at(-1), [Code.goodbye, "unsupported protocol version 7: this peer speaks version 0"]);
  assert.ok(session.isClosed);
});

test("handshake: a first message other than hello or goodbye, a second hello, a text message: protocol errors", async () => {
  for (const send of [
    (ws) => ws.deliver([Code.subscribed, 1, 0]),
    (ws) => ws.deliver(HELLO, HELLO),
    (ws) => ws.deliver(new Uint8Array([0xc1])),
    (ws) => ws.deliver([99, 1]),
    (ws) => ws.deliver(HELLO, fromHex("92 cb 3ff0000000000000 01")), // [1.0, 1]: a float code is not a code
    (ws) => ws.deliver(HELLO, fromHex("81 a1 61 01")), // a map, not an array
    (ws) => ws.deliver(HELLO, [Code.request, 1, "five"]),
    (ws) => ws.deliverText("hello"),
  ]) {
    const { ws } = await open();
    send(ws);
    await settle();
    const last = ws.messages().at(-1);
    assert.equal(last[0], Code.goodbye);
    assert.match(last[1], /^protocol error: /);
  }
});

test("handshake is loose: a goodbye first is accepted", async () => {
  const { ws, session } = await open();
  ws.deliver([Code.goodbye, "too many connections"]);
  const closed = await session.closed;
  assert.equal(closed.reason, "too many connections");
});

test("decode options: msgpack, json, text and a function", async () => {
  const { session, ws } = await open();
  const subs = [
    session.subscribe("t", { decode: "msgpack" }),
    session.subscribe("j", { decode: "json" }),
    session.subscribe("s", { decode: "text" }),
    session.subscribe("f", { decode: (bytes) => bytes.length }),
  ];
  const enc = new TextEncoder();
  ws.deliver(
    HELLO,
    ...[1, 2, 3, 4].map((id) => [Code.subscribed, id, 0]),
    [Code.onNext, 1, fromHex("93 2a cb 41 d9 54 fc 40 00 00 00 cb 40 59 60 00 00 00 00 00")],
    [Code.onNext, 2, enc.encode('{"n": [1, 2]}')],
    [Code.onNext, 3, enc.encode("héllo")],
    [Code.onNext, 4, new Uint8Array(5)],
  );
  assert.deepStrictEqual((await subs[0].next()).value, [42, 1700000000, 101.5]);
  assert.deepStrictEqual((await subs[1].next()).value, { n: [1, 2] });
  assert.equal((await subs[2].next()).value, "héllo");
  assert.equal((await subs[3].next()).value, 5);
  assert.throws(() => session.subscribe("x", { decode: "yaml" }), TypeError);
});

test("subscribe returns the subscription synchronously, not a Promise", async () => {
  const { session } = await open();
  const sub = session.subscribe("x");
  assert.equal(typeof sub.then, "undefined");
  assert.equal(typeof sub[Symbol.asyncIterator], "function");
  assert.equal(typeof sub.cancel, "function");
  assert.equal(typeof sub.request, "function");
  assert.equal(sub.id, 1);
});

// ---- publishing ----

test("publish: the source is pulled only with demand, completes, and gets the query", async () => {
  const { session, ws } = await open();
  const pulled = [];
  let params = null;
  session.publish("numbers", async function* (request) {
    params = Object.fromEntries(request.params);
    for (let i = 0; i < 5; i++) {
      pulled.push(i);
      yield new Uint8Array([i]);
    }
  });
  ws.take();
  ws.deliver(HELLO, [Code.subscribe, "numbers?from=browser", 5, 2]);
  await settle();
  assert.deepStrictEqual(params, { from: "browser" });
  assert.deepStrictEqual(ws.take(), [
    [Code.subscribed, 5, 0],
    [Code.onNext, 5, new Uint8Array([0])],
    [Code.onNext, 5, new Uint8Array([1])],
  ]);
  // A generator runs to its next yield only when asked: at most one ahead of demand is not allowed.
  assert.deepStrictEqual(pulled, [0, 1]);
  ws.deliver([Code.request, 5, 10]);
  await settle();
  assert.deepStrictEqual(ws.take(), [
    [Code.onNext, 5, new Uint8Array([2])],
    [Code.onNext, 5, new Uint8Array([3])],
    [Code.onNext, 5, new Uint8Array([4])],
    [Code.onComplete, 5],
  ]);
});

test("publish: cancel from the peer closes the generator (its finally runs) and aborts the signal", async () => {
  const { session, ws } = await open();
  let finished = false;
  let signal = null;
  session.publish("forever", async function* (request) {
    signal = request.signal;
    try {
      for (let i = 0; ; i++) yield new Uint8Array([i & 0xff]);
    } finally {
      finished = true;
    }
  });
  ws.deliver(HELLO, [Code.subscribe, "forever", 1, 3]);
  await settle();
  ws.deliver([Code.cancel, 1]);
  await settle();
  assert.ok(finished);
  assert.ok(signal.aborted);
  const sent = ws.messages().filter((m) => m[0] === Code.onNext);
  assert.equal(sent.length, 3);
  // A request crossing the end is ignored, not a protocol error.
  ws.deliver([Code.request, 1, 5]);
  await settle();
  assert.notEqual(ws.messages().at(-1)[0], Code.goodbye);
});

test("publish: a throwing source sends onError with its message; unknown names are refused", async () => {
  const { session, ws } = await open();
  session.publish("bad", async function* () {
    yield new Uint8Array([1]);
    throw new Error("broken on purpose");
  });
  ws.take();
  ws.deliver(HELLO, [Code.subscribe, "bad", 1, 5], [Code.subscribe, "missing?q=1", 2, 5]);
  await settle();
  const messages = ws.take();
  assert.deepStrictEqual(messages.find((m) => m[1] === 2), [Code.onError, 2, "no such publisher: missing?q=1"]);
  assert.deepStrictEqual(messages.filter((m) => m[1] === 1), [
    [Code.subscribed, 1, 0],
    [Code.onNext, 1, new Uint8Array([1])],
    [Code.onError, 1, "broken on purpose"],
  ]);
});

test("publish: request(n <= 0) ends that stream with onError, not the session", async () => {
  const { session, ws } = await open();
  session.publish("p", async function* () {
    for (;;) yield new Uint8Array(1);
  });
  ws.deliver(HELLO, [Code.subscribe, "p", 1, 0], [Code.request, 1, 0]);
  await settle();
  const last = ws.messages().at(-1);
  assert.equal(last[0], Code.onError);
  assert.match(last[2], /rule 3\.9/);
  assert.ok(!session.isClosed);
});

test("publish: encode option, unbounded demand, and a sync iterable source", async () => {
  const { session, ws } = await open();
  session.publish("words", () => ["a", "b", "c"], { encode: "json" });
  ws.take();
  ws.deliver(HELLO, [Code.subscribe, "words", 3, UNBOUNDED]);
  await settle();
  const enc = new TextEncoder();
  assert.deepStrictEqual(ws.take(), [
    [Code.subscribed, 3, 0],
    [Code.onNext, 3, enc.encode('"a"')],
    [Code.onNext, 3, enc.encode('"b"')],
    [Code.onNext, 3, enc.encode('"c"')],
    [Code.onComplete, 3],
  ]);
});

test("the peer's goodbye stops local publications", async () => {
  const { session, ws } = await open();
  let finished = false;
  session.publish("forever", async function* () {
    try {
      for (;;) yield new Uint8Array(1);
    } finally {
      finished = true;
    }
  });
  ws.deliver(HELLO, [Code.subscribe, "forever", 1, 1]);
  await settle();
  ws.deliver([Code.goodbye, "bye"]);
  await settle();
  assert.ok(finished);
});

test("an element the decoder refuses cancels the stream and rejects the loop", async () => {
  const { session, ws } = await open();
  const sub = session.subscribe("j", { decode: "json" });
  ws.deliver(HELLO, [Code.subscribed, 1, 0], [Code.onNext, 1, new TextEncoder().encode("{not json")]);
  await assert.rejects(
    (async () => {
      for await (const _ of sub);
    })(),
    SyntaxError,
  );
  await settle();
  assert.equal(sub.state, "cancelled");
  assert.deepStrictEqual(ws.messages().at(-1), [Code.cancel, 1]);
});

test("publish: elements above 64 KiB go out split; sends are cut into WebSocket messages of at most 256 KiB", async () => {
  const { session, ws } = await open();
  const big = new Uint8Array(200 * 1024).map((_, i) => i & 0xff);
  session.publish("big", function* () {
    yield big;
    yield big;
  });
  ws.take();
  ws.sent.length = 0;
  ws._taken = 0;
  // Demand for one more than it has: the end is seen when the source is pulled again.
  ws.deliver(HELLO, [Code.subscribe, "big", 1, 3]);
  await settle();
  const messages = ws.take();
  const parts = messages.filter((m) => m[0] === Code.onNextPart || m[0] === Code.onNextLastPart);
  assert.deepStrictEqual(
    parts.map((m) => [m[0], m[2], m[3].length]),
    [
      [Code.onNextPart, 0, 65536],
      [Code.onNextPart, 0, 65536],
      [Code.onNextPart, 0, 65536],
      [Code.onNextLastPart, 0, 8192],
      [Code.onNextPart, 1, 65536],
      [Code.onNextPart, 1, 65536],
      [Code.onNextPart, 1, 65536],
      [Code.onNextLastPart, 1, 8192],
    ],
  );
  const joined = new Uint8Array(parts.slice(0, 4).flatMap((m) => Array.from(m[3])));
  assert.deepStrictEqual(joined, big);
  assert.deepStrictEqual(messages.at(-1), [Code.onComplete, 1]);
  for (const sent of ws.sent) assert.ok(sent.length <= 256 * 1024 + 16, `a WebSocket message of ${sent.length} bytes`);
});

test("dataToSendPieces cuts at message boundaries and never splits a message", () => {
  const conn = new Connection();
  conn.dataToSend();
  for (let i = 0; i < 5; i++) conn.subscribe("x".repeat(40), 1n);
  const pieces = conn.dataToSendPieces(100);
  assert.ok(pieces.length > 1);
  for (const piece of pieces) assert.ok(decodeMulti(piece).every((m) => m[0] === Code.subscribe));
  assert.equal(pieces.flatMap((p) => decodeMulti(p)).length, 5);
});

test("publish without encode: bytes as they are, strings as UTF-8, anything else fails the stream", async () => {
  const { session, ws } = await open();
  let closed = false;
  session.publish("mixed", function* () {
    try {
      yield "é";
      yield new Uint16Array([0x0102]);
      yield { not: "bytes" };
    } finally {
      closed = true;
    }
  });
  ws.take();
  ws.deliver(HELLO, [Code.subscribe, "mixed", 1, 10]);
  await settle();
  const messages = ws.take();
  assert.deepStrictEqual(messages.slice(0, 3), [
    [Code.subscribed, 1, 0],
    [Code.onNext, 1, new Uint8Array([0xc3, 0xa9])],
    [Code.onNext, 1, new Uint8Array(new Uint16Array([0x0102]).buffer)],
  ]);
  assert.equal(messages[3][0], Code.onError);
  assert.match(messages[3][2], /must be bytes or a string, not object/);
  assert.ok(closed, "the generator was closed (its finally ran)");
});
