"""What the benchmark scripts read of a process and of loopback, written once.

Pure standard library, so that a script may import it before it imports
``rstreams`` from another checkout (``ab_stream.py ROOT``).
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

__all__ = ["cpu_seconds", "free_port", "rss_bytes"]


def free_port() -> int:
    """A loopback TCP port free a moment ago (for a server told to bind it)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def cpu_seconds(pid: int) -> float:
    """User plus system CPU of ``pid`` so far, from /proc (in clock ticks: 10 ms here)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_bytes(pid: int) -> int:
    """The resident memory of ``pid`` (VmRSS), 0 once it has none (exiting)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0
