// Types of the public API of rstreams.js (the package @rstreams/client),
// written by hand: every name rstreams.js exports is declared here (a test,
// js/test/package.test.mjs, checks it). docs/browser.md is the reference.

// ---- errors (errors.js) ----

/** Base class of every error the client raises. */
export class RStreamsError extends Error {
  constructor(message: string);
}
/** Bytes that are not valid msgpack; `offset` is where decoding failed. */
export class MsgpackDecodeError extends RStreamsError {
  constructor(message: string, offset: number);
  readonly offset: number;
}
/** Valid msgpack beyond a decoding limit (DEFAULT_MSGPACK_LIMITS). */
export class MsgpackLimitError extends MsgpackDecodeError {}
/** A value msgpack cannot carry. */
export class MsgpackEncodeError extends RStreamsError {}
export class ProtocolError extends RStreamsError {}
/** The peer broke the protocol. */
export class RemoteProtocolError extends ProtocolError {}
/** This side misused the protocol. */
export class LocalProtocolError extends ProtocolError {}
/** The session ended, so every stream on it ended. */
export class SessionClosed extends RStreamsError {
  constructor(reason: string, options: { byPeer: boolean });
  readonly reason: string;
  readonly byPeer: boolean;
}
/**
 * The connection was lost without a goodbye, or could not be opened. A
 * connect() from a page of another origin than the server's names the page's
 * origin and the server's --allow-origin option (a refused origin is the
 * likely cause: the browser hides the server's 403).
 */
export class SessionBroken extends SessionClosed {
  constructor(reason: string);
}
/** One stream failed; the session and its other streams carry on. */
export class SubscriptionError extends RStreamsError {}
/** The peer's publisher ended the stream with onError: `message` is its text. */
export class PublisherError extends SubscriptionError {
  constructor(message: string);
}
/** The peer has no publisher of that name. */
export class UnknownPublisher extends PublisherError {
  constructor(message: string, publisherName: string);
  readonly publisherName: string;
}

// ---- msgpack (msgpack.js) ----

export interface MsgpackLimits {
  maxDepth?: number;
  maxStringBytes?: number;
  maxBinBytes?: number;
  maxArrayLength?: number;
  maxMapLength?: number;
}
export const DEFAULT_MSGPACK_LIMITS: Readonly<Required<MsgpackLimits>>;
/** @throws {MsgpackEncodeError} */
export function encode(value: unknown, options?: { maxDepth?: number }): Uint8Array;
/** One msgpack value. @throws {MsgpackDecodeError} */
export function decode(bytes: BufferSource, limits?: MsgpackLimits): unknown;
/** Every msgpack value of a concatenation. @throws {MsgpackDecodeError} */
export function decodeMulti(bytes: BufferSource, limits?: MsgpackLimits): unknown[];

// ---- the protocol (protocol.js) ----

/** Message codes of wire profile v0. */
export const Code: Readonly<{
  hello: 0;
  subscribe: 1;
  request: 2;
  cancel: 3;
  subscribed: 4;
  onNext: 5;
  onComplete: 6;
  onError: 7;
  onNextPacked: 8;
  onNextPart: 9;
  onNextLastPart: 10;
  goodbye: 11;
  ping: 12;
  pong: 13;
}>;
/** Extension ids a hello may list. */
export const Extension: Readonly<{ keepalive: 1 }>;
/** 2^63 − 1: cumulative demand saturates here and means "unbounded". */
export const UNBOUNDED: bigint;
export const PROTOCOL_VERSION: 0;
/** The WebSocket subprotocol: "rstreams.v0". */
export const SUBPROTOCOL: "rstreams.v0";

export interface ProtocolLimits {
  maxMessageBytes?: number;
  maxElementBytes?: number;
  maxStringBytes?: number;
  maxExtensions?: number;
  splitThreshold?: number;
  maxWebSocketMessage?: number;
  rememberedIds?: number;
}
export const DEFAULT_PROTOCOL_LIMITS: Readonly<Required<ProtocolLimits>>;
/** Encode one protocol message: `encodeMessage(Code.request, [1, 5n])`. */
export function encodeMessage(code: number, fields: readonly unknown[]): Uint8Array;

/** An event of Connection.receive(): `type` says which; the other fields depend on it. */
export interface ProtocolEvent {
  type: string;
  [field: string]: unknown;
}

