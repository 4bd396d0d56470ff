// rstreams.js: the browser client of rstreams (wire profile v0 over WebSocket).
//
//   import { connect } from "/rstreams.js";
//   const session = await connect("ws://127.0.0.1:8000/");
//   for await (const x of session.subscribe("range?count=1000", { prefetch: 64 })) { ... }
//
// One dependency-free ES module: no build step, nothing Node-only. It holds
// three layers, top to bottom in this file:
//
//   1. msgpack: a small encoder/decoder (the wire format and the "msgpack"
//      element decoding), with size and nesting limits and typed errors.
//   2. The protocol state of one connection (class Connection): it takes the
//      bytes of a WebSocket message and returns events, and it queues the
//      bytes of the messages we send. It never touches a socket, which is
//      what lets js/test/ check it against byte vectors.
//   3. The session API over a WebSocket: Session, Subscription, publishing.
//
// Numbers: Ids and small ints arrive as JS numbers; an integer beyond 2^53
// arrives as a BigInt (so 2^63 - 1, "unbounded demand", is exact). Demand is
// kept as BigInt throughout, saturating at 2^63 - 1 as the profile says.
// docs/browser.md is the reference for everything exported here.

// ---------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------

/** Base class of every error this module raises. */
export class RStreamsError extends Error {
  constructor(message) {
    super(message);
    this.name = new.target.name;
  }
}

/** msgpack bytes that cannot be decoded (bad or truncated input). */
export class MsgpackDecodeError extends RStreamsError {
  constructor(message, offset) {
    super(offset === undefined ? message : `${message} (at byte ${offset})`);
    this.offset = offset;
  }
}

/** msgpack input within format but beyond a configured limit. */
export class MsgpackLimitError extends MsgpackDecodeError {}

/** A value that msgpack (as written here) cannot encode. */
export class MsgpackEncodeError extends RStreamsError {}

/** The protocol was broken; `.remote` says whether by the peer. */
export class ProtocolError extends RStreamsError {}
/** The peer broke the protocol (we said goodbye "protocol error: ..."). */
export class RemoteProtocolError extends ProtocolError {}
/** This program misused the API in a way the protocol forbids. */
export class LocalProtocolError extends ProtocolError {}

/** The session ended, so every stream on it ended: `.reason`, `.byPeer`. */
export class SessionClosed extends RStreamsError {
  constructor(reason, { byPeer }) {
    super(`session closed by the ${byPeer ? "peer" : "local side"}: ${reason}`);
    this.reason = reason;
    this.byPeer = byPeer;
  }
}

/** The connection was lost without a goodbye. */
export class SessionBroken extends SessionClosed {
  constructor(reason) {
    super(reason, { byPeer: true });
  }
}

/** One stream failed; the session and its other streams carry on. */
export class SubscriptionError extends RStreamsError {}

/** The peer's publisher ended the stream with onError: `.message` is its text. */
export class PublisherError extends SubscriptionError {
  constructor(message) {
    super(message);
  }
}

/** The peer has no publisher of that name: `.publisherName`. */
export class UnknownPublisher extends PublisherError {
  constructor(message, publisherName) {
    super(message);
    this.publisherName = publisherName;
  }
}

// ---------------------------------------------------------------------------
// 1. msgpack
// ---------------------------------------------------------------------------

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

