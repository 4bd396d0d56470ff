"""A consumer that reads what waits in the socket itself (``Session._receive_now``).

When a subscription's consumer comes back for more with nothing buffered
while the peer's next bytes are already in the socket, it reads and
dispatches them in its own task, instead of parking until the reader has
been woken, read, and woken it in turn. These tests drive a real client
session over TCP on 127.0.0.1 against a hand-driven peer, which writes
straight to its socket from inside the consumer's loop body (without
yielding), so that the bytes are in the client's socket, unread, when the
consumer asks for its next element. They check the promises: what is read
this way is what the reader would have read, in order; the end of reading
(goodbye, bad input) is handled as the reader handles it; and the consumer
still parks within bounds, never reads where the reader would not (its
budget), and never for a ``copy=False`` stream.
"""

from __future__ import annotations

import contextvars
import os
from collections import deque
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import pytest
import trio
import trio.testing
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rstreams
from rstreams._direct_socket import DirectSocket
from rstreams._session import Session
from rstreams._subscribe import READ_BYTES_BETWEEN_PARKS, READS_BETWEEN_PARKS, Subscription
from rstreams.protocol import Goodbye, OnNext, OnNextLastPart, OnNextPart, Subscribe, Subscribed, encode

from tests.protocol._wire import split_into_reads

from ._support import RawPeer, u32


class _Log:
    """What the consumer did each time it found nothing buffered: read
    (how many bytes) or park."""

    def __init__(self) -> None:
        self.steps: list[int | str] = []

    @property
    def reads(self) -> list[int]:
        return [step for step in self.steps if isinstance(step, int)]

    def longest_run_of_reads(self) -> list[int]:
        longest: list[int] = []
        run: list[int] = []
        for step in self.steps:
            if isinstance(step, int):
                run.append(step)
                if len(run) > len(longest):
                    longest = list(run)
            else:
                run = []
        return longest


@pytest.fixture
def log(monkeypatch: pytest.MonkeyPatch) -> _Log:
    record = _Log()
    receive_now, park = Session._receive_now, Subscription._park

    def counting_receive_now(self: Session) -> int:
        received = receive_now(self)
        if received:
            record.steps.append(received)
        return received

    async def counting_park(self: Subscription) -> None:
        record.steps.append("park")
        await park(self)

    monkeypatch.setattr(Session, "_receive_now", counting_receive_now)
    monkeypatch.setattr(Subscription, "_park", counting_park)
    return record


async def _tcp_pair() -> tuple[trio.SocketStream, trio.SocketStream]:
    """Both ends of a TCP connection on 127.0.0.1: the client's, the peer's."""
    [listener] = await trio.open_tcp_listeners(0, host="127.0.0.1")
    client_stream = await trio.open_tcp_stream("127.0.0.1", listener.socket.getsockname()[1])
    peer_stream = await listener.accept()
    await listener.aclose()
    assert isinstance(peer_stream, trio.SocketStream)
    return client_stream, peer_stream


@asynccontextmanager
async def _client_and_peer(
    config: rstreams.SessionConfig = rstreams.SessionConfig(),
) -> AsyncIterator[tuple[rstreams.Session, RawPeer, Callable[[bytes], None]]]:
    """A client session over TCP, the raw peer it talks to (hello
    exchanged), and a way to write to the client from the peer's socket at
    once, without yielding."""
    client_stream, peer_stream = await _tcp_pair()
    peer = RawPeer(peer_stream)
    fd = peer_stream.socket.fileno()

    def write_now(data: bytes) -> None:
        # Small writes to a socket whose peer reads: taken whole at once.
        assert os.write(fd, data) == len(data)

    async with rstreams.open_stream_session(client_stream, config=config) as session:
        await peer.handshake()
        try:
            yield session, peer, write_now
        finally:
            with trio.CancelScope(shield=True), trio.move_on_after(5):
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(peer.answer_goodbye)
                    await session.aclose()


async def _answer_subscribe(peer: RawPeer, *first: bytes) -> int:
    subscribe = await peer.expect(Subscribe)
    sid = subscribe.subscriber
    await peer.send(Subscribed(subscriber=sid), *[OnNext(subscriber=sid, element=element) for element in first])
    return sid


