"""Timers that wake to the microsecond under trio, on Linux.

trio sleeps in ``epoll_wait``, whose timeout is in whole milliseconds, and
CPython rounds it up: a task that sleeps until a deadline 100 µs away wakes
a millisecond later. A publisher that paces its elements with
``trio.sleep_until`` at 10,000 a second therefore sends them in bursts, a
dozen every 1.15 ms, and the first of each burst reaches a subscriber that
has gone to sleep in the pause (measured: stop 32 in bench/NOTES.md).

Event loops that need better (netty's, smol's, state-threads') add a
``timerfd`` to the set ``epoll`` watches and set it to the next deadline,
to the nanosecond: ``epoll_wait`` then returns when it fires. trio takes its
clock as a parameter (``trio.run(..., clock=...)``), and its run loop asks
the clock how long to sleep before each wait (``deadline_to_sleep_time``):
:class:`PreciseClock` is trio's own system clock that, on that call, also
sets its ``timerfd`` to the deadline, and :meth:`PreciseClock.watch` is the
task that waits on the ``timerfd`` (a system task, for the whole run), so
that ``epoll`` watches it. :func:`run` is ``trio.run`` with both; the
``rstreams`` command runs every command that way.

The cost is a wake-up per deadline that falls due, where the millisecond
timeout gathered every deadline of the millisecond into one; a timer set a
second or more ahead is left to ``epoll``'s timeout, whose last millisecond
does not matter there. Where there is no ``timerfd`` (not Linux), or
``time.perf_counter`` is not ``CLOCK_MONOTONIC``, the clock is trio's own
and nothing else changes.
"""

from __future__ import annotations

import ctypes
import os
import random
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import trio

__all__ = ["PreciseClock", "run"]

_T = TypeVar("_T")

#: A deadline at least this far ahead is left to ``epoll``'s own timeout
#: (a millisecond late at most, nothing next to the wait).
PRECISE_WITHIN = 1.0

# The timerfd sits this much after the deadline, so that once it fires the
# clock reads the deadline as passed whatever the float rounding of either.
_LATE_BY = 1e-6

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
        self._settime = libc.timerfd_settime
        self._settime.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.POINTER(_Itimerspec), ctypes.c_void_p]
        fd = libc.timerfd_create(_CLOCK_MONOTONIC, _TFD_NONBLOCK | _TFD_CLOEXEC)
        if fd < 0:
            raise OSError(ctypes.get_errno(), "timerfd_create failed")
        self.fd = fd
        self._spec = _Itimerspec()

    def fire_at(self, monotonic: float) -> None:
        """Make the fd readable at ``monotonic`` (seconds of CLOCK_MONOTONIC)."""
        nanoseconds = max(1, int(monotonic * 1e9))
        if self._settime_ns is not None:
            self._settime_ns(self.fd, flags=_TFD_TIMER_ABSTIME, initial=nanoseconds)
            return
        value = self._spec.it_value
        value.tv_sec, value.tv_nsec = divmod(nanoseconds, 1_000_000_000)
        if self._settime(self.fd, _TFD_TIMER_ABSTIME, ctypes.byref(self._spec), None) < 0:
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


class PreciseClock(trio.abc.Clock):
    """trio's system clock, whose timers wake to the microsecond on Linux.

    Pass it to ``trio.run(..., clock=clock)`` and run :meth:`watch` for the
    whole run (``trio.lowlevel.spawn_system_task(clock.watch)``), or use
    :func:`run`, which does both. Without :meth:`watch` running it is
    trio's own clock: times are read the same way (``perf_counter`` plus a
    random offset, as ``trio``'s), and only the wake-ups differ.
    """

    def __init__(self) -> None:
        # (As trio's SystemClock: an offset that makes mixing clocks show.)
        self._offset = random.uniform(10000, 200000)
        self._timer: _TimerFd | None = None
        self._armed: float | None = None  # the deadline the timerfd is set to
        self.fired = 0  #: How many times the timerfd woke the run loop.

    @property
    def precise(self) -> bool:
        """Whether the timerfd is being watched, so timers wake on time."""
        return self._timer is not None

    def start_clock(self) -> None:
        pass

    def current_time(self) -> float:
        return self._offset + time.perf_counter()

    def deadline_to_sleep_time(self, deadline: float) -> float:
        wait = deadline - (self._offset + time.perf_counter())
        timer = self._timer
        if timer is not None and 0.0 < wait < PRECISE_WITHIN and deadline != self._armed:
            timer.fire_at(deadline - self._offset + _LATE_BY)
            self._armed = deadline
        return wait

    async def watch(self) -> None:
        """Wait on the timerfd for the rest of the run (cancel to stop): the
        run loop's ``epoll`` then returns when it fires. Returns at once
        where there is no timerfd."""
        if self._timer is not None:
            raise RuntimeError("PreciseClock.watch is already running")
        timer = _timerfd_or_none()
        if timer is None:
            return
        self._timer = timer
        try:
            while True:
                await trio.lowlevel.wait_readable(timer.fd)
                timer.clear()
                self.fired += 1
                # A deadline it was set to is due: the next one sets it anew,
                # even if it is the same (a task that sleeps to it again).
                self._armed = None
        finally:
            self._timer = None
            trio.lowlevel.notify_closing(timer.fd)
            timer.close()


async def _watching(clock: PreciseClock, async_fn: Callable[..., Awaitable[_T]], args: tuple[Any, ...]) -> _T:
    trio.lowlevel.spawn_system_task(clock.watch, name="rstreams precise timers")
    return await async_fn(*args)


def run(async_fn: Callable[..., Awaitable[_T]], *args: Any, **run_options: Any) -> _T:
    """``trio.run(async_fn, *args)`` with a :class:`PreciseClock`, watched
    for the whole run: ``trio.sleep`` and every deadline wake to the
    microsecond instead of the millisecond, on Linux. ``run_options`` go to
    ``trio.run`` as they are (``clock`` excepted: this is what it sets)."""
    clock = PreciseClock()
    return trio.run(_watching, clock, async_fn, args, clock=clock, **run_options)
