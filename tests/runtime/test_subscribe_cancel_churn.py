"""A peer that subscribes and cancels at once, again and again, over TCP.

Each subscribe to an ``async def`` publisher starts a task; the peer's cancel
cancels it, but the task lives until it next runs, with its coroutine frames
and its sink. The connection's budget charges ``STREAM_MEMORY_COST`` per
open stream, and a cancelled stream keeps counting until its task has
finished (``SessionStatistics.publications_stopping``): otherwise each pair
was charged nothing while its task lived, and a peer sending 100,000 pairs
in 1.3 s held 100,000 tasks (260 MB for a 1 MiB budget) and froze the
server's event loop for 11 s, one read's subscribes all dispatched in one
step of the reader.

Checked after every step of every task (a trio instrument), with a 1 MiB
budget, whose streams' share admits 64 streams:

* live publisher tasks never exceed what the session counts, nor the
  budget's 64 streams;
* one step of the reader starts at most those 64 tasks (it lets the writer,
  and every other task, run within every 32 events that left answers);
* a subscribe that finds the share full of cancelled streams whose tasks
  have not finished waits for them, rather than being refused: the reader
  stops taking in that read and the rest waits in the kernel's buffers,
  while other connections are served;
* afterwards everything is released.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import TypeVar

import msgpack
import trio
import trio.testing

import rstreams
from rstreams import STREAM_MEMORY_COST
from rstreams.protocol import OnComplete, OnError, Subscribed

from ._support import (
    RawPeer,
    fetch_range,
    new_session,
    standard_app,
    wait_for,
    wait_no_session_tasks,
)

_pack = msgpack.Packer(use_bin_type=True).pack
T = TypeVar("T")
KiB = 1024
BUDGET = 1024 * KiB
HALF = BUDGET // 2
#: The streams a 1 MiB budget admits: three quarters of the outbound half.
STREAMS = HALF * 3 // 4 // STREAM_MEMORY_COST
CONFIG = rstreams.SessionConfig.for_connection_memory(BUDGET)


async def endless(sink: rstreams.Sink, request: rstreams.SubscribeRequest) -> None:
    """Sends nothing and never ends, like a ticker between two ticks."""
    await trio.sleep_forever()


def churn(publisher: str, pairs: int, demand: int = 1) -> bytes:
    """``pairs`` subscribes to ``publisher``, each followed by its cancel."""
    return b"".join(_pack([1, publisher, i, demand]) + _pack([3, i]) for i in range(1, pairs + 1))


class Watch(trio.abc.Instrument):
    """After every task step: live publisher tasks of one route, what the
    server's sessions count of their streams (the most one session
    counts, and all of them together), and how many publisher
    tasks one step started. Violations are collected (an instrument that
    raises is only disabled)."""

    def __init__(self, server: rstreams.Server, route: str) -> None:
        self.server = server
        self.prefix = f"publisher {route}"
        self.live = 0
        self.peak_live = 0
        self.started_in_step = 0
        self.peak_started_in_step = 0
        self.peak_counted = 0
        self.peak_outbound = 0
        self.violations: list[str] = []

    def task_spawned(self, task: trio.lowlevel.Task) -> None:
        if task.name.startswith(self.prefix):
            self.live += 1
            self.started_in_step += 1

    def task_exited(self, task: trio.lowlevel.Task) -> None:
        if task.name.startswith(self.prefix):
            self.live -= 1

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self.started_in_step = 0

    def after_task_step(self, task: trio.lowlevel.Task) -> None:
        self.peak_live = max(self.peak_live, self.live)
        self.peak_started_in_step = max(self.peak_started_in_step, self.started_in_step)
        counted = 0
        for session in self.server.sessions:
            stats = session.statistics()
            streams = stats.publications + stats.publications_stopping
            counted += streams
            self.peak_counted = max(self.peak_counted, streams)
            self.peak_outbound = max(self.peak_outbound, stats.outbound_bytes)
        if self.live > counted and len(self.violations) < 5:
            self.violations.append(f"{self.live} live publisher tasks, {counted} streams counted (after {task.name})")


@asynccontextmanager
async def serving(app: rstreams.Router) -> AsyncIterator[tuple[rstreams.Server, int, Watch]]:
    server = rstreams.Server(app, config=CONFIG)
    watch = Watch(server, "endless")
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(server.serve_tcp, "127.0.0.1", 0)
        trio.lowlevel.add_instrument(watch)
        try:
            yield server, rstreams.listener_port(listeners[0]), watch
        finally:
            trio.lowlevel.remove_instrument(watch)
            nursery.cancel_scope.cancel()


async def raw_peer(port: int) -> RawPeer:
    peer = RawPeer(await trio.open_tcp_stream("127.0.0.1", port))
    await peer.handshake()
    return peer


class Answers:
    """The churning peer's reading side: counts each kind of answer."""

    def __init__(self, peer: RawPeer) -> None:
        self.peer = peer
        self.subscribed = 0
        self.completed = 0
        self.refused: list[OnError] = []
        self.other: list[object] = []

    async def read(self) -> None:
        while True:
            message = await self.peer.receive()
            if isinstance(message, Subscribed):
                self.subscribed += 1
            elif isinstance(message, OnError):
                self.refused.append(message)
            elif isinstance(message, OnComplete):
                self.completed += 1
            else:
                self.other.append(message)


