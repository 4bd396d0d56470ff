"""Direct I/O on plain TCP sockets (``rstreams/_direct_socket.py``).

The reader answering a read, and a caller sending a subscribe, hand their
bytes to the kernel themselves while the writer is parked. These tests check
the promises that makes: nothing is lost or reordered when the socket takes
only part of a write (the writer sends the rest first), a peer that stops
reading never blocks the reader, and only plain TCP streams are handled this
way. The reader's lean ``receive_some`` must behave as trio's does: data,
end of stream, errors, cancellation.
"""

from __future__ import annotations

import random
import socket
import ssl
import struct
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial

import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

import rstreams
from collections.abc import Callable

from rstreams._direct_socket import DirectSocket, direct_socket, written_through
from rstreams._publish import PublisherFunction
from rstreams._session import Session
from rstreams.protocol import Goodbye, Subscribe

from ._support import RawPeer, u32


async def _socket_stream_pair() -> tuple[trio.SocketStream, trio.SocketStream]:
    left, right = trio.socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    return trio.SocketStream(left), trio.SocketStream(right)


def _direct(stream: trio.SocketStream) -> DirectSocket:
    direct = direct_socket(stream)
    assert direct is not None
    return direct


def _send_now(stream: trio.SocketStream) -> Callable[[bytes | bytearray | memoryview], int]:
    return _direct(stream).send_now


async def test_send_now_writes_what_the_socket_takes_and_never_blocks() -> None:
    with trio.fail_after(10):
        ours, theirs = await _socket_stream_pair()
        ours.socket.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 16384)
        send_now = _send_now(ours)
        assert send_now(b"hello") == 5
        assert await theirs.receive_some(100) == b"hello"
        # Fill the buffer: each call returns at once, and some call takes
        # less than it was given (bounded: the buffers are a few hundred KiB).
        chunk = b"x" * 65536
        written = []
        for _ in range(1000):
            written.append(send_now(chunk))
            if written[-1] < len(chunk):
                break
        assert written[-1] < len(chunk)
        assert send_now(chunk) == 0  # still full: nothing taken, no error
        received = 0
        while received < 5 + sum(written) - 5:
            received += len(await theirs.receive_some(1 << 20))
        assert received == sum(written)
        await ours.aclose()
        assert send_now(b"after close") == 0
        await theirs.aclose()


async def test_send_buffers_now_writes_them_in_order_as_far_as_the_socket_takes() -> None:
    with trio.fail_after(10):
        ours, theirs = await _socket_stream_pair()
        ours.socket.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 16384)
        direct = _direct(ours)
        assert direct.send_buffers_now([bytearray(b"one "), memoryview(b"two "), bytearray(b"three")]) == 13
        assert await theirs.receive_some(100) == b"one two three"
        # Until the socket is full: each call returns at once, the last
        # one having taken part of its buffers, the next one none.
        pieces = [memoryview(bytes([index]) * 40_000) for index in range(4)]
        taken = []
        for _ in range(1000):
            taken.append(direct.send_buffers_now(list(pieces)))
            if taken[-1] < 160_000:
                break
        assert taken[-1] < 160_000
        assert direct.send_buffers_now(list(pieces)) == 0
        expected = b"".join(pieces) * (len(taken) - 1) + b"".join(pieces)[: taken[-1]]
        received = bytearray()
        while len(received) < len(expected):
            received += await theirs.receive_some(1 << 20)
        assert received == expected
        await ours.aclose()
        assert direct.send_buffers_now([bytearray(b"after"), bytearray(b" close")]) == 0
        await theirs.aclose()


async def test_send_now_reports_a_broken_connection_as_nothing_written() -> None:
    with trio.fail_after(10):
        ours, theirs = await _socket_stream_pair()
        await theirs.aclose()
        send_now = _send_now(ours)
        assert send_now(b"to nobody") == 0  # EPIPE: left for the writer to report
        await ours.aclose()


async def test_only_plain_socket_streams_get_direct_io() -> None:
    client, server = trio.testing.memory_stream_pair()
    assert direct_socket(client) is None
    ours, theirs = await _socket_stream_pair()
    assert direct_socket(trio.SSLStream(ours, ssl.create_default_context())) is None
    await ours.aclose()
    await theirs.aclose()


_Buffers = list[bytearray | memoryview]


