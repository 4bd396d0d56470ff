"""Timers that wake to the microsecond under trio, on Linux.

trio sleeps in ``epoll_wait``, whose timeout is in whole milliseconds, and
CPython rounds it up: a task that sleeps until a deadline 100 µs away wakes
a millisecond later. A publisher that paces its elements with
``trio.sleep_until`` at 10,000 a second therefore sends them in bursts, a
dozen every 1.15 ms, and the first of each burst reaches a subscriber that
has gone to sleep in the pause (measured: stop 32 in bench/NOTES.md).

Event loops that need better (netty's, smol's, state-threads') add a
``timerfd`` to the set ``epoll`` watches and set it to the next deadline,
to the nanosecond: ``epoll_wait`` then returns when it fires. trio lets an
*instrument* see each wait before it starts (``before_io_wait``, with the
timeout the run loop is about to sleep for), and an instrument can be added
to a run that is already going: :class:`PreciseTimers` is that instrument,
which sets its ``timerfd`` to the end of the wait, and a system task waits
on the ``timerfd``, so that ``epoll`` watches it. :func:`use_precise_timers`
puts both in the current run, once per run; a session that serves
publishers does so when it starts (``SessionConfig.precise_timers``), so a
server written with plain ``trio.run`` sends on time as ``rstreams serve``
does, and :func:`run` is ``trio.run`` with them from the start.

(An earlier version replaced trio's clock, whose ``deadline_to_sleep_time``
the run loop also asks before a wait: the same wake-ups, but only for a run
started with that clock, which a server written the way the README shows,
with ``trio.run``, was not: its p99 at 10,000 el/s stayed at 244-271 µs
against pyzmq's 114.)

The cost is a wake-up per deadline that falls due, where the millisecond
timeout gathered every deadline of the millisecond into one; a wait of a
second or more is left to ``epoll``'s timeout, whose last millisecond does
not matter there. Where there is no ``timerfd`` (not Linux), or
``time.perf_counter`` is not ``CLOCK_MONOTONIC``, nothing changes.
"""

from __future__ import annotations

import ctypes
import os
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import trio

__all__ = ["PreciseTimers", "run", "sleep", "sleep_until", "use_precise_timers"]

_T = TypeVar("_T")

#: A deadline at least this far ahead is left to ``epoll``'s own timeout
#: (a millisecond late at most, nothing next to the wait).
PRECISE_WITHIN = 1.0

# The timerfd sits this much after the end of the wait, so that once it
# fires trio's clock reads the deadline as passed whatever the float
# rounding of either reading.
_LATE_BY = 1e-6

# Two waits whose ends are this close are taken for waits to the same
# deadline (the run loop computes the timeout afresh before each, and the
# instrument reads the clock a moment later): the timerfd is left as set.
_SAME_WAIT = 5e-6

_CLOCK_MONOTONIC = 1
_TFD_TIMER_ABSTIME = 1
_TFD_NONBLOCK = os.O_NONBLOCK
_TFD_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _Itimerspec(ctypes.Structure):
    _fields_ = [("it_interval", _Timespec), ("it_value", _Timespec)]


class _TimerFd:
    """A non-blocking ``timerfd`` on ``CLOCK_MONOTONIC``, set to absolute
    times: ``os.timerfd_*`` (Python 3.13) where there is one, else libc's
    through ctypes."""

    def __init__(self) -> None:
        self._settime_ns: Callable[..., Any] | None = getattr(os, "timerfd_settime_ns", None)
        if self._settime_ns is not None:
            self.fd: int = os.timerfd_create(_CLOCK_MONOTONIC, flags=_TFD_NONBLOCK | _TFD_CLOEXEC)  # type: ignore[attr-defined]
            return
        libc = ctypes.CDLL(None, use_errno=True)
        # No argtypes: converting through them costs more than the system
        # call (a paced publisher sets the timer once per element; 3.4 ->
        # 1.3 µs a call with the reference made once). The arguments are
        # small ints, a pointer and NULL, which ctypes passes as they are.
        self._settime = libc.timerfd_settime
        self._settime.restype = ctypes.c_int
        fd = libc.timerfd_create(_CLOCK_MONOTONIC, _TFD_NONBLOCK | _TFD_CLOEXEC)
        if fd < 0:
            raise OSError(ctypes.get_errno(), "timerfd_create failed")
        self.fd = fd
        self._spec = _Itimerspec()
        self._spec_ref = ctypes.byref(self._spec)
        self._value = self._spec.it_value  # (a view into _spec)

    def fire_at(self, monotonic: float) -> None:
        """Make the fd readable at ``monotonic`` (seconds of CLOCK_MONOTONIC)."""
        nanoseconds = max(1, int(monotonic * 1e9))
        if self._settime_ns is not None:
            self._settime_ns(self.fd, flags=_TFD_TIMER_ABSTIME, initial=nanoseconds)
            return
        value = self._value
        value.tv_sec, value.tv_nsec = divmod(nanoseconds, 1_000_000_000)
        if self._settime(self.fd, _TFD_TIMER_ABSTIME, self._spec_ref, None) < 0:
            raise OSError(ctypes.get_errno(), "timerfd_settime failed")

    def clear(self) -> None:
        """Read what fired (if anything), so that the fd is not readable."""
        try:
            os.read(self.fd, 8)
        except BlockingIOError:
            pass

    def close(self) -> None:
        os.close(self.fd)


