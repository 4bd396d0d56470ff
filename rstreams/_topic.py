"""Pub/sub topics: a named hub that many publish into and many read from.

::

    chat = rstreams.Topic("chat", capacity=256)
    app = rstreams.Router()
    chat.mount(app)        # serves "chat" (subscribe) and "chat/publish"

Subscribers ask for ``chat`` and read at their own pace; the slow-subscriber
policy is chosen per subscriber (``chat?policy=block|drop|latest``, see
:mod:`rstreams._topic_core`). Publishing into the topic:

* from server-side code: ``await chat.publish(value)`` /
  ``await chat.publish_many(values)``;
* from a client: the client serves a publisher on its own connection and
  subscribes to ``chat/publish?source=NAME``; the server subscribes back to
  ``NAME`` and pulls from it only as much as the topic has room for, so a
  client publishing into a topic read by a slow ``block`` subscriber is held
  back by demand, end to end. That stream completes (with no elements) once
  the client's publisher completed and all of its elements are in the topic,
  which is how the client knows they were accepted. :func:`publish_to_topic`
  does all of this in one call.

Replay: ``chat?from=N`` starts at sequence number N (``from=earliest``: the
oldest element held) and frames every element as 8-byte big-endian sequence
number + element (:func:`encode_sequenced`); a ``from`` older than what the
topic holds is answered with onError, never silently skipped. ``until=now``
completes the stream once it reached the element that was newest when it
subscribed (a high-water mark, used by Spark's availableNow trigger).
``history=N`` starts N elements back (as many as are held), unframed: a chat
client joining sees the last messages, a chart its recent past.

Memory: at most ``capacity`` elements per topic, plus what each subscriber's
demand allows on the wire, plus for each client publishing into it at most
``capacity`` elements requested and not yet accepted.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterable, Iterable
from dataclasses import dataclass
from typing import Any

import trio

from ._codecs import CodecLike, resolve_codec
from ._publish import Route, Router, Sink, SubscribeRequest
from ._session import Session
from ._topic_core import Cursor, CursorPolicy, RetentionError, TopicLog, encode_sequenced

__all__ = ["Topic", "TopicStatistics", "TopicSubscriberStatistics", "publish_to_topic"]

#: The default number of elements a topic holds.
DEFAULT_CAPACITY = 1024
#: At most this many elements go to one subscriber per step, so that one
#: fast subscriber with a huge demand does not hold the topic's attention.
MAX_TAKE = 4096
#: publish_to_topic hands a synchronous iterable over in batches of this many.
PUBLISH_BATCH = 256
#: The suffix of the route that clients publish through.
PUBLISH_SUFFIX = "/publish"


@dataclass(frozen=True, slots=True)
class TopicSubscriberStatistics:
    """One subscriber of a topic.

    Attributes:
        policy: "block", "drop" or "latest".
        position: the sequence number it reads next.
        lag: elements published that it has not taken yet.
        delivered: elements taken.
        dropped: elements skipped by its policy.
    """

    policy: str
    position: int
    lag: int
    delivered: int
    dropped: int


@dataclass(frozen=True, slots=True)
class TopicStatistics:
    """A snapshot of a topic.

    Attributes:
        name: the topic's name.
        capacity: at most this many elements are held.
        held: elements held now.
        first_sequence: the oldest sequence number held.
        next_sequence: the sequence number of the next element published.
        published: elements accepted since the topic was made.
        room: elements publishers may add now.
        publishers: clients publishing into it right now.
        subscribers: one entry per subscriber.
    """

    name: str
    capacity: int
    held: int
    first_sequence: int
    next_sequence: int
    published: int
    room: int
    publishers: int
    subscribers: tuple[TopicSubscriberStatistics, ...]


class Topic:
    """A named hub: publishers put elements in, every subscriber reads them all.

    Args:
        name: the route path subscribers ask for (``chat``); publishing
            clients use ``NAME/publish?source=...``.
        capacity: at most this many elements are held in memory.
        codec: how :meth:`publish` encodes values (elements are stored as
            bytes); subscribers choose their own codec.

    A topic is used from one trio run at a time (its own thread); call
    :meth:`statistics` from another thread through ``trio.from_thread``.
    """

    def __init__(self, name: str, *, capacity: int = DEFAULT_CAPACITY, codec: CodecLike = None) -> None:
        if not name or "?" in name:
            raise ValueError(f"a topic name is a route path without a query: {name!r}")
        self.name = name
        self._log = TopicLog(capacity)
        self._codec = resolve_codec(codec)
        self._lot = trio.lowlevel.ParkingLot()  # everyone waiting for a change
        self._closed = False
        self._publishers = 0

    # ---- routes ------------------------------------------------------------

    def mount(self, app: Router) -> None:
        """Serve this topic on ``app``: ``NAME`` to subscribe, ``NAME/publish`` to publish."""
        app.add(self.name, Route(self._serve_subscriber, kind="topic"))
        app.add(self.name + PUBLISH_SUFFIX, Route(self._serve_publisher, kind="topic publishing"))

    # ---- publishing -----------------------------------------------------------

    @property
    def room(self) -> int:
        """Elements that may be published now (see the module docstring of ``_topic_core``)."""
        return self._log.room()

    def publish_nowait(self, value: Any) -> None:
        """Publish one value now.

        Raises:
            trio.WouldBlock: no room (a blocking subscriber is ``capacity`` behind).
            trio.ClosedResourceError: the topic is closed.
        """
        self._check_open()
        if not self._log.append([self._encode(value)]):
            raise trio.WouldBlock
        self._lot.unpark_all()

    async def publish(self, value: Any) -> None:
        """Publish one value, waiting for room.

        Atomic under cancellation: published, or ``trio.Cancelled`` and not.
        Always checkpoints.
        """
        await self.publish_many([value])

    async def publish_many(self, values: Iterable[Any]) -> None:
        """Publish every value in order, waiting for room as often as needed.

        Checkpoints once per step, not once per element. On cancellation the
        values already accepted stay published and the rest are not.

        Raises:
            trio.ClosedResourceError: the topic is closed.
        """
        # In chunks, so a long (or endless) iterable is never held whole.
        iterator = iter(values)
        chunk = [self._encode(value) for value in itertools.islice(iterator, PUBLISH_BATCH)]
        if not chunk:
            await trio.lowlevel.checkpoint()
            return
        while chunk:
            await self._append_all(chunk)
            chunk = [self._encode(value) for value in itertools.islice(iterator, PUBLISH_BATCH)]

    async def _append_all(self, pending: list[bytes]) -> None:
        await trio.lowlevel.checkpoint_if_cancelled()
        while pending:
            self._check_open()
            accepted = self._log.append(pending)
            if accepted:
                self._lot.unpark_all()
                pending = pending[accepted:]
            else:
                await self._lot.park()
        await trio.lowlevel.cancel_shielded_checkpoint()

    async def wait_room(self) -> int:
        """Wait until at least one element may be published; return the room.

        Raises:
            trio.ClosedResourceError: the topic is (or becomes) closed.
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        while True:
            self._check_open()
            room = self._log.room()
            if room:
                await trio.lowlevel.cancel_shielded_checkpoint()
                return room
            await self._lot.park()

    def close(self) -> None:
        """Close the topic: subscribers complete after the elements held; publishing raises."""
        self._closed = True
        self._lot.unpark_all()

    @property
    def closed(self) -> bool:
        return self._closed

    def statistics(self) -> TopicStatistics:
        """A snapshot: the log, the publishers and every subscriber's lag."""
        log = self._log
        subscribers = tuple(
            TopicSubscriberStatistics(
                policy=cursor.policy.value,
                position=cursor.position,
                lag=max(0, log.next_sequence - cursor.position),
                delivered=cursor.delivered,
                dropped=cursor.dropped,
            )
            for cursor in sorted(log.cursors, key=lambda c: c.position)
        )
        return TopicStatistics(
            name=self.name,
            capacity=log.capacity,
            held=len(log),
            first_sequence=log.first_sequence,
            next_sequence=log.next_sequence,
            published=log.published,
            room=log.room(),
            publishers=self._publishers,
            subscribers=subscribers,
        )

    def _encode(self, value: Any) -> bytes:
        if self._codec is not None:
            return self._codec.encode(value)
        if isinstance(value, (bytes, bytearray, memoryview)):
            return bytes(value)
        raise TypeError(f"topic {self.name!r} has no codec and stores bytes, got {type(value).__name__}")

    def _check_open(self) -> None:
        if self._closed:
            raise trio.ClosedResourceError(f"topic {self.name!r} is closed")

    # ---- the routes' publishers ------------------------------------------------

    async def _serve_subscriber(self, sink: Sink, request: SubscribeRequest) -> None:
        policy_name = request.params.get("policy", CursorPolicy.BLOCK.value)
        try:
            policy = CursorPolicy(policy_name)
        except ValueError:
            raise ValueError(f"parameter policy={policy_name!r}: use block, drop or latest") from None
        raw_from = request.params.get("from")
        sequenced = raw_from is not None
        start: int | None = None
        if raw_from == "earliest":
            start = self._log.first_sequence
        elif raw_from is not None:
            start = request.int_param("from", 0, minimum=0)
        if "history" in request.params:
            if sequenced:
                raise ValueError("parameters from and history exclude each other")
            history = request.int_param("history", 0, minimum=0)
            start = max(self._log.first_sequence, self._log.next_sequence - history)
        until: int | None = None
        if request.params.get("until") == "now":
            until = self._log.next_sequence
        elif "until" in request.params:
            raise ValueError("parameter until: only until=now is understood")
        try:
            cursor = self._log.attach(policy, start)
        except RetentionError as error:
            raise RuntimeError(f"topic {self.name}: {error}") from None
        try:
            await self._feed(sink, cursor, sequenced, until)
        finally:
            self._log.detach(cursor)
            self._lot.unpark_all()  # publishers it held back may have room now

    async def _feed(self, sink: Sink, cursor: Cursor, sequenced: bool, until: int | None) -> None:
        log = self._log
        while True:
            if until is not None and cursor.position >= until:
                return
            await sink.wait_demand()
            limit = min(sink.demand, MAX_TAKE)
            if until is not None:
                limit = min(limit, until - cursor.position)
            first, elements = log.take(cursor, limit)
            if not elements:
                if self._closed:
                    return
                await self._lot.park()
                continue
            self._lot.unpark_all()  # a cursor moved: a publisher may have room
            if sequenced:
                elements = [encode_sequenced(first + i, element) for i, element in enumerate(elements)]
            # Demand covers them all (limit <= demand), so this queues at once.
            await sink.send_many(elements)

    async def _serve_publisher(self, sink: Sink, request: SubscribeRequest) -> None:
        source = request.params.get("source")
        if not source:
            raise ValueError(f"publishing into a topic needs a source: {self.name}{PUBLISH_SUFFIX}?source=NAME")
        self._check_open()
        self._publishers += 1
        try:
            async with request.session.subscribe(source, prefetch=0) as upstream:
                outstanding = 0  # requested from the source, not yet received
                batches = upstream.batches()
                while True:
                    # Ask the source only for what the topic can take now: a
                    # slow blocking subscriber reaches all the way back to
                    # the client's publisher.
                    room = await self.wait_room()
                    if room > outstanding:
                        upstream.request(room - outstanding)
                        outstanding = room
                    try:
                        batch = await batches.__anext__()
                    except StopAsyncIteration:
                        return
                    outstanding -= len(batch)
                    await self._append_all(list(batch))  # already bytes
        finally:
            self._publishers -= 1


