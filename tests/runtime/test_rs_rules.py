"""Reactive Streams rules, in-process (memory streams) and over TCP.

Rule numbers are those of the Reactive Streams specification for the JVM,
which the reactive-streams-io draft carries over to the network:

* 1.1  a publisher signals no more onNext than requested;
* 1.7  nothing follows a terminal signal;
* 2.8  a subscriber copes with onNext after it cancelled;
* 3.3  request may be called from inside delivery, with bounded recursion;
* 3.6  request after the end is a no-op;
* 3.9  request(n <= 0) is an error of that stream;
* 3.12 / 3.13  cancel stops the publisher and releases it;
* 3.17 demand adds up to 2**63 - 1, which is unbounded.

Wire-level checks use a raw peer (``harness`` / ``raw_publisher_peer``) so the
rules are checked on what really crosses the connection.
"""

from __future__ import annotations

import functools
import gc
import weakref

import pytest
import trio
import trio.testing

import rstreams
from rstreams.protocol import (
    Cancel,
    Goodbye,
    Hello,
    OnComplete,
    OnError,
    OnNext,
    Request,
    Subscribe,
    Subscribed,
)

from ._support import (
    SESSION_HELLO,
    UNBOUNDED,
    Probe,
    collect,
    fetch_range,
    from_u32,
    session_task_names,
    stack_depth,
    standard_app,
    tapped_pair,
    u32,
)

memory_and_tcp = pytest.mark.parametrize("transport", ["memory", "tcp"])


class Marker:
    """An object only a publisher holds, to see when it is released."""


async def barrier(peer, subscriber: int) -> list[object]:  # type: ignore[no-untyped-def]
    """Subscribe to ``range?count=1`` as ``subscriber`` and read up to its onComplete.

    Returns every message received meanwhile (for other streams too).
    """
    await peer.send(Subscribe(publisher="range?count=1", subscriber=subscriber, initial_demand=1))
    seen = []
    while True:
        message = await peer.receive()
        seen.append(message)
        if isinstance(message, OnComplete) and message.subscriber == subscriber:
            return seen


# ---- 1.1 -------------------------------------------------------------------


@memory_and_tcp
async def test_1_1_never_more_elements_than_requested(connect) -> None:
    probe = Probe()
    with trio.fail_after(10):
        async with connect(standard_app(probe=probe.publisher)) as (client, server):
            async with client.subscribe("probe", prefetch=0) as stream:
                for step in (5, 1, 17):
                    stream.request(step)
                    before = stream.statistics().received
                    values = [from_u32(await stream.__anext__()) for _ in range(step)]
                    assert values == list(range(before, before + step))
                    await fetch_range(client, 3)  # a round trip: anything extra would be here by now
                    await trio.testing.wait_all_tasks_blocked()
                    assert probe.sent == stream.statistics().received == before + step
                    assert stream.statistics().buffered == 0
                    assert probe.sink is not None and probe.sink.demand == 0


async def test_1_1_on_the_wire(harness) -> None:
    harness.server.app.add("probe", Probe().publisher)
    with trio.fail_after(10):
        peer, session = await harness.open_raw()
        await peer.handshake()
        await peer.send(Subscribe(publisher="probe", subscriber=1, initial_demand=3))
        assert await peer.receive() == Subscribed(subscriber=1, element_size=0)
        elements = [await peer.expect(OnNext) for _ in range(3)]
        assert [from_u32(m.element) for m in elements] == [0, 1, 2]
        # Nothing more for stream 1 while the barrier stream goes and completes.
        assert all(getattr(m, "subscriber", None) != 1 for m in await barrier(peer, 2))
        await peer.send(Request(subscriber=1, demand=2))
        assert [from_u32((await peer.expect(OnNext)).element) for _ in range(2)] == [3, 4]
        assert all(getattr(m, "subscriber", None) != 1 for m in await barrier(peer, 3))
        await peer.send(Goodbye(reason="done"))
        assert await peer.expect_goodbye_and_close() == "goodbye"
        await session.wait_closed()


# ---- 1.7 -------------------------------------------------------------------


