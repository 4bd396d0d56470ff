"""A budget of CPU time for work that peers can ask for as often as they like.

Some answers cost the server far more than the request that asked for them:
a statistics snapshot walks every session and stream (``_snapshots``); a
"did you mean" for an unknown publisher compares the name with every route
(``Router.suggest``: 34 ms for a 21-character typo among 1,000 routes). A
peer repeating such a request cheaply would buy the server's whole core.
:class:`CpuBudget` bounds what that work may cost: a token bucket of CPU
seconds, ``burst`` of them at once after a quiet spell, refilled at
``share`` of a core. Its users do the work while the budget allows and fall
back to something cheap beyond it (a shared snapshot, no suggestion), so
that ordinary use never meets the limit and a flood gets at most the share.

Sans-I/O: the caller measures (:meth:`CpuBudget.spend`) and decides; the
clock and the timer are injectable, for tests.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

__all__ = ["CpuBudget"]


class CpuBudget:
    """A token bucket of CPU seconds (see the module docstring).

    Args:
        burst: seconds of CPU the work may take at once (> 0).
        share: the share of a core it may take over time, in (0, 1].
        clock: monotonic seconds, for the refill.
        timer: seconds, for what a piece of work took.
    """

    __slots__ = ("burst", "share", "_clock", "timer", "_tokens", "_refilled_at")

    def __init__(
        self,
        burst: float,
        share: float,
        *,
        clock: Callable[[], float] = time.monotonic,
        timer: Callable[[], float] = time.perf_counter,
    ) -> None:
        if not (burst > 0 and 0 < share <= 1):
            raise ValueError(f"burst must be > 0 and share in (0, 1], got {burst!r} and {share!r}")
        self.burst = burst
        self.share = share
        self._clock = clock
        self.timer = timer
        self._tokens = burst  # seconds of CPU the work may spend now (below 0: a debt)
        self._refilled_at = clock()

    def _refill(self) -> None:
        now = self._clock()
        self._tokens = min(self.burst, self._tokens + (now - self._refilled_at) * self.share)
        self._refilled_at = now

    def allows(self) -> bool:
        """Whether the work may be done now (the budget is above 0)."""
        self._refill()
        return self._tokens > 0

    def charge(self, seconds: float) -> None:
        """Count ``seconds`` of work against the budget (it may go below 0: a debt)."""
        self._refill()
        self._tokens -= seconds

    @contextmanager
    def spend(self) -> Iterator[None]:
        """Charge what the block takes (by ``timer``), also when it raises."""
        started = self.timer()
        try:
            yield
        finally:
            self.charge(self.timer() - started)

    def seconds_until_allowed(self) -> float:
        """How long until :meth:`allows` is true again (0 if it is now)."""
        self._refill()
        if self._tokens > 0:
            return 0.0
        return -self._tokens / self.share
