"""The publishing side of the API: publishers, their sink, and the router.

A publisher is an ``async def`` that receives a :class:`Sink` and the
:class:`SubscribeRequest`. It runs as one task per subscription, owned by the
session's nursery and wrapped in its own cancel scope:

* ``await sink.send(x)`` waits for demand, so a publisher cannot outrun its
  subscriber: demand is the channel's capacity;
* returning completes the stream; raising ``Exception`` sends onError with
  ``str(exc)`` (the traceback is logged here, never sent);
* a cancel from the subscriber, or the session ending, cancels the scope, so
  the publisher sees ``trio.Cancelled`` at its next checkpoint.

Runs of ``send``
----------------
A schedule point costs a pass of trio's run loop (an ``epoll`` call and a
task switch, some 5 µs here), and a write the writer makes for whatever it
finds. A publisher that calls ``send`` in a loop with nothing to wait for
in between (``for row in rows: await sink.send(row)``, the way most are
written) used to pay both for every element: one write per element, and
one wake-up of the subscriber per element, about 60,000 elements/s.

So ``send`` is a cancel point every time, but a schedule point only when a
run ends: it skips the yield while it continues a *run*, that is while the
publisher comes back to it within ``SEND_RUN_GAP`` of the previous ``send``
(too short a time to have waited on anything: a schedule point alone costs
about that), for at most ``SEND_RUN_LENGTH`` sends or ``SEND_RUN_SECONDS``
since the last schedule point, as iteration does on the subscriber's side
(``CHECKPOINT_INTERVAL``). The run's elements then go out in one write when
it yields (and queue as one chunk meanwhile: ``Outbound.enqueue_one``). A
``send`` that follows any pause (a publisher paced by a timer, or by
anything it awaits) yields as before, so its element goes out at once, and
so does the first element of a run. What a run costs other tasks, and the
elements queued during it, is a wait of ``SEND_RUN_SECONDS`` at most, as
long as the publisher awaits something after it: one that sends a burst and
then computes without awaiting holds the burst's tail until its next await
(it holds every other task of the process as long).

A ``send`` that comes after a pause since the publisher's last one gets its
element on its way itself: while the session's writer is parked with
nothing in hand, it writes it from the publisher's task
(``Session._send_queued``, as the reader writes its answers), and wakes
the writer otherwise. A publisher paced by a timer does that with every
element, and so saves the writer's wake-up per element: at 10,000 elements
a second, 43 -> 36 µs of the server's CPU an element and a p50 of 45 -> 35
µs. A tight loop's run ends with the writer already woken by its earlier
sends, and its elements still go out together; a stream's first element
goes to the writer, which takes it with the onComplete of a publisher that
sends one element and returns. Either way an element the connection splits
is written from the element itself, gathered, not copied.

``send_many`` / ``send_packed`` stay the fastest: they queue everything
demand allows and checkpoint once per batch.

Publishers that answer at once
------------------------------
The session *calls* the publisher as soon as the subscribe arrives, inside
its reader, and runs what the call returns as the publication's task. An
``async def`` returns its coroutine without running any of it, so the rule
above holds for it unchanged. A plain ``def`` runs right there instead, and
may queue with the non-blocking methods (``send_nowait``,
``send_packed_nowait``, which both respect demand); then:

* returning ``None`` completes the stream at once;
* raising ``Exception`` sends onError, as for an ``async def``;
* returning an awaitable (``return more(sink, n)``, for an ``async def
  more``) continues the stream as a task, exactly as if that coroutine had
  been the publisher.

Answering at once costs no task, no cancel scope and no scheduling: the
subscribed answer, the elements and onComplete leave in the same write as
the reader's pass that saw the subscribe (about half the server's CPU of a
subscribe round trip). It runs on the reader, so it must not block or take
long: anything that waits belongs in the awaitable it returns.
"""

from __future__ import annotations

import difflib
import inspect
import math
import sys
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from bisect import bisect_left
from itertools import accumulate, islice
from time import perf_counter
from types import MappingProxyType
from typing import Any, Protocol, Union
from urllib.parse import parse_qsl, urlsplit

import trio

from ._codecs import Codec, CodecLike, resolve_codec
from ._config import SessionConfig
from ._cpu_budget import CpuBudget
from ._errors import InvalidParameter
from ._peer import Peer
from ._subscribe import CHECKPOINT_INTERVAL
from .protocol import Connection, LocalProtocolError, check_publisher_name


__all__ = [
    "Sink",
    "SinkStatistics",
    "SubscribeRequest",
    "Publisher",
    "Route",
    "Router",
    "publisher_from_async_gen",
    "unknown_publisher_message",
    "PUBLISHERS_PATH",
    "PING_PATH",
    "RESERVED_PREFIX",
    "check_route_path",
    "PublishingSession",
    "PublicationHandle",
    "new_request",
    "RESERVED_PREFIX",
    "add_reserved_route",
    "SEND_RUN_GAP",
    "SEND_RUN_LENGTH",
    "SEND_RUN_SECONDS",
]

