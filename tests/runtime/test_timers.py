"""rstreams.use_precise_timers / rstreams.run: trio's waits, ended by a
timerfd on Linux.

Each test runs its own trio run (precise timers last as long as the run),
so they are plain functions; each bounds itself with ``trio.fail_after``.
"""

from __future__ import annotations

import os
import random
import sys
import time

import pytest
import trio
import trio.testing

import rstreams
from rstreams import _timers
from rstreams.cli._common import run_command

from ._support import standard_app

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="timerfd is Linux's")


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _installed() -> rstreams.PreciseTimers | None:
    """The current run's precise timers, without turning them on."""
    try:
        return _timers._PRECISE_TIMERS.get()
    except LookupError:
        return None


@linux_only
def test_a_sleep_shorter_than_a_millisecond_is_ended_by_the_timer_not_by_epolls_timeout() -> None:
    async def main() -> None:
        with trio.fail_after(10):
            timers = rstreams.use_precise_timers()
            assert timers is not None and timers.precise
            await trio.testing.wait_all_tasks_blocked()
            # epoll's timeout for these is a whole millisecond: only the
            # timerfd, set to the end of the wait, ends one before that. (A
            # sleep may find its deadline passed when the run loop gets to
            # it, on a busy machine, and need no timer: hence up to 200.)
            for _ in range(200):
                await trio.sleep(0.0003)
                await trio.testing.wait_all_tasks_blocked()  # (the watcher, woken with it)
                if timers.fired >= 20:
                    break
            assert timers.fired >= 20

    trio.run(main)


@linux_only
def test_deadlines_never_end_early_and_each_costs_one_wake_up_at_most() -> None:
    # The timerfd is set a little after the end of each wait: once it
    # fires, trio's clock reads the deadline as passed. Set at or before
    # it, the rounding of the two clock readings could leave the deadline
    # pending, and the instrument would set the timerfd again, already
    # expired: wake-ups over and over until the deadline passed.
    rng = random.Random(32)
    waits = 0

    async def main() -> None:
        nonlocal waits
        timers = rstreams.use_precise_timers()
        assert timers is not None
        with trio.fail_after(10):
            for _ in range(200):
                deadline = trio.current_time() + rng.choice([0.0, 1e-6, 5e-5, 2e-4, 7e-4, 1.3e-3])
                await trio.sleep_until(deadline)
                assert trio.current_time() >= deadline
                with trio.move_on_at(trio.current_time() + rng.choice([1e-5, 3e-4])) as scope:
                    await trio.sleep_forever()
                assert scope.cancelled_caught
                waits += 2
        assert 0 < timers.fired <= waits

    trio.run(main)


@linux_only
def test_the_timerfd_is_set_after_the_end_of_each_wait_once_per_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    # The instrument's arithmetic, on a clock of the test's own (no await
    # between the calls, so the run loop never waits in between).
    class Clock:
        now = time.perf_counter() + 10.0  # (the timerfd is really set: in the future)

        def perf_counter(self) -> float:
            return self.now

    async def main() -> None:
        timers = rstreams.use_precise_timers()
        assert timers is not None and timers._timer is not None
        real = timers._timer.fire_at
        set_to: list[float] = []

        def recording(monotonic: float) -> None:
            set_to.append(monotonic)
            real(monotonic)

        timers._timer.fire_at = recording  # type: ignore[method-assign]
        clock = Clock()
        monkeypatch.setattr(_timers, "time", clock)
        start = clock.now
        timers.before_io_wait(0.0002)
        # After the end of the wait, never before: when it fires, trio's
        # clock reads the deadline as passed.
        assert set_to == [pytest.approx(start + 0.0002, abs=2e-6)] and set_to[0] > start + 0.0002
        # I/O woke the run loop 3 µs later, and it waits for the same
        # deadline again (trio read its clock 0.4 µs before the instrument
        # does): the timerfd is left as set.
        clock.now += 3.4e-6
        timers.before_io_wait(0.0002 - 3e-6)
        assert len(set_to) == 1
        # An earlier deadline sets it anew; a wait for I/O only (0), or of
        # a second or more (epoll's own timeout), leaves it.
        timers.before_io_wait(0.0001)
        assert len(set_to) == 2 and set_to[1] > clock.now + 0.0001
        timers.before_io_wait(0.0)
        timers.before_io_wait(2.0)
        assert len(set_to) == 2

    trio.run(main)


@linux_only
def test_they_are_turned_on_once_per_run_and_end_with_it() -> None:
    seen: list[rstreams.PreciseTimers | None] = []

    async def main() -> None:
        first = rstreams.use_precise_timers()
        assert rstreams.use_precise_timers() is first
        seen.append(first)

    before = _open_fds()
    trio.run(main)
    trio.run(main)
    first, second = seen
    assert first is not None and second is not None and first is not second
    # The watcher stopped with its run and closed its timerfd.
    assert not first.precise and not second.precise and _open_fds() == before


