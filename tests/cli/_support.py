"""Helpers for the command-line tests: run ``rstreams`` as a user would.

The console script is the one installed next to the running interpreter, and
commands run with the repository root as their working directory, so
``rstreams serve examples.demo:app`` is tested exactly as documented (not
through ``python -m``). Every wait has a deadline.
"""

from __future__ import annotations


import os
import re
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import IO, Any

import trio

ROOT = Path(__file__).resolve().parents[2]
RSTREAMS = str(Path(sys.executable).parent / "rstreams")

#: Upper bound for a command that should finish at once (start-up included).
COMMAND_TIMEOUT = 30.0
#: Upper bound for a server's graceful shutdown in the tests: the peers here
#: answer goodbye at once, so anything close to this is a bug.
SHUTDOWN_TIMEOUT = 10.0

SERVING_LINE = re.compile(
    r"^rstreams: serving (?P<label>.+) on (?P<url>(?P<scheme>tcp|tls|ws|wss)://(?P<host>.+):(?P<port>\d+)/?)$"
)


def rstreams(*args: str, input: bytes | None = None, cwd: Path = ROOT, timeout: float = COMMAND_TIMEOUT) -> subprocess.CompletedProcess[bytes]:
    """Run ``rstreams ARGS`` to completion and capture its output."""
    return subprocess.run([RSTREAMS, *args], input=input, cwd=cwd, capture_output=True, timeout=timeout)


def start(*args: str, stdin: Any = subprocess.DEVNULL, stderr: Any = subprocess.PIPE, cwd: Path = ROOT) -> subprocess.Popen[bytes]:
    """Start ``rstreams ARGS`` with stdout piped (read it with :class:`OutputLines`)."""
    return subprocess.Popen([RSTREAMS, *args], cwd=cwd, stdin=stdin, stdout=subprocess.PIPE, stderr=stderr)


def stop(process: subprocess.Popen[bytes], signum: int = signal.SIGINT, timeout: float = SHUTDOWN_TIMEOUT) -> int:
    """Send ``signum`` and wait for the exit status (kill after ``timeout``)."""
    if process.poll() is None:
        process.send_signal(signum)
        try:
            return process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            raise
    return process.returncode


class OutputLines:
    """Lines of a child's stdout, read with a deadline (never blocking past it)."""

    def __init__(self, stream: IO[bytes]) -> None:
        self._fd = stream.fileno()
        self._buffer = b""
        self.eof = False

    def readline(self, timeout: float = COMMAND_TIMEOUT) -> bytes:
        """The next line without its newline; raises TimeoutError or EOFError."""
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buffer:
            if self.eof:
                raise EOFError(f"output ended; unterminated rest: {self._buffer!r}")
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"no complete line within {timeout} s; got {self._buffer!r}")
            ready, _, _ = select.select([self._fd], [], [], remaining)
            if ready:
                chunk = os.read(self._fd, 65536)
                if chunk:
                    self._buffer += chunk
                else:
                    self.eof = True
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line

    def readlines(self, count: int, timeout: float = COMMAND_TIMEOUT) -> list[bytes]:
        deadline = time.monotonic() + timeout
        return [self.readline(max(0.0, deadline - time.monotonic())) for _ in range(count)]

    def rest(self, timeout: float = COMMAND_TIMEOUT) -> list[bytes]:
        """Every remaining line, up to end of output."""
        lines: list[bytes] = []
        deadline = time.monotonic() + timeout
        while True:
            try:
                lines.append(self.readline(max(0.0, deadline - time.monotonic())))
            except EOFError:
                if self._buffer:
                    lines.append(self._buffer)
                    self._buffer = b""
                return lines


