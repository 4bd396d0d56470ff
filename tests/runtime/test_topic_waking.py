"""Whom a topic's changes wake (``rstreams._topic``, "Waking").

Every change wakes only those it may let proceed: an append the readers of
its partition, room (a floor rising) the publishers, closing everyone. The
first test watches real sessions through trio's instrumentation: one
peer's subscribe/cancel churn and its replay, read one element at a time,
must not wake a crowd of idle subscribers (they had all been woken by each
cancel and each element taken). The state machine drives a topic directly
through every kind of change and checks both halves of the rule after each
step: nobody who could proceed is left waiting, and nobody whom the change
does not concern was woken.
"""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from types import CodeType
from typing import Any

import hypothesis
import hypothesis.strategies as st
import trio
import trio.testing
from hypothesis.stateful import Bundle, RuleBasedStateMachine, consumes, initialize, invariant, precondition, rule

import rstreams
from rstreams._publish import SubscribeRequest
from rstreams._topic_core import Cursor, CursorPolicy, decode_sequenced


class WakeCounter(trio.abc.Instrument):
    """How often each watched task was scheduled (woken, or back from a checkpoint)."""

    def __init__(self, tasks: set[trio.lowlevel.Task]) -> None:
        self.tasks = tasks
        self.woken: dict[trio.lowlevel.Task, int] = {}

    def task_scheduled(self, task: trio.lowlevel.Task) -> None:
        if task in self.tasks:
            self.woken[task] = self.woken.get(task, 0) + 1


def tasks_waiting_in(code: CodeType, unless: CodeType) -> set[trio.lowlevel.Task]:
    # Every task of this run whose await chain passes through ``code`` but
    # not through ``unless``.
    found = set()
    root = trio.lowlevel.current_root_task()
    assert root is not None
    stack = [root]
    while stack:
        task = stack.pop()
        codes = [frame.f_code for frame, _ in task.iter_await_frames()]
        if code in codes and unless not in codes:
            found.add(task)
        for nursery in task.child_nurseries:
            stack.extend(nursery.child_tasks)
    return found


def idle_topic_readers() -> set[trio.lowlevel.Task]:
    # The topic's readers that have demand and wait for an element.
    return tasks_waiting_in(rstreams.Topic._feed.__code__, unless=rstreams.Sink.wait_demand.__code__)


async def wait_until(predicate: Callable[[], bool]) -> None:
    while not predicate():
        await trio.sleep(0.005)


@asynccontextmanager
async def served(topic: rstreams.Topic) -> AsyncIterator[str]:
    app = rstreams.Router()
    topic.mount(app)
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(rstreams.serve_tcp, app, "127.0.0.1", 0)
        yield f"tcp://127.0.0.1:{rstreams.listener_port(listeners[0])}"
        nursery.cancel_scope.cancel()


async def test_churn_and_replay_wake_no_idle_subscriber() -> None:
    crowd, held, churn = 20, 30, 25
    topic = rstreams.Topic("chat", capacity=64)
    await topic.publish_many([b"old %d" % i for i in range(held)])
    with trio.fail_after(30):
        async with served(topic) as url, rstreams.open_session(url) as idle, rstreams.open_session(url) as peer:
            async with trio.open_nursery() as nursery:
                for _ in range(crowd):
                    nursery.start_soon(read_all, idle)
                await wait_until(lambda: len(idle_topic_readers()) == crowd)
                counter = WakeCounter(idle_topic_readers())
                trio.lowlevel.add_instrument(counter)
                try:
                    for _ in range(churn):
                        async with peer.subscribe("chat", prefetch=1):
                            await wait_until(lambda: len(topic.statistics().subscribers) == crowd + 1)
                        await wait_until(lambda: len(topic.statistics().subscribers) == crowd)
                    async with peer.subscribe("chat?from=0&until=now", prefetch=1) as replay:
                        replayed = [decode_sequenced(bytes(raw))[0] async for raw in replay]
                    assert replayed == list(range(held))
                    assert counter.woken == {}, f"{len(counter.woken)} idle subscribers woken"
                    # The instrument does see them wake when it concerns them.
                    await topic.publish(b"new")
                    await wait_until(lambda: len(idle_topic_readers()) == crowd)
                    assert set(counter.woken) == counter.tasks
                finally:
                    trio.lowlevel.remove_instrument(counter)
                nursery.cancel_scope.cancel()


async def read_all(session: rstreams.Session) -> None:
    async with session.subscribe("chat", prefetch=4) as subscription:
        async for _ in subscription:
            pass


# ---- the state machine ---------------------------------------------------------

PARTITIONS = 2
CAPACITY = 3


