"""rstreams.run / PreciseClock: trio's timers, woken by a timerfd on Linux.

Each test runs its own trio run (with the clock under test), so they are
plain functions; each bounds itself with ``trio.fail_after``.
"""

from __future__ import annotations

import os
import random
import sys

import pytest
import trio
import trio.testing

import rstreams
from rstreams import _timers
from rstreams.cli._common import run_command

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="timerfd is Linux's")


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@linux_only
def test_a_sleep_shorter_than_a_millisecond_is_ended_by_the_timer_not_by_epolls_timeout() -> None:
    clock = rstreams.PreciseClock()

    async def main() -> None:
        trio.lowlevel.spawn_system_task(clock.watch)
        with trio.fail_after(10):
            await trio.testing.wait_all_tasks_blocked()
            assert clock.precise
            for _ in range(20):
                # epoll's timeout for this is a whole millisecond: only the
                # timerfd, set to the deadline, ends the wait before it.
                await trio.sleep(0.0003)
            await trio.testing.wait_all_tasks_blocked()
        assert clock.fired >= 20

    trio.run(main, clock=clock)


@linux_only
def test_deadlines_never_end_early_and_each_costs_one_wake_up_at_most() -> None:
    # The timerfd is set a little after each deadline: once it fires, the
    # clock reads the deadline as passed. Set at or before it, the float
    # rounding of the two clocks could leave the deadline pending, and the
    # clock would set the timerfd again, already expired: wake-ups over and
    # over until the deadline passed.
    rng = random.Random(32)
    clock = rstreams.PreciseClock()
    waits = 0

    async def main() -> None:
        nonlocal waits
        trio.lowlevel.spawn_system_task(clock.watch)
        with trio.fail_after(10):
            for _ in range(200):
                deadline = trio.current_time() + rng.choice([0.0, 1e-6, 5e-5, 2e-4, 7e-4, 1.3e-3])
                await trio.sleep_until(deadline)
                assert trio.current_time() >= deadline
                with trio.move_on_at(trio.current_time() + rng.choice([1e-5, 3e-4])) as scope:
                    await trio.sleep_forever()
                assert scope.cancelled_caught
                waits += 2

    trio.run(main, clock=clock)
    assert 0 < clock.fired <= waits


def test_run_is_trio_run_with_the_clock_watched_and_returns_what_the_function_returns() -> None:
    seen: list[object] = []

    async def main(a: int, b: int) -> int:
        await trio.sleep(0.0002)
        clock = trio.lowlevel.current_clock()
        seen.append(clock)
        return a + b

    before = _open_fds()
    assert rstreams.run(main, 2, 3) == 5
    [clock] = seen
    assert isinstance(clock, rstreams.PreciseClock)
    # The watcher stopped with the run and closed its timerfd.
    assert not clock.precise and _open_fds() == before


def test_without_a_timerfd_the_clock_is_trios_own(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_timers, "_timerfd_or_none", lambda: None)
    clock = rstreams.PreciseClock()

    async def main() -> None:
        trio.lowlevel.spawn_system_task(clock.watch)
        with trio.fail_after(10):
            await trio.testing.wait_all_tasks_blocked()
            assert not clock.precise
            start = trio.current_time()
            await trio.sleep(0.002)
            assert trio.current_time() >= start + 0.002

    trio.run(main, clock=clock)
    assert clock.fired == 0


@linux_only
def test_watch_runs_once_per_clock() -> None:
    clock = rstreams.PreciseClock()

    async def main() -> None:
        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(clock.watch)
                await trio.testing.wait_all_tasks_blocked()
                with pytest.raises(RuntimeError, match="already running"):
                    await clock.watch()
                nursery.cancel_scope.cancel()
        assert not clock.precise

    trio.run(main, clock=clock)


def test_the_rstreams_command_runs_with_the_precise_clock() -> None:
    clocks: list[object] = []

    async def command() -> int:
        await trio.sleep(0)
        clocks.append(trio.lowlevel.current_clock())
        return 0

    assert run_command(command) == 0
    assert isinstance(clocks[0], rstreams.PreciseClock)
