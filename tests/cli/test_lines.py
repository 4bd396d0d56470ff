"""The shared stdin reader of ``rstreams pub`` (``rstreams/cli/_lines.py``)."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
import trio
import trio.testing

from rstreams.cli._lines import LineReader

from ._support import StepSink

TIMEOUT = 10


@asynccontextmanager
async def pipe_reader(data: bytes, *, close: bool = True, **options: int) -> AsyncIterator[LineReader]:
    read_fd, write_fd = os.pipe()
    try:
        os.write(write_fd, data)
        if close:
            os.close(write_fd)
            write_fd = -1
        reader = LineReader(read_fd, **options)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(reader.run)
            yield reader
            nursery.cancel_scope.cancel()
    finally:
        os.close(read_fd)
        if write_fd >= 0:
            os.close(write_fd)


async def read_all(reader: LineReader) -> list[bytes]:
    lines: list[bytes] = []
    while (line := await reader.readline()) is not None:
        lines.append(line)
    return lines


async def test_lines_lose_only_their_newline() -> None:
    with trio.fail_after(TIMEOUT):
        async with pipe_reader(b"a\n\nb\r\n last") as reader:
            assert await read_all(reader) == [b"a", b"", b"b\r", b" last"]
            assert reader.exhausted
            assert await reader.readline() is None  # the end stays the end


async def test_empty_input_has_no_lines() -> None:
    with trio.fail_after(TIMEOUT):
        async with pipe_reader(b"") as reader:
            assert await reader.readline() is None
            assert reader.exhausted


async def test_long_lines_come_in_bounded_pieces() -> None:
    with trio.fail_after(TIMEOUT):
        async with pipe_reader(b"x" * 25 + b"\n" + b"y" * 10 + b"\n", max_line=10, chunk_size=7) as reader:
            assert await read_all(reader) == [b"x" * 10, b"x" * 10, b"x" * 5, b"y" * 10]


async def test_a_line_given_back_comes_out_next() -> None:
    with trio.fail_after(TIMEOUT):
        async with pipe_reader(b"1\n2\n") as reader:
            first = await reader.readline()
            assert first == b"1"
            reader.unread(first)
            assert await read_all(reader) == [b"1", b"2"]


async def test_reads_happen_only_while_someone_waits_for_a_line() -> None:
    with trio.fail_after(TIMEOUT):
        async with pipe_reader(b"1\n2\n", close=False, chunk_size=2) as reader:
            await trio.testing.wait_all_tasks_blocked(cushion=0.01)
            assert reader.bytes_read == 0
            assert await reader.readline() == b"1"
            await trio.testing.wait_all_tasks_blocked(cushion=0.01)
            assert reader.bytes_read == 2  # no read ahead


async def test_a_cancelled_wait_leaves_the_data_for_the_next_caller() -> None:
    read_fd, write_fd = os.pipe()
    reader = LineReader(read_fd)
    try:
        with trio.fail_after(TIMEOUT):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(reader.run)
                with trio.move_on_after(0.05):
                    await reader.readline()  # a read is now in flight
                os.write(write_fd, b"kept\n")
                assert await reader.readline() == b"kept"
                nursery.cancel_scope.cancel()
    finally:
        os.close(read_fd)
        os.close(write_fd)


async def test_readline_nowait_hands_out_only_what_is_buffered() -> None:
    with trio.fail_after(TIMEOUT):
        async with pipe_reader(b"a\nb\n", close=False) as reader:
            assert reader.readline_nowait() is None  # nothing read yet, and no read asked for
            assert await reader.readline() == b"a"
            assert reader.readline_nowait() == b"b"  # the read that brought "a" brought it
            assert reader.readline_nowait() is None  # and None is not the end
            assert not reader.exhausted


async def test_the_publishing_source_hands_a_bridge_the_lines_ready_and_counts_them() -> None:
    # rstreams pub over a bridge: after each line it awaited, the bridge
    # takes the lines already read (rstreams.support.take_ready) and sends
    # them in one write. Blank lines are skipped as ever, a line --format
    # refuses is left for the iterator to report, and `sent` counts what
    # was handed out before the bridge asked again.
    from rstreams.cli._pub_client import LINE_FORMATS, _LineSource
    from rstreams.support import take_ready

    with trio.fail_after(TIMEOUT):
        async with pipe_reader(b'{"n": 1}\n\n{"n": 2}\n{"n": 3}\nnot json\n{"n": 4}\n') as reader:
            source = _LineSource(reader, LINE_FORMATS["jsonl"], skip_blank=True)
            iterator = source.__aiter__()
            first = await iterator.__anext__()
            assert take_ready(source, 0) == []
            assert len(take_ready(source, 1)) == 1  # {"n": 2}, past the blank line
            rest = take_ready(source, 10)
            assert len(rest) == 1  # {"n": 3}; "not json" stays for the iterator
            assert source.sent == 0  # (counted when the bridge asks again)
            with pytest.raises(StopAsyncIteration):
                await iterator.__anext__()
            assert source.sent == 3
            assert source.bad_line is not None and source.bad_line.startswith("line 4: not JSON")
            assert first and all(rest)


async def test_take_ready_of_a_plain_async_iterable_is_nothing() -> None:
    from rstreams.support import take_ready

    async def values() -> AsyncIterator[bytes]:
        yield b"x"

    assert take_ready(values(), 5) == []


async def test_the_client_publisher_sends_the_lines_read_already_in_one_step_within_demand() -> None:
    # `rstreams pub tcp://` sent a line a step (about 16,000 a second); it
    # now sends the lines its reader holds already, as far as demand goes,
    # and gives back, in order, what the sink did not take.
    from rstreams.cli._pub_client import LINE_FORMATS, _LineSource

    with trio.fail_after(TIMEOUT):
        async with pipe_reader(b"".join(b"%d\n" % n for n in range(10))) as reader:
            source = _LineSource(reader, LINE_FORMATS["raw"], skip_blank=False)
            sink = StepSink(demand=7, take=4)
            with pytest.raises(trio.EndOfChannel):
                await source.publish(sink)  # type: ignore[arg-type]
            assert sink.steps == [[b"0", b"1", b"2", b"3"], [b"4", b"5", b"6"]]
            assert source.sent == 7
            assert [await reader.readline() for _ in range(3)] == [b"7", b"8", b"9"]  # read, not lost