def test_run_is_trio_run_with_precise_timers_from_the_start() -> None:
    seen: list[object] = []

    async def main(a: int, b: int) -> int:
        seen.append(_installed())
        await trio.sleep(0.0002)
        return a + b

    assert rstreams.run(main, 2, 3) == 5
    if sys.platform.startswith("linux"):
        assert isinstance(seen[0], rstreams.PreciseTimers)
    # trio.run's own options go through as they are.
    clock = trio.testing.MockClock(autojump_threshold=0)
    assert rstreams.run(main, 1, 1, clock=clock) == 2
    assert clock.current_time() >= 0.0002


@linux_only
@pytest.mark.timeout(20)
def test_trios_own_waits_for_idleness_still_end() -> None:
    # wait_all_tasks_blocked(cushion) and a mock clock's autojump are waits
    # of trio's own, which end only if nothing happens in them: a timerfd
    # set for them would fire, wake its watcher and start them over, for
    # ever. (Bounded in real time by pytest-timeout: the mock clock's
    # fail_after would not see a hang.)
    async def cushioned() -> None:
        timers = rstreams.use_precise_timers()
        assert timers is not None
        with trio.fail_after(10):
            for _ in range(3):
                await trio.testing.wait_all_tasks_blocked(cushion=0.02)
            await trio.sleep(0.0003)  # (a deadline's wait, once more on time)
            await trio.testing.wait_all_tasks_blocked()
            assert timers.fired >= 1

    async def autojumping() -> None:
        assert rstreams.use_precise_timers() is not None
        start = trio.current_time()
        await trio.sleep(3600)
        assert trio.current_time() >= start + 3600

    trio.run(cushioned)
    trio.run(autojumping, clock=trio.testing.MockClock(autojump_threshold=0.01))


def test_without_a_timerfd_nothing_changes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_timers, "_timerfd_or_none", lambda: None)

    async def main() -> None:
        with trio.fail_after(10):
            assert rstreams.use_precise_timers() is None
            assert rstreams.use_precise_timers() is None  # (and it does not try again)
            start = trio.current_time()
            await trio.sleep(0.002)
            assert trio.current_time() >= start + 0.002

    trio.run(main)


@linux_only
def test_a_timerfd_that_fails_leaves_trios_own_timeouts(caplog: pytest.LogCaptureFixture) -> None:
    # An instrument that raises is removed by trio with a logged traceback;
    # this one steps aside by itself, and waits still end (a millisecond late).
    async def main() -> None:
        timers = rstreams.use_precise_timers()
        assert timers is not None and timers._timer is not None

        def broken(monotonic: float) -> None:
            raise OSError(22, "timerfd_settime failed")

        timers._timer.fire_at = broken  # type: ignore[method-assign]
        with trio.fail_after(10):
            start = trio.current_time()
            for _ in range(3):
                await trio.sleep(0.0003)
            assert trio.current_time() >= start + 0.0009
        assert not timers.precise

    trio.run(main)
    assert not [record for record in caplog.records if "instrument" in record.getMessage().lower()]


@linux_only
@pytest.mark.parametrize(
    ("serving", "config", "turned_on"),
    [
        (True, rstreams.SessionConfig(), True),
        (True, rstreams.SessionConfig(precise_timers=False), False),
        (False, rstreams.SessionConfig(), False),
    ],
    ids=["a serving session", "a serving session told not to", "a session without an app"],
)
def test_a_session_that_serves_publishers_turns_them_on(serving: bool, config: rstreams.SessionConfig, turned_on: bool) -> None:
    # A server written the way the README shows, with plain trio.run: its
    # publishers' trio.sleep_until ends on time too.
    async def main() -> None:
        with trio.fail_after(10):
            client_stream, server_stream = trio.testing.memory_stream_pair()
            async with (
                rstreams.open_stream_session(server_stream, app=standard_app() if serving else None, config=config),
                rstreams.open_stream_session(client_stream, config=rstreams.SessionConfig(precise_timers=True)),
            ):
                timers = _installed()
                assert (timers is not None and timers.precise) is turned_on

    trio.run(main)


def test_the_rstreams_command_runs_with_precise_timers() -> None:
    seen: list[object] = []

    async def command() -> int:
        await trio.sleep(0)
        seen.append(_installed())
        return 0

    assert run_command(command) == 0
    if sys.platform.startswith("linux"):
        assert isinstance(seen[0], rstreams.PreciseTimers)
    # (--no-precise-timers: trio's own, and the servers' sessions leave them so.)
    assert run_command(command, precise_timers=False) == 0
    assert seen[1] is None
