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
  does all of this in one call. With ``confirm=1`` the stream also carries,
  as the client's demand allows, how many of its elements the topic holds
  so far (see ``CONFIRM_PARAMETER`` in :mod:`rstreams._topic_client`): what
  a client whose connection is cut midway needs to know where to start
  again.

Replay: ``chat?from=N`` starts at sequence number N (``from=earliest``: the
oldest element held) and frames every element as 8-byte big-endian sequence
number + element (:func:`encode_sequenced`); a ``from`` older than what the
topic holds is answered with an onError that the subscriber sees as
:class:`~rstreams.NotRetained` (saying how far behind it is), never silently
skipped. ``until=M`` completes the stream once it sent element M-1 (waiting
for it if need be); ``until=now`` once it reached the element that was newest
when it subscribed (a high-water mark, used by Spark's availableNow trigger).
``history=N`` starts N elements back (as many as are held), unframed: a chat
client joining sees the last messages, a chart its recent past. With ``from``,
``pack=K`` sends up to K elements per wire element, as an Arrow binary column
(:func:`~rstreams._topic_core.encode_block`); demand then counts blocks.
That is how Spark's executors read: a topic serves a range at a cost per
block, not per element.

Partitions: ``Topic("events", partitions=4, key=...)`` is four logs, each
numbered from 0 on its own; an element goes to the partition its key picks
(:class:`~rstreams._topic_core.Partitioner`), or round robin without a key.
Subscribers name one: ``events?partition=2&from=N&until=M``; Spark's
executors read the partitions in parallel that way. ``$offsets?topic=events``
says where each partition ends (:mod:`rstreams._topic_offsets`).

Memory: at most ``capacity`` elements (and ``capacity_bytes`` bytes, if set)
per partition, plus what each subscriber's demand allows on the wire, plus
for each client publishing into it at most ``capacity`` elements per
partition requested and not yet accepted. What the topic holds is the
application's memory, in no connection's budget: a topic that peers publish
into needs ``capacity_bytes``, or ``capacity`` of the largest elements a
connection accepts stay held after the peer is gone. A client's element
larger than ``capacity_bytes`` ends its ``NAME/publish`` stream with onError
(an ``InvalidParameter``: the client's mistake, one log line).

Waking: a subscriber waits for an element past its cursor, a publisher for
room, and each change wakes only those it may let proceed (``_Waiting``,
through which every change to the logs goes):

* an element appended to a partition wakes that partition's readers;
* room (the floor of a partition rising: its lowest blocking cursor took or
  detached, see :mod:`rstreams._topic_core`) wakes the publishers;
* an idempotent producer's elements taken in also wake the publishers
  waiting with a producer id (a retry may find its chunk already held);
* closing wakes everyone.

Anything else (a take or a detach that leaves the floor where it was, a
``drop`` or ``latest`` reader moving, a replay) wakes nobody: with a
thousand idle subscribers, one peer's subscribe and cancel, or its replay
read one element at a time, had woken all thousand each time (a
bystander's round trip 3-8 ms at the median, up to 0.9 s).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import trio

from ._codecs import CodecLike, resolve_codec
from ._errors import InvalidParameter, NotRetained
from ._publish import RESERVED_PREFIX, Route, Router, Sink, SubscribeRequest, check_route_path
from ._topic_client import CONFIRM_PARAMETER, PUBLISH_BATCH, PUBLISH_SUFFIX, publish_to_topic
from ._topic_core import (
    Cursor,
    CursorPolicy,
    Partitioner,
    ProducerLedger,
    SEQUENCE_PREFIX,
    RetentionError,
    TopicLog,
    encode_block,
    encode_sequenced,
)
from ._topic_offsets import PartitionOffsets, serve_offsets

__all__ = [
    "Topic",
    "TopicPartitionStatistics",
    "TopicStatistics",
    "TopicSubscriberStatistics",
    "publish_to_topic",
]

#: The default number of elements a topic holds.
DEFAULT_CAPACITY = 1024
#: At most this many elements go to one subscriber per step, so that one
#: fast subscriber with a huge demand does not hold the topic's attention.
MAX_TAKE = 4096
#: The same for a packed replay (``pack=K``), where elements cost the topic
#: almost nothing each: a join per block, no framing per element.
MAX_TAKE_PACKED = 32_768
#: The largest ``pack`` a subscriber may ask for.
MAX_PACK = 65_536
#: Producer ids a topic remembers for idempotent publishing (see ProducerLedger).
PRODUCERS_REMEMBERED = 10_000


@dataclass(frozen=True, slots=True)
class TopicSubscriberStatistics:
    """One subscriber of a topic.

    Attributes:
        policy: "block", "drop" or "latest".
        position: the sequence number it reads next.
        lag: elements published that it has not taken yet.
        delivered: elements taken.
        dropped: elements skipped by its policy.
        partition: the partition it reads.
    """

    policy: str
    position: int
    lag: int
    delivered: int
    dropped: int
    partition: int = 0


@dataclass(frozen=True, slots=True)
class TopicPartitionStatistics:
    """One partition of a topic.

    Attributes:
        partition: its number.
        held: elements held now.
        held_bytes: bytes of the elements held.
        first_sequence: the oldest sequence number held.
        next_sequence: the sequence number of the next element published.
        published: elements accepted since the topic was made.
        room: elements publishers may add now.
    """

    partition: int
    held: int
    held_bytes: int
    first_sequence: int
    next_sequence: int
    published: int
    room: int


@dataclass(frozen=True, slots=True)
class TopicStatistics:
    """A snapshot of a topic.

    Attributes:
        name: the topic's name.
        capacity: at most this many elements are held per partition.
        held: elements held now (all partitions).
        first_sequence: the oldest sequence number held in partition 0.
        next_sequence: the sequence number of the next element of partition 0.
        published: elements accepted since the topic was made (all partitions).
        room: elements publishers may add now (see :attr:`Topic.room`).
        publishers: clients publishing into it right now.
        subscribers: one entry per subscriber.
        partitions: one entry per partition.
        capacity_bytes: at most this many bytes are held per partition (None: no bound).
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
    partitions: tuple[TopicPartitionStatistics, ...] = ()
    capacity_bytes: int | None = None


class Topic:
    """A named hub: publishers put elements in, every subscriber reads them all.

    Args:
        name: the route path subscribers ask for (``chat``); publishing
            clients use ``NAME/publish?source=...``.
        capacity: at most this many elements are held in memory, per
            partition: the replay window by count.
        capacity_bytes: at most this many bytes of elements are held, per
            partition (None: bounded by ``capacity`` only).
        partitions: how many logs the topic is split into (each numbered
            from 0 on its own, each read by ``NAME?partition=I``).
        key: a function of each published value (the decoded value for
            elements that clients publish, if the topic has a codec; else
            the bytes) returning an int, str or bytes that picks its
            partition; None: round robin.
        codec: how :meth:`publish` encodes values (elements are stored as
            bytes); subscribers choose their own codec.

    A topic is used from one trio run at a time (its own thread); call
    :meth:`statistics` from another thread through ``trio.from_thread``.
    """

    def __init__(
        self,
        name: str,
        *,
        capacity: int = DEFAULT_CAPACITY,
        capacity_bytes: int | None = None,
        partitions: int = 1,
        key: Callable[[Any], Any] | None = None,
        codec: CodecLike = None,
    ) -> None:
        if not name or "?" in name:
            raise ValueError(f"a topic name is a route path without a query: {name!r}")
        if name.startswith(RESERVED_PREFIX):
            raise ValueError(f"names starting with {RESERVED_PREFIX!r} are reserved for the runtime: {name!r}")
        check_route_path(name)
        self.name = name
        self._partitioner = Partitioner(partitions, key)
        self._logs = [TopicLog(capacity, capacity_bytes) for _ in range(partitions)]
        self._codec = resolve_codec(codec)
        self._waiting = _Waiting(self._logs)
        self._closed = False
        self._publishers = 0
        self._ledger = ProducerLedger(PRODUCERS_REMEMBERED)

    @property
    def partitions(self) -> int:
        """How many partitions the topic has."""
        return len(self._logs)

    def offsets(self) -> tuple[PartitionOffsets, ...]:
        """Where each partition is: the oldest sequence number held and the next one."""
        return tuple(
            PartitionOffsets(partition=i, earliest=log.first_sequence, end=log.next_sequence) for i, log in enumerate(self._logs)
        )

    # ---- routes ------------------------------------------------------------

    def mount(self, app: Router) -> None:
        """Serve this topic on ``app``: ``NAME`` to subscribe, ``NAME/publish``
        to publish, and its offsets in the reserved ``$offsets?topic=NAME``."""
        app.add(self.name, Route(self._serve_subscriber, kind="topic"))
        app.add(self.name + PUBLISH_SUFFIX, Route(self._serve_publisher, kind="topic publishing"))
        serve_offsets(app, self)

    # ---- publishing -----------------------------------------------------------

    @property
    def room(self) -> int:
        """Elements that may be published now (see the module docstring of ``_topic_core``).

        With partitions: the least room of any partition, times the number
        of partitions for round robin (which spreads elements evenly), or
        once with a key (which may send them all to one partition).
        """
        least = min(log.room() for log in self._logs)
        return least * len(self._logs) if self._partitioner.key is None else least

    def publish_nowait(self, value: Any) -> None:
        """Publish one value now.

        Raises:
            trio.WouldBlock: no room in its partition (a blocking subscriber
                is ``capacity`` behind).
            trio.ClosedResourceError: the topic is closed.
        """
        self._check_open()
        element = self._encode(value)
        partition = self._partitioner.next_partition(value)
        if not self._waiting.append(partition, [element]):
            raise trio.WouldBlock
        self._partitioner.advance()

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
        values_chunk = list(itertools.islice(iterator, PUBLISH_BATCH))
        if not values_chunk:
            await trio.lowlevel.checkpoint()
            return
        while values_chunk:
            chunk = [self._encode(value) for value in values_chunk]
            await self._append_routed(self._partitioner.split(chunk, values_chunk))
            values_chunk = list(itertools.islice(iterator, PUBLISH_BATCH))

    async def _append_routed(self, routed: list[list[bytes]]) -> None:
        # Each partition's share in order; a full partition waits for its
        # slowest blocking subscriber while the others go on.
        await trio.lowlevel.checkpoint_if_cancelled()
        pending = [(partition, elements) for partition, elements in enumerate(routed) if elements]
        while pending:
            self._check_open()
            progressed = False
            waiting: list[tuple[int, list[bytes]]] = []
            for partition, elements in pending:
                accepted = self._waiting.append(partition, elements)
                if accepted:
                    progressed = True
                    elements = elements[accepted:]
                if elements:
                    waiting.append((partition, elements))
            pending = waiting
            if pending and not progressed:
                await self._waiting.wait_room()
        await trio.lowlevel.cancel_shielded_checkpoint()

    async def wait_room(self) -> int:
        """Wait until at least one element may be published; return the room.

        Raises:
            trio.ClosedResourceError: the topic is (or becomes) closed.
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        while True:
            self._check_open()
            room = self.room
            if room:
                await trio.lowlevel.cancel_shielded_checkpoint()
                return room
            await self._waiting.wait_room()

    def close(self) -> None:
        """Close the topic: subscribers complete after the elements held; publishing raises."""
        self._closed = True
        self._waiting.close()

    @property
    def closed(self) -> bool:
        return self._closed

    def statistics(self) -> TopicStatistics:
        """A snapshot: the partitions, the publishers and every subscriber's lag."""
        logs = self._logs
        subscribers = tuple(
            TopicSubscriberStatistics(
                policy=cursor.policy.value,
                position=cursor.position,
                lag=max(0, log.next_sequence - cursor.position),
                delivered=cursor.delivered,
                dropped=cursor.dropped,
                partition=partition,
            )
            for partition, log in enumerate(logs)
            for cursor in sorted(log.cursors, key=lambda c: c.position)
        )
        partitions = tuple(
            TopicPartitionStatistics(
                partition=partition,
                held=len(log),
                held_bytes=log.held_bytes,
                first_sequence=log.first_sequence,
                next_sequence=log.next_sequence,
                published=log.published,
                room=log.room(),
            )
            for partition, log in enumerate(logs)
        )
        return TopicStatistics(
            name=self.name,
            capacity=logs[0].capacity,
            held=sum(p.held for p in partitions),
            first_sequence=logs[0].first_sequence,
            next_sequence=logs[0].next_sequence,
            published=sum(p.published for p in partitions),
            room=self.room,
            publishers=self._publishers,
            subscribers=subscribers,
            partitions=partitions,
            capacity_bytes=logs[0].capacity_bytes,
        )

    async def _append_once(self, producer: str, sequenced: list[bytes]) -> None:
        # Idempotent publishing: in chunks small enough to fit the topic
        # whole, each appended in one synchronous step together with the
        # ledger's advance, after dropping what the producer already has in
        # the topic (another attempt may have added some while this waited).
        await trio.lowlevel.checkpoint_if_cancelled()
        log = self._logs[0]
        limit_bytes = log.capacity_bytes
        low = 0
        while low < len(sequenced):
            high, size = low, 0
            while high < len(sequenced) and high - low < log.capacity:
                element_size = len(sequenced[high]) - SEQUENCE_PREFIX
                if limit_bytes is not None and size + element_size > limit_bytes:
                    if high == low:
                        raise ValueError(f"an element of {element_size} bytes is larger than capacity_bytes={limit_bytes}")
                    break
                size += element_size
                high += 1
            chunk = sequenced[low:high]
            while True:
                self._check_open()
                fresh = self._ledger.fresh(producer, chunk)
                routed = self._route_received(fresh, advance=False)
                if all(self._logs[p].fits(share) for p, share in enumerate(routed)):
                    break
                await self._waiting.wait_room_or_ledger()
            for partition, share in enumerate(routed):
                if share:
                    self._waiting.append(partition, share)
            self._partitioner.advance_by(len(fresh))
            self._ledger.advance(producer, len(fresh))
            self._waiting.ledger_advanced()
            low = high
        await trio.lowlevel.cancel_shielded_checkpoint()

    def _route_received(self, batch: Sequence[bytes], *, advance: bool = True) -> list[list[bytes]]:
        # Elements from a publishing client are bytes already; a key
        # function sees them decoded when the topic has a codec.
        elements = [bytes(element) for element in batch]
        if self._partitioner.key is None or self._codec is None:
            return self._partitioner.split(elements, advance=advance)
        return self._partitioner.split(elements, [self._codec.decode(element) for element in elements], advance=advance)

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

    def _partition_param(self, request: SubscribeRequest) -> int:
        if "partition" not in request.params:
            if len(self._logs) > 1:
                raise InvalidParameter(f"topic {self.name} has {len(self._logs)} partitions: subscribe {self.name}?partition=I")
            return 0
        return request.int_param("partition", 0, minimum=0, maximum=len(self._logs) - 1)

    async def _serve_subscriber(self, sink: Sink, request: SubscribeRequest) -> None:
        policy_name = request.params.get("policy", CursorPolicy.BLOCK.value)
        try:
            policy = CursorPolicy(policy_name)
        except ValueError:
            raise InvalidParameter(f"parameter policy={policy_name!r}: use block, drop or latest") from None
        partition = self._partition_param(request)
        log = self._logs[partition]
        raw_from = request.params.get("from")
        sequenced = raw_from is not None
        start: int | None = None
        if raw_from == "earliest":
            start = log.first_sequence
        elif raw_from is not None:
            start = request.int_param("from", 0, minimum=0)
        if "history" in request.params:
            if sequenced:
                raise InvalidParameter("parameters from and history exclude each other")
            history = request.int_param("history", 0, minimum=0)
            start = max(log.first_sequence, log.next_sequence - history)
        until: int | None = None
        if request.params.get("until") == "now":
            until = log.next_sequence
        elif "until" in request.params:
            until = request.int_param("until", 0, minimum=0 if start is None else start)
        pack: int | None = None
        if "pack" in request.params:
            if not sequenced:
                raise InvalidParameter("parameter pack needs from: a block carries sequence numbers")
            pack = request.int_param("pack", 1, minimum=1, maximum=MAX_PACK)
        try:
            cursor = log.attach(policy, start)
        except RetentionError as error:
            # The subscriber's from=N, not the topic's failure: one log line,
            # and an onError text the subscriber turns back into NotRetained.
            if error.behind:
                raise InvalidParameter(NotRetained.message_for(self.name, partition, error.requested, error.oldest)) from None
            raise InvalidParameter(f"topic {self.name} partition {partition}: {error}") from None
        try:
            await self._feed(sink, partition, cursor, sequenced, until, pack)
        finally:
            self._waiting.detach(partition, cursor)

    async def _feed(
        self, sink: Sink, partition: int, cursor: Cursor, sequenced: bool, until: int | None, pack: int | None = None
    ) -> None:
        waiting = self._waiting
        while True:
            if until is not None and cursor.position >= until:
                return
            await sink.wait_demand()
            # Packed, demand counts blocks of up to ``pack`` elements.
            limit = min(sink.demand, MAX_TAKE) if pack is None else min(sink.demand * pack, MAX_TAKE_PACKED)
            if until is not None:
                limit = min(limit, until - cursor.position)
            first, elements = waiting.take(partition, cursor, limit)
            if not elements:
                if self._closed:
                    return
                await waiting.wait_elements(partition)
                continue
            if pack is not None:
                elements = [encode_block(first + i, elements[i : i + pack]) for i in range(0, len(elements), pack)]
            elif sequenced:
                elements = [encode_sequenced(first + i, element) for i, element in enumerate(elements)]
            # Demand covers them all (limit <= demand), so this queues at once.
            await sink.send_many(elements)

    async def _serve_publisher(self, sink: Sink, request: SubscribeRequest) -> None:
        source = request.params.get("source")
        if not source:
            raise InvalidParameter(f"publishing into a topic needs a source: {self.name}{PUBLISH_SUFFIX}?source=NAME")
        producer = request.params.get("producer")
        confirm = request.params.get(CONFIRM_PARAMETER)
        if confirm not in (None, "0", "1"):
            raise InvalidParameter(f"parameter {CONFIRM_PARAMETER}={confirm!r}: use 1 (or 0)")
        taken = 0  # the source's elements the topic holds
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
                    oversized = self._oversized(batch, 0 if producer is None else SEQUENCE_PREFIX)
                    if oversized is not None:
                        # Held back: the elements before it go in, then the
                        # publishing client learns why its stream ended.
                        batch = batch[:oversized[0]]
                    if producer is None:
                        await self._append_routed(self._route_received(batch))
                    else:
                        await self._append_once(producer, [bytes(raw) for raw in batch])
                    taken += len(batch)
                    if confirm == "1":
                        _confirm(sink, taken)
                    if oversized is not None:
                        raise InvalidParameter(
                            f"an element of {oversized[1]} bytes is larger than topic {self.name} holds"
                            f" (capacity_bytes={self._logs[0].capacity_bytes})"
                        )
        finally:
            self._publishers -= 1

    def _oversized(self, batch: Sequence[bytes | memoryview], prefix: int) -> tuple[int, int] | None:
        # A publishing client's element the topic could never hold (larger
        # than capacity_bytes, after its ``prefix`` bytes of framing): its
        # index and size, else None. The client's mistake, answered as such
        # (InvalidParameter: onError and one log line), not the topic's
        # failure (the ValueError TopicLog.append raises, with a traceback).
        limit = self._logs[0].capacity_bytes
        if limit is None:
            return None
        for index, element in enumerate(batch):
            if len(element) - prefix > limit:
                return index, len(element) - prefix
        return None


class _Waiting:
    # Who waits in a topic, and whom each change wakes (the rule is in the
    # module docstring, "Waking"). Every change to the logs that may let a
    # waiting task proceed goes through here, so the rule lives in one place:
    # the topic's code never wakes anyone itself.
    #
    # Readers wait per partition: an element appended concerns only the
    # readers of its partition. Publishers share one lot: a publisher
    # waits for room in any of its pending partitions (or, in wait_room,
    # for the least room of all), and publishers are few next to readers.
    # Those with a producer id wait in their own lot, since a chunk they
    # wait to fit may be taken in by another attempt of the same producer.

    def __init__(self, logs: list[TopicLog]) -> None:
        self._logs = logs
        self._readers = [trio.lowlevel.ParkingLot() for _ in logs]
        self._publishers = trio.lowlevel.ParkingLot()
        self._producers = trio.lowlevel.ParkingLot()

    async def wait_elements(self, partition: int) -> None:
        # Until an element is appended to ``partition`` or the topic closes.
        await self._readers[partition].park()

    async def wait_room(self) -> None:
        # Until the floor of some partition rises or the topic closes.
        await self._publishers.park()

    async def wait_room_or_ledger(self) -> None:
        # The same, or until an idempotent producer's elements are taken in.
        await self._producers.park()

    def append(self, partition: int, elements: Sequence[bytes]) -> int:
        accepted = self._logs[partition].append(elements)
        if accepted:
            self._readers[partition].unpark_all()
        return accepted

    def take(self, partition: int, cursor: Cursor, limit: int) -> tuple[int, list[bytes]]:
        log = self._logs[partition]
        floor = log.floor
        taken = log.take(cursor, limit)
        if log.floor != floor:
            self._room_grew()
        return taken

    def detach(self, partition: int, cursor: Cursor) -> None:
        log = self._logs[partition]
        floor = log.floor
        log.detach(cursor)
        if log.floor != floor:
            self._room_grew()

    def ledger_advanced(self) -> None:
        self._producers.unpark_all()

    def close(self) -> None:
        for readers in self._readers:
            readers.unpark_all()
        self._room_grew()

    def _room_grew(self) -> None:
        self._publishers.unpark_all()
        self._producers.unpark_all()


def _confirm(sink: Sink, taken: int) -> None:
    # One confirmation, if the publishing client has demand for it; never
    # waits, so that a client that reads no confirmations holds nothing up.
    try:
        sink.send_nowait(b"%d" % taken)
    except trio.WouldBlock:
        pass