/** The protocol state of one connection, sans-I/O: bytes in, events out, bytes to send. */
export class Connection {
  constructor(limits?: ProtocolLimits, options?: { extensions?: number[] });
  readonly limits: Required<ProtocolLimits>;
  /** Both hellos list Extension.keepalive. */
  readonly keepalive: boolean;
  readonly closed: boolean;
  readonly closedByPeer: boolean;
  readonly hasDataToSend: boolean;
  /** @throws {RemoteProtocolError} */
  receive(bytes: Uint8Array): ProtocolEvent[];
  dataToSend(): Uint8Array;
  dataToSendPieces(maxBytes?: number): Iterable<Uint8Array>;
  /** Our new subscription's Id. */
  subscribe(name: string, initialDemand?: bigint): number;
  request(id: number, n: bigint): void;
  cancel(id: number): void;
  outstandingDemand(id: number): bigint;
  sendSubscribed(peerId: number, elementSize?: number): void;
  publicationDemand(peerId: number): bigint;
  sendOnNext(peerId: number, element: Uint8Array): void;
  sendOnComplete(peerId: number): void;
  sendOnError(peerId: number, message: string): void;
  sendGoodbye(reason: string): void;
  /** The ping's nonce. @throws {LocalProtocolError} */
  sendPing(): number;
}

// ---- demand (demand.js) ----

/**
 * The automatic demand of a fixed window: request `size` up front; once at
 * least half the window has been consumed, request exactly what was consumed.
 */
export class DemandWindow {
  constructor(size: number);
  readonly size: number;
  readonly initial: number;
  /** What to request now (0: nothing yet). */
  consumed(n: number): number;
}

// ---- sessions (rstreams.js) ----

/** ms close() waits for the peer's goodbye by default. */
export const GOODBYE_TIMEOUT_MS: number;
/** ms between a pong and the next ping by default. */
export const KEEPALIVE_INTERVAL_MS: number;
/** ms a ping waits for its pong by default. */
export const KEEPALIVE_TIMEOUT_MS: number;
/** A publication waits while the WebSocket buffers more than this many bytes. */
export const SEND_HIGH_WATER: number;
/** The window of the rates in Subscription.stats(), in ms. */
export const RATE_WINDOW_MS: number;

/** A WebSocket constructor: the browser's, node's (22+), or a compatible one. */
export type WebSocketConstructor = new (url: string, protocols?: string | string[]) => WebSocket;

export interface ConnectOptions {
  /** A WebSocket constructor (default: globalThis.WebSocket). */
  WebSocket?: WebSocketConstructor;
  /** Protocol limits (see DEFAULT_PROTOCOL_LIMITS). */
  limits?: ProtocolLimits;
  /** ms close() waits for the peer's goodbye (default GOODBYE_TIMEOUT_MS). */
  goodbyeTimeout?: number;
  /**
   * ms between a pong and the next ping, if the server agrees to keepalive
   * (default KEEPALIVE_INTERVAL_MS); null: do not offer keepalive.
   */
  keepaliveInterval?: number | null;
  /** ms a ping waits for its pong; then the session ends with SessionBroken (default KEEPALIVE_TIMEOUT_MS). */
  keepaliveTimeout?: number;
}

/**
 * Open a session over WebSocket (`ws://host:port/` or `wss://...`).
 * Resolves once the WebSocket is open; rejects with SessionBroken if it
 * cannot be opened.
 * @throws {TypeError} no WebSocket available (pass options.WebSocket)
 */
export function connect(url: string, options?: ConnectOptions): Promise<Session>;

/** How each element's bytes become a value: a name, or a function of the bytes. */
export type Decode = "msgpack" | "json" | "text" | "raw" | "bytes" | ((bytes: Uint8Array) => unknown);
/** How each published value becomes bytes: a name, or a function of the value. */
export type Encode = "msgpack" | "json" | "text" | "raw" | "bytes" | ((value: any) => Uint8Array);

export interface SubscribeOptions {
  /**
   * Elements requested ahead of the consumer. 0: manual demand with
   * request(n). Left out (or null): a window that adapts to the consumer
   * (starts at 16, doubles while the consumer keeps up, shrinks while it
   * lags, within 65,536 elements and 8 MiB).
   */
  prefetch?: number | null;
  /** How to decode elements (default: the Uint8Array itself). */
  decode?: Decode;
}

