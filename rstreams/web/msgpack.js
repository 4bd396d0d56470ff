// msgpack.js: the msgpack encoder/decoder of the browser client.
//
// Written here rather than taken from npm so the client loads with no build
// step and no CDN (docs/browser.md, "msgpack: written here, not a
// dependency"). It carries decoding limits and typed errors so the protocol
// can refuse oversized input while parsing, and bin fields decode as views,
// not copies.
//
// Public: encode, decode, decodeMulti, DEFAULT_MSGPACK_LIMITS (re-exported by
// rstreams.js). Reader, Writer and toBytes are exported only for the sibling
// modules: protocol.js parses messages with a Reader under its own limits
// (noFloats) and writes them with a Writer, and the session normalises
// received data with toBytes. rstreams.js does not re-export them; they are
// not part of the API.

import { MsgpackDecodeError, MsgpackEncodeError, MsgpackLimitError } from "./errors.js";

const UTF8_ENCODER = new TextEncoder();
const UTF8_DECODER = new TextDecoder("utf-8", { fatal: true });

const MAX_SAFE = BigInt(Number.MAX_SAFE_INTEGER);
const MIN_SAFE = BigInt(Number.MIN_SAFE_INTEGER);
const UINT64_MAX = (1n << 64n) - 1n;
const INT64_MIN = -(1n << 63n);

/**
 * Default decoding limits. They bound what a peer can make us allocate or
 * recurse into; each can be overridden per call.
 */
export const DEFAULT_MSGPACK_LIMITS = Object.freeze({
  maxDepth: 64, // nested arrays/maps
  maxStringBytes: 16 * 1024 * 1024,
  maxBinBytes: 64 * 1024 * 1024,
  maxArrayLength: 1024 * 1024,
  maxMapLength: 1024 * 1024,
});

/**
 * Encode a JS value as msgpack bytes.
 *
 * null/undefined → nil; booleans; safe integers and BigInts (−2^63 … 2^64−1)
 * → the smallest int; other numbers → float64; strings → str; Uint8Array,
 * other typed arrays/DataView and ArrayBuffer → bin; arrays → array; Map and
 * plain objects → map.
 * @throws {MsgpackEncodeError}
 */
export function encode(value, { maxDepth = DEFAULT_MSGPACK_LIMITS.maxDepth } = {}) {
  const writer = new Writer();
  writer.value(value, maxDepth);
  return writer.result();
}

export class Writer {
  constructor(initial = 256) {
    this.bytes = new Uint8Array(initial);
    this.view = new DataView(this.bytes.buffer);
    this.length = 0;
  }

  ensure(n) {
    const need = this.length + n;
    if (need <= this.bytes.length) return;
    let size = this.bytes.length * 2;
    while (size < need) size *= 2;
    const grown = new Uint8Array(size);
    grown.set(this.bytes.subarray(0, this.length));
    this.bytes = grown;
    this.view = new DataView(grown.buffer);
  }

  u8(b) {
    this.ensure(1);
    this.bytes[this.length++] = b;
  }

  u8u8(a, b) {
    this.ensure(2);
    this.bytes[this.length++] = a;
    this.bytes[this.length++] = b;
  }

  u8u16(a, b) {
    this.ensure(3);
    this.bytes[this.length] = a;
    this.view.setUint16(this.length + 1, b);
    this.length += 3;
  }

  u8u32(a, b) {
    this.ensure(5);
    this.bytes[this.length] = a;
    this.view.setUint32(this.length + 1, b);
    this.length += 5;
  }

  raw(data) {
    this.ensure(data.length);
    this.bytes.set(data, this.length);
    this.length += data.length;
  }

  result() {
    return this.bytes.slice(0, this.length);
  }