def _timerfd_or_none() -> _TimerFd | None:
    if time.get_clock_info("perf_counter").implementation != "clock_gettime(CLOCK_MONOTONIC)":
        return None  # (the timerfd's clock must be the one deadlines are read on)
    try:
        return _TimerFd()
    except (OSError, AttributeError):
        return None  # no timerfd here: trio's own timers


def _close_timer(timer: _TimerFd) -> None:
    """Close a timerfd the run may be watching (trio is told first)."""
    trio.lowlevel.notify_closing(timer.fd)
    timer.close()


class PreciseTimers(trio.abc.Instrument):
    """The instrument that makes a trio run's waits end on time: before each
    wait shorter than a second, it sets its ``timerfd`` to the end of the
    wait (see the module docstring). Made, added and watched by
    :func:`use_precise_timers`, once per run."""

    def __init__(self, timer: _TimerFd) -> None:
        self._timer: _TimerFd | None = timer
        self._armed: float | None = None  # when the timerfd fires (perf_counter seconds)
        self._last_timeout = 0.0  # the wait it was last set for
        self.fired = 0  #: How many times the timerfd woke the run loop.

    @property
    def precise(self) -> bool:
        """Whether the ``timerfd`` is watched, so that waits end on time
        (False once the run has ended)."""
        return self._timer is not None

    def before_io_wait(self, timeout: float) -> None:
        """trio's run loop is about to wait ``timeout`` seconds for I/O:
        set the ``timerfd`` to the end of the wait, if it is short."""
        timer = self._timer
        if timer is None or not 0.0 < timeout < PRECISE_WITHIN:
            return  # (0: the run loop only looks for I/O and goes on)
        armed = self._armed
        if armed is None and timeout == self._last_timeout:
            # The very wait the timerfd just ended, again, to the bit: a
            # deadline's wait is read off the clock and never repeats, so
            # this is trio's own (``wait_all_tasks_blocked``'s cushion, a
            # mock clock's autojump threshold), which must end without an
            # event: the timerfd's would wake its watcher, the run would
            # never look idle, and the wait would start over for ever.
            return
        fire_at = time.perf_counter() + timeout + _LATE_BY
        if armed is not None and abs(fire_at - armed) <= _SAME_WAIT:
            return  # the same deadline as the last wait's: already set
        try:
            timer.fire_at(fire_at)
        except OSError:
            # Never seen; trio's own timeout still ends the wait, a
            # millisecond late, and the instrument stays out of the way.
            self._timer = None
            return
        self._armed = fire_at
        self._last_timeout = timeout

    async def _watch(self, timer: _TimerFd) -> None:
        try:
            while True:
                await trio.lowlevel.wait_readable(timer.fd)
                timer.clear()
                self.fired += 1
                # The deadline it was set to is due: the next wait sets it
                # anew, even to the same time (a task sleeping to it again).
                self._armed = None
        finally:
            self._timer = None
            try:
                trio.lowlevel.remove_instrument(self)
            except KeyError:
                pass
            _close_timer(timer)


_PRECISE_TIMERS: trio.lowlevel.RunVar[PreciseTimers | None] = trio.lowlevel.RunVar("rstreams_precise_timers")


def use_precise_timers() -> PreciseTimers | None:
    """Make the current trio run's timers wake to the microsecond, from now
    to the end of the run (Linux; elsewhere nothing changes and this
    returns None): ``trio.sleep``, ``sleep_until`` and every timeout end on
    time instead of up to a millisecond late. Call it from inside the run;
    later calls return the same :class:`PreciseTimers`.

    A session that serves publishers calls it as it starts
    (``SessionConfig(precise_timers=False)`` to keep trio's own timers),
    and :func:`run` before the main function.
    """
    try:
        return _PRECISE_TIMERS.get()
    except LookupError:
        pass
    timer = _timerfd_or_none()
    if timer is None:
        _PRECISE_TIMERS.set(None)
        return None
    timers = PreciseTimers(timer)
    _PRECISE_TIMERS.set(timers)
    trio.lowlevel.add_instrument(timers)
    trio.lowlevel.spawn_system_task(timers._watch, timer, name="rstreams precise timers")
    return timers


#: At most this many ``timerfd`` are open for :func:`sleep_until` in one run
#: (one per task sleeping at once); a task that finds them all taken sleeps
#: with ``trio.sleep_until``, on the run's own timers.
MAX_SLEEP_TIMERS = 64


