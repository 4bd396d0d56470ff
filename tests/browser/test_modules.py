"""The client's module graph, as Chromium loads it from the real server.

``rstreams.js`` imports its sibling modules (``./errors.js``, ``./msgpack.js``,
...) by relative URL, so a page that imports ``/rstreams.js`` makes one
request per module. Each must answer 200 as ``text/javascript`` (a module
script of any other type is refused), and none may fail, or the page gets
nothing at all. This file has its own Chromium (the ``browser_context``
fixture is per module), so no module is already in the cache: every request
is made.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from .conftest import http_url

ROOT = Path(__file__).resolve().parents[2]
#: Every module of the client: what a page importing /rstreams.js must load.
#: pages.js is the demo pages' own helper, outside the client's graph.
MODULES = sorted(path.name for path in (ROOT / "rstreams" / "web").glob("*.js") if path.name != "pages.js")

pytestmark = pytest.mark.timeout(90)


def load_client(page: Any, module_url: str) -> tuple[dict[str, Any], list[str], dict[str, tuple[int, str | None]]]:
    """Import ``module_url`` in ``page``; return (what it saw, failed requests, responses by path)."""
    failed: list[str] = []
    responses: dict[str, tuple[int, str | None]] = {}
    page.on("requestfailed", lambda request: failed.append(f"{request.url}: {request.failure}"))

    def record(response: Any) -> None:
        if response.url.endswith(".js"):
            responses[response.url.rsplit("/", 1)[1]] = (response.status, response.headers.get("content-type"))

    page.on("response", record)
    result = page.evaluate(
        """async (url) => {
          const api = await import(url);
          return { names: Object.keys(api).sort(), connect: typeof api.connect };
        }""",
        module_url,
    )
    return result, failed, responses


def test_the_module_graph_loads_with_no_failed_request(browser_context: Any, demo_server: Any) -> None:
    assert {"errors.js", "msgpack.js", "protocol.js", "demand.js", "rstreams.js"} <= set(MODULES)
    page = browser_context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    try:
        page.goto(http_url(demo_server) + "/no-such-page")  # a blank page of the server's origin
        result, failed, responses = load_client(page, "/rstreams.js")
    finally:
        page.close()
    assert not failed, failed
    assert not errors, errors
    assert responses == {name: (200, "text/javascript") for name in MODULES}
    assert result["connect"] == "function"
    assert "Connection" in result["names"] and "Reader" not in result["names"]


def test_a_page_of_another_origin_loads_the_whole_graph(browser_context: Any, demo_server: Any) -> None:
    # localhost and 127.0.0.1 are two origins: the sibling modules resolve
    # against the server's URL and are fetched in CORS mode, so each needs
    # the static files' Access-Control-Allow-Origin too, not just rstreams.js.
    server = http_url(demo_server)
    page = browser_context.new_page()
    try:
        page.goto(server.replace("127.0.0.1", "localhost") + "/no-such-page")
        result, failed, responses = load_client(page, server + "/rstreams.js")
    finally:
        page.close()
    assert not failed, failed
    assert responses == {name: (200, "text/javascript") for name in MODULES}
    assert result["connect"] == "function"