class _Throttled:
    """Wraps a session's direct sender so the socket seems to take only part
    of each write (sometimes nothing), in a seeded, repeatable pattern."""

    def __init__(self, send_now: Callable[[_Buffers], int], seed: int) -> None:
        self._send_now = send_now
        self._random = random.Random(seed)
        self.calls = 0
        self.partial = 0
        self.partial_gathered = 0  # partial writes of several buffers

    def __call__(self, buffers: _Buffers) -> int:
        self.calls += 1
        data = b"".join(buffers)
        limit = self._random.choice([0, 1, 7, 300, len(data) // 2] + [len(data)] * 4)
        if limit < len(data):
            self.partial += 1
            if len(buffers) > 1:
                self.partial_gathered += 1
        return self._send_now([bytearray(data[:limit])]) if limit else 0


def _burst(sink: rstreams.Sink, request: rstreams.SubscribeRequest) -> None:
    """Answers at once (plain ``def``): ``count`` numbered elements of ``size`` bytes."""
    count = request.int_param("count", 3, minimum=0)
    size = request.int_param("size", 8, minimum=4)
    for index in range(count):
        sink.send_nowait(bytes([index % 251]) * (size - 4) + u32(index))


@asynccontextmanager
async def _throttled_pair(seed: int) -> AsyncIterator[tuple[Session, Session, _Throttled, _Throttled]]:
    app = rstreams.Router({"burst": _burst})
    ours, theirs = await _socket_stream_pair()
    async with rstreams.open_stream_session(ours, app=app) as server, rstreams.open_stream_session(theirs) as client:
        assert server._send_now is not None and client._send_now is not None
        server_throttle = _Throttled(server._send_now, seed)
        client_throttle = _Throttled(client._send_now, seed + 1)
        server._send_now = server_throttle
        client._send_now = client_throttle
        yield client, server, server_throttle, client_throttle


def _paced(count: int, pause: float, element: Callable[[int], bytes] = u32) -> PublisherFunction:
    """A publisher of ``element(0)`` .. ``element(count - 1)``, each sent
    after a ``pause`` of that many seconds: a stream paced by a timer."""

    async def paced(sink: rstreams.Sink, request: rstreams.SubscribeRequest) -> None:
        for index in range(count):
            await trio.sleep(pause)
            await sink.send(element(index))

    return paced


def _expected(count: int, size: int) -> list[bytes]:
    return [bytes([index % 251]) * (size - 4) + u32(index) for index in range(count)]


async def test_partial_direct_writes_lose_and_reorder_nothing() -> None:
    with trio.fail_after(20):
        async with _throttled_pair(seed=6) as (client, server, server_throttle, client_throttle):
            for count, size in [(1, 8), (3, 100), (50, 8), (5, 5000), (0, 8), (2, 70000)] * 5:
                assert await client.fetch(f"burst?count={count}&size={size}", max(count, 1)) == _expected(count, size)

            results: dict[int, list[bytes]] = {}

            async def one(index: int) -> None:
                results[index] = await client.fetch(f"burst?count={index % 7}&size={8 + index}", 10)

            async with trio.open_nursery() as nursery:
                for index in range(64):
                    nursery.start_soon(one, index)
            assert all(results[index] == _expected(index % 7, 8 + index) for index in range(64))

            # The paths under test were taken, partial writes included (of
            # a large element's parts too, written uncopied from the reader).
            assert server_throttle.calls >= 20 and server_throttle.partial >= 5
            assert server_throttle.partial_gathered >= 2
            assert client_throttle.calls >= 20 and client_throttle.partial >= 5
            await trio.testing.wait_all_tasks_blocked()
            assert client.statistics().bytes_received == server.statistics().bytes_sent
            assert server.statistics().bytes_received == client.statistics().bytes_sent
        assert client.close_reason == "goodbye"


async def test_a_session_over_tcp_answers_through_direct_writes() -> None:
    sends: list[int] = []
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            server = rstreams.Server(rstreams.Router({"burst": _burst}))
            listeners = await nursery.start(server.serve_tcp, "127.0.0.1", 0)
            port = listeners[0].socket.getsockname()[1]
            async with rstreams.open_session(f"tcp://127.0.0.1:{port}") as client:
                assert client._send_now is not None
                real = client._send_now

                def counting(buffers: _Buffers) -> int:
                    sent = real(buffers)
                    sends.append(sent)
                    return sent

                assert await client.fetch("burst", 3) == _expected(3, 8)  # the writer is parked from here on
                client._send_now = counting
                for count in range(20):
                    assert await client.fetch(f"burst?count={count}", 20) == _expected(count, 8)
            nursery.cancel_scope.cancel()
    # Every subscribe went out from the caller's task, in full.
    assert len(sends) == 20 and all(sent > 0 for sent in sends)


async def test_a_paced_publishers_elements_leave_from_its_own_task_and_a_tight_loops_together() -> None:
    # A send after a pause ends a run of send: its element is written at once
    # from the publisher's task while the writer is parked, not by waking the
    # writer. A tight loop's sends form runs whose elements the writer takes
    # together, in a few writes; a stream's first element and a large one go
    # to the writer too.
    async def tight(sink: rstreams.Sink, request: rstreams.SubscribeRequest) -> None:
        for index in range(3000):
            await sink.send(u32(index))

    app = rstreams.Router(
        {
            "paced": _paced(20, 0.002),
            "tight": tight,
            "paced_large": _paced(5, 0.01, lambda index: bytes([index]) * 200_000),
            "one": _paced(1, 0.002, lambda index: b"only"),
        }
    )
    ours, theirs = await _socket_stream_pair()
    writers: list[str] = []
    viewed: list[int] = []  # the sizes of the objects that written views are of
    with trio.fail_after(20):
        async with rstreams.open_stream_session(ours, app=app) as server, rstreams.open_stream_session(theirs) as client:
            assert server._send_now is not None
            real = server._send_now

            def recording(buffers: _Buffers) -> int:
                writers.append(trio.lowlevel.current_task().name)
                viewed.extend(len(buffer.obj) for buffer in buffers if isinstance(buffer, memoryview))
                return real(buffers)

            server._send_now = recording
            async with client.subscribe("paced", prefetch=32) as sub:
                assert [element async for element in sub] == [u32(index) for index in range(20)]
            assert writers.count("publisher paced") >= 15
            async with client.subscribe("tight", prefetch=4096) as sub:
                assert [element async for element in sub] == [u32(index) for index in range(3000)]
            assert writers.count("publisher tight") <= 30  # (3,000 if each send wrote)
            # Elements split into parts leave from the publisher's task
            # too, written from the element itself (views of it), not
            # copied into a write.
            async with client.subscribe("paced_large", prefetch=4) as sub:
                assert [element async for element in sub] == [bytes([index]) * 200_000 for index in range(5)]
            assert writers.count("publisher paced_large") >= 1
            assert 200_000 in viewed
            # A stream's first element goes to the writer, which writes it
            # with the onComplete of a publisher that sends it and returns.
            assert await client.fetch("one", 1) == [b"only"]
            assert "publisher one" not in writers


async def test_a_peer_that_stops_reading_never_blocks_the_reader() -> None:
    # The reason the reader may only write without waiting: a peer that
    # subscribes and stops reading fills our socket buffer; its goodbye must
    # still be read and acted on, while our answers are stuck behind it.
    config = rstreams.SessionConfig(goodbye_timeout=0.5, drain_timeout=0.5)
    ours, theirs = await _socket_stream_pair()
    peer = RawPeer(theirs)
    partial: list[tuple[int, int]] = []
    with trio.fail_after(10):
        async with rstreams.open_stream_session(ours, app=rstreams.Router({"burst": _burst}), config=config) as server:
            assert server._send_now is not None
            real = server._send_now

            def recording(buffers: _Buffers) -> int:
                sent = real(buffers)
                size = sum(map(len, buffers))
                if sent < size:
                    partial.append((sent, size))
                return sent

            server._send_now = recording
            await peer.handshake()
            # About 4 MB of answers (each 240 KB, answered at once by the
            # reader), far beyond the socket's buffers; we read none of it.
            for subscriber in range(1, 17):
                await peer.send(Subscribe(publisher="burst?count=4&size=60000", subscriber=subscriber, initial_demand=4))
            await peer.send(Goodbye(reason="leaving without reading"))
            await server.wait_closed()
            assert server.close_reason == "leaving without reading"  # the reader saw it
            assert partial, "the socket never filled: the test did not reach its case"
            await peer.aclose()


# ---- receive_some ----------------------------------------------------------


async def test_receive_some_reads_what_arrives_and_then_end_of_stream() -> None:
    with trio.fail_after(10):
        ours, theirs = await _socket_stream_pair()
        direct = _direct(ours)
        await theirs.send_all(b"first")
        assert await direct.receive_some(100) == b"first"  # read at once
        async with trio.open_nursery() as nursery:
            # Waiting: the last read was short, so it waits for readability.
            nursery.start_soon(theirs.send_all, b"second")
            assert await direct.receive_some(100) == b"second"
        await theirs.send_all(b"x" * 300)
        assert await direct.receive_some(100) == b"x" * 100  # a full read ...
        assert await direct.receive_some(1000) == b"x" * 200  # ... reads again at once
        await theirs.aclose()
        assert await direct.receive_some(100) == b""
        await ours.aclose()


async def test_receive_some_always_checkpoints() -> None:
    with trio.fail_after(10):
        ours, theirs = await _socket_stream_pair()
        direct = _direct(ours)
        await theirs.send_all(b"ready")
        with trio.testing.assert_checkpoints():
            assert await direct.receive_some(100) == b"ready"
        await theirs.send_all(b"again")
        with trio.testing.assert_checkpoints():
            assert await direct.receive_some(100) == b"again"
        await ours.aclose()
        await theirs.aclose()


async def test_receive_some_when_cancelled_reads_nothing() -> None:
    with trio.fail_after(10):
        ours, theirs = await _socket_stream_pair()
        direct = _direct(ours)
        with trio.move_on_after(0.05):
            await direct.receive_some(100)  # nothing comes: cancelled while waiting
        await theirs.send_all(b"kept")
        with trio.CancelScope() as scope:
            scope.cancel()
            with pytest.raises(trio.Cancelled):
                await direct.receive_some(100)  # cancelled before reading
        assert await direct.receive_some(100) == b"kept"
        await ours.aclose()
        await theirs.aclose()


async def test_receive_some_raises_what_socket_stream_raises() -> None:
    with trio.fail_after(10):
        ours, theirs = await _socket_stream_pair()
        direct = _direct(ours)
        await ours.aclose()
        with pytest.raises(trio.ClosedResourceError):
            await direct.receive_some(100)
        await theirs.aclose()

        # A reset: the peer closes with data it never read (SO_LINGER 0 on TCP).
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        port = listeners[0].socket.getsockname()[1]
        client = await trio.open_tcp_stream("127.0.0.1", port)
        server = await listeners[0].accept()
        await listeners[0].aclose()
        direct = _direct(client)
        server.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        await server.aclose()
        with pytest.raises(trio.BrokenResourceError):
            await direct.receive_some(100)
        await client.aclose()


async def test_a_closed_socket_ends_a_wait_with_closed_resource_error() -> None:
    with trio.fail_after(10):
        ours, theirs = await _socket_stream_pair()
        direct = _direct(ours)
        await theirs.send_all(b"a")
        assert await direct.receive_some(100) == b"a"  # short: the next call waits
        async with trio.open_nursery() as nursery:

            async def close_soon() -> None:
                await trio.testing.wait_all_tasks_blocked()
                await ours.aclose()

            nursery.start_soon(close_soon)
            with pytest.raises(trio.ClosedResourceError):
                await direct.receive_some(100)
        await theirs.aclose()


async def test_no_direct_write_once_something_else_has_woken_the_writer() -> None:
    # A publisher that queued elements has woken the writer, which is about
    # to write them: a subscribe queued now goes with that write.
    ours, theirs = await _socket_stream_pair()
    with trio.fail_after(10):
        async with (
            rstreams.open_stream_session(ours, app=rstreams.Router({"burst": _burst})),
            rstreams.open_stream_session(theirs) as client,
        ):
            assert await client.fetch("burst", 3) == _expected(3, 8)  # the writer is parked from here on
            assert client._send_now is not None
            real = client._send_now
            calls: list[int] = []

            def counting(data: bytes | bytearray | memoryview) -> int:
                calls.append(len(data))
                return real(data)

            client._send_now = counting
            assert await client.fetch("burst", 3) == _expected(3, 8)
            assert len(calls) == 1  # alone and unwoken: written at once
            client._wake_writer()  # as a publisher queueing elements would
            assert await client.fetch("burst", 3) == _expected(3, 8)
            assert len(calls) == 1  # left to the writer


# ---- busy polling ----------------------------------------------------------


class _SleepCounter:
    """Counts the reads that went to sleep in epoll (``wait_readable``)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.sleeps = 0
        real = trio.lowlevel.wait_readable

        async def counting(sock: object) -> None:
            self.sleeps += 1
            await real(sock)  # type: ignore[arg-type]

        monkeypatch.setattr(trio.lowlevel, "wait_readable", counting)


async def _send_after_checkpoints(stream: trio.SocketStream, data: bytes, checkpoints: int) -> None:
    # Checkpoints, not wait_all_tasks_blocked: a polling reader is never
    # blocked, and this sender only gets to run if the poll lets it.
    for _ in range(checkpoints):
        await trio.lowlevel.checkpoint()
    await stream.send_all(data)


@pytest.mark.parametrize(
    ("poll_for", "sleeps"),
    [
        # Polling let the sender run (else it would have spun its 5 s, then
        # slept) and found the data itself.
        (5.0, 0),
        (0.0, 1),  # not asked to poll
    ],
)
async def test_a_polling_read_finds_the_answer_without_sleeping(
    monkeypatch: pytest.MonkeyPatch, poll_for: float, sleeps: int
) -> None:
    counter = _SleepCounter(monkeypatch)
    with trio.fail_after(10):
        ours, theirs = await _socket_stream_pair()
        direct = DirectSocket(ours)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_send_after_checkpoints, theirs, b"answer", 5)
            assert await direct.receive_some(100, poll_for=poll_for) == b"answer"
        assert counter.sleeps == sleeps
        await ours.aclose()
        await theirs.aclose()


async def test_a_polling_read_sleeps_once_its_window_is_over(monkeypatch: pytest.MonkeyPatch) -> None:
    counter = _SleepCounter(monkeypatch)
    with trio.fail_after(10):
        ours, theirs = await _socket_stream_pair()
        direct = DirectSocket(ours)
        async with trio.open_nursery() as nursery:

            async def send_late() -> None:
                await trio.sleep(0.1)
                await theirs.send_all(b"late")

            nursery.start_soon(send_late)
            assert await direct.receive_some(100, poll_for=0.001) == b"late"
        assert counter.sleeps == 1
        await ours.aclose()
        await theirs.aclose()


async def test_a_polling_read_when_cancelled_reads_nothing() -> None:
    with trio.fail_after(10):
        ours, theirs = await _socket_stream_pair()
        direct = DirectSocket(ours)
        with trio.move_on_after(0.05) as scope:
            await direct.receive_some(100, poll_for=5.0)  # cancelled while polling
        assert scope.cancelled_caught
        await theirs.send_all(b"kept")
        assert await direct.receive_some(100, poll_for=5.0) == b"kept"
        await ours.aclose()
        await theirs.aclose()


async def test_one_read_polls_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    # While one read polls, the run loop never sleeps, so a second socket's
    # data is seen at once anyway: the second read sleeps instead of
    # spending every pass of the loop on a read that finds nothing.
    counter = _SleepCounter(monkeypatch)
    with trio.fail_after(10):
        first, first_peer = await _socket_stream_pair()
        second, second_peer = await _socket_stream_pair()
        first_direct = DirectSocket(first)
        second_direct = DirectSocket(second)

        async def read_second_later() -> None:
            for _ in range(3):
                await trio.lowlevel.checkpoint()
            assert await second_direct.receive_some(100, poll_for=5.0) == b"second"

        async with trio.open_nursery() as nursery:
            nursery.start_soon(_send_after_checkpoints, first_peer, b"first", 30)
            nursery.start_soon(_send_after_checkpoints, second_peer, b"second", 10)
            nursery.start_soon(read_second_later)
            assert await first_direct.receive_some(100, poll_for=5.0) == b"first"
        assert counter.sleeps == 1  # the second read's
        # The slot is free again: the second socket's next read polls.
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_send_after_checkpoints, second_peer, b"again", 5)
            assert await second_direct.receive_some(100, poll_for=5.0) == b"again"
        assert counter.sleeps == 1
        for stream in (first, first_peer, second, second_peer):
            await stream.aclose()


class _PollRecorder:
    """Records, per DirectSocket, whether each read asked to busy-poll."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: list[tuple[DirectSocket, bool]] = []
        real = DirectSocket.receive_some

        async def recording(direct: DirectSocket, max_bytes: int, *, poll_for: float = 0.0) -> bytes:
            self.calls.append((direct, poll_for > 0.0))
            return await real(direct, max_bytes, poll_for=poll_for)

        monkeypatch.setattr(DirectSocket, "receive_some", recording)

    def of(self, session: Session) -> list[bool]:
        return [poll for direct, poll in self.calls if direct is session._direct]


@asynccontextmanager
async def _client_and_server(
    client_config: rstreams.SessionConfig, server_config: rstreams.SessionConfig
) -> AsyncIterator[tuple[Session, list[Session]]]:
    """A client session over TCP to a server with ``burst``, ``slow``
    (answers after 0.5 s), ``stream`` (100 elements, each sent as demand
    allows) and ``trickle`` (5 elements, 0.1 s apart); also yields the
    server's sessions as they open."""

    async def slow(sink: rstreams.Sink, request: rstreams.SubscribeRequest) -> None:
        await trio.sleep(0.5)
        await sink.send(b"late")

    async def stream(sink: rstreams.Sink, request: rstreams.SubscribeRequest) -> None:
        for index in range(100):
            await sink.send(u32(index))

    server_sessions: list[Session] = []
    app = rstreams.Router({"burst": _burst, "slow": slow, "stream": stream, "trickle": _paced(5, 0.1)})

    async def handler(stream: trio.SocketStream) -> None:
        async with rstreams.open_stream_session(stream, app=app, config=server_config) as session:
            server_sessions.append(session)
            await session.wait_closed()

    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(partial(trio.serve_tcp, handler, 0, host="127.0.0.1"))
        port = listeners[0].socket.getsockname()[1]
        async with rstreams.open_session(f"tcp://127.0.0.1:{port}", config=client_config) as client:
            assert client._direct is not None
            yield client, server_sessions
        nursery.cancel_scope.cancel()


async def test_a_client_polls_only_while_quick_fetches_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    recorder = _PollRecorder(monkeypatch)
    polling = rstreams.SessionConfig(busy_poll=0.01)
    with trio.fail_after(20):
        async with _client_and_server(polling, rstreams.SessionConfig(busy_poll=0)) as (client, _):
            await trio.testing.wait_all_tasks_blocked()
            assert recorder.of(client) and not any(recorder.of(client))  # no fetch waits
            for _ in range(10):
                assert await client.fetch("burst", 3) == _expected(3, 8)
            assert any(recorder.of(client))  # quick answers: polled for
            # An answer 50 windows late (counted as 16): the moving average
            # of waits (1/8 of each new one) is now twice the window, and the
            # few quick waits before the next slow answer (for subscribed,
            # onComplete) cannot bring it back down.
            assert await client.fetch("slow", 1) == [b"late"]
            before = len(recorder.of(client))
            assert await client.fetch("slow", 1) == [b"late"]
            assert recorder.of(client)[before:] and not any(recorder.of(client)[before:])


async def test_a_client_polls_while_a_stream_flows_and_not_for_a_slow_one(monkeypatch: pytest.MonkeyPatch) -> None:
    recorder = _PollRecorder(monkeypatch)
    polling = rstreams.SessionConfig(busy_poll=0.01)
    with trio.fail_after(20):
        async with _client_and_server(polling, rstreams.SessionConfig(busy_poll=0)) as (client, _):
            async with client.subscribe("stream", prefetch=10) as sub:
                assert [element async for element in sub] == [u32(index) for index in range(100)]
            # The reads after reads that brought elements polled for the next.
            assert any(recorder.of(client))
            # Elements 0.1 s apart (ten windows): after the first such wait
            # the moving average is above the window, and the reads that
            # wait for the next element sleep at once.
            before = len(recorder.of(client))
            async with client.subscribe("trickle", prefetch=10) as sub:
                assert [element async for element in sub] == [u32(index) for index in range(5)]
            trickled = recorder.of(client)[before:]
            assert len(trickled) >= 4 and not any(trickled[-3:])


async def test_a_server_polls_for_the_next_subscribe_only_while_they_come_quickly(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    recorder = _PollRecorder(monkeypatch)
    polling = rstreams.SessionConfig(busy_poll=0.05)
    with trio.fail_after(20):
        async with _client_and_server(rstreams.SessionConfig(busy_poll=0), polling) as (client, servers):
            async with client.subscribe("stream", prefetch=10) as sub:
                assert [element async for element in sub] == [u32(index) for index in range(100)]
            await trio.testing.wait_all_tasks_blocked()
            [server] = servers
            # Its reads of requests (demand) never polled; the one after
            # answering the subscribe did, and found the first request.
            assert recorder.of(server).count(True) == 1
            for _ in range(10):
                assert await client.fetch("burst", 3) == _expected(3, 8)
            assert recorder.of(server).count(True) > 1  # quick subscribes: polled for
            # A pause of ten windows between two subscribes puts the moving
            # average above the window: the read after the next answer sleeps.
            await trio.sleep(0.5)
            assert await client.fetch("burst", 3) == _expected(3, 8)
            await trio.testing.wait_all_tasks_blocked()
            assert recorder.of(server)[-1] is False


async def test_send_buffers_writes_the_list_in_order_through_partial_writes() -> None:
    # A small send buffer and a reader that takes a little at a time: writev
    # takes part of the list, part of one buffer, or nothing, many times over.
    rng = random.Random(19)
    buffers: list[bytearray | memoryview] = []
    for index in range(40):
        size = rng.choice([1, 100, 5000, 70000, 200000])
        buffers.append(bytearray(bytes([index]) * size) if index % 2 else memoryview(bytes([index]) * size))
    expected = b"".join(buffers)
    with trio.fail_after(20):
        ours, theirs = await _socket_stream_pair()
        ours.socket.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 16384)
        received = bytearray()

        async def read_slowly() -> None:
            while len(received) < len(expected):
                received.extend(await theirs.receive_some(rng.choice([1000, 30000])))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(read_slowly)
            # It says that it met a full socket: the writer then waits for
            # room before it collects its next write.
            assert await _direct(ours).send_buffers(list(buffers)) is True
        assert bytes(received) == expected
        await ours.aclose()
        await theirs.aclose()


async def test_send_buffers_says_when_the_socket_took_everything_at_once() -> None:
    with trio.fail_after(10):
        ours, theirs = await _socket_stream_pair()
        assert await _direct(ours).send_buffers([bytearray(b"ab"), memoryview(b"cd")]) is False
        assert await theirs.receive_some(10) == b"abcd"
        await ours.aclose()
        await theirs.aclose()


async def test_has_room_says_whether_the_socket_takes_more_now() -> None:
    with trio.fail_after(10):
        ours, theirs = await _socket_stream_pair()
        ours.socket.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 16384)
        direct = _direct(ours)
        assert direct.has_room()
        while direct.send_now(b"x" * 4096):
            pass
        assert not direct.has_room()
        while not direct.has_room():
            await theirs.receive_some(1 << 20)
        assert direct.has_room()
        await ours.aclose()
        assert direct.has_room()  # closed: the next write says why
        await theirs.aclose()


async def test_the_writer_waits_for_room_only_when_the_socket_has_none() -> None:
    # Whole writes (a reader that keeps up) are followed by the next write
    # at once; a write that found the socket full, by a wait for room first.
    waits: dict[int, list[str]] = {}  # per socket: what its writer did, in order
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            server = rstreams.Server(rstreams.Router({"large": _large}))
            listeners = await nursery.start(server.serve_tcp, "127.0.0.1", 0)
            port = listeners[0].socket.getsockname()[1]
            real_send, real_wait = DirectSocket.send_buffers, trio.SocketStream.wait_send_all_might_not_block
            real_room = DirectSocket.has_room

            async def sending(self: DirectSocket, buffers: list[bytearray | memoryview]) -> bool:
                waited = await real_send(self, buffers)
                waits.setdefault(id(self._socket), []).append("full" if waited else "whole")
                return waited

            def room(self: DirectSocket) -> bool:
                answer = real_room(self)
                waits.setdefault(id(self._socket), []).append("room" if answer else "no room")
                return answer

            async def waiting(self: trio.SocketStream) -> None:
                waits.setdefault(id(self.socket), []).append("wait")
                await real_wait(self)

            DirectSocket.send_buffers = sending  # type: ignore[method-assign]
            DirectSocket.has_room = room  # type: ignore[method-assign]
            trio.SocketStream.wait_send_all_might_not_block = waiting  # type: ignore[method-assign]
            try:
                async with rstreams.open_session(f"tcp://127.0.0.1:{port}") as client:
                    got = await client.fetch("large?count=6&size=1048576", 6)
                    assert got == [_pattern(index, 1 << 20) for index in range(6)]
            finally:
                DirectSocket.send_buffers = real_send  # type: ignore[method-assign]
                DirectSocket.has_room = real_room  # type: ignore[method-assign]
                trio.SocketStream.wait_send_all_might_not_block = real_wait  # type: ignore[method-assign]
            nursery.cancel_scope.cancel()
    assert any(events.count("whole") + events.count("full") >= 6 for events in waits.values()), waits
    for events in waits.values():
        # The writer's first wait is its one at the session's start; after
        # that, each wait follows a write that met a full socket, or a
        # full-size one after which the socket had no room.
        assert events[0] == "wait", events
        for before, event in zip(events[1:], events[2:]):
            if event == "wait":
                assert before in ("full", "no room"), events


async def test_send_buffers_raises_what_send_all_raises() -> None:
    with trio.fail_after(10):
        ours, theirs = await _socket_stream_pair()
        direct = _direct(ours)
        await theirs.aclose()
        with pytest.raises(trio.BrokenResourceError):
            for _ in range(100):  # the first writes may still land in the buffer
                await direct.send_buffers([bytearray(b"x" * 65536), memoryview(b"y" * 65536)])
        await ours.aclose()
        with pytest.raises(trio.ClosedResourceError):
            await direct.send_buffers([bytearray(b"late")])


async def _large(sink: rstreams.Sink, request: rstreams.SubscribeRequest) -> None:
    """``count`` elements of ``size`` bytes, each its own pattern."""
    count = request.int_param("count", 3, minimum=0)
    size = request.int_param("size", 8, minimum=4)
    for index in range(count):
        await sink.send(_pattern(index, size))


def _pattern(index: int, size: int) -> bytes:
    return (u32(index) * (size // 4 + 1))[:size]


async def test_large_elements_over_tcp_go_out_as_gathered_writes() -> None:
    # Split elements are written from the elements themselves (writev of
    # views), and arrive whole and in order, with small ones between them.
    gathered: list[int] = []
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            server = rstreams.Server(rstreams.Router({"large": _large}))
            listeners = await nursery.start(server.serve_tcp, "127.0.0.1", 0)
            port = listeners[0].socket.getsockname()[1]
            real = DirectSocket.send_buffers

            async def counting(self: DirectSocket, buffers: list[bytearray | memoryview]) -> None:
                gathered.append(sum(type(buffer) is memoryview and type(buffer.obj) is bytes for buffer in buffers))
                await real(self, buffers)

            DirectSocket.send_buffers = counting  # type: ignore[method-assign]
            try:
                async with rstreams.open_session(f"tcp://127.0.0.1:{port}") as client:
                    for size in (1 << 20, 300_000, 65537, 8):
                        got = await client.fetch(f"large?count=5&size={size}", 5)
                        assert got == [_pattern(index, size) for index in range(5)]
            finally:
                DirectSocket.send_buffers = real  # type: ignore[method-assign]
            nursery.cancel_scope.cancel()
    # At least the 1 MiB elements' parts went uncopied.
    assert sum(gathered) >= 5 * ((1 << 20) // rstreams.ProtocolLimits().part_size)


@pytest.mark.parametrize("copy", [True, False])
async def test_elements_around_the_part_size_arrive_whole_over_tcp(copy: bool) -> None:
    # With the default limits: split in two halves (up to 256 KiB), in
    # 256 KiB parts and a short last one (one byte, just above), and the
    # receiving side's guess of the next part's size wrong at each change.
    part = rstreams.ProtocolLimits().part_size
    sizes = [65537, 100_000, part, part + 1, part + 2, 300_000, 2 * part, (1 << 20) + 1, 65536, 8]
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            server = rstreams.Server(rstreams.Router({"large": _large}))
            listeners = await nursery.start(server.serve_tcp, "127.0.0.1", 0)
            port = listeners[0].socket.getsockname()[1]
            async with rstreams.open_session(f"tcp://127.0.0.1:{port}") as client:
                for size in sizes:
                    async with client.subscribe(f"large?count=3&size={size}", prefetch=2, copy=copy) as subscription:
                        got = [bytes(element) async for element in subscription]
                    assert got == [_pattern(index, size) for index in range(3)], size
            nursery.cancel_scope.cancel()


@settings(deadline=None, max_examples=200)
@given(
    sizes=st.lists(st.integers(0, 300), max_size=12),
    takes=st.lists(st.integers(0, 400), max_size=30),
)
def test_partial_gathered_writes_are_accounted_byte_for_byte(sizes: list[int], takes: list[int]) -> None:
    # A kernel that takes any number of bytes of the list, any number of
    # times: what it took, in order, is exactly the buffers joined, and the
    # buffers left are exactly the rest.
    buffers: list[bytearray | memoryview] = [
        bytearray(bytes([index]) * size) if index % 2 else memoryview(bytes([index]) * size)
        for index, size in enumerate(sizes)
    ]
    expected = b"".join(buffers)
    pending = list(buffers)
    first = written_through(pending, 0, 0)
    written = bytearray()
    for take in [*takes, len(expected)]:
        left = b"".join(pending[first:])
        take = min(take, len(left))
        written += left[:take]  # (what writev would have sent)
        first = written_through(pending, first, take)
        assert b"".join(pending[first:]) == left[take:]
        assert first == len(pending) or len(pending[first])
    assert bytes(written) == expected
    assert first == len(pending)


def _unfilled(buffers: list[bytearray | memoryview], filled: int) -> list[memoryview]:
    """What is left of ``buffers`` once ``filled`` bytes went into them."""
    rest = []
    for buffer in buffers:
        view = memoryview(buffer)
        if filled >= len(view):
            filled -= len(view)
            continue
        rest.append(view[filled:])
        filled = 0
    return rest


async def test_receive_into_fills_the_buffers_in_order_then_reports_end_of_stream() -> None:
    with trio.fail_after(10):
        ours, theirs = await _socket_stream_pair()
        direct = _direct(ours)
        await theirs.send_all(b"0123456789abcdef")
        first, second = bytearray(4), memoryview(bytearray(100))[10:20]
        received = 0
        while received < 14:  # (loopback hands it over at once, but may not)
            received += await direct.receive_into(_unfilled([first, second], received))
        assert bytes(first) == b"0123" and bytes(second) == b"456789abcd"
        rest = bytearray(10)
        assert await direct.receive_into([rest]) == 2 and rest[:2] == b"ef"
        await theirs.aclose()
        assert await direct.receive_into([bytearray(10)]) == 0
        await ours.aclose()
        with pytest.raises(trio.ClosedResourceError):
            await direct.receive_into([bytearray(10)])


async def test_receive_into_when_cancelled_reads_nothing() -> None:
    with trio.fail_after(10):
        ours, theirs = await _socket_stream_pair()
        direct = _direct(ours)
        buffer = bytearray(8)
        with trio.move_on_after(0.05):
            await direct.receive_into([buffer])  # nothing comes
        await theirs.send_all(b"late")
        with trio.CancelScope() as scope:
            scope.cancel()
            await direct.receive_into([buffer])  # cancelled before reading
        assert await direct.receive_into([buffer]) == 4 and buffer[:4] == b"late"
        await ours.aclose()
        await theirs.aclose()