async def test_1_7_nothing_after_on_complete_or_on_error(harness) -> None:
    async def failing(sink: rstreams.Sink) -> None:
        await sink.send(b"x")
        raise RuntimeError("failed")

    harness.server.app.add("failing", failing)
    with trio.fail_after(10):
        peer, session = await harness.open_raw()
        await peer.handshake()
        await peer.send(
            Subscribe(publisher="range?count=5", subscriber=1, initial_demand=100),
            Subscribe(publisher="failing", subscriber=2, initial_demand=100),
        )
        received = []
        for subscriber in (1, 2, 3, 4):
            if subscriber > 2:
                received += await barrier(peer, subscriber)  # round trips: late messages show up
            else:
                while not any(isinstance(m, (OnComplete, OnError)) and m.subscriber == subscriber for m in received):
                    received.append(await peer.receive())
        first = [m for m in received if getattr(m, "subscriber", None) == 1]
        second = [m for m in received if getattr(m, "subscriber", None) == 2]
        assert first == [Subscribed(subscriber=1)] + [OnNext(subscriber=1, element=u32(i)) for i in range(5)] + [
            OnComplete(subscriber=1)
        ]
        assert second == [Subscribed(subscriber=2), OnNext(subscriber=2, element=b"x"), OnError(subscriber=2, error="failed")]
        # A request or cancel crossing the terminal signal is harmless.
        await peer.send(Request(subscriber=1, demand=5), Cancel(subscriber=2))
        assert all(getattr(m, "subscriber", None) not in (1, 2) for m in await barrier(peer, 5))
        await peer.send(Goodbye(reason="done"))
        await peer.expect_goodbye_and_close()


@memory_and_tcp
async def test_1_7_terminal_signals_are_final_for_the_iterator(connect) -> None:
    async def failing(sink: rstreams.Sink) -> None:
        raise RuntimeError("broken")

    with trio.fail_after(10):
        async with connect(standard_app(failing=failing)) as (client, _):
            async with client.subscribe("range?count=2") as stream:
                assert len(await collect(stream)) == 2
                for _ in range(3):
                    with pytest.raises(StopAsyncIteration):
                        await stream.__anext__()
            async with client.subscribe("failing") as stream:
                for _ in range(3):
                    with pytest.raises(rstreams.PublisherError, match="broken"):
                        await stream.__anext__()


# ---- 2.8 -------------------------------------------------------------------


async def test_2_8_elements_after_cancel_are_dropped(raw_publisher_peer) -> None:
    ids: list[int] = []

    async def answer(peer, *elements: bytes, complete: bool = False) -> None:  # type: ignore[no-untyped-def]
        subscribe = await peer.expect(Subscribe)
        ids.append(subscribe.subscriber)
        messages = [Subscribed(subscriber=subscribe.subscriber)]
        messages += [OnNext(subscriber=subscribe.subscriber, element=e) for e in elements]
        if complete:
            messages.append(OnComplete(subscriber=subscribe.subscriber))
        await peer.send(*messages)

    with trio.fail_after(10):
        async with raw_publisher_peer() as (client, peer):
            await peer.handshake()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(answer, peer, b"0")
                async with client.subscribe("feed", prefetch=4) as stream:
                    assert await stream.__anext__() == b"0"
            [subscriber] = ids
            assert await peer.receive() == Cancel(subscriber=subscriber)
            # Still within the demand granted before the cancel: legal, and dropped.
            await peer.send(
                OnNext(subscriber=subscriber, element=b"1"),
                OnNext(subscriber=subscriber, element=b"2"),
                OnComplete(subscriber=subscriber),
            )
            # The session is fine: a new stream works.
            async with trio.open_nursery() as nursery:
                nursery.start_soon(functools.partial(answer, peer, b"fresh", complete=True))
                async with client.subscribe("again", prefetch=1) as again:
                    assert await collect(again) == [b"fresh"]
            assert ids[1] > subscriber  # a cancelled Id is not reused
            assert not client.closed
            assert stream.statistics().received == 1


# ---- 3.3 -------------------------------------------------------------------


