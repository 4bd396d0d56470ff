"""rstreams.js and the demo page in headless Chromium, against the real server.

``rstreams serve examples.demo:app --ws 127.0.0.1:0 --tcp 127.0.0.1:0`` serves
the page and the module; the tests drive the page's own session (and fresh
ones) with the public API exactly as a page would use it:
``import { connect } from "/rstreams.js"``.
"""

from __future__ import annotations

import os
import shutil
import signal
from pathlib import Path
from typing import Any

import pytest

from cli._support import ServeProcess

from .conftest import http_url, launch_chromium, start_demo_server

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.timeout(90)


def test_range_elements_arrive_in_order(page: Any) -> None:
    result = page.evaluate(
        """async () => {
          const session = window.rstreamsDemo.session;
          const values = [];
          for await (const x of session.subscribe("range?count=10000", { prefetch: 64 })) {
            values.push(Number(new DataView(x.buffer, x.byteOffset, x.byteLength).getBigUint64(0)));
          }
          return { count: values.length, inOrder: values.every((v, i) => v === i), isBytes: true };
        }"""
    )
    assert result == {"count": 10000, "inOrder": True, "isBytes": True}


def test_batches_and_stats(page: Any) -> None:
    result = page.evaluate(
        """async () => {
          const sub = window.rstreamsDemo.session.subscribe("blob?count=50&size=100000", { prefetch: 8 });
          let n = 0, ok = true;
          for await (const batch of sub.batches()) {
            for (const x of batch) { ok = ok && x.length === 100000 && x[0] === n % 256 && x[99999] === (n + 99999) % 256; n++; }
          }
          const s = sub.stats();
          return { n, ok, elements: s.elements, bytes: s.bytes, state: s.state, demand: s.outstandingDemand };
        }"""
    )
    # 100,000-byte elements go out split in 64 KiB parts: joined here.
    assert result == {"n": 50, "ok": True, "elements": 50, "bytes": 5_000_000, "state": "completed", "demand": 0}


def test_cancel_by_break_and_by_cancel(page: Any) -> None:
    result = page.evaluate(
        """async () => {
          const session = window.rstreamsDemo.session;
          const ticks = session.subscribe("ticker?interval=0.01", { decode: "msgpack" });
          const seqs = [];
          for await (const [seq] of ticks) { seqs.push(seq); if (seqs.length === 3) break; }
          const big = session.subscribe("range?count=1000000000", { prefetch: 16 });
          let taken = 0;
          for await (const _ of big) { if (++taken === 100) big.cancel(); }
          // The session carries on after both cancels.
          let after = 0;
          for await (const _ of session.subscribe("range?count=5")) after++;
          return { seqs, tickState: ticks.state, taken, bigState: big.state, after, open: !session.isClosed };
        }"""
    )
    assert result == {"seqs": [0, 1, 2], "tickState": "cancelled", "taken": 100, "bigState": "cancelled", "after": 5, "open": True}


def test_publisher_errors_reject_the_iterator(page: Any) -> None:
    result = page.evaluate(
        """async () => {
          const { PublisherError, UnknownPublisher } = await import("/rstreams.js");
          const session = window.rstreamsDemo.session;
          const out = {};
          let n = 0;
          try {
            for await (const _ of session.subscribe("fail?after=3")) n++;
          } catch (err) {
            out.fail = { n, type: err.constructor.name, isPublisherError: err instanceof PublisherError, message: err.message };
          }
          try {
            for await (const _ of session.subscribe("nope?x=1"));
          } catch (err) {
            out.unknown = { type: err.constructor.name, isUnknown: err instanceof UnknownPublisher, name: err.publisherName };
          }
          return out;
        }"""
    )
    assert result["fail"] == {
        "n": 3,
        "type": "PublisherError",
        "isPublisherError": True,
        "message": "fail: failing after 3 elements as asked",
    }
    assert result["unknown"] == {"type": "UnknownPublisher", "isUnknown": True, "name": "nope?x=1"}


def test_echo_round_trip_from_a_browser_publisher(page: Any) -> None:
    result = page.evaluate(
        """async () => {
          const session = window.rstreamsDemo.session;
          let pulled = 0;
          // Demand reaches the page: the generator runs only as far as the
          // server asked (echo asks its subscriber's demand + 16 ahead).
          session.publish("letters", async function* (request) {
            const count = Number(request.params.get("count"));
            for (let i = 0; i < count; i++) { pulled++; yield { i, letter: String.fromCharCode(97 + (i % 26)) }; }
          }, { encode: "json" });
          const echo = session.subscribe("echo?source=" + encodeURIComponent("letters?count=300"), { prefetch: 0, decode: "json" });
          echo.request(10);
          const got = [];
          const it = echo[Symbol.asyncIterator]();
          for (let k = 0; k < 10; k++) got.push((await it.next()).value);
          await new Promise((r) => setTimeout(r, 300));
          const pulledAfterTen = pulled;
          echo.request(1000);
          for (;;) { const step = await it.next(); if (step.done) break; got.push(step.value); }
          // And the demo page's own publisher, through its button's code path.
          const page = await window.rstreamsDemo.echoRoundTrip(500);
          return { n: got.length, inOrder: got.every((x, i) => x.i === i && x.letter === String.fromCharCode(97 + (i % 26))), pulledAfterTen, page };
        }"""
    )
    assert result["n"] == 300
    assert result["inOrder"] is True
    # Never more pulled than requested: 10 forwarded + echo's prefetch of 16.
    assert 10 <= result["pulledAfterTen"] <= 26
    assert result["page"] == {"back": 500, "inOrder": True}


