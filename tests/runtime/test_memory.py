"""rstreams.support.memory_stream_pair: an in-process byte stream pair, bounded like a socket.

Besides the behaviour tests, trio's own conformance suite
(``trio.testing.check_two_way_stream``) is run over it. The stream is a
plain ``trio.abc.Stream`` (not half-closeable), so ``check_two_way_stream``
is the applicable suite (it includes ``check_one_way_stream`` both ways).
It passes with no clogged maker once ``max_bytes`` is type-checked first (a
thin subclass below); the two deviations from the ``trio.abc`` contract are
fixed (a busy check on every send-side wait, and an integer check on
max_bytes) and each has its own test.
"""

from __future__ import annotations

import operator

import pytest
import trio
import trio.testing

from rstreams.support import DEFAULT_MEMORY_BUFFER, MemoryStream, memory_stream_pair


async def test_bytes_arrive_in_order_through_a_small_buffer() -> None:
    a, b = memory_stream_pair(max_buffer=1000)
    data = bytes(range(256)) * 400  # ~100 KiB through a 1000-byte buffer
    received = bytearray()

    async def send() -> None:
        view = memoryview(data)
        size = 1
        while view:
            await a.send_all(view[:size])
            view = view[size:]
            size = size * 3 % 4099 + 1

    async def receive() -> None:
        size = 7
        while len(received) < len(data):
            chunk = await b.receive_some(size)
            assert 0 < len(chunk) <= size
            received.extend(chunk)
            size = size * 5 % 3001 + 1

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(send)
            nursery.start_soon(receive)
    assert received == data


async def test_both_directions_are_independent() -> None:
    a, b = memory_stream_pair(max_buffer=4)
    with trio.fail_after(5):
        await a.send_all(b"ping")
        await b.send_all(b"pong")  # a full a->b direction does not block b->a
        assert await a.receive_some() == b"pong"
        assert await b.receive_some() == b"ping"


async def test_send_all_waits_while_max_buffer_bytes_are_unread() -> None:
    a, b = memory_stream_pair(max_buffer=10)
    done = trio.Event()

    async def send() -> None:
        await a.send_all(b"0123456789abcdefghijklmno")  # 25 bytes
        done.set()

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(send)
            await trio.testing.wait_all_tasks_blocked()
            assert not done.is_set()
            assert await b.receive_some(5) == b"01234"
            await trio.testing.wait_all_tasks_blocked()
            assert not done.is_set()  # 5 more taken, 10 still to go
            assert await b.receive_some(10) == b"56789abcde"
            await trio.testing.wait_all_tasks_blocked()
            assert done.is_set()  # the rest fits
        assert await b.receive_some() == b"fghijklmno"


async def test_one_byte_past_the_default_buffer_waits(autojump_clock: trio.testing.MockClock) -> None:
    a, b = memory_stream_pair()
    with trio.fail_after(60):
        await a.send_all(bytes(DEFAULT_MEMORY_BUFFER))
        with trio.move_on_after(10) as scope:
            await a.send_all(b"x")
        assert scope.cancelled_caught
        assert len(await b.receive_some()) == DEFAULT_MEMORY_BUFFER


async def test_receive_some_returns_at_most_max_bytes() -> None:
    a, b = memory_stream_pair()
    with trio.fail_after(5):
        await a.send_all(b"abcdef")
        assert await b.receive_some(1) == b"a"
        assert await b.receive_some(3) == b"bcd"
        assert await b.receive_some(100) == b"ef"
        await a.send_all(b"gh")
        await a.send_all(b"ij")
        assert await b.receive_some() == b"ghij"  # everything available


async def test_closing_one_end_gives_eof_after_buffered_data() -> None:
    a, b = memory_stream_pair()
    with trio.fail_after(5):
        await a.send_all(b"last words")
        await a.aclose()
        assert await b.receive_some(4) == b"last"
        assert await b.receive_some() == b" words"
        assert await b.receive_some() == b""
        assert await b.receive_some() == b""  # and stays at EOF
        with pytest.raises(trio.BrokenResourceError):
            await b.send_all(b"anyone?")
        with pytest.raises(trio.BrokenResourceError):
            await b.wait_send_all_might_not_block()


async def test_closing_wakes_the_other_ends_blocked_calls() -> None:
    a, b = memory_stream_pair(max_buffer=4)
    results: list[object] = []

    async def receive() -> None:
        results.append(await a.receive_some())

    async def send() -> None:
        with pytest.raises(trio.BrokenResourceError):
            await a.send_all(b"more than four")
        results.append("broken")

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(receive)
            nursery.start_soon(send)
            await trio.testing.wait_all_tasks_blocked()
            assert results == []
            await b.aclose()
        assert sorted(map(str, results)) == ["b''", "broken"]


async def test_a_closed_end_raises_closed_resource_error() -> None:
    a, b = memory_stream_pair()
    with trio.fail_after(5):
        await b.send_all(b"unread")
        await a.aclose()
        await a.aclose()  # idempotent
        with pytest.raises(trio.ClosedResourceError):
            await a.send_all(b"x")
        with pytest.raises(trio.ClosedResourceError):
            await a.send_all(b"")
        with pytest.raises(trio.ClosedResourceError):
            await a.receive_some()  # what was unread is dropped
        with pytest.raises(trio.ClosedResourceError):
            await a.wait_send_all_might_not_block()