class _SleepTimers:
    """The ``timerfd`` that :func:`sleep_until` lends its sleepers, one run's:
    opened as more tasks sleep at once, at most :data:`MAX_SLEEP_TIMERS`,
    kept for the next sleeps, closed when the run ends (by a system task,
    the one place a run's end can be seen)."""

    def __init__(self) -> None:
        self.free: list[_TimerFd] = []
        self.lent = 0
        self.closed = False  # (the run ended, or this machine has no timerfd)

    def take(self) -> _TimerFd | None:
        if self.free:
            self.lent += 1
            return self.free.pop()
        if self.closed or self.lent >= MAX_SLEEP_TIMERS:
            return None
        timer = _timerfd_or_none()
        if timer is None:
            # None free and none lent: none was ever made (a timer made is
            # lent or free until the run ends), so there are none to be had
            # here, and trio's timers serve from now on. Else a passing
            # failure (out of file descriptors, say): this sleep is trio's,
            # the next tries again.
            if not self.lent:
                self.closed = True
            return None
        self.lent += 1
        return timer

    def give_back(self, timer: _TimerFd) -> None:
        self.lent -= 1
        if self.closed:
            _close_timer(timer)
        else:
            self.free.append(timer)

    async def close_at_end_of_run(self) -> None:
        try:
            await trio.sleep_forever()
        finally:
            self.closed = True
            for timer in self.free:
                _close_timer(timer)
            self.free.clear()


def _is_system_clock(clock: trio.abc.Clock) -> bool:
    # trio's default clock reads time.perf_counter() (plus an offset), the
    # clock a timerfd counts on; its class is not public, so it is known by
    # its name. Any other clock (a test's MockClock, say) keeps trio's timers.
    kind = type(clock)
    return kind.__name__ == "SystemClock" and kind.__module__.startswith("trio.")


_SLEEP_TIMERS: trio.lowlevel.RunVar[_SleepTimers | None] = trio.lowlevel.RunVar("rstreams_sleep_timers")


def _sleep_timers() -> _SleepTimers | None:
    try:
        return _SLEEP_TIMERS.get()
    except LookupError:
        pass
    timers: _SleepTimers | None = None
    if _is_system_clock(trio.lowlevel.current_clock()):
        timers = _SleepTimers()
        try:
            trio.lowlevel.spawn_system_task(timers.close_at_end_of_run, name="rstreams sleep timers")
        except RuntimeError:
            timers = None  # (the run is ending: nothing could close them)
    _SLEEP_TIMERS.set(timers)
    return timers


async def sleep_until(deadline: float) -> None:
    """``trio.sleep_until(deadline)``, to the microsecond, for about half
    the CPU: for a loop that paces itself (a publisher sending at a rate,
    say), where the sleep is most of what an iteration costs.

    trio ends a sleep by cancelling a cancel scope at its deadline, which
    raises ``Cancelled`` into the task and catches it again: about 20 µs of
    Python per sleep on top of the wake-up (hot; several times that when
    the sleep let the caches go cold). Here the task waits on a ``timerfd``
    of its own, set to the deadline, and is woken by ``epoll`` when it
    fires: no cancel scope, no exception, and no millisecond rounding
    whether or not :func:`use_precise_timers` is on. Cancellation and
    checkpoints are trio's: always a checkpoint, ``trio.Cancelled`` from any
    enclosing scope as for ``trio.sleep_until``; a deadline already past
    costs one checkpoint.

    Falls back to ``trio.sleep_until`` where there is no ``timerfd`` (not
    Linux), for a run with a clock of its own (``trio.testing.MockClock``),
    for a deadline a second or more away (whose wake-up costs nothing next
    to the wait), and while :data:`MAX_SLEEP_TIMERS` tasks already sleep
    this way.
    """
    delay = deadline - trio.current_time()
    if delay <= 0:
        await trio.lowlevel.checkpoint()
        return
    timers = _sleep_timers() if delay < PRECISE_WITHIN else None
    timer = timers.take() if timers is not None else None
    if timer is None:
        await trio.sleep_until(deadline)
        return
    assert timers is not None
    try:
        # trio's clock is perf_counter plus an offset, read above: the
        # delay from a later perf_counter ends later, never earlier. (Setting
        # the timer also forgets an expiry an earlier sleeper left unread.)
        timer.fire_at(time.perf_counter() + delay + _LATE_BY)
        await trio.lowlevel.wait_readable(timer.fd)
    finally:
        timers.give_back(timer)


async def sleep(seconds: float) -> None:
    """``trio.sleep(seconds)`` as :func:`sleep_until` sleeps."""
    if seconds < 0:
        raise ValueError("duration must be non-negative")
    await sleep_until(trio.current_time() + seconds)


async def _with_precise_timers(async_fn: Callable[..., Awaitable[_T]], args: tuple[Any, ...]) -> _T:
    use_precise_timers()
    return await async_fn(*args)


def run(async_fn: Callable[..., Awaitable[_T]], *args: Any, **run_options: Any) -> _T:
    """``trio.run(async_fn, *args, **run_options)`` with
    :func:`use_precise_timers` from the start: ``trio.sleep`` and every
    deadline wake to the microsecond instead of the millisecond, on Linux.
    The ``rstreams`` command runs every command this way."""
    return trio.run(_with_precise_timers, async_fn, args, **run_options)