@memory_and_tcp
async def test_3_3_request_from_inside_delivery_has_bounded_depth(connect, transport: str) -> None:
    # Far more elements than the recursion limit, each requested from the
    # loop body that received the previous one: the stack must not grow.
    count = 1500 if transport == "memory" else 400
    publisher_depths: list[int] = []

    async def one_by_one(sink: rstreams.Sink) -> None:
        for value in range(count):
            await sink.send(u32(value))
            publisher_depths.append(stack_depth())

    with trio.fail_after(20):
        async with connect(rstreams.Router({"numbers": one_by_one})) as (client, _):
            async with client.subscribe("numbers", prefetch=0) as stream:
                depths = []
                stream.request(1)
                async for raw in stream:
                    depths.append(stack_depth())
                    if from_u32(raw) + 1 < count:
                        stream.request(1)
    assert len(depths) == count
    assert max(depths) == min(depths)
    assert max(publisher_depths) == min(publisher_depths)


# ---- 3.6 -------------------------------------------------------------------


async def test_3_6_request_after_the_end_is_a_no_op() -> None:
    probe = Probe()
    with trio.fail_after(10):
        async with tapped_pair(server_app=standard_app(probe=probe.publisher)) as (client, server, tap):
            async with client.subscribe("range?count=2", prefetch=0) as completed:
                completed.request(5)
                assert len(await collect(completed)) == 2
                completed.request(5)
            completed.request(1)
            async with client.subscribe("probe", prefetch=0) as cancelled:
                cancelled.request(1)
                await cancelled.__anext__()
            cancelled.request(7)
            await fetch_range(client, 1)  # a round trip: anything sent would have arrived
    ended = (completed.subscriber, cancelled.subscriber)
    requests = [(m.subscriber, m.demand) for m in tap.sent if isinstance(m, Request) and m.subscriber in ended]
    assert requests == [(completed.subscriber, 5), (cancelled.subscriber, 1)]
    assert probe.sent == 1


@memory_and_tcp
async def test_3_6_request_after_the_session_closed_is_a_no_op(connect) -> None:
    with trio.fail_after(10):
        async with connect(standard_app()) as (client, server):
            async with client.subscribe("range?count=5", prefetch=0) as stream:
                await server.aclose()
                with pytest.raises(rstreams.SessionClosed):
                    await stream.__anext__()
                stream.request(3)


# ---- 3.9 -------------------------------------------------------------------


def test_3_9_local_request_must_be_positive() -> None:
    # Checked before anything reaches the session (see test_subscribe for more).
    stream = rstreams.Subscription(object(), "x", prefetch=0, codec=None)  # type: ignore[arg-type]
    for bad in (0, -1):
        with pytest.raises(ValueError, match="3.9"):
            stream.request(bad)


@pytest.mark.parametrize("demand", [0, -1, -(2**63)])
async def test_3_9_non_positive_request_fails_only_that_stream(harness, demand: int) -> None:
    probe = Probe()
    harness.server.app.add("probe", probe.publisher)
    with trio.fail_after(10):
        peer, session = await harness.open_raw()
        await peer.handshake()
        await peer.send(Subscribe(publisher="probe", subscriber=1, initial_demand=0))
        assert await peer.receive() == Subscribed(subscriber=1)
        await probe.started.wait()
        await peer.send(Request(subscriber=1, demand=demand))
        error = await peer.expect(OnError)
        assert error.subscriber == 1
        assert "3.9" in error.error and f"request({demand})" in error.error
        await probe.cancelled.wait()  # the publisher was stopped
        # The connection is still up.
        messages = await barrier(peer, 2)
        assert [m for m in messages if isinstance(m, OnNext)] == [OnNext(subscriber=2, element=u32(0))]
        assert not session.closed
        assert session.statistics().publications == 0
        await peer.send(Goodbye(reason="done"))
        await peer.expect_goodbye_and_close()


