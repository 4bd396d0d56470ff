"""Accepting when file descriptors run out: one log line, back-off, recovery.

The server runs in a subprocess whose open-file limit is lowered with
``resource.setrlimit`` before it starts, so that the test can exhaust it
with a few dozen connections from this process.
"""

from __future__ import annotations

import resource
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rstreams._accept import FIRST_BACKOFF, MAX_BACKOFF
from rstreams.protocol import Goodbye, Hello, MessageDecoder, encode

ROOT = Path(__file__).resolve().parents[2]
# Far below what the test opens, and enough for Python and trio to start.
NOFILE = 48
CONNECTIONS = 80
BOUND = 30.0  # seconds any one step may take before the test gives up


def lowered_limit() -> None:  # runs in the child, before exec
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    resource.setrlimit(resource.RLIMIT_NOFILE, (NOFILE, hard))


def read_hello(sock: socket.socket, timeout: float) -> bool:
    """Whether the server's hello arrives within ``timeout`` (it is accepted)."""
    sock.settimeout(timeout)
    decoder = MessageDecoder()
    try:
        while True:
            data = sock.recv(4096)
            if not data:
                return False
            decoder.feed(data)
            if any(isinstance(message, Hello) for message in decoder):
                return True
    except TimeoutError:
        return False


def test_running_out_of_descriptors_logs_once_backs_off_and_recovers(tmp_path: Path) -> None:
    log = (tmp_path / "stderr").open("w+b")
    server = subprocess.Popen(
        [sys.executable, "-m", "rstreams", "serve", "rstreams.demo:app", "--tcp", "127.0.0.1:0"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=log,
        preexec_fn=lowered_limit,
    )
    clients: list[socket.socket] = []
    try:
        assert server.stdout is not None
        line = server.stdout.readline().decode()
        assert line.startswith("rstreams: serving"), line
        port = int(line.rsplit(":", 1)[1])
        for _ in range(CONNECTIONS):
            client = socket.create_connection(("127.0.0.1", port), timeout=BOUND)
            client.sendall(encode(Hello()))
            clients.append(client)
        # The first ones are served; then the server runs out of descriptors
        # and the rest wait in the listen backlog.
        assert read_hello(clients[0], BOUND)
        assert not read_hello(clients[-1], 1.0)
        # A few seconds of failed accepts, backing off ...
        time.sleep(2.0)
        # ... then descriptors free up: the waiting clients get served.
        for client in clients[: CONNECTIONS // 2 + 10]:
            client.close()
        waiting = clients[CONNECTIONS // 2 + 10 :]
        assert read_hello(waiting[-1], BOUND + MAX_BACKOFF)
        # The server is well: a new client is served in full.
        with socket.create_connection(("127.0.0.1", port), timeout=BOUND) as fresh:
            fresh.sendall(encode(Hello()) + encode(Goodbye(reason="bye")))
            fresh.settimeout(BOUND)
            received = b""
            while chunk := fresh.recv(4096):
                received += chunk
            decoder = MessageDecoder()
            decoder.feed(received)
            assert list(decoder)[-1] == Goodbye(reason="goodbye")
    finally:
        for client in clients:
            client.close()
        server.send_signal(signal.SIGINT)
        try:
            server.wait(BOUND)
        except subprocess.TimeoutExpired:  # pragma: no cover - only on failure
            server.kill()
            server.wait()
        if server.stdout is not None:
            server.stdout.close()
    log.seek(0)
    stderr = log.read().decode()
    log.close()
    assert "Traceback" not in stderr, stderr
    assert stderr.count("cannot accept connections: EMFILE (Too many open files)") == 1, stderr
    assert stderr.count("accepting connections again after") == 1, stderr


@pytest.mark.parametrize("failures", [1, 2, 3, 10, 100])
def test_back_off_doubles_up_to_its_bound(failures: int) -> None:
    import errno

    import trio

    from rstreams._accept import _Backoff

    async def run() -> list[float]:
        backoff = _Backoff(None)  # type: ignore[arg-type]
        error = OSError(errno.EMFILE, "Too many open files")
        delays = [backoff.failed(error) for _ in range(failures)]
        backoff.succeeded()
        delays.append(backoff.failed(error))
        return delays

    delays = trio.run(run)
    expected = [min(FIRST_BACKOFF * 2**index, MAX_BACKOFF) for index in range(failures)]
    assert delays[:-1] == pytest.approx(expected)
    assert delays[-1] == FIRST_BACKOFF  # a new run starts from the beginning
