// protocol.js: the protocol state of one connection, without I/O.
//
// Connection takes the bytes of each received WebSocket message and returns
// events, and queues the bytes of the messages we send; it never touches a
// socket or a timer, which is what lets js/test/protocol.test.mjs check it
// against byte vectors. Also here: the message codes (Code), encodeMessage,
// the profile's constants and DEFAULT_PROTOCOL_LIMITS. The session layer
// (rstreams.js) is the only place that decides what to do with its errors.
//
// Numbers: Ids and small ints arrive as JS numbers; an integer beyond 2^53
// arrives as a BigInt (so 2^63 - 1, "unbounded demand", is exact). Demand is
// kept as BigInt throughout, saturating at 2^63 - 1 as the profile says.

import { LocalProtocolError, MsgpackDecodeError, RemoteProtocolError } from "./errors.js";
import { Reader, Writer } from "./msgpack.js";

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
  // The keepalive extension's (docs/PROTOCOL.md section 8): sent only once
  // both hellos list Extension.keepalive.
  ping: 12,
  pong: 13,
});

/** Extension ids a hello may list (docs/PROTOCOL.md section 8). */
export const Extension = Object.freeze({
  keepalive: 1,
  // A bearer token for the server's authenticate hook (section 9), written
  // with its argument: [2, token].
  bearer: 2,
});

/** How a token rides in the WebSocket upgrade: a second subprotocol. */
export const BEARER_SUBPROTOCOL_PREFIX = "rstreams.bearer.";

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
  [Code.ping]: [["id"], 1],
  [Code.pong]: [["id"], 1],
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
  /**
   * @param {object} [limits] see DEFAULT_PROTOCOL_LIMITS
   * @param {object} [options]
   * @param {number[]} [options.extensions] extension ids our hello lists
   *   (e.g. [Extension.keepalive]); none by default
   * @param {string|null} [options.token] a bearer token: our hello carries it
   *   as [Extension.bearer, token]
   */
  constructor(limits = {}, { extensions = [], token = null } = {}) {
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
    this.extensions = [...extensions];
    // The keepalive extension: in use once both hellos list it; then at
    // most one ping of ours is in flight (its nonce).
    this.keepalive = false;
    this.nextPing = 1;
    this.pingInFlight = null;
    const announced = this.extensions.filter((id) => id !== Extension.bearer);
    if (token !== null && token !== undefined) {
      if (typeof token !== "string" || token === "") throw new TypeError("token must be a non-empty string");
      announced.push([Extension.bearer, token]);
    }
    this.queue(Code.hello, [PROTOCOL_VERSION, announced]);
  }

  /**
   * Queue a ping; return its nonce. The pong arrives as a {type: "pong"} event.
   * @throws {LocalProtocolError} keepalive not in use, a ping already in flight, or closed
   */
  sendPing() {
    this.checkOpen();
    if (!this.keepalive) throw new LocalProtocolError("ping needs the keepalive extension in both hellos");
    if (this.pingInFlight !== null) throw new LocalProtocolError(`ping ${this.pingInFlight} is still waiting for its pong`);
    const nonce = this.nextPing++;
    this.pingInFlight = nonce;
    this.queue(Code.ping, [nonce]);
    return nonce;
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
        const listsKeepalive = (ids) => ids.some((id) => Number(id) === Extension.keepalive);
        this.keepalive = listsKeepalive(this.extensions) && listsKeepalive(message[2]);
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
      case Code.ping:
        if (!this.keepalive) fail("ping without the keepalive extension in both hellos");
        // Answered at once (nothing follows our goodbye, a pong included).
        if (!this.closed) this.queue(Code.pong, [message[1]]);
        return events.push({ type: "ping", nonce: message[1] });
      case Code.pong:
        if (!this.keepalive) fail("pong without the keepalive extension in both hellos");
        if (this.pingInFlight === null || Number(message[1]) !== this.pingInFlight) {
          fail(`pong ${String(message[1])} answers no ping of ours`);
        }
        this.pingInFlight = null;
        return events.push({ type: "pong", nonce: message[1] });
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
