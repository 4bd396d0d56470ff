"""A subscription that outlives one call: trio in a background thread.

Spark calls the source's ``latestOffset`` / ``partitions`` / ``commit`` one at
a time from blocking code in one long-lived Python process on the driver, and
a live stream must stay subscribed between those calls. So a :class:`Feed`
hosts one ``trio.run`` in a daemon thread, holding one session and one
subscription with manual demand, and the blocking side reads what it
buffered under a ``threading.Condition``.

Demand is the only flow control, and it is bounded: the feed keeps

    buffered + outstanding demand <= capacity

so a fast publisher can be at most ``capacity`` elements ahead of Spark's
commits. Demand is topped up when elements are released (Spark committed
them), never on arrival alone.

Every wait on the blocking side has a timeout, because Spark waits on the
source with none. The thread is a daemon and the socket closes with the
process: Spark does not call ``stop()``, so for the publisher a lost
connection is the cancel.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import trio

from .._connect import open_session
from .._errors import PublisherError
from .._subscribe import Subscription
from .._topic_core import decode_sequenced

__all__ = ["Feed", "FeedStatistics", "with_params"]

logger = logging.getLogger("rstreams.spark")


def with_params(name: str, **params: str) -> str:
    """``name`` with query parameters appended (``a`` -> ``a?x=1``, ``a?y=2`` -> ``a?y=2&x=1``)."""
    if not params:
        return name
    query = "&".join(f"{key}={value}" for key, value in params.items())
    return f"{name}{'&' if '?' in name else '?'}{query}"


@dataclass(frozen=True, slots=True)
class FeedStatistics:
    """A snapshot of a feed: where it is and how much demand is out."""

    base: int
    next_offset: int
    buffered: int
    outstanding: int
    capacity: int
    received: int
    ended: bool
    error: str | None


class Feed:
    """One subscription, read from blocking code, numbered from ``start``.

    Args:
        url: the rstreams server.
        name: the publisher name as subscribed (query included).
        start: the offset of the first element received.
        capacity: bound on buffered elements plus outstanding demand.
        sequenced: elements carry 8-byte sequence numbers (the replay
            convention); each must be exactly the next offset, or the feed
            fails rather than mis-number anything.
    """

    def __init__(self, url: str, name: str, *, start: int, capacity: int, sequenced: bool) -> None:
        if capacity <= 0:
            raise ValueError("capacity must be positive")
        self.url = url
        self.name = name
        self.capacity = capacity
        self.sequenced = sequenced
        self._condition = threading.Condition()
        self._base = start
        self._elements: deque[bytes] = deque()
        self._outstanding = 0
        self._received = 0
        self._ended = False
        self._error: str | None = None
        self._token: trio.lowlevel.TrioToken | None = None
        self._scope: trio.CancelScope | None = None
        self._subscription: Subscription | None = None
        self._thread = threading.Thread(target=self._thread_main, name=f"rstreams-feed {name}", daemon=True)
        self._thread.start()

    # ---- the blocking side -------------------------------------------------

    @property
    def base(self) -> int:
        with self._condition:
            return self._base

    @property
    def next_offset(self) -> int:
        with self._condition:
            return self._base + len(self._elements)

    @property
    def ended(self) -> bool:
        with self._condition:
            return self._ended

    @property
    def error(self) -> str | None:
        with self._condition:
            return self._error

    def wait_until(self, predicate: Callable[[int, bool], bool], timeout: float) -> bool:
        """Wait at most ``timeout`` s for ``predicate(next_offset, ended)``; return it."""
        deadline = time.monotonic() + timeout
        with self._condition:
            while True:
                if predicate(self._base + len(self._elements), self._ended):
                    return True
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._condition.wait(remaining)

    def wait_flowing(self, offset: int, want: int, quiet: float, timeout: float) -> bool:
        """Wait for ``want`` elements past ``offset``; return False if the feed
        ended, or stayed quiet (no new element) for ``quiet`` s, or ``timeout``
        s passed first. This is how the source finds the end of "available now"."""
        now = time.monotonic()
        deadline = now + timeout
        with self._condition:
            last_count = self._base + len(self._elements)
            quiet_until = now + quiet
            while True:
                count = self._base + len(self._elements)
                if count - offset >= want:
                    return True
                if self._ended:
                    return False
                now = time.monotonic()
                if count != last_count:
                    last_count = count
                    quiet_until = now + quiet
                if now >= min(quiet_until, deadline):
                    return False
                self._condition.wait(min(quiet_until, deadline) - now)

    def slice(self, start: int, end: int) -> list[bytes]:
        """The elements with offsets ``start`` (inclusive) to ``end`` (exclusive) still held."""
        with self._condition:
            low = max(start, self._base) - self._base
            high = min(end, self._base + len(self._elements)) - self._base
            # islice walks from the left once; indexing a deque in the
            # middle costs O(n) per element, which made big batches quadratic.
            return list(itertools.islice(self._elements, low, high)) if high > low else []

    def release(self, upto: int) -> None:
        """Forget elements below offset ``upto`` and top demand up for the room made."""
        with self._condition:
            count = min(upto - self._base, len(self._elements))
            if count <= 0:
                return
            for _ in range(count):
                self._elements.popleft()
            self._base += count
        self._call_soon(self._top_up)

    def close(self) -> None:
        """Cancel the subscription (the publisher sees cancel); does not wait."""
        self._call_soon(self._cancel)

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)

    def statistics(self) -> FeedStatistics:
        with self._condition:
            return FeedStatistics(
                base=self._base,
                next_offset=self._base + len(self._elements),
                buffered=len(self._elements),
                outstanding=self._outstanding,
                capacity=self.capacity,
                received=self._received,
                ended=self._ended,
                error=self._error,
            )

    def _call_soon(self, function: Callable[[], None]) -> None:
        token = self._token
        if token is None:
            return  # not started yet: it tops up by itself once subscribed
        try:
            token.run_sync_soon(function)
        except trio.RunFinishedError:
            pass

    # ---- the trio side (the feed's own thread) -------------------------------

    def _thread_main(self) -> None:
        try:
            trio.run(self._main)
        except BaseException as error:  # noqa: BLE001 - report, never kill the driver
            self._finish(f"{type(error).__name__}: {error}")

    async def _main(self) -> None:
        self._token = trio.lowlevel.current_trio_token()
        with trio.CancelScope() as scope:
            self._scope = scope
            try:
                async with open_session(self.url) as session:
                    async with session.subscribe(self.name, prefetch=0) as subscription:
                        self._subscription = subscription
                        self._top_up()
                        async for batch in subscription.batches():
                            if not self._receive(batch):
                                return
                            self._top_up()
                self._finish(None)
            except PublisherError as error:
                self._finish(f"the publisher failed: {error.message}")
            except Exception as error:
                self._finish(f"{type(error).__name__}: {error}")
        if scope.cancelled_caught:
            self._finish("closed")

    def _cancel(self) -> None:
        if self._scope is not None:
            self._scope.cancel()

    def _top_up(self) -> None:
        subscription = self._subscription
        if subscription is None:
            return
        with self._condition:
            if self._ended:
                return
            room = self.capacity - len(self._elements) - self._outstanding
            if room <= 0:
                return
            self._outstanding += room
        subscription.request(room)

    def _receive(self, batch: Sequence[bytes]) -> bool:
        elements: Sequence[bytes] = batch
        problem: str | None = None
        if self.sequenced:
            # Keep the elements before a bad one: they are good, and Spark
            # should get them before the query fails at the bad one.
            elements = []
            expected = self.next_offset
            for raw in batch:
                try:
                    sequence, payload = decode_sequenced(raw)
                except ValueError as error:
                    problem = f"not a sequenced element (replay convention): {error}"
                    break
                if sequence != expected:
                    problem = f"sequence gap: expected element {expected}, the publisher sent {sequence}"
                    break
                elements.append(payload)
                expected += 1
        with self._condition:
            self._elements.extend(bytes(element) for element in elements)
            self._outstanding -= len(batch)
            self._received += len(batch)
            self._condition.notify_all()
        if problem is not None:
            self._finish(problem)
            return False
        return True

    def _finish(self, error: str | None) -> None:
        with self._condition:
            if self._ended:
                return
            self._ended = True
            self._error = error
            self._condition.notify_all()
        if error is not None and error != "closed":
            logger.warning("rstreams feed %s at %s ended: %s", self.name, self.url, error)
