"""``rstreams serve --metrics HOST:PORT``: the operator's HTTP listener of
``/healthz``, ``/stats`` and ``/metrics``, next to TCP and a bridge's listener."""

from __future__ import annotations

import json
import subprocess
import urllib.request
from pathlib import Path

from ._support import COMMAND_TIMEOUT, OutputLines, ServeProcess, rstreams, start, stop


def fetch(url: str) -> tuple[int, str, bytes]:
    with urllib.request.urlopen(url, timeout=COMMAND_TIMEOUT) as response:
        return response.status, response.headers["Content-Type"], response.read()


def test_serve_with_metrics_reports_tcp_and_bridge_figures(tmp_path: Path) -> None:
    with open(tmp_path / "stderr.log", "wb") as log:
        process = start(
            "serve", "examples.demo:app", "--tcp", "127.0.0.1:0", "--emp", "127.0.0.1:0", "--metrics", "127.0.0.1:0", stderr=log
        )
    try:
        output = OutputLines(process.stdout)  # type: ignore[arg-type]
        lines = [line.decode() for line in output.readlines(3)]
        tcp_url = next(line.rsplit(" ", 1)[1] for line in lines if " on tcp://" in line)
        emp_url = next(line.rsplit(" ", 1)[1] for line in lines if " on emp://" in line)
        assert lines[2].startswith("rstreams: metrics on http://127.0.0.1:") and lines[2].endswith("/metrics")
        metrics_url = lines[2].rsplit(" ", 1)[1]
        base = metrics_url.removesuffix("/metrics")
        assert rstreams("sub", tcp_url, "range?count=25", "--format", "hex").returncode == 0
        assert rstreams("sub", emp_url, "range?count=3", "--format", "hex").returncode == 0

        assert fetch(base + "/healthz")[::2] == (200, b"ok\n")
        status, kind, body = fetch(base + "/stats")
        statistics = json.loads(body)
        assert status == 200 and kind == "application/json"
        assert statistics["transports"]["tcp"]["elements_sent"] == 25
        assert statistics["transports"]["tcp"]["sessions_opened"] == 1
        assert statistics["bridges"]["emp"]["connections"] == 0  # the sub has left
        assert {topic["name"] for topic in statistics["topics"]} == {"chat", "sensors"}
        status, kind, text = fetch(metrics_url)
        assert kind.startswith("text/plain; version=0.0.4")
        assert b'\nrstreams_elements_sent_total{transport="tcp"} 25\n' in text
        assert b'\nrstreams_bridge_connections{bridge="emp"} 0\n' in text
        assert stop(process) == 0
    finally:
        if process.poll() is None:
            process.kill()
        process.wait()
        assert process.stdout is not None
        process.stdout.close()


def test_pub_takes_metrics_too(tmp_path: Path) -> None:
    args = ["pub", "--serve", "lines", "--tcp", "127.0.0.1:0", "--metrics", "127.0.0.1:0"]
    with ServeProcess.start(args, tmp_path / "log", stdin=subprocess.PIPE) as server:
        line = server.output.readline().decode()
        assert line.startswith("rstreams: metrics on http://127.0.0.1:"), line
        base = line.rsplit(" ", 1)[1].removesuffix("/metrics")
        assert fetch(base + "/healthz")[::2] == (200, b"ok\n")
        assert json.loads(fetch(base + "/stats")[2])["totals"]["sessions"] == 0


def test_stats_and_metrics_cover_every_bridge(tmp_path: Path) -> None:
    # Every installed bridge's server reports its connections; a scrape with
    # all of them listening once crashed the server (Relink's had none).
    bridges = {"emp": "--emp", "epoxy": "--epoxy", "mm2": "--micromsg2", "relink": "--relink"}
    args = ["serve", "rstreams.demo:app", "--tcp", "127.0.0.1:0", "--metrics", "127.0.0.1:0"]
    for option in bridges.values():
        args += [option, "127.0.0.1:0"]
    with open(tmp_path / "stderr.log", "wb") as log:
        process = start(*args, stderr=log)
    try:
        output = OutputLines(process.stdout)  # type: ignore[arg-type]
        lines = [line.decode() for line in output.readlines(2 + len(bridges))]
        metrics_url = next(line.rsplit(" ", 1)[1] for line in lines if " metrics on " in line)
        relink_url = next(line.rsplit(" ", 1)[1] for line in lines if " on relink://" in line)
        assert rstreams("sub", relink_url, "range?count=3", "--format", "hex").returncode == 0
        base = metrics_url.removesuffix("/metrics")
        for _ in range(2):
            status, _, body = fetch(base + "/stats")
            assert status == 200
            assert set(json.loads(body)["bridges"]) == set(bridges)
            status, _, text = fetch(metrics_url)
            assert status == 200
            for name in bridges:
                assert f'rstreams_bridge_connections{{bridge="{name}"}}'.encode() in text
        assert fetch(base + "/healthz")[::2] == (200, b"ok\n")
        assert stop(process) == 0
    finally:
        if process.poll() is None:
            process.kill()
        process.wait()
        assert process.stdout is not None
        process.stdout.close()
    assert b"Traceback" not in (tmp_path / "stderr.log").read_bytes()
