"""``async for`` over a subscription: the run of elements handed out between
rule steps (see ``rstreams/_subscribe.py``) keeps every rule of the slow path.

A loop over an endless stream that never has to wait still checkpoints (other
tasks run, a cancel lands), top-ups come at the same elements as with one
count per element, the codec decodes each element, and the statistics count
what the run still holds as buffered. The peer is a ``FeedPeer`` that
delivers synchronously, as soon as demand allows, so nothing here depends on
timing: the consumer's buffer never runs dry unless a test wants it to.
"""

from __future__ import annotations

import json
import struct

import msgpack
import pytest
import trio
import trio.testing
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rstreams
import rstreams.testing
from rstreams._subscribe import CHECKPOINT_INTERVAL
from rstreams.demo import app as demo_app
from rstreams.protocol import DemandWindow
from rstreams.support import FeedPeer, StreamFeed


def u32(value: int) -> bytes:
    return struct.pack(">I", value)


def from_u32(raw: bytes) -> int:
    value: int = struct.unpack(">I", raw)[0]
    return value


class EndlessPeer(FeedPeer):
    """Delivers every element as soon as it is requested, numbered from 0,
    in batches of at most ``batch`` (encoded by ``encode``); records each
    request with how many elements the test had taken when it came."""

    def __init__(self, *, batch: int = 1000, encode=u32, limit: int | None = None) -> None:
        super().__init__()
        self.batch = batch
        self.encode = encode
        self.limit = limit
        self.sent = 0
        self.taken = 0  # kept up to date by the test
        self.requests: list[tuple[int, int]] = []
        self.feed: StreamFeed | None = None

    def open_stream(self, feed: StreamFeed) -> None:
        self.feed = feed
        feed.subscribed()
        self.feed_all()

    async def aclose(self) -> None:
        await trio.lowlevel.checkpoint()

    def stream_requested(self, feed: StreamFeed, n: int) -> None:
        self.requests.append((self.taken, n))
        self.feed_all()

    def feed_all(self) -> None:
        feed = self.feed
        assert feed is not None
        while feed.demand and not feed.ended:
            count = min(feed.demand, self.batch)
            if self.limit is not None:
                count = min(count, self.limit - self.sent)
            feed.deliver([self.encode(self.sent + i) for i in range(count)])
            self.sent += count
            if self.sent == self.limit:
                feed.complete()


async def _count_steps(counter: list[int]) -> None:
    while True:
        counter[0] += 1
        await trio.lowlevel.checkpoint()


@pytest.mark.parametrize("prefetch", [None, 32, 4096, 0])
async def test_a_loop_over_an_endless_stream_lets_other_tasks_run(prefetch: int | None) -> None:
    peer = EndlessPeer()
    steps = [0]
    total = 20 * CHECKPOINT_INTERVAL
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery, peer.subscribe("endless", prefetch=prefetch) as stream:
            if prefetch == 0:
                stream.request(total + 1)
            nursery.start_soon(_count_steps, steps)
            await trio.lowlevel.checkpoint()
            before = steps[0]
            async for raw in stream:
                assert from_u32(raw) == peer.taken
                peer.taken += 1
                assert stream.statistics().buffered > 0  # never had to wait
                if peer.taken == total:
                    break
            ran = steps[0] - before
            nursery.cancel_scope.cancel()
    # The other task ran at each of the loop's checkpoints (one per
    # CHECKPOINT_INTERVAL elements, the first after the first interval: 19),
    # give or take the one batch at each end that trio may order either way;
    # and the loop did not checkpoint per element.
    assert total // CHECKPOINT_INTERVAL - 2 <= ran <= 2 * (total // CHECKPOINT_INTERVAL) + 2


@pytest.mark.parametrize("prefetch", [None, 32, 4096])
async def test_a_loop_over_an_endless_stream_is_cancellable_and_loses_nothing(prefetch: int | None) -> None:
    peer = EndlessPeer()
    with trio.fail_after(20):
        async with peer.subscribe("endless", prefetch=prefetch) as stream:
            taken: list[int] = []
            with trio.CancelScope() as scope:
                async for raw in stream:
                    taken.append(from_u32(raw))
                    if len(taken) == 1000:
                        scope.cancel()  # lands at the loop's next checkpoint
            assert scope.cancelled_caught
            assert 1000 <= len(taken) <= 1000 + CHECKPOINT_INTERVAL
            # __anext__ is atomic under cancellation: the next element is
            # the one after the last handed out.
            assert from_u32(await stream.__anext__()) == len(taken)
            assert taken == list(range(len(taken)))


async def test_a_loop_cancelled_before_it_starts_stops_within_one_interval() -> None:
    peer = EndlessPeer()
    with trio.fail_after(20):
        async with peer.subscribe("endless", prefetch=4096) as stream:
            taken = 0
            with trio.CancelScope() as scope:
                scope.cancel()
                async for _ in stream:
                    taken += 1
            assert scope.cancelled_caught
            assert taken <= CHECKPOINT_INTERVAL


@pytest.mark.parametrize(
    ("codec", "encode", "decoded"),
    [
        ("json", lambda i: json.dumps({"i": i}).encode(), lambda i: {"i": i}),
        ("msgpack", lambda i: msgpack.packb([i, "x"]), lambda i: [i, "x"]),
        (None, u32, u32),
    ],
)
async def test_the_codec_decodes_every_element_of_a_run(codec, encode, decoded) -> None:
    count = 3 * CHECKPOINT_INTERVAL + 17
    peer = EndlessPeer(batch=100, encode=encode, limit=count)
    with trio.fail_after(20):
        async with peer.subscribe("numbers", prefetch=50, codec=codec) as stream:
            values = [value async for value in stream]
    assert values == [decoded(i) for i in range(count)]


