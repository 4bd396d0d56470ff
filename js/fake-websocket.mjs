// A fake WebSocket for the node tests: records what the client sends and
// lets a test play the server's part (open, deliver bytes, close).
import { decodeMulti } from "../rstreams/web/msgpack.js";
import { encodeMessage } from "../rstreams/web/protocol.js";

export class FakeWebSocket {
  static last = null;

  constructor(url, protocols) {
    this.url = url;
    this.protocols = protocols;
    this.readyState = 0;
    this.binaryType = "blob";
    this.bufferedAmount = 0;
    this.sent = []; // Uint8Array per WebSocket message
    this.closedWith = null;
    FakeWebSocket.last = this;
  }

  // ---- the client side's API ----
  send(data) {
    if (this.readyState !== 1) throw new Error("send on a WebSocket that is not open");
    this.sent.push(new Uint8Array(data));
  }

  close(code) {
    if (this.readyState >= 2) return;
    this.closedWith = code ?? 1005;
    this.readyState = 3;
    queueMicrotask(() => this.onclose?.({ code: this.closedWith }));
  }

  // ---- the test's (server's) side ----
  open() {
    this.readyState = 1;
    this.onopen?.({});
  }

  // Deliver one WebSocket message made of protocol messages [code, ...fields].
  deliver(...messages) {
    const parts = messages.map((m) => (m instanceof Uint8Array ? m : encodeMessage(m[0], m.slice(1))));
    const total = parts.reduce((n, p) => n + p.length, 0);
    const data = new Uint8Array(total);
    let at = 0;
    for (const p of parts) {
      data.set(p, at);
      at += p.length;
    }
    this.onmessage?.({ data: data.buffer });
  }

  deliverText(text) {
    this.onmessage?.({ data: text });
  }

  // The peer vanishes without goodbye.
  drop(code = 1006) {
    this.readyState = 3;
    this.onclose?.({ code });
  }

  // Every protocol message sent so far, decoded: [[code, ...fields], ...].
  messages() {
    return this.sent.flatMap((bytes) => decodeMulti(bytes));
  }

  // Messages sent since the last call.
  take() {
    const start = this._taken ?? 0;
    const all = this.messages();
    this._taken = all.length;
    return all.slice(start);
  }
}

// Let queued microtasks (the session's coalesced flush) and promise callbacks run.
export function settle() {
  return new Promise((resolve) => setTimeout(resolve, 0));
}
