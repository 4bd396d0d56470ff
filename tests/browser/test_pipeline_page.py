"""The pipeline page (``rstreams/web/pipeline.html``) in headless Chromium, with the real client.

No Spark here: it would take 20-30 s to produce a first window. The server is
the demo's own (``examples/pipeline.py``: its ``Services`` serve its ``app``
over TCP and WebSocket, page included, and run its sensor client), and the
test plays Spark's part: it publishes closed windows into ``results`` the way
the Spark sink does (a client session, ``publish_to_topic``, JSON rows tagged
``_batch``/``_partition``/``_row``) and hands a query progress to the demo's
``record_progress``, which the demo's ``stats`` publisher then reports. What
the page shows must come from those messages, through ``/rstreams.js``.

``tests/spark/test_pipeline.py`` checks that the windows Spark really
publishes have exactly the fields :func:`window_elements` writes.
"""

from __future__ import annotations

import importlib.util
import json
import math
import random
from collections.abc import Iterable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import trio

import rstreams

from .conftest import STEP_TIMEOUT_MS

ROOT = Path(__file__).resolve().parents[2]
SENSORS = ["s0", "s1", "s2", "s3"]
#: The fields of a window in ``results`` (the select in ``start_query``), then the sink's tags.
WINDOW_FIELDS = ["sensor", "start", "end", "count", "avg", "min", "max"]
SINK_TAGS = ["_batch", "_partition", "_row"]

pytestmark = pytest.mark.timeout(40)


