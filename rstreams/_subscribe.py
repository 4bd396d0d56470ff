"""The subscribing side of the API.

::

    async with session.subscribe("ticker", prefetch=32) as ticks:
        async for tick in ticks:
            ...

Entering the block sends subscribe with ``prefetch`` as initial demand and
waits for the publisher's answer; leaving it before the end sends cancel.
Demand is topped up automatically by the :class:`~rstreams.protocol.DemandWindow`
rule (request what was consumed once half the window is consumed), so the
buffer never holds more than ``prefetch`` elements: the peer cannot send more
than was requested, and the protocol machine turns any excess into a
protocol error before it reaches this buffer. With ``prefetch=0`` nothing is
requested automatically: call :meth:`Subscription.request`.

Given no ``prefetch`` (``None``, the default), the window adapts
(:class:`~rstreams.protocol.AdaptiveDemand`): it starts at
``ADAPTIVE_INITIAL`` elements, doubles while the consumer keeps up (it had
to wait for elements) and shrinks while the consumer lags, within
``ADAPTIVE_MAXIMUM`` elements and ``ADAPTIVE_BYTE_BUDGET`` bytes. The buffer
then holds at most the current window: memory stays bounded by demand.

Per-element iteration makes a full trio checkpoint once every
``CHECKPOINT_INTERVAL`` elements while data is buffered (and, of course,
whenever it has to wait), not once per element: a checkpoint costs about as
much as the whole per-element budget at a million elements per second.
:meth:`Subscription.batches` hands over everything buffered at once.

How ``async for`` stays cheap per element: the run
--------------------------------------------------

Every element used to pay for the whole set of rules: the busy check, the
checkpoint counter, the pop from the chunk, the demand window's counter and
the codec test, five method calls in all. Now one step (``_next_after_run``,
the only place that applies the rules) hands out an element with all of
them, and then sets aside the *run*: the next elements of the same chunk
that no rule can concern. The run ends before the next checkpoint is due,
before the element that reaches the demand window's top-up
(:attr:`~rstreams.protocol.DemandWindow.until_top_up`), and at the end of
the chunk; so ``__anext__`` hands the run's elements out with nothing but
``next()`` and the codec, and the step after the run counts them in the
window in one call, with the same top-ups, at the same elements, as one
call each. What the run holds is still "buffered" (``statistics()`` counts
it); :meth:`Subscription.batches` puts what is left of it back first.

Reading in the consumer's task
------------------------------

A consumer that finds nothing buffered used to park, always: the session's
reader, woken by ``epoll``, then read, dispatched and re-armed its wait,
and the consumer ran a pass of the run loop later. On a stream whose
elements arrive while the consumer works on the last one (a burst after a
timer's wake-up, or any stream faster than its consumer), the next bytes
are already in the socket when it comes back. So before it parks, the
consumer asks the session to read them now (``_receive_now``): one
non-blocking read, dispatched exactly as the reader dispatches it, in the
consumer's own task; its elements are then in the buffer, and nothing was
parked or woken. It took a fifth off the client's CPU per element of an
8-byte stream read with ``async for``, and a tenth off the median latency
of a paced one (bench/NOTES.md, "Reading in the consumer's task").

The session reads this way only while its reader waits on the socket with
nothing read (``DirectSocket.reader_idle``, plain TCP only), so bytes are
handled in the order they arrived, and only where the reader would read
(the budgets for held elements and for unsent answers). A ``copy=False``
subscription never does. Its large elements are received straight into
their buffers, here too (``receive_buffers``), but the reader waits for
a plain read it chose before the consumer read, and makes it when the
next bytes come, the middle of a part as bytes: 1 MiB elements lost 5 of
6 interleaved pairs reading here (stop 31). A
``copy=True`` stream of large elements, received into the buffer it
keeps, was level either way (4 of 6), so it reads here as any stream.
Reading is not a schedule point, so between two of them a consumer
reads at most ``READS_BETWEEN_PARKS`` times and, past
``READ_BYTES_BETWEEN_PARKS``, no more: a burst of small elements is read
read by read, a bulk stream about one read per step, as the reader's own
steps go. Waiting is still a cancel point every time.
"""

