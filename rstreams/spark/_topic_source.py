"""The streaming reader of a partitioned topic: the driver only plans offsets.

Kafka's Spark source is the model. With ``.option("topic", NAME)``:

* the driver (``initialOffset``, ``latestOffset``, ``partitions``) asks the
  server only where each partition ends (``$offsets?topic=NAME``, one small
  answer whatever the volume) and plans each batch's range per partition,
  bounded by ``maxRowsPerBatch`` across partitions (:mod:`._plan`);
* ``partitions(start, end)`` returns one :class:`TopicRangePartition` per
  topic partition with new data: a partition number and a range, a few
  bytes, never elements;
* each Spark task's ``read`` subscribes ``NAME?partition=I&from=A&until=B``
  over its own connection and yields pyarrow RecordBatches (:mod:`._range`).

No element passes through the driver, so the driver's traffic and memory do
not grow with the data. Offsets are the topic's own sequence numbers, so a
batch re-planned from the checkpoint after a restart re-reads exactly the
same elements: exactly-once, within what the topic retains. A range the
topic no longer holds fails the query saying how far behind it is
(:class:`~rstreams.NotRetained`), never skips ahead.

There is no connection to keep between calls (each driver call opens a
session, asks, closes; each task does the same for its range), so nothing
needs ``stop()`` and a pickled copy of the reader is complete.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import trio
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow

from .._connect import open_session
from .._topic_offsets import PartitionOffsets, topic_offsets
from ._plan import check_positions, plan_ends, positions, spark_offsets
from ._range import range_batches, read_range_blocking
from ._rows import SourceOptions

__all__ = ["TopicRangePartition", "TopicStreamReader", "query_offsets"]


class TopicRangePartition(InputPartition):
    """One Spark task's share of a batch: a range of one topic partition.

    Attributes:
        partition: the topic partition.
        start: the first sequence number to read.
        end: one past the last.
    """

    def __init__(self, partition: int, start: int, end: int) -> None:
        super().__init__(partition)
        self.partition = partition
        self.start = start
        self.end = end

    def __repr__(self) -> str:
        return f"TopicRangePartition(partition={self.partition}, start={self.start}, end={self.end})"


def query_offsets(url: str, topic: str, timeout: float) -> tuple[PartitionOffsets, ...]:
    """Ask the server where every partition of ``topic`` is (blocking, bounded by ``timeout`` s)."""

    async def ask() -> tuple[PartitionOffsets, ...]:
        with trio.fail_after(timeout):
            async with open_session(url) as session:
                return await topic_offsets(session, topic)

    return trio.run(ask)


class TopicStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Reads a partitioned ``rstreams.Topic`` in parallel (see the module docstring)."""

    def __init__(self, options: SourceOptions, fields: list[tuple[str, str]]) -> None:
        if options.topic is None:
            raise ValueError("TopicStreamReader reads a topic: give .option('topic', NAME)")
        self._options = options
        self._topic = options.topic
        self._fields = fields
        self._target: list[int] | None = None  # availableNow: the ends to stop at
        self._latest: list[int] | None = None  # the ends last seen, for reportLatestOffset

    # ---- offsets (driver) -----------------------------------------------------

    def _offsets(self) -> tuple[PartitionOffsets, ...]:
        offsets = query_offsets(self._options.url, self._topic, self._options.replay_timeout)
        self._latest = [o.end for o in offsets]
        return offsets

    def initialOffset(self) -> dict[str, list[int]]:
        offsets = self._offsets()
        if self._options.starting_offsets == "latest":
            return spark_offsets([o.end for o in offsets])
        return spark_offsets([o.earliest for o in offsets])

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self._options.max_rows_per_batch)

    def prepareForTriggerAvailableNow(self) -> None:
        # "Available now" is exact for a topic: what each partition holds at
        # this moment. The query ends once it has read up to these ends.
        self._target = [o.end for o in self._offsets()]

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, list[int]]:
        begin = positions(start)
        offsets = self._offsets()
        check_positions(self._topic, begin, offsets)
        ends = [o.end for o in offsets]
        if self._target is not None:
            ends = [min(end, target) for end, target in zip(ends, self._target, strict=True)]
        max_rows = self._options.max_rows_per_batch
        if isinstance(limit, ReadMaxRows):
            max_rows = min(max_rows, limit.max_rows)
        return spark_offsets(plan_ends(begin, ends, max_rows))

    def reportLatestOffset(self) -> dict[str, list[int]] | None:
        return None if self._latest is None else spark_offsets(self._latest)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[TopicRangePartition]:
        begin, stop = positions(start), positions(end)
        if len(begin) != len(stop):
            raise RuntimeError(f"topic {self._topic}: a batch planned over {len(begin)} partitions ends in {len(stop)}")
        return [TopicRangePartition(i, a, b) for i, (a, b) in enumerate(zip(begin, stop, strict=True)) if b > a]

    def commit(self, end: dict[str, Any]) -> None:
        # Nothing to release: the driver holds no elements; the topic's
        # retention decides how long a range stays readable.
        pass

    def stop(self) -> None:
        pass

    # ---- rows (executors) -------------------------------------------------------

    def read(self, partition: TopicRangePartition) -> Iterator[Any]:
        options = self._options
        blocks = read_range_blocking(
            options.url, self._topic, partition.partition, partition.start, partition.end, options.replay_timeout
        )
        yield from range_batches(blocks, partition.partition, partition.start, options.format, self._fields, options.bad_elements)
