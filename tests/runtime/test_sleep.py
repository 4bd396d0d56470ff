"""rstreams.sleep_until / rstreams.sleep: a paced loop's sleeps on a timerfd
of the sleeping task's own, without trio's cancel scope.

Each test runs its own trio run (the timers lent to sleepers last as long as
the run): the ones that need a run of their own make (a mock clock, say)
are plain functions calling ``trio.run``; the paced publishers over TCP are
async tests on the suite's ``connect`` fixture, which pytest-trio runs the
same way. Each bounds itself with ``trio.fail_after`` (real time) or
pytest-timeout (under a mock clock).
"""

from __future__ import annotations

import math
import os
import random
import sys
import time
from typing import Any

import pytest
import trio
import trio.testing

import rstreams
from rstreams import _timers

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="timerfd is Linux's")


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _lent_timers() -> Any:
    """The current run's timers for sleepers (None: none to be had)."""
    return _timers._SLEEP_TIMERS.get()


def _trio_sleep_forbidden(monkeypatch: pytest.MonkeyPatch) -> None:
    # Every sleep below must be one of the timerfd's: falling back to trio's
    # own would pass every other assertion.
    def forbidden(deadline: float) -> None:
        raise AssertionError("fell back to trio.sleep_until")

    monkeypatch.setattr(trio, "sleep_until", forbidden)


@linux_only
def test_short_sleeps_wait_on_a_timerfd_and_never_end_before_their_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(34)
    _trio_sleep_forbidden(monkeypatch)

    async def main() -> None:
        with trio.fail_after(10):
            for _ in range(200):
                deadline = trio.current_time() + rng.choice([1e-6, 2e-5, 1e-4, 3e-4, 1.2e-3])
                await rstreams.sleep_until(deadline)
                # trio's clock reads the deadline as passed, as after trio.sleep_until.
                assert trio.current_time() >= deadline
            await rstreams.sleep(0.0002)
            # One timer served every sleep, one after another, and is kept.
            timers = _lent_timers()
            assert timers.lent == 0 and len(timers.free) == 1
            # Without the precise timers: the sleeps need no instrument.
            assert _timers._PRECISE_TIMERS.get(None) is None

    trio.run(main)


@linux_only
def test_a_deadline_already_past_is_one_checkpoint() -> None:
    async def main() -> None:
        with trio.fail_after(10):
            with trio.testing.assert_checkpoints():
                await rstreams.sleep_until(trio.current_time() - 1)
            with trio.testing.assert_checkpoints():
                await rstreams.sleep(0)
            with trio.CancelScope() as scope:
                scope.cancel()
                with pytest.raises(trio.Cancelled):
                    await rstreams.sleep_until(trio.current_time() - 1)
            # No timer was needed for any of them.
            with pytest.raises(LookupError):
                _lent_timers()

    trio.run(main)


@linux_only
def test_a_sleeper_cancelled_by_its_scope_gives_its_timer_back_and_the_next_sleep_waits_in_full() -> None:
    async def main() -> None:
        with trio.fail_after(10):
            with trio.move_on_after(0.001) as scope:  # (trio's timers end the scope)
                await rstreams.sleep(0.5)
            assert scope.cancelled_caught
            timers = _lent_timers()
            assert timers.lent == 0 and len(timers.free) == 1
            # The timer it gave back is left to fire unread; setting it for
            # the next sleeper must forget that expiry, or the sleep would
            # end at once.
            timers.free[0].fire_at(time.perf_counter() - 1)
            deadline = trio.current_time() + 0.02
            await rstreams.sleep_until(deadline)
            assert trio.current_time() >= deadline

    trio.run(main)