async def test_statistics_count_what_the_run_still_holds() -> None:
    peer = EndlessPeer(batch=300)
    with trio.fail_after(20):
        async with peer.subscribe("endless", prefetch=1000) as stream:
            async for raw in stream:
                peer.taken += 1
                stats = stream.statistics()
                assert stats.received == peer.sent
                assert stats.buffered == peer.sent - peer.taken
                assert stats.outstanding_demand + stats.buffered <= 1000
                assert f"buffered={stats.buffered}>" in repr(stream)
                if peer.taken == 2000:
                    break


@pytest.mark.parametrize("prefetch", [1, 2, 7, 32, 1000])
async def test_top_ups_come_with_the_element_that_completes_half_the_window(prefetch: int) -> None:
    peer = EndlessPeer(batch=13)
    with trio.fail_after(20):
        async with peer.subscribe("endless", prefetch=prefetch) as stream:
            async for _ in stream:
                peer.taken += 1
                if peer.taken == 1500:
                    break
    half = max(1, prefetch // 2)
    # Recorded inside __anext__, before the element that completes it is
    # handed out: hence the taken count one lower.
    assert peer.requests == [(k * half - 1, half) for k in range(1, 1500 // half + 1)]


async def test_an_adaptive_window_grows_while_the_loop_waits() -> None:
    # A peer that delivers only when told: the loop waits each time its
    # buffer runs dry, so the window doubles at each top-up.
    class OnCue(FeedPeer):
        def open_stream(self, feed: StreamFeed) -> None:
            self.feed = feed
            feed.subscribed()

        async def aclose(self) -> None:
            await trio.lowlevel.checkpoint()

    peer = OnCue()
    sent = 0

    async def deliver_when_waited_for(stream: rstreams.Subscription) -> None:
        nonlocal sent
        while True:
            await trio.testing.wait_all_tasks_blocked()
            demand = peer.feed.demand
            peer.feed.deliver([u32(sent + i) for i in range(demand)])
            sent += demand

    with trio.fail_after(20):
        async with trio.open_nursery() as nursery, peer.subscribe("cue") as stream:
            nursery.start_soon(deliver_when_waited_for, stream)
            taken = 0
            async for raw in stream:
                assert from_u32(raw) == taken
                taken += 1
                if taken == 5000:
                    break
            nursery.cancel_scope.cancel()
    assert stream.window > rstreams.ADAPTIVE_INITIAL


# ---- fuzzed: async for, batches() and deliveries interleaved --------------------


_steps = st.lists(
    st.one_of(
        st.tuples(st.just("each"), st.integers(1, 600)),
        st.tuples(st.just("batch"), st.integers(1, 400)),
        st.tuples(st.just("stats"), st.just(0)),
    ),
    max_size=25,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.integers(1, 700), st.integers(1, 300), _steps)
def test_interleaved_iteration_keeps_order_demand_and_counts(prefetch: int, batch: int, steps) -> None:
    """Fuzzed: whatever mix of ``async for`` steps and ``batches()`` a
    consumer makes, it gets every element once, in order; the requests are
    exactly those of a window counting one element (or one batch) at a
    time; and buffered + taken == received at every point."""

    async def main() -> None:
        peer = EndlessPeer(batch=batch)
        model = DemandWindow(prefetch)
        expected_requests: list[tuple[int, int]] = []
        taken = 0
        async with peer.subscribe("endless", prefetch=prefetch) as stream:
            for kind, n in steps:
                if kind == "each":
                    for _ in range(n):
                        raw = await stream.__anext__()
                        assert from_u32(raw) == taken
                        more = model.consumed(1)
                        if more:
                            expected_requests.append((taken, more))
                        taken += 1
                        peer.taken = taken
                elif kind == "batch":
                    got = await stream.batches(n).__anext__()
                    assert [from_u32(raw) for raw in got] == list(range(taken, taken + len(got)))
                    assert 1 <= len(got) <= n
                    more = model.consumed(len(got))
                    if more:
                        expected_requests.append((taken, more))
                    taken += len(got)
                    peer.taken = taken
                stats = stream.statistics()
                assert stats.received == peer.sent
                assert stats.buffered == peer.sent - taken
                assert stats.outstanding_demand + stats.buffered <= prefetch
        assert peer.requests == expected_requests

    trio.run(main)


@pytest.mark.parametrize("prefetch", [None, 7, 1000])
async def test_a_packed_stream_read_with_async_for_and_batches(prefetch: int | None) -> None:
    # The demo's ``range`` sends packed runs (onNextPacked): the run slices
    # them, and batches() taken in between gets what the run had not handed out.
    with trio.fail_after(20):
        async with rstreams.testing.session_pair(server_app=demo_app) as (client, _):
            async with client.subscribe("range?count=5000", prefetch=prefetch) as stream:
                values: list[int] = []
                async for raw in stream:
                    values.append(int.from_bytes(raw, "big"))
                    if len(values) == 1234:
                        break
                assert stream.element_size == 8
                batch = await stream.batches(300).__anext__()
                values.extend(int.from_bytes(raw, "big") for raw in batch)
                values.extend([int.from_bytes(raw, "big") async for raw in stream])
    assert values == list(range(5000))