class Writer {
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

function toBytes(bytes) {
  if (bytes instanceof Uint8Array) return bytes;
  if (bytes instanceof ArrayBuffer) return new Uint8Array(bytes);
  if (ArrayBuffer.isView(bytes)) return new Uint8Array(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  throw new TypeError("expected a Uint8Array, ArrayBuffer or typed array");
}

class Reader {
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

// ---------------------------------------------------------------------------
// 2. Protocol state of one connection (sans-I/O)
// ---------------------------------------------------------------------------

/** Message codes of wire profile v0. */
export const Code = Object.freeze({
  hello: 0,
  subscribe: 1,
  request: 2,
  cancel: 3,
  subscribed: 4,
  onNext: 5,
  onComplete: 6,
  onError: 7,
  onNextPacked: 8,
  onNextPart: 9,
  onNextLastPart: 10,
  goodbye: 11,
});

const CODE_NAMES = Object.fromEntries(Object.entries(Code).map(([k, v]) => [v, k]));

/** 2^63 − 1: cumulative demand saturates here and means "unbounded". */
export const UNBOUNDED = (1n << 63n) - 1n;
export const PROTOCOL_VERSION = 0;
export const SUBPROTOCOL = "rstreams.v0";

/** What we accept from a peer (the same defaults as rstreams.ProtocolLimits). */
export const DEFAULT_PROTOCOL_LIMITS = Object.freeze({
  maxMessageBytes: 16 * 1024 * 1024,
  maxElementBytes: 64 * 1024 * 1024, // a joined split element
  maxStringBytes: 64 * 1024,
  maxExtensions: 64,
  splitThreshold: 64 * 1024, // elements we publish above this go out in parts of this size
  maxWebSocketMessage: 256 * 1024, // we cut what we send into WebSocket messages of about this size
  rememberedIds: 65536, // the peer's finished Ids kept to recognise a late request/cancel
});

/** Encode one protocol message: `encodeMessage(Code.request, [1, 5n])`. */
export function encodeMessage(code, fields) {
  const writer = new Writer(16);
  writer.arrayHeader(fields.length + 1);
  writer.u8(code);
  for (const f of fields) writer.value(f, 4);
  return writer.result();
}

// A set that forgets its oldest members beyond `limit`.
class BoundedIdSet {
  constructor(limit) {
    this.limit = limit;
    this.set = new Set();
  }
  add(id) {
    this.set.add(id);
    if (this.set.size > this.limit) this.set.delete(this.set.values().next().value);
  }
  has(id) {
    return this.set.has(id);
  }
}

const isId = (x) => (typeof x === "number" && Number.isInteger(x) && x >= 0) || (typeof x === "bigint" && x >= 0n && x <= UNBOUNDED);
const isInt = (x) => (typeof x === "number" && Number.isInteger(x)) || typeof x === "bigint";

// Field types per code, for validation: "id", "int", "str", "bin", "ints" (hello's list).
// The second number is how many leading fields are required (trailing ones have defaults).
const SCHEMA = {
  [Code.hello]: [["int", "ints"], 2],
  [Code.subscribe]: [["str", "id", "int"], 2],
  [Code.request]: [["id", "int"], 2],
  [Code.cancel]: [["id"], 1],
  [Code.subscribed]: [["id", "int"], 1],
  [Code.onNext]: [["id", "bin"], 2],
  [Code.onComplete]: [["id"], 1],
  [Code.onError]: [["id", "str"], 2],
  [Code.onNextPacked]: [["id", "int", "bin"], 3],
  [Code.onNextPart]: [["id", "id", "bin"], 3],
  [Code.onNextLastPart]: [["id", "id", "bin"], 3],
  [Code.goodbye]: [["str"], 1],
};

const CHECKS = {
  id: isId,
  int: isInt,
  str: (x) => typeof x === "string",
  bin: (x) => x instanceof Uint8Array,
  ints: (x) => Array.isArray(x) && x.every(isInt),
};

/** Subscription states inside the protocol state (our subscriptions). */
const SubState = Object.freeze({ OPENING: "opening", OPEN: "open" });

/**
 * The protocol state of one connection, without I/O.
 *
 * Feed it each received WebSocket message with `receive(bytes)`; it returns
 * the events (plain objects with a `type`) for the session to act on, or
 * throws RemoteProtocolError, after which the session says goodbye with
 * `protocol error: ...`. Messages we send are queued by the `send*` methods
 * and taken with `dataToSend()`, so that several go out in one WebSocket
 * message.
 *
 * It enforces the profile's rules on what arrives: hello first (goodbye
 * allowed), demand never overrun, elements only after subscribed, split
 * parts not interleaved within a stream and joined within limits, terminal
 * signals exclusive, late messages for cancelled Ids dropped, unknown Ids
 * refused.
 *
 * How it works. The connection is waiting for the peer's hello, then open,
 * then over once either goodbye is seen (ours: `closed`, nothing more is
 * sent; the peer's: `closedByPeer`, nothing more is read). Each of our
 * subscriptions moves through the states below on what the peer sends
 * (anything not listed is a protocol error):
 *
 *   state     message                    next      event
 *   opening   subscribed                 open      subscribed
 *   opening   onError                    (gone)    error (refused)
 *   open      onNext, onNextPacked       open      elements (demand taken)
 *   open      onNextPart                 in part   -
 *   in part   onNextPart (same element)  in part   -
 *   in part   onNextLastPart (same)      open      elements (demand taken once)
 *   open      onComplete                 (gone)    complete
 *   open, in part   onError              (gone)    error
 *   (gone, Id below our counter)  anything   -     dropped: it was in flight
 *
 * ("in part" is `open` with `part` set.) The peer's subscriptions to our
 * publishers are simpler: subscribe opens one (its Id must not be open),
 * request adds demand (n <= 0 ends it with onError, rule 3.9), cancel or
 * our onComplete/onError ends it, and a request or cancel for an Id we
 * ended recently is ignored, for one never seen is a protocol error.
 */
export class Connection {
  constructor(limits = {}) {
    this.limits = { ...DEFAULT_PROTOCOL_LIMITS, ...limits };
    this.decodeLimits = {
      maxDepth: 2,
      maxStringBytes: this.limits.maxStringBytes,
      maxBinBytes: this.limits.maxMessageBytes,
      maxArrayLength: Math.max(5, this.limits.maxExtensions),
      maxMapLength: 0,
      // No message has a float field; refusing them while parsing keeps a
      // float 1.0 from passing as the int 1 (JS numbers cannot tell them apart).
      noFloats: true,
    };
    this.peerHello = null; // {version, extensions} once received
    this.closed = false; // our goodbye is queued: nothing more is sent
    this.closedByPeer = false; // the peer's goodbye arrived (or the handshake failed)
    this.outbound = [];
    this.outboundBytes = 0;
    this.nextId = 1;
    // Our subscriptions, by our Id: {state, outstanding (BigInt), elementSize, part: {element, chunks, size} | null}
    this.subs = new Map();
    // Peer's subscriptions to our publishers, by the peer's Id: {outstanding (BigInt)}
    this.pubs = new Map();
    this.finishedPubs = new BoundedIdSet(this.limits.rememberedIds);
    this.queue(Code.hello, [PROTOCOL_VERSION, []]);
  }

  // ---- outbound ----

  queue(code, fields) {
    const bytes = encodeMessage(code, fields);
    this.outbound.push(bytes);
    this.outboundBytes += bytes.length;
  }

  /** Everything queued since the last call, as one Uint8Array (empty if nothing). */
  dataToSend() {
    const parts = this.outbound;
    this.outbound = [];
    this.outboundBytes = 0;
    return concat(parts, parts.reduce((n, p) => n + p.length, 0));
  }

  /**
   * Everything queued since the last call, cut at message boundaries into
   * pieces of at most `maxBytes` (a single larger message goes alone): one
   * piece per WebSocket message, so that no WebSocket message grows with
   * how much was queued (the server bounds what it accepts in one).
   */
  dataToSendPieces(maxBytes = this.limits.maxWebSocketMessage) {
    const pieces = [];
    let run = [];
    let size = 0;
    for (const p of this.outbound) {
      if (size > 0 && size + p.length > maxBytes) {
        pieces.push(concat(run, size));
        run = [];
        size = 0;
      }
      run.push(p);
      size += p.length;
    }
    if (size > 0) pieces.push(concat(run, size));
    this.outbound = [];
    this.outboundBytes = 0;
    return pieces;
  }

  get hasDataToSend() {
    return this.outbound.length > 0;
  }

  /** Open a subscription; returns its Id (a counter from 1 that never goes back). */
  subscribe(name, initialDemand = 0n) {
    this.checkOpen();
    const id = this.nextId++;
    const demand = saturate(BigInt(initialDemand));
    this.subs.set(id, { state: SubState.OPENING, outstanding: demand, elementSize: 0, part: null });
    this.queue(Code.subscribe, [name, id, demand]);
    return id;
  }

  /** request(n) for our subscription `id` (n > 0; adds up, saturating). */
  request(id, n) {
    n = BigInt(n);
    if (n <= 0n) throw new RangeError(`request(n) needs n > 0 (rule 3.9), got ${n}`);
    const sub = this.subs.get(id);
    if (!sub || this.closed) return; // ended: a no-op (RS 3.6)
    sub.outstanding = saturate(sub.outstanding + n);
    this.queue(Code.request, [id, n >= UNBOUNDED ? UNBOUNDED : n]);
  }

  /** Cancel our subscription `id`; late messages for it are then dropped. */
  cancel(id) {
    if (!this.subs.has(id) || this.closed) return;
    this.subs.delete(id);
    this.queue(Code.cancel, [id]);
  }

  /** Outstanding demand of our subscription `id` (BigInt; UNBOUNDED if unbounded). */
  outstandingDemand(id) {
    const sub = this.subs.get(id);
    return sub ? sub.outstanding : 0n;
  }

  // Publishing side: answers to the peer's subscriptions.

  sendSubscribed(peerId, elementSize = 0) {
    if (!this.pubs.has(peerId) || this.closed) return;
    this.queue(Code.subscribed, [peerId, elementSize]);
  }

  /** Demand the peer gave publication `peerId` and we have not used (BigInt). */
  publicationDemand(peerId) {
    const pub = this.pubs.get(peerId);
    return pub ? pub.outstanding : 0n;
  }

  /**
   * Send one element to the peer's subscription `peerId`: onNext, or above
   * splitThreshold onNextPart… onNextLastPart (element Ids per stream from
   * 0), so a large element does not hold up other streams' messages.
   * @throws {LocalProtocolError} without demand (never more than requested)
   */
  sendOnNext(peerId, element) {
    const pub = this.pubs.get(peerId);
    if (!pub || this.closed) return false;
    if (pub.outstanding < UNBOUNDED) {
      if (pub.outstanding <= 0n) throw new LocalProtocolError("onNext without demand (never more than requested)");
      pub.outstanding -= 1n;
    }
    const threshold = this.limits.splitThreshold;
    if (element.length <= threshold) {
      this.queue(Code.onNext, [peerId, element]);
      return true;
    }
    const elementId = pub.nextElement++;
    for (let at = 0; at < element.length; at += threshold) {
      const last = at + threshold >= element.length;
      this.queue(last ? Code.onNextLastPart : Code.onNextPart, [peerId, elementId, element.subarray(at, at + threshold)]);
    }
    return true;
  }

  sendOnComplete(peerId) {
    if (!this.pubs.has(peerId) || this.closed) return;
    this.finishPub(peerId);
    this.queue(Code.onComplete, [peerId]);
  }

  sendOnError(peerId, message) {
    if (!this.pubs.has(peerId) || this.closed) return;
    this.finishPub(peerId);
    this.queue(Code.onError, [peerId, truncateString(String(message), 1000)]);
  }

  finishPub(peerId) {
    this.pubs.delete(peerId);
    this.finishedPubs.add(peerId);
  }

  /** Queue goodbye (once); afterwards nothing else is sent. */
  sendGoodbye(reason) {
    if (this.closed) return;
    this.queue(Code.goodbye, [truncateString(reason, 1000)]);
    this.closed = true;
  }

  checkOpen() {
    if (this.closed) throw new LocalProtocolError("the session is closed");
  }

  // ---- inbound ----

  /**
   * Take the bytes of one WebSocket message (one or more whole protocol
   * messages); return the events they make.
   * @throws {RemoteProtocolError}
   */
  receive(bytes) {
    if (this.closedByPeer) return []; // nothing follows the peer's goodbye
    const reader = new Reader(bytes, this.decodeLimits);
    const events = [];
    while (reader.pos < reader.end) {
      const start = reader.pos;
      let message;
      try {
        message = reader.value(2);
      } catch (err) {
        if (err instanceof MsgpackDecodeError) throw new RemoteProtocolError(`protocol error: ${err.message}`);
        throw err;
      }
      if (reader.pos - start > this.limits.maxMessageBytes) {
        throw new RemoteProtocolError(`protocol error: a message of ${reader.pos - start} bytes exceeds the limit`);
      }
      this.handle(message, events);
      if (this.closedByPeer) break;
    }
    return events;
  }

  handle(message, events) {
    if (!Array.isArray(message) || message.length === 0) fail("a message must be a non-empty msgpack array");
    const code = message[0];
    const schema = SCHEMA[code];
    if (schema === undefined) fail(`unknown message code ${String(code)}`);
    const [types, required] = schema;
    const n = message.length - 1;
    if (n < required || n > types.length) fail(`${CODE_NAMES[code]} has ${n} fields`);
    for (let i = 0; i < n; i++) {
      if (!CHECKS[types[i]](message[i + 1])) fail(`${CODE_NAMES[code]} field ${i + 1} is not a valid ${types[i]}`);
    }
    if (this.peerHello === null) {
      if (code === Code.hello) {
        const version = message[1];
        this.peerHello = { version, extensions: message[2] };
        if (version !== PROTOCOL_VERSION) {
          const reason = `unsupported protocol version ${version}: this peer speaks version ${PROTOCOL_VERSION}`;
          this.sendGoodbye(reason);
          this.closedByPeer = true;
          events.push({ type: "handshakeFailed", reason });
        }
        return;
      }
      if (code !== Code.goodbye) fail(`the first message must be hello, got ${CODE_NAMES[code]}`);
    }
    switch (code) {
      case Code.hello:
        return fail("a second hello");
      case Code.goodbye:
        this.closedByPeer = true;
        return events.push({ type: "goodbye", reason: message[1] });
      case Code.subscribe:
        return this.onSubscribe(message, events);
      case Code.request:
        return this.onRequest(message, events);
      case Code.cancel:
        return this.onCancel(message, events);
      default:
        return this.onPublisherMessage(code, message, events);
    }
  }

  onSubscribe([, name, peerId, initial = 0], events) {
    if (this.pubs.has(peerId)) fail(`subscribe reuses the open Id ${peerId}`);
    initial = BigInt(initial);
    this.pubs.set(peerId, { outstanding: 0n, nextElement: 0 });
    if (initial < 0n) {
      this.sendOnError(peerId, `initial demand must not be negative (rule 3.9), got ${initial}`);
      return;
    }
    this.pubs.get(peerId).outstanding = saturate(initial);
    events.push({ type: "subscribe", id: peerId, name });
  }

  onRequest([, peerId, n], events) {
    const pub = this.pubs.get(peerId);
    if (!pub) {
      if (this.finishedPubs.has(peerId)) return; // crossed our onComplete/onError
      fail(`request for unknown subscriber Id ${peerId}`);
    }
    n = BigInt(n);
    if (n <= 0n) {
      this.sendOnError(peerId, `request(n) needs n > 0 (rule 3.9), got ${n}`);
      events.push({ type: "cancel", id: peerId, reason: "non-positive request" });
      return;
    }
    pub.outstanding = saturate(pub.outstanding + n);
    events.push({ type: "request", id: peerId, n });
  }

  onCancel([, peerId], events) {
    if (!this.pubs.has(peerId)) {
      if (this.finishedPubs.has(peerId)) return;
      fail(`cancel for unknown subscriber Id ${peerId}`);
    }
    this.finishPub(peerId);
    events.push({ type: "cancel", id: peerId });
  }

  onPublisherMessage(code, message, events) {
    const id = message[1];
    const sub = this.subs.get(id);
    if (!sub) {
      // Our Ids come from a counter that never goes back, so an Id below it
      // that is not open was cancelled or finished: the message was in
      // flight and is dropped (rule 6). Exact, however long ago it was.
      if (typeof id === "number" && id < this.nextId) return;
      fail(`${CODE_NAMES[code]} for unknown subscriber Id ${id}`);
    }
    if (sub.state === SubState.OPENING) {
      if (code === Code.subscribed) {
        const size = message.length > 2 ? message[2] : 0;
        if (typeof size !== "number" || size < 0) fail(`subscribed with invalid elementSize ${size}`);
        sub.state = SubState.OPEN;
        sub.elementSize = size;
        return events.push({ type: "subscribed", id, elementSize: size });
      }
      if (code === Code.onError) {
        this.finishSub(id);
        return events.push({ type: "error", id, message: message[2], refused: true });
      }
      fail(`${CODE_NAMES[code]} before subscribed`);
    }
    if (sub.part !== null && code !== Code.onNextPart && code !== Code.onNextLastPart && code !== Code.onError) {
      fail(`${CODE_NAMES[code]} in the middle of a split element`);
    }
    switch (code) {
      case Code.subscribed:
        return fail("a second subscribed");
      case Code.onNext: {
        const element = message[2];
        this.take(sub, 1n, "onNext");
        if (sub.elementSize && element.length !== sub.elementSize) {
          fail(`an element of ${element.length} bytes on a stream of elementSize ${sub.elementSize}`);
        }
        return events.push({ type: "elements", id, items: [element], packed: null, count: 1, bytes: element.length });
      }
      case Code.onNextPacked: {
        const count = message[2];
        const data = message[3];
        if (!sub.elementSize) fail("onNextPacked on a stream without elementSize");
        if (typeof count !== "number" || count < 0) fail(`onNextPacked with invalid count ${count}`);
        if (data.length !== count * sub.elementSize) {
          fail(`onNextPacked of ${data.length} bytes is not ${count} × ${sub.elementSize}`);
        }
        if (count === 0) return;
        this.take(sub, BigInt(count), "onNextPacked");
        return events.push({ type: "elements", id, items: null, packed: data, size: sub.elementSize, count, bytes: data.length });
      }
      case Code.onNextPart:
      case Code.onNextLastPart: {
        const [, , element, data] = message;
        if (sub.part === null) sub.part = { element, chunks: [], size: 0 };
        else if (sub.part.element !== element) fail(`a part of element ${element} inside element ${sub.part.element}`);
        const part = sub.part;
        part.size += data.length;
        if (part.size > this.limits.maxElementBytes) {
          fail(`a split element exceeds the limit of ${this.limits.maxElementBytes} bytes`);
        }
        part.chunks.push(data);
        if (code === Code.onNextPart) return;
        sub.part = null;
        this.take(sub, 1n, "a split element");
        const joined = concat(part.chunks, part.size);
        if (sub.elementSize && joined.length !== sub.elementSize) {
          fail(`an element of ${joined.length} bytes on a stream of elementSize ${sub.elementSize}`);
        }
        return events.push({ type: "elements", id, items: [joined], packed: null, count: 1, bytes: joined.length });
      }
      case Code.onComplete:
        this.finishSub(id);
        return events.push({ type: "complete", id });
      case Code.onError:
        this.finishSub(id);
        return events.push({ type: "error", id, message: message[2], refused: false });
      default:
        return fail(`unexpected ${CODE_NAMES[code]}`);
    }
  }

  take(sub, n, what) {
    if (sub.outstanding >= UNBOUNDED) return;
    if (n > sub.outstanding) fail(`${what} of ${n} exceeds the outstanding demand ${sub.outstanding}`);
    sub.outstanding -= n;
  }

  finishSub(id) {
    this.subs.delete(id);
  }
}

function fail(what) {
  throw new RemoteProtocolError(`protocol error: ${what}`);
}

function saturate(n) {
  return n >= UNBOUNDED ? UNBOUNDED : n;
}

function truncateString(s, max) {
  return s.length > max ? s.slice(0, max - 1) + "…" : s;
}

function concat(chunks, size) {
  if (chunks.length === 1) return chunks[0];
  const out = new Uint8Array(size);
  let at = 0;
  for (const c of chunks) {
    out.set(c, at);
    at += c.length;
  }
  return out;
}

// ---------------------------------------------------------------------------
// Demand window: the automatic top-up rule
// ---------------------------------------------------------------------------

/**
 * The subscriber's automatic demand, as in rstreams.protocol.DemandWindow:
 * request `size` up front; once at least half the window has been consumed,
 * request exactly what was consumed. So the total requested never exceeds
 * consumed + size, and the outstanding demand never drops below half the
 * window while the consumer keeps up.
 */
export class DemandWindow {
  constructor(size) {
    if (!Number.isInteger(size) || size <= 0) throw new RangeError(`window size must be a positive integer, got ${size}`);
    this.size = size;
    this.threshold = Math.max(1, Math.floor(size / 2));
    this.pending = 0;
  }
  get initial() {
    return this.size;
  }
  /** Record `n` consumed elements; returns how many to request now (often 0). */
  consumed(n) {
    this.pending += n;
    if (this.pending < this.threshold) return 0;
    const more = this.pending;
    this.pending = 0;
    return more;
  }
}

// ---------------------------------------------------------------------------
// 3. Session, Subscription, publishing
// ---------------------------------------------------------------------------

const DECODERS = {
  raw: null,
  bytes: null,
  msgpack: (bytes) => decode(bytes),
  json: (bytes) => JSON.parse(UTF8_DECODER.decode(bytes)),
  text: (bytes) => UTF8_DECODER.decode(bytes),
};

const ENCODERS = {
  raw: null,
  bytes: null,
  msgpack: (value) => encode(value),
  json: (value) => UTF8_ENCODER.encode(JSON.stringify(value)),
  text: (value) => UTF8_ENCODER.encode(String(value)),
};

function resolveCodec(table, option, what) {
  if (option === undefined || option === null) return null;
  if (typeof option === "function") return option;
  if (Object.prototype.hasOwnProperty.call(table, option)) return table[option];
  throw new TypeError(`unknown ${what} ${JSON.stringify(option)}: use ${Object.keys(table).join(", ")} or a function`);
}

/** How long close() waits for the peer's goodbye before closing anyway (ms). */
export const GOODBYE_TIMEOUT_MS = 2000;
/** A publisher pauses while the WebSocket holds more than this many unsent bytes. */
export const SEND_HIGH_WATER = 4 * 1024 * 1024;
/** Rates (elements/s, bytes/s) are measured over about this window (ms). */
export const RATE_WINDOW_MS = 1000;

const now = () => (typeof performance !== "undefined" ? performance.now() : Date.now());

/**
 * Open a session to an rstreams server over WebSocket.
 *
 * Resolves once the WebSocket is open (the hello is sent at once; the
 * handshake is loose, so subscribing right away is fine).
 *
 * @param {string} url `ws://host:port/` or `wss://...`
 * @param {object} [options]
 * @param {Function} [options.WebSocket] a WebSocket constructor (default: globalThis.WebSocket)
 * @param {object} [options.limits] protocol limits (see DEFAULT_PROTOCOL_LIMITS)
 * @param {number} [options.goodbyeTimeout] ms close() waits for the peer's goodbye
 * @returns {Promise<Session>}
 * @throws {SessionBroken} the connection could not be opened
 */
export function connect(url, options = {}) {
  const WS = options.WebSocket ?? globalThis.WebSocket;
  if (typeof WS !== "function") throw new TypeError("no WebSocket available: pass options.WebSocket");
  return new Promise((resolve, reject) => {
    let ws;
    try {
      ws = new WS(url, [SUBPROTOCOL]);
    } catch (err) {
      reject(new SessionBroken(`cannot open ${url}: ${err.message}`));
      return;
    }
    ws.binaryType = "arraybuffer";
    const session = new Session(ws, url, options);
    session._opened.then(
      () => resolve(session),
      (err) => reject(err),
    );
  });
}

/**
 * One connection to a peer. Create it with connect(). Subscribe to the
 * peer's publishers with subscribe(), offer publishers to the peer with
 * publish(), end it with close().
 */
export class Session {
  constructor(ws, url, options = {}) {
    this.url = url;
    this._ws = ws;
    this._conn = new Connection(options.limits);
    this._goodbyeTimeout = options.goodbyeTimeout ?? GOODBYE_TIMEOUT_MS;
    this._subscriptions = new Map(); // our Id → Subscription
    this._publishers = new Map(); // path → handler entry
    this._publications = new Map(); // peer's Id → Publication
    this._flushScheduled = false;
    this._open = false;
    this._ended = null; // SessionClosed once the session is over
    this._peerGoodbye = null;
    this._onPeerGoodbye = null;
    this._closing = null;
    this._sentBytes = 0;
    this._receivedBytes = 0;
    let resolveClosed;
    /** Resolves with the SessionClosed that ended the session (never rejects). */
    this.closed = new Promise((resolve) => (resolveClosed = resolve));
    this._resolveClosed = resolveClosed;
    this._opened = new Promise((resolve, reject) => {
      ws.onopen = () => {
        this._open = true;
        this._flush();
        resolve();
      };
      ws.onerror = () => {
        if (!this._open) reject(new SessionBroken(`cannot connect to ${url}`));
      };
      ws.onclose = (event) => {
        if (!this._open) reject(new SessionBroken(`cannot connect to ${url} (close code ${event?.code})`));
        this._onTransportClosed(event);
      };
      ws.onmessage = (event) => this._onMessage(event.data);
    });
    this._opened.catch(() => {});
    this._scheduleFlush(); // the hello
  }

  // ---- transport ----

  _scheduleFlush() {
    if (this._flushScheduled) return;
    this._flushScheduled = true;
    // One WebSocket message for everything queued in this turn of the event loop.
    queueMicrotask(() => {
      this._flushScheduled = false;
      this._flush();
    });
  }

  _flush() {
    if (!this._open || !this._conn.hasDataToSend) return;
    if (this._ws.readyState !== 1) return;
    for (const data of this._conn.dataToSendPieces()) {
      this._sentBytes += data.length;
      this._ws.send(data);
    }
  }

  _onMessage(data) {
    // After our goodbye we still read, but only to see the peer's goodbye.
    if (this._ended && !(this._closing && this._peerGoodbye === null)) return;
    if (typeof data === "string") {
      this._protocolError("protocol error: a text WebSocket message");
      return;
    }
    const bytes = data instanceof ArrayBuffer ? new Uint8Array(data) : toBytes(data);
    this._receivedBytes += bytes.length;
    let events;
    try {
      events = this._conn.receive(bytes);
    } catch (err) {
      if (err instanceof RemoteProtocolError) {
        this._protocolError(err.message);
        return;
      }
      throw err;
    }
    for (const event of events) this._dispatch(event);
    this._scheduleFlush();
  }

  _dispatch(event) {
    if (this._ended && event.type !== "goodbye") return; // every stream has ended
    switch (event.type) {
      case "subscribed":
        return this._subscriptions.get(event.id)?._onSubscribed(event.elementSize);
      case "elements":
        return this._subscriptions.get(event.id)?._onElements(event);
      case "complete": {
        const sub = this._subscriptions.get(event.id);
        this._subscriptions.delete(event.id);
        return sub?._onEnd(null);
      }
      case "error": {
        const sub = this._subscriptions.get(event.id);
        this._subscriptions.delete(event.id);
        if (!sub) return;
        const prefix = "no such publisher: ";
        const error =
          event.refused && event.message.startsWith(prefix)
            ? new UnknownPublisher(event.message, event.message.slice(prefix.length))
            : new PublisherError(event.message);
        return sub._onEnd(error);
      }
      case "subscribe":
        return this._startPublication(event.id, event.name);
      case "request":
        return this._publications.get(event.id)?._wake();
      case "cancel": {
        const pub = this._publications.get(event.id);
        this._publications.delete(event.id);
        return pub?._stop();
      }
      case "goodbye":
        return this._onGoodbye(event.reason);
      case "handshakeFailed":
        this._flush();
        this._end(new SessionClosed(event.reason, { byPeer: true }));
        return this._closeSocket(1002);
    }
  }

  _protocolError(reason) {
    this._conn.sendGoodbye(reason);
    this._flush();
    this._end(new SessionClosed(reason, { byPeer: true }));
    this._closeSocket(1002);
  }

  _onGoodbye(reason) {
    if (this._closing) {
      // Our goodbye was answered.
      this._peerGoodbye = reason;
      this._onPeerGoodbye?.();
      return;
    }
    this._conn.sendGoodbye("goodbye");
    this._flush();
    this._end(new SessionClosed(reason, { byPeer: true }));
    this._closeSocket(1000);
  }

  _onTransportClosed(event) {
    this._open = false;
    if (this._closing) this._onPeerGoodbye?.();
    const code = event?.code;
    this._end(new SessionBroken(`the connection was lost without goodbye${code ? ` (WebSocket close code ${code})` : ""}`));
  }

  _closeSocket(code) {
    // Let the queued goodbye go first: close() after send() keeps the order.
    try {
      this._ws.close(code);
    } catch {
      this._ws.close();
    }
  }

  // Ends every stream with `error` (first cause wins).
  _end(error) {
    if (this._ended) return;
    this._ended = error;
    const subs = [...this._subscriptions.values()];
    this._subscriptions.clear();
    for (const sub of subs) sub._onEnd(error);
    const pubs = [...this._publications.values()];
    this._publications.clear();
    for (const pub of pubs) pub._stop();
    this._resolveClosed(error);
  }

  // ---- public API ----

  /**
   * Subscribe to the peer's publisher `name` (e.g. "range?count=100").
   *
   * Returns the Subscription at once (not a Promise): iterate it with
   * `for await`. Breaking out of the loop cancels.
   *
   * @param {string} name
   * @param {object} [options]
   * @param {number} [options.prefetch=32] elements requested ahead of the
   *   consumer; 0 means manual demand with `request(n)`
   * @param {"msgpack"|"json"|"text"|"raw"|Function} [options.decode] how to
   *   turn each element's bytes into a value (default: the Uint8Array itself)
   * @returns {Subscription}
   * @throws {SessionClosed} the session has ended
   */
  subscribe(name, options = {}) {
    if (typeof name !== "string") throw new TypeError("a publisher name is a string");
    if (this._ended) throw this._ended;
    const prefetch = options.prefetch ?? 32;
    if (!Number.isInteger(prefetch) || prefetch < 0) throw new RangeError(`prefetch must be an integer >= 0, got ${prefetch}`);
    const sub = new Subscription(this, name, prefetch, resolveCodec(DECODERS, options.decode, "decode"));
    sub.id = this._conn.subscribe(name, BigInt(prefetch));
    this._subscriptions.set(sub.id, sub);
    this._scheduleFlush();
    return sub;
  }

  /**
   * Offer a publisher the peer can subscribe to, under `name` (a path
   * without a query; the peer's query is handed over in `request.params`).
   *
   * `source(request)` is called once per subscription and returns an async
   * iterable (an `async function*` is the natural shape) or a sync iterable.
   * It is advanced only while the subscriber has demand, so it never runs
   * ahead of what was requested. Returning completes the stream; throwing
   * sends onError with the error's message; a cancel from the peer (or the
   * session ending) calls the iterator's return() and aborts
   * `request.signal`.
   *
   * `request` has: name (as the peer sent it), path, params (URLSearchParams),
   * signal (AbortSignal), demand() (current outstanding demand, BigInt).
   *
   * @param {string} name
   * @param {Function} source
   * @param {object} [options]
   * @param {"msgpack"|"json"|"text"|"raw"|Function} [options.encode] how to
   *   turn each yielded value into bytes (default: bytes as they are, a
   *   string as UTF-8)
   * @param {number} [options.elementSize=0] declare fixed-size elements
   * @returns {{name: string, unpublish: Function}}
   */
  publish(name, source, options = {}) {
    if (typeof source !== "function") throw new TypeError("publish(name, source): source is a function returning an (async) iterable");
    const path = name.split("?")[0];
    if (this._publishers.has(path)) throw new Error(`a publisher named ${path} is already published`);
    const entry = { source, encode: resolveCodec(ENCODERS, options.encode, "encode"), elementSize: options.elementSize ?? 0 };
    this._publishers.set(path, entry);
    return {
      name: path,
      unpublish: () => {
        if (this._publishers.get(path) === entry) this._publishers.delete(path);
      },
    };
  }

  _startPublication(peerId, name) {
    const path = name.split("?")[0];
    const entry = this._publishers.get(path);
    if (!entry) {
      this._conn.sendOnError(peerId, `no such publisher: ${name}`);
      return;
    }
    const pub = new Publication(this, peerId, name, entry);
    this._publications.set(peerId, pub);
    this._conn.sendSubscribed(peerId, entry.elementSize);
    pub._run();
  }

  /**
   * Say goodbye: end every stream (subscriptions end with SessionClosed),
   * wait up to goodbyeTimeout for the peer's goodbye, close the WebSocket.
   * Safe to call more than once.
   * @param {string} [reason="goodbye"]
   * @returns {Promise<void>}
   */
  close(reason = "goodbye") {
    if (this._closing) return this._closing;
    if (this._ended) {
      this._closeSocket(1000);
      return (this._closing = Promise.resolve());
    }
    this._conn.sendGoodbye(reason);
    this._flush();
    const answered = new Promise((resolve) => {
      this._onPeerGoodbye = resolve;
      setTimeout(resolve, this._goodbyeTimeout);
    });
    this._end(new SessionClosed(reason, { byPeer: false }));
    this._closing = answered.then(() => this._closeSocket(1000));
    return this._closing;
  }

  /** Whether the session has ended (goodbye either way, or lost). */
  get isClosed() {
    return this._ended !== null;
  }

  /** Session statistics: bytes both ways, open subscriptions and publications. */
  stats() {
    return {
      url: this.url,
      open: this._ended === null,
      sentBytes: this._sentBytes,
      receivedBytes: this._receivedBytes,
      subscriptions: this._subscriptions.size,
      publications: this._publications.size,
      bufferedAmount: this._ws.bufferedAmount ?? 0,
    };
  }

  // Called by publications: resolve once the WebSocket's send buffer drained.
  _waitDrain() {
    return new Promise((resolve) => {
      const poll = () => {
        if (!this._open || (this._ws.bufferedAmount ?? 0) < SEND_HIGH_WATER) resolve();
        else setTimeout(poll, 10);
      };
      poll();
    });
  }
}

// A sliding rate meter: samples of (time, elements, bytes) a few per window.
class RateMeter {
  constructor() {
    this.samples = [];
  }
  sample(t, elements, bytes) {
    const s = this.samples;
    if (s.length === 0 || t - s[s.length - 1][0] >= RATE_WINDOW_MS / 8) s.push([t, elements, bytes]);
    while (s.length > 2 && t - s[1][0] >= RATE_WINDOW_MS) s.shift();
  }
  rates(t, elements, bytes) {
    this.sample(t, elements, bytes);
    const [t0, e0, b0] = this.samples[0];
    const dt = (t - t0) / 1000;
    if (dt <= 0) return [0, 0];
    return [(elements - e0) / dt, (bytes - b0) / dt];
  }
}

/**
 * One stream from a peer's publisher. An AsyncIterable of elements (one
 * consumer at a time), created by Session.subscribe().
 *
 * Elements buffer here only up to what was requested, so memory is bounded
 * by the prefetch (or by what you request with prefetch 0).
 */
export class Subscription {
  constructor(session, name, prefetch, decoder) {
    this.session = session;
    this.name = name;
    this.id = null;
    this.prefetch = prefetch;
    this._window = prefetch > 0 ? new DemandWindow(prefetch) : null;
    this._decoder = decoder;
    // Received, not yet consumed: chunks {items} or {packed, size, count}, with _head into the first.
    this._chunks = [];
    this._chunkHead = 0;
    this._head = 0;
    this._buffered = 0;
    this._elements = 0;
    this._bytes = 0;
    this._consumedCount = 0;
    this._elementSize = 0;
    this._state = "opening";
    this._error = null;
    this._waiter = null;
    this._busy = false;
    this._meter = new RateMeter();
    this._startedAt = now();
    this._endedAt = null;
    let resolveSubscribed;
    let rejectSubscribed;
    /** Resolves with the elementSize once the publisher accepted; rejects if refused. */
    this.subscribed = new Promise((resolve, reject) => {
      resolveSubscribed = resolve;
      rejectSubscribed = reject;
    });
    this.subscribed.catch(() => {});
    this._resolveSubscribed = resolveSubscribed;
    this._rejectSubscribed = rejectSubscribed;
    let resolveDone;
    /** Resolves when the stream ended: null on completion or cancel, else the error. */
    this.done = new Promise((resolve) => (resolveDone = resolve));
    this._resolveDone = resolveDone;
  }

  // ---- from the session ----

  _onSubscribed(elementSize) {
    this._state = "open";
    this._elementSize = elementSize;
    this._resolveSubscribed(elementSize);
  }

  _onElements(event) {
    this._chunks.push(event.items !== null ? { items: event.items } : { packed: event.packed, size: event.size, count: event.count });
    this._buffered += event.count;
    this._elements += event.count;
    this._bytes += event.bytes;
    this._meter.sample(now(), this._elements, this._bytes);
    this._wakeConsumer();
  }

  _onEnd(error) {
    if (this._state === "completed" || this._state === "failed" || this._state === "cancelled") return;
    this._error = error;
    this._state = error ? "failed" : "completed";
    this._endedAt = now();
    if (error) this._rejectSubscribed(error);
    else this._resolveSubscribed(this._elementSize);
    this._resolveDone(error);
    this._wakeConsumer();
  }

  _wakeConsumer() {
    const waiter = this._waiter;
    if (waiter) {
      this._waiter = null;
      waiter();
    }
  }

  get _ended() {
    return this._state !== "opening" && this._state !== "open";
  }

  // ---- demand ----

  /**
   * Request `n` more elements (a number or BigInt > 0); adds to any
   * automatic demand and saturates at 2^63 − 1 (unbounded). A no-op once
   * the stream ended.
   * @throws {RangeError} n <= 0 (Reactive Streams rule 3.9)
   */
  request(n) {
    const big = typeof n === "bigint" ? n : Number.isInteger(n) ? BigInt(n) : NaN;
    if (typeof big !== "bigint" || big <= 0n) throw new RangeError(`request(n) needs an integer n > 0 (rule 3.9), got ${n}`);
    if (this._ended) return;
    this.session._conn.request(this.id, big);
    this.session._scheduleFlush();
  }

  /** Cancel the stream (a no-op once it ended). Buffered elements are dropped. */
  cancel() {
    if (this._ended) return;
    this.session._conn.cancel(this.id);
    this.session._subscriptions.delete(this.id);
    this.session._scheduleFlush();
    this._chunks = [];
    this._buffered = 0;
    this._onEnd(null);
    this._state = "cancelled";
  }

  _consumed(n) {
    this._consumedCount += n;
    if (this._window === null || this._ended) return;
    const more = this._window.consumed(n);
    if (more) this.request(more);
  }

  // ---- iteration ----

  [Symbol.asyncIterator]() {
    return this;
  }

  /**
   * The next element: `{value, done}` as the async iteration protocol says.
   * Rejects with PublisherError / UnknownPublisher (onError) or SessionClosed
   * after the elements that arrived before it.
   */
  async next() {
    if (this._busy) throw new RStreamsError("another consumer is already iterating this subscription");
    if (!this._buffered) {
      const end = await this._waitForElements();
      if (end) return end;
    }
    const element = this._popOne();
    this._consumed(1);
    return { value: this._decoder ? this._decode(element) : element, done: false };
  }

  // An element the decoder refuses ends the stream (cancel), then throws:
  // for-await does not call return() after a rejected next(), so without the
  // cancel the publisher would go on sending into a buffer nobody reads.
  _decode(element) {
    try {
      return this._decoder(element);
    } catch (err) {
      this.cancel();
      throw err;
    }
  }

  /** Called by `break` in a for-await loop: cancels. */
  async return(value) {
    this.cancel();
    return { value, done: true };
  }

  async _waitForElements() {
    this._busy = true;
    try {
      while (!this._buffered) {
        if (this._ended) {
          if (this._error && this._state !== "cancelled") throw this._error;
          return { value: undefined, done: true };
        }
        await new Promise((resolve) => (this._waiter = resolve));
      }
      return null;
    } finally {
      this._busy = false;
    }
  }

  _popOne() {
    const chunk = this._chunks[0];
    const head = this._head;
    let element;
    let length;
    if (chunk.items) {
      element = chunk.items[head];
      length = chunk.items.length;
    } else {
      element = chunk.packed.subarray(head * chunk.size, (head + 1) * chunk.size);
      length = chunk.count;
    }
    if (head + 1 >= length) {
      this._chunks.shift();
      this._head = 0;
    } else {
      this._head = head + 1;
    }
    this._buffered -= 1;
    return element;
  }

  _takeAll(limit) {
    const out = [];
    let remaining = Math.min(limit, this._buffered);
    while (remaining > 0) {
      const element = this._popOne();
      out.push(this._decoder ? this._decode(element) : element);
      remaining--;
    }
    return out;
  }

  /**
   * Iterate over everything buffered at once: each step yields an array of
   * all elements that have arrived (at most `maxElements`), waiting only
   * when none has. Demand is topped up per batch. Breaking out cancels.
   */
  batches(maxElements = 2 ** 31) {
    const sub = this;
    return {
      [Symbol.asyncIterator]() {
        return this;
      },
      async next() {
        if (sub._busy) throw new RStreamsError("another consumer is already iterating this subscription");
        if (!sub._buffered) {
          const end = await sub._waitForElements();
          if (end) return end;
        }
        const batch = sub._takeAll(maxElements);
        sub._consumed(batch.length);
        return { value: batch, done: false };
      },
      async return(value) {
        sub.cancel();
        return { value, done: true };
      },
    };
  }

  // ---- introspection ----

  /** The publisher's announced fixed element size (0: variable). */
  get elementSize() {
    return this._elementSize;
  }

  /** "opening", "open", "completed", "failed" or "cancelled". */
  get state() {
    return this._state;
  }

  /** The error that ended the stream, if any. */
  get error() {
    return this._error;
  }

  /**
   * A snapshot for dashboards: demand outstanding (elements requested and
   * not yet received; Infinity when unbounded), elements and bytes
   * received, elements/s and bytes/s over about the last second, elements
   * buffered and consumed.
   */
  stats() {
    const t = this._endedAt ?? now();
    const [elementsPerSecond, bytesPerSecond] = this._endedAt === null ? this._meter.rates(t, this._elements, this._bytes) : [0, 0];
    const outstanding = this._ended ? 0n : this.session._conn.outstandingDemand(this.id);
    const seconds = (t - this._startedAt) / 1000;
    return {
      id: this.id,
      name: this.name,
      state: this._state,
      elementSize: this._elementSize,
      outstandingDemand: outstanding >= UNBOUNDED ? Infinity : Number(outstanding),
      elements: this._elements,
      bytes: this._bytes,
      buffered: this._buffered,
      consumed: this._consumedCount,
      elementsPerSecond,
      bytesPerSecond,
      averageElementsPerSecond: seconds > 0 ? this._elements / seconds : 0,
      seconds,
      error: this._error ? this._error.message : null,
    };
  }

  /** The same as stats(), under the Python API's name. */
  statistics() {
    return this.stats();
  }
}

// One stream we publish to the peer: pulls from the user's iterator only
// while the peer's demand allows.
class Publication {
  constructor(session, peerId, name, entry) {
    this.session = session;
    this.peerId = peerId;
    this.name = name;
    this.entry = entry;
    this.controller = new AbortController();
    this.stopped = false;
    this.waiter = null;
    this.sent = 0;
  }

  _wake() {
    const waiter = this.waiter;
    if (waiter) {
      this.waiter = null;
      waiter();
    }
  }

  _stop() {
    if (this.stopped) return;
    this.stopped = true;
    this.controller.abort();
    this._wake();
  }

  async _run() {
    const session = this.session;
    const conn = session._conn;
    const id = this.peerId;
    let iterator = null;
    try {
      const [path, query = ""] = splitName(this.name);
      const request = {
        name: this.name,
        path,
        params: new URLSearchParams(query),
        signal: this.controller.signal,
        demand: () => conn.publicationDemand(id),
      };
      const iterable = await this.entry.source(request);
      if (iterable == null) throw new TypeError("the publisher returned nothing iterable");
      iterator = iterable[Symbol.asyncIterator] ? iterable[Symbol.asyncIterator]() : iterable[Symbol.iterator]();
      const encodeElement = this.entry.encode;
      while (!this.stopped) {
        // Pull only with demand: the source is never asked for an element
        // the subscriber did not request.
        while (!this.stopped && conn.publicationDemand(id) <= 0n) {
          await new Promise((resolve) => (this.waiter = resolve));
        }
        if (this.stopped) break;
        if ((session._ws.bufferedAmount ?? 0) >= SEND_HIGH_WATER) await session._waitDrain();
        const step = await iterator.next();
        if (this.stopped) break;
        if (step.done) {
          conn.sendOnComplete(id);
          session._publications.delete(id);
          session._scheduleFlush();
          iterator = null;
          return;
        }
        const value = encodeElement ? encodeElement(step.value) : step.value;
        const bytes = elementBytes(value);
        if (bytes === null) {
          throw new TypeError(`a published element must be bytes or a string, not ${typeof value} (or choose an encode option)`);
        }
        if (this.entry.elementSize && bytes.length !== this.entry.elementSize) {
          throw new RangeError(`an element of ${bytes.length} bytes on a publisher of elementSize ${this.entry.elementSize}`);
        }
        conn.sendOnNext(id, bytes);
        this.sent++;
        session._scheduleFlush();
      }
    } catch (err) {
      if (!this.stopped) {
        conn.sendOnError(id, err?.message ?? String(err));
        session._publications.delete(id);
        session._scheduleFlush();
        // The iterator is still closed below: when the error was ours (an
        // element that does not encode), the generator's finally must run.
      }
    } finally {
      this.stopped = true;
      if (iterator && typeof iterator.return === "function") {
        try {
          await iterator.return();
        } catch {
          // The stream is over either way; nothing to tell the peer.
        }
      }
    }
  }
}

// Without an encode option: bytes as they are, a string as UTF-8.
function elementBytes(value) {
  if (value instanceof Uint8Array) return value;
  if (typeof value === "string") return UTF8_ENCODER.encode(value);
  if (value instanceof ArrayBuffer) return new Uint8Array(value);
  if (ArrayBuffer.isView(value)) return new Uint8Array(value.buffer, value.byteOffset, value.byteLength);
  return null;
}

function splitName(name) {
  const at = name.indexOf("?");
  return at < 0 ? [name, ""] : [name.slice(0, at), name.slice(at + 1)];
}