class FakeSink:
    """What ``Topic._serve_subscriber`` uses of a Sink, with demand granted by the test."""

    def __init__(self) -> None:
        self.demand = 0
        self.received: list[bytes] = []
        self._lot = trio.lowlevel.ParkingLot()

    def grant(self, count: int) -> None:
        self.demand += count
        self._lot.unpark_all()

    async def wait_demand(self) -> None:
        await trio.lowlevel.checkpoint_if_cancelled()
        while not self.demand:
            await self._lot.park()
        await trio.lowlevel.cancel_shielded_checkpoint()

    async def send_many(self, elements: list[bytes]) -> None:
        assert 0 < len(elements) <= self.demand
        self.demand -= len(elements)
        self.received.extend(elements)
        await trio.lowlevel.checkpoint()


@dataclass(eq=False)
class Reader:
    partition: int
    policy: CursorPolicy
    start: int | None  # None: from the next element, unframed
    sink: FakeSink = field(default_factory=FakeSink)
    scope: trio.CancelScope = field(default_factory=trio.CancelScope)
    task: trio.lowlevel.Task | None = None
    cursor: Cursor | None = None
    done: bool = False


@dataclass(eq=False)
class Publisher:
    partition: int
    task: trio.lowlevel.Task | None = None
    done: bool = False


class TrioThread:
    """A trio run in a thread of its own, that the (synchronous) state machine calls into."""

    def __init__(self) -> None:
        self._started = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        self._started.wait(10)

    def _run(self) -> None:
        try:
            trio.run(self._main)
        except BaseException as error:  # a task of the run failed: stop() raises it
            self._error = error
            self._started.set()

    async def _main(self) -> None:
        self.token = trio.lowlevel.current_trio_token()
        self.counter = WakeCounter(set())
        trio.lowlevel.add_instrument(self.counter)
        self._stop = trio.Event()
        async with trio.open_nursery() as nursery:
            self.nursery = nursery
            self._started.set()
            await self._stop.wait()
            nursery.cancel_scope.cancel()

    def call(self, function: Callable[[], Awaitable[Any]]) -> Any:
        async def bounded() -> Any:
            with trio.fail_after(10):
                return await function()

        return trio.from_thread.run(bounded, trio_token=self.token)

    def stop(self) -> None:
        async def stop() -> None:
            self._stop.set()

        if self._thread.is_alive():
            trio.from_thread.run(stop, trio_token=self.token)
        self._thread.join(10)
        assert not self._thread.is_alive()
        if self._error is not None:
            raise self._error


def blocking_floor(log: Any) -> int | None:
    # The lowest blocking cursor's position, counted afresh (None: none).
    return min((c.position for c in log.cursors if c.policy is CursorPolicy.BLOCK), default=None)


def risen(before: int | None, after: int | None) -> bool:
    # Room freed: the lowest blocking cursor moved on or left (with none
    # before, appends move the floor, which frees nothing).
    return before is not None and (after is None or after > before)


def value_for(partition: int, number: int) -> bytes:
    # The key function reads the partition back from the first byte.
    return bytes([partition]) + b"%d" % number


