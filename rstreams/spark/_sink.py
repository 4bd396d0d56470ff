"""The streaming sink: rows published into a topic, demand respected.

Each task's ``write`` runs on an executor: it opens one session, serves the
partition's rows as a publisher and subscribes the server's
``TOPIC/publish?source=...`` to it, so the server pulls rows only as fast as
the topic has room (a slow ``block`` subscriber of the topic slows Spark's
tasks down). Rows are read from Spark's iterator only when demand allows,
and what is queued is flushed before the task waits for more demand
(``Sink.send_many`` wakes the writer per step). ``write`` returns once the
server has accepted every row.

Delivery is exactly-once where the topic can tell: each task publishes
with the producer id ``QUERY-bBATCH-pPARTITION`` (the same for every
attempt of that task, and for the batch re-run after a restart from the
checkpoint) and numbers its rows from 0, so the topic drops the rows of a
retried attempt that it already holds (``rstreams._topic_core.ProducerLedger``).
That holds when a task's rows are the same, in the same order, on every
attempt (a deterministic query, a replayable source), and within the
topic's memory of producers. Each row is still tagged with ``_batch``,
``_partition`` and ``_row`` (``tagRows``), and with ``idempotent=false``
the sink is at-least-once and the tags are the way to drop duplicates.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import trio
from pyspark import TaskContext
from pyspark.sql.datasource import DataSourceStreamWriter, WriterCommitMessage

from .._connect import open_session
from .._publish import Router
from .._topic import publish_to_topic
from ._rows import SinkOptions, encode_rows

__all__ = ["RstreamsStreamWriter", "RstreamsCommitMessage", "foreach_batch_publisher", "producer_id", "publish_elements"]


@dataclass(frozen=True)
class RstreamsCommitMessage(WriterCommitMessage):
    """What one task published: its batch, partition and row count."""

    batch_id: int
    partition: int
    rows: int


async def publish_elements(url: str, topic: str, elements: Iterable[bytes], producer: str | None = None) -> int:
    """Publish ``elements`` into ``topic`` at ``url``; return how many were sent.

    With a ``producer`` id the topic keeps each element once across retries
    under that id (see :func:`rstreams.publish_to_topic`).
    """
    async with open_session(url, app=Router()) as session:
        return await publish_to_topic(session, topic, elements, producer=producer)


def producer_id(query_id: str, batch_id: int, partition: int) -> str:
    """The producer id of one sink task: the same for every attempt of it."""
    return f"{query_id}-b{batch_id}-p{partition}"


class RstreamsStreamWriter(DataSourceStreamWriter):
    """Writes each micro-batch's rows into an rstreams topic."""

    def __init__(self, options: SinkOptions) -> None:
        self._options = options

    def write(self, iterator: Iterator[Any]) -> RstreamsCommitMessage:
        context = TaskContext.get()
        batch_id = int(context.getLocalProperty("streaming.sql.batchId") or -1) if context else -1
        partition = context.partitionId() if context else 0
        options = self._options
        first = next(iterator, None)
        if first is None:
            # An empty partition (common after a shuffle): no connection.
            return RstreamsCommitMessage(batch_id, partition, 0)
        rows = (row.asDict(recursive=True) for row in itertools.chain([first], iterator))
        tag = (batch_id, partition) if options.tag_rows else None
        elements = encode_rows(rows, format=options.format, tag=tag)
        query_id = context.getLocalProperty("sql.streaming.queryId") if context else None
        producer = producer_id(query_id, batch_id, partition) if options.idempotent and query_id and batch_id >= 0 else None
        count = trio.run(publish_elements, options.url, options.topic, elements, producer)
        return RstreamsCommitMessage(batch_id, partition, count)

    def commit(self, messages: list[Any], batchId: int) -> None:
        # Nothing to do: the rows were accepted by the topic in write().
        pass

    def abort(self, messages: list[Any], batchId: int) -> None:
        # Rows already accepted cannot be taken back; a retry under the same
        # producer ids adds only what is missing.
        pass


def foreach_batch_publisher(url: str, topic: str, *, format: str = "json", tag_rows: bool = True) -> Callable[[Any, int], None]:
    """A ``foreachBatch`` function publishing each micro-batch into ``topic``.

    For outputs the Python sink cannot take (update mode)::

        query = counts.writeStream.outputMode("update").foreachBatch(
            rstreams.spark.foreach_batch_publisher("tcp://127.0.0.1:9000", "results")
        ).start()

    Runs on the driver and streams the batch with ``toLocalIterator`` (one
    partition in memory at a time). Rows are tagged like the sink's, with
    ``_partition`` 0. At-least-once, like the sink.
    """
    options = SinkOptions.parse({"url": url, "topic": topic, "format": format, "tagRows": str(tag_rows)})

    def publish(frame: Any, batch_id: int) -> None:
        rows = (row.asDict(recursive=True) for row in frame.toLocalIterator())
        elements = encode_rows(rows, format=options.format, tag=(batch_id, 0) if options.tag_rows else None)
        trio.run(publish_elements, options.url, options.topic, elements)

    return publish
