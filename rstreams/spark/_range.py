"""An executor reads one partition's range of a topic itself, into Arrow.

In the partitioned-topic mode the driver plans ranges and ships only them;
each Spark task subscribes ``TOPIC?partition=I&from=A&until=B&pack=K`` over
its own connection, checks that it got exactly elements A .. B-1, and hands
Spark pyarrow RecordBatches.

``pack=K`` makes the topic send K elements per wire element, laid out as an
Arrow binary column (``rstreams._topic_core.encode_block``): the task wraps
each block as an Arrow array without a Python object per element, and the
topic pays per block, not per element. (Per element, parsing the protocol
and slicing off the sequence prefix cost ~6 us here, more than Spark's
own work on a row.)

A range is bounded by ``maxRowsPerBatch`` (the driver's planning), so a task
holds at most that many elements at once; they are read whole before the
first row goes to Spark. The subscription keeps :data:`RANGE_PREFETCH`
blocks requested, so the server streams without waiting for the task.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator
from typing import Any

import trio

from .._connect import open_session
from .._topic_core import decode_block
from ._rows import row_decoder

__all__ = ["ARROW_BATCH_ROWS", "RANGE_PACK", "RANGE_PREFETCH", "RangeBlocks", "read_range", "range_batches", "read_range_blocking"]

#: Elements per block (``pack``), and so rows per RecordBatch of a raw
#: read: ~800 KB of 100-byte elements (the protocol splits it into parts,
#: 256 KiB each on plain TCP, and joins them again, at C speed).
RANGE_PACK = 8192
#: Blocks a range subscription keeps requested ahead of the task.
RANGE_PREFETCH = 8
#: Rows per RecordBatch handed to Spark.
ARROW_BATCH_ROWS = 65_536

#: A range as received: the blocks, each (count, offsets bytes, data bytes).
RangeBlocks = list[tuple[int, memoryview, memoryview]]


async def read_range(url: str, topic: str, partition: int, start: int, end: int, *, pack: int = RANGE_PACK) -> RangeBlocks:
    """Elements ``start`` .. ``end``-1 of ``topic``'s partition, as the blocks that carried them.

    Raises:
        NotRetained: the topic no longer holds ``start``.
        RuntimeError: the topic sent other elements than those asked for.

    Cancellation closes the connection (the topic sees a cancel).
    """
    blocks: RangeBlocks = []
    received = 0
    name = f"{topic}?partition={partition}&from={start}&until={end}&pack={pack}"
    async with open_session(url) as session:
        async with session.subscribe(name, prefetch=RANGE_PREFETCH, codec=None) as subscription:
            async for batch in subscription.batches():
                for raw in batch:
                    first, count, offsets, data = decode_block(bytes(raw))
                    # One partition, in order, without gaps: each block must
                    # start exactly where the last one ended.
                    if first != start + received:
                        raise RuntimeError(
                            f"topic {topic} partition {partition}: expected element {start + received}, got a block from {first}"
                        )
                    blocks.append((count, offsets, data))
                    received += count
    if received != end - start:
        raise RuntimeError(f"topic {topic} partition {partition}: asked for {start}..{end - 1}, got {received} elements")
    return blocks


def _binary_column(blocks: RangeBlocks) -> Any:
    # Each block is already an Arrow binary column: wrap, then join them.
    import pyarrow as pa

    arrays = [
        pa.Array.from_buffers(pa.binary(), count, [None, pa.py_buffer(offsets), pa.py_buffer(data)])
        for count, offsets, data in blocks
    ]
    if not arrays:
        return pa.array([], type=pa.binary())
    return pa.concat_arrays(arrays)


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
    blocks: RangeBlocks, partition: int, first_offset: int, format: str, fields: list[tuple[str, str]], bad_elements: str
) -> Iterator[Any]:
    """Rows of a range as pyarrow RecordBatches (tuples for column types Arrow is not given here).

    ``first_offset`` numbers the rows' ``offset`` column; a ``partition``
    column the element does not carry gets ``partition``.
    """
    import pyarrow as pa

    names = [name for name, _ in fields]
    if format == "raw":
        # value BINARY, partition INT, offset LONG (TOPIC_RAW_SCHEMA): one
        # RecordBatch per block, whose values column is the block itself.
        offset = first_offset
        for count, offsets_bytes, data in blocks:
            values = pa.Array.from_buffers(pa.binary(), count, [None, pa.py_buffer(offsets_bytes), pa.py_buffer(data)])
            numbers = array("q", range(offset, offset + count))
            offsets = pa.Array.from_buffers(pa.int64(), count, [None, pa.py_buffer(numbers)])
            partitions = pa.repeat(pa.scalar(partition, type=pa.int32()), count)
            yield pa.RecordBatch.from_arrays([values, partitions, offsets], names=names)
            offset += count
        return
    values = _binary_column(blocks)
    types = _arrow_types()
    decode = row_decoder(format, fields, bad_elements)
    arrow = all(type_name in types for _, type_name in fields)
    partition_at = names.index("partition") if "partition" in names else None
    for low in range(0, len(values), ARROW_BATCH_ROWS):
        payloads = values.slice(low, ARROW_BATCH_ROWS).to_pylist()
        rows = [row for index, element in enumerate(payloads, first_offset + low) if (row := decode(element, index)) is not None]
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


def read_range_blocking(url: str, topic: str, partition: int, start: int, end: int, timeout: float) -> RangeBlocks:
    """:func:`read_range` from blocking code (a Spark task), within ``timeout`` seconds."""

    async def bounded() -> RangeBlocks:
        with trio.fail_after(timeout):
            return await read_range(url, topic, partition, start, end)

    return trio.run(bounded)