class ServeProcess:
    """A running ``rstreams serve`` (or ``pub``) and the listeners it announced."""

    def __init__(self, process: subprocess.Popen[bytes], log_path: Path) -> None:
        self.process = process
        self.log_path = log_path
        assert process.stdout is not None
        self.output = OutputLines(process.stdout)
        self.urls: list[str] = []

    @property
    def url(self) -> str:
        return self.urls[0]

    @property
    def port(self) -> int:
        return int(self.url.rstrip("/").rsplit(":", 1)[1])

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_serving(self, listeners: int = 1, timeout: float = COMMAND_TIMEOUT) -> list[str]:
        """Read the ``rstreams: serving ... on URL`` lines; the URLs."""
        deadline = time.monotonic() + timeout
        while len(self.urls) < listeners:
            try:
                line = self.output.readline(max(0.0, deadline - time.monotonic())).decode()
            except (EOFError, TimeoutError) as exc:
                raise AssertionError(f"no serving line ({exc}); stderr:\n{self.log()}") from None
            match = SERVING_LINE.match(line)
            assert match, f"unexpected output line {line!r}"
            self.urls.append(match["url"])
        return self.urls

    def stop(self, signum: int = signal.SIGINT) -> int:
        return stop(self.process, signum)

    @classmethod
    @contextmanager
    def start(
        cls,
        args: Sequence[str],
        log_path: Path,
        *,
        stdin: Any = subprocess.DEVNULL,
        listeners: int = 1,
        cwd: Path = ROOT,
    ) -> Iterator[ServeProcess]:
        """Start the command, wait for its serving lines, stop it at the end."""
        with open(log_path, "wb") as log:
            # stderr goes to a file: a pipe nobody reads could fill up (the
            # demo's ``fail`` logs a traceback per subscription) and stall it.
            process = start(*args, stdin=stdin, stderr=log, cwd=cwd)
        server = cls(process, log_path)
        try:
            server.wait_serving(listeners)
            yield server
        finally:
            if process.poll() is None:
                try:
                    stop(process)
                except subprocess.TimeoutExpired:
                    pass
            for stream in (process.stdin, process.stdout):
                if stream is not None:
                    stream.close()


def free_port() -> int:
    """A port nothing listens on (bound, then released)."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def cut_upstream_after(host: str, port: int, nbytes: int) -> AbstractContextManager[int]:
    """A relay on 127.0.0.1 to ``host:port`` for one connection, closed both
    ways once ``nbytes`` went up (a connection that drops mid-transfer);
    yields its port."""
    return _cutting_relay(host, port, nbytes, downstream=False)


def cut_downstream_after(host: str, port: int, nbytes: int) -> AbstractContextManager[int]:
    """A relay on 127.0.0.1 to ``host:port`` for one connection, reset both
    ways (RST) once ``nbytes`` came down from the server (a reader whose
    connection drops mid-stream, with more on its way); yields its port."""
    return _cutting_relay(host, port, nbytes, downstream=True)


@contextmanager
def _cutting_relay(host: str, port: int, nbytes: int, *, downstream: bool) -> Iterator[int]:
    # One connection relayed, carried whole the other way, and cut after
    # nbytes in the direction named: by FIN up, by RST down.
    import socket
    import struct
    import threading

    front = socket.create_server(("127.0.0.1", 0))

    def relay() -> None:
        client, _ = front.accept()
        upstream = socket.create_connection((host, port))
        source, sink = (upstream, client) if downstream else (client, upstream)

        def other_way() -> None:
            try:
                while data := sink.recv(65536):
                    source.sendall(data)
            except OSError:
                pass

        threading.Thread(target=other_way, daemon=True).start()
        carried = 0
        try:
            while carried < nbytes and (data := source.recv(65536)):
                sink.sendall(data[: nbytes - carried])
                carried += len(data)
        except OSError:
            pass
        for end in (client, upstream):
            try:
                if downstream:
                    end.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                end.shutdown(socket.SHUT_RDWR)  # (wakes the other thread's recv)
            except OSError:
                pass
            end.close()

    cutter = threading.Thread(target=relay, daemon=True)
    cutter.start()
    with front:
        yield front.getsockname()[1]
    cutter.join(10)


class StepSink:
    # What the pub publishers ask of an rstreams.Sink: demand, and
    # send_some, which here takes at most ``take`` elements a step (as a
    # full queue would). No demand left ends the publisher with
    # trio.EndOfChannel, for a test to catch.
    cancelled = False  # (as a Sink's: never cancelled by a subscriber here)

    def __init__(self, demand: int, take: int) -> None:
        self.demand = demand
        self.take = take
        self.steps: list[list[bytes]] = []

    async def wait_demand(self) -> None:
        await trio.lowlevel.checkpoint()
        if not self.demand:
            raise trio.EndOfChannel  # (ends the test's publish: nothing more asked)

    async def send_some(self, values: list[bytes]) -> int:
        await trio.lowlevel.checkpoint()
        taken = values[: self.take]
        self.steps.append(taken)
        self.demand -= len(taken)
        return len(taken)
