// Random and mutated input: the decoder and the protocol state fail only
// with their own typed errors, never with a TypeError, RangeError or a hang.
import { test } from "node:test";
import assert from "node:assert/strict";

import { MsgpackDecodeError, RemoteProtocolError } from "../../rstreams/web/errors.js";
import { decode, encode } from "../../rstreams/web/msgpack.js";
import { Code, Connection, encodeMessage } from "../../rstreams/web/protocol.js";

// A small deterministic PRNG (mulberry32), so a failure can be replayed.
function prng(seed) {
  return () => {
    seed |= 0;
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function randomBytes(random, n) {
  const out = new Uint8Array(n);
  for (let i = 0; i < n; i++) out[i] = Math.floor(random() * 256);
  return out;
}

function mutate(random, bytes) {
  const out = Uint8Array.from(bytes);
  const edits = 1 + Math.floor(random() * 3);
  for (let e = 0; e < edits && out.length; e++) out[Math.floor(random() * out.length)] = Math.floor(random() * 256);
  return random() < 0.3 ? out.subarray(0, Math.floor(random() * out.length)) : out;
}

const VALID = [
  encodeMessage(Code.hello, [0, []]),
  encodeMessage(Code.subscribed, [1, 8]),
  encodeMessage(Code.onNextPacked, [1, 2, new Uint8Array(16)]),
  encodeMessage(Code.onNext, [1, new Uint8Array(8)]),
  encodeMessage(Code.onNextPart, [2, 0, new Uint8Array(3)]),
  encodeMessage(Code.onNextLastPart, [2, 0, new Uint8Array(3)]),
  encodeMessage(Code.subscribe, ["range?count=3", 5, 2]),
  encodeMessage(Code.request, [5, 3]),
  encodeMessage(Code.cancel, [5]),
  encodeMessage(Code.onError, [1, "boom"]),
  encodeMessage(Code.goodbye, ["bye"]),
];

test("decode: random bytes give a value or a MsgpackDecodeError", () => {
  const random = prng(1);
  for (let i = 0; i < 5000; i++) {
    const bytes = randomBytes(random, Math.floor(random() * 40));
    try {
      decode(bytes);
    } catch (err) {
      assert.ok(err instanceof MsgpackDecodeError, `${err.name}: ${err.message} for ${Array.from(bytes)}`);
    }
  }
});

test("decode: mutated encodings give a value or a MsgpackDecodeError", () => {
  const random = prng(2);
  const seeds = [encode([1, "two", new Uint8Array([3]), { four: 4.5 }, [2n ** 63n, -1, null, true]]), ...VALID];
  for (let i = 0; i < 5000; i++) {
    const bytes = mutate(random, seeds[i % seeds.length]);
    try {
      decode(bytes);
    } catch (err) {
      assert.ok(err instanceof MsgpackDecodeError, `${err.name}: ${err.message} for ${Array.from(bytes)}`);
    }
  }
});

test("Connection.receive: mutated message sequences give events or a RemoteProtocolError", () => {
  const random = prng(3);
  for (let i = 0; i < 3000; i++) {
    const conn = new Connection();
    conn.subscribe("range", 4n);
    conn.subscribe("blob", 4n);
    try {
      conn.receive(VALID[0]);
      for (let k = 0; k < 6; k++) {
        const message = VALID[1 + Math.floor(random() * (VALID.length - 1))];
        conn.receive(random() < 0.5 ? mutate(random, message) : message);
      }
    } catch (err) {
      assert.ok(err instanceof RemoteProtocolError, `${err.name}: ${err.message}`);
      assert.match(err.message, /^protocol error: /);
    }
  }
});