@linux_only
def test_tasks_sleeping_at_once_take_a_timer_each_up_to_the_bound_then_trios(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_timers, "MAX_SLEEP_TIMERS", 3)
    trio_sleeps = 0
    real_sleep_until = trio.sleep_until

    async def counted_sleep_until(deadline: float) -> None:
        nonlocal trio_sleeps
        trio_sleeps += 1
        await real_sleep_until(deadline)

    monkeypatch.setattr(trio, "sleep_until", counted_sleep_until)
    woken: list[bool] = []

    async def sleeper(deadline: float) -> None:
        await rstreams.sleep_until(deadline)
        woken.append(trio.current_time() >= deadline)

    before_run = _open_fds()

    async def main() -> None:
        with trio.fail_after(10):
            before = _open_fds()  # (the run's own are open)
            deadline = trio.current_time() + 0.05
            async with trio.open_nursery() as nursery:
                for _ in range(10):
                    nursery.start_soon(sleeper, deadline)
                await trio.testing.wait_all_tasks_blocked()
                timers = _lent_timers()
                assert timers.lent == 3 and not timers.free
                assert _open_fds() == before + 3
            assert woken == [True] * 10 and trio_sleeps == 7
            assert timers.lent == 0 and len(timers.free) == 3

    trio.run(main)
    # The run's end closed them.
    assert _open_fds() == before_run


@linux_only
def test_a_timerfd_that_cannot_be_made_once_makes_that_sleep_trios_and_only_that_one(monkeypatch: pytest.MonkeyPatch) -> None:
    # Out of file descriptors, say: on a machine that made one before, the
    # failure passes, and the sleeps after it get their timers again.
    real_timerfd_or_none = _timers._timerfd_or_none

    async def main() -> None:
        with trio.fail_after(10):
            await rstreams.sleep(0.0001)
            timers = _lent_timers()
            monkeypatch.setattr(_timers, "_timerfd_or_none", lambda: None)
            async with trio.open_nursery() as nursery:
                for _ in range(2):
                    nursery.start_soon(rstreams.sleep, 0.01)
                await trio.testing.wait_all_tasks_blocked()
                # One took the pooled timer, the other sleeps with trio's.
                assert timers.lent == 1 and not timers.closed
            monkeypatch.setattr(_timers, "_timerfd_or_none", real_timerfd_or_none)
            async with trio.open_nursery() as nursery:
                for _ in range(2):
                    nursery.start_soon(rstreams.sleep, 0.01)
                await trio.testing.wait_all_tasks_blocked()
                assert timers.lent == 2
            assert len(timers.free) == 2

    trio.run(main)


@linux_only
def test_a_sleep_of_a_second_or_more_is_left_to_trio() -> None:
    async def main() -> None:
        with trio.fail_after(10):
            await rstreams.sleep(0.0001)  # (the run's timers exist)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(rstreams.sleep, 5.0)
                await trio.testing.wait_all_tasks_blocked()
                timers = _lent_timers()
                assert timers.lent == 0 and len(timers.free) == 1
                nursery.cancel_scope.cancel()

    trio.run(main)


@pytest.mark.timeout(20)
def test_a_mock_clock_keeps_trios_sleeps() -> None:
    # A timerfd counts real time: under a mock clock the sleep must be
    # trio's, for autojump to end it. (Bounded in real time by
    # pytest-timeout: the mock clock's fail_after would not see a hang.)
    async def main() -> None:
        start = trio.current_time()
        await rstreams.sleep(3600)
        await rstreams.sleep_until(trio.current_time() + 0.0005)
        assert trio.current_time() >= start + 3600.0005
        assert _lent_timers() is None

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


def test_without_a_timerfd_sleeps_are_trios(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_timers, "_timerfd_or_none", lambda: None)

    async def main() -> None:
        with trio.fail_after(10):
            for _ in range(3):
                deadline = trio.current_time() + 0.002
                await rstreams.sleep_until(deadline)
                assert trio.current_time() >= deadline
            timers = _lent_timers()
            assert timers is None or (timers.closed and timers.lent == 0 and not timers.free)

    trio.run(main)


def test_a_negative_or_undefined_duration_is_refused_as_trio_refuses_it() -> None:
    async def main() -> None:
        with pytest.raises(ValueError):
            await rstreams.sleep(-1)
        with pytest.raises(ValueError):
            await trio.sleep(math.nan)
        with pytest.raises(ValueError):
            await rstreams.sleep(math.nan)

    trio.run(main)


# ---- publishers paced by rstreams.sleep_until, over a real socket -----------------
#
# Async tests on the suite's ``connect`` fixture (conftest.py), over TCP
# only: the sleep is the publisher's, whatever carries its elements. Each
# runs in its own trio run, as the plain tests above do, so the timers the
# run lends are these tests' alone.


