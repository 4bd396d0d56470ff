"""What the benchmark scripts read of a process and of loopback, written once
(and the one rule their latency percentiles are read with).

Pure standard library, so that a script may import it before it imports
``rstreams`` from another checkout (``ab_stream.py ROOT``).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

__all__ = ["cpu_seconds", "free_port", "rss_bytes", "serve_checkout", "wait_listening"]


def free_port() -> int:
    """A loopback TCP port free a moment ago (for a server told to bind it)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def cpu_seconds(pid: int) -> float:
    """User plus system CPU of ``pid`` so far, from /proc (in clock ticks: 10 ms here)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Costs:
    """Wall time, this process's CPU and a server's CPU, from now: what an
    A/B script divides by its elements or round trips. ``taken()`` gives
    the three (seconds) so far."""

    def __init__(self, server_pid: int) -> None:
        self._pid = server_pid
        self._start = time.perf_counter(), time.process_time(), cpu_seconds(server_pid)

    def taken(self) -> tuple[float, float, float]:
        wall, client, server = self._start
        return time.perf_counter() - wall, time.process_time() - client, cpu_seconds(self._pid) - server


def rss_bytes(pid: int) -> int:
    """The resident memory of ``pid`` (VmRSS), 0 once it has none (exiting)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def serve_checkout(root: str, app: str, *options: str) -> tuple[subprocess.Popen[bytes], int]:
    """``rstreams serve APP --tcp 127.0.0.1:PORT OPTIONS`` with the rstreams
    of the checkout at ``root`` (on ``PYTHONPATH``, and run from there), on a
    free loopback port, its output discarded: the process and the port. The
    A/B scripts compare checkouts this way; see ``wait_listening``."""
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "rstreams", "serve", app, "--tcp", f"127.0.0.1:{port}", *options],
        env=dict(os.environ, PYTHONPATH=root),
        cwd=root,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return server, port


def wait_listening(port: int, timeout: float = 10.0) -> None:
    """Return once something accepts on 127.0.0.1:``port`` (a server just
    started); raise ``OSError`` after ``timeout`` seconds of refusals."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection(("127.0.0.1", port)).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def percentiles(values: list[float]) -> dict[str, float]:
    """p50, p90, p99, p99.9 and max of ``values`` (the value at that rank
    of the sorted list, no interpolation), and ``n``."""
    ordered = sorted(values)

    def at(q: float) -> float:
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    return {"p50": at(0.5), "p90": at(0.9), "p99": at(0.99), "p999": at(0.999), "max": ordered[-1], "n": len(ordered)}
