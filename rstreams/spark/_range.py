"""An executor reads one partition's range of a topic itself, into Arrow.

In the partitioned-topic mode the driver plans ranges and ships only them;
each Spark task subscribes ``TOPIC?partition=I&from=A&until=B`` over its own
connection, checks that it got exactly elements A .. B-1, and hands Spark
pyarrow RecordBatches (no per-row Python objects on Spark's side of the
worker).

A range is bounded by ``maxRowsPerBatch`` (the driver's planning), so a task
holds at most that many elements at once; they are read whole before the
first row goes to Spark. The subscription asks for up to
:data:`RANGE_PREFETCH` elements ahead, so the server streams without waiting
for the task.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import trio

from .._connect import open_session
from .._topic_core import SEQUENCE_PREFIX, decode_sequenced
from ._rows import row_decoder

__all__ = ["RANGE_PREFETCH", "ARROW_BATCH_ROWS", "read_range", "range_batches"]

#: Elements a range subscription keeps requested ahead of the task.
RANGE_PREFETCH = 32_768
#: Rows per RecordBatch handed to Spark.
ARROW_BATCH_ROWS = 65_536


async def read_range(url: str, topic: str, partition: int, start: int, end: int) -> list[bytes]:
    """Elements ``start`` .. ``end``-1 of ``topic``'s partition, payloads only.

    Raises:
        NotRetained: the topic no longer holds ``start``.
        RuntimeError: the topic sent other elements than those asked for.

    Cancellation closes the connection (the topic sees a cancel).
    """
    count = end - start
    payloads: list[bytes] = []
    name = f"{topic}?partition={partition}&from={start}&until={end}"
    async with open_session(url) as session:
        async with session.subscribe(name, prefetch=max(1, min(count, RANGE_PREFETCH)), codec=None) as subscription:
            async for batch in subscription.batches():
                # The topic sends one partition in order without gaps, so the
                # first and last sequence of each batch prove the whole batch.
                expected = start + len(payloads)
                first, _ = decode_sequenced(bytes(batch[0]))
                last, _ = decode_sequenced(bytes(batch[-1]))
                if first != expected or last != expected + len(batch) - 1:
                    raise RuntimeError(
                        f"topic {topic} partition {partition}: expected elements from {expected}, got {first}..{last}"
                    )
                payloads.extend(bytes(raw[SEQUENCE_PREFIX:]) for raw in batch)
    if len(payloads) != count:
        raise RuntimeError(f"topic {topic} partition {partition}: asked for {start}..{end - 1}, got {len(payloads)} elements")
    return payloads


# Spark type names the Arrow path handles; anything else (timestamps, whose
# Arrow form depends on the session's time zone) goes row by row.
def _arrow_types() -> dict[str, Any]:
    import pyarrow as pa

    return {
        "binary": pa.binary(),
        "string": pa.string(),
        "long": pa.int64(),
        "integer": pa.int32(),
        "short": pa.int16(),
        "byte": pa.int8(),
        "double": pa.float64(),
        "float": pa.float32(),
        "boolean": pa.bool_(),
    }


def range_batches(
    payloads: list[bytes], partition: int, first_offset: int, format: str, fields: list[tuple[str, str]], bad_elements: str
) -> Iterator[Any]:
    """Rows of a range as pyarrow RecordBatches (tuples for column types Arrow is not given here).

    ``first_offset`` numbers the rows' ``offset`` column; a ``partition``
    column the element does not carry gets ``partition``.
    """
    import pyarrow as pa

    types = _arrow_types()
    names = [name for name, _ in fields]
    if format == "raw":
        # value BINARY, partition INT, offset LONG (TOPIC_RAW_SCHEMA)
        for low in range(0, len(payloads), ARROW_BATCH_ROWS):
            chunk = payloads[low : low + ARROW_BATCH_ROWS]
            offsets = pa.array(range(first_offset + low, first_offset + low + len(chunk)), type=pa.int64())
            partitions = pa.array([partition] * len(chunk), type=pa.int32())
            yield pa.RecordBatch.from_arrays([pa.array(chunk, type=pa.binary()), partitions, offsets], names=names)
        return
    decode = row_decoder(format, fields, bad_elements)
    arrow = all(type_name in types for _, type_name in fields)
    partition_at = names.index("partition") if "partition" in names else None
    for low in range(0, len(payloads), ARROW_BATCH_ROWS):
        rows = [
            row
            for index, element in enumerate(payloads[low : low + ARROW_BATCH_ROWS], first_offset + low)
            if (row := decode(element, index)) is not None
        ]
        if partition_at is not None:
            rows = [row if row[partition_at] is not None else _with(row, partition_at, partition) for row in rows]
        if not arrow:
            yield from rows
            continue
        if not rows:
            continue
        columns = [pa.array(column, type=types[type_name]) for column, (_, type_name) in zip(zip(*rows), fields, strict=True)]
        yield pa.RecordBatch.from_arrays(columns, names=names)


def _with(row: tuple[Any, ...], position: int, value: Any) -> tuple[Any, ...]:
    return row[:position] + (value,) + row[position + 1 :]


def read_range_blocking(url: str, topic: str, partition: int, start: int, end: int, timeout: float) -> list[bytes]:
    """:func:`read_range` from blocking code (a Spark task), within ``timeout`` seconds."""

    async def bounded() -> list[bytes]:
        with trio.fail_after(timeout):
            return await read_range(url, topic, partition, start, end)

    return trio.run(bounded)
