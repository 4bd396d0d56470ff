"""The streaming reader: offsets are element numbers, demand follows Spark.

Where each call runs (PySpark 4.2+, micro-batch):

* ``initialOffset``, ``getDefaultReadLimit``, ``latestOffset``,
  ``partitions`` and ``commit`` run in one long-lived Python process on the
  driver, one call at a time. The reader's :class:`~._feed.Feed` (a
  subscription in a background thread) lives there, opened lazily at the
  first call that names an offset: readers are pickled, so nothing is opened
  in ``__init__``.
* ``read`` runs on executors against a pickled copy that has no feed, so a
  batch's elements travel inside its :class:`ElementsPartition`.

Offsets are ``{"offset": N}``: N is the number of the next element. A batch
``(start, end]`` in Spark's terms holds the elements numbered start .. end-1.
``commit(end)`` arrives one batch late, so the feed holds about two batches:
``bufferRows`` (default 2 x ``maxRowsPerBatch``) bounds buffered elements
plus outstanding demand, and demand is topped up only when Spark commits.
A publisher faster than Spark is therefore held back by Spark's pace.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from typing import Any

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from ._feed import Feed, with_params
from ._rows import SourceOptions, row_decoder

__all__ = ["RstreamsStreamReader", "ElementsPartition"]


class ElementsPartition(InputPartition):
    """One batch's elements, carried from the driver to an executor.

    Attributes:
        first: the offset of ``elements[0]``.
        elements: the raw elements.
    """

    def __init__(self, first: int, elements: list[bytes]) -> None:
        super().__init__(first)
        self.first = first
        self.elements = elements


class RstreamsStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Reads one rstreams publisher as a stream of rows (see the module docstring)."""

    def __init__(self, options: SourceOptions, fields: list[tuple[str, str]]) -> None:
        self._options = options
        self._fields = fields
        self._feed: Feed | None = None
        self._available_now = False
        self._available_deadline = 0.0
        self._target: int | None = None

    def __getstate__(self) -> dict[str, Any]:
        # The copy Spark ships to executors needs the options, never the
        # driver's thread and socket.
        state = dict(self.__dict__)
        state["_feed"] = None
        return state

    # ---- offsets and limits (driver) -----------------------------------------

    def initialOffset(self) -> dict[str, int]:
        return {"offset": self._options.starting_offset}

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self._options.max_rows_per_batch)

    def prepareForTriggerAvailableNow(self) -> None:
        # "Available now" ends at the first of: the publisher completing; a
        # replaying publisher reaching the high-water mark it had when we
        # subscribed (until=now); quietPeriod seconds without a new element;
        # availableNowTimeout seconds after this call. Whichever comes first
        # freezes the target offset, so the query always ends: no wait in
        # latestOffset is longer than quietPeriod.
        self._available_now = True
        self._available_deadline = time.monotonic() + self._options.available_now_timeout
        self._target = None

    def latestOffset(self, start: dict[str, int], limit: ReadLimit) -> dict[str, int]:
        begin = int(start["offset"])
        feed = self._feed_at(begin)
        # Never more than maxRowsPerBatch, whatever the limit (ReadAllAvailable
        # included): the batch before this one is not committed yet and may
        # hold up to that many, so only this keeps room in bufferRows for the
        # next batch. With more, the feed could be full of uncommitted rows,
        # find nothing new, and Spark would never plan the batch whose
        # planning commits the previous one.
        max_rows = self._options.max_rows_per_batch
        if isinstance(limit, ReadMaxRows):
            max_rows = min(max_rows, limit.max_rows)
        if self._available_now:
            if self._target is None:
                remaining = max(0.0, self._available_deadline - time.monotonic())
                if not feed.wait_flowing(begin, max_rows, self._options.quiet_period, remaining):
                    self._target = feed.next_offset
            end = min(begin + max_rows, feed.next_offset)
            if self._target is not None:
                end = min(end, self._target)
        else:
            feed.wait_until(lambda count, ended: count > begin or ended, self._options.poll_timeout)
            end = min(begin + max_rows, feed.next_offset)
        if end <= begin and feed.ended and feed.error not in (None, "closed"):
            raise RuntimeError(f"rstreams source {self._options.publisher!r} at {self._options.url}: {feed.error}")
        return {"offset": max(end, begin)}

    def reportLatestOffset(self) -> dict[str, int] | None:
        feed = self._feed
        return None if feed is None else {"offset": feed.next_offset}

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> Sequence[ElementsPartition]:
        begin, stop = int(start["offset"]), int(end["offset"])
        if stop <= begin:
            return []
        feed = self._feed_at(begin)
        if feed.next_offset < stop:
            # A batch planned by an earlier run of the query (restart): with
            # replay the feed re-reads exactly this range; without, it takes
            # what arrives within the poll timeout (see docs/spark.md).
            timeout = self._options.replay_timeout if self._options.replay else self._options.poll_timeout
            feed.wait_until(lambda count, ended: count >= stop or ended, timeout)
            if self._options.replay and feed.next_offset < stop:
                raise RuntimeError(
                    f"rstreams source {self._options.publisher!r}: could not re-read elements {begin}..{stop - 1} "
                    f"({feed.error or 'timed out'})"
                )
        elements = feed.slice(begin, stop)
        # Split into numPartitions contiguous runs so that decoding a large
        # batch uses more than one core; each run keeps its own first offset.
        parts = max(1, min(self._options.num_partitions, len(elements)))
        size = -(-len(elements) // parts) if elements else 0
        return [ElementsPartition(begin + i, elements[i : i + size]) for i in range(0, len(elements), size)] if elements else []

    def commit(self, end: dict[str, int]) -> None:
        if self._feed is not None:
            self._feed.release(int(end["offset"]))

    def stop(self) -> None:
        if self._feed is not None:
            self._feed.close()
            self._feed = None

    def _feed_at(self, offset: int) -> Feed:
        # The feed must be able to serve ``offset``. A live feed numbers its
        # first element ``offset``; a replaying one subscribes from=offset and
        # is reopened if Spark asks for a range it no longer holds.
        feed = self._feed
        if feed is not None:
            if not self._options.replay or feed.base <= offset <= feed.next_offset:
                return feed
            feed.close()
        name = self._options.publisher
        if self._options.replay:
            params = {"from": str(offset)}
            if self._available_now:
                params["until"] = "now"
            name = with_params(name, **params)
        self._feed = Feed(
            self._options.url,
            name,
            start=offset,
            capacity=self._options.buffer_rows,
            sequenced=self._options.replay,
        )
        return self._feed

    # ---- rows (executors) ------------------------------------------------------

    def read(self, partition: ElementsPartition) -> Iterator[tuple[Any, ...]]:
        decode = row_decoder(self._options.format, self._fields, self._options.bad_elements)
        first = partition.first
        for index, element in enumerate(partition.elements):
            row = decode(element, first + index)
            if row is not None:
                yield row