async def _read_while_writing(
    config: rstreams.SessionConfig = rstreams.SessionConfig(), *, count: int = 10, size: int = 4, copy: bool = True
) -> list[bytes]:
    """``count`` elements: the first sent as usual, each next one written to
    the socket by the consumer's loop body while it holds its element."""
    elements = [bytes([index % 251]) * (size - 4) + u32(index) for index in range(count)]
    async with _client_and_peer(config) as (client, peer, write_now):
        received: list[bytes] = []
        async with trio.open_nursery() as nursery:
            sid_box: list[int] = []

            async def publish() -> None:
                sid_box.append(await _answer_subscribe(peer, elements[0]))

            nursery.start_soon(publish)
            async with client.subscribe("feed", prefetch=count + 1, copy=copy) as stream:
                async for element in stream:
                    received.append(bytes(element))
                    if len(received) == count:
                        break
                    write_now(encode(OnNext(subscriber=sid_box[0], element=elements[len(received)])))
    assert received == elements
    return received


async def test_a_consumer_reads_what_waits_in_the_socket_itself(log: _Log) -> None:
    with trio.fail_after(10):
        await _read_while_writing(count=10)
    # The first element came through the reader (the consumer parked for
    # it); each of the nine others was in the socket when the consumer came
    # back, and it read it there, without parking.
    assert log.steps[0] == "park"
    assert len(log.reads) == 9
    assert log.steps[-9:] == log.reads


_WHOSE = contextvars.ContextVar("whose", default="the session's")


async def test_what_the_consumer_dispatches_runs_in_the_readers_context(log: _Log) -> None:
    # A subscribe from the peer, read by the consumer: the publisher it calls
    # (a plain def) and the one it starts (a task) see the context vars of
    # the reader, as when the reader reads, never the consumer's.
    seen: dict[str, str] = {}

    def called(sink: rstreams.Sink, request: rstreams.SubscribeRequest) -> None:
        seen["called"] = _WHOSE.get()
        sink.send_nowait(b"answered at once")

    async def started(sink: rstreams.Sink, request: rstreams.SubscribeRequest) -> None:
        seen["started"] = _WHOSE.get()

    app = rstreams.Router({"called": called, "started": started})
    with trio.fail_after(10):
        client_stream, peer_stream = await _tcp_pair()
        peer = RawPeer(peer_stream)
        fd = peer_stream.socket.fileno()
        async with rstreams.open_stream_session(client_stream, app=app) as client:
            await peer.handshake()
            async with trio.open_nursery() as nursery:
                sid_box: list[int] = []

                async def publish() -> None:
                    sid_box.append(await _answer_subscribe(peer, b"first"))

                nursery.start_soon(publish)
                _WHOSE.set("the consumer's")
                async with client.subscribe("feed", prefetch=10) as stream:
                    async for element in stream:
                        if element == b"second":
                            break
                        os.write(
                            fd,
                            encode(Subscribe(publisher="called", subscriber=1, initial_demand=1))
                            + encode(Subscribe(publisher="started", subscriber=2, initial_demand=1))
                            + encode(OnNext(subscriber=sid_box[0], element=b"second")),
                        )
                    await trio.testing.wait_all_tasks_blocked()
            assert log.reads  # the subscribes were read by the consumer
            assert seen == {"called": "the session's", "started": "the session's"}
            async with trio.open_nursery() as nursery:
                nursery.start_soon(peer.answer_goodbye)
                await client.aclose()


async def test_a_copy_false_stream_leaves_its_reads_to_the_reader(log: _Log) -> None:
    # Its large elements are received into their own buffers by the reader;
    # a consumer's read would receive them as bytes.
    with trio.fail_after(10):
        await _read_while_writing(count=10, copy=False)
    assert log.reads == []
    assert log.steps.count("park") >= 10