  value(value, depth) {
    switch (typeof value) {
      case "number":
        return Number.isSafeInteger(value) && !Object.is(value, -0) ? this.int(value) : this.float64(value);
      case "bigint":
        return this.bigint(value);
      case "string":
        return this.str(value);
      case "boolean":
        return this.u8(value ? 0xc3 : 0xc2);
      case "undefined":
        return this.u8(0xc0);
      case "object":
        if (value === null) return this.u8(0xc0);
        if (value instanceof Uint8Array) return this.bin(value);
        if (value instanceof ArrayBuffer) return this.bin(new Uint8Array(value));
        if (ArrayBuffer.isView(value)) return this.bin(new Uint8Array(value.buffer, value.byteOffset, value.byteLength));
        if (depth <= 0) throw new MsgpackEncodeError("nesting too deep to encode");
        if (Array.isArray(value)) {
          this.arrayHeader(value.length);
          for (const item of value) this.value(item, depth - 1);
          return;
        }
        if (value instanceof Map) {
          this.mapHeader(value.size);
          for (const [k, v] of value) {
            this.value(k, depth - 1);
            this.value(v, depth - 1);
          }
          return;
        }
        {
          const keys = Object.keys(value).filter((k) => value[k] !== undefined);
          this.mapHeader(keys.length);
          for (const k of keys) {
            this.str(k);
            this.value(value[k], depth - 1);
          }
        }
        return;
      default:
        throw new MsgpackEncodeError(`cannot encode a ${typeof value} as msgpack`);
    }
  }

  int(n) {
    if (n >= 0) {
      if (n < 0x80) return this.u8(n);
      if (n < 0x100) return this.u8u8(0xcc, n);
      if (n < 0x10000) return this.u8u16(0xcd, n);
      if (n < 0x100000000) return this.u8u32(0xce, n);
      return this.bigint(BigInt(n));
    }
    if (n >= -32) return this.u8(n & 0xff);
    if (n >= -0x80) return this.u8u8(0xd0, n & 0xff);
    if (n >= -0x8000) {
      this.ensure(3);
      this.bytes[this.length] = 0xd1;
      this.view.setInt16(this.length + 1, n);
      this.length += 3;
      return;
    }
    if (n >= -0x80000000) {
      this.ensure(5);
      this.bytes[this.length] = 0xd2;
      this.view.setInt32(this.length + 1, n);
      this.length += 5;
      return;
    }
    return this.bigint(BigInt(n));
  }

  bigint(n) {
    // Within int32/uint32 the small encodings apply; beyond, the 64-bit ones
    // (as Python's msgpack does: uint64 for n >= 2^32, int64 for n < -2^31).
    if (n >= -0x80000000n && n < 0x100000000n) return this.int(Number(n));
    if (n > UINT64_MAX || n < INT64_MIN) throw new MsgpackEncodeError(`integer ${n} does not fit in 64 bits`);
    this.ensure(9);
    if (n >= 0n) {
      this.bytes[this.length] = 0xcf;
      this.view.setBigUint64(this.length + 1, n);
    } else {
      this.bytes[this.length] = 0xd3;
      this.view.setBigInt64(this.length + 1, n);
    }
    this.length += 9;
  }

  float64(x) {
    this.ensure(9);
    this.bytes[this.length] = 0xcb;
    this.view.setFloat64(this.length + 1, x);
    this.length += 9;
  }

  str(s) {
    // Fast path for short ASCII strings (names, reasons); TextEncoder otherwise.
    if (s.length < 32) {
      let ascii = true;
      for (let i = 0; i < s.length; i++) {
        if (s.charCodeAt(i) > 0x7f) {
          ascii = false;
          break;
        }
      }
      if (ascii) {
        this.ensure(1 + s.length);
        this.bytes[this.length++] = 0xa0 | s.length;
        for (let i = 0; i < s.length; i++) this.bytes[this.length++] = s.charCodeAt(i);
        return;
      }
    }
    const data = UTF8_ENCODER.encode(s);
    const n = data.length;
    if (n < 32) this.u8(0xa0 | n);
    else if (n < 0x100) this.u8u8(0xd9, n);
    else if (n < 0x10000) this.u8u16(0xda, n);
    else if (n <= 0xffffffff) this.u8u32(0xdb, n);
    else throw new MsgpackEncodeError("string too long for msgpack");
    this.raw(data);
  }

  bin(data) {
    const n = data.length;
    if (n < 0x100) this.u8u8(0xc4, n);
    else if (n < 0x10000) this.u8u16(0xc5, n);
    else if (n <= 0xffffffff) this.u8u32(0xc6, n);
    else throw new MsgpackEncodeError("bin too long for msgpack");
    this.raw(data);
  }

