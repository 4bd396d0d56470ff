"""Fixtures: ``rstreams serve examples.demo:app --ws --tcp`` and headless Chromium.

The server is the real command, started as a user types it (see
``tests/cli/_support.py``). Chromium is the system's (``/usr/bin/chromium``
on Debian, or ``RSTREAMS_CHROMIUM``), driven by Python playwright; playwright's
own browser download is never used. Without Chromium or playwright the tests
skip with the reason, except under CI (``CI`` set), where that is a failure:
CI installs both (``.ci/run``).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cli._support import ServeProcess

#: Flags for a headless Chromium on a closed network: without the
#: background-networking ones it stalls trying to reach the outside.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
#: Upper bound for one browser-side step (navigation, an evaluate, a wait).
STEP_TIMEOUT_MS = 20_000


def _missing(reason: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"{reason} (CI is set, so this is a failure, not a skip)")
    pytest.skip(reason)


def chromium_path() -> str:
    """``RSTREAMS_CHROMIUM`` if set (and only it), else the system's Chromium."""
    chosen = os.environ.get("RSTREAMS_CHROMIUM")
    candidates = [chosen] if chosen else ["/usr/bin/chromium", shutil.which("chromium"), shutil.which("chromium-browser")]
    for candidate in candidates:
        if candidate and os.path.exists(candidate):
            return candidate
    _missing(f"no Chromium at {chosen}" if chosen else "no Chromium: install it (Debian: apt-get install -y chromium) or set RSTREAMS_CHROMIUM")
    raise AssertionError("unreachable")


@pytest.fixture(scope="module")
def playwright() -> Iterator[Any]:
    """Playwright's sync API, once per module (it cannot be nested)."""
    chromium_path()
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _missing("Python playwright is not installed (it is in the test extra: pip install -e '.[test]')")
    with sync_playwright() as playwright:
        yield playwright


def launch_chromium(playwright: Any, profile: Path, **options: Any) -> Any:
    """A headless Chromium with a fresh profile in ``profile``."""
    context = playwright.chromium.launch_persistent_context(
        str(profile),
        executable_path=chromium_path(),
        headless=True,
        args=CHROMIUM_ARGS,
        viewport={"width": 1400, "height": 900},
        **options,
    )
    context.set_default_timeout(STEP_TIMEOUT_MS)
    return context


@pytest.fixture(scope="module")
def browser_context(playwright: Any) -> Iterator[Any]:
    """One headless Chromium (fresh profile) per test module."""
    profile = Path(tempfile.mkdtemp(prefix="rstreams-chromium-"))
    try:
        context = launch_chromium(playwright, profile)
        try:
            yield context
        finally:
            context.close()
    finally:
        shutil.rmtree(profile, ignore_errors=True)


def start_demo_server(log: Path) -> Any:
    return ServeProcess.start(["serve", "examples.demo:app", "--ws", "127.0.0.1:0", "--tcp", "127.0.0.1:0"], log, listeners=2)


def http_url(server: ServeProcess) -> str:
    """``http://127.0.0.1:PORT`` of the server's WebSocket (and page) listener."""
    (ws,) = [url for url in server.urls if url.startswith("ws://")]
    return "http://" + ws.removeprefix("ws://").rstrip("/")


@pytest.fixture(scope="module")
def demo_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    """``rstreams serve examples.demo:app --ws 127.0.0.1:0 --tcp 127.0.0.1:0``."""
    with start_demo_server(tmp_path_factory.mktemp("serve") / "stderr.log") as server:
        yield server


@pytest.fixture
def page(browser_context: Any, demo_server: ServeProcess) -> Iterator[Any]:
    """The demo page at ``/``, loaded and connected; console errors fail the test."""
    page = browser_context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto(http_url(demo_server) + "/")
    page.wait_for_function("window.rstreamsDemo && window.rstreamsDemo.ready === true")
    yield page
    page.close()
    assert not errors, f"errors in the page: {errors}"
