"""A client's subscription to one destination, as the trio adapter hands it out.

:meth:`MicroMsg2Connection.subscribe` makes one; the connection's reader
puts the destination's messages in its queue, then its ``completed`` or
stream ERROR. Taking a message is what acknowledges it: the window as demand.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Union, cast

import trio

from ..kit import InboundQueue
from ._errors import MicroMsg2Closed, StreamError
from ._events import Completed, MessageReceived, StreamFailed

if TYPE_CHECKING:
    from ._trio import MicroMsg2Connection

__all__ = ["MessageStream", "StreamItem"]

#: What a stream's queue holds: its messages, then its end.
StreamItem = Union[MessageReceived, Completed, StreamFailed]


def _is_message(item: StreamItem) -> bool:
    return isinstance(item, MessageReceived)


class MessageStream:
    """A client's subscription to one destination: its messages, then its end.

    Made by :meth:`MicroMsg2Connection.subscribe`. Each message taken is
    acknowledged at once (that is the demand the server sees).
    """

    def __init__(self, connection: MicroMsg2Connection, destination: str) -> None:
        self.connection = connection
        self.destination = destination
        self._queue: InboundQueue[StreamItem] = InboundQueue(connection)
        self._ended = False

    @property
    def ended(self) -> bool:
        """True once ``completed`` or the stream's ERROR was taken, or it was unsubscribed."""
        return self._ended

    async def receive(self) -> MessageReceived:
        """The next message for this destination.

        Raises:
            trio.EndOfChannel: the server sent ``completed``.
            StreamError: the server sent ``error;destination=D,message=M``.
            MicroMsg2Closed: the connection ended (closed) before either.
            PeerError, RemoteProtocolError, MicroMsg2ConnectionLost: it ended
                with an error.

        Cancellation: nothing is taken. Always checkpoints.
        """
        return (await self.receive_batch(1))[0]

    async def receive_batch(self, max_count: int) -> list[MessageReceived]:
        """The next messages for this destination: at least one, at most ``max_count``.

        As :meth:`receive`, then as many more as are held already (one read
        brings many), taken in one step and acknowledged with one ack: a
        consumer that keeps up then costs the peer a window update per read,
        not per message.

        Raises:
            ValueError: ``max_count`` is not positive.
            and as :meth:`receive`, when the first is not a message.

        Cancellation: nothing is taken. Always checkpoints.
        """
        if max_count <= 0:
            raise ValueError(f"max_count must be positive, got {max_count}")
        if self._ended:
            await trio.lowlevel.checkpoint()
            raise trio.EndOfChannel
        try:
            item = await self._queue.take()
        except trio.EndOfChannel:
            reason = self.connection.end_reason
            by_peer = reason.by_peer if isinstance(reason, MicroMsg2Closed) else True
            raise MicroMsg2Closed(
                f"the connection closed before {self.destination!r} completed", by_peer=by_peer
            ) from None
        if isinstance(item, MessageReceived):
            batch = [item]
            if max_count > 1:  # (only messages: the predicate stops at the end)
                batch += cast("list[MessageReceived]", self._queue.take_held(max_count - 1, _is_message))
            self.connection._consumed(len(batch))
            return batch
        self._end()
        if isinstance(item, StreamFailed):
            raise StreamError(self.destination, item.message)
        raise trio.EndOfChannel

    def __aiter__(self) -> MessageStream:
        return self

    async def __anext__(self) -> MessageReceived:
        try:
            return await self.receive()
        except trio.EndOfChannel:
            raise StopAsyncIteration from None

    def unsubscribe(self) -> None:
        """Send ``unsubscribe`` (if the stream is still open) and stop reading for it.

        Messages held for it are dropped and acknowledged. Never blocks, so
        it is safe in a ``finally`` of a cancelled task.
        """
        if self._ended:
            return
        self._end()
        self.connection._unsubscribe(self.destination)

    def _end(self) -> None:
        self._ended = True
        self.connection._streams.pop(self.destination, None)
        dropped = self._queue.detach()
        self.connection._consumed(sum(isinstance(item, MessageReceived) for item in dropped))