#: A run of ``send`` (see "Runs of send"): the publisher came back within this
#: many seconds of the previous ``send`` (a schedule point alone costs about
#: as much), for at most as many sends as iteration hands out between its
#: checkpoints, or this long since the last schedule point.
SEND_RUN_GAP = 5e-6
SEND_RUN_LENGTH = CHECKPOINT_INTERVAL
SEND_RUN_SECONDS = 100e-6

#: Publisher paths starting with this are the runtime's own (``$stats``,
#: ``$offsets``): no application may register one, so a client asking for
#: ``$stats`` or ``$offsets`` always gets the runtime's answer, whatever the app.
RESERVED_PREFIX = "$"


@dataclass(frozen=True, slots=True)
class SubscribeRequest:
    """What a subscriber asked for.

    Attributes:
        name: the publisher name exactly as the subscriber sent it
            (``range?count=100``).
        path: the part before ``?`` (``range``), which the router matched.
        params: the query parameters (``{"count": "100"}``; the last value
            wins when a key repeats).
        session: the session the subscription arrived on; a publisher may
            subscribe back to the peer's publishers through it.
        subscriber: the stream's Id, chosen by the peer.
    """

    name: str
    path: str
    params: Mapping[str, str]
    session: Peer = field(repr=False, compare=False)
    subscriber: int = 0

    @staticmethod
    def parse_name(name: str) -> tuple[str, Mapping[str, str]]:
        """Split a publisher name into its path and query parameters.

        The parameters are read-only: the answer for a short name is kept
        and shared, because subscribers ask for the same few names over and
        over and parsing one costs more than the rest of a subscribe's
        bookkeeping.
        """
        parsed = _parsed_names.get(name)
        if parsed is None:
            path, params = _parse_name(name)
            parsed = path, MappingProxyType(params)
            if len(name) <= _PARSED_NAME_LENGTH:
                if len(_parsed_names) >= _PARSED_NAMES:
                    _parsed_names.popitem(last=False)  # the oldest, in O(1)
                _parsed_names[name] = parsed
        return parsed

    @staticmethod
    def name_memory(name: str, params: Mapping[str, str]) -> int:
        """Bytes a publisher name and its parsed parameters hold, at most.

        What a peer's subscribe makes the server keep for as long as its
        stream is open, beyond the stream itself: the name (up to the
        protocol's 64 KiB string), its path, and every parameter's key and
        value with the dict's slot for it. A name of thousands of short
        parameters holds ten times its length, so the session charges this
        to the connection's budget (beyond ``NAME_MEMORY_ALLOWANCE``), in
        O(1): computed from the name's length and the number of parameters,
        never by walking them, it is an upper bound rather than a count.
        """
        characters = len(name)
        # The path, keys and values are disjoint pieces of the name, so
        # together no longer: as wide as it, unless percent-decoding made a
        # piece wider (up to 4 bytes a character, as the widest str).
        width = 1 if name.isascii() and "%" not in name else 4
        return (
            sys.getsizeof(name)
            + width * characters
            + _STR_OVERHEAD * (1 + 2 * len(params))
            + _DICT_SLOT * len(params)
            + _PARSED_OVERHEAD
        )

    def int_param(self, key: str, default: int, *, minimum: int | None = None, maximum: int | None = None) -> int:
        """A query parameter as an int, with bounds.

        Raises:
            InvalidParameter: (a ValueError) not an int, or out of bounds; a
                publisher that lets this escape answers the subscriber with
                onError, and the server logs one line, no traceback.
        """
        raw = self.params.get(key)
        if raw is None:
            return default
        try:
            value = int(raw)
        except ValueError:
            raise InvalidParameter(f"parameter {key}={raw!r} is not an integer") from None
        if minimum is not None and value < minimum:
            raise InvalidParameter(f"parameter {key}={value} is below the minimum {minimum}")
        if maximum is not None and value > maximum:
            raise InvalidParameter(f"parameter {key}={value} is above the maximum {maximum}")
        return value

    def float_param(self, key: str, default: float, *, minimum: float | None = None, maximum: float | None = None) -> float:
        """A query parameter as a finite float, with bounds (see :meth:`int_param`).

        Raises:
            InvalidParameter: not a number, not finite (``nan``, ``inf``, or
                a number too large for a float, ``1e400``), or out of bounds.
        """
        raw = self.params.get(key)
        if raw is None:
            return default
        try:
            value = float(raw)
        except ValueError:
            raise InvalidParameter(f"parameter {key}={raw!r} is not a number") from None
        if not math.isfinite(value):
            raise InvalidParameter(f"parameter {key}={raw!r} is not a finite number")
        if minimum is not None and value < minimum:
            raise InvalidParameter(f"parameter {key}={raw!r} is out of range: below the minimum {minimum:g}")
        if maximum is not None and value > maximum:
            raise InvalidParameter(f"parameter {key}={raw!r} is out of range: above the maximum {maximum:g}")
        return value


