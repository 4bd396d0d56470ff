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
budget (a token bucket of CPU seconds: :data:`SNAPSHOT_BUDGET_BURST` at
once, refilled at :data:`SNAPSHOT_BUDGET_SHARE` of a core); beyond it,
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

from ._metrics_text import prometheus_text

__all__ = ["SNAPSHOT_BUDGET_BURST", "SNAPSHOT_BUDGET_SHARE", "Snapshot", "SharedStatistics"]

#: Seconds of CPU that snapshots may take at once, after a quiet spell.
SNAPSHOT_BUDGET_BURST = 0.1
#: The share of a core that snapshots may take over time (the bucket's refill).
SNAPSHOT_BUDGET_SHARE = 0.05


class Snapshot:
    """One statistics snapshot, with the encodings it is served in (each made once)."""

    __slots__ = ("statistics", "time", "_owner", "_record", "_metrics")

    def __init__(self, statistics: dict[str, Any], owner: SharedStatistics) -> None:
        #: The snapshot (``Server.statistics()``), with ``time`` added.
        self.statistics = statistics
        #: When it was taken, in seconds since the epoch (its ``time`` key).
        self.time: float = statistics["time"]
        self._owner = owner
        self._record: bytes | None = None
        self._metrics: bytes | None = None

    def record(self) -> bytes:
        """The snapshot as one JSON object, UTF-8 (a ``$stats`` element, a ``/stats`` body)."""
        if self._record is None:
            started = self._owner.timer()
            self._record = json.dumps(self.statistics, separators=(",", ":")).encode()
            self._owner.charge(self._owner.timer() - started)
        return self._record

    def metrics(self) -> bytes:
        """The snapshot in the Prometheus text format (a ``/metrics`` body)."""
        if self._metrics is None:
            started = self._owner.timer()
            self._metrics = prometheus_text(self.statistics).encode()
            self._owner.charge(self._owner.timer() - started)
        return self._metrics


class SharedStatistics:
    """A server's snapshots as peers get them: fresh within a CPU budget, shared beyond it.

    Args:
        take: takes a snapshot (``Server.statistics``).
        burst: seconds of CPU snapshots may take at once (:data:`SNAPSHOT_BUDGET_BURST`).
        share: the share of a core they may take over time (:data:`SNAPSHOT_BUDGET_SHARE`).
        clock: monotonic seconds, for the refill (a test's own clock).
        timer: seconds, for what a snapshot or an encoding took (a test's own).
    """

    def __init__(
        self,
        take: Callable[[], dict[str, Any]],
        *,
        burst: float = SNAPSHOT_BUDGET_BURST,
        share: float = SNAPSHOT_BUDGET_SHARE,
        clock: Callable[[], float] = time.monotonic,
        timer: Callable[[], float] = time.perf_counter,
    ) -> None:
        if not (burst > 0 and 0 < share <= 1):
            raise ValueError(f"burst must be > 0 and share in (0, 1], got {burst!r} and {share!r}")
        self._take = take
        self._burst = burst
        self._share = share
        self._clock = clock
        self.timer = timer
        self._tokens = burst  # seconds of CPU snapshots may spend now (below 0: a debt)
        self._refilled_at = clock()
        self._latest: Snapshot | None = None
        #: Snapshots taken, and times the newest one was handed out again instead.
        self.taken = 0
        self.shared = 0

    def charge(self, seconds: float) -> None:
        """Count ``seconds`` of work done for snapshots against the budget."""
        self._refill()
        self._tokens -= seconds

    def _refill(self) -> None:
        now = self._clock()
        self._tokens = min(self._burst, self._tokens + (now - self._refilled_at) * self._share)
        self._refilled_at = now

    def _take_new(self) -> Snapshot:
        started = self.timer()
        statistics = self._take()
        statistics["time"] = round(time.time(), 3)
        snapshot = Snapshot(statistics, self)
        self.charge(self.timer() - started)
        self._latest = snapshot
        self.taken += 1
        return snapshot

    def _may_take(self) -> bool:
        self._refill()
        return self._tokens > 0

    def recent(self) -> Snapshot:
        """A fresh snapshot, or the newest one if the budget is spent. Never waits
        (an HTTP endpoint's answer)."""
        if self._latest is None or self._may_take():
            return self._take_new()
        self.shared += 1
        return self._latest

    async def newer_than(self, previous: Snapshot | None) -> Snapshot:
        """A fresh snapshot, or the newest one if the budget is spent and it is
        not ``previous``; else waits until the budget allows a new one (a
        ``$stats`` stream's next record)."""
        while True:
            if self._latest is None or self._may_take():
                return self._take_new()
            if self._latest is not previous:
                self.shared += 1
                return self._latest
            # (The debt over the refill rate: when the bucket is back above 0.)
            await trio.sleep(max(-self._tokens, 0.0) / self._share + 1e-3)