  arrayHeader(n) {
    if (n < 16) this.u8(0x90 | n);
    else if (n < 0x10000) this.u8u16(0xdc, n);
    else if (n <= 0xffffffff) this.u8u32(0xdd, n);
    else throw new MsgpackEncodeError("array too long for msgpack");
  }

  mapHeader(n) {
    if (n < 16) this.u8(0x80 | n);
    else if (n < 0x10000) this.u8u16(0xde, n);
    else if (n <= 0xffffffff) this.u8u32(0xdf, n);
    else throw new MsgpackEncodeError("map too long for msgpack");
  }
}

/**
 * Decode exactly one msgpack value from `bytes` (trailing bytes are an error).
 *
 * ints → number, or BigInt beyond ±(2^53 − 1); float32/64 → number; str →
 * string; bin → Uint8Array (a view into `bytes`, not a copy); array → Array;
 * map → plain object when every key is a string, else Map. Ext types are
 * refused.
 * @throws {MsgpackDecodeError} bad, truncated or trailing bytes
 * @throws {MsgpackLimitError} a size or nesting limit was exceeded
 */
export function decode(bytes, limits = {}) {
  const reader = new Reader(toBytes(bytes), { ...DEFAULT_MSGPACK_LIMITS, ...limits });
  const value = reader.value(reader.limits.maxDepth);
  if (reader.pos !== reader.end) throw new MsgpackDecodeError("trailing bytes after the value", reader.pos);
  return value;
}

/**
 * Decode every msgpack value in `bytes`, back to back (how protocol messages
 * travel). Returns an array of values.
 */
export function decodeMulti(bytes, limits = {}) {
  const reader = new Reader(toBytes(bytes), { ...DEFAULT_MSGPACK_LIMITS, ...limits });
  const values = [];
  while (reader.pos < reader.end) values.push(reader.value(reader.limits.maxDepth));
  return values;
}