def _request_constructor() -> Callable[[str, str, Mapping[str, str], Peer, int], SubscribeRequest]:
    # The session makes one SubscribeRequest per subscribe, from values it
    # has already checked; a frozen dataclass's __init__ sets each field
    # through object.__setattr__, three times the cost of the slots' own
    # setters used here. The result is the same object (a test compares).
    set_name, set_path, set_params, set_session, set_subscriber = (
        getattr(SubscribeRequest, item.name).__set__ for item in fields(SubscribeRequest)
    )
    new = object.__new__

    def new_request(name: str, path: str, params: Mapping[str, str], session: Peer, subscriber: int) -> SubscribeRequest:
        request = new(SubscribeRequest)
        set_name(request, name)
        set_path(request, path)
        set_params(request, params)
        set_session(request, session)
        set_subscriber(request, subscriber)
        return request

    return new_request


new_request = _request_constructor()


#: The most query parameters a publisher name may have. Each costs the
#: parse a few microseconds (percent-decoded ones, through ``parse_qsl``):
#: 5,600 of them in one 60 KB name took 17 ms, one step of the server's
#: run loop per subscribe, and a peer sending such names at 2.3 MB/s made a
#: bystander's round trip 185 ms. No publisher needs more than a handful.
MAX_NAME_PARAMETERS = 1024


class TooManyParameters(ValueError):
    """A publisher name with more than :data:`MAX_NAME_PARAMETERS` query parameters."""


def _parse_name(name: str) -> tuple[str, dict[str, str]]:
    # (A count of the separators, in C: what bounds the parse's work below.)
    if name.count("&") >= MAX_NAME_PARAMETERS:
        raise TooManyParameters(f"more than {MAX_NAME_PARAMETERS} parameters")
    if ":" not in name and "#" not in name and name.isprintable() and not name.startswith(("//", " ")):
        # The usual ``path?query``: what urlsplit would return, without its cost.
        path, _, query = name.partition("?")
        if not query:
            return path, {}
        if "%" not in query and "+" not in query:
            # Nothing to unquote: parse_qsl's answer, at a quarter of its cost.
            return path, dict(pair.partition("=")[::2] for pair in query.split("&") if pair)
        return path, dict(parse_qsl(query, keep_blank_values=True))
    parts = urlsplit(name)
    path = parts.path if not parts.scheme else name.split("?", 1)[0]
    return path, dict(parse_qsl(parts.query, keep_blank_values=True))


# What name_memory allows for each str object beyond its characters (a
# compact str's header, 40 to 56 bytes, and its terminator), for each dict
# entry (its 24-byte entry and index, in a table up to three times the
# entries after a resize), and for the dict, the mapping proxy and the tuple
# of a parse.
_STR_OVERHEAD = 56
_DICT_SLOT = 48
_PARSED_OVERHEAD = 256


# Parsed names, oldest first: at most _PARSED_NAMES of them, each at most
# _PARSED_NAME_LENGTH characters, so a peer that sends endless distinct
# names costs a bounded amount of memory (about 100 KiB).
_parsed_names: OrderedDict[str, tuple[str, Mapping[str, str]]] = OrderedDict()
_PARSED_NAMES = 256
_PARSED_NAME_LENGTH = 200


class PublishingSession(Protocol):
    """What a publication's :class:`Sink` uses of the session it runs on."""

    config: SessionConfig
    _conn: Connection
    _room_waiters: set[PublicationHandle]

    def _wake_writer(self) -> None: ...

    def _send_queued(self) -> None: ...

    def _outbound_room(self) -> int: ...

    def _wait_in_budget_queue(self, handle: PublicationHandle) -> None: ...


