"""The demo page's "whole server" panel: every session and stream of the
server, from ``$stats``, including those of other clients."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

from cli._support import ROOT, ServeProcess, start, stop


def test_the_page_shows_every_session_and_stream_of_the_server(page: Any, demo_server: ServeProcess, tmp_path: Path) -> None:
    (tcp,) = [url for url in demo_server.urls if url.startswith("tcp://")]
    # Another client, over TCP, with a stream that runs for the whole test.
    other = start("sub", tcp, "ticker?interval=0.02", "--format", "msgpack")
    try:
        page.wait_for_function(
            """() => {
              const record = window.rstreamsDemo.serverView.record;
              if (!record) return false;
              const transports = record.sessions.map((s) => s.transport);
              return transports.includes("tcp") && transports.includes("ws")
                && window.rstreamsDemo.serverView.previous !== null;
            }"""
        )
        page.wait_for_function("document.getElementById('server-sessions').innerText.includes('ticker?interval=0.02')")
        text = page.inner_text("#server-panel")
        # The TCP client's session, its peer address and its stream; the page's own $stats stream.
        assert "\ttcp\t" in text and "→ ticker?interval=0.02" in text and "→ $stats" in text
        assert "127.0.0.1:" in text
        # Each session's memory held for its peer, last in its row (the
        # sessions with a stream open hold its STREAM_MEMORY_COST, 6 KiB).
        memory = page.eval_on_selector_all(
            "#server-sessions tr.session", "(rows) => rows.map((row) => row.lastElementChild.textContent)"
        )
        assert memory and all(cell.split(" ")[-1] in ("B", "KiB", "MiB") for cell in memory), memory
        assert any(cell.endswith(" KiB") for cell in memory), memory
        summary = page.inner_text("#server-summary")
        assert "sessions" in summary and "streams" in summary and "up " in summary
        # A stream name is text, never markup.
        assert page.locator("#server-sessions script").count() == 0
        shot = tmp_path / "dashboard-screenshot.png"
        page.locator("#server-panel").screenshot(path=str(shot))
        assert shot.stat().st_size > 5_000
        if os.environ.get("RSTREAMS_UPDATE_SCREENSHOT"):
            shutil.copyfile(shot, ROOT / "docs" / "dashboard-screenshot.png")
    finally:
        stop(other)
        assert other.stdout is not None
        other.stdout.close()
