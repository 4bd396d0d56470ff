"""A smoke test of the benchmark harness (bench/), so that it does not rot.

It runs each piece once on tiny inputs: the raw ceiling server and consumer,
the rstreams worker's cases against ``rstreams serve``, and the report. It
asserts only that they work and count right, never how fast they are:
benchmarks are not tests. rsocket-py and matplotlib are not test
dependencies; the parts that need them are skipped without them.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"
sys.path.insert(0, str(BENCH))

import _raw  # noqa: E402
import run as bench_run  # noqa: E402


@pytest.fixture(scope="module")
def servers() -> Iterator[dict[str, bench_run.Server]]:
    started: dict[str, bench_run.Server] = {}
    try:
        started["rstreams"] = bench_run.Server(
            [sys.executable, "-m", "rstreams", "serve", "_bench_app:app", "--app-dir", str(BENCH), "--tcp", "127.0.0.1:0"],
            lambda line: int(line.rsplit(":", 1)[1]),
        )
        started["raw"] = bench_run.Server([sys.executable, str(BENCH / "_raw.py"), "0"], int)
        yield started
    finally:
        for server in started.values():
            server.close()


@pytest.mark.parametrize("system", ["raw", "rstreams"])
def test_the_raw_consumer_counts_every_element(servers: dict[str, bench_run.Server], system: str) -> None:
    port = servers[system].port
    assert _raw.consume("127.0.0.1", port, "range?count=70000")["elements"] == 70000
    small = _raw.consume("127.0.0.1", port, "blob?count=300&size=8")
    assert (small["elements"], small["bytes"]) == (300, 2400)
    large = _raw.consume("127.0.0.1", port, "blob?count=3&size=100000")
    assert (large["elements"], large["bytes"]) == (3, 300000)


@pytest.mark.parametrize("system", ["raw", "rstreams"])
@pytest.mark.parametrize("concurrency", [1, 7])
def test_the_raw_round_trip_client_completes_every_round_trip(
    servers: dict[str, bench_run.Server], system: str, concurrency: int
) -> None:
    result = _raw.round_trips("127.0.0.1", servers[system].port, 50, concurrency)
    assert result["elements"] == 50 and result["seconds"] > 0


def test_the_rstreams_worker_runs_every_case(servers: dict[str, bench_run.Server]) -> None:
    server = servers["rstreams"]
    worker = bench_run.Worker("rstreams")
    try:
        port = server.port
        stream = worker.run(case="stream", port=port, name="blob?count=1000&size=8", prefetch=64)
        assert (stream["elements"], stream["bytes"]) == (1000, 8000)
        each = worker.run(case="stream", port=port, name="range?count=500", prefetch=64, mode="each")
        assert each["elements"] == 500
        assert worker.run(case="round_trips", port=port, total=10, concurrency=3)["elements"] == 10
        assert worker.run(case="round_trips", port=port, total=10, concurrency=3, mode="iterate")["elements"] == 10
        assert len(worker.run(case="latency", port=port, rate=2000, count=20)["latencies_us"]) == 20
        assert worker.run(case="idle_memory", port=port, n=5)["bytes_per_subscription"] > 0
        slow = worker.run(case="slow_subscribers", port=port, server_pid=server.pid, n=4, connections=2, seconds=0.5)
        assert slow["received"] > 0 and slow["samples"]
        assert worker.run(case="many_streams", port=port, n=20)["opened"] == 20
        assert worker.run(case="many_connections", port=port, n=5)["opened"] == 5
    finally:
        worker.close()


def test_the_report_is_written(tmp_path: Path) -> None:
    cases = bench_run.make_cases(0.001)
    for round_index in range(2):
        for case in cases:
            for system in case.commands:
                case.results.setdefault(system, []).append(1000.0 + round_index + len(system))
    extra = {
        "rounds": 2,
        "quick": True,
        "elapsed": 1.0,
        "latency_rounds": [bench_run.percentiles([50.0, 60.0, 70.0, 900.0])],
        "latencies_us": [50.0, 60.0, 70.0, 900.0],
        "idle_memory": {"bytes_per_subscription": 1000.0, "n": 10},
        "slow_subscribers": {"samples": [(0.5, 2**20), (1.0, 2**20), (2.0, 2**20)], "received": 10, "seconds": 2.0},
        "many_streams": {"opened": 10, "elements": 1000, "seconds": 0.1},
        "many_connections": {"opened": 10, "elements": 1000, "seconds": 0.1},
    }
    out = tmp_path / "PERFORMANCE.md"
    bench_run.write_report(cases, extra, out)
    text = out.read_text()
    assert "| 1 KiB elements |" in text and "rsocket-py" in text and "## Latency" in text
    assert (tmp_path / "performance" / "results.json").exists()


def test_rsocket_side_runs_when_installed() -> None:
    pytest.importorskip("rsocket")
    server = bench_run.Server([sys.executable, str(BENCH / "_rsocket.py"), "0"], int)
    worker = bench_run.Worker("rsocket")
    try:
        stream = worker.run(case="stream", port=server.port, name="blob?count=100&size=8", prefetch=16)
        assert stream["elements"] == 100
        assert worker.run(case="round_trips", port=server.port, total=10, concurrency=2)["elements"] == 10
    finally:
        worker.close()
        server.close()


def test_the_runner_documents_its_command() -> None:
    result = subprocess.run([sys.executable, str(BENCH / "run.py"), "--help"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and "--quick" in result.stdout
