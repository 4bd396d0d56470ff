"""The demo page's layout in headless Chromium: nothing wider than the window.

At 1280 px the stream explorer's eleven columns, with rows of every kind
(long names, wrapped errors, sparklines, demand bars), fit their panel; at
420 px the header wraps rather than pushing the page wider than the screen
(the explorer's table then scrolls inside its own box, as tables do on a
phone). docs/explorer-1280.png and docs/explorer-narrow.png show both.
"""

from __future__ import annotations

from typing import Any

import pytest

pytestmark = pytest.mark.timeout(90)

STREAMS = ["fail?after=5", "no-such-thing", "blob?count=200&size=65536", "range?count=100000", "range?count=1000000000", "ticker?interval=0.05"]

MEASURE = """() => {
  const wrap = document.querySelector('#streams').closest('.table-wrap');
  return {
    page: document.documentElement.scrollWidth,
    window: innerWidth,
    table: wrap.scrollWidth,
    panel: wrap.clientWidth,
    rows: document.querySelectorAll('#streams tr').length,
  };
}"""


def test_nothing_overflows_at_1280_and_the_header_wraps_at_420(page: Any) -> None:
    for name in STREAMS:
        page.fill("#name", name)
        page.click("#subscribe")
    # Every row filled in: the finished ones with their last element or error, the open ones moving.
    page.wait_for_function(
        """() => {
          const state = (n) => window.rstreamsDemo.streams.find((s) => s.name === n)?.sub.state;
          return state("fail?after=5") === "failed" && state("no-such-thing") === "failed"
            && state("blob?count=200&size=65536") === "completed" && state("range?count=100000") === "completed"
            && window.rstreamsDemo.streams.find((s) => s.name === "ticker?interval=0.05").sub.stats().elements > 0;
        }"""
    )
    page.wait_for_function("document.getElementById('streams').innerText.includes('PublisherError')")
    page.set_viewport_size({"width": 1280, "height": 800})
    page.wait_for_function("innerWidth === 1280")
    wide = page.evaluate(MEASURE)
    assert wide["rows"] == len(STREAMS)
    assert wide["page"] <= wide["window"], wide
    assert wide["table"] <= wide["panel"], wide  # the explorer needs no scrollbar at 1280 px
    page.set_viewport_size({"width": 420, "height": 800})
    page.wait_for_function("innerWidth === 420")
    narrow = page.evaluate(MEASURE)
    assert narrow["page"] <= narrow["window"], narrow
    header = page.evaluate("[...document.querySelectorAll('header *')].every((e) => e.getBoundingClientRect().right <= innerWidth)")
    assert header is True
