"""Planning micro-batches over a partitioned topic, without I/O.

The driver of a query reading a partitioned topic knows only offsets: where
each partition's batch starts (Spark's checkpoint) and where each partition
ends now (``$offsets``). From those it plans the next batch's end in every
partition, bounded by ``maxRowsPerBatch`` across all of them. The budget is
shared out fairly (water-filling): each partition with new data gets an
equal share, and what a short partition leaves over goes to the others. So
a busy partition cannot starve a quiet one, and no budget is wasted while
any partition has data.

Offsets as Spark stores them are ``{"offsets": [a0, a1, ...]}``: for each
partition, the sequence number of the next element to read. A batch
``(start, end]`` reads ``start[i] .. end[i]-1`` of partition i.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .._topic_offsets import PartitionOffsets

__all__ = ["OFFSETS_KEY", "plan_ends", "positions", "spark_offsets", "check_positions"]

#: The key of the per-partition positions in Spark's offset JSON.
OFFSETS_KEY = "offsets"


def spark_offsets(positions: Sequence[int]) -> dict[str, list[int]]:
    """Positions as the offset dict Spark checkpoints."""
    return {OFFSETS_KEY: [int(position) for position in positions]}


def positions(offset: Mapping[str, Any]) -> list[int]:
    """The positions out of an offset dict from Spark.

    Raises:
        ValueError: not an offset of the partitioned-topic mode (a checkpoint
            of a single-publisher query, say).
    """
    value = offset.get(OFFSETS_KEY)
    if not isinstance(value, list) or not all(isinstance(p, int) and p >= 0 for p in value):
        raise ValueError(f"not a partitioned-topic offset: {offset!r} (a checkpoint of another kind of query?)")
    return list(value)


def check_positions(topic: str, start: Sequence[int], offsets: Sequence[PartitionOffsets]) -> None:
    """Fail, saying why, if ``start`` cannot be read from the topic as it is now.

    Raises:
        RuntimeError: the topic has another number of partitions; a
            position is older than what the partition still holds (how far
            behind it is); or beyond its end (the topic restarted from 0
            under this checkpoint).
    """
    if len(start) != len(offsets):
        raise RuntimeError(f"topic {topic} has {len(offsets)} partitions, the checkpoint has {len(start)}")
    for position, partition in zip(start, offsets, strict=True):
        if position < partition.earliest:
            raise RuntimeError(
                f"topic {topic} partition {partition.partition}: offset {position} is no longer retained, "
                f"{partition.earliest - position} behind the oldest held ({partition.earliest})"
            )
        if position > partition.end:
            raise RuntimeError(
                f"topic {topic} partition {partition.partition}: offset {position} is beyond its end ({partition.end}): "
                "did the topic restart under this checkpoint?"
            )


def plan_ends(start: Sequence[int], ends: Sequence[int], max_rows: int) -> list[int]:
    """The end of the next batch in each partition: at most ``max_rows`` in all.

    Args:
        start: where each partition's batch starts.
        ends: how far each partition could be read (its end now, or the
            availableNow target).
        max_rows: the budget across partitions (> 0).
    """
    if len(start) != len(ends):
        raise ValueError("start and ends name different numbers of partitions")
    if max_rows <= 0:
        raise ValueError("max_rows must be positive")
    available = [max(0, end - begin) for begin, end in zip(start, ends, strict=True)]
    taken = [0] * len(start)
    budget = max_rows
    hungry = [i for i, count in enumerate(available) if count > 0]
    # Each round gives every partition still wanting rows an equal share of
    # what is left; it ends when the budget is spent or nobody wants more.
    while budget > 0 and hungry:
        share = max(1, budget // len(hungry))
        still_hungry = []
        for i in hungry:
            take = min(share, available[i] - taken[i], budget)
            taken[i] += take
            budget -= take
            if taken[i] < available[i]:
                still_hungry.append(i)
            if budget == 0:
                break
        hungry = still_hungry
    return [begin + take for begin, take in zip(start, taken, strict=True)]