async def test_closing_wakes_this_ends_own_blocked_calls() -> None:
    a, b = memory_stream_pair(max_buffer=1)
    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:

            async def receive() -> None:
                with pytest.raises(trio.ClosedResourceError):
                    await a.receive_some()

            async def send() -> None:
                with pytest.raises(trio.ClosedResourceError):
                    await a.send_all(b"xyz")

            nursery.start_soon(receive)
            nursery.start_soon(send)
            await trio.testing.wait_all_tasks_blocked()
            await a.aclose()


async def test_concurrent_senders_or_receivers_are_busy() -> None:
    a, b = memory_stream_pair(max_buffer=1)
    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(a.send_all, b"abc")  # blocks: the buffer holds 1
            await trio.testing.wait_all_tasks_blocked()
            with pytest.raises(trio.BusyResourceError):
                await a.send_all(b"d")
            nursery.cancel_scope.cancel()
        assert await b.receive_some() == b"a"
        await a.send_all(b"z")  # the busy flag was cleared by the cancellation
        assert await b.receive_some() == b"z"
        async with trio.open_nursery() as nursery:
            nursery.start_soon(b.receive_some)
            await trio.testing.wait_all_tasks_blocked()
            with pytest.raises(trio.BusyResourceError):
                await b.receive_some()
            nursery.cancel_scope.cancel()


async def test_cancellation_leaves_a_consistent_stream() -> None:
    a, b = memory_stream_pair(max_buffer=4)
    with trio.fail_after(5):
        with trio.move_on_after(0) as scope:
            await trio.testing.wait_all_tasks_blocked()
            await b.receive_some()
        assert scope.cancelled_caught
        with trio.CancelScope() as scope:
            scope.cancel()
            await a.send_all(b"never")  # cancelled before anything was sent
        assert scope.cancelled_caught
        async with trio.open_nursery() as nursery:
            # Cancelled halfway: what was accepted stays, in order.
            nursery.start_soon(a.send_all, b"0123456789")
            await trio.testing.wait_all_tasks_blocked()
            nursery.cancel_scope.cancel()
        assert await b.receive_some() == b"0123"
        await a.send_all(b"next")
        assert await b.receive_some() == b"next"
        # A receive cancelled while waiting takes nothing.
        async with trio.open_nursery() as nursery:
            nursery.start_soon(b.receive_some)
            await trio.testing.wait_all_tasks_blocked()
            nursery.cancel_scope.cancel()
        await a.send_all(b"kept")
        assert await b.receive_some() == b"kept"


async def test_wait_send_all_might_not_block_waits_for_room() -> None:
    a, b = memory_stream_pair(max_buffer=3)
    woke = trio.Event()

    async def wait() -> None:
        await a.wait_send_all_might_not_block()
        woke.set()

    with trio.fail_after(5):
        await a.wait_send_all_might_not_block()  # room: returns
        await a.send_all(b"abc")
        async with trio.open_nursery() as nursery:
            nursery.start_soon(wait)
            await trio.testing.wait_all_tasks_blocked()
            assert not woke.is_set()
            assert await b.receive_some(1) == b"a"
            await woke.wait()
        with trio.CancelScope() as scope:
            scope.cancel()
            await a.wait_send_all_might_not_block()  # always checkpoints
        assert scope.cancelled_caught


async def test_invalid_arguments() -> None:
    for bad in (0, -1):
        with pytest.raises(ValueError):
            memory_stream_pair(bad)
    a, b = memory_stream_pair()
    await a.send_all(b"x")
    for bad in (0, -5):
        with pytest.raises(ValueError):
            await b.receive_some(bad)
    assert await b.receive_some() == b"x"
    assert isinstance(a, MemoryStream) and isinstance(a, trio.abc.Stream)
    assert not isinstance(a, trio.abc.HalfCloseableStream)


class IndexCheckedStream(MemoryStream):
    """The same stream, with ``max_bytes`` type-checked first (see the module docstring)."""

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        if max_bytes is not None:
            operator.index(max_bytes)
        return await super().receive_some(max_bytes)


async def test_trio_conformance_suite() -> None:
    async def maker() -> tuple[trio.abc.Stream, trio.abc.Stream]:
        a, b = memory_stream_pair(max_buffer=64 * 1024)
        a.__class__ = b.__class__ = IndexCheckedStream
        return a, b

    with trio.fail_after(10):
        await trio.testing.check_two_way_stream(maker, None)


async def test_receive_some_rejects_a_non_integer() -> None:
    a, b = memory_stream_pair()
    raised: list[BaseException] = []

    async def receive() -> None:
        try:
            await b.receive_some(1.5)  # type: ignore[arg-type]
        except TypeError as exc:
            raised.append(exc)

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(receive)
            await trio.testing.wait_all_tasks_blocked()
            nursery.cancel_scope.cancel()
    assert len(raised) == 1


async def test_concurrent_wait_send_all_might_not_block_is_busy() -> None:
    a, b = memory_stream_pair(max_buffer=1)
    busy: list[BaseException] = []

    async def wait() -> None:
        try:
            await a.wait_send_all_might_not_block()
        except trio.BusyResourceError as exc:
            busy.append(exc)

    with trio.fail_after(5):
        await a.send_all(b"x")  # clogged
        async with trio.open_nursery() as nursery:
            nursery.start_soon(wait)
            nursery.start_soon(wait)
            await trio.testing.wait_all_tasks_blocked()
            nursery.cancel_scope.cancel()
    assert len(busy) == 1
