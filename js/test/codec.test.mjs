// The msgpack codec (rstreams/web/msgpack.js) against Python's msgpack (shared vectors).
import { test } from "node:test";
import assert from "node:assert/strict";

import { decode, decodeMulti, encode } from "../../rstreams/web/msgpack.js";
import { MsgpackDecodeError, MsgpackEncodeError, MsgpackLimitError, RStreamsError } from "../../rstreams/web/errors.js";
import { fromHex, loadJson, toHex } from "../helpers.mjs";

const data = loadJson("tests/data/msgpack-vectors.json");

function vectorBytes(vector) {
  if (vector.hex !== undefined) return fromHex(vector.hex);
  const [head, unit, count] = vector.hex_repeat;
  const h = fromHex(head);
  const u = fromHex(unit);
  const out = new Uint8Array(h.length + u.length * count);
  out.set(h);
  for (let i = 0; i < count; i++) out.set(u, h.length + i * u.length);
  return out;
}

// The JS value a tagged vector value decodes to.
function untag(tagged) {
  const [kind, v] = Object.entries(tagged)[0];
  switch (kind) {
    case "nil":
      return null;
    case "bool":
    case "str":
      return v;
    case "int": {
      const big = BigInt(v);
      return big >= BigInt(Number.MIN_SAFE_INTEGER) && big <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(big) : big;
    }
    case "float":
    case "float32":
      return v === "nan" ? NaN : v === "inf" ? Infinity : v === "-inf" ? -Infinity : v;
    case "bin":
      return fromHex(v);
    case "array":
      return v.map(untag);
    case "repeat":
      return new Array(v[1]).fill(untag(v[0]));
    case "str_repeat":
      return v[0].repeat(v[1]);
    case "bin_repeat":
      return new Uint8Array(v[1]).fill(fromHex(v[0])[0]);
    case "map": {
      const entries = v.map(([k, x]) => [untag(k), untag(x)]);
      if (entries.every(([k]) => typeof k === "string")) {
        const out = {};
        for (const [k, x] of entries) Object.defineProperty(out, k, { value: x, enumerable: true, writable: true, configurable: true });
        return out;
      }
      return new Map(entries);
    }
    default:
      throw new Error(`unknown tag ${kind}`);
  }
}

test("the vector file has vectors and error cases", () => {
  assert.ok(data.vectors.length >= 60);
  assert.ok(data.errors.length >= 10);
});

for (const vector of data.vectors) {
  test(`decode: ${vector.name}`, () => {
    const decoded = decode(vectorBytes(vector));
    assert.deepStrictEqual(decoded, untag(vector.value));
  });
  if (vector.encode) {
    test(`encode: ${vector.name}`, () => {
      const value = untag(vector.value);
      assert.equal(toHex(encode(value)), toHex(vectorBytes(vector)));
    });
  }
}

for (const bad of data.errors) {
  test(`refuse: ${bad.name}`, () => {
    const expected = bad.error === "limit" ? MsgpackLimitError : MsgpackDecodeError;
    assert.throws(() => decode(fromHex(bad.hex), bad.limits ?? {}), (err) => {
      assert.ok(err instanceof expected, `${err.name}: ${err.message}`);
      assert.ok(err instanceof RStreamsError);
      if (bad.error === "decode") assert.ok(!(err instanceof MsgpackLimitError), `not a limit error: ${err.message}`);
      return true;
    });
  });
}

test("64-bit integers: BigInt beyond 2^53, numbers within", () => {
  assert.equal(decode(fromHex("cf001fffffffffffff")), 2 ** 53 - 1);
  assert.equal(decode(fromHex("cf0020000000000000")), 2n ** 53n);
  assert.equal(decode(fromHex("cfffffffffffffffff")), 2n ** 64n - 1n);
  assert.equal(decode(fromHex("d38000000000000000")), -(2n ** 63n));
  assert.equal(decode(fromHex("d3ffffffffffffffff")), -1);
  // BigInts within int32/uint32 take the small forms, as Python would write them.
  assert.equal(toHex(encode(5n)), "05");
  assert.equal(toHex(encode(-1n)), "ff");
  assert.equal(toHex(encode(2n ** 32n)), "cf0000000100000000");
  assert.throws(() => encode(2n ** 64n), MsgpackEncodeError);
  assert.throws(() => encode(-(2n ** 63n) - 1n), MsgpackEncodeError);
});

test("numbers that are not safe integers are float64; -0 stays a float", () => {
  assert.equal(toHex(encode(2 ** 60)), "cb43b0000000000000");
  assert.equal(toHex(encode(-0)), "cb8000000000000000");
  assert.ok(Object.is(decode(encode(-0)), -0));
});

test("bin decodes as a view, not a copy; typed arrays and ArrayBuffer encode as bin", () => {
  const bytes = fromHex("c403010203");
  const bin = decode(bytes);
  assert.equal(bin.buffer, bytes.buffer);
  assert.equal(toHex(encode(new Uint16Array([0x0102]).buffer)), "c4020201");
  assert.equal(toHex(encode(new DataView(new Uint8Array([9, 8]).buffer))), "c4020908");
});

test("objects encode as maps of their defined keys; Maps keep non-string keys", () => {
  assert.equal(toHex(encode({ a: 1, skip: undefined })), "81a16101");
  assert.deepStrictEqual(decode(encode(new Map([[1, "x"]]))), new Map([[1, "x"]]));
});

test("a __proto__ key is data, not a prototype", () => {
  const value = decode(fromHex("81a95f5f70726f746f5f5f01"));
  assert.equal(Object.getPrototypeOf(value), Object.prototype);
  assert.equal(Object.getOwnPropertyDescriptor(value, "__proto__").value, 1);
});

test("encoding refuses what msgpack cannot carry", () => {
  assert.throws(() => encode(Symbol("s")), MsgpackEncodeError);
  assert.throws(() => encode(() => 1), MsgpackEncodeError);
  const deep = [];
  let at = deep;
  for (let i = 0; i < 100; i++) at = at[0] = [];
  assert.throws(() => encode(deep), MsgpackEncodeError);
});

test("decodeMulti reads values back to back", () => {
  assert.deepStrictEqual(decodeMulti(fromHex("01a161c0")), [1, "a", null]);
  assert.throws(() => decodeMulti(fromHex("01a2")), MsgpackDecodeError);
});

test("errors carry the offset of the bad byte", () => {
  assert.throws(() => decode(fromHex("9201c1")), (err) => err.offset === 2);
});

test("round trip of a mixed value", () => {
  const value = [0, -1, 2 ** 40, 2n ** 63n - 1n, 1.25, "snowman ☃", new Uint8Array([0, 255]), [true, false, null], { k: [1, { n: "m" }] }];
  assert.deepStrictEqual(decode(encode(value)), value);
});