async def test_in_the_middle_of_a_copy_false_part_the_consumer_reads_into_its_buffer(
    log: _Log, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Another stream's consumer reads as the reader would have: the rest of
    # a copy=False element's part straight into the buffer it is handed
    # over in.
    into: list[int] = []
    read_into = DirectSocket.read_into_for_reader

    def counting(self: DirectSocket, buffers: list[memoryview | bytearray]) -> int:
        received = read_into(self, buffers)
        if received:
            into.append(received)
        return received

    monkeypatch.setattr(DirectSocket, "read_into_for_reader", counting)
    large = bytes(range(256)) * 16
    writes: list[bytes] = []
    with trio.fail_after(10):
        async with _client_and_peer() as (client, peer, write_now):
            async with trio.open_nursery() as nursery:

                async def publish() -> None:
                    ids = {}
                    for _ in range(2):  # (each subscribe waits for its answer)
                        subscribe = await peer.expect(Subscribe)
                        ids[subscribe.publisher] = subscribe.subscriber
                        await peer.send(Subscribed(subscriber=subscribe.subscriber))
                    big, small = ids["big"], ids["small"]
                    last_part = encode(OnNextLastPart(subscriber=big, element=0, data=large[2048:]))
                    # Written by the consumer: one write that ends in the
                    # middle of the last part's payload, then its rest.
                    writes.append(
                        encode(OnNext(subscriber=small, element=b"a"))
                        + encode(OnNextPart(subscriber=big, element=0, data=large[:2048]))
                        + last_part[:1000]
                    )
                    writes.append(last_part[1000:] + encode(OnNext(subscriber=small, element=b"b")))
                    await peer.send(OnNext(subscriber=small, element=b"first"))

                nursery.start_soon(publish)
                async with client.subscribe("big", prefetch=1, copy=False) as big:
                    async with client.subscribe("small", prefetch=10) as small:
                        received = []
                        async for element in small:
                            received.append(element)
                            if len(received) == 3:
                                break
                            write_now(writes[len(received) - 1])
                    assert received == [b"first", b"a", b"b"]
                    async for element in big:
                        assert bytes(element) == large
                        break
    assert log.reads[-2:] == [len(writes[0]), len(writes[1])]
    assert into == [len(writes[1])]


async def test_no_read_where_it_could_take_the_inbound_budget_past_half(log: _Log) -> None:
    # One read's worth (read_size) must fit below the inbound half on top of
    # what is held, as for the reader: with a half of exactly read_size, never.
    config = rstreams.SessionConfig.for_connection_memory(2 * rstreams.SessionConfig().read_size)
    with trio.fail_after(10):
        await _read_while_writing(config, count=10)
    assert log.reads == []


async def test_no_read_while_the_answers_to_what_was_read_wait_unsent(monkeypatch: pytest.MonkeyPatch) -> None:
    # The reader stops reading while more than max_unsent_control bytes of
    # answers wait (a peer that asks and never reads); a consumer's read
    # obeys the same bound, read at the moment it would read.
    with trio.fail_after(10):
        async with _client_and_peer() as (client, peer, write_now):
            async with trio.open_nursery() as nursery:
                sid_box: list[int] = []

                async def publish() -> None:
                    sid_box.append(await _answer_subscribe(peer))

                nursery.start_soon(publish)
                async with client.subscribe("feed", prefetch=10) as stream:
                    assert isinstance(client, Session)
                    await trio.testing.wait_all_tasks_blocked()  # the reader waits, with nothing read
                    write_now(encode(OnNext(subscriber=sid_box[0], element=b"waiting")))
                    limit = client.config.max_unsent_control
                    monkeypatch.setattr(client, "_unsent_answers", lambda: limit + 1)
                    assert client._receive_now() == 0
                    monkeypatch.setattr(client, "_unsent_answers", lambda: limit)
                    assert client._receive_now() > 0
                    assert stream.statistics().buffered == 1


async def test_the_consumer_parks_within_its_bounds_of_reads_and_bytes(log: _Log) -> None:
    with trio.fail_after(20):
        await _read_while_writing(count=3 * READS_BETWEEN_PARKS, size=8)
    longest = log.longest_run_of_reads()
    assert len(longest) == READS_BETWEEN_PARKS  # every element was waiting: reads up to the bound
    assert log.steps.count("park") >= 3
    log.steps.clear()
    size = READ_BYTES_BETWEEN_PARKS // 3 + 100  # a third of the bytes and more: three reads pass it
    with trio.fail_after(20):
        await _read_while_writing(count=12, size=size)
    longest = log.longest_run_of_reads()
    assert len(longest) == 3 and sum(longest[:-1]) < READ_BYTES_BETWEEN_PARKS <= sum(longest)


async def test_the_peers_goodbye_read_by_the_consumer_closes_the_session(log: _Log) -> None:
    with trio.fail_after(10):
        async with _client_and_peer(rstreams.SessionConfig(goodbye_timeout=60)) as (client, peer, write_now):
            async with trio.open_nursery() as nursery:
                sid_box: list[int] = []

                async def publish() -> None:
                    sid_box.append(await _answer_subscribe(peer, b"first"))

                nursery.start_soon(publish)
                received = []
                with pytest.raises(rstreams.SessionClosed) as info:
                    async with client.subscribe("feed", prefetch=10) as stream:
                        async for element in stream:
                            received.append(element)
                            if len(received) == 1:
                                write_now(
                                    encode(OnNext(subscriber=sid_box[0], element=b"second"))
                                    + encode(Goodbye(reason="done here"))
                                )
            assert received == [b"first", b"second"]
            assert info.value.by_peer is True
            assert len(log.reads) == 1  # the second element and the goodbye, in one read
            await client.wait_closed()  # at once: long before the goodbye timeout
            assert await peer.expect(Goodbye)


async def test_bad_input_read_by_the_consumer_closes_the_session_as_the_readers_would(log: _Log) -> None:
    with trio.fail_after(10):
        async with _client_and_peer() as (client, peer, write_now):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_answer_subscribe, peer, b"first")
                with pytest.raises(rstreams.SessionClosed) as info:
                    async with client.subscribe("feed", prefetch=10) as stream:
                        async for _ in stream:
                            write_now(b"\x01")  # a message must be an array
            assert len(log.reads) == 1
            reason = await peer.expect_goodbye_and_close()
            assert reason.startswith("protocol error:")
            assert info.value.reason == reason and info.value.by_peer is False
            assert isinstance(info.value.__cause__, rstreams.RemoteProtocolError)
            await client.wait_closed()


