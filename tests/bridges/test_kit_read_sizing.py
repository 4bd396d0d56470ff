"""A bridge connection's reads fit its memory budget, counted as the kit counts them.

What a read brings is counted once parsed: a message held for the
application costs ``ITEM_COST`` bytes beyond its own, so 64 KiB of the
smallest messages count several times their size. The kit sizes each read
by that worst case (``BridgeConnection._read_size``), and keeps the
read-ahead within a quarter of the budget, so that:

* a peer that pipelines small messages within its protocol is paced, never
  closed for "memory budget exceeded" (an adversarial run found EMP closing
  a client for 20,000 empty data messages, and for 30,000 small requests,
  at a 1 MiB budget);
* requests read ahead never take the room their own responses need (the
  same run found an EMP client pipelining small requests at a 2 MiB budget
  stuck for good after one response: the requests held filled what the
  response builders waited for).
"""

from __future__ import annotations

from typing import Any

import msgpack
import trio
from conftest import connect_raw
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import rstreams
import rstreams.demo
from bridges.emp import (
    Data,
    EmpAppServer,
    EmpConfig,
    EmpConnection,
    Error,
    Hello,
    Ping,
    Pong,
    RequestResponse,
    encode,
    open_emp_stream,
)
from bridges.kit import COLLECT_COPIES, ITEM_COST, KiB, MiB
from bridges.kit._connection import EVENTS_PER_READ


def _request(request_id: int, body: bytes = b"range?count=1") -> bytes:
    return encode(Data(body=body, extensions=(RequestResponse(request_id=request_id, is_request=True),)))


async def _serve(nursery: trio.Nursery, budget: int) -> int:
    config = EmpConfig(max_connection_memory=budget, keepalive_interval=None)
    server = EmpAppServer(rstreams.demo.app, config=config)
    listeners = await nursery.start(server.serve_tcp, "127.0.0.1", 0)
    return rstreams.listener_port(listeners[0])


async def test_pipelined_small_requests_are_all_answered_within_a_small_budget(nursery: trio.Nursery) -> None:
    # 12,000 requests in one write, well within EMP's pending-request limit,
    # read by the client as they come: every one answered, in a 1 MiB budget.
    port = await _serve(nursery, 1 * MiB)
    peer = await connect_raw(port)
    count = 12000
    with trio.fail_after(60):
        await peer.send(Hello())
        assert await peer.receive() == Hello()
        nursery.start_soon(peer.stream.send_all, b"".join(_request(i) for i in range(1, count + 1)))
        answered: set[int] = set()
        while len(answered) < count:
            message = await peer.receive()
            assert isinstance(message, Data), message  # not an error, not the end
            assert message.request_response is not None
            answered.add(message.request_response.request_id)
            assert msgpack.unpackb(message.body) == {"elements": [bytes(8)]}
        assert answered == set(range(1, count + 1))


async def test_a_flood_of_empty_data_messages_is_paced_not_closed(nursery: trio.Nursery) -> None:
    # Plain data messages to the app server are read and dropped; 20,000
    # empty ones (8 bytes each on the wire, 64 each held) are no reason to
    # close a connection with a 1 MiB budget. A request after them is answered.
    port = await _serve(nursery, 1 * MiB)
    peer = await connect_raw(port)
    with trio.fail_after(60):
        await peer.send(Hello())
        assert await peer.receive() == Hello()
        await peer.stream.send_all(encode(Data(body=b"")) * 20000 + _request(1, b"range?count=2"))
        message = await peer.receive()
        assert not isinstance(message, Error), message
        assert isinstance(message, Data) and message.request_response == RequestResponse(request_id=1, is_request=False)
        assert msgpack.unpackb(message.body) == {"elements": [bytes(8), (1).to_bytes(8, "big")]}


