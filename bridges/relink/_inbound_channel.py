"""One of the peer's channels, as the application reads it: :class:`InboundChannel`.

What the reader took off the wire for the channel waits here, in order,
bounded by the peer's window (the machine refuses a peer that leaves more
than ``limits.max_unconsumed`` unconsumed). Taking a message consumes it,
which is the peer's demand; :class:`~bridges.relink.RelinkLink` reports the
consumption to the connection carrying the link (or to the next one, after
a drop).
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Union

import trio

from ..kit import ITEM_COST, copy_error
from ._errors import LocalProtocolError
from ._events import CommitRequested, MessageReceived, RollbackRequested

if TYPE_CHECKING:
    from ._trio_link import RelinkLink

__all__ = ["InboundChannel", "InboundItem"]

#: What an inbound channel holds: messages, and the peer's transaction requests.
InboundItem = Union[MessageReceived, CommitRequested, RollbackRequested]


class InboundChannel:
    """One of the peer's channels: what it sent, taken in order.

    Attributes:
        id: the channel id (``0`` when the peer's ids are 0 bytes).
        received_any: a message has arrived on it.
    """

    def __init__(self, link: RelinkLink, channel: int) -> None:
        self.id = channel
        self.received_any = False
        self._link = link
        self._items: deque[InboundItem] = deque()  # bounded by the peer's window (the machine enforces it)
        self._end: BaseException | None = None
        self._lot = trio.lowlevel.ParkingLot()
        self._discarding = False
        self._ignored = 0  # messages dropped unheld, to consume at discard() (ignore_further)
        self._ignoring = False
        self._closed = trio.Event()

    @property
    def ended(self) -> bool:
        """True once the peer closed the channel (or the link ended); held items may remain."""
        return self._end is not None

    def __len__(self) -> int:
        return len(self._items)

    def _put(self, item: InboundItem) -> None:
        if isinstance(item, MessageReceived):
            self.received_any = True
            if self._discarding:
                self._link._consume(self.id, 1)
                return
            if self._ignoring:
                self._ignored += 1
                return
        self._items.append(item)
        self._link._hold(_cost(item))
        if self._lot:  # (trio's unpark_all costs a generator even for no one: once a message)
            self._lot.unpark_all()

    def _finish(self, error: BaseException) -> None:
        if self._end is None:
            self._end = error
            self._closed.set()
            self._lot.unpark_all()

    def receive_event_nowait(self, *, consume: bool = True) -> InboundItem:
        """The next item, consumed if it is a message (unless ``consume`` is False).

        A message taken with ``consume=False`` must be consumed later with
        :meth:`consume`: until then it counts against the peer's window, and
        the peer's close of the channel is not acknowledged.

        Raises:
            trio.WouldBlock: nothing is held.
            trio.EndOfChannel: the peer closed the channel and everything was taken.
            LinkLostError, RelinkConnectionLost, RelinkClosed: the link ended.
        """
        if not self._items:
            if self._end is not None:
                raise copy_error(self._end)
            raise trio.WouldBlock
        item = self._items.popleft()
        self._link._release(_cost(item))
        if consume and isinstance(item, MessageReceived):
            self._link._consume(self.id, 1)
        return item

    def consume(self, count: int = 1) -> None:
        """Consume ``count`` messages taken with ``consume=False`` (the peer's window grows)."""
        if count > 0:
            self._link._consume(self.id, count)

    async def receive_event(self, *, consume: bool = True) -> InboundItem:
        """Wait for the next item (:meth:`receive_event_nowait`).

        Cancellation: nothing is taken. Always checkpoints.
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        while not self._items and self._end is None:
            await self._lot.park()
        item = self.receive_event_nowait(consume=consume)
        await trio.lowlevel.cancel_shielded_checkpoint()
        return item

    def receive_nowait(self, *, consume: bool = True) -> tuple[bytes, ...]:
        """The next message's parts, consumed (the peer's window grows by one).

        Raises:
            LocalProtocolError: the next item is a commit or rollback request
                (use :meth:`receive_event` on a transactional channel).
            and as :meth:`receive_event_nowait`.
        """
        if self._items and not isinstance(self._items[0], MessageReceived):
            raise LocalProtocolError("the next item is a transaction request: use receive_event()")
        item = self.receive_event_nowait(consume=consume)
        assert isinstance(item, MessageReceived)
        return item.parts

    def receive_held(self, limit: int, *, consume: bool = True) -> list[tuple[bytes, ...]]:
        """Up to ``limit`` of the messages held now, in order, stopping before anything else; their parts.

        Never waits: for a reader that took one message and hands over the
        others one read brought in one step, releasing what they held from
        ``max_read_ahead`` once (one wake of the link's reader, not one per
        message). ``consume`` as for :meth:`receive_event_nowait`.
        """
        items = self._items
        taken: list[tuple[bytes, ...]] = []
        released = 0
        while items and len(taken) < limit:
            item = items[0]
            if not isinstance(item, MessageReceived):
                break
            items.popleft()
            taken.append(item.parts)
            released += _cost(item)
        if released:
            self._link._release(released)
        if consume and taken:
            self._link._consume(self.id, len(taken))
        return taken

    async def receive(self, *, consume: bool = True) -> tuple[bytes, ...]:
        """Wait for the next message and consume it; its parts.

        Raises:
            as :meth:`receive_nowait`.

        Cancellation: nothing is taken. Always checkpoints.
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        while not self._items and self._end is None:
            await self._lot.park()
        parts = self.receive_nowait(consume=consume)
        await trio.lowlevel.cancel_shielded_checkpoint()
        return parts

    async def wait_more_than(self, count: int) -> None:
        """Wait until more than ``count`` items are held, or the channel ended."""
        while len(self._items) <= count and self._end is None:
            await self._lot.park()

    def peek(self) -> InboundItem | None:
        """The next item without taking it (None if nothing is held)."""
        return self._items[0] if self._items else None

    def ignore_further(self) -> None:
        """Hold no message after those taken: drop the ones held and the ones
        that arrive later, to be consumed, in order, by :meth:`discard`.

        For a taker that reads one message and must not consume it before
        it is done (a Relink subscription: the messages that follow it are
        ignored), so that the peer's messages meanwhile cost no memory: an
        adversarial run sent 30,000 of them within the window, and held,
        they filled the connection's budget.
        """
        self._ignoring = True
        kept: deque[InboundItem] = deque()
        for item in self._items:
            if isinstance(item, MessageReceived):
                self._ignored += 1
                self._link._release(_cost(item))
            else:
                kept.append(item)
        self._items = kept

    def discard(self) -> None:
        """Consume everything held and everything that arrives later (nobody will read it)."""
        self._discarding = True
        count = sum(isinstance(item, MessageReceived) for item in self._items) + self._ignored
        self._ignored = 0
        self._link._release(sum(_cost(item) for item in self._items))
        self._items.clear()
        if count:
            self._link._consume(self.id, count)

    async def wait_closed(self) -> None:
        """Wait until the peer closed the channel (or the link ended)."""
        await self._closed.wait()

    def __aiter__(self) -> InboundChannel:
        return self

    async def __anext__(self) -> tuple[bytes, ...]:
        try:
            return await self.receive()
        except trio.EndOfChannel:
            raise StopAsyncIteration from None


def _cost(item: InboundItem) -> int:
    # What a held item counts against max_read_ahead: its bytes plus the
    # kit's per-item cost, so that a flood of tiny messages is bounded too.
    if isinstance(item, MessageReceived):
        return ITEM_COST + sum(map(len, item.parts))
    return ITEM_COST
