"""Demand-paced inbound delivery: what the reader reads only because someone asked.

An :class:`InboundQueue` holds one kind of inbound item of a
:class:`~bridges.kit.BridgeConnection` (EMP's data bodies, its requests; an
Epoxy connection's events). A task that wants the next item counts as a
waiter while it waits, and the connection's reader reads from the socket
only while some queue has more waiters than items: a consumer that stops
asking stops the reading, and TCP carries the pressure back to the sender.
Each item held counts against the connection's ``max_read_ahead`` until it
is taken.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import trio

if TYPE_CHECKING:
    from ._connection import BridgeConnection

__all__ = ["InboundQueue", "ITEM_COST"]

#: What an item held for the application counts against max_read_ahead on
#: top of its own size: without it, a flood of tiny items would stay under
#: the byte bound while their count grew without one.
ITEM_COST = 64

ItemT = TypeVar("ItemT")


class InboundQueue(Generic[ItemT]):
    """Items read for the application, in order, taken one at a time by :meth:`take`."""

    def __init__(self, connection: BridgeConnection[Any, Any]) -> None:
        self._connection = connection
        self._items: deque[tuple[ItemT, int]] = deque()
        self._waiters = 0
        connection._inbound_queues.append(self)

    def __len__(self) -> int:
        return len(self._items)

    @property
    def wanted(self) -> bool:
        """True while more tasks wait than items are held: the reader should read."""
        return self._waiters > len(self._items)

    def detach(self) -> list[ItemT]:
        """Stop reading for this queue; return what it held (no longer counted).

        For queues that live shorter than their connection (one per
        subscription): the reader forgets the queue, and what it held is
        released from ``max_read_ahead`` and handed back for the caller to
        dispose of (a protocol may have to acknowledge it).
        """
        connection = self._connection
        if self in connection._inbound_queues:
            connection._inbound_queues.remove(self)
        items = [item for item, _ in self._items]
        released = sum(cost for _, cost in self._items)
        self._items.clear()
        if released:
            connection._release(released)
        return items

    def put(self, item: ItemT, size: int) -> None:
        """Hold ``item`` (``size`` bytes of it count against max_read_ahead)."""
        cost = ITEM_COST + size
        self._items.append((item, cost))
        self._connection._hold(cost)

    async def take(self) -> ItemT:
        """The next item; reads for it if none is held.

        Raises:
            trio.EndOfChannel: the connection ended normally and nothing is left.
            The connection's end error: it ended otherwise.

        Cancellation: nothing is taken. Always checkpoints.
        """
        connection = self._connection
        await trio.lowlevel.checkpoint_if_cancelled()
        self._waiters += 1
        try:
            while not self._items:
                if connection._end is not None:
                    raise connection._stream_end()
                connection._wake_reader()
                await connection._inbound_lot.park()
        finally:
            self._waiters -= 1
        item, cost = self._items.popleft()
        connection._release(cost)
        await trio.lowlevel.cancel_shielded_checkpoint()
        return item

    async def take_batch(self, max_count: int) -> list[ItemT]:
        """The next item (read for if none is held) and the ones held after
        it: at most ``max_count``, in order. For a taker that handles what one
        read brought in one step. Waits only for the first.

        Raises:
            ValueError: ``max_count`` is not positive.
            and as :meth:`take`.

        Cancellation: nothing is taken. Always checkpoints.
        """
        if max_count <= 0:
            raise ValueError(f"max_count must be positive, got {max_count}")
        batch = [await self.take()]
        if max_count > 1:
            batch += self.take_held(max_count - 1, _any_item)
        return batch

    def take_held(self, limit: int, accept: Callable[[ItemT], bool]) -> list[ItemT]:
        """Up to ``limit`` more of the items held now, in order, stopping at the first ``accept`` refuses.

        Never waits and never reads: for a taker that got one item from
        :meth:`take` and hands over the others the same read brought in
        one step (one acknowledgement, one delivery) instead of a step each.
        """
        items = self._items
        taken: list[ItemT] = []
        released = 0
        while items and len(taken) < limit and accept(items[0][0]):
            item, cost = items.popleft()
            taken.append(item)
            released += cost
        if released:
            self._connection._release(released)
        return taken


def _any_item(item: object) -> bool:
    return True