class PublicationHandle:
    """The session's side of one publication: its task's scope and waiter.

    The scope exists only once the publication has a task: a publisher that
    answers at once never needs one.
    """

    __slots__ = (
        "session",
        "subscriber",
        "element_size",
        "scope",
        "closed",
        "cancelled_by_subscriber",
        "sink",
        "name",
        "_waiter",
        "in_budget_queue",
        "name_memory",
    )

    def __init__(self, session: PublishingSession, subscriber: int, element_size: int) -> None:
        self.session = session
        self.subscriber = subscriber
        self.element_size = element_size
        self.scope: trio.CancelScope | None = None
        self.closed = False
        # Set when the subscriber's cancel (or its request(n <= 0)) ended it.
        self.cancelled_by_subscriber = False
        # The publication's sink, for statistics (its count of elements sent).
        self.sink: Sink | None = None
        self.name = ""  # the publisher name the subscriber asked for
        self._waiter: trio.Event | None = None
        # In the session's queue of publishers waiting for the connection's
        # outbound half to have room (see Session._wait_in_budget_queue).
        self.in_budget_queue = False
        # What the session charges for the peer's name beyond the stream's
        # nominal cost, until the publication has stopped (see
        # Session._forget_name).
        self.name_memory = 0

    async def wait_for_room(self) -> None:
        # Wait for what is missing, and be woken only by what brings it.
        # With room left in the queue, what is missing is demand (or the
        # stream is ending): the subscriber's request wakes us, or stop().
        # Only a full queue waits for the writer, which looks at its waiters
        # on every write: publishers waiting for demand must not be among
        # them, or each write would wake every one of them for nothing, and
        # opening n waiting streams would cost n**2 (issue 18).
        # A publisher with demand and room in its own queue waits for the
        # connection's outbound half instead (the memory budget): in a
        # first-come queue that a write wakes only as far as the room it
        # freed goes, never all at once.
        waiter = self._waiter = trio.Event()
        session = self.session
        if session._conn.queued_bytes(self.subscriber) < session.config.max_queued_bytes:
            if session._outbound_room() <= 0 and session._conn.publication_demand(self.subscriber):
                session._wait_in_budget_queue(self)
            await waiter.wait()
            return
        session._room_waiters.add(self)
        try:
            await waiter.wait()
        finally:
            session._room_waiters.discard(self)

    @property
    def waiting(self) -> bool:
        """True while the publisher waits in :meth:`wait_for_room`."""
        return self._waiter is not None

    def wake(self) -> None:
        waiter = self._waiter
        if waiter is not None:
            self._waiter = None
            waiter.set()

    def stop(self) -> None:
        self.closed = True
        if self.scope is not None:
            self.scope.cancel()
        self.wake()


# Elements measured by the first step of elements_within; each step
# measures twice as many as the one before.
_WITHIN_FIRST_STEP = 64


