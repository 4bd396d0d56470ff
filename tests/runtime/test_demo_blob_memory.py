"""The demo's ``blob`` costs memory only for demand (issue 18, defect 6).

It used to build its pattern (``size`` bytes and more) per subscription as
soon as the subscribe arrived: 20 subscribes of 64 MiB elements, 624 bytes
on the wire in all, pinned 1.28 GiB without asking for a single element.
Now nothing is built before demand, and the streams that send share one
pattern. Measured with tracemalloc, counting only what ``rstreams/demo.py``
itself allocates (the test's own reader allocates the elements it receives).
"""

from __future__ import annotations

import tracemalloc
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager

import msgpack
import trio
import trio.testing

import rstreams.demo as demo
import rstreams
from rstreams.protocol import OnNextLastPart, Subscribed

from ._support import RawPeer, wait_for

_pack = msgpack.Packer(use_bin_type=True).pack
MiB = 1024 * 1024


@asynccontextmanager
async def demo_peer() -> AsyncIterator[RawPeer]:
    server = rstreams.Server(demo.app)
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(server.serve_tcp, "127.0.0.1", 0)
        peer = RawPeer(await trio.open_tcp_stream("127.0.0.1", rstreams.listener_port(listeners[0])))
        await peer.handshake()
        yield peer
        await peer.aclose()
        nursery.cancel_scope.cancel()


@contextmanager
def tracing() -> Iterator[None]:
    tracemalloc.start()
    try:
        yield
    finally:
        tracemalloc.stop()


def demo_bytes() -> int:
    """Bytes allocated by rstreams/demo.py and still alive."""
    snapshot = tracemalloc.take_snapshot().filter_traces([tracemalloc.Filter(True, demo.__file__)])
    return sum(stat.size for stat in snapshot.statistics("filename"))


async def subscribe_blobs(peer: RawPeer, n: int, size: int, demand: int) -> None:
    await peer.send_raw(b"".join(_pack([1, f"blob?count=2&size={size}", i, demand]) for i in range(1, n + 1)))
    answered = 0
    while answered < n:
        answered += type(await peer.receive()) is Subscribed
    await trio.testing.wait_all_tasks_blocked()


async def test_blob_subscribes_without_demand_build_nothing() -> None:
    with trio.fail_after(20), tracing():
        async with demo_peer() as peer:
            before = demo_bytes()
            await subscribe_blobs(peer, 20, 4 * MiB, demand=0)
            assert demo_bytes() - before < MiB  # was 20 patterns of 4 MiB
            assert demo._pattern.size == 0


async def test_blob_streams_that_send_share_one_pattern() -> None:
    with trio.fail_after(20), tracing():
        async with demo_peer() as peer:
            before = demo_bytes()
            # Ten streams of 2 MiB elements, one element asked of each: each
            # sends it and waits for more, holding the pattern.
            await subscribe_blobs(peer, 10, 2 * MiB, demand=1)
            received = 0
            while received < 10:
                received += type(await peer.receive()) is OnNextLastPart  # a 2 MiB element goes split
            await trio.testing.wait_all_tasks_blocked()
            assert demo._pattern.size == 2 * MiB + 256
            assert demo_bytes() - before < 2 * (2 * MiB + 256)  # one pattern, not ten
            # Cancel them all: the last one to end lets the pattern go.
            await peer.send_raw(b"".join(_pack([3, i]) for i in range(1, 11)))
            await wait_for(lambda: demo._pattern.size == 0)
