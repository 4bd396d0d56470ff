"""Large elements over every transport, with and without ``copy=False``.

Elements below, at and above the split size (64 KiB by default), odd sizes
and sizes that change from element to element (so that the buffer a
``copy=False`` stream guesses is too small, or too large), round-trip byte
for byte over memory streams, TCP (where the client receives straight into
each element's buffer and the server writes parts from the elements
themselves), TLS, WebSocket and secure WebSocket.
"""

from __future__ import annotations

import random

import pytest
import trio

import rstreams

SIZES = [1, 65_535, 65_536, 65_537, 3 * 65_536 + 7, 200_001, 1 << 20, (1 << 20) + 3, 65_536 * 4, 5]


def element(index: int, size: int) -> bytes:
    # Different bytes everywhere: a part written or received in the wrong
    # place cannot go unnoticed.
    return random.Random(index * 7919 + size).randbytes(size)


async def sized(sink: rstreams.Sink, request: rstreams.SubscribeRequest) -> None:
    """``sized?sizes=1,2,3``: one element of each size, in order."""
    sizes = [int(size) for size in request.params["sizes"].split(",")]
    for index, size in enumerate(sizes):
        await sink.send(element(index, size))


APP = rstreams.Router({"sized": sized})


async def read_all(
    session: rstreams.Session, sizes: list[int], *, copy: bool, prefetch: int = 4, held_at_end: list[int] | None = None
) -> list[object]:
    """Every element of ``sized``; ``held_at_end`` gets what the session
    still counted as held once the stream ended, before leaving the block
    (which releases whatever is left, a leak included)."""
    name = "sized?sizes=" + ",".join(map(str, sizes))
    received: list[object] = []
    with trio.fail_after(30):
        async with session.subscribe(name, prefetch=prefetch, copy=copy) as subscription:
            async for batch in subscription.batches():
                received.extend(batch)
            if held_at_end is not None:
                held_at_end.append(session.statistics().inbound_bytes)
    return received


@pytest.mark.parametrize("copy", [True, False])
async def test_large_elements_round_trip_byte_exact(connect, copy: bool) -> None:
    async with connect(server_app=APP) as (client, _server):
        held_at_end: list[int] = []
        received = await read_all(client, SIZES, copy=copy, held_at_end=held_at_end)
        assert held_at_end == [0]
        assert [bytes(item) for item in received] == [element(index, size) for index, size in enumerate(SIZES)]  # type: ignore[call-overload]
        for item, size in zip(received, SIZES):
            if copy or size <= 65_536:
                assert type(item) is bytes
            else:
                # The zero-copy opt-in: a read-only view of the buffer the
                # element was joined (on TCP: received) into.
                assert type(item) is memoryview and item.readonly and item.nbytes == size
        # Everything handed over: the connection holds nothing of it.
        assert client.statistics().inbound_bytes == 0


@pytest.mark.parametrize("transport", ["tcp"])
async def test_interleaved_copy_false_streams_over_tcp(connect) -> None:
    # Two streams of large elements at once: their parts interleave on the
    # wire, so the parts a read expects next are often the other stream's.
    first = [1 << 20, 300_001, 1 << 20, 65_537] * 2
    second = [200_000, (1 << 20) + 1, 70_000] * 2
    async with connect(server_app=APP) as (client, _server):
        results: dict[int, list[object]] = {}

        async def read(key: int, sizes: list[int]) -> None:
            results[key] = await read_all(client, sizes, copy=False, prefetch=2)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(read, 1, first)
            nursery.start_soon(read, 2, second)
        for key, sizes in ((1, first), (2, second)):
            assert [bytes(item) for item in results[key]] == [element(i, size) for i, size in enumerate(sizes)]  # type: ignore[call-overload]


@pytest.mark.parametrize("transport", ["tcp"])
async def test_copy_false_takes_no_codec(connect) -> None:
    async with connect(server_app=APP) as (client, _server):
        with pytest.raises(ValueError, match="copy=False"):
            client.subscribe("sized?sizes=1", copy=False, codec="json")
        # "raw" is no codec at all.
        async with client.subscribe("sized?sizes=1", copy=False, codec="raw") as subscription:
            assert [item async for item in subscription] == [element(0, 1)]


@pytest.mark.parametrize("transport", ["tcp"])
async def test_elements_the_application_holds_count_until_it_takes_them(connect) -> None:
    # Held (received, not yet taken) copy=False elements count against the
    # inbound half like bytes ones: the statistics say what is held.
    sizes = [1 << 20] * 3
    async with connect(server_app=APP) as (client, _server):
        name = "sized?sizes=" + ",".join(map(str, sizes))
        with trio.fail_after(30):
            async with client.subscribe(name, prefetch=3, copy=False) as subscription:
                while client.statistics().inbound_bytes < 3 << 20:
                    await trio.sleep(0.01)
                taken = [item async for item in subscription]
                assert client.statistics().inbound_bytes == 0  # (inside: leaving releases all)
        assert [bytes(item) for item in taken] == [element(i, size) for i, size in enumerate(sizes)]  # type: ignore[call-overload]
        assert client.statistics().inbound_bytes == 0


@pytest.mark.parametrize("transport", ["tcp"])
@pytest.mark.parametrize("copy", [True, False])
async def test_on_tcp_copy_false_receives_the_parts_into_the_elements_buffers(
    connect, monkeypatch: pytest.MonkeyPatch, copy: bool
) -> None:
    # The zero-copy half of copy=False: on plain TCP most of a large
    # element's bytes are read by readv straight into its buffer, never
    # into bytes first. With copy=True nothing is read that way.
    from rstreams._direct_socket import DirectSocket

    received_into = [0]
    original = DirectSocket.receive_into

    async def counting(self: DirectSocket, buffers: list[memoryview | bytearray]) -> int:
        count = await original(self, buffers)
        received_into[0] += count
        return count

    monkeypatch.setattr(DirectSocket, "receive_into", counting)
    sizes = [1 << 20] * 4
    async with connect(server_app=APP) as (client, _server):
        received = await read_all(client, sizes, copy=copy)
    assert [bytes(item) for item in received] == [element(i, size) for i, size in enumerate(sizes)]  # type: ignore[call-overload]
    if copy:
        assert received_into[0] == 0
    else:
        assert received_into[0] > sum(sizes) // 2
