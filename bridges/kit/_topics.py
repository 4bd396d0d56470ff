"""Publishing into an app's topics from a bridge: one publishing stream per topic.

A bridge whose protocol can publish (Epoxy's ``Publish`` event, MicroMsg2's
SEND frames) puts each value into the app's :class:`rstreams.Topic` the way
a TCP client does: through the router, by the route every mounted topic
serves for publishers (:func:`rstreams.publish_to_topic`). So no second
registry of topics is kept in step with the app, and the elements are
stored as sent.

:class:`TopicPublisher` keeps one such stream per topic, fed from a channel
without a buffer: the first value for a topic opens its stream, the next
ones go down the same stream in order, and :meth:`TopicPublisher.publish`
returns once the topic's stream took the value, that is once the topic had
room. A topic held back by a slow ``block`` subscriber holds the publisher
back, and with it the bridge's connection.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import trio

from rstreams import Router, Session, SessionConfig, SubscriptionError, open_stream_session, publish_to_topic
from rstreams.protocol import DEFAULT_CONNECTION_MEMORY
from rstreams.support import memory_stream_pair

from ..errors import BridgeError
from ._peer_log import PeerWarnings

__all__ = ["open_app_session", "TopicPublisher", "TopicRefused"]

logger = logging.getLogger("rstreams.bridges")


@asynccontextmanager
async def open_app_session(app: Router, *, max_connection_memory: int = DEFAULT_CONNECTION_MEMORY) -> AsyncIterator[Session]:
    """A session to ``app`` in this process, the way every bridge serves an app.

    :func:`rstreams.open_local_session` with two differences: the client side
    serves a router of its own (empty), which :func:`rstreams.publish_to_topic`
    needs (the app subscribes back to it for the elements); and both sides
    keep the bridge connection's own memory budget, so that what the app's
    side holds for one bridge peer (elements asked for and not yet taken,
    publications queued) is bounded by the same number as the bridge
    connection itself, not by the default budget.
    """
    config = SessionConfig.for_connection_memory(max_connection_memory)
    client_stream, server_stream = memory_stream_pair()
    async with open_stream_session(server_stream, app=app, config=config):
        async with open_stream_session(client_stream, app=Router(), config=config) as session:
            yield session


class TopicRefused(BridgeError):
    """A value was not taken into a topic: the name is not one of the app's
    topics, or the topic refused it (:meth:`TopicPublisher.publish`).

    Attributes:
        topic: the name the value was for.
        reason: why, as the app said it (``no such publisher: ...``).
    """

    def __init__(self, topic: str, reason: str) -> None:
        super().__init__(f"dropped a value for topic {topic!r}: {reason}")
        self.topic = topic
        self.reason = reason


class _Handed:
    # One batch on its way into a topic's stream, as its publisher waits
    # for it: done once the stream sent it all (taken) or ended first.
    __slots__ = ("values", "done", "taken")

    def __init__(self, values: list[bytes]) -> None:
        self.values = values
        self.done = trio.Event()
        self.taken = False


class _Feed:
    # One topic's stream, as its publishers see it: where batches go, and
    # why the stream ended if the app refused it.
    __slots__ = ("send", "refusal")

    def __init__(self, send: trio.MemorySendChannel[_Handed]) -> None:
        self.send = send
        self.refusal: str | None = None


class _Batches:
    # The batches of a feed as publish_to_topic(batches=True) reads them.
    # Asking for the next one says the one before was sent (queued into the
    # session within the topic's demand); release() says the stream ended
    # with one still in hand.

    def __init__(self, receive: trio.MemoryReceiveChannel[_Handed]) -> None:
        self._receive = receive
        self._pending: _Handed | None = None

    def __aiter__(self) -> _Batches:
        return self

    async def __anext__(self) -> list[bytes]:
        self.release(taken=True)
        try:
            handed = await self._receive.receive()
        except (trio.EndOfChannel, trio.ClosedResourceError):
            # Closed: publish_to_topic has ended (its connection's end
            # cancelled it) while the topic's publisher still asked for more.
            raise StopAsyncIteration from None
        self._pending = handed
        return handed.values

    def release(self, *, taken: bool) -> None:
        handed, self._pending = self._pending, None
        if handed is not None:
            handed.taken = taken
            handed.done.set()


class TopicPublisher:
    """Values into an app's topics, one publishing stream per topic (see the module docstring).

    Args:
        session: a session opened with an app of its own (:func:`open_app_session`).
        nursery: where each topic's stream runs.
        protocol: the bridge's name, for log lines.

    A value for a name that is not a topic (or a topic that refuses) is
    logged (the first ``MAX_PEER_WARNINGS`` times, then counted, the count
    logged at :meth:`aclose`) and dropped, and :meth:`publish` raises :class:`TopicRefused`, so
    that a bridge whose protocol can say so tells its peer: the stream into
    it fails at once and is removed. Bounded by the app's topics: one stream
    per topic being published into.
    """

    def __init__(self, session: Session, nursery: trio.Nursery, *, protocol: str = "bridge") -> None:
        self.session = session
        self.protocol = protocol
        self._nursery = nursery
        self._feeds: dict[str, _Feed] = {}
        # One per connection: a peer that keeps sending to a name that is
        # not a topic gets a few lines in the log, then a count at the end.
        self._warnings = PeerWarnings(logger)

    async def publish(self, topic: str, value: bytes) -> None:
        """Hand ``value`` to ``topic``'s stream; return once it was taken.

        Raises:
            TopicRefused: it was not taken (logged already).

        Cancellation: the value may or may not have been taken. Always checkpoints.
        """
        await self.publish_many(topic, [value])

    async def publish_many(self, topic: str, values: list[bytes]) -> None:
        """Hand ``values`` to ``topic``'s stream as one batch; return once it took them all.

        What a bridge that read many values for one topic at once (a read
        of many SENDs) uses: the stream takes them in one step, instead of
        a step each. Taken means sent into the topic's publishing stream
        within the topic's demand (room), as :meth:`publish` means it; until
        then the caller holds them (and counts them in its budget). The list
        is the stream's from then on.

        Raises:
            TopicRefused: the stream into the topic refused them, or ended
                before it took them all (logged already).

        Cancellation: the values may or may not have been taken. Always checkpoints.
        """
        if not topic or "?" in topic:
            await trio.lowlevel.checkpoint()
            self._warnings.warn("%s: dropped %s for %r: not a topic name", self.protocol, _values(len(values)), topic)
            raise TopicRefused(topic, "not a topic name")
        feed = self._feeds.get(topic)
        if feed is None:
            send, batches = trio.open_memory_channel[_Handed](0)
            feed = self._feeds[topic] = _Feed(send)
            self._nursery.start_soon(self._publish, topic, feed, batches)
        handed = _Handed(values)
        try:
            await feed.send.send(handed)
        except trio.BrokenResourceError:
            # The stream into the topic ended, and said why.
            raise TopicRefused(topic, feed.refusal or "the topic's stream ended") from None
        except trio.ClosedResourceError:
            raise TopicRefused(topic, "the bridge is closing") from None
        await handed.done.wait()
        if not handed.taken:
            raise TopicRefused(topic, feed.refusal or "the topic's stream ended")

    async def _publish(self, topic: str, feed: _Feed, receive: trio.MemoryReceiveChannel[_Handed]) -> None:
        batches = _Batches(receive)
        try:
            with receive:
                await publish_to_topic(self.session, topic, batches, batches=True)
        except SubscriptionError as exc:
            feed.refusal = str(exc)
            self._warnings.warn("%s: dropped values for topic %r: %s", self.protocol, topic, exc)
        finally:
            # A batch still in hand was not all taken: its publisher hears so.
            batches.release(taken=False)
            if self._feeds.get(topic) is feed:
                del self._feeds[topic]

    async def aclose(self) -> None:
        """End the publishing streams; they finish once what they took is in the topics."""
        for feed in list(self._feeds.values()):
            await feed.send.aclose()
        self._warnings.summarize(self.protocol)


def _values(count: int) -> str:
    return "a value" if count == 1 else f"{count} values"