def test_large_elements_published_from_the_page_come_back_whole(page: Any) -> None:
    result = page.evaluate(
        """async () => {
          const session = window.rstreamsDemo.session;
          const size = 1_000_000;
          session.publish("big", async function* () {
            for (let k = 0; k < 3; k++) yield new Uint8Array(size).map((_, i) => (i * 7 + k) & 0xff);
          });
          const back = [];
          for await (const x of session.subscribe("echo?source=big", { prefetch: 2 })) {
            back.push(x.length === size && x.every((b, i) => b === ((i * 7 + back.length) & 0xff)));
          }
          return back;
        }"""
    )
    # Split into 64 KiB parts both ways (page -> server -> page), joined whole.
    assert result == [True, True, True]


def test_blank_page_connect_subscribe_close(browser_context: Any, demo_server: Any) -> None:
    # What a page of one's own does: only the module, no demo code. Any page
    # of the server's origin will do; its 404 page is as blank as they come.
    page = browser_context.new_page()
    response = page.goto(http_url(demo_server) + "/no-such-page")
    assert response is not None and response.status == 404
    ws_url = [url for url in demo_server.urls if url.startswith("ws://")][0]
    result = page.evaluate(
        """async (url) => {
          const { connect, SessionClosed } = await import("/rstreams.js");
          const session = await connect(url);
          const sub = session.subscribe("range?count=1000", { prefetch: 64 });
          const isPromise = typeof sub.then === "function";
          let n = 0;
          for await (const x of sub) n += x instanceof Uint8Array ? 1 : 0;
          const pending = session.subscribe("ticker?interval=1");
          await session.close();
          let closedError = null;
          try { await pending.next(); } catch (err) { closedError = { type: err.constructor.name, isClosed: err instanceof SessionClosed, byPeer: err.byPeer }; }
          const why = await session.closed;
          return { n, isPromise, closedError, reason: why.reason };
        }""",
        ws_url,
    )
    page.close()
    assert result == {
        "n": 1000,
        "isPromise": False,
        "closedError": {"type": "SessionClosed", "isClosed": True, "byPeer": False},
        "reason": "goodbye",
    }


def follow_a_ticker(page: Any, server: ServeProcess) -> None:
    """Open the demo page and start a ticker subscription whose end (how it
    ended: type, byPeer, reason, message) lands in ``window.outcome``; return
    once it has delivered three elements."""
    page.goto(http_url(server) + "/")
    page.wait_for_function("window.rstreamsDemo && window.rstreamsDemo.ready === true")
    page.evaluate(
        """() => {
          const sub = window.rstreamsDemo.session.subscribe("ticker?interval=0.02");
          window.outcome = (async () => {
            try { for await (const _ of sub); return { type: "completed" }; }
            catch (err) {
              return { type: err.constructor.name, byPeer: err.byPeer, reason: err.reason, message: err.message };
            }
          })();
        }"""
    )
    page.wait_for_function("window.rstreamsDemo.ticker.stats().elements >= 3")


def test_server_goodbye_ends_open_streams(browser_context: Any, tmp_path: Path) -> None:
    with start_demo_server(tmp_path / "stderr.log") as server:
        page = browser_context.new_page()
        try:
            follow_a_ticker(page, server)
            assert server.stop(signal.SIGINT) == 0
            outcome = page.evaluate("() => window.outcome")
            assert outcome["type"] == "SessionClosed"
            assert outcome["byPeer"] is True
            assert outcome["reason"]
            page.wait_for_function("document.getElementById('reconnect').hidden === false")
        finally:
            page.close()


def test_lost_connection_is_session_broken(browser_context: Any, tmp_path: Path) -> None:
    with start_demo_server(tmp_path / "stderr.log") as server:
        page = browser_context.new_page()
        try:
            follow_a_ticker(page, server)
            server.process.kill()  # no goodbye: the connection just goes
            server.process.wait(timeout=10)
            outcome = page.evaluate("() => window.outcome")
            assert outcome["type"] == "SessionBroken"
            assert outcome["byPeer"] is True
            assert "lost without goodbye" in outcome["message"]
        finally:
            page.close()


