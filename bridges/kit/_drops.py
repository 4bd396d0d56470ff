"""The elements a filter drops, paced as if they were sent.

A subscription with a filter takes elements from its publisher and drops
those that do not match. Sending is paced by the peer (its acks, or the
transport), but dropping is not: a peer that subscribed with a filter
nothing passes to endless publishers made the server pull and drop
forever, a whole core, for a few commands sent once. Each dropped element
costs about what a sent one does, so it counts as one.

:class:`DropAllowance` is the arithmetic, without I/O or a clock of its
own. The top-up rule: a connection may drop ``allowance`` elements (a
window's worth) between two top-ups; it is topped up whole when the peer
acknowledges something (it reads, so it paces us as for sending), or, while
nothing of the connection is in flight (no ack can come), once ``tick``
seconds have passed since the last top-up. So a peer that reads drops as
fast as it reads, and one that reads nothing gets at most ``allowance``
elements taken and dropped per ``tick``.
"""

from __future__ import annotations

__all__ = ["DropAllowance", "DROP_TICK"]

#: Seconds between two top-ups while nothing is in flight: with a window of
#: 64, at most 6,400 elements dropped a second per connection (about a
#: tenth of a core, where the drops took all of it).
DROP_TICK = 0.01


class DropAllowance:
    """How many more elements a connection may take and drop (see the module docstring).

    Args:
        allowance: elements dropped between top-ups (>= 1): a window's worth.
        tick: seconds after which a top-up is due without an ack.
        now: the clock's time at creation (the caller's clock).
    """

    __slots__ = ("allowance", "tick", "dropped", "_topped_up_at")

    def __init__(self, allowance: int, *, tick: float = DROP_TICK, now: float = 0.0) -> None:
        if type(allowance) is not int or allowance < 1:
            raise ValueError(f"allowance must be an int >= 1, got {allowance!r}")
        if not tick > 0:
            raise ValueError(f"tick must be > 0, got {tick!r}")
        self.allowance = allowance
        self.tick = tick
        self.dropped = 0  # since the last top-up
        self._topped_up_at = now

    @property
    def exhausted(self) -> bool:
        """Whether the allowance is used up: wait for an ack or the tick."""
        return self.dropped >= self.allowance

    def drop(self, count: int = 1) -> None:
        """``count`` elements were taken and dropped."""
        self.dropped += count

    def acknowledged(self, now: float) -> None:
        """The peer acknowledged something: the allowance is whole again."""
        self.dropped = 0
        self._topped_up_at = now

    def due(self, now: float) -> float:
        """Seconds until the tick's top-up (0 if due now)."""
        return max(0.0, self._topped_up_at + self.tick - now)

    def tick_passed(self, now: float) -> None:
        """Top up if the tick has passed since the last top-up."""
        if self.due(now) == 0.0:
            self.dropped = 0
            self._topped_up_at = now