export function toBytes(bytes) {
  if (bytes instanceof Uint8Array) return bytes;
  if (bytes instanceof ArrayBuffer) return new Uint8Array(bytes);
  if (ArrayBuffer.isView(bytes)) return new Uint8Array(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  throw new TypeError("expected a Uint8Array, ArrayBuffer or typed array");
}

export class Reader {
  constructor(bytes, limits) {
    this.bytes = bytes;
    this.view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    this.pos = 0;
    this.end = bytes.length;
    this.limits = limits;
  }

  need(n) {
    if (this.end - this.pos < n) throw new MsgpackDecodeError("truncated msgpack data", this.pos);
  }

  u8() {
    this.need(1);
    return this.bytes[this.pos++];
  }

  u16() {
    this.need(2);
    const v = this.view.getUint16(this.pos);
    this.pos += 2;
    return v;
  }

  u32() {
    this.need(4);
    const v = this.view.getUint32(this.pos);
    this.pos += 4;
    return v;
  }

  take(n) {
    this.need(n);
    const out = this.bytes.subarray(this.pos, this.pos + n);
    this.pos += n;
    return out;
  }

  value(depth) {
    const start = this.pos;
    const b = this.u8();
    if (b < 0x80) return b;
    if (b >= 0xe0) return b - 0x100;
    if (b >= 0xa0 && b < 0xc0) return this.str(b & 0x1f, start);
    if (b >= 0x90 && b < 0xa0) return this.array(b & 0x0f, depth, start);
    if (b >= 0x80 && b < 0x90) return this.map(b & 0x0f, depth, start);
    const view = this.view;
    let v;
    switch (b) {
      case 0xc0:
        return null;
      case 0xc2:
        return false;
      case 0xc3:
        return true;
      case 0xc4:
        return this.bin(this.u8(), start);
      case 0xc5:
        return this.bin(this.u16(), start);
      case 0xc6:
        return this.bin(this.u32(), start);
      case 0xca:
        if (this.limits.noFloats) throw new MsgpackDecodeError("a float where none may be", start);
        this.need(4);
        v = view.getFloat32(this.pos);
        this.pos += 4;
        return v;
      case 0xcb:
        if (this.limits.noFloats) throw new MsgpackDecodeError("a float where none may be", start);
        this.need(8);
        v = view.getFloat64(this.pos);
        this.pos += 8;
        return v;
      case 0xcc:
        return this.u8();
      case 0xcd:
        return this.u16();
      case 0xce:
        return this.u32();
      case 0xcf:
        this.need(8);
        v = view.getBigUint64(this.pos);
        this.pos += 8;
        return v <= MAX_SAFE ? Number(v) : v;
      case 0xd0:
        this.need(1);
        return view.getInt8(this.pos++);
      case 0xd1:
        this.need(2);
        v = view.getInt16(this.pos);
        this.pos += 2;
        return v;
      case 0xd2:
        this.need(4);
        v = view.getInt32(this.pos);
        this.pos += 4;
        return v;
      case 0xd3:
        this.need(8);
        v = view.getBigInt64(this.pos);
        this.pos += 8;
        return v >= MIN_SAFE && v <= MAX_SAFE ? Number(v) : v;
      case 0xd9:
        return this.str(this.u8(), start);
      case 0xda:
        return this.str(this.u16(), start);
      case 0xdb:
        return this.str(this.u32(), start);
      case 0xdc:
        return this.array(this.u16(), depth, start);
      case 0xdd:
        return this.array(this.u32(), depth, start);
      case 0xde:
        return this.map(this.u16(), depth, start);
      case 0xdf:
        return this.map(this.u32(), depth, start);
      case 0xc1:
        throw new MsgpackDecodeError("byte 0xc1 is never used in msgpack", start);
      default: // 0xc7-0xc9, 0xd4-0xd8: ext types
        throw new MsgpackDecodeError(`msgpack ext types are not supported (type byte 0x${b.toString(16)})`, start);
    }
  }

  str(n, start) {
    if (n > this.limits.maxStringBytes) {
      throw new MsgpackLimitError(`string of ${n} bytes exceeds the limit of ${this.limits.maxStringBytes}`, start);
    }
    const data = this.take(n);
    if (n < 16) {
      // Short ASCII: skip TextDecoder's call overhead.
      let s = "";
      for (let i = 0; i < n; i++) {
        const c = data[i];
        if (c > 0x7f) return this.utf8(data, start);
        s += String.fromCharCode(c);
      }
      return s;
    }
    return this.utf8(data, start);
  }

  utf8(data, start) {
    try {
      return UTF8_DECODER.decode(data);
    } catch {
      throw new MsgpackDecodeError("invalid UTF-8 in a msgpack str", start);
    }
  }

  bin(n, start) {
    if (n > this.limits.maxBinBytes) {
      throw new MsgpackLimitError(`bin of ${n} bytes exceeds the limit of ${this.limits.maxBinBytes}`, start);
    }
    return this.take(n);
  }

  array(n, depth, start) {
    if (depth <= 0) throw new MsgpackLimitError("msgpack nesting too deep", start);
    if (n > this.limits.maxArrayLength) {
      throw new MsgpackLimitError(`array of ${n} items exceeds the limit of ${this.limits.maxArrayLength}`, start);
    }
    // Every item takes at least one byte: refuse impossible lengths before allocating.
    this.need(n);
    const out = new Array(n);
    for (let i = 0; i < n; i++) out[i] = this.value(depth - 1);
    return out;
  }

  map(n, depth, start) {
    if (depth <= 0) throw new MsgpackLimitError("msgpack nesting too deep", start);
    if (n > this.limits.maxMapLength) {
      throw new MsgpackLimitError(`map of ${n} entries exceeds the limit of ${this.limits.maxMapLength}`, start);
    }
    this.need(2 * n);
    const entries = new Array(n);
    let allStrings = true;
    for (let i = 0; i < n; i++) {
      const k = this.value(depth - 1);
      const v = this.value(depth - 1);
      if (typeof k !== "string") allStrings = false;
      entries[i] = [k, v];
    }
    if (!allStrings) return new Map(entries);
    const out = {};
    for (const [k, v] of entries) {
      // defineProperty: a "__proto__" key is data, not a prototype change.
      Object.defineProperty(out, k, { value: v, enumerable: true, writable: true, configurable: true });
    }
    return out;
  }
}