async def test_3_9_negative_initial_demand_fails_only_that_stream(harness) -> None:
    with trio.fail_after(10):
        peer, session = await harness.open_raw()
        await peer.handshake()
        await peer.send(Subscribe(publisher="range", subscriber=1, initial_demand=-3))
        error = await peer.expect(OnError)
        assert error.subscriber == 1 and "3.9" in error.error
        await barrier(peer, 2)
        assert not session.closed
        await peer.send(Goodbye(reason="done"))
        await peer.expect_goodbye_and_close()


# ---- 3.12 / 3.13 -------------------------------------------------------------


@memory_and_tcp
async def test_3_12_3_13_cancel_stops_the_publisher_and_releases_it(connect) -> None:
    refs: list[weakref.ref[Marker]] = []
    cancelled = trio.Event()

    async def holder(sink: rstreams.Sink) -> None:
        marker = Marker()  # referenced from this frame only
        refs.append(weakref.ref(marker))
        try:
            while True:
                await sink.send(b"x")
        except trio.Cancelled:
            cancelled.set()
            raise

    with trio.fail_after(10):
        async with connect(standard_app(holder=holder)) as (client, server):
            async with client.subscribe("holder", prefetch=4) as stream:
                await stream.__anext__()
                assert server.statistics().publications == 1
                assert any(name.startswith("publisher holder") for name in session_task_names())
            await cancelled.wait()
            await trio.testing.wait_all_tasks_blocked()
            # Stopped: its task is gone and the session forgot it.
            assert not any(name.startswith("publisher holder") for name in session_task_names())
            assert server.statistics().publications == 0
            gc.collect()
            assert refs[0]() is None
            await fetch_range(client)


# ---- 3.17 --------------------------------------------------------------------


@memory_and_tcp
async def test_3_17_demand_saturates_at_unbounded(connect) -> None:
    demands: list[int] = []

    async def watcher(sink: rstreams.Sink) -> None:
        await sink.wait_demand()
        demands.append(sink.demand)
        for value in range(1000):
            await sink.send(u32(value))
        demands.append(sink.demand)

    with trio.fail_after(10):
        async with connect(standard_app(watcher=watcher)) as (client, _):
            async with client.subscribe("watcher", prefetch=0) as stream:
                stream.request(UNBOUNDED)
                stream.request(UNBOUNDED)  # the total overflows: still fine
                stream.request(10**30)
                assert [from_u32(raw) async for raw in stream] == list(range(1000))
            async with client.subscribe("watcher", prefetch=0) as stream:
                stream.request(2**62)
                stream.request(2**62)  # adds up to exactly 2**63 - 1 + 1: unbounded
                assert len(await collect(stream)) == 1000
    # Unbounded demand is not counted down.
    assert demands == [UNBOUNDED, UNBOUNDED, UNBOUNDED, UNBOUNDED]


async def test_3_17_unbounded_demand_on_the_wire(harness) -> None:
    with trio.fail_after(10):
        peer, session = await harness.open_raw()
        await peer.handshake()
        await peer.send(
            Subscribe(publisher="range?count=300", subscriber=1, initial_demand=UNBOUNDED),
            Request(subscriber=1, demand=UNBOUNDED),
            Request(subscriber=1, demand=2**64 - 1),  # the largest msgpack int
        )
        messages = await peer.receive_until(OnComplete)
        assert [from_u32(m.element) for m in messages if isinstance(m, OnNext)] == list(range(300))
        assert not session.closed
        await peer.send(Goodbye(reason="done"))
        await peer.expect_goodbye_and_close()


async def test_hello_is_sent_without_waiting_and_optimistic_sends_are_served(harness) -> None:
    # Loose handshake: our hello and a subscribe in one write, before reading.
    with trio.fail_after(10):
        peer, session = await harness.open_raw()
        await peer.send(Hello(), Subscribe(publisher="range?count=2", subscriber=7, initial_demand=2))
        messages = await peer.receive_until(OnComplete)
        assert messages == [
            SESSION_HELLO,
            Subscribed(subscriber=7),
            OnNext(subscriber=7, element=u32(0)),
            OnNext(subscriber=7, element=u32(1)),
            OnComplete(subscriber=7),
        ]
        await peer.send(Goodbye(reason="done"))
        assert await peer.expect_goodbye_and_close() == "goodbye"
