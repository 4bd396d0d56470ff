"""The other side of a connection, as a subscriber sees it: a :class:`Peer`.

A :class:`~rstreams.Session` is one kind of peer: its streams come over the
reactive-streams-io protocol. A bridge to another protocol (EMP, Relink,
Epoxy) is another: its streams come over that protocol and are fed into
the very same :class:`~rstreams.Subscription` objects, so code written
against a peer reads any publisher, whatever carries it::

    async with rstreams.connect(url) as peer:       # tcp://, ws://, emp://, ...
        async with peer.subscribe("range?count=3") as numbers:
            async for raw in numbers:
                ...

:class:`FeedPeer` is the base of peers that feed subscriptions themselves
(every bridge's client): it keeps the subscriptions, their outstanding
demand and their ends, and hands each one to the subclass as a
:class:`StreamFeed`, the feeding side of one subscription.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from typing import Any

import trio

from ._codecs import CodecLike
from ._errors import LocalProtocolError
from ._subscribe import StreamReceiver, Subscription
from .protocol import UNBOUNDED, ElementBatch

__all__ = ["Peer", "FeedPeer", "StreamFeed", "DEFAULT_PREFETCH"]

#: The default ``prefetch`` of :meth:`Peer.subscribe`: None, a window that
#: adapts to the consumer (``rstreams.protocol.AdaptiveDemand``).
DEFAULT_PREFETCH: int | None = None


class Peer(trio.abc.AsyncResource):
    """Something whose publishers can be subscribed to.

    Subclasses: :class:`~rstreams.Session` (reactive-streams-io), and every
    bridge's client (through :class:`FeedPeer`).
    """

    @abc.abstractmethod
    def subscribe(
        self, name: str, *, prefetch: int | None = DEFAULT_PREFETCH, codec: CodecLike = None, copy: bool = True
    ) -> Subscription:
        """Subscribe to the publisher ``name`` (use the result with ``async with``).

        Args:
            name: the publisher name with its query, e.g. ``"range?count=5"``.
            prefetch: elements kept requested ahead of the application,
                topped up automatically; 0 for manual demand
                (``subscription.request(n)``); None (the default) for a
                window that adapts to the consumer, within a byte budget
                (see :class:`~rstreams.protocol.AdaptiveDemand`).
            codec: how to decode elements ("raw", "msgpack", "json", a Codec).
            copy: False: large elements may be handed out as read-only
                ``memoryview`` objects instead of ``bytes`` (zero-copy; see
                :meth:`Session.subscribe`; a bridge's client hands out
                bytes either way). Takes no codec.
        """

    @abc.abstractmethod
    async def fetch(self, name: str, limit: int, *, codec: CodecLike = None) -> list[Any]:
        """Subscribe to ``name``, ask for ``limit`` elements, and return them.

        Returns once the publisher completes or ``limit`` elements arrived
        (the stream is then cancelled).
        """


class StreamFeed:
    """The feeding side of one subscription, handed to a :class:`FeedPeer`.

    The peer implementation calls :meth:`subscribed` once the remote side
    accepted the stream, :meth:`deliver` with elements (never more than
    :attr:`demand`), and ends it with :meth:`complete` or :meth:`fail`. All
    of these are synchronous and never block; :meth:`wait_demand` is the one
    that waits, for a feeding task that must not read ahead of demand.

    Attributes:
        name: the publisher name the subscriber asked for.
        id: the stream's id, unique within its peer.
        context: free for the peer implementation (its per-stream state).
    """

    __slots__ = ("name", "id", "context", "_receiver", "_peer", "_demand", "_ended", "_cancelled", "_demand_waiter")

    def __init__(self, peer: FeedPeer, receiver: StreamReceiver, stream_id: int, demand: int) -> None:
        self.name = receiver.name
        self.id = stream_id
        self.context: Any = None
        self._receiver = receiver
        self._peer = peer
        self._demand = demand
        self._ended = False
        self._cancelled = False
        self._demand_waiter: trio.Event | None = None

    @property
    def adaptive(self) -> bool:
        """True when the subscriber's demand adapts (it gave no ``prefetch``,
        or drives such a window by hand: :attr:`rstreams.Subscription.adaptive`):
        it starts small and grows while the subscriber keeps up, so a
        protocol that fixes a window once (MicroMsg2's batch-ack) should not
        fix it at the first, small demand, but at what the demand may grow
        to; its acknowledgements still follow the demand. Read when the
        first demand arrives."""
        return self._receiver.adaptive

    @property
    def demand(self) -> int:
        """Elements requested by the subscriber and not delivered yet."""
        return self._demand

    @property
    def ended(self) -> bool:
        """True once the stream completed, failed or was cancelled."""
        return self._ended

    @property
    def cancelled(self) -> bool:
        """True once the subscriber cancelled (left its ``async with`` early)."""
        return self._cancelled

    def subscribed(self, element_size: int = 0) -> None:
        """The remote publisher accepted the stream (``element_size``: 0 = variable)."""
        if not self._ended:
            self._receiver._on_subscribed(element_size)

    def deliver(self, elements: Sequence[bytes]) -> None:
        """Hand ``elements`` to the subscriber.

        Raises:
            LocalProtocolError: more elements than :attr:`demand` (Reactive
                Streams rule 1.1: never more than requested).
        """
        count = len(elements)
        if self._ended or not count:
            return
        if count > self._demand:
            raise LocalProtocolError(f"{count} elements delivered with a demand of {self._demand}")
        self._demand -= count
        if not self._receiver._subscribed:
            self._receiver._on_subscribed(0)
        self._receiver._on_elements(ElementBatch(items=list(elements)))

    def complete(self) -> None:
        """End the stream normally (after what was delivered)."""
        self._end(None)

    def fail(self, error: BaseException) -> None:
        """End the stream with ``error``, which the subscriber's iteration raises."""
        self._end(error)

    async def wait_demand(self) -> None:
        """Wait until the subscriber has demand, or the stream has ended.

        Always checkpoints.
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        while self._demand <= 0 and not self._ended:
            waiter = self._demand_waiter = trio.Event()
            await waiter.wait()
        await trio.lowlevel.cancel_shielded_checkpoint()

    def _add_demand(self, n: int) -> None:
        self._demand = min(self._demand + n, UNBOUNDED)
        self._wake()

    def _wake(self) -> None:
        waiter, self._demand_waiter = self._demand_waiter, None
        if waiter is not None:
            waiter.set()

    def _end(self, error: BaseException | None) -> None:
        if self._ended:
            return
        self._ended = True
        self._peer._forget(self)
        self._receiver._on_end(error)
        self._wake()

    def __repr__(self) -> str:
        state = "cancelled" if self._cancelled else "ended" if self._ended else f"demand={self._demand}"
        return f"<StreamFeed {self.name!r} id={self.id} {state}>"


class FeedPeer(Peer):
    """A peer whose implementation feeds subscriptions itself (every bridge's client).

    A subclass implements :meth:`open_stream` (called synchronously when a
    subscription opens; it usually starts a task that feeds the
    :class:`StreamFeed`), and may override :meth:`stream_requested` and
    :meth:`stream_cancelled`. When the connection underneath ends, it calls
    :meth:`end_streams` with the error every open stream should raise.
    """

    def __init__(self) -> None:
        self._feeds: dict[int, StreamFeed] = {}
        self._last_id = 0
        self._end_error: BaseException | None = None

    # ---- for subclasses ---------------------------------------------------

    @abc.abstractmethod
    def open_stream(self, feed: StreamFeed) -> None:
        """A subscription opened: start feeding ``feed``. Must not block."""

    def stream_requested(self, feed: StreamFeed, n: int) -> None:
        """The subscriber requested ``n`` more (``feed.demand`` already counts them)."""

    def stream_cancelled(self, feed: StreamFeed) -> None:
        """The subscriber cancelled ``feed``: stop feeding it."""

    @property
    def feeds(self) -> list[StreamFeed]:
        """The streams open right now."""
        return list(self._feeds.values())

    def end_streams(self, error: BaseException) -> None:
        """End every open stream with ``error``, and refuse new ones with it."""
        if self._end_error is None:
            self._end_error = error
        for feed in list(self._feeds.values()):
            feed.fail(_copy_error(error))

    # ---- Peer -------------------------------------------------------------------

    def subscribe(
        self, name: str, *, prefetch: int | None = DEFAULT_PREFETCH, codec: CodecLike = None, copy: bool = True
    ) -> Subscription:
        return Subscription(self, name, prefetch=prefetch, codec=codec, copy=copy)

    async def fetch(self, name: str, limit: int, *, codec: CodecLike = None) -> list[Any]:
        if type(limit) is not int or limit < 1:
            raise ValueError(f"limit must be an int >= 1, got {limit!r}")
        elements: list[Any] = []
        async with self.subscribe(name, prefetch=0, codec=codec) as subscription:
            subscription.request(limit)
            async for element in subscription:
                elements.append(element)
                if len(elements) >= limit:
                    break
        return elements

    # ---- what a Subscription calls (SubscriptionOwner) ----------------------------

    def _open_subscription(self, receiver: StreamReceiver, initial_demand: int) -> int:
        if self._end_error is not None:
            raise _copy_error(self._end_error)
        self._last_id += 1
        feed = StreamFeed(self, receiver, self._last_id, initial_demand)
        self._feeds[feed.id] = feed
        self.open_stream(feed)
        return feed.id

    def _cancel_subscription(self, receiver: StreamReceiver) -> None:
        assert receiver.subscriber is not None
        feed = self._feeds.pop(receiver.subscriber, None)
        if feed is not None and not feed._ended:
            feed._cancelled = True
            feed._ended = True
            feed._wake()
            self.stream_cancelled(feed)

    def _request(self, subscriber: int, n: int) -> None:
        feed = self._feeds.get(subscriber)
        if feed is not None:
            feed._add_demand(n)
            self.stream_requested(feed, n)

    def _outstanding_demand(self, subscriber: int) -> int:
        feed = self._feeds.get(subscriber)
        return feed._demand if feed is not None else 0

    def _receive_now(self) -> int:
        # A bridge's elements come from its own reader, in its own task.
        return 0

    def _forget(self, feed: StreamFeed) -> None:
        if self._feeds.get(feed.id) is feed:
            del self._feeds[feed.id]


def _copy_error(error: BaseException) -> BaseException:
    # Each stream raises its own copy: one exception object raised in
    # several tasks would collect all their tracebacks.
    clone = type(error).__new__(type(error))
    clone.args = error.args
    clone.__dict__.update(error.__dict__)
    clone.__cause__ = error.__cause__
    return clone

