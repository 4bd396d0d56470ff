"""``--log-level`` / ``--log-format`` (``cli/_common.configure_logging``), as an
operator runs them: ``rstreams serve`` in a subprocess, its stderr read back."""

from __future__ import annotations

import json
import time
from pathlib import Path

from ._support import COMMAND_TIMEOUT, ServeProcess, rstreams


def wait_for_log(server: ServeProcess, text: str) -> str:
    deadline = time.monotonic() + COMMAND_TIMEOUT
    while text not in server.log():
        assert time.monotonic() < deadline, f"{text!r} not logged; stderr:\n{server.log()}"
        time.sleep(0.05)
    return server.log()


def test_serve_log_format_json_writes_one_object_per_line(tmp_path: Path) -> None:
    args = ["serve", "examples.demo:app", "--tcp", "127.0.0.1:0", "--log-level", "info", "--log-format", "json"]
    with ServeProcess.start(args, tmp_path / "stderr.log") as server:
        assert rstreams("sub", server.url, "range?count=2", "--format", "hex").returncode == 0
        bad = rstreams("sub", server.url, "range?count=many", "--format", "hex")
        assert bad.returncode == 1 and b"not an integer" in bad.stderr
        wait_for_log(server, '"bad_input"')
        assert server.stop() == 0
    lines = server.log().splitlines()
    entries = [json.loads(line) for line in lines]  # every line is one JSON object
    by_event: dict[str, list[dict[str, object]]] = {}
    for entry in entries:
        by_event.setdefault(str(entry.get("event")), []).append(entry)
    assert len(by_event["session_open"]) == len(by_event["session_close"]) == 2
    for entry in by_event["session_open"]:
        assert entry["transport"] == "tcp" and str(entry["peer"]).startswith("127.0.0.1:") and entry["level"] == "info"
    [bad_input] = by_event["bad_input"]
    assert bad_input["publisher"] == "range?count=many" and "exception" not in bad_input
    assert "Traceback" not in server.log()
    # info: nothing per stream (that is debug), nothing per element.
    assert "stream_subscribe" not in by_event


def test_serve_log_level_debug_adds_the_streams_in_text(tmp_path: Path) -> None:
    args = ["serve", "examples.demo:app", "--tcp", "127.0.0.1:0", "--log-level", "debug"]
    with ServeProcess.start(args, tmp_path / "stderr.log") as server:
        assert rstreams("sub", server.url, "range?count=500", "--format", "hex").returncode == 0
        log = wait_for_log(server, "session closed")
    assert "subscribe 'range?count=500'" in log and "completed" in log
    assert len(log.splitlines()) < 20  # 500 elements, a handful of lines


def test_every_command_with_log_level_takes_log_format() -> None:
    for command in ("serve", "sub", "pub"):
        result = rstreams(command, "--help")
        assert b"--log-format {text,json}" in result.stdout, command
