// rstreams.js: the browser client of rstreams (wire profile v0 over WebSocket),
// and its only entry point.
//
//   import { connect } from "/rstreams.js";
//   const session = await connect("ws://127.0.0.1:8000/");
//   for await (const x of session.subscribe("range?count=1000", { prefetch: 64 })) { ... }
//
// Dependency-free ES modules: no build step, nothing Node-only. The client is
// split by responsibility, each module importing its neighbours by relative
// URL (./msgpack.js), so the same files load from the rstreams server at /
// and from disk in node:
//
//   errors.js    the error classes
//   msgpack.js   the msgpack codec, with limits and typed errors
//   protocol.js  the protocol state of one connection (Connection), sans-I/O
//   demand.js    DemandWindow, the automatic demand top-up rule
//   rstreams.js  this file: the session API over a WebSocket (connect,
//                Session, Subscription, publishing), and the public API
//
// Pages import only this file. It re-exports the public names of the others
// by explicit list (not `export *`), so helpers the modules share among
// themselves (msgpack.js's Reader and Writer) stay out of the API.
// docs/browser.md is the reference for everything exported here.

import { PublisherError, RemoteProtocolError, RStreamsError, SessionBroken, SessionClosed, UnknownPublisher } from "./errors.js";
import { decode, encode, toBytes } from "./msgpack.js";
import { BEARER_SUBPROTOCOL_PREFIX, Connection, Extension, SUBPROTOCOL, UNBOUNDED } from "./protocol.js";
import { AdaptiveDemand, DemandWindow } from "./demand.js";

export {
  LocalProtocolError,
  MsgpackDecodeError,
  MsgpackEncodeError,
  MsgpackLimitError,
  ProtocolError,
  PublisherError,
  RemoteProtocolError,
  RStreamsError,
  SessionBroken,
  SessionClosed,
  SubscriptionError,
  UnknownPublisher,
} from "./errors.js";
export { DEFAULT_MSGPACK_LIMITS, decode, decodeMulti, encode } from "./msgpack.js";
export {
  Code,
  Connection,
  DEFAULT_PROTOCOL_LIMITS,
  encodeMessage,
  Extension,
  PROTOCOL_VERSION,
  SUBPROTOCOL,
  UNBOUNDED,
} from "./protocol.js";
export { DemandWindow } from "./demand.js";

// ---------------------------------------------------------------------------
// Session, Subscription, publishing
// ---------------------------------------------------------------------------

