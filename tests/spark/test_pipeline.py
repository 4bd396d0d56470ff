"""The live pipeline demo (``examples/pipeline.py``) end to end, without the browser.

Its server and sensor client run as the demo runs them; the Spark query is
the demo's own ``start_query`` on the shared test session. The results topic
must receive closed 1-second windows per sensor, and ``stats`` must show
each stage's counters and Spark's progress.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import trio

import rstreams

from .conftest import ROOT, require_spark

require_spark()

if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import examples.pipeline as pipeline  # noqa: E402
from browser.test_pipeline_page import SINK_TAGS, WINDOW_FIELDS  # noqa: E402

pytestmark = pytest.mark.timeout(240)


async def read_results(url: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    async with rstreams.open_session(url) as session:
        async with session.subscribe("results?from=earliest&until=now") as sub:
            windows = [json.loads(rstreams.decode_sequenced(raw)[1]) async for raw in sub]
        async with session.subscribe("stats?interval=0.1", prefetch=1, codec="json") as stats:
            snapshot: dict[str, Any] = await stats.__anext__()
    return windows, snapshot


def test_sensor_windows_flow_from_spark_into_the_results_topic(spark: Any, tmp_path: Path) -> None:
    services = pipeline.Services("127.0.0.1", 0, None, sensor_count=3, rate=40.0)
    query = pipeline.start_query(spark, services.url, str(tmp_path / "ckpt"), trigger="500 milliseconds")
    try:
        deadline = time.monotonic() + 90
        while services.topic_stats(pipeline.results)["published"] < 9 and time.monotonic() < deadline:
            assert query.isActive, query.exception()
            time.sleep(0.25)
        assert pipeline.record_progress(query) is not None
        windows, stats = trio.run(read_results, services.url)
    finally:
        query.stop()
        services.close()
    assert len(windows) >= 9, windows
    assert {w["sensor"] for w in windows} == {"s0", "s1", "s2"}
    for window in windows:
        assert window["end"] - window["start"] == 1
        assert window["count"] > 0 and window["min"] <= window["avg"] <= window["max"]
        assert "_batch" in window  # the sink's de-duplication tag
        # Exactly what tests/browser/test_pipeline_page.py feeds the page in Spark's stead.
        assert list(window) == WINDOW_FIELDS + SINK_TAGS, window
        assert [type(window[key]) for key in WINDOW_FIELDS] == [str, int, int, int, float, float, float], window
    # A closed window is complete: about 40 readings per sensor per second.
    full = [w["count"] for w in windows[3:]]
    assert full and max(full) >= 20, full
    sensors_stats = stats["topics"]["sensors"]
    assert sensors_stats["published"] > 0 and sensors_stats["subscribers"][0]["policy"] == "block"
    assert stats["topics"]["results"]["published"] >= 9
    assert stats["spark"]["batch"] is not None


def test_the_one_command_from_the_readme_runs_the_pipeline() -> None:
    # Its own Spark (a second JVM for ~30 s): this is what a new user runs.
    command = [sys.executable, "examples/pipeline.py", "--port", "0", "--ws-port", "0", "--windows", "4", "--duration", "150"]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=200)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.splitlines()
    assert lines[0].startswith("pipeline: rstreams on tcp://127.0.0.1:")
    assert any(line.startswith("pipeline: batch ") for line in lines), result.stdout
    done = lines[-1]
    assert done.startswith("pipeline: done; ") and int(done.split()[2]) >= 4, result.stdout
