"""Places under a server's ``max_connections``, and room made from handshakes.

A server admits at most ``max_connections`` connections at once and turns
the next one away ("server busy"). A peer that opens sockets and says
nothing would then hold every place until the handshake timeout, keeping
real clients out for that long (150 silent sockets against a limit of 50:
every client refused for 10 s). So a full server makes room: a newcomer
takes the place of the oldest connection that has not finished its
handshake within :data:`HANDSHAKE_GRACE`, which is closed. A connection
that has finished it is never closed for another, nor one still within
the grace (in a burst of real clients, the earlier ones' hellos may not
have been read yet: the newcomer is refused as before, with the
protocol's "server busy", not a client closed without a word).

Shared by ``rstreams serve``'s wire-v0 listeners (:class:`rstreams.Server`)
and every bridge's (``bridges.kit.BridgeServer``): each says when one of
its connections has finished its handshake, in its own terms.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import trio

__all__ = ["Admission", "Admissions", "CLOSING_GRACE", "HANDSHAKE_GRACE"]

#: Seconds a connection has to finish its handshake before a full server
#: may close it for a newcomer: a real client says hello within
#: milliseconds of connecting; silent sockets then hold places for this
#: long at most, not for the whole handshake timeout.
HANDSHAKE_GRACE = 0.25

#: Seconds a connection closed for a newcomer may take to say why (its
#: protocol's goodbye) before it is closed outright.
CLOSING_GRACE = 1.0


class Admission:
    """One admitted connection's place: run the connection inside
    :attr:`scope`, which is cancelled if the place is taken back for a
    newcomer (:attr:`evicted` then says why)."""

    __slots__ = ("scope", "evicted", "admitted_at", "_handshake_done", "_left", "_close")

    def __init__(self, admitted_at: float) -> None:
        self.scope = trio.CancelScope()
        self.evicted: str | None = None
        self.admitted_at = admitted_at
        self._left = False
        self._close: Callable[[str], None] | None = None
        # Whether the peer has finished its handshake: False until told.
        self._handshake_done: Callable[[], bool] | bool = False

    def handshake_done(self) -> None:
        """The peer has finished its handshake: this place is never taken back."""
        self._handshake_done = True

    def handshake_done_when(self, check: Callable[[], bool]) -> None:
        """Ask ``check`` whether the handshake is done when it matters (a
        session, whose hello arrives in its reader, says so without a hook)."""
        self._handshake_done = check

    def close_with(self, close: Callable[[str], None]) -> None:
        """Close it this way if its place is taken back (its protocol's
        goodbye, with the reason), rather than by cancelling :attr:`scope`:
        the scope is then cancelled only after :data:`CLOSING_GRACE`."""
        self._close = close

    def _done(self) -> bool:
        done = self._handshake_done
        return done if isinstance(done, bool) else done()


class Admissions:
    """The places of one server; ``limit`` None admits every connection.

    Args:
        grace: seconds a connection has to finish its handshake before it
            may be closed for a newcomer.
        clock: the time, in seconds (trio's clock by default).
    """

    def __init__(self, *, grace: float = HANDSHAKE_GRACE, clock: Callable[[], float] = trio.current_time) -> None:
        self._grace = grace
        self._clock = clock
        self._count = 0
        # Admitted connections that may still be in their handshake, oldest
        # first (a dict as an ordered set): where room is made from. One
        # found done is dropped as the search passes it.
        self._in_handshake: dict[Admission, None] = {}

    @property
    def count(self) -> int:
        """Connections admitted and not yet left."""
        return self._count

    def admit(self, limit: int | None) -> Admission | None:
        """A place for a new connection: one that is free, or one taken back
        from the oldest connection still in its handshake past its grace;
        None when there is neither (refuse it).

        Synchronous: connections arriving together cannot all pass the check.
        """
        if limit is not None and self._count >= limit and not self._make_room(limit):
            return None
        self._count += 1
        if limit is None:
            return Admission(0.0)
        admission = Admission(self._clock())
        self._in_handshake[admission] = None
        return admission

    @contextmanager
    def held(self, admission: Admission) -> Iterator[Admission]:
        """Run the connection in its place: inside its scope (cancelled if
        the place is taken back), and the place given back at the end."""
        try:
            with admission.scope:
                yield admission
        finally:
            self.leave(admission)

    def leave(self, admission: Admission) -> None:
        """The connection has ended: its place is free. Idempotent."""
        if not admission._left:
            admission._left = True
            self._count -= 1
            self._in_handshake.pop(admission, None)

    def _make_room(self, limit: int) -> bool:
        waiting = self._in_handshake
        while waiting:
            admission = next(iter(waiting))
            if admission._done():
                del waiting[admission]
                continue
            if self._clock() - admission.admitted_at < self._grace:
                return False  # (the oldest still within its grace: so is every later one)
            del waiting[admission]
            admission.evicted = reason = f"server busy: no handshake yet, closed for a new connection ({limit} open)"
            if admission._close is not None:
                admission._close(reason)
                admission.scope.deadline = min(admission.scope.deadline, self._clock() + CLOSING_GRACE)
            else:
                admission.scope.cancel()
            # Its place is the newcomer's now: the closed one is counted no
            # more (its task ends at its next checkpoint), so that a second
            # newcomer does not close another for a place already free.
            self.leave(admission)
            return True
        return False