def _record_trio_sleeps(monkeypatch: pytest.MonkeyPatch) -> list[trio.lowlevel.Task]:
    """The tasks that fall back to ``trio.sleep_until`` (the session's own
    timers may use it; a paced publisher must not)."""
    sleepers: list[trio.lowlevel.Task] = []
    original = trio.sleep_until

    async def recording(deadline: float) -> None:
        sleepers.append(trio.lowlevel.current_task())
        await original(deadline)

    monkeypatch.setattr(trio, "sleep_until", recording)
    return sleepers


@linux_only
@pytest.mark.parametrize("transport", ["tcp"])
async def test_a_publisher_paced_by_sleep_until_sends_every_element_in_order_and_none_early_over_tcp(
    connect: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # What the benchmark's paced publishers do, end to end: every element
    # arrives, in order, and none was sent before its deadline (the
    # publisher's own reading of trio's clock, sent with the element).
    trio_sleepers = _record_trio_sleeps(monkeypatch)
    count, rate = 200, 2000.0
    waits = 0  # sleeps whose deadline was still ahead (on a busy machine, maybe none)
    publisher_tasks: list[trio.lowlevel.Task] = []

    async def paced(sink: rstreams.Sink, request: rstreams.SubscribeRequest) -> None:
        nonlocal waits
        publisher_tasks.append(trio.lowlevel.current_task())
        start = trio.current_time()
        for index in range(count):
            deadline = start + index / rate
            waits += deadline > trio.current_time()
            await rstreams.sleep_until(deadline)
            lateness_ns = round((trio.current_time() - deadline) * 1e9)
            await sink.send(index.to_bytes(4, "big") + lateness_ns.to_bytes(8, "big", signed=True))

    app = rstreams.Router()
    app.add("paced", paced)
    with trio.fail_after(20):
        async with connect(server_app=app) as (client, _):
            async with client.subscribe("paced") as subscription:
                received = [element async for element in subscription]
    assert [int.from_bytes(e[:4], "big") for e in received] == list(range(count))
    assert min(int.from_bytes(e[4:], "big", signed=True) for e in received) >= 0
    if waits:
        # The run lent the publisher a timerfd and has it back.
        timers = _lent_timers()
        assert timers is not None and timers.lent == 0 and len(timers.free) >= 1
    [publisher] = publisher_tasks
    assert publisher not in trio_sleepers


@linux_only
@pytest.mark.parametrize("transport", ["tcp"])
async def test_a_subscriber_cancelling_while_its_publisher_sleeps_ends_the_sleep_and_the_timer_goes_back(
    connect: Any,
) -> None:
    # A publisher asleep on a timerfd for most of a second is cancelled by
    # the subscriber's cancel: the sleep ends then, before its deadline
    # (nothing waits for the timer), the timer is back in the pool, and the
    # next stream on the same session, paced the same way, runs on it.
    ended: list[trio.Event] = []
    woke_at: list[tuple[float, float]] = []  # (the sleep's deadline, when it ended)

    async def slow(sink: rstreams.Sink, request: rstreams.SubscribeRequest) -> None:
        done = trio.Event()
        ended.append(done)
        try:
            for index in range(request.int_param("count", 3)):
                await sink.send(index.to_bytes(4, "big"))
                deadline = trio.current_time() + request.float_param("gap", 0.95)
                try:
                    await rstreams.sleep_until(deadline)
                finally:
                    woke_at.append((deadline, trio.current_time()))
        finally:
            done.set()

    app = rstreams.Router()
    app.add("slow", slow)
    with trio.fail_after(20):
        async with connect(server_app=app) as (client, _):
            async with client.subscribe("slow?gap=0.95&count=3") as subscription:
                async for element in subscription:
                    assert element == bytes(4)
                    break  # (the publisher is now asleep until its next element)
            await ended[0].wait()
            # The cancel ended the sleep, not the timer.
            [(deadline, woke)] = woke_at
            assert woke < deadline
            timers = _lent_timers()
            assert timers.lent == 0 and len(timers.free) == 1
            # The next paced stream takes the same timer.
            async with client.subscribe("slow?gap=0.001&count=4") as subscription:
                elements = [element async for element in subscription]
            assert elements == [i.to_bytes(4, "big") for i in range(4)]
            assert timers.lent == 0 and len(timers.free) == 1
