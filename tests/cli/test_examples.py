"""The examples as a user runs them: Ctrl-C leaves quietly, a closed pipe is a normal end.

Each example runs as a script from the repository root against the demo app
(``rstreams serve examples.demo:app``, the ``demo_server`` fixture); "quietly"
means the status shells expect (130 for Ctrl-C) and no traceback.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from ._support import COMMAND_TIMEOUT, ROOT, OutputLines, ServeProcess, rstreams

EXAMPLES = ROOT / "examples"
EXIT_INTERRUPTED = 130


@contextmanager
def example(args: Sequence[str], stdin: int | None = subprocess.DEVNULL) -> Iterator[subprocess.Popen[bytes]]:
    process = subprocess.Popen(
        [sys.executable, *args], cwd=ROOT, stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        yield process
    finally:
        if process.poll() is None:
            process.kill()
        process.wait()
        for stream in (process.stdin, process.stdout, process.stderr):
            if stream is not None:
                stream.close()


def interrupt(process: subprocess.Popen[bytes]) -> tuple[int, bytes]:
    """Ctrl-C; the exit status and stderr (a hang is a failure, not a wait)."""
    process.send_signal(signal.SIGINT)
    status = process.wait(timeout=COMMAND_TIMEOUT)
    assert process.stderr is not None
    return status, process.stderr.read()


def test_tour_into_a_closed_pipe_ends_cleanly() -> None:
    # What ``python examples/tour.py | head -1`` meets once head has left.
    reader, writer = os.pipe()
    os.close(reader)
    try:
        result = subprocess.run(
            [sys.executable, str(EXAMPLES / "tour.py")], cwd=ROOT, stdout=writer, stderr=subprocess.PIPE, timeout=60
        )
    finally:
        os.close(writer)
    assert result.returncode == 0, result.stderr
    assert result.stderr == b""


def test_chat_leaves_on_ctrl_c_without_waiting_for_enter(demo_server: ServeProcess) -> None:
    with example([str(EXAMPLES / "chat.py"), "alice", demo_server.url], stdin=subprocess.PIPE) as chat:
        assert chat.stdin is not None and chat.stdout is not None
        chat.stdin.write(b"hello from the test\n")
        chat.stdin.flush()
        # Our line came back from the room: connected, and now blocked
        # reading the next line from a stdin that stays open.
        lines = OutputLines(chat.stdout)
        deadline = time.monotonic() + COMMAND_TIMEOUT
        while lines.readline(max(0.0, deadline - time.monotonic())) != b"alice: hello from the test":
            pass
        status, stderr = interrupt(chat)
    assert status == EXIT_INTERRUPTED, stderr
    assert b"Traceback" not in stderr


def test_chat_has_a_real_help() -> None:
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / "chat.py"), "--help"], cwd=ROOT, capture_output=True, timeout=COMMAND_TIMEOUT
    )
    assert result.returncode == 0
    assert result.stdout.startswith(b"usage: chat.py [-h] name [url]")
    for word in (b"tcp://", b"ws://", b"wss://", b"Ctrl-C", b"rstreams demo"):
        assert word in result.stdout, word


def test_quickstart_server_stops_quietly_on_ctrl_c() -> None:
    with example([str(EXAMPLES / "quickstart_server.py"), "0"]) as server:
        assert server.stdout is not None
        assert OutputLines(server.stdout).readline().startswith(b"serving on tcp://127.0.0.1:")
        status, stderr = interrupt(server)
    assert (status, stderr) == (EXIT_INTERRUPTED, b"")


def test_sensors_stop_quietly_on_ctrl_c(demo_server: ServeProcess) -> None:
    with example([str(EXAMPLES / "sensors.py"), demo_server.url, "--rate", "50"]) as sensors:
        # Readings are flowing into the topic once a subscriber sees one.
        reading = rstreams("sub", demo_server.url, "sensors?policy=latest", "--format", "msgpack", "--count", "1")
        assert reading.returncode == 0 and b'"sensor"' in reading.stdout, reading.stderr
        status, stderr = interrupt(sensors)
    assert (status, stderr) == (EXIT_INTERRUPTED, b"")


def test_epoxy_calc_server_stops_quietly_on_ctrl_c() -> None:
    with example(["-m", "examples.epoxy_calc", "serve", "127.0.0.1:0"]) as server:
        assert server.stdout is not None
        assert OutputLines(server.stdout).readline().startswith(b"serving examples.calc.Calc on epoxy://")
        status, stderr = interrupt(server)
    assert (status, stderr) == (EXIT_INTERRUPTED, b"")