class TopicWaking(RuleBasedStateMachine):
    readers = Bundle("readers")

    def __init__(self) -> None:
        super().__init__()
        self.host = TrioThread()
        self.topic = rstreams.Topic("t", capacity=CAPACITY, partitions=PARTITIONS, key=lambda value: value[0])
        self.logs = self.topic._logs
        self.all_readers: list[Reader] = []
        self.publishers: dict[int, Publisher] = {}
        self.numbers = 0
        self.steps = 0

    def teardown(self) -> None:
        self.host.stop()

    # ---- one step: run it, let everything settle, see who was woken -----

    def step(self, change: Callable[[], Awaitable[None]], *, concerns: Reader | None = None) -> None:
        # Before: who waits (every task we started that has not ended).
        waiting = {r.task for r in self.live_readers()} | {p.task for p in self.publishers.values() if not p.done}
        ends = [log.next_sequence for log in self.logs]
        floors = [blocking_floor(log) for log in self.logs]
        was_closed = self.topic.closed
        self.steps += 1

        async def run() -> None:
            self.host.counter.woken.clear()
            self.host.counter.tasks = {task for task in waiting if task is not None}
            await change()
            await trio.testing.wait_all_tasks_blocked()

        self.host.call(run)
        woken = set(self.host.counter.woken)
        if self.topic.closed and not was_closed:
            return  # closing concerns everyone
        # After: a reader woken (other than the one the step was about) must
        # have had an element appended to its partition meanwhile...
        grown = {p for p, log in enumerate(self.logs) if log.next_sequence != ends[p]}
        for reader in self.all_readers:
            if reader.task in woken and reader is not concerns:
                assert reader.partition in grown, f"a {reader.policy.value} reader of partition {reader.partition} woken for nothing"
        # ... and a publisher woken, room freed: a floor risen.
        if not any(risen(floors[p], blocking_floor(log)) for p, log in enumerate(self.logs)):
            for publisher in self.publishers.values():
                assert publisher.task not in woken, "a publisher woken with no room freed"

    def live_readers(self) -> list[Reader]:
        return [r for r in self.all_readers if not r.done]

    # ---- rules ------------------------------------------------------------

    @initialize()
    def settle(self) -> None:
        self.step(trio.lowlevel.checkpoint)

    @rule(
        target=readers,
        partition=st.integers(0, PARTITIONS - 1),
        policy=st.sampled_from([CursorPolicy.BLOCK, CursorPolicy.BLOCK, CursorPolicy.DROP, CursorPolicy.LATEST]),
        start=st.sampled_from(["next", "earliest", "end"]),
    )
    def attach(self, partition: int, policy: CursorPolicy, start: str) -> Reader:
        log = self.logs[partition]
        params = {"policy": policy.value, "partition": str(partition)}
        first: int | None = None
        if start == "earliest":
            params["from"] = "earliest"
            first = log.first_sequence
        elif start == "end":
            params["from"] = str(log.next_sequence)
            first = log.next_sequence
        reader = Reader(partition, policy, first)
        request = SubscribeRequest(name="t", path="t", params=params, session=None)  # type: ignore[arg-type]
        before = set(log.cursors)

        async def serve() -> None:
            reader.task = trio.lowlevel.current_task()
            try:
                with reader.scope:
                    await self.topic._serve_subscriber(reader.sink, request)  # type: ignore[arg-type]
            finally:
                reader.done = True

        async def start_reader() -> None:
            self.host.nursery.start_soon(serve)

        self.step(start_reader)
        (reader.cursor,) = set(log.cursors) - before
        self.all_readers.append(reader)
        return reader

    @rule(reader=readers, count=st.integers(1, 4))
    def request(self, reader: Reader, count: int) -> None:
        async def grant() -> None:
            reader.sink.grant(count)

        self.step(grant, concerns=reader)

    @rule(reader=consumes(readers))
    def cancel(self, reader: Reader) -> None:
        async def cancel() -> None:
            reader.scope.cancel()

        self.step(cancel, concerns=reader)
        assert reader.done
        assert reader.cursor not in self.logs[reader.partition].cursors

    @rule(partition=st.integers(0, PARTITIONS - 1))
    def publish_nowait(self, partition: int) -> None:
        room = self.logs[partition].room()

        async def publish() -> None:
            try:
                self.topic.publish_nowait(value_for(partition, self.next_number()))
            except trio.WouldBlock:
                assert room == 0
            except trio.ClosedResourceError:
                assert self.topic.closed

        self.step(publish)

    @precondition(lambda self: len([p for p in self.publishers.values() if not p.done]) < PARTITIONS)
    @rule(partition=st.integers(0, PARTITIONS - 1), count=st.integers(1, 2 * CAPACITY))
    def publish_many(self, partition: int, count: int) -> None:
        if partition in self.publishers and not self.publishers[partition].done:
            return
        publisher = Publisher(partition)
        self.publishers[partition] = publisher
        values = [value_for(partition, self.next_number()) for _ in range(count)]

        async def publish() -> None:
            publisher.task = trio.lowlevel.current_task()
            try:
                await self.topic.publish_many(values)
            except trio.ClosedResourceError:
                pass
            finally:
                publisher.done = True

        async def start_publisher() -> None:
            self.host.nursery.start_soon(publish)

        self.step(start_publisher)

    @precondition(lambda self: self.steps >= 12)  # closing ends the interesting part: not too early
    @rule()
    def close(self) -> None:
        async def close() -> None:
            self.topic.close()

        self.step(close)

    def next_number(self) -> int:
        self.numbers += 1
        return self.numbers

    # ---- invariants: nobody who could proceed is left waiting ---------------

    @invariant()
    def readers_wait_only_for_what_is_not_there(self) -> None:
        for reader in self.live_readers():
            if reader.sink.demand:
                assert reader.cursor is not None
                assert not self.topic.closed, "a reader with demand still waits on a closed topic"
                assert self.logs[reader.partition].available(reader.cursor) == 0, "a reader waits while its elements are there"

    @invariant()
    def publishers_wait_only_for_room(self) -> None:
        for publisher in self.publishers.values():
            if not publisher.done:
                assert not self.topic.closed, "a publisher still waits on a closed topic"
                log = self.logs[publisher.partition]
                floor = blocking_floor(log)
                room = CAPACITY - (log.next_sequence - (log.next_sequence if floor is None else floor))
                assert room <= 0, "a publisher waits while there is room"

    @invariant()
    def readers_get_every_element_in_order(self) -> None:
        for reader in self.all_readers:
            if reader.start is None:
                continue
            sequences = [decode_sequenced(raw)[0] for raw in reader.sink.received]
            assert sequences == sorted(set(sequences))
            if reader.policy is CursorPolicy.BLOCK:
                assert sequences == list(range(reader.start, reader.start + len(sequences)))


TopicWaking.TestCase.settings = hypothesis.settings(
    max_examples=150, stateful_step_count=40, deadline=None, suppress_health_check=[hypothesis.HealthCheck.too_slow]
)
test_topic_waking = TopicWaking.TestCase