const UTF8_ENCODER = new TextEncoder();
const UTF8_DECODER = new TextDecoder("utf-8", { fatal: true });

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
/** Keepalive (docs/PROTOCOL.md section 8): ping this long after the last pong (ms). */
export const KEEPALIVE_INTERVAL_MS = 30_000;
/** Keepalive: how long a ping waits for its pong before the server is taken for dead (ms). */
export const KEEPALIVE_TIMEOUT_MS = 30_000;
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
 * @param {number|null} [options.keepaliveInterval] ms between a pong and the next
 *   ping, if the server agrees to keepalive (default 30 s; null: do not offer it)
 * @param {number} [options.keepaliveTimeout] ms a ping waits for its pong; then the
 *   session ends with SessionBroken("keepalive timeout: ...") (default 30 s)
 * @param {string} [options.token] a bearer token for a server that asks for one:
 *   carried in the hello and, when it can be, as the subprotocol
 *   `rstreams.bearer.TOKEN` of the upgrade; a refused session ends with
 *   SessionClosed("authentication failed")
 * @returns {Promise<Session>}
 * @throws {SessionBroken} the connection could not be opened. On a page served
 *   over http(s), the message also names the page's origin and the server's
 *   --allow-origin option: a server refuses the WebSocket of a page of another
 *   origin unless allowed, and the browser hides the reason (the 403's body),
 *   so a refused origin is the likely cause when the server is up.
 */
// A browser cannot set Authorization on a WebSocket: the token also goes as a
// second subprotocol, when it is made of the characters a subprotocol may hold
// (the hello carries it in any case).
const SUBPROTOCOL_TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;

function subprotocols(token) {
  if (typeof token === "string" && SUBPROTOCOL_TOKEN.test(token)) return [SUBPROTOCOL, BEARER_SUBPROTOCOL_PREFIX + token];
  return [SUBPROTOCOL];
}

export function connect(url, options = {}) {
  const WS = options.WebSocket ?? globalThis.WebSocket;
  if (typeof WS !== "function") throw new TypeError("no WebSocket available: pass options.WebSocket");
  return new Promise((resolve, reject) => {
    let ws;
    try {
      ws = new WS(url, subprotocols(options.token));
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

// A WebSocket that fails before open says nothing about why (a browser never
// shows the page the body of the server's 403). The likeliest cause on a page
// of another origin than the server's is the server's origin policy, which
// only the operator can change: name the origin and the option.
function refusedOriginHint(url) {
  const origin = globalThis.location?.origin;
  if (typeof origin !== "string" || !/^https?:\/\//.test(origin)) return ""; // node, file:// pages
  let serverOrigin = null;
  try {
    const target = new URL(url, origin);
    serverOrigin = `${target.protocol === "wss:" ? "https:" : "http:"}//${target.host}`;
  } catch {
    return "";
  }
  const where = serverOrigin === origin ? "" : ` (the server is at ${serverOrigin})`;
  return (
    `; if the server is up, it likely refused this page's origin ${origin}${where}:` +
    ` start it with --allow-origin ${origin}, or serve the page from the server's own origin` +
    ` (rstreams serve ... --ws HOST:PORT --static-dir DIR)`
  );
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
    this._keepaliveInterval = options.keepaliveInterval === undefined ? KEEPALIVE_INTERVAL_MS : options.keepaliveInterval;
    this._keepaliveTimeout = options.keepaliveTimeout ?? KEEPALIVE_TIMEOUT_MS;
    this._keepaliveTimer = null; // the next ping, or the deadline of the ping in flight
    const extensions = this._keepaliveInterval ? [Extension.keepalive] : [];
    this._conn = new Connection(options.limits, { extensions, token: options.token ?? null });
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
        if (!this._open) reject(new SessionBroken(`cannot connect to ${url}${refusedOriginHint(url)}`));
      };
      ws.onclose = (event) => {
        if (!this._open) reject(new SessionBroken(`cannot connect to ${url} (close code ${event?.code})${refusedOriginHint(url)}`));
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
    if (this._conn.keepalive && this._keepaliveTimer === null && !this._ended) this._schedulePing();
    this._scheduleFlush();
  }

  // ---- keepalive (docs/PROTOCOL.md section 8) ----

  _schedulePing() {
    this._keepaliveTimer = setTimeout(() => this._ping(), this._keepaliveInterval);
  }

  _ping() {
    if (this._ended) return;
    this._conn.sendPing();
    this._flush();
    this._keepaliveTimer = setTimeout(() => this._keepaliveExpired(), this._keepaliveTimeout);
  }

  _onPong() {
    clearTimeout(this._keepaliveTimer);
    this._schedulePing();
  }

  _keepaliveExpired() {
    this._keepaliveTimer = null;
    if (this._ended) return;
    const reason = `keepalive timeout: no pong within ${this._keepaliveTimeout / 1000} s`;
    this._conn.sendGoodbye(reason);
    this._flush();
    this._end(new SessionBroken(reason));
    this._closeSocket(1000);
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
            ? new UnknownPublisher(event.message, sub.name) // the text may go on: " (closest: range)"
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
      case "pong":
        return this._onPong();
      case "ping":
        return; // the connection has queued the pong
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
    // No timer outlives the session (in Node a pending one keeps the process alive).
    clearTimeout(this._keepaliveTimer);
    this._keepaliveTimer = null;
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
   * @param {number} [options.prefetch] elements requested ahead of the
   *   consumer; 0 means manual demand with `request(n)`; left out (or null),
   *   a window that adapts to the consumer (AdaptiveDemand in demand.js:
   *   starts at 16, doubles while the consumer keeps up, shrinks while it
   *   lags, within 65,536 elements and 8 MiB)
   * @param {"msgpack"|"json"|"text"|"raw"|Function} [options.decode] how to
   *   turn each element's bytes into a value (default: the Uint8Array itself)
   * @returns {Subscription}
   * @throws {SessionClosed} the session has ended
   */
  subscribe(name, options = {}) {
    if (typeof name !== "string") throw new TypeError("a publisher name is a string");
    if (this._ended) throw this._ended;
    const prefetch = options.prefetch ?? null;
    if (prefetch !== null && (!Number.isInteger(prefetch) || prefetch < 0)) {
      throw new RangeError(`prefetch must be an integer >= 0 (or left out: adaptive), got ${prefetch}`);
    }
    const sub = new Subscription(this, name, prefetch, resolveCodec(DECODERS, options.decode, "decode"));
    sub.id = this._conn.subscribe(name, BigInt(sub._window === null ? 0 : sub._window.initial));
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
      // Whichever comes first; the other is cleared, so no timer outlives
      // the session (in Node a pending timer keeps the process alive).
      const timer = setTimeout(resolve, this._goodbyeTimeout);
      this._onPeerGoodbye = () => {
        clearTimeout(timer);
        resolve();
      };
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
    // null: adaptive (AdaptiveDemand); 0: manual demand; else a fixed window.
    this.prefetch = prefetch;
    this._window =
      prefetch === null
        ? new AdaptiveDemand(() => this._probe())
        : prefetch > 0
          ? new DemandWindow(prefetch)
          : null;
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

  // For the adaptive window, at a top-up: [outstanding demand, mean element size].
  _probe() {
    const outstanding = this.session._conn.outstandingDemand(this.id);
    const size = this._elements ? Math.floor(this._bytes / this._elements) : 0;
    return [outstanding >= UNBOUNDED ? Infinity : Number(outstanding), size];
  }

  /** Elements kept requested ahead of the consumer now (0: manual demand). */
  get window() {
    return this._window === null ? 0 : this._window.size;
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
        if (this._window instanceof AdaptiveDemand) this._window.starved();
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