from __future__ import annotations

import weakref
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from operator import length_hint
from types import TracebackType
from typing import Any, Protocol

import trio

from ._codecs import CodecLike, resolve_codec
from .protocol import AdaptiveDemand, DemandWindow, ElementBatch, check_publisher_name

__all__ = [
    "ADAPTIVE_BYTE_BUDGET",
    "ADAPTIVE_INITIAL",
    "ADAPTIVE_MAXIMUM",
    "CHECKPOINT_INTERVAL",
    "HeldElements",
    "StreamReceiver",
    "Subscription",
    "SubscriptionOwner",
    "SubscriptionStatistics",
]

#: While elements are buffered, iteration checkpoints once per this many.
#: A checkpoint costs about 4 µs here (a pass of trio's scheduler, with its
#: epoll call), a buffered element about 0.3 µs: one per 256 elements is
#: about 5% of a fast loop's time, where one per 64 was a fifth, and keeps
#: a fast loop's other tasks waiting some 100 µs at most, about a loopback
#: round trip. (A loop whose body spends much longer per element without
#: awaiting anything should checkpoint itself, or read batches().) The
#: reader and writer run at these checkpoints too: fewer, larger reads,
#: and demand top-ups leave at the next one.
CHECKPOINT_INTERVAL = 256

#: A consumer that finds its buffer empty reads what has already arrived
#: itself ("Reading in the consumer's task" above), between two schedule
#: points at most this many times, and no more once this many bytes were
#: read.
READS_BETWEEN_PARKS = 16
READ_BYTES_BETWEEN_PARKS = 64 * 1024

#: The adaptive window (no ``prefetch`` given): where it starts, and its bounds
#: in elements and in bytes (per subscription).
ADAPTIVE_INITIAL = 16
ADAPTIVE_MAXIMUM = 65_536
ADAPTIVE_BYTE_BUDGET = 8 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class SubscriptionStatistics:
    """A snapshot of one subscription.

    Attributes:
        subscriber: the stream's Id (None before it was opened).
        buffered: elements received and not yet consumed.
        outstanding_demand: elements requested and not yet received.
        received: elements received so far.
        element_size: the publisher's fixed element size (0: variable).
        state: "opening", "open", "completed", "failed" or "cancelled".
    """

    subscriber: int | None
    buffered: int
    outstanding_demand: int
    received: int
    element_size: int
    state: str


# Read once: each trio.lowlevel.X is two attribute look-ups, and these run
# once per round trip.
_current_task = trio.lowlevel.current_task
_wait_task_rescheduled = trio.lowlevel.wait_task_rescheduled
_reschedule = trio.lowlevel.reschedule


class _OneWaiter:
    """The one task that waits on a stream's receiving end, parked directly
    rather than through a ``trio.Event``: a subscribe round trip parks once,
    and an Event per subscription cost more than the rest of its set-up."""

    __slots__ = ("_parked",)

    def __init__(self) -> None:
        self._parked: trio.lowlevel.Task | None = None

    def _wake(self) -> None:
        task = self._parked
        if task is not None:
            self._parked = None
            _reschedule(task)

    async def _park(self) -> None:
        """Wait for the next call to ``_wake``; the caller re-checks why."""
        self._parked = _current_task()
        await _wait_task_rescheduled(self._unpark)

    def _unpark(self, _: trio.lowlevel.RaiseCancelT) -> trio.lowlevel.Abort:
        self._parked = None
        return trio.lowlevel.Abort.SUCCEEDED


class HeldElements:
    """Bytes of received elements that a session's subscriptions hold and
    the application has not taken yet: part of the inbound half of the
    connection's memory budget (see ``SessionConfig.max_connection_memory``).

    Counted per batch received and per batch used up, never per element.
    The session reads ``held``, and sets ``on_release`` while its reader
    waits for the application to take some.
    """

    __slots__ = ("held", "on_release")

    def __init__(self) -> None:
        self.held = 0
        self.on_release: trio.Event | None = None

    def release(self, nbytes: int) -> None:
        self.held -= nbytes
        waiting = self.on_release
        if waiting is not None:
            self.on_release = None
            waiting.set()


