"""The client commands stop at Ctrl-C or SIGTERM with the status shells report (128 + the signal).

``sub``, ``pub URL NAME`` and ``stats`` each run their work under one
watcher (``stop_at_signal``): the signal cancels the work, the session says
goodbye on its way out, and the command exits 130 for SIGINT and 143 for
SIGTERM, with nothing on stderr; ``pub`` does not claim it published, but
once it sent lines it says how many, as for a lost connection, so that a
user knows where to start again.
Each command is signalled only once it is visibly at work (it printed), so
that the watcher, not the interpreter's default handler, is what answers:
SIGTERM before it would end the process by the signal itself (-15).
"""

from __future__ import annotations

import signal
import subprocess

import pytest

from ._support import OutputLines, ServeProcess, rstreams, start, stop

pytestmark = pytest.mark.timeout(60)

SIGNALS = [(signal.SIGINT, 130), (signal.SIGTERM, 143)]


def _stopped_at_work(process: subprocess.Popen[bytes], signum: int, lines: int = 1) -> tuple[int, bytes]:
    try:
        OutputLines(process.stdout).readlines(lines)  # type: ignore[arg-type]
        status = stop(process, signum)
        assert process.stderr is not None
        return status, process.stderr.read()
    finally:
        stop(process)
        for stream in (process.stdin, process.stdout, process.stderr):
            if stream is not None:
                stream.close()


@pytest.mark.parametrize("signum, status", SIGNALS, ids=["SIGINT", "SIGTERM"])
def test_sub(demo_server: ServeProcess, signum: int, status: int) -> None:
    subscriber = start("sub", demo_server.url, "ticker?interval=0.01", "--format", "msgpack")
    assert _stopped_at_work(subscriber, signum, lines=2) == (status, b"")


@pytest.mark.parametrize("signum, status", SIGNALS, ids=["SIGINT", "SIGTERM"])
def test_pub_into_a_running_server(demo_server: ServeProcess, signum: int, status: int) -> None:
    # The demo's echo sends each line back: once one came back, pub is
    # connected and reading its (still open) standard input.
    publisher = start("pub", demo_server.url, "echo?source=", stdin=subprocess.PIPE)
    assert publisher.stdin is not None
    publisher.stdin.write(b"hello\n")
    publisher.stdin.flush()
    said = f"rstreams: stopped by {signum.name}: 1 line sent to echo?source= before it, none of them confirmed\n"
    assert _stopped_at_work(publisher, signum) == (status, said.encode())


@pytest.mark.parametrize("signum, status", SIGNALS, ids=["SIGINT", "SIGTERM"])
def test_stats(demo_server: ServeProcess, signum: int, status: int) -> None:
    watcher = start("stats", demo_server.url, "--interval", "0.05")
    assert _stopped_at_work(watcher, signum) == (status, b"")


def test_the_server_is_unharmed(demo_server: ServeProcess) -> None:
    assert rstreams("sub", demo_server.url, "range?count=1", "--format", "hex").returncode == 0
