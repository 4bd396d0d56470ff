"""The publishing side: Sink, completion and failure, cancellation, the async-gen adapter, Router.

Tests that need "nothing else happens" use memory streams and
``wait_all_tasks_blocked``: once every task is blocked, a publisher that
should be waiting for demand has had every chance to run ahead.
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable

import hypothesis
import hypothesis.strategies
import pytest
import trio
import trio.testing

import rstreams
import rstreams.testing
from rstreams._cpu_budget import CpuBudget
from rstreams._publish import MAX_NAME_PARAMETERS, TooManyParameters

from rstreams.protocol import Goodbye, Hello, MessageDecoder, OnComplete, OnError, OnNext, Subscribe, Subscribed, encode

from ._support import UNBOUNDED, Probe, collect, fetch_range, from_u32, standard_app, tapped_pair, u32


class StepCounter(trio.abc.Instrument):
    """Counts how many times tasks with a given name are scheduled."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.steps = 0

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        if task.name == self.name:
            self.steps += 1


# ---- Sink -----------------------------------------------------------------


async def test_send_waits_for_demand() -> None:
    probe = Probe()
    with trio.fail_after(10):
        async with rstreams.testing.session_pair(server_app=rstreams.Router({"probe": probe.publisher})) as (client, _):
            async with client.subscribe("probe", prefetch=0) as stream:
                await probe.started.wait()
                await trio.testing.wait_all_tasks_blocked()
                assert probe.sent == 0
                assert probe.sink is not None and probe.sink.demand == 0
                stream.request(2)
                assert [from_u32(await stream.__anext__()) for _ in range(2)] == [0, 1]
                await trio.testing.wait_all_tasks_blocked()
                assert probe.sent == 2
                assert probe.sink.demand == 0
                assert stream.statistics().buffered == 0
                stream.request(3)
                assert [from_u32(await stream.__anext__()) for _ in range(3)] == [2, 3, 4]
                await trio.testing.wait_all_tasks_blocked()
                assert probe.sent == 5


async def test_a_sink_says_whether_the_subscriber_cancelled() -> None:
    # Sink.cancelled: True once the subscriber's cancel ended the stream;
    # False while it runs, and when its session ends instead.
    probe = Probe()
    with trio.fail_after(10):
        async with rstreams.testing.session_pair(server_app=rstreams.Router({"probe": probe.publisher})) as (client, _):
            async with client.subscribe("probe", prefetch=2) as stream:
                await stream.__anext__()
                assert probe.sink is not None and not probe.sink.cancelled
            await probe.cancelled.wait()
            assert probe.sink.cancelled
    cut = Probe()
    with trio.fail_after(10):
        async with rstreams.testing.session_pair(server_app=rstreams.Router({"probe": cut.publisher})) as (client, server):
            async with client.subscribe("probe", prefetch=2) as stream:
                await stream.__anext__()
                await server.aclose("server leaving")
            await cut.cancelled.wait()
            assert cut.sink is not None and not cut.sink.cancelled


async def test_send_nowait_raises_would_block_without_demand() -> None:
    outcomes: list[str] = []

    async def eager(sink: rstreams.Sink) -> None:
        try:
            sink.send_nowait(b"too early")
        except trio.WouldBlock:
            outcomes.append("would block")
        await sink.wait_demand()
        assert sink.demand == 1
        sink.send_nowait(b"in time")
        outcomes.append("sent")
        with pytest.raises(trio.WouldBlock):
            sink.send_nowait(b"too many")
        outcomes.append("would block again")

    with trio.fail_after(10):
        async with rstreams.testing.session_pair(server_app=rstreams.Router({"eager": eager})) as (client, _):
            async with client.subscribe("eager", prefetch=0) as stream:
                await trio.testing.wait_all_tasks_blocked()
                assert outcomes == ["would block"]
                stream.request(1)
                assert await collect(stream) == [b"in time"]
    assert outcomes == ["would block", "sent", "would block again"]


async def test_send_many_queues_up_to_demand() -> None:
    sinks: list[rstreams.Sink] = []
    finished = trio.Event()

    async def many(sink: rstreams.Sink) -> None:
        sinks.append(sink)
        await sink.send_many([u32(i) for i in range(25)])
        finished.set()

    with trio.fail_after(10):
        async with rstreams.testing.session_pair(server_app=rstreams.Router({"many": many})) as (client, _):
            async with client.subscribe("many", prefetch=0) as stream:
                stream.request(10)
                await trio.testing.wait_all_tasks_blocked()
                [sink] = sinks
                assert sink.statistics().elements_sent == 10
                assert sink.demand == 0
                assert stream.statistics().buffered == 10
                assert not finished.is_set()
                stream.request(15)
                assert [from_u32(raw) for raw in await collect(stream)] == list(range(25))
                assert finished.is_set()
                assert sink.statistics().elements_sent == 25


async def _steps_to_publish(count: int, publish: Callable[[rstreams.Sink], Awaitable[None]]) -> int:
    """Steps the publisher task takes in ``publish(sink)``, which sends
    elements 0 .. ``count`` - 1 (all demand granted up front); the elements
    must all arrive, in order."""
    counter = StepCounter("publisher steps")
    done = trio.Event()

    async def publisher(sink: rstreams.Sink) -> None:
        await sink.wait_demand()
        counter.steps = 0
        await publish(sink)
        done.set()

    with trio.fail_after(10):
        async with rstreams.testing.session_pair(server_app=rstreams.Router({"steps": publisher})) as (client, _):
            trio.lowlevel.add_instrument(counter)
            try:
                async with client.subscribe("steps", prefetch=0) as stream:
                    stream.request(UNBOUNDED)  # all demand up front: one batch
                    await done.wait()
                    steps = counter.steps
                    assert [from_u32(raw) for raw in await collect(stream)] == list(range(count))
            finally:
                trio.lowlevel.remove_instrument(counter)
    return steps


@pytest.mark.parametrize("as_iterator", [False, True], ids=["list", "generator"])
async def test_send_many_checkpoints_once_per_batch_not_per_element(as_iterator: bool) -> None:
    count = 3000

    async def many(sink: rstreams.Sink) -> None:
        values = (u32(i) for i in range(count)) if as_iterator else [u32(i) for i in range(count)]
        await sink.send_many(values)

    steps = await _steps_to_publish(count, many)
    # A per-element checkpoint would mean about `count` steps.
    assert 1 <= steps <= 5, steps


class FakeClock:
    """Stands in for ``perf_counter`` in ``rstreams._publish``: each call
    moves it ``tick`` seconds on, and ``jump`` moves it by hand, so that
    the runs of ``send`` (which read real time) are decided the same way
    on any machine."""

    def __init__(self, tick: float) -> None:
        self.now = 1000.0
        self.tick = tick

    def __call__(self) -> float:
        self.now += self.tick
        return self.now

    def jump(self, seconds: float) -> None:
        self.now += seconds