class Subscription(_OneWaiter):
    """One stream from a peer's publisher: an async iterator of elements.

    Create it with :meth:`Peer.subscribe` (a :class:`~rstreams.Session`, or
    a bridge's client) and use it as an async context manager. Only one task
    may iterate it at a time.
    """

    # Slots: one Subscription is made per subscribe (a round trip's worth
    # of attribute writes), and thousands may sit idle at once.
    __slots__ = (
        "name",
        "subscriber",
        "_session",
        "_prefetch",
        "_adaptive",
        "_window",
        "_codec",
        "_decode",
        "_run",
        "_run_length",
        "_chunks",
        "_head",
        "_buffered",
        "_received",
        "_since_checkpoint",
        "_reads_left",
        "_read_bytes_left",
        "_element_size",
        "_subscribed",
        "_ended",
        "_cancelled",
        "_error",
        "_failed",
        "_busy",
        "_held",
        "_chunk_bytes",
        "copy",
        "__weakref__",
    )

    def __init__(
        self, session: SubscriptionOwner, name: str, *, prefetch: int | None, codec: CodecLike, copy: bool = True
    ) -> None:
        if prefetch is not None and (type(prefetch) is not int or prefetch < 0):
            raise ValueError(f"prefetch must be None (adaptive) or an int >= 0, got {prefetch!r}")
        if not copy and resolve_codec(codec) is not None:
            raise ValueError("copy=False hands out the received buffers themselves: it takes no codec")
        # (LocalProtocolError, whichever peer: a bridge's wire needs the name as
        # UTF-8 text too, and would otherwise fail in its stream's task, untyped.)
        check_publisher_name(name)
        super().__init__()
        self.name = name
        #: False: large (split) elements arrive as read-only memoryviews of
        #: the buffer they were received into, not as bytes (the zero-copy
        #: opt-in, see Session.subscribe).
        self.copy = copy
        self._session = session
        self._adaptive = prefetch is None
        self._prefetch = ADAPTIVE_INITIAL if prefetch is None else prefetch
        # Made at the first element consumed while the stream is still open:
        # a short stream ends before it would ever top demand up.
        self._window: DemandWindow | AdaptiveDemand | None = None
        self._codec = resolve_codec(codec) if codec is not None else None
        self._decode: Callable[[bytes], Any] | None = self._codec.decode if self._codec is not None else None
        # The run (see the module's docstring): elements taken out of the
        # chunks for __anext__ to hand out without the rules, and how many
        # the run held, for the window to count once it is handed out.
        self._run: Iterator[bytes] = iter(())
        self._run_length = 0
        self.subscriber: int | None = None
        # Received elements: lists of bytes, or packed buffers (bytes, size).
        self._chunks: deque[list[bytes] | ElementBatch] = deque()
        self._head = 0
        self._buffered = 0
        self._received = 0
        self._since_checkpoint = 0
        # Reads in this task while waiting, left until the next schedule
        # point (see _wait_for_elements).
        self._reads_left = READS_BETWEEN_PARKS
        self._read_bytes_left = READ_BYTES_BETWEEN_PARKS
        self._element_size = 0
        self._subscribed = False
        self._ended = False
        self._cancelled = False
        self._error: BaseException | None = None
        self._failed = False  # (stays when a refusal lets go of _error)
        self._busy = False
        # The session's count of held element bytes (None for owners that
        # keep none, like the bridges' clients), and the bytes of each chunk
        # in _chunks, released as each chunk is used up (made with the first
        # chunk: an empty deque costs 760 bytes, as much as the rest of an
        # idle subscription, and most of many idle ones never get one).
        self._held: HeldElements | None = getattr(session, "held_elements", None)
        self._chunk_bytes: deque[int] | None = None

    # ---- called by the session's reader (synchronously) ----------------

    def _on_subscribed(self, element_size: int) -> None:
        self._subscribed = True
        self._element_size = element_size
        self._wake()

    def _on_elements(self, batch: ElementBatch) -> None:
        items = batch.items
        self._chunks.append(items if items is not None else batch)
        held = self._held
        if held is not None:
            nbytes = batch.nbytes
            chunk_bytes = self._chunk_bytes
            if chunk_bytes is None:
                chunk_bytes = self._chunk_bytes = deque()
            chunk_bytes.append(nbytes)
            held.held += nbytes
        count = len(batch)
        self._buffered += count
        self._received += count
        self._wake()

    def _on_end(self, error: BaseException | None) -> None:
        if self._ended:
            return
        self._ended = True
        self._error = error
        self._failed = error is not None
        self._wake()

    # ---- context manager -------------------------------------------------

    async def __aenter__(self) -> Subscription:
        if self.subscriber is not None:
            raise RuntimeError("a Subscription can be entered only once")
        initial = self._prefetch
        self.subscriber = self._session._open_subscription(self, initial)
        try:
            if self._subscribed or self._ended:
                await trio.lowlevel.checkpoint()  # never reached in practice; entering always checkpoints
            while not (self._subscribed or self._ended):
                await self._park()
        except BaseException:
            self.cancel()
            raise
        error = self._error
        if not self._subscribed and error is not None:
            # A refused subscription cannot be used again: let go of the
            # error, whose traceback holds this frame and so this object
            # (and its session), or the two would wait for the cycle
            # collector.
            self._error = None
            try:
                raise error
            finally:
                del error
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.cancel()
        if exc_value is not None and exc_value is self._error:
            # Our terminal error leaves the block: its traceback holds the
            # frames that raised it, and so this object; let go of it here,
            # or the two (and the session) would wait for the cycle collector.
            self._error = None

    def cancel(self) -> None:
        """Cancel the stream (a no-op once it ended). Synchronous, never blocks."""
        self._release_all()
        if self._ended or self.subscriber is None:
            return
        self._cancelled = True
        self._session._cancel_subscription(self)
        self._on_end(None)

    # ---- demand ------------------------------------------------------

    def request(self, n: int) -> None:
        """Request ``n`` more elements (adds to any automatic demand).

        Demand adds up and saturates at 2**63 - 1, which means unbounded. A
        request after the stream ended is a no-op (RS 3.6).

        Raises:
            ValueError: ``n <= 0`` (RS 3.9).
        """
        if type(n) is not int or n <= 0:
            raise ValueError(f"request(n) needs an int n > 0 (RS 3.9), got {n!r}")
        if self.subscriber is None:
            raise RuntimeError("enter the subscription (async with) before requesting")
        if self._ended:
            return
        self._session._request(self.subscriber, n)

    def _consumed(self, n: int) -> None:
        if not self._prefetch or self._ended:
            return
        window = self._window
        if window is None:
            window = self._window = self._make_window()
        more = window.consumed(n)
        if more:
            assert self.subscriber is not None
            self._session._request(self.subscriber, more)

    def _make_window(self) -> DemandWindow | AdaptiveDemand:
        if not self._adaptive:
            return DemandWindow(self._prefetch)
        # The window asks this subscription, which holds the window: through
        # a weak reference, so the two are no cycle that only the cycle
        # collector would free (with the session this refers to).
        probe = weakref.WeakMethod(self._probe)

        def probe_subscription() -> tuple[int, int]:
            method = probe()
            return method() if method is not None else (0, 0)

        return AdaptiveDemand(
            probe_subscription,
            initial=self._prefetch,
            maximum=ADAPTIVE_MAXIMUM,
            byte_budget=ADAPTIVE_BYTE_BUDGET,
        )

    def _probe(self) -> tuple[int, int]:
        """For the adaptive window, at a top-up: (outstanding demand, a recent element's size)."""
        assert self.subscriber is not None
        size = self._element_size
        if not size and self._buffered:
            chunk = self._chunks[0]
            size = len(chunk[self._head])
        return self._session._outstanding_demand(self.subscriber), size

    @property
    def window(self) -> int:
        """Elements kept requested ahead of the application now (0: manual demand).

        With ``prefetch`` given, that; with an adaptive window, its current size.
        """
        window = self._window
        if window is not None:
            return window.size
        return self._prefetch

    # ---- iteration -----------------------------------------------------

    def __aiter__(self) -> Subscription:
        return self

    async def __anext__(self) -> Any:
        """The next element (decoded by the codec, if any).

        Raises:
            StopAsyncIteration: the publisher completed (or we cancelled).
            PublisherError: the publisher failed, after the elements it sent.
            SessionClosed: the session ended, after the elements received.

        Atomic under cancellation: an element is either returned or left in
        the buffer. Checkpoints when it waits and every CHECKPOINT_INTERVAL
        elements otherwise.
        """
        # The run's elements need nothing more (see the module's docstring).
        for element in self._run:
            decode = self._decode
            return element if decode is None else decode(element)
        return await self._next_after_run()

    async def _next_after_run(self) -> Any:
        # The rules, for one element; then the run that follows it.
        if self._busy:
            raise trio.BusyResourceError("another task is already iterating this subscription")
        if self._buffered:
            if self._since_checkpoint >= CHECKPOINT_INTERVAL:
                await self._checkpoint()
                self._since_checkpoint = 0
        elif self._ended:
            # The end, already known (a short stream's onComplete comes with
            # its elements): said here, without the waiting machinery.
            await trio.lowlevel.checkpoint_if_cancelled()
            if self._error is not None and not self._cancelled:
                raise self._error
            raise StopAsyncIteration
        else:
            await self._wait_for_elements()
        element = self._pop_one()
        # The run just handed out, and this element: one count, which reaches
        # the top-up exactly when counting each would have.
        ran, self._run_length = self._run_length, 0
        self._consumed(ran + 1)
        self._start_run()
        decode = self._decode
        return element if decode is None else decode(element)

    def _start_run(self) -> None:
        # As many of the head chunk's next elements as no rule concerns: the
        # element that makes the checkpoint due, or reaches the top-up, is
        # left for _next_after_run. (The element just handed out counts
        # towards the checkpoint first.)
        self._since_checkpoint += 1
        if not self._buffered:
            return
        length = CHECKPOINT_INTERVAL - self._since_checkpoint
        window = self._window
        if window is not None and not self._ended:
            length = min(length, window.until_top_up - 1)
        chunk = self._chunks[0]
        head = self._head
        length = min(length, len(chunk) - head)
        if length <= 0:
            return
        end = head + length
        if isinstance(chunk, list):
            run = chunk[head:end]
        else:  # a packed buffer: sliced here, with no ElementBatch in between
            packed, size = chunk.packed, chunk.element_size
            assert packed is not None
            run = [packed[offset : offset + size] for offset in range(head * size, end * size, size)]
        if end >= len(chunk):
            self._pop_chunk()
            end = 0
        self._head = end
        self._buffered -= length
        self._run = iter(run)
        self._run_length = length
        self._since_checkpoint += length

    def _put_run_back(self) -> None:
        # For a switch to batches(): what the run still holds goes back to
        # the front of the buffer, what it handed out is counted.
        if not self._run_length:
            return  # (no run since the last step: the batches() path)
        rest = list(self._run)
        ran, self._run_length = self._run_length - len(rest), 0
        self._run = iter(())
        if rest:
            self._since_checkpoint -= len(rest)
            if self._head:
                # The run's chunk is still first: its elements are still there.
                self._head -= len(rest)
            else:
                # The run emptied its chunk, which is gone (and released):
                # what is left of it comes back as a chunk of its own.
                self._chunks.appendleft(rest)
                held = self._held
                if held is not None:
                    nbytes = sum(map(len, rest))
                    assert self._chunk_bytes is not None  # (made with the first chunk)
                    self._chunk_bytes.appendleft(nbytes)
                    held.held += nbytes
            self._buffered += len(rest)
        if ran:
            self._consumed(ran)

    async def _checkpoint(self) -> None:
        self._busy = True
        try:
            await trio.lowlevel.checkpoint()
            self._reads_left = READS_BETWEEN_PARKS
            self._read_bytes_left = READ_BYTES_BETWEEN_PARKS
        finally:
            self._busy = False

    async def _wait_for_elements(self) -> None:
        self._busy = True
        try:
            await trio.lowlevel.checkpoint_if_cancelled()
            while not self._buffered:
                if self._ended:
                    if self._error is not None and not self._cancelled:
                        raise self._error
                    raise StopAsyncIteration
                window = self._window
                if isinstance(window, AdaptiveDemand):
                    window.starved()
                if self.copy and self._reads_left and self._read_bytes_left > 0:
                    # What had arrived, read in this task: no schedule point,
                    # so within bounds (see the module's docstring). Not for
                    # copy=False (see there).
                    received = self._session._receive_now()
                    if received:
                        self._reads_left -= 1
                        self._read_bytes_left -= received
                        continue
                await self._park()
                self._reads_left = READS_BETWEEN_PARKS
                self._read_bytes_left = READ_BYTES_BETWEEN_PARKS
                self._since_checkpoint = 0
        finally:
            self._busy = False

    def _pop_one(self) -> bytes:
        chunk = self._chunks[0]
        head = self._head
        element = chunk[head]
        head += 1
        if head >= len(chunk):
            self._pop_chunk()
            head = 0
        self._head = head
        self._buffered -= 1
        return element

    def _take_all(self, limit: int) -> Sequence[bytes]:
        # Everything buffered (up to limit), as one sequence. A take of
        # exactly one chunk hands the chunk over as it is; several chunks are
        # joined at C speed: lists into one list, and on a fixed-size stream
        # into one packed buffer, so a packed run never turns into one bytes
        # object per element.
        parts: list[Sequence[bytes]] = []
        remaining = min(limit, self._buffered)
        while remaining:
            chunk = self._chunks[0]
            head = self._head
            available = len(chunk) - head
            count = min(available, remaining)
            parts.append(chunk if head == 0 and count == len(chunk) else chunk[head : head + count])
            if count == available:
                self._pop_chunk()
                self._head = 0
            else:
                self._head = head + count
            remaining -= count
            self._buffered -= count
        if len(parts) == 1:
            return parts[0]
        if not parts:
            return []
        size = self._element_size
        if size:
            packed = b"".join(
                part.packed if isinstance(part, ElementBatch) and part.packed is not None else b"".join(part)
                for part in parts
            )
            return ElementBatch(packed=packed, element_size=size)
        merged: list[bytes] = []
        for part in parts:
            merged.extend(part)
        return merged

    def _pop_chunk(self) -> None:
        # The first chunk used up: gone, and (with its byte count, kept in
        # step with the chunks) no longer counted against the budget. Every
        # chunk leaves the buffer here.
        self._chunks.popleft()
        held = self._held
        if held is not None:
            assert self._chunk_bytes is not None  # (made with the first chunk)
            held.release(self._chunk_bytes.popleft())

    def _release_all(self) -> None:
        # Left or cancelled: what is still buffered is the application's
        # to drop, and no longer holds the session's reader back; from here
        # on this subscription counts nothing (no more elements come).
        held, self._held = self._held, None
        if held is not None and self._chunk_bytes:
            held.release(sum(self._chunk_bytes))
        self._chunk_bytes = None

    def batches(self, max_elements: int = 2**31) -> _BatchIterator:
        """Iterate over everything buffered at once, for high-rate consumers.

        Each step returns a sequence of all elements buffered (at most
        ``max_elements``), waiting only when none is. With the raw codec a
        packed run stays packed (``ElementBatch.packed``). Demand is topped up
        per batch. Checkpoints once per batch.
        """
        if max_elements <= 0:
            raise ValueError("max_elements must be positive")
        return _BatchIterator(self, max_elements)

    async def wait_buffered(self, max_elements: int = 2**31, max_bytes: int = 2**63) -> tuple[int, int]:
        """Wait until an element is buffered; say what the next batch would be, taking nothing.

        For a consumer that must make room for elements before it takes
        them (a bridge counts them in its own connection's memory budget
        from then on): until taken they stay here, counted in this
        session's inbound half, so waiting for room holds the session's
        reader back, not more memory. Then ``batches(count)`` takes exactly
        the elements counted.

        Returns:
            ``(count, nbytes)``: the next ``count`` buffered elements (at
            most ``max_elements``, and beyond the first at most
            ``max_bytes`` in all) and their size in bytes as received
            (before any codec decodes them); ``(0, 0)`` once the stream
            completed (or was cancelled) with nothing left buffered.

        Raises:
            PublisherError, SessionClosed: the stream failed, after the
                elements received (as iterating does).
            trio.BusyResourceError: another task is iterating this
                subscription.
            ValueError: ``max_elements`` is not positive.

        Cancellation: nothing is taken. Always checkpoints.
        """
        if max_elements <= 0:
            raise ValueError("max_elements must be positive")
        if self._busy:
            raise trio.BusyResourceError("another task is already iterating this subscription")
        self._put_run_back()
        if self._buffered:
            await self._checkpoint()
        if not self._buffered:
            try:
                await self._wait_for_elements()
            except StopAsyncIteration:
                # (Ended with nothing buffered: _wait_for_elements did not
                # yield, and the docstring promises a checkpoint.)
                await trio.lowlevel.cancel_shielded_checkpoint()
                return 0, 0
        return self._next_batch_size(max_elements, max_bytes)

    def _next_batch_size(self, max_elements: int, max_bytes: int) -> tuple[int, int]:
        # The count and bytes of the first buffered elements, in the order
        # _take_all takes them: at least one, then while both limits hold.
        count = nbytes = 0
        head = self._head
        for chunk in self._chunks:
            if isinstance(chunk, list):
                for index in range(head, len(chunk)):
                    size = len(chunk[index])
                    if count >= max_elements or (count and nbytes + size > max_bytes):
                        return count, nbytes
                    count += 1
                    nbytes += size
            else:  # packed: every element has the same size
                size = chunk.element_size
                available = len(chunk) - head
                taken = max(0, min(available, max_elements - count, (max_bytes - nbytes) // size))
                if count == 0:
                    taken = max(taken, 1)
                count += taken
                nbytes += taken * size
                if taken < available:
                    return count, nbytes
            head = 0
        return count, nbytes

    # ---- introspection --------------------------------------------------

    @property
    def element_size(self) -> int:
        """The publisher's announced fixed element size (0: variable)."""
        return self._element_size

    @property
    def adaptive(self) -> bool:
        """True when opened with no ``prefetch``: the demand window adapts
        to the consumer (a bridge's peer sizes its protocol's window by it).

        Set it on a subscription opened with ``prefetch=0`` whose owner runs
        an adaptive window by hand (``rstreams sub`` does, to stop at
        ``--count``), before its first :meth:`request`: a bridge whose
        protocol fixes a window once (MicroMsg2's ack window) then sizes it
        for the demand the window may grow to, not for the first request,
        which is only where it starts.
        """
        return self._adaptive

    @adaptive.setter
    def adaptive(self, value: bool) -> None:
        self._adaptive = bool(value)

    def statistics(self) -> SubscriptionStatistics:
        """A snapshot of this subscription."""
        if self._cancelled:
            state = "cancelled"
        elif self._ended:
            state = "failed" if self._failed else "completed"
        else:
            state = "open" if self._subscribed else "opening"
        outstanding = self._session._outstanding_demand(self.subscriber) if self.subscriber is not None else 0
        return SubscriptionStatistics(
            subscriber=self.subscriber,
            buffered=self._buffered + length_hint(self._run),
            outstanding_demand=outstanding,
            received=self._received,
            element_size=self._element_size,
            state=state,
        )

    def __repr__(self) -> str:
        return f"<Subscription {self.name!r} id={self.subscriber} buffered={self._buffered + length_hint(self._run)}>"


class _BatchIterator:
    def __init__(self, subscription: Subscription, max_elements: int) -> None:
        self._subscription = subscription
        self._max = max_elements

    def __aiter__(self) -> _BatchIterator:
        return self

    async def __anext__(self) -> Sequence[Any]:
        subscription = self._subscription
        if subscription._busy:
            raise trio.BusyResourceError("another task is already iterating this subscription")
        subscription._put_run_back()
        if subscription._buffered:
            await subscription._checkpoint()
        if not subscription._buffered:
            await subscription._wait_for_elements()
        batch = subscription._take_all(self._max)
        subscription._consumed(len(batch))
        codec = subscription._codec
        if codec is not None:
            decode = codec.decode
            return [decode(element) for element in batch]
        return batch


class StreamReceiver(Protocol):
    """What a stream's events are handed to: a :class:`Subscription`, or the
    collector of a :meth:`Session.fetch`."""

    name: str
    subscriber: int | None
    _subscribed: bool
    #: False: large elements may come as read-only memoryviews (zero-copy).
    copy: bool

    @property
    def adaptive(self) -> bool: ...

    def _on_subscribed(self, element_size: int) -> None: ...

    def _on_elements(self, batch: ElementBatch) -> None: ...

    def _on_end(self, error: BaseException | None) -> None: ...


class SubscriptionOwner(Protocol):
    """What a :class:`Subscription` asks of the peer it was opened on (a
    session, or a :class:`~rstreams.FeedPeer`): all synchronous, none blocks."""

    def _open_subscription(self, receiver: StreamReceiver, initial_demand: int) -> int: ...

    def _cancel_subscription(self, receiver: StreamReceiver) -> None: ...

    def _request(self, subscriber: int, n: int) -> None: ...

    def _outstanding_demand(self, subscriber: int) -> int: ...

    def _receive_now(self) -> int:
        """Read and dispatch, in the caller's task, what the peer has sent
        and is waiting to be read, if that can be done without waiting:
        how many bytes were read (0 where the owner cannot)."""
        ...


class _Fetch(_OneWaiter):
    """The session's side of one :meth:`Session.fetch`: a subscription that
    only collects, with none of the iteration machinery (no buffer of
    chunks, no demand window, no codec until the end)."""

    __slots__ = ("name", "subscriber", "_limit", "_batches", "_received", "_subscribed", "_ended", "_error")

    #: A fetch asks for a fixed count.
    adaptive = False
    #: A fetch returns bytes.
    copy = True

    def __init__(self, name: str, limit: int) -> None:
        self._parked = None  # (_OneWaiter's state, set here without the call)
        self.name = name
        self.subscriber: int | None = None
        self._limit = limit
        self._batches: list[ElementBatch] = []
        self._received = 0
        self._subscribed = False
        self._ended = False
        self._error: BaseException | None = None

    # ---- called by the session's reader (synchronously) ----------------

    def _on_subscribed(self, element_size: int) -> None:
        self._subscribed = True

    def _on_elements(self, batch: ElementBatch) -> None:
        self._batches.append(batch)
        self._received += len(batch)
        if self._received >= self._limit:
            self._wake()

    def _on_end(self, error: BaseException | None) -> None:
        if not self._ended:
            self._ended = True
            self._error = error
            self._wake()

    # ---- called by Session.fetch ------------------------------------------

    async def wait(self) -> None:
        """Wait until the stream ended or ``limit`` elements arrived."""
        if self._ended or self._received >= self._limit:
            await trio.lowlevel.cancel_shielded_checkpoint()  # never reached in practice: the answer takes a read
        while not self._ended and self._received < self._limit:
            # (_park, written out: one coroutine frame less per round trip)
            self._parked = _current_task()
            await _wait_task_rescheduled(self._unpark)

    def elements(self) -> list[bytes]:
        if len(self._batches) == 1:
            return self._batches[0].tolist()
        return [element for batch in self._batches for element in batch]
