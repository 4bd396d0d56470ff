"""The offsets query: where every partition of a topic ends, without its elements.

A planner (Spark's driver, a monitoring page) needs to know how far each
partition of a topic has got, and must not read the elements to learn it.
Every router a topic is mounted on serves the reserved publisher
``$offsets`` (names starting with ``$`` are the runtime's; no application
can register one)::

    $offsets?topic=NAME     one element: the partitions of topic NAME
    $offsets                one element per topic mounted, in name order

Each element is a JSON object, and the stream then completes::

    {"topic": "events", "partitions": [{"partition": 0, "earliest": 0, "end": 1500}, ...]}

``earliest`` is the oldest sequence number still held (a replay
``from=earliest`` starts there), ``end`` the sequence number the next
element will get: the partition holds ``earliest .. end-1``. The answer is a
snapshot taken when the subscription arrives; asking costs one subscribe
round trip and a few dozen bytes per partition, whatever the topic holds.
An unknown topic fails the stream with ``no such topic: NAME``.

:func:`topic_offsets` asks and parses, from a client session.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Protocol

from ._peer import Peer
from ._publish import Router, Sink, SubscribeRequest, add_reserved_route

__all__ = ["OFFSETS_PUBLISHER", "PartitionOffsets", "OffsetsPublisher", "OffsetsSource", "serve_offsets", "topic_offsets"]

#: The reserved publisher name of the offsets query.
OFFSETS_PUBLISHER = "$offsets"


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionOffsets:
    """Where one partition of a topic is.

    Attributes:
        partition: its number, from 0.
        earliest: the oldest sequence number held.
        end: the sequence number the next element will get (one past the newest).
    """

    partition: int
    earliest: int
    end: int

    def __post_init__(self) -> None:
        if not 0 <= self.earliest <= self.end or self.partition < 0:
            raise ValueError(f"inconsistent partition offsets: {self}")


class OffsetsSource(Protocol):
    """What ``$offsets`` needs of a topic (``rstreams.Topic`` is one)."""

    @property
    def name(self) -> str: ...

    def offsets(self) -> tuple[PartitionOffsets, ...]: ...


class OffsetsPublisher:
    """The ``$offsets`` publisher of one router: the topics mounted on it."""

    def __init__(self) -> None:
        self.topics: dict[str, OffsetsSource] = {}

    async def __call__(self, sink: Sink, request: SubscribeRequest) -> None:
        name = request.params.get("topic")
        if name is None:
            topics = [self.topics[key] for key in sorted(self.topics)]
        elif name in self.topics:
            topics = [self.topics[name]]
        else:
            raise LookupError(f"no such topic: {name}")
        await sink.send_many([_encode(topic.name, topic.offsets()) for topic in topics])


def serve_offsets(app: Router, topic: OffsetsSource) -> None:
    """Make ``topic`` answer ``$offsets`` on ``app`` (called by ``Topic.mount``)."""
    route = app.resolve(OFFSETS_PUBLISHER)
    publisher = route.publisher if route is not None else None
    if not isinstance(publisher, OffsetsPublisher):
        publisher = OffsetsPublisher()
        add_reserved_route(app, OFFSETS_PUBLISHER, publisher)
    publisher.topics[topic.name] = topic


def _encode(name: str, offsets: tuple[PartitionOffsets, ...]) -> bytes:
    partitions = [{"partition": o.partition, "earliest": o.earliest, "end": o.end} for o in offsets]
    return json.dumps({"topic": name, "partitions": partitions}, separators=(",", ":")).encode()


def _decode(element: bytes) -> tuple[str, tuple[PartitionOffsets, ...]]:
    answer = json.loads(element)
    offsets = tuple(
        PartitionOffsets(partition=int(p["partition"]), earliest=int(p["earliest"]), end=int(p["end"]))
        for p in answer["partitions"]
    )
    if [o.partition for o in offsets] != list(range(len(offsets))):
        raise ValueError(f"$offsets answered partitions out of order for topic {answer['topic']!r}")
    return str(answer["topic"]), offsets


async def topic_offsets(session: Peer, topic: str) -> tuple[PartitionOffsets, ...]:
    """The current offsets of every partition of the peer's topic ``topic``.

    Raises:
        PublisherError: no such topic (``no such topic: NAME``).
        UnknownPublisher: the peer serves no topics (or is too old to know ``$offsets``).

    One subscribe round trip; always checkpoints. Cancellation leaves nothing behind.
    """
    async with session.subscribe(f"{OFFSETS_PUBLISHER}?topic={topic}", prefetch=1, codec=None) as answer:
        found: tuple[PartitionOffsets, ...] | None = None
        async for element in answer:
            found = _decode(bytes(element))[1]
    if found is None:
        raise ValueError(f"$offsets sent no answer for topic {topic!r}")
    return found

