"""Publishers waiting for demand cost nothing until demand comes (issue 18, defect 2).

The writer used to wake every waiting publisher whose queue had room after
every write, those waiting for demand included: each woke, found no demand
and waited again. Opening n streams that wait for demand (their subscribed
answers go out in about n / 32 writes) then cost about n**2 / 32 wake-ups,
and every other client of the server waited behind them. Now only a
publisher whose queue is full waits for the writer; one waiting for demand
is woken by the request that brings it.

No clock here: the tests count the work (wake-ups of publishers, and looks
at a publication's queue) while n streams open and are served over a real
socket, and hold it to a bound linear in n. ``bench/many_waiting.py``
measures the time.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass

import msgpack
import pytest
import trio
import trio.testing

import rstreams
import rstreams.testing
from rstreams._publish import PublicationHandle
from rstreams.protocol import Connection, OnComplete, Subscribed

from ._support import RawPeer

_pack = msgpack.Packer(use_bin_type=True).pack


async def one_element(sink: rstreams.Sink) -> None:
    """Waits for demand, sends one element, completes."""
    await sink.send(b"x")


@dataclass
class Work:
    wake_ups: int = 0  # a waiting publisher woken
    queue_looks: int = 0  # Connection.queued_bytes calls


@contextmanager
def counting(monkeypatch: pytest.MonkeyPatch) -> Iterator[Work]:
    work = Work()
    wake, queued_bytes = PublicationHandle.wake, Connection.queued_bytes

    def counted_wake(self: PublicationHandle) -> None:
        if self._waiter is not None:
            work.wake_ups += 1
        wake(self)

    def counted_queued_bytes(self: Connection, subscriber: int) -> int:
        work.queue_looks += 1
        return queued_bytes(self, subscriber)

    monkeypatch.setattr(PublicationHandle, "wake", counted_wake)
    monkeypatch.setattr(Connection, "queued_bytes", counted_queued_bytes)
    yield work


@asynccontextmanager
async def server_over_tcp() -> AsyncIterator[int]:
    server = rstreams.Server(rstreams.Router({"one": one_element}))
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(server.serve_tcp, "127.0.0.1", 0)
        yield rstreams.listener_port(listeners[0])
        nursery.cancel_scope.cancel()


async def count_until(peer: RawPeer, message_type: type, n: int) -> None:
    seen = 0
    while seen < n:
        message = await peer.receive()
        seen += type(message) is message_type


async def open_then_serve(n: int, work: Work) -> tuple[Work, Work]:
    """Open n streams waiting for demand in one write, then ask one element
    of each in one write; the work counted after each step."""
    async with server_over_tcp() as port:
        peer = RawPeer(await trio.open_tcp_stream("127.0.0.1", port))
        await peer.send_raw(_pack([0, 0, []]) + b"".join(_pack([1, "one", i, 0]) for i in range(1, n + 1)))
        await count_until(peer, Subscribed, n)
        await trio.testing.wait_all_tasks_blocked()
        opened = Work(work.wake_ups, work.queue_looks)
        await peer.send_raw(b"".join(_pack([2, i, 1]) for i in range(1, n + 1)))
        await count_until(peer, OnComplete, n)
        await trio.testing.wait_all_tasks_blocked()
        served = Work(work.wake_ups - opened.wake_ups, work.queue_looks - opened.queue_looks)
        await peer.aclose()
    return opened, served


@pytest.mark.parametrize("n", [300, 1200])
async def test_opening_and_serving_waiting_streams_is_linear(monkeypatch: pytest.MonkeyPatch, n: int) -> None:
    with trio.fail_after(30), counting(monkeypatch) as work:
        opened, served = await open_then_serve(n, work)
    # Opening: nobody asked for anything, so nobody is woken, whatever n.
    assert opened.wake_ups == 0, opened
    assert opened.queue_looks <= 3 * n, opened  # (was 9 n at 300 streams, 32 n at 1,200)
    # Serving: each is woken once, by its request.
    assert served.wake_ups <= n, served
    assert served.queue_looks <= 6 * n, served


async def test_a_full_queue_still_waits_for_the_writer(monkeypatch: pytest.MonkeyPatch) -> None:
    # The other reason to wait is kept: a publisher whose queue holds
    # max_queued_bytes is woken as the writer takes its bytes, and every
    # element arrives.
    config = rstreams.SessionConfig(max_queued_bytes=4096)

    async def big(sink: rstreams.Sink) -> None:
        for index in range(64):
            await sink.send(bytes([index]) * 1024)

    app = rstreams.Router({"big": big})
    with trio.fail_after(10):
        async with rstreams.testing.session_pair(server_app=app, config=config) as (client, _):
            async with client.subscribe("big", prefetch=64) as subscription:
                received = [element async for element in subscription]
    assert [element[0] for element in received] == list(range(64))  # type: ignore[index]
