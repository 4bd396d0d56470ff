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

:class:`AdaptiveDemand` is the same rule with a window that follows the
consumer, for a subscription given no ``prefetch``: the way TCP autotunes its
receive window, it starts small and doubles while the consumer keeps up (it
had to wait for elements: the window is smaller than what the link can carry
in a round trip), and shrinks by a quarter while the consumer lags (what was
requested all arrived and sits unconsumed). The window never exceeds a byte
budget divided by the elements' size, so memory stays bounded by demand.
"""

from __future__ import annotations

from collections.abc import Callable

from ._messages import UNBOUNDED

__all__ = ["AdaptiveDemand", "Demand", "DemandWindow"]


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

    @property
    def until_top_up(self) -> int:
        """How many more consumed elements reach the next top-up (at least 1).

        Fewer than that may be counted in one :meth:`consumed` call, later,
        with the same result as one call each: a consumer handing out a run
        of elements counts them once, and the top-up still comes with the
        element that reaches the threshold."""
        return self._threshold - self._pending

    def consumed(self, n: int = 1) -> int:
        """Record ``n`` consumed elements; return the demand to request now."""
        pending = self._pending + n
        if pending >= self._threshold:
            self._pending = 0
            return pending
        self._pending = pending
        return 0


class AdaptiveDemand(DemandWindow):
    """Automatic demand whose window grows while the consumer keeps up.

    Used as :class:`DemandWindow` is: :meth:`consumed` most of the time only
    adds to a counter. Once half the window has been consumed it calls
    ``probe()`` for ``(outstanding, element_bytes)``: the demand requested
    and not yet received, and the size of a recent element (0 if unknown,
    and then the last size known is kept). It retunes the window from that
    and from what the subscriber saw since the last top-up, and returns
    what to request: what was consumed, plus the growth (or minus
    the shrinkage, carried over while it exceeds what was consumed).

    * **Grow** (double, up to the cap) when the consumer was :meth:`starved`
      since the last top-up: it waited with nothing buffered, so more
      elements in flight would have kept it busy.
    * **Shrink** (by a quarter, down to ``minimum``) when it was not starved
      and no demand is outstanding: everything requested has arrived and
      waits, so the producer is ahead and a smaller window costs nothing.
    * **Cap**: ``min(maximum, byte_budget // element_bytes)``, from the size
      of the elements seen, and at least ``minimum``. The cap applies at
      once: a window over it shrinks to it.
    """

    # size, _threshold and _pending are DemandWindow's, and with them
    # initial and until_top_up: the count towards a top-up is the same;
    # what differs is what a top-up asks for.
    __slots__ = (
        "minimum",
        "maximum",
        "byte_budget",
        "_debt",
        "_starved",
        "_probe",
        "_element_bytes",
        "grown",
        "shrunk",
    )

    def __init__(
        self,
        probe: Callable[[], tuple[int, int]],
        *,
        initial: int = 16,
        minimum: int = 4,
        maximum: int = 65_536,
        byte_budget: int = 8 * 1024 * 1024,
    ) -> None:
        if not 0 < minimum <= initial <= maximum:
            raise ValueError(f"need 0 < minimum <= initial <= maximum, got {minimum}, {initial}, {maximum}")
        if byte_budget <= 0:
            raise ValueError(f"byte_budget must be positive, got {byte_budget}")
        self.size = initial
        self.minimum = minimum
        self.maximum = maximum
        self.byte_budget = byte_budget
        self._threshold = max(1, initial // 2)
        self._pending = 0
        self._debt = 0  # shrinkage not yet taken out of a request
        self._starved = False
        self._probe = probe
        self._element_bytes = 0
        #: How many times the window grew and shrank (for statistics and tests).
        self.grown = 0
        self.shrunk = 0

    def starved(self) -> None:
        """The consumer waited with nothing buffered (called on that slow path)."""
        self._starved = True

    def consumed(self, n: int = 1) -> int:
        """Record ``n`` consumed elements; return the demand to request now."""
        pending = self._pending + n
        if pending < self._threshold:
            self._pending = pending
            return 0
        self._pending = 0
        outstanding, element_bytes = self._probe()
        if element_bytes > 0:
            self._element_bytes = element_bytes
        element_bytes = self._element_bytes
        old = self.size
        cap = self.maximum
        if element_bytes > 0:
            cap = max(self.minimum, min(cap, self.byte_budget // element_bytes))
        new = old
        if self._starved:
            new = min(old * 2, cap)
        elif outstanding == 0:
            new = max(self.minimum, old - old // 4)
        new = max(self.minimum, min(new, cap))
        self._starved = False
        if new > old:
            self.grown += 1
        elif new < old:
            self.shrunk += 1
        self.size = new
        self._threshold = max(1, new // 2)
        more = pending + (new - old) - self._debt
        if more <= 0:
            self._debt = -more
            return 0
        self._debt = 0
        return more

    def __repr__(self) -> str:
        return f"AdaptiveDemand(size={self.size}, minimum={self.minimum}, maximum={self.maximum})"
