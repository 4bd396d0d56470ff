// errors.js: every error the browser client raises, in one hierarchy.
//
// They live apart so that each layer (msgpack.js, protocol.js, the session in
// rstreams.js) raises the same classes and a page can catch them by class
// whichever layer threw. docs/browser.md ("Errors") draws the tree. Import
// them from rstreams.js, which re-exports every one.

/** Base class of every error the client raises. */
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