/** What a publisher's source is called with, once per subscription. */
export interface PublishRequest {
  /** The name as the peer sent it, query included. */
  name: string;
  path: string;
  params: URLSearchParams;
  /** Aborted when the peer cancels or the session ends. */
  signal: AbortSignal;
  /** The peer's outstanding demand now. */
  demand(): bigint;
}

export interface PublishOptions {
  /** How to encode yielded values (default: bytes as they are, a string as UTF-8). */
  encode?: Encode;
  /** Declare fixed-size elements (0: variable). */
  elementSize?: number;
}

export interface SessionStats {
  url: string;
  open: boolean;
  sentBytes: number;
  receivedBytes: number;
  subscriptions: number;
  publications: number;
  bufferedAmount: number;
}

/** One connection to a peer. Create it with connect(). */
export class Session {
  /** Use connect(). */
  constructor(ws: WebSocket, url: string, options?: ConnectOptions);
  readonly url: string;
  /** Resolves with the SessionClosed that ended the session (never rejects). */
  readonly closed: Promise<SessionClosed>;
  /** Whether the session has ended (goodbye either way, or lost). */
  readonly isClosed: boolean;
  /**
   * Subscribe to the peer's publisher `name` (e.g. "range?count=100").
   * Returns at once; iterate with `for await` (breaking out cancels).
   * @throws {SessionClosed} the session has ended
   * @throws {RangeError} prefetch is not an integer >= 0
   */
  subscribe<T = Uint8Array>(name: string, options?: SubscribeOptions): Subscription<T>;
  /**
   * Offer a publisher the peer can subscribe to, under `name` (a path). The
   * source is advanced only while the subscriber has demand.
   */
  publish<T = unknown>(
    name: string,
    source: (request: PublishRequest) => AsyncIterable<T> | Iterable<T> | Promise<AsyncIterable<T> | Iterable<T>>,
    options?: PublishOptions,
  ): { name: string; unpublish(): void };
  /** Say goodbye; safe to call more than once. */
  close(reason?: string): Promise<void>;
  stats(): SessionStats;
}

export type SubscriptionState = "opening" | "open" | "completed" | "failed" | "cancelled";

export interface SubscriptionStats {
  id: number | null;
  name: string;
  state: SubscriptionState;
  elementSize: number;
  /** Requested and not yet received; Infinity when unbounded. */
  outstandingDemand: number;
  elements: number;
  bytes: number;
  buffered: number;
  consumed: number;
  /** Over about the last RATE_WINDOW_MS. */
  elementsPerSecond: number;
  bytesPerSecond: number;
  averageElementsPerSecond: number;
  seconds: number;
  /** The message of the error that ended the stream, if any. */
  error: string | null;
}

/**
 * One stream from the peer's publisher: an async iterable of its elements,
 * with demand kept by the prefetch (or requested by hand with prefetch 0).
 */
export class Subscription<T = Uint8Array> implements AsyncIterableIterator<T> {
  private constructor();
  readonly session: Session;
  readonly name: string;
  /** The stream's Id on the session. */
  readonly id: number | null;
  /** As given to subscribe(): null when adaptive. */
  readonly prefetch: number | null;
  /** Resolves with the elementSize once the publisher accepted; rejects if refused. */
  readonly subscribed: Promise<number>;
  /** Resolves when the stream ended: null on completion or cancel, else the error. */
  readonly done: Promise<RStreamsError | null>;
  /** Elements kept requested ahead of the consumer now (0: manual demand). */
  readonly window: number;
  /** The publisher's announced fixed element size (0: variable). */
  readonly elementSize: number;
  readonly state: SubscriptionState;
  /** The error that ended the stream, if any. */
  readonly error: RStreamsError | null;
  /**
   * Request n more elements; saturates at UNBOUNDED. A no-op once ended.
   * @throws {RangeError} n <= 0
   */
  request(n: number | bigint): void;
  /** Cancel the stream (a no-op once it ended); buffered elements are dropped. */
  cancel(): void;
  [Symbol.asyncIterator](): this;
  /** Rejects with PublisherError / UnknownPublisher or SessionClosed after the elements before it. */
  next(): Promise<IteratorResult<T, undefined>>;
  /** Cancels (break in a for-await loop). */
  return(value?: unknown): Promise<IteratorResult<T, undefined>>;
  /** Everything buffered at once, as arrays of at most maxElements; breaking out cancels. */
  batches(maxElements?: number): AsyncIterableIterator<T[]>;
  stats(): SubscriptionStats;
  /** The same as stats(), under the Python API's name. */
  statistics(): SubscriptionStats;
}
