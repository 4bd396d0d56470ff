"""Windowed outbound delivery: at most W sent and not yet acknowledged.

For protocols whose acknowledgements are demand (Relink's "consumed",
MicroMsg2's acks and batch-acks): the sender may have at most ``size``
messages in flight, and each acknowledgement frees room, exactly as a
Reactive Streams ``request(n)`` would. :class:`SendWindow` is that
arithmetic plus the waiting; the protocol machine decides what an
acknowledgement is worth.

It is not a :class:`~bridges.kit.MemoryBudget` counting messages, though
both take, give back and wait for room; they differ where it matters:

* the budget serves its takers in order and refuses a take while anyone
  waits (``take_nowait``), so that a large response is not starved by small
  ones; a window's waiters all look again at each acknowledgement, and a
  sender that has its room may take the rest of the window at once
  (:meth:`SendWindow.acquire_up_to`, Relink's and MicroMsg2's batch
  sends), which the budget's order would refuse while
  another send waits;
* the budget counts bytes already in memory past its limit (``charge``), and
  keeps room for its waiters ahead of the reader (``room``); a window never
  passes its size, and a resumed link empties it (``reset``).

What they share is a count and an end error, raised as a fresh copy in
each waiter (:func:`~bridges.kit.copy_error`); a common base would not be
shorter than the two.
"""

from __future__ import annotations

import trio

from ._config import check_count
from ._errors import copy_error

__all__ = ["SendWindow"]


class SendWindow:
    """A window of ``size`` messages: :meth:`acquire` before sending, :meth:`release` on acknowledgement.

    Args:
        size: the most messages in flight (sent, not acknowledged).
    """

    def __init__(self, size: int) -> None:
        check_count("size", size)
        self.size = size
        self._in_flight = 0
        self._lot = trio.lowlevel.ParkingLot()
        self._error: BaseException | None = None

    @property
    def in_flight(self) -> int:
        """Messages sent and not yet acknowledged."""
        return self._in_flight

    @property
    def available(self) -> int:
        """How many more may be sent now."""
        return max(self.size - self._in_flight, 0)

    def acquire_nowait(self, n: int = 1) -> None:
        """Take room for ``n`` messages.

        Raises:
            ValueError: ``n`` is negative (it would free room).
            trio.WouldBlock: not enough room.
            The error given to :meth:`close`, once closed.
        """
        if n < 0:
            raise ValueError(f"n must not be negative, got {n}")
        if self._error is not None:
            raise copy_error(self._error)
        if n > self.available:
            raise trio.WouldBlock
        self._in_flight += n

    async def acquire(self, n: int = 1) -> None:
        """Wait for room for ``n`` messages (``n <= size``), then take it.

        Cancellation: nothing is taken. Always checkpoints.
        """
        if not 0 < n <= self.size:
            raise ValueError(f"n must be in [1, {self.size}], got {n}")
        await trio.lowlevel.checkpoint_if_cancelled()
        while True:
            try:
                self.acquire_nowait(n)
            except trio.WouldBlock:
                await self._lot.park()
                continue
            break
        await trio.lowlevel.cancel_shielded_checkpoint()

    async def acquire_up_to(self, n: int) -> int:
        """Wait for room for one message, then take room for as many of ``n`` as fit; how many.

        The batch sender's form: whatever the acknowledgements freed while
        it waited goes out in one step, so a window that frees many at
        once is used at once, and one that frees one at a time still sends.

        Raises:
            ValueError: ``n`` is not positive.
            The error given to :meth:`close`, once closed.

        Cancellation: nothing is taken. Always checkpoints.
        """
        if n <= 0:
            raise ValueError(f"n must be positive, got {n}")
        await self.acquire(1)
        more = min(self.available, n - 1)
        self._in_flight += more
        return 1 + more

    async def wait_room(self, keep: int = 0) -> None:
        """Wait until at least one message may be sent, taking nothing.

        For a sender that must not take other resources (memory for the
        message) while the window is full: it waits here first, and then
        :meth:`acquire` finds room at once if nothing else sent meanwhile.
        With ``keep``, until one more than ``keep`` may be sent: a sender
        that keeps room for a last message (the error that ends a stream,
        which must not wait for a peer that stopped consuming) never uses it
        for anything else.

        Raises:
            ValueError: ``keep`` is negative, or leaves no room (``keep >= size``).
            The error given to :meth:`close`, once closed.

        Cancellation: nothing happens. Always checkpoints.
        """
        if not 0 <= keep < self.size:
            raise ValueError(f"keep must be in [0, {self.size}), got {keep}")
        await trio.lowlevel.checkpoint_if_cancelled()
        while self.available <= keep:
            if self._error is not None:
                raise copy_error(self._error)
            await self._lot.park()
        await trio.lowlevel.cancel_shielded_checkpoint()

    def release(self, n: int = 1) -> None:
        """``n`` messages were acknowledged (never more than are in flight)."""
        if not 0 <= n <= self._in_flight:
            raise ValueError(f"{n} acknowledged with {self._in_flight} in flight")
        self._in_flight -= n
        if n:
            self._lot.unpark_all()

    def reset(self) -> None:
        """Nothing is in flight any more (a resumed link resends from scratch)."""
        self._in_flight = 0
        self._lot.unpark_all()

    def close(self, error: BaseException) -> None:
        """Make every waiter, and every later acquire, raise ``error`` (a copy of it, each)."""
        self._error = error
        self._lot.unpark_all()
