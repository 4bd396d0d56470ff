"""``rstreams sub``: ``--format jsonl``, ``--timeout``, ``--idle-timeout`` and ``RSTREAMS_URL``,
against ``rstreams serve examples.demo:app`` (the ``demo_server`` fixture)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from typing import Any

import pytest

from ._support import COMMAND_TIMEOUT, RSTREAMS, ROOT, ServeProcess, free_port, rstreams

EXIT_TIMEOUT = 124


def records(stdout: bytes) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stdout.splitlines()]


def test_jsonl_writes_one_envelope_per_element(demo_server: ServeProcess) -> None:
    before = time.time()
    result = rstreams("sub", demo_server.url, "range?count=3", "--format", "jsonl")
    after = time.time()
    assert result.returncode == 0, result.stderr
    envelopes = records(result.stdout)
    assert [list(envelope) for envelope in envelopes] == [["seq", "name", "size", "hex", "t"]] * 3
    assert [(e["seq"], e["name"], e["size"], e["hex"]) for e in envelopes] == [
        (i, "range?count=3", 8, "%016x" % i) for i in range(3)
    ]
    assert all(before <= e["t"] <= after for e in envelopes)


def test_jsonl_decodes_values_as_asked(demo_server: ServeProcess) -> None:
    result = rstreams("sub", demo_server.url, "ticker?interval=0.01", "--format", "jsonl", "--decode", "msgpack", "--count", "2")
    assert result.returncode == 0, result.stderr
    envelopes = records(result.stdout)
    assert [e["seq"] for e in envelopes] == [0, 1]
    assert [e["value"][0] for e in envelopes] == [0, 1]  # the ticker's own sequence numbers
    assert all(e["size"] > 0 and "hex" not in e for e in envelopes)


def test_jsonl_text_of_published_lines(tmp_path: Any) -> None:
    with ServeProcess.start(["pub", "--serve", "lines", "--tcp", "127.0.0.1:0"], tmp_path / "log", stdin=subprocess.PIPE) as server:
        assert server.process.stdin is not None
        server.process.stdin.write("one\nzwei ü\n".encode())
        server.process.stdin.close()
        result = rstreams("sub", server.url, "lines", "--format", "jsonl")
    assert result.returncode == 0, result.stderr
    assert [(e["seq"], e["value"], e["size"]) for e in records(result.stdout)] == [(0, "one", 3), (1, "zwei ü", 7)]


def test_decode_needs_jsonl(demo_server: ServeProcess) -> None:
    result = rstreams("sub", demo_server.url, "range?count=1", "--decode", "json")
    assert result.returncode == 2
    assert b"--decode is for --format jsonl" in result.stderr


def test_timeout_stops_an_endless_stream_after_printing_what_came(demo_server: ServeProcess) -> None:
    result = rstreams("sub", demo_server.url, "ticker?interval=0.05", "--format", "msgpack", "--timeout", "0.5")
    assert result.returncode == EXIT_TIMEOUT, result.stderr
    ticks = [json.loads(line) for line in result.stdout.splitlines()]
    assert ticks and [tick[0] for tick in ticks] == list(range(len(ticks)))
    assert result.stderr.startswith(b"rstreams: --timeout: 0.5 s passed, after %d elements" % len(ticks))


def test_idle_timeout_stops_when_elements_stop_coming(demo_server: ServeProcess) -> None:
    # The ticker's first tick comes at once, the next one only in a minute.
    result = rstreams("sub", demo_server.url, "ticker?interval=60", "--format", "msgpack", "--idle-timeout", "0.3")
    assert result.returncode == EXIT_TIMEOUT, result.stderr
    assert len(result.stdout.splitlines()) == 1
    assert result.stderr == b"rstreams: --idle-timeout: no element for 0.3 s, after 1 elements\n"


def test_idle_timeout_does_not_stop_a_stream_that_keeps_coming(demo_server: ServeProcess) -> None:
    result = rstreams("sub", demo_server.url, "ticker?interval=0.01", "--format", "hex", "--count", "20", "--idle-timeout", "5")
    assert result.returncode == 0, result.stderr
    assert len(result.stdout.splitlines()) == 20


def test_timeout_bounds_a_server_that_never_answers() -> None:
    # A listener that never accepts: TCP connects (the kernel's backlog),
    # and the session waits for a hello that never comes.
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        port = silent.getsockname()[1]
        result = rstreams("sub", f"tcp://127.0.0.1:{port}", "range", "--timeout", "0.3")
    assert result.returncode == EXIT_TIMEOUT, result.stderr
    assert result.stderr.startswith(b"rstreams: --timeout: 0.3 s passed")


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf", "soon"])
def test_timeouts_must_be_positive_seconds(demo_server: ServeProcess, value: str) -> None:
    for option in ("--timeout", "--idle-timeout"):
        result = rstreams("sub", demo_server.url, "range", option, value)
        assert result.returncode == 2
        assert option.encode() in result.stderr


def sub_with_environment(*args: str, url: str | None) -> subprocess.CompletedProcess[bytes]:
    environment = {key: value for key, value in os.environ.items() if key != "RSTREAMS_URL"}
    if url is not None:
        environment["RSTREAMS_URL"] = url
    return subprocess.run([RSTREAMS, "sub", *args], cwd=ROOT, env=environment, capture_output=True, timeout=COMMAND_TIMEOUT)


def test_rstreams_url_is_the_default_url(demo_server: ServeProcess) -> None:
    result = sub_with_environment("range?count=2", "--format", "hex", url=demo_server.url)
    assert (result.returncode, result.stdout) == (0, b"0000000000000000\n0000000000000001\n"), result.stderr


def test_a_url_given_wins_over_rstreams_url(demo_server: ServeProcess) -> None:
    result = sub_with_environment(demo_server.url, "range?count=1", "--format", "hex", url="tcp://127.0.0.1:1")
    assert (result.returncode, result.stdout) == (0, b"0000000000000000\n"), result.stderr


def test_without_url_or_rstreams_url_says_so(demo_server: ServeProcess) -> None:
    result = sub_with_environment("range?count=1", url=None)
    assert result.returncode == 2
    assert result.stderr == b"rstreams: no URL: give one before NAME, or set RSTREAMS_URL\n"
    # A URL without NAME is read as NAME: say what went wrong instead.
    result = sub_with_environment(demo_server.url, url=None)
    assert result.returncode == 2
    assert b"looks like a URL, and no NAME was given" in result.stderr


# ---- --json -------------------------------------------------------------------


def json_error(stderr: bytes) -> dict[str, Any]:
    """The one JSON object that ``--json`` makes of stderr (nothing else on it)."""
    lines = stderr.decode().splitlines()
    assert len(lines) == 1, stderr
    error = json.loads(lines[0])
    assert list(error) == ["error", "exit"]
    return dict(error)


def test_json_reports_a_publisher_error_as_one_object(demo_server: ServeProcess) -> None:
    result = rstreams("sub", demo_server.url, "fail?after=1", "--json", "--format", "hex")
    assert result.returncode == 1
    assert result.stdout == b"0000000000000000\n"
    error = json_error(result.stderr)
    assert error["exit"] == 1 and error["error"].startswith("publisher error: ")


def test_json_reports_a_refused_connection() -> None:
    unused_port = free_port()
    result = rstreams("sub", f"tcp://127.0.0.1:{unused_port}", "range", "--json")
    assert result.returncode == 4
    error = json_error(result.stderr)
    assert error["exit"] == 4 and error["error"].startswith(f"cannot connect to tcp://127.0.0.1:{unused_port}")


def test_json_reports_usage_errors_found_after_parsing() -> None:
    environment = {key: value for key, value in os.environ.items() if key != "RSTREAMS_URL"}
    result = subprocess.run([RSTREAMS, "sub", "range", "--json"], cwd=ROOT, capture_output=True, timeout=COMMAND_TIMEOUT, env=environment)
    assert result.returncode == 2
    assert json_error(result.stderr) == {"error": "no URL: give one before NAME, or set RSTREAMS_URL", "exit": 2}


def test_without_json_errors_stay_one_plain_line(demo_server: ServeProcess) -> None:
    result = rstreams("sub", demo_server.url, "nope")
    assert result.returncode == 1
    assert result.stderr.decode().startswith("rstreams: publisher error: ")


@pytest.mark.parametrize("command", ["sub", "pub"])
def test_a_name_that_is_not_utf8_is_a_usage_error(demo_server: ServeProcess, command: str) -> None:
    # (It died with a traceback from msgpack, over tcp:// and every bridge.)
    for url in (demo_server.url, "emp://127.0.0.1:1", "mm2://127.0.0.1:1"):
        result = rstreams(command, url, os.fsdecode(b"caf\xe9"), input=b"")
        assert result.returncode == 2, result.stderr
        assert result.stderr == b"rstreams: NAME 'caf\\udce9' is not UTF-8 text\n"