def load_pipeline() -> ModuleType:
    """A fresh copy of ``examples/pipeline.py``.

    Its topics and Spark progress are module globals, and
    ``tests/spark/test_pipeline.py`` runs the same module in this process: a
    copy of its own keeps the windows published here out of that test's
    ``results`` (and the other way round)."""
    spec = importlib.util.spec_from_file_location("pipeline_for_the_page_test", ROOT / "examples" / "pipeline.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def readings(first_second: int, seconds: int, per_second: int = 20) -> Iterator[dict[str, Any]]:
    """Readings as the demo's sensors send them (``{"sensor", "ts", "value"}``),
    deterministic: a sine wave per sensor plus seeded noise."""
    noise = random.Random(first_second)
    for second in range(first_second, first_second + seconds):
        for k in range(per_second):
            ts = second + k / per_second
            for i, sensor in enumerate(SENSORS):
                yield {"sensor": sensor, "ts": ts, "value": 20.0 + 10 * i + 3 * math.sin(ts / 5 + i) + noise.gauss(0, 0.3)}


def windows_of(rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """What the query makes of readings: per sensor and 1-second event-time
    window, count / avg / min / max, with ``start``/``end`` in whole seconds
    (``unix_timestamp``: a LONG, so an int in JSON)."""
    groups: dict[tuple[str, int], list[float]] = {}
    for row in rows:
        groups.setdefault((row["sensor"], math.floor(row["ts"])), []).append(row["value"])
    out = []
    for (sensor, start), values in sorted(groups.items(), key=lambda item: (item[0][1], item[0][0])):
        out.append({"sensor": sensor, "start": start, "end": start + 1, "count": len(values),
                    "avg": sum(values) / len(values), "min": min(values), "max": max(values)})
    return out


def window_elements(windows: Iterable[dict[str, Any]], batch: int, partition: int = 0) -> list[bytes]:
    """The elements the Spark sink publishes for these rows (``encode_rows``
    with a tag: compact JSON, the row's fields then ``_batch``, ``_partition``,
    ``_row``). Written out here so the browser tests need no pyspark."""
    elements = []
    for index, window in enumerate(windows):
        value = {key: window[key] for key in WINDOW_FIELDS}
        value["_batch"], value["_partition"], value["_row"] = batch, partition, index
        elements.append(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())
    return elements


def publish_windows(url: str, elements: list[bytes]) -> int:
    """Into ``results`` over TCP, as a sink task does (its ``publish_elements``)."""

    async def publish() -> int:
        with trio.fail_after(10):
            async with rstreams.open_session(url, app=rstreams.Router()) as session:
                return await rstreams.publish_to_topic(session, "results", elements)

    return trio.run(publish)


class FinishedBatch:
    """Stands in for a ``StreamingQuery``: ``record_progress`` reads only ``lastProgress``."""

    def __init__(self, batch: int, rows: int, watermark: str) -> None:
        # The shape of Spark's progress JSON (the keys record_progress reads, and some it does not).
        self.lastProgress = {
            "id": "8d1c6a52-0000-4000-8000-000000000000",
            "name": None,
            "batchId": batch,
            "numInputRows": rows,
            "inputRowsPerSecond": 79.61,
            "processedRowsPerSecond": 131.47,
            "durationMs": {"addBatch": 1020, "getBatch": 0, "latestOffset": 3, "queryPlanning": 41, "triggerExecution": 1217, "walCommit": 52},
            "eventTime": {"avg": "2026-11-22T21:20:03.512Z", "max": "2026-11-22T21:20:04.012Z", "min": "2026-11-22T21:20:03.000Z", "watermark": watermark},
            "stateOperators": [{"operatorName": "stateStoreSave", "numRowsTotal": 8, "numRowsUpdated": 8}],
            "sources": [{"description": "rstreams[sensors]", "numInputRows": rows}],
            "sink": {"description": "rstreams[results]", "numOutputRows": 8},
        }


@pytest.fixture
def pipeline_services() -> Iterator[tuple[ModuleType, Any]]:
    """The demo's server on free ports (WebSocket and page included) and its sensors."""
    pipeline = load_pipeline()
    services = pipeline.Services("127.0.0.1", 0, 0, sensor_count=len(SENSORS), rate=20.0)
    try:
        assert services.ws_url and services.ws_url.endswith("/pipeline.html"), services.ws_error
        yield pipeline, services
    finally:
        services.close()


def test_pipeline_page_shows_windows_and_stages(browser_context: Any, pipeline_services: tuple[ModuleType, Any], tmp_path: Path) -> None:
    pipeline, services = pipeline_services
    # 30 seconds of windows, one Spark batch per second, before the page opens:
    # the page's history.
    now = int(pipeline.time.time())
    history_start = now - 32
    published = 0
    for second in range(30):
        windows = windows_of(readings(history_start + second, 1))
        published += publish_windows(services.url, window_elements(windows, batch=second))
    assert published == 30 * len(SENSORS)
    summary = pipeline.record_progress(FinishedBatch(batch=29, rows=84, watermark="2026-11-22T21:20:03.012Z"))
    assert summary == {"batch": 29, "inputRows": 84, "inputRowsPerSecond": 79.6, "processedRowsPerSecond": 131.5,
                       "batchMs": 1217, "watermark": "2026-11-22T21:20:03.012Z"}

    page = browser_context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
    try:
        page.goto(services.ws_url)
        page.wait_for_function("window.rstreamsPipeline && window.rstreamsPipeline.ready === true")
        # The shared look (theme.css) loaded.
        assert page.evaluate("getComputedStyle(document.body).backgroundColor") == "rgb(15, 19, 32)"
        # The history, and at least three stats messages (rates need two).
        page.wait_for_function("window.rstreamsPipeline.windows === 120 && window.rstreamsPipeline.statsMessages >= 3")

        # One more batch, live: the next second's windows, plus the previous
        # batch again as a re-run batch would publish it (at-least-once).
        live = windows_of(readings(history_start + 30, 1))
        replayed = windows_of(readings(history_start + 29, 1))
        assert publish_windows(services.url, window_elements(live + replayed, batch=30)) == 8
        page.wait_for_function("window.rstreamsPipeline.windows === 128")

        state = page.evaluate(
            """() => {
              const p = window.rstreamsPipeline;
              const series = {};
              for (const [sensor, points] of p.series) series[sensor] = [...points.keys()].sort((a, b) => a - b);
              const results = p.lastStats.topics.results;
              return { series, duplicates: p.duplicates, resultsPublished: results.published,
                       policies: results.subscribers.map((s) => s.policy), errors: p.errors,
                       demand: p.results.stats().outstandingDemand, wsUrl: p.wsUrl };
            }"""
        )
        assert state["errors"] == []
        assert state["wsUrl"] == services.ws_url.replace("http://", "ws://").removesuffix("pipeline.html")
        assert sorted(state["series"]) == SENSORS
        for sensor in SENSORS:
            assert state["series"][sensor] == list(range(history_start, history_start + 31)), sensor
        assert state["duplicates"] == 4  # replaced, not drawn twice
        # The page's own subscription, as the server sees it: drop, so it never holds Spark back.
        assert state["policies"] == ["drop"]
        assert 0 < state["demand"] <= 64

        # The legend: each sensor's newest window, as published.
        newest = {w["sensor"]: w for w in live}
        for sensor in SENSORS:
            text = page.inner_text(f'#legend [data-sensor="{sensor}"]')
            assert f"{newest[sensor]['avg']:.2f}" in text and f"n={newest[sensor]['count']}" in text, text
        # The chart: each sensor's colour is drawn (the canvas starts blank).
        drawn = page.evaluate(
            """() => {
              const canvas = document.getElementById("chart");
              const data = canvas.getContext("2d").getImageData(0, 0, canvas.width, canvas.height).data;
              const colours = ["#5eead4", "#818cf8", "#fbbf24", "#f87171"].map((c) => [1, 3, 5].map((k) => parseInt(c.slice(k, k + 2), 16)));
              const counts = colours.map(() => 0);
              for (let i = 0; i < data.length; i += 4) {
                colours.forEach(([r, g, b], k) => {
                  if (Math.abs(data[i] - r) < 8 && Math.abs(data[i + 1] - g) < 8 && Math.abs(data[i + 2] - b) < 8) counts[k]++;
                });
              }
              return counts;
            }"""
        )
        assert all(count > 100 for count in drawn), drawn

        # The stages, from the demo's stats publisher (the figures refresh five times a second).
        page.wait_for_function("document.querySelector('#st-results-topic [data-k=published]').textContent === '128'")
        spark = {key: page.inner_text(f"#st-spark [data-k={key}]") for key in ["processed", "input", "batchMs", "rows"]}
        assert spark == {"processed": "132", "input": "79.6", "batchMs": "1,217 ms", "rows": "84"}
        assert page.inner_text("#sp-batch") == "batch 29"
        sensors_card = page.inner_text("#st-sensors")
        sensors_rate = page.inner_text("#st-sensors [data-k=rate]")
        assert sensors_rate != "–" and float(sensors_rate.replace(",", "")) > 0, sensors_card  # the demo's real sensor client
        assert page.inner_text("#st-sensors [data-k=room]") == "4,096"  # no Spark: nothing holds the sensors back
        assert page.inner_text("#st-page [data-k=received]") == "128"
        topics = page.inner_text("#topics")
        assert "sensors" in topics and "results" in topics and "drop" in topics, topics
        assert page.inner_text("#status") == state["wsUrl"].rstrip("/")

        shot = tmp_path / "pipeline.png"
        page.screenshot(path=str(shot), full_page=True)
        assert shot.stat().st_size > 20_000
    finally:
        page.close()
    assert not errors, errors


def test_pipeline_page_says_when_the_server_goes(browser_context: Any, tmp_path: Path) -> None:
    pipeline = load_pipeline()
    services = pipeline.Services("127.0.0.1", 0, 0, sensor_count=1, rate=5.0)
    page = browser_context.new_page()
    try:
        assert services.ws_url, services.ws_error
        page.goto(services.ws_url)
        page.wait_for_function("window.rstreamsPipeline && window.rstreamsPipeline.statsMessages >= 1")
        # Before any window: the chart says what it waits for.
        assert page.evaluate("() => window.rstreamsPipeline.windows") == 0
        services.close()
        page.wait_for_function("document.getElementById('reconnect').hidden === false", timeout=STEP_TIMEOUT_MS)
        assert page.get_attribute("#status-dot", "class") == "dot off"
    finally:
        page.close()
        services.close()

