"""Statistics snapshots that peers ask for, shared and within a CPU budget.

A snapshot (``Server.statistics()``) walks every session and stream of the
server, so it costs O(sessions + streams), and the JSON or Prometheus text
made from it as much again. Peers can ask for one as often as they like:
every ``$stats`` stream at ``interval=0.01`` is a hundred a second, and
``/stats`` on a public WebSocket port answers anyone. Taken afresh for each,
a peer holding 200 ``$stats`` streams (1.2 MB of its budget) kept a server's
core at 100% and a bystander's round trip at 10 ms instead of 0.8; with
2,000 streams, each listed in every snapshot, it went to 28 ms (469 ms at
worst), and the work grows with the square of the streams.

So what peers ask for goes through :class:`SharedStatistics`: a snapshot is
taken afresh while the time spent taking and encoding them stays within a
budget (a :class:`~rstreams._cpu_budget.CpuBudget`: :data:`SNAPSHOT_BUDGET_BURST`
at once, refilled at :data:`SNAPSHOT_BUDGET_SHARE` of a core); beyond it,
whoever asks shares the newest one, and a ``$stats`` stream that already
sent that one waits for the budget to allow the next. An operator's scrape
or ``rstreams stats`` on a server nobody floods never meets the budget, and
always gets a fresh snapshot; a flood costs the server at most a twentieth
of a core in snapshots, however many ask. ``Server.statistics()``, called
by the application itself, is not throttled.

Each encoding a snapshot is served in (the JSON record of ``$stats`` and
``/stats``, the Prometheus text of ``/metrics``) is made once, when first
asked for, and charged to the same budget.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import trio

from ._cpu_budget import CpuBudget
from ._metrics_text import prometheus_text

__all__ = ["SNAPSHOT_BUDGET_BURST", "SNAPSHOT_BUDGET_SHARE", "Snapshot", "SharedStatistics"]

#: Seconds of CPU that snapshots may take at once, after a quiet spell.
SNAPSHOT_BUDGET_BURST = 0.1
#: The share of a core that snapshots may take over time (the bucket's refill).
SNAPSHOT_BUDGET_SHARE = 0.05


class Snapshot:
    """One statistics snapshot, with the encodings it is served in (each made once)."""

    __slots__ = ("statistics", "time", "_budget", "_record", "_metrics")

    def __init__(self, statistics: dict[str, Any], budget: CpuBudget) -> None:
        #: The snapshot (``Server.statistics()``), with ``time`` added.
        self.statistics = statistics
        #: When it was taken, in seconds since the epoch (its ``time`` key).
        self.time: float = statistics["time"]
        self._budget = budget
        self._record: bytes | None = None
        self._metrics: bytes | None = None

    def record(self) -> bytes:
        """The snapshot as one JSON object, UTF-8 (a ``$stats`` element, a ``/stats`` body)."""
        if self._record is None:
            with self._budget.spend():
                self._record = json.dumps(self.statistics, separators=(",", ":")).encode()
        return self._record

    def metrics(self) -> bytes:
        """The snapshot in the Prometheus text format (a ``/metrics`` body)."""
        if self._metrics is None:
            with self._budget.spend():
                self._metrics = prometheus_text(self.statistics).encode()
        return self._metrics


class SharedStatistics:
    """A server's snapshots as peers get them: fresh within a CPU budget, shared beyond it.

    Args:
        take: takes a snapshot (``Server.statistics``).
        budget: what taking and encoding snapshots may cost (by default
            :data:`SNAPSHOT_BUDGET_BURST` at once, :data:`SNAPSHOT_BUDGET_SHARE`
            of a core over time).
    """

    def __init__(self, take: Callable[[], dict[str, Any]], budget: CpuBudget | None = None) -> None:
        self._take = take
        self.budget = CpuBudget(SNAPSHOT_BUDGET_BURST, SNAPSHOT_BUDGET_SHARE) if budget is None else budget
        self._latest: Snapshot | None = None
        #: Snapshots taken, and times the newest one was handed out again instead.
        self.taken = 0
        self.shared = 0

    def _take_new(self) -> Snapshot:
        with self.budget.spend():
            statistics = self._take()
            statistics["time"] = round(time.time(), 3)
        snapshot = self._latest = Snapshot(statistics, self.budget)
        self.taken += 1
        return snapshot

    def recent(self) -> Snapshot:
        """A fresh snapshot, or the newest one if the budget is spent. Never waits
        (an HTTP endpoint's answer)."""
        if self._latest is None or self.budget.allows():
            return self._take_new()
        self.shared += 1
        return self._latest

    async def newer_than(self, previous: Snapshot | None) -> Snapshot:
        """A fresh snapshot, or the newest one if the budget is spent and it is
        not ``previous``; else waits until the budget allows a new one (a
        ``$stats`` stream's next record)."""
        while True:
            if self._latest is None or self.budget.allows():
                return self._take_new()
            if self._latest is not previous:
                self.shared += 1
                return self._latest
            await trio.sleep(self.budget.seconds_until_allowed() + 1e-3)
