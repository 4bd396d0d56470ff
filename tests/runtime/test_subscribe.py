"""The subscribing side: automatic and manual demand, batches, cancel, statistics."""

from __future__ import annotations

import gc
import weakref

import pytest
import trio
import trio.testing

import rstreams
import rstreams.testing
from rstreams.protocol import Cancel, Goodbye, Request, Subscribe

from ._support import Probe, RawPeer, collect, fetch_range, from_u32, standard_app, tapped_pair, u32


async def test_automatic_demand_stays_within_the_window() -> None:
    probe = Probe()
    with trio.fail_after(10):
        async with tapped_pair(server_app=rstreams.Router({"probe": probe.publisher})) as (client, server, tap):
            async with client.subscribe("probe", prefetch=32) as stream:
                consumed = 0
                async for raw in stream:
                    assert from_u32(raw) == consumed
                    consumed += 1
                    stats = stream.statistics()
                    # Requested and not yet consumed: never more than the
                    # window, never less than half of it.
                    assert 16 < stats.outstanding_demand + stats.buffered <= 32, (consumed, stats)
                    if consumed == 200:
                        break
                subscriber = stream.subscriber
            await probe.cancelled.wait()
    assert probe.max_demand <= 32
    sent = [m for m in tap.sent if getattr(m, "subscriber", None) == subscriber]
    assert isinstance(sent[0], Subscribe) and sent[0].initial_demand == 32
    requests = [m for m in sent if isinstance(m, Request)]
    # One request per half window consumed (h2's rule), not one per element.
    assert [r.demand for r in requests] == [16] * (200 // 16)
    assert isinstance(sent[-1], Cancel)


@pytest.mark.parametrize("prefetch", [1, 2, 5])
async def test_small_windows(connect, prefetch: int) -> None:
    with trio.fail_after(10):
        async with connect(standard_app()) as (client, _):
            async with client.subscribe("range?count=40", prefetch=prefetch) as stream:
                values = []
                async for raw in stream:
                    values.append(from_u32(raw))
                    stats = stream.statistics()
                    assert stats.outstanding_demand + stats.buffered <= prefetch
    assert values == list(range(40))


async def test_manual_demand_with_prefetch_zero() -> None:
    probe = Probe()
    with trio.fail_after(10):
        async with tapped_pair(server_app=rstreams.Router({"probe": probe.publisher})) as (client, _, tap):
            async with client.subscribe("probe", prefetch=0) as stream:
                await trio.testing.wait_all_tasks_blocked()
                assert stream.statistics().received == 0
                assert probe.sent == 0
                stream.request(3)
                stream.request(2)  # demand adds up
                await trio.testing.wait_all_tasks_blocked()
                stats = stream.statistics()
                assert (stats.buffered, stats.received, stats.outstanding_demand) == (5, 5, 0)
                assert [from_u32(await stream.__anext__()) for _ in range(5)] == [0, 1, 2, 3, 4]
                await trio.testing.wait_all_tasks_blocked()
                # Consuming requests nothing by itself in manual mode.
                assert probe.sent == 5
                assert stream.statistics().buffered == 0
                subscriber = stream.subscriber
    sent = [m for m in tap.sent if getattr(m, "subscriber", None) == subscriber]
    assert sent[0] == Subscribe(publisher="probe", subscriber=subscriber, initial_demand=0)
    assert [m.demand for m in sent if isinstance(m, Request)] == [3, 2]


async def test_manual_demand_over_the_network(connect) -> None:
    with trio.fail_after(10):
        async with connect(standard_app()) as (client, _):
            async with client.subscribe("range?count=10", prefetch=0) as stream:
                stream.request(4)
                assert [from_u32(await stream.__anext__()) for _ in range(4)] == [0, 1, 2, 3]
                assert stream.statistics().outstanding_demand == 0
                stream.request(100)
                assert [from_u32(raw) async for raw in stream] == list(range(4, 10))


@pytest.mark.parametrize("bad", [0, -1, 1.5, "3", None, True])
async def test_request_needs_a_positive_int(bad: object) -> None:
    with trio.fail_after(10):
        async with rstreams.testing.session_pair(server_app=standard_app()) as (client, _):
            async with client.subscribe("range", prefetch=0) as stream:
                with pytest.raises(ValueError):
                    stream.request(bad)  # type: ignore[arg-type]
                stream.request(10)
                assert len(await collect(stream)) == 10


async def test_no_prefetch_means_an_adaptive_window_that_grows_for_a_fast_consumer(connect) -> None:
    with trio.fail_after(20):
        async with connect(standard_app()) as (client, _):
            async with client.subscribe("range?count=3000") as stream:
                assert stream.window == rstreams.ADAPTIVE_INITIAL
                values = []
                largest = stream.window
                async for raw in stream:
                    values.append(from_u32(raw))
                    largest = max(largest, stream.window)
                    stats = stream.statistics()
                    # What was requested and not consumed stays within the window.
                    assert stats.outstanding_demand + stats.buffered <= largest, (len(values), stats)
    assert values == list(range(3000))
    # This consumer empties its buffer and waits, so the window grew.
    assert largest > rstreams.ADAPTIVE_INITIAL


async def test_an_adaptive_window_shrinks_for_a_consumer_that_lags(connect) -> None:
    with trio.fail_after(20):
        async with connect(standard_app()) as (client, _):
            async with client.subscribe("range?count=400") as stream:
                values = []
                while True:
                    # Lag: take an element only once everything requested has
                    # arrived, so the producer is always ahead.
                    while stream.statistics().outstanding_demand and stream.statistics().state == "open":
                        await trio.sleep(0)
                    try:
                        raw = await stream.__anext__()
                    except StopAsyncIteration:
                        break
                    values.append(from_u32(raw))
                    stats = stream.statistics()
                    assert stats.outstanding_demand + stats.buffered <= rstreams.ADAPTIVE_INITIAL
                window = stream.window
    assert values == list(range(400))
    assert window < rstreams.ADAPTIVE_INITIAL


def test_prefetch_must_be_a_non_negative_int_or_none() -> None:
    session = object()
    for bad in (-1, 1.5, "8", True):
        with pytest.raises(ValueError):
            rstreams.Subscription(session, "x", prefetch=bad, codec=None)  # type: ignore[arg-type]


async def test_request_before_entering_is_an_error() -> None:
    with trio.fail_after(10):
        async with rstreams.testing.session_pair(server_app=standard_app()) as (client, _):
            stream = client.subscribe("range", prefetch=0)
            with pytest.raises(RuntimeError):
                stream.request(1)


async def test_a_subscription_is_entered_once() -> None:
    with trio.fail_after(10):
        async with rstreams.testing.session_pair(server_app=standard_app()) as (client, _):
            stream = client.subscribe("range?count=2")
            async with stream:
                assert len(await collect(stream)) == 2
            with pytest.raises(RuntimeError):
                async with stream:
                    pass  # pragma: no cover


async def test_batches(connect) -> None:
    with trio.fail_after(10):
        async with connect(standard_app()) as (client, _):
            async with client.subscribe("range?count=1000", prefetch=64) as stream:
                batches = [list(batch) async for batch in stream.batches()]
            async with client.subscribe("range?count=100", prefetch=64) as stream:
                small = [list(batch) async for batch in stream.batches(max_elements=7)]
    assert [from_u32(raw) for batch in batches for raw in batch] == list(range(1000))
    assert all(batches)
    assert len(batches) < 1000  # many elements per batch
    assert [from_u32(raw) for batch in small for raw in batch] == list(range(100))
    assert all(1 <= len(batch) <= 7 for batch in small)


async def test_batches_top_up_demand_and_hand_over_everything_buffered() -> None:
    with trio.fail_after(10):
        async with rstreams.testing.session_pair(server_app=standard_app()) as (client, _):
            async with client.subscribe("range?count=50", prefetch=0) as stream:
                stream.request(20)
                await trio.testing.wait_all_tasks_blocked()
                batches = stream.batches()
                first = await batches.__anext__()
                assert [from_u32(raw) for raw in first] == list(range(20))
                assert stream.statistics().buffered == 0
                stream.request(30)
                rest = [from_u32(raw) async for batch in batches for raw in batch]
                assert rest == list(range(20, 50))
            with pytest.raises(ValueError):
                stream.batches(0)


async def test_batches_with_a_packed_stream() -> None:
    async def packed(sink: rstreams.Sink) -> None:
        await sink.send_packed(b"".join(u32(i) for i in range(300)))

    app = rstreams.Router()
    app.add("packed", packed, element_size=4)
    with trio.fail_after(10):
        async with rstreams.testing.session_pair(server_app=app) as (client, _):
            async with client.subscribe("packed", prefetch=128) as stream:
                values = [from_u32(bytes(raw)) async for batch in stream.batches() for raw in batch]
    assert values == list(range(300))


async def test_batches_raise_the_publisher_error_after_the_elements() -> None:
    async def failing(sink: rstreams.Sink) -> None:
        await sink.send_many([b"a", b"b"])
        raise RuntimeError("batch failure")

    with trio.fail_after(10):
        async with rstreams.testing.session_pair(server_app=rstreams.Router({"failing": failing})) as (client, _):
            async with client.subscribe("failing") as stream:
                received = []
                with pytest.raises(rstreams.PublisherError, match="batch failure"):
                    async for batch in stream.batches():
                        received.extend(batch)
                assert received == [b"a", b"b"]


async def test_wait_buffered_says_what_the_next_batch_takes_and_takes_nothing() -> None:
    async def sized(sink: rstreams.Sink) -> None:
        await sink.send_many([b"a" * 10, b"b" * 20, b"c" * 30, b"d" * 40])

    with trio.fail_after(10):
        async with rstreams.testing.session_pair(server_app=rstreams.Router({"sized": sized})) as (client, _):
            async with client.subscribe("sized", prefetch=0) as stream:
                stream.request(4)
                assert await stream.wait_buffered() == (4, 100)
                assert stream.statistics().buffered == 4  # nothing was taken
                # Beyond the first element, at most max_bytes; the first always.
                assert await stream.wait_buffered(max_bytes=35) == (2, 30)
                assert await stream.wait_buffered(max_bytes=5) == (1, 10)
                assert await stream.wait_buffered(max_elements=3) == (3, 60)
                # batches(count) takes exactly the elements counted.
                assert list(await stream.batches(2).__anext__()) == [b"a" * 10, b"b" * 20]
                assert await stream.wait_buffered() == (2, 70)
                assert list(await stream.batches(2).__anext__()) == [b"c" * 30, b"d" * 40]
                assert await stream.wait_buffered() == (0, 0)  # completed, nothing left
            with pytest.raises(ValueError):
                await stream.wait_buffered(0)


async def test_wait_buffered_counts_packed_elements_and_raises_the_publisher_error() -> None:
    async def packed(sink: rstreams.Sink) -> None:
        await sink.send_packed(b"".join(u32(i) for i in range(10)))
        raise RuntimeError("packed failure")

    app = rstreams.Router()
    app.add("packed", packed, element_size=4)
    with trio.fail_after(10):
        async with rstreams.testing.session_pair(server_app=app) as (client, _):
            async with client.subscribe("packed", prefetch=0) as stream:
                stream.request(10)
                assert await stream.wait_buffered(max_bytes=10) == (2, 8)
                assert await stream.wait_buffered(max_elements=3) == (3, 12)
                assert await stream.wait_buffered() == (10, 40)
                values = [from_u32(bytes(raw)) for raw in await stream.batches(10).__anext__()]
                assert values == list(range(10))
                with pytest.raises(rstreams.PublisherError, match="packed failure"):
                    await stream.wait_buffered()


async def test_wait_buffered_waits_for_an_element() -> None:
    async def later(sink: rstreams.Sink) -> None:
        await sink.wait_demand()
        await gate.wait()
        await sink.send(b"late")

    gate = trio.Event()
    with trio.fail_after(10):
        async with rstreams.testing.session_pair(server_app=rstreams.Router({"later": later})) as (client, _):
            async with client.subscribe("later", prefetch=0) as stream:
                stream.request(1)
                async with trio.open_nursery() as nursery:
                    seen: list[tuple[int, int]] = []

                    async def wait() -> None:
                        seen.append(await stream.wait_buffered())

                    nursery.start_soon(wait)
                    await trio.testing.wait_all_tasks_blocked()
                    assert seen == []
                    gate.set()
                assert seen == [(1, 4)]


async def test_leaving_the_block_sends_cancel(connect) -> None:
    probe = Probe()
    with trio.fail_after(10):
        async with connect(standard_app(probe=probe.publisher)) as (client, server):
            async with client.subscribe("probe", prefetch=8) as stream:
                await stream.__anext__()
                assert stream.statistics().state == "open"
            assert stream.statistics().state == "cancelled"
            assert client.statistics().subscriptions == 0
            await probe.cancelled.wait()
            # The cancelled stream is over for the iterator too: what was
            # already buffered can still be read, then the iteration ends.
            leftover = [from_u32(raw) for raw in await collect(stream)]
            assert leftover == list(range(1, 1 + len(leftover)))
            assert len(leftover) <= 7
            with pytest.raises(StopAsyncIteration):
                await stream.__anext__()
            # Requests after the end are no-ops (RS 3.6).
            stream.request(5)
            await fetch_range(client)


async def test_an_exception_in_the_block_cancels_and_propagates() -> None:
    probe = Probe()
    with trio.fail_after(10):
        async with rstreams.testing.session_pair(server_app=rstreams.Router({"probe": probe.publisher})) as (client, _):
            with pytest.raises(KeyError):
                async with client.subscribe("probe") as stream:
                    await stream.__anext__()
                    raise KeyError("in the block")
            await probe.cancelled.wait()
            assert stream.statistics().state == "cancelled"


async def test_break_then_leave_sends_cancel_once() -> None:
    probe = Probe()
    with trio.fail_after(10):
        async with tapped_pair(server_app=standard_app(probe=probe.publisher)) as (client, _, tap):
            async with client.subscribe("probe") as stream:
                async for _ in stream:
                    break
                stream.cancel()  # explicit cancel, then leaving the block: still one cancel
            await probe.cancelled.wait()
            await fetch_range(client)
            cancels = [m for m in tap.sent if isinstance(m, Cancel)]
    assert cancels == [Cancel(subscriber=stream.subscriber)]


async def test_cancelling_a_waiting_iteration_loses_no_element() -> None:
    # __anext__ is atomic under cancellation: an element that arrives after
    # the wait was cancelled stays for the next call.
    with trio.fail_after(10):
        async with rstreams.testing.session_pair(server_app=standard_app()) as (client, _):
            async with client.subscribe("range?count=3", prefetch=0) as stream:
                with trio.move_on_after(0.01) as scope:
                    await stream.__anext__()
                assert scope.cancelled_caught
                stream.request(3)
                assert [from_u32(raw) async for raw in stream] == [0, 1, 2]


async def test_cancelling_the_subscribe_wait_cancels_the_stream(autojump_clock) -> None:
    # A peer that never answers the subscribe: cancelling the wait sends cancel.
    client_stream, peer_stream = trio.testing.memory_stream_pair()
    peer = RawPeer(peer_stream)
    with trio.fail_after(30):
        async with rstreams.open_stream_session(client_stream) as client:
            await peer.handshake()
            with trio.move_on_after(1):
                async with client.subscribe("slow"):
                    pass  # pragma: no cover
            subscribe = await peer.receive()
            assert isinstance(subscribe, Subscribe) and subscribe.publisher == "slow"
            assert await peer.receive() == Cancel(subscriber=subscribe.subscriber)
            assert client.statistics().subscriptions == 0
            # Answer the goodbye so the close is quick.
            async with trio.open_nursery() as nursery:
                nursery.start_soon(client.aclose)
                await peer.receive_until(Goodbye)
                await peer.send(Goodbye(reason="bye"))


async def test_two_tasks_cannot_iterate_one_subscription() -> None:
    with trio.fail_after(10):
        async with rstreams.testing.session_pair(server_app=standard_app()) as (client, _):
            async with client.subscribe("range?count=1", prefetch=0) as stream:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(stream.__anext__)
                    await trio.testing.wait_all_tasks_blocked()
                    with pytest.raises(trio.BusyResourceError):
                        await stream.__anext__()
                    with pytest.raises(trio.BusyResourceError):
                        await stream.batches().__anext__()
                    stream.request(1)


async def test_statistics_through_a_stream_life() -> None:
    with trio.fail_after(10):
        async with rstreams.testing.session_pair(server_app=standard_app()) as (client, _):
            stream = client.subscribe("range?count=5", prefetch=0)
            stats = stream.statistics()
            assert (stats.subscriber, stats.state, stats.received) == (None, "opening", 0)
            async with stream:
                stats = stream.statistics()
                assert stats.state == "open"
                assert stats.subscriber == stream.subscriber is not None
                stream.request(3)
                assert stream.statistics().outstanding_demand == 3
                await trio.testing.wait_all_tasks_blocked()
                stats = stream.statistics()
                assert (stats.buffered, stats.received, stats.outstanding_demand) == (3, 3, 0)
                await stream.__anext__()
                assert stream.statistics().buffered == 2
                stream.request(2)
                assert len(await collect(stream)) == 4
                stats = stream.statistics()
                assert (stats.state, stats.received, stats.buffered, stats.element_size) == ("completed", 5, 0, 0)
            assert stream.statistics().state == "completed"  # not "cancelled": it had ended
            assert isinstance(stats, rstreams.SubscriptionStatistics)
            assert "range?count=5" in repr(stream)


async def test_subscriber_ids_are_never_reused() -> None:
    with trio.fail_after(10):
        async with rstreams.testing.session_pair(server_app=standard_app()) as (client, _):
            ids = []
            for _ in range(5):
                async with client.subscribe("range?count=1") as stream:
                    ids.append(stream.subscriber)
    assert ids == sorted(set(ids))
    assert len(ids) == 5


async def test_the_session_forgets_an_ended_subscription() -> None:
    # RS 3.13 on the subscribing side: no reference is kept after the end.
    probe = Probe()
    with trio.fail_after(10):
        async with rstreams.testing.session_pair(server_app=standard_app(probe=probe.publisher)) as (client, _):
            async with client.subscribe("probe") as stream:
                await stream.__anext__()
            ref = weakref.ref(stream)
            async with client.subscribe("range?count=3") as stream:
                assert len(await collect(stream)) == 3
            ref2 = weakref.ref(stream)
            del stream
            gc.collect()
            assert ref() is None
            assert ref2() is None


async def test_session_end_fails_open_subscriptions_after_their_elements() -> None:
    with trio.fail_after(10):
        async with rstreams.testing.session_pair(server_app=standard_app()) as (client, server):
            async with client.subscribe("range?count=1000000", prefetch=0) as stream:
                stream.request(3)
                await trio.testing.wait_all_tasks_blocked()
                await server.aclose("maintenance")
                # What arrived before the goodbye is still delivered.
                assert [from_u32(await stream.__anext__()) for _ in range(3)] == [0, 1, 2]
                with pytest.raises(rstreams.SessionClosed, match="maintenance"):
                    await stream.__anext__()
                assert stream.statistics().state == "failed"
