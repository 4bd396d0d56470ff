"""``rstreams stats URL`` and ``rstreams sub URL '$stats'``: a server's
statistics from the command line (``cli/_stats``)."""

from __future__ import annotations

import json

import pytest

from rstreams.cli._stats import render_table

from ._support import ServeProcess, free_port, rstreams


def record(time: float, elements: int, bytes_sent: int) -> dict[str, object]:
    counts = {
        "sessions": 1,
        "streams": 1,
        "demand_outstanding": 1500,
        "unbounded_streams": 0,
        "bytes_received": 100,
        "bytes_sent": bytes_sent,
        "elements_sent": elements,
        "memory_bytes": 70_000,
        "publications_stopping": 0,
    }
    return {
        "time": time,
        "server": {"uptime_seconds": 3725, "accepting": True, "sessions_opened": 7, "connections_refused": 1},
        "totals": counts,
        "transports": {"tcp": {**counts, "sessions_opened": 7}},
        "sessions": [{"peer": "127.0.0.1:5000", "transport": "tcp", "age_seconds": 65, **counts, "open_streams": []}],
        "topics": [{"name": "chat", "capacity": 256, "held": 3, "published": 10, "publishers": 0, "subscribers": 2, "lag_max": 4, "lag_total": 5, "dropped": 6}],
        "bridges": {"emp": {"connections": 2, "bytes_sent": 10}},
    }


def test_the_table_shows_totals_rates_sessions_topics_and_bridges() -> None:
    first = render_table(record(100.0, 1000, 8000), None, "tcp://h:1")
    assert first.startswith("rstreams stats tcp://h:1   up 1h02m   accepting   sessions opened 7   refused 1\n")
    lines = first.splitlines()
    assert lines[2].split() == ["TRANSPORT", "SESSIONS", "STREAMS", "DEMAND", "ELEMENTS", "EL/S", "BYTES", "IN", "BYTES", "OUT", "OUT", "B/S", "MEMORY"]
    assert lines[3].split() == ["tcp", "1", "1", "1.5k", "1k", "-", "100", "8k", "-", "70k"]  # no rates yet
    assert "127.0.0.1:5000" in first and "1m05s" in first
    assert any(line.split()[:6] == ["chat", "10", "3/256", "2", "4", "6"] for line in lines)
    assert any(line.split() == ["emp", "10", "2"] for line in lines)
    second = render_table(record(102.0, 5000, 10000), record(100.0, 1000, 8000), "tcp://h:1")
    # (5000 - 1000) elements and (10000 - 8000) bytes over 2 s.
    assert second.splitlines()[3].split() == ["tcp", "1", "1", "1.5k", "5k", "2k", "100", "10k", "1k", "70k"]
    session_line = next(line for line in second.splitlines() if line.startswith("127.0.0.1:5000"))
    assert session_line.split()[5] == "2k" and session_line.split()[-1] == "70k"


def test_a_record_without_memory_figures_shows_a_dash() -> None:
    # A record from a server older than memory_bytes: the table still draws.
    old = record(100.0, 1000, 8000)
    for counts in (old["totals"], old["transports"]["tcp"], old["sessions"][0]):  # type: ignore[index]
        del counts["memory_bytes"]  # type: ignore[attr-defined]
    lines = render_table(old, None, "tcp://h:1").splitlines()
    assert lines[3].split()[-1] == "-"
    assert next(line for line in lines if line.startswith("127.0.0.1:5000")).split()[-1] == "-"


def test_stats_prints_tables_of_the_running_server(demo_server: ServeProcess) -> None:
    assert rstreams("sub", demo_server.url, "range?count=40", "--format", "hex").returncode == 0
    result = rstreams("stats", demo_server.url, "--count", "2", "--interval", "0.05")
    assert result.returncode == 0, result.stderr
    text = result.stdout.decode()
    assert "\x1b[" not in text  # not a terminal: tables one after the other
    assert text.count("rstreams stats " + demo_server.url) == 2
    tables = text.split("\n\nrstreams stats ")
    assert len(tables) == 2
    # The stats command's own session is open; the sub's 40 elements are in the totals.
    tcp_row = next(line for line in tables[1].splitlines() if line.startswith("tcp "))
    assert int(tcp_row.split()[1]) >= 1 and int(tcp_row.split()[4]) >= 40


@pytest.mark.parametrize("fmt", [["--format", "json"], ["--format", "jsonl", "--decode", "json"]])
def test_sub_prints_the_stats_records_as_json_lines(demo_server: ServeProcess, fmt: list[str]) -> None:
    # --format json: the raw records, one per line; jsonl: each in an envelope, as "value".
    result = rstreams("sub", demo_server.url, "$stats?interval=0.05", *fmt, "--count", "2")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 2
    for seq, line in enumerate(lines):
        entry = json.loads(line)
        if fmt[1] == "jsonl":
            assert entry["seq"] == seq and entry["name"] == "$stats?interval=0.05"
            entry = entry["value"]
        assert set(entry) >= {"time", "server", "totals", "transports", "sessions", "topics", "bridges"}
        assert entry["transports"]["tcp"]["sessions"] >= 1


def test_stats_without_a_server_exits_4() -> None:
    result = rstreams("stats", f"tcp://127.0.0.1:{free_port()}", "--count", "1")
    assert result.returncode == 4
    assert result.stderr.startswith(b"rstreams: cannot connect to")


def test_stats_bad_interval_is_a_usage_error() -> None:
    assert rstreams("stats", "tcp://127.0.0.1:1", "--interval", "0").returncode == 2


@pytest.mark.parametrize("scheme", ["emp", "relink", "mm2", "epoxy"])
def test_stats_over_a_bridge_is_a_usage_error_that_says_where_to_look(scheme: str) -> None:
    # Before anything connects: the bridges do not carry $stats (it said
    # "the server has no statistics", exit 1, of a server that has them).
    result = rstreams("stats", f"{scheme}://127.0.0.1:{free_port()}", "--count", "1")
    assert result.returncode == 2
    assert result.stderr.decode().startswith(f"rstreams: stats reads $stats over tcp://, tls://, ws:// or wss://, which {scheme}://")