def elements_within(elements: Sequence[bytes | memoryview], budget: int) -> int:
    """How many of ``elements``, from the first, a queue with ``budget``
    bytes of room takes: up to and including the one that reaches it (so
    at least one), or all if none does. Measured at C speed, in steps that
    double: a publisher that hands over a long list while its queue has
    room for a few of them (a step per write) measures about as many as it
    sends, not the whole list every time."""
    # Most lists are of one size: then the first element's size says how
    # many reach the budget, and one sum confirms it.
    count = len(elements)
    first = len(elements[0]) if count else 0
    if first:
        guess = min(count, max(1, -(-budget // first)))  # (the first to reach it, if all are that size)
        total = sum(map(len, elements[:guess]))
        if total < budget:
            if guess == count:
                return count
        elif total - len(elements[guess - 1]) < budget:
            return guess
    total = 0
    start = 0
    step = _WITHIN_FIRST_STEP
    while start < len(elements):
        ends = list(accumulate(map(len, elements[start : start + step]), initial=total))
        if ends[-1] >= budget:
            return start + bisect_left(ends, budget, 1)
        total = ends[-1]
        start += step
        step *= 2
    return len(elements)


@dataclass(frozen=True, slots=True)
class SinkStatistics:
    """A snapshot of one publication.

    Attributes:
        demand: elements the subscriber still allows (2**63 - 1: unbounded).
        queued_bytes: bytes queued and not yet written to the transport.
        elements_sent: elements this sink has queued so far.
        element_size: the fixed element size announced (0: variable).
    """

    demand: int
    queued_bytes: int
    elements_sent: int
    element_size: int


class Sink:
    """Where a publisher puts its elements; one per subscription.

    Without a codec, an element is ``bytes``, or a ``memoryview`` of a
    ``bytes`` object: a slice of a larger buffer (``memoryview(data)[a:b]``)
    is then written straight from that buffer, with no copy made first,
    which counts for large elements. (A view of a ``bytearray`` is refused:
    it could change before it is written.)

    Every method may be called only from the publisher's own task (or tasks
    it owns).
    """

    __slots__ = (
        "_handle",
        "_conn",
        "_session",
        "_subscriber",
        "_codec",
        "_max_queued",
        "_sent",
        "_element_size",
        "_run_length",
        "_run_started",
        "_last_send",
    )

    def __init__(self, handle: PublicationHandle, codec: Codec | None) -> None:
        self._handle = handle
        self._session = handle.session
        self._conn = handle.session._conn
        self._subscriber = handle.subscriber
        self._codec = codec
        self._max_queued = handle.session.config.max_queued_bytes
        self._element_size = handle.element_size
        self._sent = 0
        # The current run of send (see "Runs of send"): sends since its
        # schedule point, when that was, and when the last send returned.
        self._run_length = 0
        self._run_started = self._last_send = float("-inf")

    @property
    def cancelled(self) -> bool:
        """True once the subscriber cancelled the stream.

        What was on its way then is dropped by the subscriber, by its
        choice (the protocol's rule for elements in flight). False while the
        stream runs, and when it ended otherwise: completed, or cut with its
        session (see ``Session.close_kind``), when what was sent last may
        not have arrived.
        """
        return self._handle.cancelled_by_subscriber

    @property
    def demand(self) -> int:
        """Elements the subscriber allows right now (2**63 - 1 means unbounded)."""
        return self._conn.publication_demand(self._subscriber)

    @property
    def element_size(self) -> int:
        """The fixed element size this stream announced (0: variable)."""
        return self._element_size

    def _room(self) -> int:
        # How many elements may be queued now: demand, but nothing while the
        # queue already holds max_queued_bytes (a byte bound on top of demand),
        # or while the connection's outbound half is full (its memory budget).
        # A publisher answering at once (no task, so no scope yet) is not held
        # by the budget: it cannot wait, and what it queues is bounded as an
        # answer to the subscribe (Session._unsent_answers).
        return self._room_within(self._budget_room())

    def _budget_room(self) -> int | None:
        # Bytes the connection's outbound half has left; None when this
        # publisher is not held by it (see _room).
        return self._session._outbound_room() if self._handle.scope is not None else None

    def _room_within(self, budget_room: int | None) -> int:
        # _room, with the budget's room already read.
        if self._handle.closed or self._conn.queued_bytes(self._subscriber) >= self._max_queued:
            return 0
        if budget_room is not None and budget_room <= 0:
            return 0
        return self._conn.publication_demand(self._subscriber)

    async def wait_demand(self) -> None:
        """Wait until at least one element may be queued.

        Cancellation: raises ``trio.Cancelled`` if the subscriber cancels or
        the session ends. Always checkpoints.
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        while not self._room():
            await self._handle.wait_for_room()
        await trio.lowlevel.cancel_shielded_checkpoint()

    def send_nowait(self, value: Any) -> None:
        """Queue one element now.

        Raises:
            trio.WouldBlock: no demand (or the queue is full).
        """
        if not self._room():
            if self._handle.closed:
                return  # cancelled: the task is about to see Cancelled; drop
            raise trio.WouldBlock
        data = self._codec.encode(value) if self._codec is not None else value
        self._conn.send_elements(self._subscriber, [data])
        self._sent += 1
        self._session._wake_writer()

    async def send(self, value: Any) -> None:
        """Send one element, waiting for demand.

        Atomic under cancellation: either the element was queued (and will be
        sent) or ``trio.Cancelled`` was raised and nothing was queued. Always
        a cancel point; a schedule point whenever it waits, and otherwise
        unless it continues a run of sends made in a tight loop, which then
        yields every ``SEND_RUN_LENGTH`` sends or ``SEND_RUN_SECONDS`` (see
        "Runs of send" in the module's docstring).
        """
        start = perf_counter()
        await trio.lowlevel.checkpoint_if_cancelled()
        data = self._codec.encode(value) if self._codec is not None else value
        if not self._room():
            while not self._room():
                await self._handle.wait_for_room()
            # That wait was a schedule point: a run starts from it.
            start = self._run_started = self._last_send = perf_counter()
            self._run_length = 0
        self._conn.send_elements(self._subscriber, [data])
        self._sent += 1
        length = self._run_length + 1
        if (
            length < SEND_RUN_LENGTH
            and start - self._last_send < SEND_RUN_GAP
            and start - self._run_started < SEND_RUN_SECONDS
        ):
            # The run goes on: the writer takes its elements together when
            # it ends (the cancel point above was this call's checkpoint).
            self._session._wake_writer()
            self._run_length = length
            self._last_send = perf_counter()
            return
        # The run ends here. A send after a pause since the publisher's last
        # one (paced by a timer, say) gets its element on its way at once:
        # written from this task if the writer is parked with nothing in
        # hand (else the writer, woken, writes it). Not the first send of a
        # stream: a publisher that sends one element and returns would have
        # it written alone, and its onComplete in a write of its own, where
        # the writer, woken, takes both together (a fetch of one element
        # would return on the element and cancel a stream that is about to
        # complete). A tight loop's run ends with the writer already woken
        # by its earlier sends.
        if self._sent > 1:
            self._session._send_queued()
        else:
            self._session._wake_writer()
        self._run_length = 0
        await trio.lowlevel.cancel_shielded_checkpoint()
        self._run_started = self._last_send = perf_counter()

    async def send_some(self, values: Sequence[Any]) -> int:
        """Queue as many of ``values`` as demand allows now; return how many.

        Bounded twice: by demand, and by ``max_queued_bytes`` (always at least
        one element, so a single large element still goes). Waits only while
        no element at all may be queued. Checkpoints once.
        """
        if not values:
            await trio.lowlevel.checkpoint()
            return 0
        await self.wait_demand()
        budget_room = self._budget_room()  # read once for the whole batch
        count = min(len(values), self._room_within(budget_room))
        # The connection copies what it queues, so the whole list can go as is.
        batch = values if count == len(values) else values[:count]
        if self._codec is not None:
            encode = self._codec.encode
            batch = [encode(value) for value in batch]
        budget = self._max_queued - self._conn.queued_bytes(self._subscriber)
        if budget_room is not None:
            budget = min(budget, budget_room)
        if self._element_size:
            fit = max(1, budget // self._element_size)
        else:
            fit = elements_within(batch, budget)
        if fit < count:
            count = fit
            batch = batch[:count]
        self._conn.send_elements(self._subscriber, batch)
        self._sent += count
        self._session._wake_writer()
        return count

    async def send_many(self, values: Iterable[Any]) -> None:
        """Send every value, waiting for demand as often as needed.

        Queues as many elements as demand allows per step and checkpoints once
        per step, never once per element. On cancellation, the elements
        already queued are sent and the rest are not.
        """
        if isinstance(values, Sequence):
            offset = 0
            while offset < len(values):
                offset += await self.send_some(values[offset:] if offset else values)
            return
        iterator = iter(values)
        pending: list[Any] = []
        while True:
            if not pending:
                pending = list(islice(iterator, 4096))
                if not pending:
                    await trio.lowlevel.checkpoint()
                    return
            sent = await self.send_some(pending)
            pending = pending[sent:]

    def _packed_count(self, packed: bytes) -> int:
        size = self._element_size
        if not size or len(packed) % size:
            raise ValueError(f"send_packed needs a multiple of element_size ({size}) bytes")
        return len(packed) // size

    def send_packed_nowait(self, packed: bytes) -> None:
        """Queue fixed-size elements packed back to back, all of them, now.

        Raises:
            trio.WouldBlock: demand (or the queue's byte bound) allows fewer
                than all of them; nothing was queued.
            ValueError: as for :meth:`send_packed`.
        """
        size = self._element_size
        if not size or len(packed) % size:
            self._packed_count(packed)  # raises
        count = len(packed) // size
        if not count:
            return
        if self._room() < count:
            if self._handle.closed:
                return  # cancelled: the stream is gone; drop, as send_nowait does
            raise trio.WouldBlock
        self._conn.send_packed(self._subscriber, packed)
        self._sent += count
        self._session._wake_writer()

    async def send_packed(self, packed: bytes) -> None:
        """Send fixed-size elements packed back to back in one bytes object.

        The fastest way to publish on a stream whose route declared an
        ``element_size``: no object per element is ever built, and the
        elements go out as onNextPacked. Waits for demand as often as needed,
        checkpointing once per step.

        Raises:
            ValueError: the stream has no element size, or ``len(packed)`` is
                not a multiple of it.
        """
        self._packed_count(packed)
        size = self._element_size
        view_offset = 0
        total = len(packed)
        while view_offset < total:
            await self.wait_demand()
            budget_room = self._budget_room()
            count = min((total - view_offset) // size, self._room_within(budget_room))
            if budget_room is not None:
                # Within the connection's outbound half (one element past it
                # at most), as send_some: a large buffer goes in pieces.
                count = min(count, max(1, budget_room // size))
            if not count:
                # Cancelled (or the session began closing) during the schedule
                # point at the end of wait_demand: the next wait_demand raises
                # Cancelled, or waits, instead of queueing on a stream that
                # is gone.
                continue
            end = view_offset + count * size
            chunk = packed if (view_offset == 0 and end == total) else packed[view_offset:end]
            self._conn.send_packed(self._subscriber, chunk)
            self._sent += count
            view_offset = end
            self._session._wake_writer()

    def statistics(self) -> SinkStatistics:
        """A snapshot of this publication."""
        return SinkStatistics(
            demand=self.demand,
            queued_bytes=self._conn.queued_bytes(self._subscriber),
            elements_sent=self._sent,
            element_size=self._element_size,
        )


PublisherFunction = Callable[..., Union[Awaitable[None], None]]
Publisher = PublisherFunction


def check_route_path(path: str) -> None:
    """A route path (a publisher's or a topic's) is matched against names
    subscribers send, which are UTF-8 text: a path with no UTF-8 form (lone
    surrogates, as ``os.fsdecode`` makes) could never be reached.

    Raises:
        ValueError: it has none (or is not a ``str``).
    """
    try:
        check_publisher_name(path)
    except LocalProtocolError:
        raise ValueError(f"a route path must be UTF-8 text, got {path!r}") from None


@dataclass(frozen=True, slots=True)
class Route:
    """A publisher and how it is served.

    Attributes:
        publisher: ``async def fn(sink, request)`` or ``async def fn(sink)``;
            or a plain ``def`` that answers at once (see the module docs).
        element_size: fixed element size announced in subscribed (0: variable).
        codec: how values are encoded ("raw", "msgpack", "json", or a Codec).
        kind: what ``$publishers`` (``rstreams ls``) calls it: "publisher",
            or "topic" and "topic publishing" for a topic's two routes.
    """

    publisher: PublisherFunction
    element_size: int = 0
    codec: CodecLike = None
    kind: str = "publisher"
    # Whether the publisher takes the request: looked up once here, because
    # inspect.signature costs more than a whole subscribe round trip.
    takes_request: bool = field(init=False, repr=False, compare=False)
    # The codec, resolved once rather than per subscribe.
    resolved_codec: Codec | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if type(self.element_size) is not int or self.element_size < 0:
            raise ValueError(f"element_size must be an int >= 0, got {self.element_size!r}")
        object.__setattr__(self, "takes_request", _takes_request(self.publisher))
        object.__setattr__(self, "resolved_codec", resolve_codec(self.codec))

    def start(self, sink: Sink, request: SubscribeRequest) -> Awaitable[None] | None:
        """Call the publisher: what it returns, if anything, is what runs as
        the publication's task (an ``async def`` publisher returns its
        coroutine without running any of it)."""
        if self.takes_request:
            return self.publisher(sink, request)
        return self.publisher(sink)


def _takes_request(function: Callable[..., Any]) -> bool:
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):
        return True
    positional = [
        p
        for p in parameters
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL)
    ]
    return len(positional) >= 2 or any(p.kind is p.VAR_POSITIONAL for p in positional)


RouteLike = Union[Route, PublisherFunction]

#: The reserved publisher every router serves: one JSON record per route,
#: ``{"name": PATH, "kind": KIND, "element_size": N}``, sorted by name
#: (what ``rstreams ls`` prints).
PUBLISHERS_PATH = "$publishers"
#: The reserved publisher that completes at once, with no element: one
#: subscribe round trip, what ``rstreams ping`` measures.
PING_PATH = "$ping"
#: "no such publisher" names the closest known paths only for routers up to
#: this size, so that a flood of unknown names costs little on huge ones.
MAX_ROUTES_TO_SUGGEST = 1000
#: ... and only for paths up to this long: a typo is short, and comparing a
#: long path with every route costs in proportion to both (7 ms for 60 KB
#: against the demo's 9 routes).
MAX_PATH_TO_SUGGEST = 256
#: What a router's suggestions for peers may cost (a ``CpuBudget``: seconds
#: of CPU at once, and the share of a core over time). A 21-character typo
#: among 1,000 routes takes 34 ms to match, so a peer repeating typos would
#: otherwise buy the whole core; beyond the budget, "no such publisher"
#: comes without "closest".
SUGGESTION_BUDGET_BURST = 0.05
SUGGESTION_BUDGET_SHARE = 0.02


class Router:
    """Maps publisher names (``range?count=10``) to publishers, by path.

    Example::

        app = Router()

        @app.publisher("range", element_size=8)
        async def numbers(sink, request):
            ...

    Args:
        routes: initial routes, a path to a publisher or a :class:`Route`.
    """

    def __init__(self, routes: Mapping[str, RouteLike] | None = None) -> None:
        self._routes: dict[str, Route] = {}
        self._reserved = {PUBLISHERS_PATH: Route(self._list_routes, codec="json"), PING_PATH: Route(_complete_at_once)}
        self._suggestions = CpuBudget(SUGGESTION_BUDGET_BURST, SUGGESTION_BUDGET_SHARE)
        # $publishers' records, sorted, made once per change of the routes.
        self._listing: list[dict[str, Any]] | None = None
        for path, route in (routes or {}).items():
            self.add(path, route)

    def add(self, path: str, publisher: RouteLike, *, element_size: int = 0, codec: CodecLike = None) -> None:
        """Serve ``publisher`` at ``path``.

        Raises:
            ValueError: the path has a query, or starts with ``$`` (reserved
                for the runtime's own publishers, such as ``$stats``, ``$offsets``, ``$publishers``).
        """
        if "?" in path:
            raise ValueError(f"a route path has no query: {path!r}")
        check_route_path(path)
        if path.startswith(RESERVED_PREFIX) and not _is_runtime_route(publisher):
            raise ValueError(
                f"paths starting with {RESERVED_PREFIX!r} are reserved for the runtime ($stats, $offsets, {PUBLISHERS_PATH}, {PING_PATH}): {path!r}"
            )
        self._add(path, publisher, element_size, codec)

    def remove(self, path: str) -> None:
        """Stop serving ``path`` (nothing if it is not served). Sessions
        already subscribed keep their streams; new subscribes are refused."""
        if self._routes.pop(path, None) is not None:
            self._listing = None

    def _add(self, path: str, publisher: RouteLike, element_size: int, codec: CodecLike) -> None:
        if isinstance(publisher, Route):
            route = publisher
        else:
            if not callable(publisher):
                raise TypeError(f"a publisher must be an async function, got {publisher!r}")
            route = Route(publisher, element_size, codec)
        resolve_codec(route.codec)  # fail now on an unknown codec name
        self._routes[path] = route
        self._listing = None  # ($publishers: listed again at its next subscribe)

    def publisher(
        self, path: str, *, element_size: int = 0, codec: CodecLike = None
    ) -> Callable[[PublisherFunction], PublisherFunction]:
        """Decorator form of :meth:`add`."""

        def register(function: PublisherFunction) -> PublisherFunction:
            self.add(path, function, element_size=element_size, codec=codec)
            return function

        return register

    def resolve(self, path: str) -> Route | None:
        """The route for ``path`` (``$publishers`` and ``$ping`` included), or None."""
        route = self._routes.get(path)
        if route is None and path.startswith(RESERVED_PREFIX):
            return self._reserved.get(path)
        return route

    def closest_paths(self, path: str, count: int = 3) -> list[str]:
        """Up to ``count`` served paths that look like ``path``, closest first."""
        if len(self._routes) > MAX_ROUTES_TO_SUGGEST:
            return []
        paths = [known for known in self._routes if not known.startswith(RESERVED_PREFIX)]
        return difflib.get_close_matches(path, paths, n=count)

    def suggest(self, path: str) -> list[str]:
        """:meth:`closest_paths` for a path a peer asked for, within a budget.

        What "no such publisher" names: nothing for a path longer than
        :data:`MAX_PATH_TO_SUGGEST`, nor once suggestions have cost this
        router more CPU than :data:`SUGGESTION_BUDGET_BURST` at once or
        :data:`SUGGESTION_BUDGET_SHARE` of a core over time, so that a peer
        repeating unknown names cannot make the matching its weapon.
        """
        if len(path) > MAX_PATH_TO_SUGGEST or not self._suggestions.allows():
            return []
        with self._suggestions.spend():
            return self.closest_paths(path)

    async def _list_routes(self, sink: Sink) -> None:
        # A snapshot at subscribe time, sent as demand allows: the app's
        # routes, not the runtime's own $ ones (docs/PROTOCOL.md lists those).
        # Listed and sorted once per change of the routes, not per
        # subscribe: among 20,000 routes that was 8 ms before the first
        # element, even for a stream cancelled at once, and a peer
        # subscribing in batches held the server for seconds.
        records = self._listing
        if records is None:
            records = self._listing = [
                {"name": path, "kind": route.kind, "element_size": route.element_size}
                for path, route in sorted(self._routes.items())
                if not path.startswith(RESERVED_PREFIX)
            ]
        for record in records:
            await sink.send(record)

    @property
    def paths(self) -> list[str]:
        """The paths served, sorted."""
        return sorted(self._routes)


def add_reserved_route(router: Router, path: str, publisher: RouteLike) -> None:
    """Serve one of the runtime's own publishers (``$offsets``) on ``router``.

    Only the runtime calls this; :meth:`Router.add` refuses reserved names,
    except for a :class:`Route` made here (so that copying a router's routes
    into another, ``Router({p: app.resolve(p) for p in app.paths})``, works).
    """
    if not path.startswith(RESERVED_PREFIX):
        raise ValueError(f"a reserved path starts with {RESERVED_PREFIX!r}: {path!r}")
    router._add(path, publisher, 0, None)
    _runtime_routes.add(router._routes[path])


# The routes add_reserved_route made (one per router that serves topics): a
# Route is frozen and has no room for a mark, so the runtime remembers them.
_runtime_routes: set[Route] = set()


def _is_runtime_route(publisher: RouteLike) -> bool:
    return isinstance(publisher, Route) and publisher in _runtime_routes


def _complete_at_once(sink: Sink) -> None:
    # A plain def: subscribed and onComplete leave in one write, no task.
    return None


def unknown_publisher_message(name: str, path: str, app: Router | None) -> str:
    """The onError text for a subscribe to a path ``app`` does not serve.

    ``no such publisher: NAME``, then the closest known paths if any look
    alike: ``no such publisher: rnage (closest: range)`` (within the
    router's budget for suggestions: :meth:`Router.suggest`).
    """
    closest = app.suggest(path) if app is not None else []
    if closest:
        return f"no such publisher: {name} (closest: {', '.join(closest)})"
    return f"no such publisher: {name}"


def publisher_from_async_gen(
    generator_function: Callable[..., AsyncIterator[Any]],
) -> PublisherFunction:
    """Turn an async generator function into a publisher, pulled by demand.

    The generator is advanced only after demand is available, so it never
    runs ahead of the subscriber (RS 1.1): a generator that produces values
    on its own schedule (a ticker) produces exactly as many as requested.
    It runs inside the publisher's task, and is always closed there with
    ``aclose()``, on completion, error and cancellation alike (a remote cancel
    interrupts it at the ``await`` where it waits, as ``trio.Cancelled``).
    The generator must not ``yield`` inside a nursery or cancel scope (trio's
    rule for async generators).

    The generator function takes the request, or nothing.
    """

    takes_request = _takes_generator_request(generator_function)

    async def publisher(sink: Sink, request: SubscribeRequest) -> None:
        agen = generator_function(request) if takes_request else generator_function()
        try:
            while True:
                await sink.wait_demand()
                try:
                    value = await agen.__anext__()
                except StopAsyncIteration:
                    return
                sink.send_nowait(value)
        finally:
            # Closing inside this task (never from a finalizer in another
            # one) is what makes async generators safe under trio.
            aclose = getattr(agen, "aclose", None)
            if aclose is not None:
                await aclose()

    publisher.__name__ = getattr(generator_function, "__name__", "publisher")
    publisher.__doc__ = getattr(generator_function, "__doc__", None)
    return publisher


def _takes_generator_request(function: Callable[..., Any]) -> bool:
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL) for p in parameters)