@settings(max_examples=200, deadline=None)
@given(
    budget=st.integers(min_value=64 * KiB, max_value=256 * MiB),
    max_read_ahead=st.integers(min_value=0, max_value=64 * MiB),
    receive_size=st.integers(min_value=1, max_value=1 * MiB),
)
def test_read_ahead_and_a_read_leave_room_for_one_response_being_built(
    budget: int, max_read_ahead: int, receive_size: int
) -> None:
    # The invariant behind the second fault above: what the reader may hold
    # (the read-ahead, and one read of a message begun) and one response
    # being collected (COLLECT_COPIES times the largest) fit the budget
    # together, whatever the settings; so a response waiting for room waits
    # only for room its own connection's progress frees.
    assume(receive_size <= budget // 4)  # (a read as large as the budget leaves no room for anything)
    config = EmpConfig(max_connection_memory=budget, max_read_ahead=max_read_ahead, receive_size=receive_size)
    left, _ = trio.testing.memory_stream_pair()
    connection = EmpConnection(left, config)
    held = connection.read_ahead_limit + receive_size
    assert connection.read_ahead_limit <= budget // 4
    assert held + COLLECT_COPIES * connection.max_response_in_budget <= budget


@settings(max_examples=200, deadline=None)
@given(
    budget=st.integers(min_value=64 * KiB, max_value=8 * MiB),
    used=st.integers(min_value=0, max_value=8 * MiB),
    buffered=st.integers(min_value=0, max_value=4 * MiB),
)
def test_a_read_of_the_smallest_messages_fits_what_is_left(budget: int, used: int, buffered: int) -> None:
    # Whatever is counted already, a read of the size _read_size allows,
    # every byte of it the protocol's smallest message held for the
    # application, keeps the budget and the read-ahead.
    left, _ = trio.testing.memory_stream_pair()
    connection: Any = EmpConnection(left, EmpConfig(max_connection_memory=budget))
    buffered = min(buffered, used)
    connection.budget.charge(used)
    connection._buffered = buffered
    size = connection._read_size()
    assert size >= 0
    # Each message counts ITEM_COST and its body: its bytes on the wire
    # but its header (the smallest message is all header).
    smallest = connection.SMALLEST_MESSAGE
    messages = size // smallest
    counted = messages * ITEM_COST + size - messages * smallest
    if size:
        assert used + counted <= budget
        if buffered:
            assert buffered + counted <= connection.read_ahead_limit


class _RecordingStream(trio.abc.Stream):
    """A stream that records what each read asked for."""

    def __init__(self, inner: trio.abc.Stream) -> None:
        self.inner = inner
        self.asked: list[int] = []

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await self.inner.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self.inner.wait_send_all_might_not_block()

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        assert max_bytes is not None
        self.asked.append(max_bytes)
        return await self.inner.receive_some(max_bytes)

    async def aclose(self) -> None:
        await self.inner.aclose()


async def test_a_flood_of_tiny_messages_is_read_a_few_hundred_at_a_time(raw_pair: Any) -> None:
    # One read is one step of the run loop. 64 KiB of pings, each answered
    # at once, made one step of 8,192 answers, and every other connection
    # of the server waited for it (an adversarial run: another client's
    # round trip went from 4 ms to 1.3 s). After a read of many small
    # messages the reader asks for about EVENTS_PER_READ of them, and once
    # messages are large again it asks for whole reads again.
    ours, peer = raw_pair()
    recording = _RecordingStream(ours)
    config = EmpConfig(keepalive_interval=None, receive_size=64 * KiB)
    ping = encode(Ping())
    with trio.fail_after(30):
        await peer.send(Hello())
        async with open_emp_stream(recording, config=config) as emp, trio.open_nursery() as nursery:
            bodies, received = trio.open_memory_channel[bytes](8)

            async def read_data() -> None:
                # Someone waits for data: the reader reads (and answers pings).
                async for body in emp:
                    await bodies.send(body)

            nursery.start_soon(read_data)
            assert await peer.receive() == Hello()
            pings = 4 * 8192  # four whole reads' worth
            await peer.stream.send_all(ping * pings)
            for _ in range(pings):
                assert await peer.receive() == Pong()
            # Whole reads until one brought many pings (the hello's, and the
            # first of the flood), then a few hundred pings' worth each.
            asked = recording.asked
            whole = [size for size in asked if size == 64 * KiB]
            assert len(whole) <= 2, asked
            assert all(size <= EVENTS_PER_READ * len(ping) for size in asked if size != 64 * KiB), asked
            assert len(asked) >= 2 + (pings - 8192) // EVENTS_PER_READ, len(asked)
            # Large messages again: whole reads again.
            await peer.send(*(Data(body=bytes(32 * KiB)) for _ in range(8)))
            for _ in range(8):
                assert await received.receive() == bytes(32 * KiB)
            assert recording.asked[-1] == 64 * KiB, recording.asked[-5:]
            nursery.cancel_scope.cancel()