async def _publisher_steps(monkeypatch: pytest.MonkeyPatch, clock: FakeClock, count: int, pause: float = 0.0) -> int:
    """Steps the publisher task takes to ``send`` ``count`` elements in a
    loop, moving the clock by ``pause`` between sends (_steps_to_publish)."""
    monkeypatch.setattr("rstreams._publish.perf_counter", clock)

    async def loop(sink: rstreams.Sink) -> None:
        for i in range(count):
            if pause:
                clock.jump(pause)
            await sink.send(u32(i))

    return await _steps_to_publish(count, loop)


async def test_sends_in_a_tight_loop_yield_once_per_run_of_send_run_length(monkeypatch: pytest.MonkeyPatch) -> None:
    from rstreams._publish import SEND_RUN_LENGTH

    count = 3000
    # 0.1 µs a clock reading: every send follows the last within the gap,
    # and SEND_RUN_LENGTH of them take far less than SEND_RUN_SECONDS.
    steps = await _publisher_steps(monkeypatch, FakeClock(1e-7), count)
    # A schedule point per send would mean about `count` steps.
    assert count // SEND_RUN_LENGTH <= steps <= count // SEND_RUN_LENGTH + 5, steps


async def test_a_run_of_send_ends_after_send_run_seconds(monkeypatch: pytest.MonkeyPatch) -> None:
    from rstreams._publish import SEND_RUN_GAP, SEND_RUN_LENGTH, SEND_RUN_SECONDS

    count = 3000
    tick = SEND_RUN_GAP / 4  # within the gap, but a run reaches SEND_RUN_SECONDS first
    steps = await _publisher_steps(monkeypatch, FakeClock(tick), count)
    # Two clock readings a send that goes on, so a run lasts about this many.
    per_run = SEND_RUN_SECONDS / (2 * tick)
    assert per_run < SEND_RUN_LENGTH
    assert count / (per_run + 2) <= steps <= count / (per_run - 2) + 5, steps


async def test_a_send_after_a_pause_yields_every_time(monkeypatch: pytest.MonkeyPatch) -> None:
    from rstreams._publish import SEND_RUN_GAP

    count = 300
    # The publisher spends longer than the gap between sends (as one paced
    # by a timer, or waiting for anything, does): each send is its own
    # schedule point, so its element goes out at once.
    steps = await _publisher_steps(monkeypatch, FakeClock(1e-7), count, pause=2 * SEND_RUN_GAP)
    assert steps >= count, steps


async def test_runs_of_send_with_demand_in_small_steps_deliver_everything_in_order(
    monkeypatch: pytest.MonkeyPatch, connect
) -> None:
    # Runs that end by waiting for demand (a schedule point of their own,
    # from which the next run starts) lose and reorder nothing.
    monkeypatch.setattr("rstreams._publish.perf_counter", FakeClock(1e-7))

    async def loop(sink: rstreams.Sink) -> None:
        for i in range(2000):
            await sink.send(u32(i))

    with trio.fail_after(10):
        async with connect(rstreams.Router({"loop": loop})) as (client, _):
            for prefetch in (1, 7, 300):
                async with client.subscribe("loop", prefetch=prefetch) as stream:
                    assert [from_u32(raw) for raw in await collect(stream)] == list(range(2000))


