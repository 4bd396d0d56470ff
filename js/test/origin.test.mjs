// A WebSocket that fails before open: the error names the page's origin and
// the server's --allow-origin option (the browser hides the 403's body, so
// the client says what is likely), and says nothing of origins outside a page.
import { test } from "node:test";
import assert from "node:assert/strict";

import { connect, SessionBroken } from "../../rstreams/web/rstreams.js";
import { FakeWebSocket, settle } from "../fake-websocket.mjs";

async function rejection(url, fail) {
  const opening = connect(url, { WebSocket: FakeWebSocket });
  await settle();
  fail(FakeWebSocket.last);
  try {
    await opening;
  } catch (err) {
    return err;
  }
  assert.fail("connect() resolved on a WebSocket that never opened");
}

function onPage(origin, body) {
  const had = Object.getOwnPropertyDescriptor(globalThis, "location");
  Object.defineProperty(globalThis, "location", { value: { origin }, configurable: true });
  return body().finally(() => {
    if (had) Object.defineProperty(globalThis, "location", had);
    else delete globalThis.location;
  });
}

const refuse = (ws) => {
  ws.onerror?.({});
  ws.drop(1006);
};

test("a page of another origin is told its origin and --allow-origin", () =>
  onPage("http://app.example:3000", async () => {
    const err = await rejection("ws://127.0.0.1:8000/", refuse);
    assert.ok(err instanceof SessionBroken);
    assert.match(err.message, /^session closed by the peer: cannot connect to ws:\/\/127\.0\.0\.1:8000\//);
    assert.match(err.message, /likely refused this page's origin http:\/\/app\.example:3000 \(the server is at http:\/\/127\.0\.0\.1:8000\)/);
    assert.match(err.message, /--allow-origin http:\/\/app\.example:3000/);
    assert.match(err.message, /--static-dir/);
  }));

test("a close before open (no error event) carries the hint too, with the close code", () =>
  onPage("https://app.example", async () => {
    const err = await rejection("wss://data.example/", (ws) => ws.drop(1006));
    assert.match(err.message, /close code 1006/);
    assert.match(err.message, /--allow-origin https:\/\/app\.example\b/);
    assert.match(err.message, /the server is at https:\/\/data\.example\)/);
  }));

test("outside a page (node) the error has no origin hint", async () => {
  assert.equal(globalThis.location, undefined);
  const err = await rejection("ws://127.0.0.1:8000/", refuse);
  assert.ok(err instanceof SessionBroken);
  assert.doesNotMatch(err.message, /origin/);
});

test("a page from file:// gets no hint (its origin cannot be allowed by name)", () =>
  onPage("null", async () => {
    const err = await rejection("ws://127.0.0.1:8000/", refuse);
    assert.doesNotMatch(err.message, /allow-origin/);
  }));

test("a session that opened and then broke says nothing of origins", () =>
  onPage("http://app.example:3000", async () => {
    const opening = connect("ws://127.0.0.1:8000/", { WebSocket: FakeWebSocket, keepaliveInterval: null });
    await settle();
    FakeWebSocket.last.open();
    const session = await opening;
    FakeWebSocket.last.drop(1006);
    const closed = await session.closed;
    assert.doesNotMatch(closed.message, /allow-origin/);
  }));