async def publish_to_topic(
    session: Session,
    topic: str,
    values: Iterable[Any] | AsyncIterable[Any],
    *,
    codec: CodecLike = None,
    source: str | None = None,
) -> int:
    """Publish ``values`` into the peer's topic ``topic``; return how many.

    The session must have been opened with an ``app`` (a :class:`Router`,
    possibly empty): a route named ``source`` (default: a fresh name) is
    added to it for the duration of the call, and the server subscribes back
    to it. The server asks only for what the topic has room for, so a full
    topic holds this call back instead of filling memory: a synchronous
    iterable is read at most PUBLISH_BATCH values ahead of demand, an async
    iterable one value (each is sent as soon as it comes and demand allows).
    Returns once the server has accepted every element into the topic.

    Raises:
        ValueError: the session has no app to serve the source from.
        PublisherError: the topic refused (closed, or unknown).

    Cancellation cancels the source; elements already accepted stay published.
    """
    app = session.app
    if app is None:
        raise ValueError("publish_to_topic needs a session opened with app=rstreams.Router()")
    encoder = resolve_codec(codec)
    source = source or f"rstreams-topic-source-{next(_source_numbers)}"
    count = 0

    async def publisher(sink: Sink) -> None:
        nonlocal count
        batch: list[Any] = []

        async def flush() -> None:
            nonlocal count, batch
            await sink.send_many(batch)
            count += len(batch)
            batch = []

        if isinstance(values, AsyncIterable):
            # A live source (a sensor): send each value as it comes, so
            # nothing waits in a batch for the next reading.
            async for value in values:
                batch.append(encoder.encode(value) if encoder is not None else value)
                await flush()
            return
        for value in values:
            batch.append(encoder.encode(value) if encoder is not None else value)
            if len(batch) >= PUBLISH_BATCH:
                await flush()
        if batch:
            await flush()

    app.add(source, publisher)
    try:
        async with session.subscribe(f"{topic}{PUBLISH_SUFFIX}?source={source}", prefetch=1) as done:
            async for _ in done:
                pass
    finally:
        # Router has no public removal; the route was ours for this call only.
        app._routes.pop(source, None)
    return count


_source_numbers = itertools.count()