async def test_send_is_a_cancel_point_within_a_run(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("rstreams._publish.perf_counter", FakeClock(1e-7))
    reached: list[int] = []

    async def loop(sink: rstreams.Sink) -> None:
        with trio.CancelScope() as scope:
            for i in range(100):
                if i == 10:
                    scope.cancel()  # in the middle of a run: the next send raises
                await sink.send(u32(i))
                reached.append(i)

    with trio.fail_after(10):
        async with rstreams.testing.session_pair(server_app=rstreams.Router({"loop": loop})) as (client, _):
            async with client.subscribe("loop", prefetch=1000) as stream:
                assert [from_u32(raw) for raw in await collect(stream)] == list(range(10))
    assert reached == list(range(10))


async def test_send_many_with_demand_in_steps_sends_everything_in_order(connect) -> None:
    async def many(sink: rstreams.Sink) -> None:
        await sink.send_many(u32(i) for i in range(5000))

    with trio.fail_after(10):
        async with connect(rstreams.Router({"many": many})) as (client, _):
            async with client.subscribe("many", prefetch=7) as stream:
                assert [from_u32(raw) for raw in await collect(stream)] == list(range(5000))


async def test_elements_may_be_views_of_bytes(connect) -> None:
    # Slices of one buffer, sent without copies: small ones, ones over the
    # split threshold (64 KiB), through send, send_nowait and send_many.
    buffer = bytes(range(256)) * 1200  # 300 KiB
    view = memoryview(buffer)
    cuts = [(0, 8), (5, 70_000), (100, 100), (1000, 200_000), (3, 1027)]

    async def views(sink: rstreams.Sink) -> None:
        await sink.send(view[0:8])
        await sink.send_many([view[start : start + size] for start, size in cuts[1:]])
        await sink.wait_demand()
        sink.send_nowait(view[7:9])

    refused: list[BaseException] = []

    async def mutable(sink: rstreams.Sink) -> None:
        try:
            await sink.send(memoryview(bytearray(b"could change")))
        except rstreams.protocol.LocalProtocolError as exc:
            refused.append(exc)
            raise

    with trio.fail_after(20):
        async with connect(rstreams.Router({"views": views, "mutable": mutable})) as (client, _):
            received = await client.fetch("views", 10)
            assert received == [buffer[start : start + size] for start, size in cuts] + [buffer[7:9]]
            assert all(type(element) is bytes for element in received)
            with pytest.raises(rstreams.PublisherError, match="memoryview of bytes"):
                await client.fetch("mutable", 1)
    assert len(refused) == 1


async def test_send_some_returns_how_many_were_queued() -> None:
    results: list[int] = []

    async def some(sink: rstreams.Sink) -> None:
        results.append(await sink.send_some([]))
        results.append(await sink.send_some([b"a", b"b", b"c", b"d"]))  # demand is 3
        results.append(await sink.send_some([b"e"]))  # waits for demand

    with trio.fail_after(10):
        async with rstreams.testing.session_pair(server_app=rstreams.Router({"some": some})) as (client, _):
            async with client.subscribe("some", prefetch=0) as stream:
                stream.request(3)
                await trio.testing.wait_all_tasks_blocked()
                assert results == [0, 3]
                stream.request(5)
                assert await collect(stream) == [b"a", b"b", b"c", b"e"]
    assert results == [0, 3, 1]


async def test_send_some_stops_at_the_element_that_fills_max_queued_bytes() -> None:
    results: list[int] = []
    sizes = [300] * 3 + [150] + [50] * 600

    async def some(sink: rstreams.Sink) -> None:
        # Room for 1,000 bytes: the fourth element reaches it and goes too.
        results.append(await sink.send_some([bytes(size) for size in sizes]))

    config = rstreams.SessionConfig(max_queued_bytes=1000)
    with trio.fail_after(10):
        async with rstreams.testing.session_pair(server_app=rstreams.Router({"some": some}), config=config) as (
            client,
            _,
        ):
            async with client.subscribe("some", prefetch=0) as stream:
                stream.request(1000)
                received = [len(element) async for element in stream]
    assert results == [4]
    assert received == sizes[:4]


_SIZES = hypothesis.strategies.sampled_from([0, 1, 7, 300, 1024, 5000])


@hypothesis.given(
    # (Lists of one size, the usual case, have a quicker way.)
    sizes=hypothesis.strategies.lists(_SIZES, max_size=700)
    | hypothesis.strategies.builds(lambda size, count: [size] * count, _SIZES, hypothesis.strategies.integers(0, 700)),
    budget=hypothesis.strategies.integers(-10, 200_000)
    | hypothesis.strategies.integers(0, 200).map(lambda k: k * 1024),  # (a queue of 1 KiB elements)
)
def test_elements_within_counts_up_to_the_element_that_reaches_the_budget(sizes: list[int], budget: int) -> None:
    from rstreams._publish import elements_within

    expected = 0
    room = budget
    for size in sizes:
        room -= size
        expected += 1
        if room <= 0:
            break
    assert elements_within([bytes(size) for size in sizes], budget) == expected


async def test_send_packed_on_a_fixed_size_route(connect) -> None:
    async def packed(sink: rstreams.Sink) -> None:
        assert sink.element_size == 4
        with pytest.raises(ValueError):
            await sink.send_packed(b"12345")  # not a multiple of 4
        await sink.send_packed(b"".join(u32(i) for i in range(1000)))

    app = rstreams.Router()
    app.add("packed", packed, element_size=4)
    with trio.fail_after(10):
        async with connect(app) as (client, _):
            async with client.subscribe("packed", prefetch=100) as stream:
                values = [from_u32(raw) async for raw in stream]
                assert stream.element_size == 4
                assert stream.statistics().element_size == 4
    assert values == list(range(1000))


async def test_send_packed_needs_an_element_size() -> None:
    errors: list[BaseException] = []

    async def packed(sink: rstreams.Sink) -> None:
        try:
            await sink.send_packed(b"1234")
        except ValueError as exc:
            errors.append(exc)

    with trio.fail_after(10):
        async with rstreams.testing.session_pair(server_app=rstreams.Router({"packed": packed})) as (client, _):
            async with client.subscribe("packed") as stream:
                assert await collect(stream) == []
    assert len(errors) == 1


async def test_sink_statistics() -> None:
    seen: list[rstreams.SinkStatistics] = []

    async def stats(sink: rstreams.Sink) -> None:
        seen.append(sink.statistics())
        await sink.send(b"x" * 10)
        seen.append(sink.statistics())

    with trio.fail_after(10):
        async with rstreams.testing.session_pair(server_app=rstreams.Router({"stats": stats})) as (client, _):
            async with client.subscribe("stats", prefetch=5) as stream:
                assert await collect(stream) == [b"x" * 10]
    before, after = seen
    assert (before.demand, before.elements_sent, before.element_size) == (5, 0, 0)
    assert (after.demand, after.elements_sent) == (4, 1)
    assert after.queued_bytes in (0, 10)


async def test_wrong_element_size_fails_the_publisher_not_the_session(connect) -> None:
    async def sloppy(sink: rstreams.Sink) -> None:
        await sink.send(b"1234")
        await sink.send(b"12345")  # the route promised 4-byte elements

    app = standard_app()
    app.add("sloppy", sloppy, element_size=4)
    with trio.fail_after(10):
        async with connect(app) as (client, _):
            async with client.subscribe("sloppy") as stream:
                assert await stream.__anext__() == b"1234"
                with pytest.raises(rstreams.PublisherError):
                    await stream.__anext__()
            await fetch_range(client)


# ---- completion, failure, cancellation ------------------------------------


async def test_returning_completes_the_stream(connect) -> None:
    async def three(sink: rstreams.Sink) -> None:
        for value in (b"a", b"b", b"c"):
            await sink.send(value)

    with trio.fail_after(10):
        async with connect(rstreams.Router({"three": three})) as (client, server):
            async with client.subscribe("three") as stream:
                assert await collect(stream) == [b"a", b"b", b"c"]
                assert stream.statistics().state == "completed"
            assert server.statistics().publications == 0


async def test_raising_sends_on_error_with_the_message(connect) -> None:
    async def failing(sink: rstreams.Sink) -> None:
        await sink.send(b"before")
        raise RuntimeError("disk on fire")

    with trio.fail_after(10):
        async with connect(standard_app(failing=failing)) as (client, server):
            async with client.subscribe("failing") as stream:
                assert await stream.__anext__() == b"before"  # elements first, then the error
                with pytest.raises(rstreams.PublisherError) as info:
                    await stream.__anext__()
                assert info.value.message == "disk on fire"
                assert str(info.value) == "disk on fire"
                assert not isinstance(info.value, rstreams.UnknownPublisher)
                assert stream.statistics().state == "failed"
                # The error is terminal: asking again raises it again.
                with pytest.raises(rstreams.PublisherError):
                    await stream.__anext__()
            # One publisher's failure is not the session's.
            assert not client.closed and not server.closed
            await fetch_range(client)


async def test_an_exception_without_message_sends_its_type_name() -> None:
    async def failing(sink: rstreams.Sink) -> None:
        raise LookupError

    with trio.fail_after(10):
        async with rstreams.testing.session_pair(server_app=rstreams.Router({"failing": failing})) as (client, _):
            async with client.subscribe("failing") as stream:
                with pytest.raises(rstreams.PublisherError, match="^LookupError$"):
                    await stream.__anext__()


async def test_publisher_failure_is_logged_with_traceback(caplog: pytest.LogCaptureFixture) -> None:
    async def failing(sink: rstreams.Sink) -> None:
        raise RuntimeError("logged failure")

    with trio.fail_after(10):
        async with rstreams.testing.session_pair(server_app=rstreams.Router({"failing": failing})) as (client, _):
            async with client.subscribe("failing") as stream:
                with pytest.raises(rstreams.PublisherError):
                    await stream.__anext__()
    records = [r for r in caplog.records if r.name == "rstreams" and r.exc_info]
    assert records and "logged failure" in str(records[0].exc_info[1])


async def test_cancel_from_the_peer_arrives_as_cancelled(connect) -> None:
    probe = Probe()
    with trio.fail_after(10):
        async with connect(standard_app(probe=probe.publisher)) as (client, server):
            async with client.subscribe("probe", prefetch=4) as stream:
                assert from_u32(await stream.__anext__()) == 0
            await probe.cancelled.wait()
            await probe.finished.wait()
            await trio.testing.wait_all_tasks_blocked()
            assert server.statistics().publications == 0
            assert not server.closed
            await fetch_range(client)


async def test_cancel_while_the_publisher_waits_outside_send(connect) -> None:
    # A publisher blocked on something else than sink.send is cancelled too.
    cancelled = trio.Event()
    started = trio.Event()

    async def waiting(sink: rstreams.Sink) -> None:
        started.set()
        try:
            await trio.sleep_forever()
        except trio.Cancelled:
            cancelled.set()
            raise

    with trio.fail_after(10):
        async with connect(rstreams.Router({"waiting": waiting})) as (client, server):
            async with client.subscribe("waiting"):
                await started.wait()
            await cancelled.wait()


async def test_cancelled_is_not_turned_into_on_error() -> None:
    # The cancelled publisher sends nothing more: no onError, no onComplete.
    probe = Probe()
    with trio.fail_after(10):
        async with tapped_pair(server_app=standard_app(probe=probe.publisher)) as (client, server, tap):
            async with client.subscribe("probe", prefetch=2) as stream:
                await stream.__anext__()
                subscriber = stream.subscriber
            await probe.cancelled.wait()
            await fetch_range(client)  # a round trip after the cancel
            assert server.statistics().publications == 0
    late = [m for m in tap.received if isinstance(m, (OnError, OnComplete)) and m.subscriber == subscriber]
    assert late == []


async def test_publisher_with_only_a_sink_parameter(connect) -> None:
    async def simple(sink):  # type: ignore[no-untyped-def]
        await sink.send(b"ok")

    with trio.fail_after(10):
        async with connect(rstreams.Router({"simple": simple})) as (client, _):
            async with client.subscribe("simple?ignored=1") as stream:
                assert await collect(stream) == [b"ok"]


# ---- publisher_from_async_gen ---------------------------------------------


class CountingGen:
    """An async generator function that counts how often it was advanced."""

    def __init__(self, limit: int | None = None) -> None:
        self.limit = limit
        self.advanced = 0
        self.closed_by: str | None = None
        self.finalized = 0
        self.finalized_in: str | None = None

    async def __call__(self):  # type: ignore[no-untyped-def]
        try:
            value = 0
            while self.limit is None or value < self.limit:
                self.advanced += 1
                yield u32(value)
                value += 1
        except GeneratorExit:
            self.closed_by = "aclose"
            raise
        except trio.Cancelled:
            self.closed_by = "cancelled"
            raise
        finally:
            self.finalized += 1
            self.finalized_in = trio.lowlevel.current_task().name


async def test_async_gen_pulls_only_on_demand() -> None:
    gen = CountingGen()
    app = rstreams.Router({"numbers": rstreams.publisher_from_async_gen(gen.__call__)})
    with trio.fail_after(10):
        async with rstreams.testing.session_pair(server_app=app) as (client, _):
            async with client.subscribe("numbers", prefetch=0) as stream:
                await trio.testing.wait_all_tasks_blocked()
                assert gen.advanced == 0
                stream.request(3)
                assert [from_u32(await stream.__anext__()) for _ in range(3)] == [0, 1, 2]
                await trio.testing.wait_all_tasks_blocked()
                assert gen.advanced == 3
                stream.request(2)
                assert [from_u32(await stream.__anext__()) for _ in range(2)] == [3, 4]
                await trio.testing.wait_all_tasks_blocked()
                assert gen.advanced == 5
            # Leaving the block cancels: the generator is closed with aclose.
            await trio.testing.wait_all_tasks_blocked()
    assert gen.closed_by == "aclose"
    assert gen.finalized == 1
    # Closed by the publisher's own task, not left to a garbage-collection hook.
    assert gen.finalized_in == "publisher numbers"


async def test_async_gen_never_runs_ahead_with_automatic_demand(connect) -> None:
    gen = CountingGen()
    app = rstreams.Router({"numbers": rstreams.publisher_from_async_gen(gen.__call__)})
    with trio.fail_after(10):
        async with connect(app) as (client, server):
            async with client.subscribe("numbers", prefetch=8) as stream:
                consumed = 0
                async for raw in stream:
                    assert from_u32(raw) == consumed
                    consumed += 1
                    # Produced = consumed + buffered + in flight <= consumed + window.
                    assert gen.advanced <= consumed + 8
                    if consumed == 100:
                        break
            assert gen.advanced <= 100 + 8


async def test_async_gen_completion_closes_the_generator(connect) -> None:
    gen = CountingGen(limit=5)
    app = rstreams.Router({"numbers": rstreams.publisher_from_async_gen(gen.__call__)})
    with trio.fail_after(10):
        async with connect(app) as (client, _):
            async with client.subscribe("numbers") as stream:
                assert [from_u32(raw) async for raw in stream] == list(range(5))
    assert gen.finalized == 1
    assert gen.closed_by is None  # ran to its end


async def test_async_gen_cancelled_while_awaiting_inside() -> None:
    state: dict[str, object] = {}
    reached = trio.Event()

    async def slow():  # type: ignore[no-untyped-def]
        try:
            yield b"first"
            reached.set()
            await trio.sleep_forever()
            yield b"never"  # pragma: no cover
        except trio.Cancelled:
            state["seen"] = "cancelled"
            raise
        finally:
            state["finalized"] = True

    app = rstreams.Router({"slow": rstreams.publisher_from_async_gen(slow)})
    with trio.fail_after(10):
        async with rstreams.testing.session_pair(server_app=app) as (client, server):
            async with client.subscribe("slow", prefetch=4) as stream:
                assert await stream.__anext__() == b"first"
                await reached.wait()
            await trio.testing.wait_all_tasks_blocked()
            assert state == {"seen": "cancelled", "finalized": True}
            assert server.statistics().publications == 0


async def test_async_gen_error_becomes_on_error(connect) -> None:
    async def broken():  # type: ignore[no-untyped-def]
        yield b"one"
        raise ValueError("generator broke")

    app = rstreams.Router({"broken": rstreams.publisher_from_async_gen(broken)})
    with trio.fail_after(10):
        async with connect(app) as (client, _):
            async with client.subscribe("broken") as stream:
                assert await stream.__anext__() == b"one"
                with pytest.raises(rstreams.PublisherError, match="generator broke"):
                    await stream.__anext__()


async def test_async_gen_receives_the_request(connect) -> None:
    async def counted(request: rstreams.SubscribeRequest):  # type: ignore[no-untyped-def]
        for value in range(request.int_param("count", 1)):
            yield u32(value)

    app = rstreams.Router({"counted": rstreams.publisher_from_async_gen(counted)})
    with trio.fail_after(10):
        async with connect(app) as (client, _):
            async with client.subscribe("counted?count=12", prefetch=5) as stream:
                assert [from_u32(raw) async for raw in stream] == list(range(12))


async def test_async_gen_closed_when_the_session_ends() -> None:
    gen = CountingGen()
    app = rstreams.Router({"numbers": rstreams.publisher_from_async_gen(gen.__call__)})
    with trio.fail_after(10):
        async with rstreams.testing.session_pair(server_app=app) as (client, server):
            async with client.subscribe("numbers", prefetch=2) as stream:
                await stream.__anext__()
                await server.aclose()
                with pytest.raises(rstreams.SessionClosed):
                    async for _ in stream:
                        pass
            await trio.testing.wait_all_tasks_blocked()
    assert gen.finalized == 1
    assert gen.closed_by == "aclose"
    assert gen.finalized_in == "publisher numbers"


# ---- Router and SubscribeRequest --------------------------------------------


async def test_router_passes_parsed_query_params(connect) -> None:
    seen: list[rstreams.SubscribeRequest] = []

    async def echo(sink: rstreams.Sink, request: rstreams.SubscribeRequest) -> None:
        seen.append(request)
        await sink.send(request.name.encode())

    with trio.fail_after(10):
        async with connect(rstreams.Router({"range": echo})) as (client, server):
            name = "range?count=100&label=a%20b&empty=&x=1&x=2&plus=c+d"
            async with client.subscribe(name) as stream:
                assert await collect(stream) == [name.encode()]
    [request] = seen
    assert request.name == name
    assert request.path == "range"
    assert dict(request.params) == {"count": "100", "label": "a b", "empty": "", "x": "2", "plus": "c d"}
    assert request.int_param("count", 0) == 100
    assert request.subscriber >= 1
    assert request.session is server


@hypothesis.settings(max_examples=300, deadline=None)
@hypothesis.given(
    path=hypothesis.strategies.text(alphabet="abz_.-", min_size=1, max_size=8).map(lambda p: p + "/x"),
    query=hypothesis.strategies.text(alphabet="ab=&%+ 2;.", max_size=24),
)
def test_parse_name_agrees_with_urllib(path: str, query: str) -> None:
    """The fast path (no escapes to undo) and the general one give what
    urlsplit and parse_qsl give: the last value of a repeated key wins."""
    from urllib.parse import parse_qsl

    name = f"{path}?{query}"
    expected = (path, dict(parse_qsl(query, keep_blank_values=True)))
    assert rstreams.SubscribeRequest.parse_name(name) == expected


def test_the_sessions_request_constructor_makes_the_same_request() -> None:
    from rstreams._publish import new_request

    session = object()
    made = new_request("range?count=1", "range", {"count": "1"}, session, 7)  # type: ignore[arg-type]
    expected = rstreams.SubscribeRequest(name="range?count=1", path="range", params={"count": "1"}, session=session, subscriber=7)  # type: ignore[arg-type]
    assert made == expected and type(made) is rstreams.SubscribeRequest
    assert (made.name, made.path, made.params, made.session, made.subscriber) == ("range?count=1", "range", {"count": "1"}, session, 7)
    assert repr(made) == repr(expected)
    with pytest.raises(AttributeError):
        made.name = "other"  # type: ignore[misc]


def test_parsed_names_are_shared_read_only_and_bounded() -> None:
    from rstreams import _publish

    first = rstreams.SubscribeRequest.parse_name("shared?a=1")
    assert rstreams.SubscribeRequest.parse_name("shared?a=1") is first
    with pytest.raises(TypeError):
        first[1]["a"] = "2"  # type: ignore[index]
    for index in range(3 * _publish._PARSED_NAMES):
        assert rstreams.SubscribeRequest.parse_name(f"n{index}?i={index}") == (f"n{index}", {"i": str(index)})
    assert len(_publish._parsed_names) <= _publish._PARSED_NAMES
    long_name = "x" * (_publish._PARSED_NAME_LENGTH + 1)
    assert rstreams.SubscribeRequest.parse_name(long_name) == (long_name, {})
    assert long_name not in _publish._parsed_names


def test_subscribe_request_params() -> None:
    path, params = rstreams.SubscribeRequest.parse_name("ticker?interval=0.5&n=3")
    assert (path, params) == ("ticker", {"interval": "0.5", "n": "3"})
    assert rstreams.SubscribeRequest.parse_name("plain") == ("plain", {})
    assert rstreams.SubscribeRequest.parse_name("nested/path?a=1") == ("nested/path", {"a": "1"})
    request = rstreams.SubscribeRequest(name="t", path="t", params=params, session=None)  # type: ignore[arg-type]
    assert request.int_param("n", 0) == 3
    assert request.int_param("missing", 7) == 7
    assert request.float_param("interval", 1.0) == 0.5
    assert request.float_param("missing", 2.5) == 2.5
    with pytest.raises(ValueError, match="not an integer"):
        request.int_param("interval", 0)
    with pytest.raises(ValueError, match="below the minimum"):
        request.int_param("n", 0, minimum=4)
    with pytest.raises(ValueError, match="above the maximum"):
        request.int_param("n", 0, maximum=2)
    with pytest.raises(ValueError, match="out of range"):
        request.float_param("interval", 0, minimum=1)
    nan = rstreams.SubscribeRequest(name="t", path="t", params={"x": "nan", "y": "abc"}, session=None)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        nan.float_param("x", 0)
    with pytest.raises(ValueError, match="not a number"):
        nan.float_param("y", 0)


async def test_bad_param_reaches_the_subscriber_as_publisher_error(connect) -> None:
    with trio.fail_after(10):
        async with connect(standard_app()) as (client, _):
            async with client.subscribe("range?count=lots") as stream:
                with pytest.raises(rstreams.PublisherError, match="parameter count='lots' is not an integer"):
                    await stream.__anext__()


def test_router_api() -> None:
    async def one(sink: rstreams.Sink) -> None:
        pass  # pragma: no cover

    router = rstreams.Router({"b": one, "a": rstreams.Route(one, element_size=8, codec="msgpack")})

    @router.publisher("c", element_size=2, codec="json")
    async def decorated(sink: rstreams.Sink) -> None:
        pass  # pragma: no cover

    assert decorated.__name__ == "decorated"  # the decorator returns the function
    assert router.paths == ["a", "b", "c"]
    assert router.resolve("a") == rstreams.Route(one, element_size=8, codec="msgpack")
    assert router.resolve("c") == rstreams.Route(decorated, 2, "json")
    assert router.resolve("b").element_size == 0  # type: ignore[union-attr]
    assert router.resolve("missing") is None
    assert router.resolve("a?x=1") is None  # routing is on the path alone
    with pytest.raises(ValueError, match="no query"):
        router.add("d?x=1", one)
    with pytest.raises(TypeError):
        router.add("d", "not callable")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        router.add("d", one, element_size=-1)
    with pytest.raises(ValueError, match="unknown codec"):
        router.add("d", one, codec="yaml")
    assert "d" not in router.paths


async def test_unknown_publisher(connect) -> None:
    with trio.fail_after(10):
        async with connect(standard_app()) as (client, server):
            # The server names the closest paths it serves, when some look alike.
            for name, closest in (("nope", ""), ("nope?count=3", ""), ("range/extra", " (closest: range)")):
                with pytest.raises(rstreams.UnknownPublisher) as info:
                    async with client.subscribe(name):
                        pass  # pragma: no cover
                assert str(info.value) == f"no such publisher: {name}{closest}"
                assert info.value.message == f"no such publisher: {name}{closest}"
                assert info.value.name == name
                assert isinstance(info.value, rstreams.PublisherError)
                assert isinstance(info.value, rstreams.SubscriptionError)
            # The session is unharmed.
            assert client.statistics().subscriptions == 0
            await fetch_range(client)


async def test_a_session_without_app_knows_no_publisher(connect) -> None:
    with trio.fail_after(10):
        async with connect(standard_app()) as (client, server):
            with pytest.raises(rstreams.UnknownPublisher, match="no such publisher: range"):
                async with server.subscribe("range"):
                    pass  # pragma: no cover


async def test_send_packed_cancelled_during_its_schedule_point_queues_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    # A cancel that lands while the publisher sits in the (shielded) schedule
    # point at the end of wait_demand: the stream may already be forgotten,
    # so send_packed must not queue on it (an empty run included) but go
    # round and raise Cancelled.
    outcome: list[str] = []
    queued: list[int] = []
    room_calls = 0
    real_room = rstreams.Sink._room_within
    real_send_packed = rstreams.protocol.Connection.send_packed

    def room(sink: rstreams.Sink, budget_room: int | None) -> int:
        nonlocal room_calls
        room_calls += 1
        if room_calls == 2:  # right after wait_demand returned
            sink._handle.stop()
        return real_room(sink, budget_room)

    def send_packed(conn: rstreams.protocol.Connection, subscriber: int, packed: bytes) -> None:
        queued.append(len(packed))
        real_send_packed(conn, subscriber, packed)

    monkeypatch.setattr(rstreams.Sink, "_room_within", room)
    monkeypatch.setattr(rstreams.protocol.Connection, "send_packed", send_packed)

    async def packed(sink: rstreams.Sink) -> None:
        try:
            await sink.send_packed(b"\x00" * 64)
        except trio.Cancelled:
            outcome.append("cancelled")
            raise

    app = rstreams.Router()
    app.add("packed", packed, element_size=4)
    with trio.fail_after(10):
        async with rstreams.testing.session_pair(server_app=app) as (client, _):
            async with client.subscribe("packed", prefetch=4):
                await trio.testing.wait_all_tasks_blocked()
    assert outcome == ["cancelled"]
    assert queued == []


# ---- publishers that answer at once (a plain def) ---------------------------


class WriteCounter(trio.abc.Stream):
    """Records every write made through it."""

    def __init__(self, stream: trio.abc.Stream) -> None:
        self._stream = stream
        self.writes: list[bytes] = []

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        self.writes.append(bytes(data))
        await self._stream.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self._stream.wait_send_all_might_not_block()

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        return await self._stream.receive_some(max_bytes)

    async def aclose(self) -> None:
        await self._stream.aclose()


def at_once(sink: rstreams.Sink, request: rstreams.SubscribeRequest) -> None:
    """Answers at once: ``count`` 4-byte elements, all within the initial demand."""
    for index in range(request.int_param("count", 3)):
        sink.send_nowait(u32(index))


class SpawnRecorder(trio.abc.Instrument):
    """Records the names of the tasks spawned while it is installed."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def task_spawned(self, task: trio.lowlevel.Task) -> None:
        self.names.append(task.name)


@pytest.mark.parametrize("form", ["plain def", "async def"])
async def test_plain_def_publisher_completes_without_a_task(connect, form: str) -> None:
    async def at_once_async(sink: rstreams.Sink, request: rstreams.SubscribeRequest) -> None:
        at_once(sink, request)

    app = standard_app(at_once=at_once if form == "plain def" else at_once_async)
    spawned = SpawnRecorder()
    with trio.fail_after(10):
        async with connect(server_app=app) as (client, server):
            trio.lowlevel.add_instrument(spawned)
            try:
                async with client.subscribe("at_once?count=3", prefetch=8) as stream:
                    assert [from_u32(e) for e in await collect(stream)] == [0, 1, 2]
            finally:
                trio.lowlevel.remove_instrument(spawned)
            assert server.statistics().publications == 0
    publisher_tasks = [name for name in spawned.names if name.startswith("publisher ")]
    assert publisher_tasks == ([] if form == "plain def" else ["publisher at_once?count=3"])


@pytest.mark.parametrize("repeat", range(5))
async def test_answer_at_once_leaves_in_one_write(repeat: int) -> None:
    """subscribed, the elements and onComplete are queued in the reader's
    pass that saw the subscribe, so the server writes them all at once."""
    client_stream, server_stream = trio.testing.memory_stream_pair()
    counter = WriteCounter(server_stream)
    with trio.fail_after(10):
        async with rstreams.open_stream_session(counter, app=standard_app(at_once=at_once)):
            async with rstreams.open_stream_session(client_stream) as client:
                await fetch_range(client, 1)  # the handshake is behind us
                before = len(counter.writes)
                async with client.subscribe("at_once?count=2", prefetch=8) as stream:
                    assert [from_u32(e) for e in await collect(stream)] == [0, 1]
                answer = counter.writes[before:]
    assert len(answer) == 1
    decoder = MessageDecoder()
    decoder.feed(answer[0])
    assert [type(message) for message in decoder] == [Subscribed, OnNext, OnNext, OnComplete]


async def test_plain_def_publisher_failing_sends_on_error(connect) -> None:
    def broken(sink: rstreams.Sink) -> None:
        sink.send_nowait(b"first")
        raise ValueError("broken at once")

    with trio.fail_after(10):
        async with connect(server_app=standard_app(broken=broken)) as (client, server):
            async with client.subscribe("broken", prefetch=4) as stream:
                assert await stream.__anext__() == b"first"
                with pytest.raises(rstreams.PublisherError, match="broken at once"):
                    await stream.__anext__()
            assert server.statistics().publications == 0
            await fetch_range(client)  # the session carries on


async def test_plain_def_publisher_continues_with_the_awaitable_it_returns(connect) -> None:
    async def rest(sink: rstreams.Sink, start: int, count: int) -> None:
        for index in range(start, count):
            await sink.send(u32(index))

    def some_now(sink: rstreams.Sink, request: rstreams.SubscribeRequest) -> Awaitable[None] | None:
        count = request.int_param("count", 10)
        now = min(count, sink.demand)
        for index in range(now):
            sink.send_nowait(u32(index))
        return rest(sink, now, count) if now < count else None

    with trio.fail_after(10):
        async with connect(server_app=standard_app(some_now=some_now)) as (client, server):
            async with client.subscribe("some_now?count=50", prefetch=4) as stream:
                assert [from_u32(e) for e in await collect(stream)] == list(range(50))
            async with client.subscribe("some_now?count=3", prefetch=0) as stream:
                # No demand at subscribe: all of it goes through the task.
                stream.request(3)
                assert [from_u32(e) for e in await collect(stream)] == [0, 1, 2]
            assert server.statistics().publications == 0


async def test_returned_awaitable_is_cancelled_like_a_publisher(connect) -> None:
    probe = Probe()

    def deferred(sink: rstreams.Sink) -> Awaitable[None]:
        return probe.publisher(sink)

    with trio.fail_after(10):
        async with connect(server_app=standard_app(deferred=deferred)) as (client, server):
            async with client.subscribe("deferred", prefetch=2) as stream:
                assert from_u32(await stream.__anext__()) == 0
            await probe.cancelled.wait()
            await probe.finished.wait()
            await fetch_range(client)
            assert server.statistics().publications == 0


async def test_send_packed_nowait_is_all_or_nothing() -> None:
    outcomes: list[object] = []

    def packed(sink: rstreams.Sink) -> None:
        try:
            sink.send_packed_nowait(bytes(8 * (sink.demand + 1)))
        except trio.WouldBlock:
            outcomes.append("would block")
        with pytest.raises(ValueError, match="multiple of element_size"):
            sink.send_packed_nowait(bytes(5))
        sink.send_packed_nowait(b"")
        sink.send_packed_nowait(bytes(range(8)) * sink.demand)
        outcomes.append(sink.demand)

    app = rstreams.Router()
    app.add("packed", packed, element_size=8)
    with trio.fail_after(10):
        async with rstreams.testing.session_pair(server_app=app) as (client, _):
            async with client.subscribe("packed", prefetch=3) as stream:
                assert await collect(stream) == [bytes(range(8))] * 3
    assert outcomes == ["would block", 0]


async def test_plain_def_publisher_with_no_demand_may_not_send(connect) -> None:
    with trio.fail_after(10):
        async with connect(server_app=standard_app(at_once=at_once)) as (client, _):
            async with client.subscribe("at_once?count=1", prefetch=0) as stream:
                stream.request(1)
                with pytest.raises(rstreams.PublisherError, match="WouldBlock"):
                    await collect(stream)


@pytest.mark.parametrize("repeat", range(20))
async def test_answers_to_a_large_read_leave_in_slices(repeat: int) -> None:
    """A read of 100 subscribes is answered in several writes, so the peer
    can work on the first answers while the server parses the rest of the
    read. The reader lets the writer run after each 32 events (hello is the
    first); trio runs the two in either order in the next pass, so the first
    write answers the first slice or the first two."""
    client_stream, server_stream = trio.testing.memory_stream_pair()
    counter = WriteCounter(server_stream)
    with trio.fail_after(10):
        async with rstreams.open_stream_session(counter, app=standard_app(at_once=at_once)) as server:
            subscribes = [Subscribe(publisher="at_once?count=1", subscriber=n, initial_demand=1) for n in range(1, 101)]
            await client_stream.send_all(b"".join(encode(message) for message in [Hello(), *subscribes]))
            decoder = MessageDecoder()
            completed = 0
            while completed < 100:
                decoder.feed(await client_stream.receive_some())
                completed += sum(isinstance(message, OnComplete) for message in decoder)
            answers = []
            for write in counter.writes:
                decoder.feed(write)
                answers.append(sum(isinstance(message, OnComplete) for message in decoder))
            assert sum(answers) == 100
            assert len([count for count in answers if count]) >= 2
            assert next(count for count in answers if count) in (31, 63)
            await client_stream.send_all(encode(Goodbye(reason="bye")))
            await server.wait_closed()


# ---- the router's own publisher: $publishers ------------------------------------


def test_paths_starting_with_dollar_are_reserved() -> None:
    router = rstreams.Router()
    for path in ("$publishers", "$mine"):
        with pytest.raises(ValueError, match="reserved"):
            router.add(path, range_publisher_for_listing)
    with pytest.raises(ValueError, match="reserved"):
        rstreams.Router({"$x": range_publisher_for_listing})
    assert router.paths == []


async def range_publisher_for_listing(sink: rstreams.Sink) -> None:
    await sink.send(b"x")


async def test_publishers_lists_every_route_and_topic(connect) -> None:
    app = standard_app()
    app.add("fixed", range_publisher_for_listing, element_size=1)
    rstreams.Topic("chat").mount(app)
    with trio.fail_after(10):
        async with connect(app) as (client, server):
            records = await client.fetch("$publishers", 100, codec="json")
            assert records == [
                {"name": "blob", "kind": "publisher", "element_size": 0},
                {"name": "chat", "kind": "topic", "element_size": 0},
                {"name": "chat/publish", "kind": "topic publishing", "element_size": 0},
                {"name": "fixed", "kind": "publisher", "element_size": 1},
                {"name": "range", "kind": "publisher", "element_size": 0},
            ]
            # Demand-driven like any publisher: one at a time if asked so.
            async with client.subscribe("$publishers", prefetch=1, codec="json") as listing:
                assert [record["name"] async for record in listing] == ["blob", "chat", "chat/publish", "fixed", "range"]


async def test_publishers_are_listed_once_per_change_of_the_routes(connect) -> None:
    # Sorting every route per subscribe was 8 ms among 20,000 routes, even
    # for a stream cancelled at once: the listing is made once, and again
    # only after a route is added or removed.
    app = rstreams.Router({"b": range_publisher_for_listing, "a": range_publisher_for_listing})
    with trio.fail_after(10):
        async with connect(app) as (client, server):
            names = lambda records: [record["name"] for record in records]  # noqa: E731
            assert names(await client.fetch("$publishers", 100, codec="json")) == ["a", "b"]
            listing = app._listing
            assert names(await client.fetch("$publishers", 100, codec="json")) == ["a", "b"]
            assert app._listing is listing  # (not made again)
            app.add("c", range_publisher_for_listing)
            assert names(await client.fetch("$publishers", 100, codec="json")) == ["a", "b", "c"]
            app.remove("a")
            app.remove("nothing")  # (nothing to remove)
            assert names(await client.fetch("$publishers", 100, codec="json")) == ["b", "c"]
            with pytest.raises(rstreams.UnknownPublisher):
                await client.fetch("a", 1)


async def test_an_unknown_name_is_answered_with_the_closest_paths(connect) -> None:
    app = rstreams.Router({path: range_publisher_for_listing for path in ("ticker", "tickets", "range", "chat")})
    with trio.fail_after(10):
        async with connect(app) as (client, server):
            with pytest.raises(rstreams.UnknownPublisher) as info:
                await client.fetch("tickr?interval=1", 1)
            assert info.value.name == "tickr?interval=1"
            assert info.value.message == "no such publisher: tickr?interval=1 (closest: ticker, tickets)"
            with pytest.raises(rstreams.UnknownPublisher) as info:
                await client.fetch("zzz", 1)
            assert info.value.message == "no such publisher: zzz"


async def test_suggestions_stop_for_long_names_and_beyond_their_budget(connect) -> None:
    # Matching a name with every route is the server's courtesy: among 1,000
    # routes a 21-character typo takes 34 ms, so a peer repeating typos must
    # not buy the core with it. A timer that moves 10 ms each time it is
    # read makes each suggestion cost exactly that.
    app = rstreams.Router({path: range_publisher_for_listing for path in ("ticker", "tickets")})
    ticks, now = iter(range(10_000)), [0.0]
    app._suggestions = CpuBudget(0.015, 0.01, clock=lambda: now[0], timer=lambda: next(ticks) / 100)
    with_closest = "no such publisher: tickr (closest: ticker, tickets)"
    with trio.fail_after(10):
        async with connect(app) as (client, server):
            long_name = "tickr" + "r" * rstreams._publish.MAX_PATH_TO_SUGGEST
            with pytest.raises(rstreams.UnknownPublisher) as info:
                await client.fetch(long_name, 1)
            assert info.value.message == f"no such publisher: {long_name}"  # (and nothing spent)
            messages = []
            for _ in range(3):
                with pytest.raises(rstreams.UnknownPublisher) as info:
                    await client.fetch("tickr", 1)
                messages.append(info.value.message)
            # 15 ms of budget: two suggestions (the second overdraws), then none.
            assert messages == [with_closest, with_closest, "no such publisher: tickr"]
            now[0] += 1.0  # 10 ms refilled: 5 ms above 0
            with pytest.raises(rstreams.UnknownPublisher) as info:
                await client.fetch("tickr", 1)
            assert info.value.message == with_closest
    # The application's own call is not budgeted.
    assert app.closest_paths("tickr") == ["ticker", "tickets"]


async def test_ping_completes_at_once_with_nothing(connect) -> None:
    with trio.fail_after(10):
        async with connect(rstreams.Router()) as (client, server):
            assert await client.fetch("$ping", 1) == []
            # Reserved names are answered only for the reserved paths.
            with pytest.raises(rstreams.UnknownPublisher):
                await client.fetch("$pong", 1)


# ---- what a publisher name holds (SubscribeRequest.name_memory) -------------


def _held_by(name: str) -> int:
    """The bytes the name and its parse hold, object by object (a shared
    object, such as a one-character str, once)."""
    path, params = rstreams.SubscribeRequest.parse_name(name)
    held = dict(params)  # (the dict under the read-only view, as the parse made it)
    objects = {id(o): o for o in (name, path, *held.keys(), *held.values())}
    return sum(sys.getsizeof(o) for o in objects.values()) + sys.getsizeof(held)


_NAME_PIECES = hypothesis.strategies.sampled_from(["&", "=", "%41", "%F0%9F%98%80", "+", "?", "a", "k1", "é", "\U0001f600", ":", "#"])


@hypothesis.settings(max_examples=300, deadline=None)
@hypothesis.given(
    name=hypothesis.strategies.lists(_NAME_PIECES | hypothesis.strategies.text(max_size=12), max_size=400).map("".join)
)
def test_name_memory_is_never_less_than_what_a_name_holds(name: str) -> None:
    # The session charges a peer's name by this bound, in O(1): it must
    # never be below what the name and its parse hold.
    _, params = rstreams.SubscribeRequest.parse_name(name)
    assert rstreams.SubscribeRequest.name_memory(name, params) >= _held_by(name)


@pytest.mark.parametrize(
    "name",
    [
        "x?" + "&".join(f"k{i}=v{i}" for i in range(MAX_NAME_PARAMETERS)),  # the most parameters
        "x?" + "&".join(str(i) for i in range(MAX_NAME_PARAMETERS)),  # keys only
        "x?" + "&".join(chr(0x10000 + i) for i in range(MAX_NAME_PARAMETERS)),  # wide keys
        "x?" + "&".join(f"k{i}=%41" for i in range(MAX_NAME_PARAMETERS)),  # percent-decoded values
        "x?a=%F0%9F%98%80" + "b" * 40000,  # one value made four times wider
        "p" * 60000,  # a long path
    ],
    ids=["params", "keys", "wide-keys", "decoded", "widened", "path"],
)
def test_name_memory_bounds_the_worst_names(name: str) -> None:
    # Shapes that hold the most for their length, each well within the
    # protocol's 64 KiB string; the bound is within three times the truth.
    _, params = rstreams.SubscribeRequest.parse_name(name)
    held = _held_by(name)
    assert held <= rstreams.SubscribeRequest.name_memory(name, params) <= 3 * held


async def test_a_name_of_too_many_parameters_is_refused_without_parsing_them(connect) -> None:
    # 5,600 percent-decoded parameters in a 60 KB name took the parse 17 ms,
    # one step of the run loop per subscribe: a name has at most
    # MAX_NAME_PARAMETERS, and the refusal does not repeat the name.
    app = rstreams.Router({"x": range_publisher_for_listing})
    most = "x?" + "&".join(f"k{i}=%41" for i in range(MAX_NAME_PARAMETERS))
    with pytest.raises(TooManyParameters):
        rstreams.SubscribeRequest.parse_name(most + "&k=%41")
    with trio.fail_after(10):
        async with connect(app) as (client, server):
            with pytest.raises(rstreams.PublisherError) as info:
                await client.fetch(most + "&one=more", 1)
            assert info.value.message == f"bad publisher name: more than {MAX_NAME_PARAMETERS} parameters"
            assert await client.fetch(most, 1) == [b"x"]  # (the most is served)
            assert not client.closed


def test_an_ordinary_name_is_within_the_streams_nominal_cost() -> None:
    # The name the nominal cost was measured with is covered by it.
    name = "range?count=1000000000"
    _, params = rstreams.SubscribeRequest.parse_name(name)
    assert rstreams.SubscribeRequest.name_memory(name, params) <= rstreams.NAME_MEMORY_ALLOWANCE


async def test_an_unknown_name_of_the_largest_size_is_answered_and_the_session_stays(connect) -> None:
    # "no such publisher: " + a 65,535-character name was longer than the
    # string limit: the client's decoder refused the onError and closed the
    # session. The text is cut to fit; the name is the subscriber's own.
    with trio.fail_after(10):
        async with connect(rstreams.Router()) as (client, server):
            name = "x" * 65_535
            with pytest.raises(rstreams.UnknownPublisher) as info:
                await client.fetch(name, 1)
            assert info.value.name == name and info.value.message.endswith("... (cut)")
            assert await client.fetch("$ping", 1) == []  # (the session goes on)
