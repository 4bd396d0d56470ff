"""One memory budget per connection: every buffer of a connection takes bytes from it.

Theory of operation
-------------------
Whatever one peer makes us hold must cost that peer's budget and nobody
else's, so every buffer of a bridge connection counts against one limit,
:attr:`LinkSettings.max_connection_memory`: the bytes read and not yet
parsed (a partial frame), what a machine joins (MicroMsg2's CONTINUED
frames), items read for the application and not yet taken, responses being
built, and bytes queued for writing. A :class:`MemoryBudget` is that count.

There are two ways to count, because there are two kinds of bytes:

* bytes the **peer** forces us to hold (its input) are counted with
  :meth:`MemoryBudget.charge`, which never waits: they are already in
  memory. The connection's reader reads only while the budget has room, and
  never more than the room, so a peer stays within it by itself; a peer
  whose input alone fills the budget (a message larger than it, say) is
  misbehaving, and the connection ends with the protocol's error, "memory
  budget exceeded".
* bytes **we** build for the peer (a response) wait for room with
  :meth:`MemoryBudget.take` before they are built. While the budget is
  exhausted, the reader reads nothing (no new requests), so a client that
  asks and never reads stops itself: its responses wait to be written, and
  TCP carries the pressure back.

Waiters are served in order (first come, first served): a large take is
not starved by a stream of small ones. Giving bytes back wakes only the
waiters that now fit, so a write costs O(1) wake-ups, not one per waiter.
(Why :class:`~bridges.kit.SendWindow`, which also takes, gives back and
waits, is not a budget of messages: its module docstring.)
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import outcome
import trio

from ._config import check_count
from ._errors import copy_error

__all__ = ["MemoryBudget", "BudgetStatistics"]


@dataclass(frozen=True, slots=True)
class BudgetStatistics:
    """A snapshot of a :class:`MemoryBudget`.

    Attributes:
        limit: the budget, in bytes.
        used: bytes counted now (may pass ``limit`` only through :meth:`MemoryBudget.charge`).
        waiting: takers waiting for room.
        waiting_bytes: the bytes they wait for.
    """

    limit: int
    used: int
    waiting: int
    waiting_bytes: int


class _Waiter:
    __slots__ = ("task", "size")

    def __init__(self, task: trio.lowlevel.Task, size: int) -> None:
        self.task = task
        self.size = size


class MemoryBudget:
    """The bytes one connection may hold, taken and given back by its buffers.

    Args:
        limit: the budget, in bytes (positive).
        on_room: called (synchronously) whenever bytes are given back, so
            that a reader paused for lack of room can look again.

    Use :meth:`take` (waits for room) for bytes we choose to hold,
    :meth:`charge` (never waits) for bytes already in memory, and
    :meth:`give_back` for both once they are gone.
    """

    def __init__(self, limit: int, *, on_room: Callable[[], object] | None = None) -> None:
        check_count("limit", limit)
        self.limit = limit
        self._used = 0
        self._waiters: deque[_Waiter] = deque()
        self._waiting_bytes = 0
        self._error: BaseException | None = None
        self._on_room = on_room

    @property
    def used(self) -> int:
        """Bytes counted now."""
        return self._used

    @property
    def available(self) -> int:
        """Bytes that may still be taken now (0 once the budget is exhausted)."""
        return max(self.limit - self._used, 0)

    @property
    def room(self) -> int:
        """What is left once the waiting takers are served: where a reader may read into.

        Takers that wait (responses to build) come before more input, so a
        peer that asks and does not read gets no further request read.
        """
        return max(self.limit - self._used - self._waiting_bytes, 0)

    def statistics(self) -> BudgetStatistics:
        """A snapshot: the limit, what is used, who waits."""
        return BudgetStatistics(
            limit=self.limit,
            used=self._used,
            waiting=len(self._waiters),
            waiting_bytes=self._waiting_bytes,
        )

    def _check_size(self, size: int) -> None:
        if type(size) is not int or size < 0:
            raise ValueError(f"size must be a non-negative int, got {size!r}")

    def take_nowait(self, size: int) -> None:
        """Take ``size`` bytes if they fit now and nobody waits before us.

        Raises:
            trio.WouldBlock: not enough room, or earlier takers wait.
            ValueError: ``size`` is negative or larger than the whole budget.
            The error given to :meth:`close`, once closed.
        """
        self._check_size(size)
        if self._error is not None:
            raise copy_error(self._error)
        if size > self.limit:
            raise ValueError(f"{size} bytes can never fit a budget of {self.limit}")
        if self._waiters or self._used + size > self.limit:
            raise trio.WouldBlock
        self._used += size

    async def take(self, size: int) -> None:
        """Wait for room for ``size`` bytes (after the takers that came first), then take them.

        Raises:
            ValueError: ``size`` is larger than the whole budget (it would wait forever).
            The error given to :meth:`close`, once closed.

        Cancellation: nothing is taken. Always checkpoints.
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        try:
            self.take_nowait(size)
        except trio.WouldBlock:
            pass
        else:
            await trio.lowlevel.cancel_shielded_checkpoint()
            return
        waiter = _Waiter(trio.lowlevel.current_task(), size)
        self._waiters.append(waiter)
        self._waiting_bytes += size

        def abort(_: object) -> trio.lowlevel.Abort:
            # Still waiting (a woken waiter is no longer in the deque): leave,
            # and let those behind us go if they now fit.
            self._waiters.remove(waiter)
            self._waiting_bytes -= waiter.size
            self._wake()
            return trio.lowlevel.Abort.SUCCEEDED

        await trio.lowlevel.wait_task_rescheduled(abort)
        # _wake counted our bytes before rescheduling us, or close() failed us.

    def charge(self, size: int) -> None:
        """Count ``size`` bytes already held, room or not (:attr:`used` may pass :attr:`limit`).

        The caller decides what that means (the connection: a peer whose
        input alone passes the limit ends with "memory budget exceeded").
        """
        self._check_size(size)
        self._used += size

    @contextmanager
    def holding(self, size: int) -> Iterator[None]:
        """Count ``size`` bytes already held (:meth:`charge`) for the block, and give them back when it ends.

        For what a taker holds after its queue let go of it: a batch of
        messages taken out of a connection's inbound queue still counts in
        the connection's budget while it is handled (MicroMsg2's SENDs,
        Epoxy's events), however long that takes.
        """
        self.charge(size)
        try:
            yield
        finally:
            self.give_back(size)

    def give_back(self, size: int) -> None:
        """``size`` bytes counted here are gone (never more than are used)."""
        self._check_size(size)
        if size > self._used:
            raise ValueError(f"{size} bytes given back with {self._used} used")
        if not size:
            return
        self._used -= size
        self._wake()
        if self._on_room is not None:
            self._on_room()

    def close(self, error: BaseException) -> None:
        """Make every waiter, and every later take, raise ``error`` (the connection ended)."""
        self._error = error
        while self._waiters:
            waiter = self._waiters.popleft()
            self._waiting_bytes -= waiter.size
            trio.lowlevel.reschedule(waiter.task, outcome.Error(copy_error(error)))

    def _wake(self) -> None:
        # In order: the head first; stop at the first that does not fit.
        waiters = self._waiters
        while waiters and self._used + waiters[0].size <= self.limit:
            waiter = waiters.popleft()
            self._waiting_bytes -= waiter.size
            self._used += waiter.size
            trio.lowlevel.reschedule(waiter.task)