def test_demo_page_live_and_screenshot(page: Any, tmp_path: Path) -> None:
    # The shared look (theme.css) loaded: the palette's background, not the browser's white.
    assert page.evaluate("getComputedStyle(document.body).backgroundColor") == "rgb(15, 19, 32)"
    # The ticker plots as it arrives.
    page.wait_for_function("window.rstreamsDemo.ticker.stats().elements >= 20")
    # The explorer: subscribe by typing names, as a person would.
    for name in ["fail?after=5", "no-such-thing", "blob?count=200&size=65536", "range?count=100000", "range?count=1000000000", "ticker?interval=0.05"]:
        page.fill("#name", name)
        page.click("#subscribe")
    page.click("#echo-run")
    page.wait_for_function("document.getElementById('e-ok').textContent.includes('yes')")
    page.wait_for_function(
        """() => {
          const rows = window.rstreamsDemo.streams.map((s) => [s.name, s.sub.state]);
          const state = (n) => rows.find((r) => r[0] === n)?.[1];
          return state("range?count=100000") === "completed" && state("fail?after=5") === "failed"
            && state("no-such-thing") === "failed" && state("blob?count=200&size=65536") === "completed";
        }"""
    )
    # Manual demand: prefetch 0 and the row's "request 10" button.
    page.fill("#name", "range?count=25")
    page.fill("#prefetch", "0")
    page.click("#subscribe")
    page.fill("#prefetch", "256")
    for _ in range(3):
        page.locator("#streams tr").first.locator("button.more").click()
    page.wait_for_function("window.rstreamsDemo.streams.at(-1).sub.stats().elements === 25")
    page.wait_for_function("window.rstreamsDemo.streams.at(-1).sub.state === 'completed'")
    # Live figures on the running range, then cancel it with its button.
    page.wait_for_timeout(1200)
    text = page.inner_text("#streams")
    assert "PublisherError: fail: failing after 5 elements as asked" in text
    assert "UnknownPublisher: no such publisher: no-such-thing" in text
    shot = tmp_path / "demo-screenshot.png"
    page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 20_000
    if os.environ.get("RSTREAMS_UPDATE_SCREENSHOT"):
        shutil.copyfile(shot, ROOT / "docs" / "demo-screenshot.png")
    big = page.evaluate("() => window.rstreamsDemo.streams.findIndex((s) => s.name === 'range?count=1000000000')")
    rows = page.locator("#streams tr")
    count = rows.count()
    rows.nth(count - 1 - big).locator("button.danger").click()
    page.wait_for_function("window.rstreamsDemo.streams.find((s) => s.name === 'range?count=1000000000').sub.state === 'cancelled'")
    # The table shows it within a refresh (every 200 ms).
    page.wait_for_function("document.getElementById('streams').innerText.split('cancelled').length === 2")


def test_readme_browser_example(browser_context: Any, demo_server: Any) -> None:
    # The README's "In the browser" page, run as written.
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## In the browser", 1)[1].split("\n## ", 1)[0]
    html = section.split("```html\n", 1)[1].split("```", 1)[0]
    page = browser_context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    try:
        page.goto(http_url(demo_server) + "/readme-example")  # any page of the origin
        page.set_content(html)
        page.wait_for_function("document.getElementById('out').textContent.includes('echo: there')")
        lines = page.inner_text("#out").splitlines()
    finally:
        page.close()
    assert not errors, errors
    assert lines[0] == "sum of range: 499500"
    assert [line.split(":")[0] for line in lines[1:4]] == ["tick 0", "tick 1", "tick 2"]
    assert lines[4:] == ["echo: hi", "echo: there"]


def test_wss_page_and_session(playwright: Any, tmp_path: Path) -> None:
    # Served with TLS, the page is https:// and connects to wss:// on its own.
    # The certificate is a throwaway one from trustme, which this browser is
    # told to accept (a Chromium of its own, so the others trust nothing).
    import trustme

    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    cert.private_key_pem.write_to_path(str(tmp_path / "key.pem"))
    cert.cert_chain_pems[0].write_to_path(str(tmp_path / "cert.pem"))
    args = ["serve", "examples.demo:app", "--ws", "127.0.0.1:0"]
    args += ["--tls-cert", str(tmp_path / "cert.pem"), "--tls-key", str(tmp_path / "key.pem")]
    with ServeProcess.start(args, tmp_path / "stderr.log") as server:
        assert server.url.startswith("wss://127.0.0.1:")
        context = launch_chromium(playwright, tmp_path / "profile", ignore_https_errors=True)
        try:
            page = context.new_page()
            page.goto("https://" + server.url.removeprefix("wss://").rstrip("/") + "/")
            page.wait_for_function("window.rstreamsDemo && window.rstreamsDemo.ready === true")
            assert page.evaluate("() => window.rstreamsDemo.wsUrl").startswith("wss://127.0.0.1:")
            count = page.evaluate(
                """async () => {
                  let n = 0;
                  for await (const _ of window.rstreamsDemo.session.subscribe("range?count=1000")) n++;
                  return n;
                }"""
            )
            assert count == 1000
        finally:
            context.close()