async def wait_until_stuck(value: Callable[[], T]) -> T:
    """``value()`` once it stops changing with every task blocked."""
    previous = value()
    unchanged = 0
    while unchanged < 5:
        await trio.testing.wait_all_tasks_blocked(cushion=0.01)
        current = value()
        unchanged = unchanged + 1 if current == previous else 0
        previous = current
    return previous


@contextmanager
def opened_on_exit(gate: trio.Event) -> Iterator[None]:
    # Whatever happens, the publishers slow to stop can stop in the end
    # (entered inside the server's nursery, which waits for them), so that
    # a failing test ends and says why.
    try:
        yield
    finally:
        gate.set()


def released(session: rstreams.Session) -> bool:
    stats = session.statistics()
    return (
        stats.publications == 0
        and stats.publications_stopping == 0
        and stats.outbound_bytes == 0
        and stats.inbound_bytes == 0
    )


async def test_a_churn_of_subscribe_and_cancel_stays_within_the_budget() -> None:
    pairs = 3000
    with trio.fail_after(30):
        async with serving(standard_app(endless=endless)) as (server, port, watch):
            peer = await raw_peer(port)
            session = await new_session(server)
            answers = Answers(peer)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(answers.read)
                await peer.send_raw(churn("endless", pairs))
                await wait_for(lambda: answers.subscribed + len(answers.refused) == pairs)
                await wait_for(lambda: watch.live == 0 and released(session))
                nursery.cancel_scope.cancel()
            # Every pair was served: the streams still stopping made the
            # reader wait, never refuse.
            assert answers.refused == [] and answers.other == []
            assert watch.violations == []
            assert watch.peak_live <= STREAMS, watch.peak_live
            assert watch.peak_counted <= STREAMS, watch.peak_counted
            assert watch.peak_started_in_step <= STREAMS, watch.peak_started_in_step
            assert watch.peak_outbound <= HALF, watch.peak_outbound
            # The session is as good as new: a normal stream is served.
            await peer.send_raw(_pack([1, "range?count=3", pairs + 1, 3]))
            await peer.receive_until(OnComplete)
            await peer.aclose()
            await session.wait_closed()
            await wait_no_session_tasks()
            assert released(session)


async def test_a_churn_waits_for_publishers_slow_to_stop_and_others_are_served() -> None:
    # Publishers that take their time to finish once cancelled (a cleanup
    # that waits): the first STREAMS pairs fill the share with streams
    # still stopping, and the next subscribe waits for them, neither
    # refused nor served, while another client is served at once.
    gate = trio.Event()

    async def slow_to_stop(sink: rstreams.Sink, request: rstreams.SubscribeRequest) -> None:
        try:
            await trio.sleep_forever()
        finally:
            with trio.CancelScope(shield=True):
                await gate.wait()

    pairs = STREAMS * 4
    with trio.fail_after(30):
        async with serving(standard_app(endless=slow_to_stop)) as (server, port, watch):
            with opened_on_exit(gate):
                peer = await raw_peer(port)
                session = await new_session(server)
                answers = Answers(peer)
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(answers.read)
                    await peer.send_raw(churn("endless", pairs))

                    def state() -> tuple[int, int, int, int]:
                        stats = session.statistics()
                        stopping = stats.publications_stopping
                        return answers.subscribed, len(answers.refused), watch.live, stopping

                    assert await wait_until_stuck(state) == (STREAMS, 0, STREAMS, STREAMS)
                    assert not session.closed
                    # Another connection is served meanwhile.
                    async with rstreams.open_session(f"tcp://127.0.0.1:{port}") as client:
                        await fetch_range(client, 5)
                    assert state() == (STREAMS, 0, STREAMS, STREAMS)
                    gate.set()
                    await wait_for(lambda: answers.subscribed + len(answers.refused) == pairs)
                    await wait_for(lambda: watch.live == 0 and released(session))
                    nursery.cancel_scope.cancel()
                assert answers.refused == [] and answers.other == []
                assert watch.violations == []
                assert watch.peak_live <= STREAMS, watch.peak_live
                assert watch.peak_counted <= STREAMS, watch.peak_counted
                assert watch.peak_outbound <= HALF, watch.peak_outbound
                await peer.aclose()
                await session.wait_closed()
                await wait_no_session_tasks()
                assert released(session)


