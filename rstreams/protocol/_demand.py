"""Demand arithmetic: the counter each side keeps, and the automatic top-up rule.

Demand in Reactive Streams is cumulative: ``request(3)`` then ``request(2)``
allows five elements. Rule 3.17 says a total reaching 2**63 - 1 means
"unbounded": from then on the publisher may send forever and nobody counts.
:class:`Demand` keeps that arithmetic in one place for both directions: the
publishing side counts what it may still send, the subscribing side counts
what it may still receive (and so detects a peer that overruns it).

:class:`DemandWindow` is the subscriber's automatic flow-control rule, the
same idea as h2's ``WindowManager``: keep ``size`` elements requested ahead of
the application, but do not send a ``request`` per consumed element. Once at
least half the window has been consumed, request exactly what was consumed.
That halves the request traffic against a per-element top-up while never
letting the outstanding demand fall below half the window, so a fast
publisher is never starved for a round trip.
"""

from __future__ import annotations

from ._messages import UNBOUNDED

__all__ = ["Demand", "DemandWindow"]


class Demand:
    """Outstanding demand of one stream, saturating at 2**63 - 1 (unbounded)."""

    __slots__ = ("outstanding",)

    def __init__(self, initial: int = 0) -> None:
        # Made for every stream, both sides: the common case skips add().
        if 0 <= initial < UNBOUNDED:
            self.outstanding = initial
        else:
            self.outstanding = 0
            self.add(initial)

    @property
    def unbounded(self) -> bool:
        """True once cumulative demand reached 2**63 - 1 (rule 3.17)."""
        return self.outstanding >= UNBOUNDED

    def add(self, n: int) -> None:
        """Add ``n > 0`` to the demand, saturating at unbounded.

        Raises:
            ValueError: ``n <= 0``; rule 3.9 makes that the caller's error.
        """
        if n <= 0:
            raise ValueError(f"demand must be positive (rule 3.9), got {n}")
        total = self.outstanding + n
        self.outstanding = UNBOUNDED if total >= UNBOUNDED else total

    def take(self, n: int) -> bool:
        """Consume ``n`` from the demand; False (and no change) if not enough."""
        outstanding = self.outstanding
        if outstanding >= UNBOUNDED:
            return True
        if n > outstanding:
            return False
        self.outstanding = outstanding - n
        return True

    def __repr__(self) -> str:
        return "Demand(unbounded)" if self.unbounded else f"Demand({self.outstanding})"


class DemandWindow:
    """Automatic demand for a subscriber that keeps ``size`` elements in flight.

    Call :meth:`consumed` each time the application takes elements; it
    returns how much to request now (0 most of the time).
    """

    __slots__ = ("size", "_threshold", "_pending")

    def __init__(self, size: int) -> None:
        if size <= 0:
            raise ValueError(f"window size must be positive, got {size}")
        self.size = size
        # At least one, so a window of 1 tops up after every element.
        self._threshold = max(1, size // 2)
        self._pending = 0

    @property
    def initial(self) -> int:
        """The demand to send with the subscribe."""
        return self.size

    def consumed(self, n: int = 1) -> int:
        """Record ``n`` consumed elements; return the demand to request now."""
        pending = self._pending + n
        if pending >= self._threshold:
            self._pending = 0
            return pending
        self._pending = pending
        return 0