async def test_after_bad_input_read_by_the_consumer_the_reader_reads_no_more() -> None:
    # As when the reader meets bad input itself: reading is over. Here the
    # close is held up (our writer cannot write: the peer floods itself with
    # a stream it never reads), and the peer's further bytes stay unread.
    async def flood(sink: rstreams.Sink, request: rstreams.SubscribeRequest) -> None:
        while True:
            await sink.send(bytes(60_000))

    app = rstreams.Router({"flood": flood})
    config = rstreams.SessionConfig(goodbye_timeout=60)
    with trio.fail_after(20):
        client_stream, peer_stream = await _tcp_pair()
        peer = RawPeer(peer_stream)
        fd = peer_stream.socket.fileno()
        async with rstreams.open_stream_session(client_stream, app=app, config=config) as client:
            assert isinstance(client, Session)
            try:
                await peer.handshake()
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(_answer_subscribe, peer, b"first")
                    with pytest.raises(rstreams.SessionClosed):
                        async with client.subscribe("feed", prefetch=10) as stream:
                            async for _ in stream:
                                # The peer asks for the flood and never reads
                                # it: our writer ends up waiting for room that
                                # never comes. Then the bad input, which the
                                # consumer's next wait reads.
                                flood_request = Subscribe(publisher="flood", subscriber=1, initial_demand=1_000_000)
                                await peer.send(flood_request)
                                previous = -1
                                while client.statistics().bytes_sent != previous:
                                    previous = client.statistics().bytes_sent
                                    await trio.sleep(0.05)
                                os.write(fd, b"\x01")  # a message must be an array
                received = client.statistics().bytes_received
                os.write(fd, encode(OnNext(subscriber=1, element=b"more")) * 100)
                await trio.testing.wait_all_tasks_blocked(cushion=0.05)
                assert client.statistics().bytes_received == received
                assert not client.closed  # (still waiting to say goodbye)
            finally:
                client._force_close()
        await trio.aclose_forcefully(peer_stream)


@st.composite
def _deliveries(draw: st.DrawFn) -> tuple[int, list[bytes], list[int], list[int]]:
    """The client's read size, elements, the cuts of their encoded bytes
    into writes (anywhere, messages included), and how many writes the
    consumer makes after each element it takes (the peer's task writes the
    rest, when it runs). Small read sizes keep the reader reading again at
    once after full reads, with bytes in hand across its checkpoint: the
    state in which the consumer must not read."""
    read_size = draw(st.sampled_from([16, 100, 4096, rstreams.SessionConfig().read_size]))
    count = draw(st.integers(1, 25))
    elements = [draw(st.binary(max_size=300)) + u32(index) for index in range(count)]
    cuts = draw(st.lists(st.integers(1, 2000), max_size=40))
    by_consumer = draw(st.lists(st.integers(0, 3), min_size=count, max_size=count))
    return read_size, elements, cuts, by_consumer


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(_deliveries())
async def test_bytes_are_handled_in_the_order_they_arrived_whoever_reads_them(
    delivery: tuple[int, list[bytes], list[int], list[int]],
) -> None:
    read_size, elements, cuts, by_consumer = delivery
    with trio.fail_after(20):
        async with _client_and_peer(rstreams.SessionConfig(read_size=read_size)) as (client, peer, write_now):
            async with trio.open_nursery() as nursery:
                writes: deque[bytes] = deque()

                async def publish() -> None:
                    sid = await _answer_subscribe(peer)
                    data = b"".join(encode(OnNext(subscriber=sid, element=element)) for element in elements)
                    writes.extend(split_into_reads(data, cuts))
                    # The peer's share: whatever the consumer has not written
                    # when this task runs, a write at a time.
                    while writes:
                        write_now(writes.popleft())
                        await trio.sleep(0.0005)

                nursery.start_soon(publish)
                received: list[bytes] = []
                async with client.subscribe("feed", prefetch=len(elements)) as stream:
                    async for element in stream:
                        received.append(element)
                        if len(received) == len(elements):
                            break
                        for _ in range(by_consumer[len(received)]):
                            if writes:
                                write_now(writes.popleft())
            assert received == elements