async def test_streams_beyond_the_share_are_still_refused_beside_stopping_ones() -> None:
    # The wait is only for streams on their way out: with the share full of
    # open streams (and one stopping), a subscribe that would still not fit
    # once it has stopped is refused as usual, and the session stays.
    gate = trio.Event()

    async def slow_to_stop(sink: rstreams.Sink, request: rstreams.SubscribeRequest) -> None:
        try:
            await trio.sleep_forever()
        finally:
            with trio.CancelScope(shield=True):
                await gate.wait()

    with trio.fail_after(30):
        async with serving(standard_app(endless=slow_to_stop)) as (server, port, watch):
            with opened_on_exit(gate):
                peer = await raw_peer(port)
                session = await new_session(server)
                opened = b"".join(_pack([1, "endless", i, 0]) for i in range(1, STREAMS + 1))
                await peer.send_raw(opened + _pack([3, 1]) + _pack([1, "endless", STREAMS + 1, 0]))
                for _ in range(STREAMS):
                    await peer.expect(Subscribed)
                # The cancelled stream 1 has not stopped: STREAMS + 1 waits for it.
                stats = await wait_until_stuck(session.statistics)
                assert stats.publications == STREAMS - 1 and stats.publications_stopping == 1
                gate.set()
                answer = await peer.expect(Subscribed)
                assert isinstance(answer, Subscribed) and answer.subscriber == STREAMS + 1
                # Now the share is full of open streams: the next one is refused.
                await peer.send_raw(_pack([1, "endless", STREAMS + 2, 0]))
                refused = await peer.expect(OnError)
                assert isinstance(refused, OnError) and refused.error.startswith("memory budget exceeded: ")
                assert not session.closed
                await peer.aclose()
                await session.wait_closed()
                await wait_no_session_tasks()
                assert watch.live == 0 and released(session)


async def test_a_read_of_pairs_answered_at_once_yields_within_a_run() -> None:
    # Publishers that answer at once start no task, but a read of their
    # subscribe-and-cancel pairs was dispatched whole in one step of the
    # reader (a cancel ends the connection's batch of events, so batches
    # were two events long, and the reader counted per batch).
    calls = 0
    most = 0

    def at_once(sink: rstreams.Sink, request: rstreams.SubscribeRequest) -> None:
        nonlocal calls
        calls += 1
        sink.send_nowait(b"x")

    class Steps(trio.abc.Instrument):
        def before_task_step(self, task: trio.lowlevel.Task) -> None:
            nonlocal calls
            calls = 0

        def after_task_step(self, task: trio.lowlevel.Task) -> None:
            nonlocal most
            most = max(most, calls)

    pairs = 3000
    steps = Steps()
    with trio.fail_after(30):
        async with serving(standard_app(once=at_once)) as (server, port, _):
            peer = await raw_peer(port)
            session = await new_session(server)
            answers = Answers(peer)
            trio.lowlevel.add_instrument(steps)
            try:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(answers.read)
                    await peer.send_raw(churn("once", pairs))
                    # (Each cancel comes before the answer's element and
                    # onComplete have been written, and drops them.)
                    await wait_for(lambda: answers.subscribed == pairs)
                    nursery.cancel_scope.cancel()
            finally:
                trio.lowlevel.remove_instrument(steps)
            assert answers.subscribed == pairs and answers.refused == []
            assert 0 < most <= STREAMS, most
            await peer.aclose()
            await session.wait_closed()
            await wait_no_session_tasks()
