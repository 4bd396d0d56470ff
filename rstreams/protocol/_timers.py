"""When to ping, when a peer is dead, when a connection is idle: clock arithmetic, sans-I/O.

The I/O layer owns the clock; these classes only compare the times it
passes in (any monotonic seconds: ``trio.current_time()`` in the runtime,
plain numbers in tests). Each offers a ``deadline``: the I/O layer sleeps
until then, and asks again (:meth:`KeepaliveTimer.poll`,
:meth:`IdleTimer.expired`). Deadlines only ever move later, so a layer that
wakes at a deadline that has since moved just asks and sleeps again.
"""

from __future__ import annotations

import enum

__all__ = ["KeepaliveAction", "KeepaliveTimer", "IdleTimer"]


class KeepaliveAction(enum.Enum):
    NOTHING = "nothing"  # not due yet
    PING = "ping"  # send a ping now (the timer counts it as sent)
    DEAD = "dead"  # the ping in flight was not answered in time


class KeepaliveTimer:
    """One side's keepalive schedule (the keepalive extension, PROTOCOL.md 8).

    The rule: a ping goes out ``interval`` seconds after the last pong (or
    after the extension was agreed); at most one ping is in flight; if its
    pong has not come ``timeout`` seconds after the ping went out, the peer
    is dead. Anything else the peer sends does not count as an answer: a
    peer that keeps sending but no longer reads is stuck, and would hold
    our buffers.

    Args:
        interval: seconds between a pong and the next ping (> 0).
        timeout: seconds a ping may wait for its pong (> 0).
        now: the time the extension was agreed.
    """

    __slots__ = ("interval", "timeout", "_next_ping", "_ping_sent")

    def __init__(self, *, interval: float, timeout: float, now: float) -> None:
        if not interval > 0 or not timeout > 0:
            raise ValueError("keepalive interval and timeout must be positive")
        self.interval = interval
        self.timeout = timeout
        self._next_ping = now + interval
        self._ping_sent: float | None = None

    @property
    def waiting_for_pong(self) -> bool:
        """True while a ping is in flight."""
        return self._ping_sent is not None

    @property
    def deadline(self) -> float:
        """When :meth:`poll` has something to do next."""
        if self._ping_sent is not None:
            return self._ping_sent + self.timeout
        return self._next_ping

    def poll(self, now: float) -> KeepaliveAction:
        """What to do at ``now``. PING means: send one now (it counts as sent)."""
        if self._ping_sent is not None:
            return KeepaliveAction.DEAD if now >= self._ping_sent + self.timeout else KeepaliveAction.NOTHING
        if now >= self._next_ping:
            self._ping_sent = now
            return KeepaliveAction.PING
        return KeepaliveAction.NOTHING

    def pong_received(self, now: float) -> None:
        """The pong of the ping in flight arrived at ``now``."""
        self._ping_sent = None
        self._next_ping = now + self.interval


class IdleTimer:
    """When a connection has been idle too long.

    Idle means: the peer sent nothing that counts (:meth:`heard`; keepalive
    pings and pongs do not count) and no stream was open either way
    (:meth:`busy`) for ``timeout`` seconds.

    Args:
        timeout: seconds of idleness allowed (> 0).
        now: when the clock starts (the peer's hello).
    """

    __slots__ = ("timeout", "_since")

    def __init__(self, *, timeout: float, now: float) -> None:
        if not timeout > 0:
            raise ValueError("idle timeout must be positive")
        self.timeout = timeout
        self._since = now

    @property
    def deadline(self) -> float:
        """The earliest time the connection can be found idle."""
        return self._since + self.timeout

    def heard(self, now: float) -> None:
        """The peer sent something that counts (a message other than ping / pong)."""
        if now > self._since:
            self._since = now

    def busy(self, now: float) -> None:
        """A stream is open at ``now``: the connection is in use."""
        self.heard(now)

    def expired(self, now: float) -> bool:
        """True once ``timeout`` seconds have passed since the last sign of use."""
        return now >= self._since + self.timeout
