"""A session: one protocol connection over one trio stream, and its tasks.

Who owns what
-------------
A session owns a nursery holding exactly these tasks:

* the **reader**: receives bytes, feeds the sans-I/O ``Connection``, and
  dispatches its events *synchronously* (append to a subscription's buffer,
  set an event, cancel a scope). It never waits on application code.
* the **writer**: the task that waits to write. It sleeps until something is
  queued, then writes what ``Connection.data_to_send`` chooses (control
  first, then data round-robin across streams, split and packed), many
  messages per ``send_all``. While it is parked with nothing in hand, a
  task that has just queued what the peer waits for may write it itself
  without waiting (:meth:`Session._send_queued`, ``_direct_socket``).
* one task per **publication** (a peer's subscription to one of our
  publishers), each in its own cancel scope, so a cancel from the peer is
  ``scope.cancel()``.
* the **timekeeper**, started once the peer's hello arrives when the
  session has an idle timeout or keepalive was agreed: it sleeps until the
  next deadline (``protocol/_timers.py`` does the arithmetic), sends pings,
  and asks the manager to close a session that is idle or whose peer no
  longer answers.
* the **manager**, which waits for a reason to close and then runs the close
  sequence. Every way a session can end (our ``aclose``, the peer's goodbye,
  a protocol error, a lost connection, a handshake timeout) is a request to
  the manager, so the policy lives in one place: :meth:`Session._close_sequence`.

Nothing here blocks on the peer without a bound: the handshake, the drain
before goodbye, and the wait for the peer's goodbye all have timeouts.
"""

from __future__ import annotations

import contextvars
import enum
import logging
import time
from collections import OrderedDict, deque
from collections.abc import AsyncIterator, Awaitable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import trio
from trio.lowlevel import enable_ki_protection

from ._auth import AUTHENTICATION_FAILED, PeerInfo, Principal
from ._codecs import CodecLike, resolve_codec
from ._config import DEFAULT_CONFIG, NAME_MEMORY_ALLOWANCE, STREAM_MEMORY_COST, SessionConfig
from ._direct_socket import direct_socket, written_through
from ._errors import (
    connection_lost_reason,
    HandshakeTimeout,
    NotRetained,
    PublisherError,
    RemoteProtocolError,
    SessionBroken,
    SessionClosed,
    UnknownPublisher,
    InvalidParameter,
)
from ._groups import caller_sees_its_own_exception, without_consequences
from ._logs import LogThrottle, peer_address, peer_text, transport_name
from ._loopback import unpace_loopback
from ._peer import DEFAULT_PREFETCH, Peer
from ._publish import PublicationHandle, Route, Router, Sink, SubscribeRequest, TooManyParameters, new_request, unknown_publisher_message
from ._subscribe import HeldElements, StreamReceiver, Subscription, _Fetch
from ._timers import use_precise_timers
from .protocol import (
    Cancel,
    Connection,
    Elements,
    Extension,
    Goodbye,
    Hello,
    IdleTimer,
    InvalidRequest,
    KeepaliveAction,
    KeepaliveTimer,
    OnComplete,
    OnError,
    Ping,
    Pong,
    Request,
    Subscribe,
    Subscribed,
)

__all__ = ["Session", "SessionStatistics", "open_stream_session"]

logger = logging.getLogger("rstreams")

_TRANSPORT_ERRORS = (trio.BrokenResourceError, trio.ClosedResourceError)
# How long a forced close may spend saying goodbye on its way out.
_CLOSE_TRANSPORT_TIMEOUT = 1.0

# A plain ASCII name this short, of so few parameters, holds at most 969
# bytes by SubscribeRequest.name_memory's reckoning, within the allowance:
# every subscribe has its name's charge reckoned, and this spares the usual
# one the reckoning (a test holds the bound to the allowance).
_SHORT_NAME = 64
_SHORT_NAME_PARAMS = 3

# The reason a session gives when it was cancelled rather than closed: from
# outside, or by one of its own tasks failing (a publisher's KeyboardInterrupt).
_CANCELLED = "session cancelled"
# Events the reader dispatches before it lets the writer send the answers:
# parsing a whole read first would make peers take turns, each idle while the
# other works through a batch, instead of working at the same time.
_DISPATCH_BATCH = 32
# Events the reader dispatches in one step of the run loop even when they
# leave nothing to answer (a flood of requests, say): a read of 256 KiB of
# 3-byte requests was one step of 87,000 of them, and every other
# connection waited a second for its turns.
_EVENTS_PER_STEP = 1024
# How long a failed write waits for the reader to report why the connection
# was lost, before it reports the write error itself.
_WRITE_ERROR_GRACE = 1.0
# Events that are only the keepalive talking: they do not make a session busy.
_KEEPALIVE_EVENTS = (Ping, Pong)


# About how many bytes of split parts one gathered write (plain TCP) carries
# as views of their elements: no memory beyond the elements, which count
# against the outbound half while queued and while the writer holds them,
# and fewer, larger writes cost the sender and the receiver fewer wake-ups
# (1 MiB elements: +33% MB/s against writes of write_size).
_GATHERED_WRITE_SIZE = 1024 * 1024


class _CloseKind(enum.Enum):
    LOCAL = "local"  # aclose(): drain, goodbye, wait for the peer's goodbye
    PEER_GOODBYE = "peer goodbye"  # answer goodbye and close
    PROTOCOL_ERROR = "protocol error"  # goodbye is queued; flush it and close
    HANDSHAKE_TIMEOUT = "handshake timeout"
    IDLE_TIMEOUT = "idle timeout"  # goodbye, close: nothing is open
    KEEPALIVE_TIMEOUT = "keepalive timeout"  # the peer missed its pong: goodbye, close
    REFUSED = "authentication failed"  # the authenticate hook said no: goodbye, close
    LOST = "lost"  # the transport failed: nothing more can be written


def _closed_error(kind: _CloseKind, reason: str, cause: BaseException | None) -> SessionClosed:
    """What the session's streams raise once it ended as ``kind`` says, and
    any call made after: one mapping, so that the two never disagree (a
    subscribe after a keepalive timeout said the local side closed, while
    the streams it ended said the transport broke)."""
    error: SessionClosed
    if kind is _CloseKind.PEER_GOODBYE:
        return SessionClosed(reason, by_peer=True)
    if kind is _CloseKind.HANDSHAKE_TIMEOUT:
        return HandshakeTimeout(reason)
    if kind is _CloseKind.LOST or kind is _CloseKind.KEEPALIVE_TIMEOUT:
        error = SessionBroken(reason)
    else:
        error = SessionClosed(reason, by_peer=False)
    if kind is not _CloseKind.LOCAL:
        error.__cause__ = cause
    return error


@dataclass(frozen=True, slots=True)
class SessionStatistics:
    """A snapshot of one session.

    Attributes:
        state: the protocol connection's state name.
        subscriptions: our open subscriptions to the peer.
        publications: the peer's open subscriptions to our publishers.
        bytes_received / bytes_sent: transport bytes so far.
        elements_dropped: queued elements a goodbye discarded.
        close_reason: why the session closed (None while open).
        inbound_bytes: what the connection holds of what the peer sent, now:
            unfinished split elements, input not yet parsed, and elements
            received and not yet taken by the application (the inbound
            half of ``config.max_connection_memory``).
        outbound_bytes: what it holds for the peer, now: control messages,
            queued elements, what the writer holds unsent, and
            ``STREAM_MEMORY_COST`` per open stream (the outbound half).
        publications_stopping: the peer's subscriptions that have ended
            (its cancel, or the session's end) while their publisher's task
            has not finished yet. Each still counts as an open stream in
            ``outbound_bytes`` and against the streams a peer may open.
    """

    state: str
    subscriptions: int
    publications: int
    bytes_received: int
    bytes_sent: int
    elements_dropped: int
    close_reason: str | None
    inbound_bytes: int = 0
    outbound_bytes: int = 0
    publications_stopping: int = 0


class Session(Peer):
    """One rstreams connection: subscribe to the peer, serve it publishers.

    Create one with :func:`rstreams.open_session` (client),
    :func:`open_stream_session` (any ``trio.abc.Stream``), or let
    :func:`rstreams.serve_tcp` create one per connection (server).
    """

    def __init__(
        self,
        stream: trio.abc.Stream,
        *,
        app: Router | None = None,
        config: SessionConfig = DEFAULT_CONFIG,
    ) -> None:
        self.config = config
        self.app = app
        self._stream = stream
        #: ``host:port`` of the peer (``-`` without a socket), for log records.
        self.peer_address = peer_address(stream)
        # Whether each stream's subscribe, cancel and end are logged (debug):
        # looked up once per session rather than on every subscribe, which
        # a request-response peer sends tens of thousands of times a second.
        self._log_streams = logger.isEnabledFor(logging.DEBUG)
        extensions = (Extension.KEEPALIVE,) if config.keepalive_interval is not None else ()
        # Plain TCP: reads and writes straight on the socket (_direct_socket).
        direct = self._direct = direct_socket(stream)
        # Parts of part_size only where writes gather them uncopied.
        limits = config.limits if direct is not None else config.limits.for_copied_writes()
        self._conn = Connection(
            limits=limits,
            extensions=extensions,
            token=config.token,
            max_connection_memory=config.max_connection_memory,
        )
        # The memory budget (SessionConfig.max_connection_memory): each half.
        self._half_budget = config.max_connection_memory // 2
        # Open streams may take this much of the outbound half (see
        # _start_publication): three quarters, the rest is kept for data.
        self._streams_share = self._half_budget * 3 // 4
        # Elements our subscriptions hold for the application (inbound).
        self.held_elements = HeldElements()
        # What the writer holds: taken from the queues and not yet written
        # (non-zero exactly while a write is under way).
        self._writer_held = 0
        # Publishers that wait for the connection's outbound half to have
        # room (their own queue is not full and they have demand), first
        # come first woken: a write wakes as many as the room it freed can
        # take, O(woken), never all of them (issue 18, defect 2).
        self._budget_waiters: deque[PublicationHandle] = deque()
        # Publications that have ended (the peer's cancel, or the session's
        # end) while their task still runs: each keeps counting as an open
        # stream until the task has finished (_end_publication), since its
        # task, coroutine frames and sink live until then. Else a peer that
        # subscribes and cancels at once has as many live tasks as it sends
        # pairs, each charged nothing.
        self._stopping: set[PublicationHandle] = set()
        # Paces the lines about the peer's streams (made at the first one).
        self._log_throttle: LogThrottle | None = None
        # What the peer's publisher names hold beyond the streams' nominal
        # cost, publications stopping included (PublicationHandle.name_memory).
        self._names_memory = 0
        # Set (and replaced) each time one of them finishes, and when the
        # session starts closing: the reader waits on it while a subscribe
        # it holds (_held_events) finds the streams' share full of them.
        self._publication_stopped: trio.Event | None = None
        # The events of a batch from the first subscribe that did not fit
        # while publications were stopping, on: the reader dispatches them
        # once one has finished (see _take_in). None when nothing is held.
        self._held_events: list[Any] | None = None
        #: Who the peer is, as ``config.authenticate`` said (None without it).
        self.principal: Principal | None = None
        # With an authenticate hook, the peer's subscribes that arrive before
        # the hook has answered (in the hello's read) wait here, unresolved:
        # a refused peer must learn nothing of our publishers. None once the
        # peer is admitted (or without a hook). At most one read's worth.
        self._deferred: list[Subscribe] | None = [] if config.authenticate is not None else None
        # Set by the timekeeper (see _keep_time) once the peer's hello is in.
        self._keepalive: KeepaliveTimer | None = None
        self._idle: IdleTimer | None = None
        self._nursery: trio.Nursery | None = None
        self._subscriptions: dict[int, StreamReceiver] = {}
        self._publications: dict[int, PublicationHandle] = {}
        self._room_waiters: set[PublicationHandle] = set()
        self._writer_wakeup = trio.Event()
        self._writer_idle: trio.Event | None = None
        # Sending without the writer (_direct_socket) happens only while it
        # is parked with nothing in hand; what the socket did not take waits
        # in _unsent, and the writer sends it before anything else.
        unpace_loopback(stream, config.loopback_congestion_control)
        self._send_now = direct.send_buffers_now if direct is not None else None
        self._receive_some = direct.receive_some if direct is not None else stream.receive_some
        # Busy polling (see _direct_socket): the reader polls before it
        # sleeps when the peer's next message is due, that is while a fetch
        # waits for its answer (_fetching), after a read whose subscribes
        # were answered at once (a request-response peer sends its next one
        # as the answer arrives), or after a read that brought elements (a
        # stream flowing: its next elements are on their way); and only
        # while such waits have lately ended within the window (_due_wait,
        # a moving average), since polling for a slower peer only burns CPU.
        self._busy_poll = config.busy_poll if direct is not None else 0.0
        self._fetching = 0
        self._answered_subscribe = False
        self._received_elements = False
        self._due_wait = 0.0
        self._writer_parked = False
        # Set (and replaced) each time the writer takes or sends bytes: the
        # reader waits on it while the peer leaves our answers unread.
        self._write_progress: trio.Event | None = None
        # Elements queued by publishers that answered at once (within the
        # reader's pass): stream Id -> bytes as queued, oldest first, and
        # the sum of those: answers to what was read, like control (see
        # _unsent_answers).
        # (An OrderedDict: its oldest entry is found in O(1); a dict's is
        # found by walking the slots its deletions left at the front.)
        self._answered: OrderedDict[int, int] = OrderedDict()
        self._answered_bytes = 0
        # The Ids answered at once during the read being dispatched, noted
        # in _answered once the read's answers have been sent, and only if
        # some are left unsent (see _note_answered).
        self._answered_now: list[int] = []
        self._unsent: list[bytearray | memoryview] | None = None
        # While the reader dispatches a read, what the events queue (answers
        # to subscribes, elements from publishers that answer at once) is
        # sent by the reader itself afterwards: waking the writer for it as
        # well would cost a scheduling pass for nothing.
        self._dispatching = False
        self._close_requested = trio.Event()
        self._close_kind: _CloseKind | None = None
        self._close_reason: str | None = None
        self._stream_error: BaseException | None = None
        self._reader_done = trio.Event()
        # Reads in a consumer's task (see _receive_now): allowed once the
        # reader is in its main loop (past the handshake), whose scope they
        # cancel when they meet the end of reading (the peer's goodbye, its
        # bad input). The reader's context, set as the loop starts: what it
        # dispatches (a plain publisher called, a publisher's task started)
        # sees the same context vars whichever task read the bytes.
        self._reading_scope = trio.CancelScope()
        self._reader_context: contextvars.Context | None = None
        self._writer_done = trio.Event()
        self._closed = trio.Event()
        self._stream_closed = False
        self._bytes_in = 0
        self._bytes_out = 0
        self._dropped = 0
        # Elements sent by publications that have ended (live ones count in
        # their sinks): counted once per stream, never per element.
        self._elements_published = 0

    # ---- life cycle --------------------------------------------------

    async def _run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        # The session's own nursery, one level below the caller's: the
        # manager cancels it to stop the session's tasks without touching the
        # code in the caller's ``async with`` block. Its own tasks (manager,
        # reader, writer, timekeeper) are protected from KeyboardInterrupt,
        # as trio's machinery is: Ctrl-C goes to the main task, whose
        # cancellation then ends the session in order. Raised inside the
        # reader instead (where a busy-polling reader often is), it ended
        # the session from within, and the application's tasks still
        # waiting on it met SessionClosed next to the KeyboardInterrupt.
        # Publisher tasks run the application's code and stay interruptible.
        if self.app is not None and self.config.precise_timers:
            use_precise_timers()  # (its publishers, paced by trio's timers, send on time)
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            nursery.start_soon(self._manager)
            nursery.start_soon(self._reader)
            nursery.start_soon(self._writer)
            task_status.started()

    def hello_received(self) -> bool:
        """Whether the peer's hello has arrived (its side of the handshake)."""
        return self._conn.peer_hello is not None

    def _close_for_newcomer(self, reason: str) -> None:
        # A full server takes this session's place before the peer's hello
        # (rstreams._admission): goodbye with the reason, then close, as a
        # handshake timeout does.
        self._request_close(_CloseKind.HANDSHAKE_TIMEOUT, reason)

    @property
    def closed(self) -> bool:
        """True once the session has fully closed."""
        return self._closed.is_set()

    @property
    def close_reason(self) -> str | None:
        """Why the session closed or is closing (None while open)."""
        return self._close_reason

    @property
    def close_kind(self) -> str | None:
        """How the session closed or is closing, as a kind (None while open).

        ``"local"`` (:meth:`aclose`: what was queued is written first),
        ``"peer goodbye"``, ``"protocol error"``, ``"handshake timeout"``,
        ``"idle timeout"``, ``"keepalive timeout"``, ``"authentication
        failed"`` or ``"lost"`` (the transport failed). A publisher whose
        stream ends with its session can tell from it whether what it sent
        last may not have arrived: anything but ``"local"`` cut the stream.
        """
        return None if self._close_kind is None else self._close_kind.value

    async def wait_closed(self) -> None:
        """Wait until the session has closed, for whatever reason."""
        await self._closed.wait()

    async def aclose(self, reason: str = "goodbye") -> None:
        """Close gracefully: drain queued elements, say goodbye, close.

        Queued elements are written for up to ``config.drain_timeout``
        seconds (what is left then is dropped and counted in
        ``statistics().elements_dropped``); then goodbye goes out, every
        stream ends, and the peer's goodbye is awaited for up to
        ``config.goodbye_timeout``. Idempotent.

        Cancellation: if cancelled, the transport is closed forcefully at
        once. Always checkpoints.
        """
        self._request_close(_CloseKind.LOCAL, reason)
        if trio.lowlevel.current_task().parent_nursery is self._nursery:
            # Called from one of this session's publishers: the close sequence
            # cancels this very task, which must not turn into a forced close.
            await self._closed.wait()
            return
        try:
            await self._closed.wait()
        except BaseException:
            self._force_close()
            raise

    def _force_close(self) -> None:
        if self._nursery is not None:
            self._nursery.cancel_scope.cancel()

    def _request_close(self, kind: _CloseKind, reason: str, error: BaseException | None = None) -> None:
        if self._close_kind is not None:
            return
        self._close_kind = kind
        self._close_reason = reason
        self._stream_error = error
        self._close_requested.set()
        # A reader waiting for the application to take elements, or for
        # publications to stop, reads again: the close sequence needs the
        # peer's goodbye.
        self.held_elements.release(0)
        self._note_publication_stopped()

    @enable_ki_protection
    async def _manager(self) -> None:
        try:
            await self._close_requested.wait()
            await self._close_sequence()
        finally:
            # Also reached when the session's nursery is cancelled from
            # outside: then the close is forced, but still complete.
            if self._close_reason is None:
                self._close_reason = _CANCELLED
            self._end_streams(SessionClosed(self._close_reason, by_peer=False))
            if not self._stream_closed:
                self._stream_closed = True
                # aclose_forcefully finishes at once even when cancelled; the
                # shield only lets it run here, where we may already be.
                with trio.CancelScope(shield=True):
                    await trio.aclose_forcefully(self._stream)
            # The error that closed us holds its traceback, whose frames
            # hold this session: a cycle that only the cycle collector
            # would free, with every buffer the session still points to.
            # The streams have it (as the cause of their error) already.
            self._stream_error = None
            self._closed.set()
            assert self._nursery is not None
            self._nursery.cancel_scope.cancel()

    async def _close_sequence(self) -> None:
        kind = self._close_kind
        reason = self._close_reason or ""
        conn = self._conn
        if kind is _CloseKind.LOCAL:
            for handle in self._publications.values():
                handle.closed = True  # no new elements; what is queued drains
            with trio.move_on_after(self.config.drain_timeout):
                await self._wait_drained()
        assert kind is not None
        stream_error = _closed_error(kind, reason, self._stream_error)
        if kind is not _CloseKind.LOST and not conn.goodbye_sent:
            goodbye = reason if kind is not _CloseKind.PEER_GOODBYE else "goodbye"
            dropped = conn.send_goodbye(goodbye)
            if dropped:
                logger.warning("session closing: %d queued elements dropped after the drain timeout", dropped)
            self._dropped += dropped
        self._end_streams(stream_error)
        self._wake_writer()
        if kind is not _CloseKind.LOST:
            with trio.move_on_after(self.config.goodbye_timeout):
                await self._writer_done.wait()
                if kind is _CloseKind.LOCAL:
                    await self._reader_done.wait()  # the peer's goodbye, or EOF
        with trio.move_on_after(_CLOSE_TRANSPORT_TIMEOUT):
            try:
                await self._stream.aclose()
                self._stream_closed = True
            except _TRANSPORT_ERRORS:
                pass

    def _end_streams(self, error: BaseException) -> None:
        for subscription in list(self._subscriptions.values()):
            subscription._on_end(error)
        self._subscriptions.clear()
        for handle in list(self._publications.values()):
            self._stop_publication(handle)
        self._publications.clear()
        for handle in list(self._room_waiters):
            handle.wake()
        for handle in self._budget_waiters:
            handle.in_budget_queue = False
            handle.wake()
        self._budget_waiters.clear()

    # ---- memory budget ------------------------------------------------

    def _streams_cost(self) -> int:
        # Capped at the streams' share, so data always keeps a quarter of the
        # half: the peer's subscribes are refused past it (_start_publication),
        # but our application's own subscriptions are not, and must not stall
        # every publisher of the connection.
        cost = self._open_streams_cost()
        return cost if cost < self._streams_share else self._streams_share

    def _open_streams_cost(self, more: int = 0, more_names: int = 0) -> int:
        # The nominal memory of the open streams, both ways (and ``more``),
        # publications whose task is still stopping included, with what the
        # peer's names hold beyond it (and ``more_names``).
        streams = len(self._publications) + len(self._stopping) + len(self._subscriptions)
        return (streams + more) * STREAM_MEMORY_COST + self._names_memory + more_names

    def _stop_publication(self, handle: PublicationHandle) -> None:
        # Ended (the peer's cancel, or the session's end), as the caller
        # takes it out of _publications: its stream's cost, name included,
        # is freed once its task has finished (_end_publication), at once
        # if it has none.
        handle.stop()
        if handle.scope is not None:
            self._stopping.add(handle)
        else:
            self._forget_name(handle)

    def _forget_name(self, handle: PublicationHandle) -> None:
        # The publication has stopped: its name no longer counts. Once only.
        self._names_memory -= handle.name_memory
        handle.name_memory = 0

    def _waits_for_stopping(self, subscribe: Subscribe) -> bool:
        """Whether the peer's ``subscribe`` would go beyond the streams'
        share only because publications are still stopping: then the reader
        waits for them (see _take_in) instead of refusing it. Their tasks
        were cancelled and finish at their next schedule point, which only
        happens once the reader lets them run."""
        return (
            bool(self._stopping)
            and self._close_kind is None
            and self._open_streams_cost(1, _charged_name_memory(subscribe.publisher)) > self._streams_share
        )

    def _note_publication_stopped(self) -> None:
        stopped = self._publication_stopped
        if stopped is not None:
            self._publication_stopped = None
            stopped.set()

    async def _wait_publications_stopped(self) -> None:
        """Dispatch nothing more of what was read while a subscribe waits
        for publications to stop (_waits_for_stopping): the rest of the read
        waits in the connection, and what follows in the kernel's buffers,
        so a peer that subscribes and cancels faster than the tasks finish
        meets TCP's flow control, as the other waits of the reader do. Woken
        as each one finishes, or when the session starts closing."""
        while self._held_events is not None and self._waits_for_stopping(self._held_events[0]):
            stopped = self._publication_stopped = trio.Event()
            await stopped.wait()

    def _outbound_held(self) -> int:
        """The outbound half's use: what is queued for the peer or in the
        writer's hands, and the nominal cost of every open stream."""
        unsent = sum(map(len, self._unsent)) if self._unsent is not None else 0
        return self._conn.outbound_bytes + self._writer_held + unsent + self._streams_cost()

    def _outbound_room(self) -> int:
        """Bytes publishers may still queue before the outbound half is full."""
        return self._half_budget - self._outbound_held()

    def _wait_in_budget_queue(self, handle: PublicationHandle) -> None:
        # At most one entry per handle: one woken by its subscriber's request
        # (or stopped) stays queued, and is skipped or woken once more.
        if not handle.in_budget_queue:
            handle.in_budget_queue = True
            self._budget_waiters.append(handle)

    def _wake_budget_waiters(self) -> None:
        waiters = self._budget_waiters
        room = self._outbound_room()
        share = self.config.max_queued_bytes  # what each woken one may queue
        while waiters and room > 0:
            handle = waiters.popleft()
            handle.in_budget_queue = False
            if handle.waiting:
                handle.wake()
                room -= share

    # ---- timekeeper -----------------------------------------------------

    @enable_ki_protection
    async def _keep_time(self) -> None:
        """Pings and the idle timeout; started once the peer's hello is in."""
        conn = self._conn
        config = self.config
        now = trio.current_time()
        keepalive = idle = None
        if conn.keepalive and config.keepalive_interval is not None:
            keepalive = self._keepalive = KeepaliveTimer(
                interval=config.keepalive_interval, timeout=config.keepalive_timeout, now=now
            )
        if config.idle_timeout is not None:
            idle = self._idle = IdleTimer(timeout=config.idle_timeout, now=now)
        while self._close_kind is None:
            deadlines: list[float] = []
            if idle is not None:
                if self._subscriptions or self._publications:
                    # In use: look again in a quarter of the timeout, so an
                    # idle period starts soon after the last stream ends.
                    idle.busy(now)
                    deadlines.append(now + idle.timeout / 4)
                else:
                    deadlines.append(idle.deadline)
            if keepalive is not None:
                deadlines.append(keepalive.deadline)
            await trio.sleep_until(min(deadlines))
            now = trio.current_time()
            if self._close_kind is not None or conn.goodbye_sent:
                return
            if idle is not None and not (self._subscriptions or self._publications) and idle.expired(now):
                reason = f"idle timeout: nothing received and no stream open for {idle.timeout:g} s"
                logger.info("closing the session: %s", reason)
                self._request_close(_CloseKind.IDLE_TIMEOUT, reason)
                return
            if keepalive is not None:
                action = keepalive.poll(now)
                if action is KeepaliveAction.PING:
                    conn.send_ping()
                    self._send_queued()
                elif action is KeepaliveAction.DEAD:
                    reason = f"keepalive timeout: no pong within {keepalive.timeout:g} s"
                    # (info, as the idle timeout: the end of one peer, which
                    # the application hears as SessionBroken; at warning,
                    # `rstreams sub` printed it beside its own error line.)
                    logger.info("closing the session: %s", reason)
                    self._request_close(_CloseKind.KEEPALIVE_TIMEOUT, reason)
                    return

    # ---- writer ---------------------------------------------------------

    def _wake_writer(self) -> None:
        if not self._dispatching:
            self._writer_wakeup.set()

    def _send_queued(self) -> None:
        """Get what is queued on its way: written from this task at once
        when the writer is parked and the transport allows it (see
        ``_direct_socket``), else by waking the writer.

        For the moments when one task has just queued what the other side
        waits for (the reader's answers to a read, a caller's subscribe, the
        element a paced publisher sends after a pause): there the writer's
        scheduling pass is most of a round trip. A run of sends in a tight
        loop wakes the writer instead, which coalesces many streams'
        elements into one write ("Runs of send" in ``_publish``).
        """
        send_now = self._send_now
        if (
            send_now is not None
            and self._writer_parked
            and not self._writer_wakeup.is_set()
            and self._unsent is None
            and not self._stream_closed
        ):
            # Not once something else has woken the writer (a publisher with
            # elements, say): it is about to write anyway, and what was
            # queued here goes with that write, instead of a large write
            # from this task cutting in ahead of it.
            # Gathered as the writer gathers (plain TCP only gets here), so
            # that a large element written from here is not copied either.
            buffers = self._collect_buffers()
            if buffers:
                sent = send_now(buffers)
                self._bytes_out += sent
                first_unsent = written_through(buffers, 0, sent)
                if first_unsent < len(buffers):
                    self._unsent = buffers[first_unsent:]
                if self._budget_waiters:
                    self._wake_budget_waiters()
                if self._unsent is None and not (self._conn.has_data_to_send or self._conn.goodbye_sent):
                    return  # (after goodbye, the writer must wake to finish)
        self._wake_writer()

    def _collect(self) -> bytearray:
        """The next write, from the connection's queues; wakes publishers
        that now have room."""
        data = self._conn.data_to_send(self.config.write_size)
        self._collected(data)
        return data

    def _collect_buffers(self) -> list[bytearray | memoryview]:
        """As ``_collect``, as buffers for a gathering write (plain TCP):
        large split parts are views of their elements, not copies."""
        buffers = self._conn.buffers_to_send(self.config.write_size, _GATHERED_WRITE_SIZE)
        self._collected(buffers)
        return buffers

    def _collected(self, data: bytearray | list[bytearray | memoryview]) -> None:
        conn = self._conn
        self._note_write_progress()
        if data and self._room_waiters:
            # What was collected has left the queues: publishers may prepare
            # their next batch while this one is being sent. (A publication
            # then pins at most max_queued_bytes plus its share of one write.)
            # Only publishers whose queue was full wait here; those waiting
            # for demand are woken by the request that brings it.
            max_queued = self.config.max_queued_bytes
            for handle in list(self._room_waiters):
                if conn.queued_bytes(handle.subscriber) < max_queued:
                    handle.wake()

    def _written(self) -> None:
        # A write is done: what it held is freed, and publishers waiting for
        # the outbound half to have room may have it now.
        self._writer_held = 0
        self._note_write_progress()
        if self._budget_waiters:
            self._wake_budget_waiters()

    async def _wait_drained(self) -> None:
        while (
            self._conn.has_data_to_send or self._writer_held or self._unsent is not None
        ) and not self._writer_done.is_set():
            idle = self._writer_idle = trio.Event()
            self._wake_writer()
            await idle.wait()

    @enable_ki_protection
    async def _writer(self) -> None:
        conn = self._conn
        stream = self._stream
        direct = self._direct
        write_size = self.config.write_size
        try:
            # Once per session: let the transport get ready (a TLS handshake
            # that fails is then reported by the reader, as a lost connection).
            await stream.wait_send_all_might_not_block()
            bulk = False
            while True:
                while not conn.has_data_to_send and self._unsent is None:
                    if conn.goodbye_sent:
                        return
                    idle = self._writer_idle
                    if idle is not None:
                        self._writer_idle = None
                        idle.set()
                    self._writer_parked = True
                    try:
                        await self._writer_wakeup.wait()
                    finally:
                        self._writer_parked = False
                    self._writer_wakeup = trio.Event()
                if bulk:
                    # The socket buffer is likely full, so wait until it
                    # drains before choosing what to send (trio's advice for
                    # protocols that decide late): control queued meanwhile
                    # then goes first. Otherwise collect at once: there the
                    # wait (an epoll registration and a scheduling pass)
                    # costs more than it could coalesce. Plain TCP knows
                    # (the last write found the socket full); other
                    # transports guess from a write of full size.
                    await stream.wait_send_all_might_not_block()
                # Whatever woke us is collected now, so a wake-up from here on
                # means new data.
                self._writer_wakeup = trio.Event()
                if direct is not None:
                    # Plain TCP: one gathering write, large parts uncopied.
                    if self._unsent is not None:
                        # The rest of a direct write: it goes before anything else.
                        buffers, self._unsent = self._unsent, None
                    else:
                        buffers = self._collect_buffers()
                        if not buffers:
                            continue
                    size = sum(map(len, buffers))
                    self._writer_held = size  # (non-zero while a write is under way)
                    # A write that met a full socket, or a full-size one
                    # that left it without room (one poll call says),
                    # makes the writer wait before collecting the next.
                    # Waiting after every full-size write, most of which
                    # the kernel took whole with room to spare, cost the
                    # sender a tenth more CPU per element.
                    bulk = await direct.send_buffers(buffers)
                    if not bulk and size >= write_size:
                        bulk = not direct.has_room()
                    self._written()
                    self._bytes_out += size
                    continue
                data = self._collect()
                if not data:
                    continue
                self._writer_held = len(data)
                await stream.send_all(data)
                self._written()
                self._bytes_out += len(data)
                bulk = len(data) >= write_size
        except _TRANSPORT_ERRORS as exc:
            # A write fails when the peer is gone, and the reader usually learns
            # why (EOF without goodbye, a reset, a failed TLS handshake) at the
            # same moment: let it report the cause, and speak up only if it
            # stays silent.
            with trio.move_on_after(_WRITE_ERROR_GRACE):
                await self._reader_done.wait()
            self._request_close(_CloseKind.LOST, connection_lost_reason(exc, "writing"), exc)
        finally:
            self._writer_held = 0
            self._writer_done.set()
            self._note_write_progress()
            idle = self._writer_idle
            if idle is not None:
                idle.set()

    # ---- reader ---------------------------------------------------------

    @enable_ki_protection
    async def _reader(self) -> None:
        try:
            with trio.move_on_after(self.config.handshake_timeout):
                while self._conn.peer_hello is None:
                    if not await self._receive_once():
                        return
            if self._conn.peer_hello is None:
                timeout = self.config.handshake_timeout
                self._request_close(_CloseKind.HANDSHAKE_TIMEOUT, f"handshake timeout: no hello within {timeout:g} s")
                return
            if self._deferred is not None and not await self._authenticate():
                return
            if self._conn.keepalive or self.config.idle_timeout is not None:
                assert self._nursery is not None
                self._nursery.start_soon(self._keep_time)
            with self._reading_scope:
                self._reader_context = trio.lowlevel.current_task().context
                while await self._receive_once():
                    pass
        except _TRANSPORT_ERRORS as exc:
            if self._close_kind is None:
                self._request_close(_CloseKind.LOST, connection_lost_reason(exc), exc)
        except RemoteProtocolError as exc:
            # Raised by a transport that frames the protocol itself (WebSocket:
            # a text message); the close sequence queues the goodbye.
            if self._close_kind is None:
                self._log_bad_input(exc.goodbye_reason)
                self._request_close(_CloseKind.PROTOCOL_ERROR, exc.goodbye_reason, exc)
        finally:
            self._reader_done.set()

    async def _authenticate(self) -> bool:
        # The one place the hook's verdict becomes policy: a principal admits
        # the peer and answers what it sent meanwhile; None, an exception or
        # running out of time refuses it with goodbye and nothing else.
        authenticate = self.config.authenticate
        hello = self._conn.peer_hello
        assert authenticate is not None and hello is not None
        token = hello.token if hello.token is not None else _transport_token(self._stream)
        peer = PeerInfo(
            address=self.peer_address, transport=transport_name(self._stream), certificate=_peer_certificate(self._stream)
        )
        principal: Principal | None = None
        with trio.move_on_after(self.config.handshake_timeout):
            try:
                principal = await authenticate(token, peer)
            except Exception:
                logger.warning("the authenticate hook failed; refusing %s", peer.address, exc_info=True)
        if principal is None:
            self._deferred = None
            extra = {"event": "auth_refused", "peer": peer.address}
            logger.info("refusing %s: %s", peer.address, AUTHENTICATION_FAILED, extra=extra)
            if self._close_kind is None:
                self._request_close(_CloseKind.REFUSED, AUTHENTICATION_FAILED)
            return False
        self.principal = principal
        deferred, self._deferred = self._deferred, None
        for event in deferred or ():
            self._start_publication(event)
        if self._conn.has_data_to_send:
            self._send_queued()
        if self._answered_now:
            self._note_answered()
        return True

    def _authorized(self, path: str) -> bool:
        # A hook that raises refuses (and is logged): the stream gets onError,
        # the session stays.
        authorize = self.config.authorize
        assert authorize is not None
        if self.principal is None:
            return False
        try:
            return bool(authorize(self.principal, path))
        except Exception:
            logger.warning("the authorize hook failed on %r; refusing it", path, exc_info=True)
            return False

    def _note_write_progress(self) -> None:
        progress = self._write_progress
        if progress is not None:
            self._write_progress = None
            progress.set()

    async def _wait_answers_taken(self) -> None:
        """Read nothing more while the answers to what was read wait unsent.

        Answers to subscribes and requests are control messages, which no
        demand bounds, and the elements of publishers that answer at once
        (see _unsent_answers): a peer that keeps asking and never reads
        would make them pile up without end. So while more than
        ``config.max_unsent_control`` bytes of them wait, the reader waits
        for the writer to take them (which it does as soon as the transport
        takes its last write); the peer's sends then block, which is TCP's
        flow control reaching the peer. Elements that publisher tasks
        queue are not counted: demand and ``max_queued_bytes`` bound them
        already, and two peers streaming to each other must never both stop
        reading (each would wait for the other to read first). Only a peer
        that floods us with requests and reads nothing is stopped.
        """
        limit = self.config.max_unsent_control
        while self._unsent_answers() > limit and not self._writer_done.is_set():
            progress = self._write_progress = trio.Event()
            self._wake_writer()
            await progress.wait()

    def _note_answered(self) -> None:
        """After a read's answers were sent (as far as the transport took
        them): note what publishers that answered at once still have
        queued, for _unsent_answers. Once per read rather than per
        subscribe, because the usual read's answers all leave in its own
        write, and then there is nothing to note. (An Id answered in this
        read cannot have been reused in it: the peer reuses an Id only once
        it has read our terminal signal for it.)"""
        answered_now = self._answered_now
        conn = self._conn
        if conn.has_data_to_send:
            answered = self._answered
            for subscriber in answered_now:
                queued = conn.queued_bytes(subscriber)
                if queued:
                    answered[subscriber] = queued
                    self._answered_bytes += queued
        answered_now.clear()

    def _unsent_answers(self) -> int:
        """Bytes of answers to what was read that are not written yet: the
        control queue, and the elements of publishers that answered at once
        (a subscribe of a few bytes may be answered with up to
        ``max_queued_bytes`` of them).

        Those elements are forgotten oldest first, once their publication
        has nothing queued: the scheduler serves streams round-robin in the
        order they got data, so this costs O(1) per publication, and what
        it may still count of a stream already written behind an unfinished
        one only makes the bound stricter. A reused Id clears its old entry
        (see _start_publication), and nothing is counted once nothing at
        all is queued, so a stale entry cannot hold the reader.
        """
        answered = self._answered
        if answered:
            conn = self._conn
            if not conn.has_data_to_send:
                answered.clear()  # everything queued has been taken
                self._answered_bytes = 0
            while answered:
                oldest = next(iter(answered))
                if conn.queued_bytes(oldest):
                    break
                self._answered_bytes -= answered.pop(oldest)
        return self._conn.control_bytes + self._answered_bytes

    def _inbound_full(self) -> bool:
        # Elements the application asked for and has not taken, with what
        # the connection holds of the peer's input, fill the inbound half.
        # Only elements waiting for the application stop the reader: with
        # none, what the connection holds (split parts) can only shrink by
        # reading on, and growing it past the half is the peer's error.
        # Buffers the connection keeps for later elements are let go of
        # first: they would otherwise stop the reader, and only reading on
        # gives them back.
        held = self.held_elements.held
        if held <= 0:
            return False
        conn = self._conn
        if held + conn.inbound_bytes < self._half_budget:
            return False
        conn.give_back_guesses()
        return held + conn.inbound_bytes >= self._half_budget

    async def _wait_elements_taken(self) -> None:
        """Read nothing more while the inbound half is full of elements the
        application has not taken yet: they were asked for, so this is
        backpressure (the peer's sends block), never an error. Woken as the
        application uses chunks up, or when the session starts closing."""
        held = self.held_elements
        while self._inbound_full() and self._close_kind is None:
            released = held.on_release = trio.Event()
            await released.wait()

    async def _receive_once(self) -> bool:
        """Receive and dispatch one read; False when reading is over."""
        if self._unsent_answers() > self.config.max_unsent_control:
            await self._wait_answers_taken()
        if self._inbound_full():
            await self._wait_elements_taken()
        conn = self._conn
        direct = self._direct
        # The rest of a large element: straight into its buffer (plain TCP;
        # see receive_buffers: copy=False, or a copy=True stream's own),
        # read_size at a time like any read (1 MiB at a time cost the
        # client 8% more CPU an element than 256 KiB: A/B, 4 rounds).
        into = conn.receive_buffers(self.config.read_size) if direct is not None else None
        data: bytes | bytearray = b""
        if into:
            assert direct is not None
            received = await direct.receive_into(into)
        elif self._busy_poll and (self._fetching or self._answered_subscribe or self._received_elements):
            data = await self._receive_due()
            received = len(data)
        else:
            data = await self._receive_some(self.config.read_size)
            received = len(data)
        if not received:
            if self._close_kind is None:
                self._request_close(_CloseKind.LOST, "connection closed by the peer without goodbye")
            return False
        self._read_taken(received, into, data)
        going_on = self._take_in(hold=True)
        while going_on is None:
            if self._held_events is not None:
                # A subscribe waits for publications to stop (and lets
                # their tasks run meanwhile).
                await self._wait_publications_stopped()
            else:
                # A read full of control messages (subscribes, say): the
                # writer sends the answers so far, so that the peer works on
                # them while we parse the rest of this read.
                await trio.lowlevel.checkpoint()
            going_on = self._take_in(hold=True)
        return going_on

    def _receive_now(self) -> int:
        """Read and dispatch what has arrived, in the calling task (a
        consumer about to wait for elements); how many bytes were read.

        The reader's way to a consumer is two tasks and a pass of the run
        loop or two: woken by ``epoll``, it reads and dispatches, re-arms its
        wait, and the consumer runs in the next pass. A consumer that comes
        back for more while the next elements are already in the socket
        (a burst, or a stream faster than it) reads them itself instead.
        Only when the reader waits with nothing read (``read_for_reader``),
        so bytes are handled in the order they arrived; never where the
        reader would not read (its budget for elements or answers is
        taken, or a read could take it past); and nothing here waits.
        """
        direct = self._direct
        context = self._reader_context
        # (No context yet: the reader is still in the handshake, whose reads
        # are its own.)
        if direct is None or not direct.reader_idle or context is None or self._close_kind is not None:
            return 0
        if self._unsent_answers() > self.config.max_unsent_control:
            return 0
        conn = self._conn
        read_size = self.config.read_size
        if self.held_elements.held + conn.inbound_bytes + read_size >= self._half_budget:
            return 0
        # As the reader reads (_receive_once): into a large element's own
        # buffer where the connection offers it.
        into = conn.receive_buffers(read_size)
        data: bytes | None = b""
        if into:
            received = direct.read_into_for_reader(into)
        else:
            data = direct.read_for_reader(read_size)
            received = len(data) if data is not None else 0
        if not received:
            return 0
        self._read_taken(received, into, data or b"")
        take_in = self._take_in
        going_on = context.run(take_in)
        while going_on is None:
            going_on = context.run(take_in)  # (no checkpoint here: the writer has the answers)
        if not going_on:
            self._reading_scope.cancel()  # the reader, waiting, would read on
        return received

    def _read_taken(self, received: int, into: list[memoryview | bytearray] | None, data: bytes | bytearray) -> None:
        """A read of ``received`` bytes, into the buffers ``into`` that the
        connection offered, or as ``data``: the connection takes it, whoever
        read it."""
        self._bytes_in += received
        if into:
            self._conn.buffers_received(received)
        else:
            self._conn.receive_data(data)
        self._answered_subscribe = False
        self._received_elements = False

    def _take_in(self, *, hold: bool = False) -> bool | None:
        """Dispatch the events of what was just received: True when all
        are dispatched and reading goes on, False when reading is over (the
        peer's goodbye, or its bad input); None after a run of events that
        left answers, which went to the writer, or (``hold``: the reader
        only, which may wait) at a subscribe that waits for publications to
        stop (_held_events; see _wait_publications_stopped): call again,
        after a checkpoint, or that wait, if the caller may take one.

        The run is counted across batches: a cancel of a stream subscribed
        in the same read ends the connection's batch (its subscribe is
        answered first), and a read of subscribe-and-cancel pairs, counted
        per batch, was dispatched whole in one step (10,000 pairs a read)."""
        conn = self._conn
        dispatched = 0
        try:
            while True:
                events = self._held_events
                if events is not None:
                    if hold and self._waits_for_stopping(events[0]):
                        return None  # (still full of them: the reader waits on)
                    self._held_events = None
                else:
                    events = conn.events(_DISPATCH_BATCH)
                    if not events:
                        if not conn.parse_paused:
                            break
                        # Messages that left no event (cancels of finished
                        # streams): they count toward the step as events.
                        dispatched += _DISPATCH_BATCH
                        if dispatched >= _EVENTS_PER_STEP:
                            return None
                        continue
                self._dispatching = True
                try:
                    self._dispatch(events, hold=hold)
                finally:
                    self._dispatching = False
                idle = self._idle
                if idle is not None and any(type(event) not in _KEEPALIVE_EVENTS for event in events):
                    idle.heard(trio.current_time())
                if self._held_events is not None:
                    if conn.has_data_to_send:
                        self._send_queued()  # the answers so far
                    return None
                dispatched += _DISPATCH_BATCH if conn.parse_paused else len(events)
                if dispatched >= _DISPATCH_BATCH and conn.has_data_to_send:
                    self._send_queued()
                    return None
                if dispatched >= _EVENTS_PER_STEP:
                    return None
        except RemoteProtocolError as exc:
            self._log_bad_input(exc.goodbye_reason)
            self._request_close(_CloseKind.PROTOCOL_ERROR, exc.goodbye_reason, exc)
            self._wake_writer()
            return False
        if conn.has_data_to_send:
            self._send_queued()
        if self._answered_now:
            self._note_answered()
        return conn.goodbye_received is None

    async def _receive_due(self) -> bytes:
        """The read of a message that is due: busy-polled for while such
        waits have been ending within the window."""
        assert self._direct is not None
        window = self._busy_poll
        started = time.perf_counter()
        poll_for = window if self._due_wait <= window else 0.0
        data = await self._direct.receive_some(self.config.read_size, poll_for=poll_for)
        # One long wait counts as 16 windows at most: a pause of the peer
        # stops polling at once, and a few quick answers bring it back.
        waited = min(time.perf_counter() - started, 16 * window)
        self._due_wait += (waited - self._due_wait) / 8
        return data

    def _dispatch(self, events: list[Any], *, hold: bool = False) -> None:
        # ``hold``: a subscribe that finds the streams' share full of
        # publications still stopping is held, with every event after it
        # (_held_events), for the reader to dispatch once one has stopped;
        # without it (a consumer's read, which must not wait) it is refused
        # as any subscribe beyond the budget.
        subscriptions = self._subscriptions
        for event in events:
            if type(event) is Elements:
                subscription = subscriptions.get(event.subscriber)
                if subscription is not None:
                    self._received_elements = True
                    subscription._on_elements(event.elements)
            elif type(event) is Request:
                handle = self._publications.get(event.subscriber)
                if handle is not None:
                    handle.wake()
            elif type(event) is Subscribed:
                subscription = subscriptions.get(event.subscriber)
                if subscription is not None:
                    subscription._on_subscribed(event.element_size)
            elif type(event) is OnComplete:
                subscription = subscriptions.pop(event.subscriber, None)
                if subscription is not None:
                    subscription._on_end(None)
            elif type(event) is OnError:
                subscription = subscriptions.pop(event.subscriber, None)
                if subscription is not None:
                    subscription._on_end(self._publisher_error(subscription, event.error))
            elif type(event) is Subscribe:
                if self._deferred is not None:
                    self._deferred.append(event)
                    continue
                if self._stopping and hold and self._waits_for_stopping(event):
                    at = next(index for index, held in enumerate(events) if held is event)
                    self._held_events = events[at:]
                    return
                self._answered_subscribe = True
                self._start_publication(event)
            elif type(event) is Cancel or type(event) is InvalidRequest:
                if self._deferred:
                    # (a deferred stream cancelled before we answered it)
                    self._deferred = [s for s in self._deferred if s.subscriber != event.subscriber]
                handle = self._publications.pop(event.subscriber, None)
                if handle is not None:
                    handle.cancelled_by_subscriber = True
                    self._stop_publication(handle)
                    self._count_published(handle)  # now: it is gone from _publications
                    if self._budget_waiters:
                        # Its queue is freed.
                        self._wake_budget_waiters()
                    if self._log_streams:
                        self._log_stream("stream_cancel", event.subscriber, "cancelled by the subscriber")
            elif type(event) is Goodbye:
                self._request_close(_CloseKind.PEER_GOODBYE, event.reason or "goodbye")
            elif type(event) is Pong:
                if self._keepalive is not None:
                    self._keepalive.pong_received(trio.current_time())
            elif type(event) is Hello or type(event) is Ping:
                pass  # (the connection has queued the pong)

    def _log_bad_input(self, reason: str) -> None:
        # The peer's mistake, not ours: one line naming it, no traceback.
        peer = self.peer_address
        reason = peer_text(reason)  # (it may quote what the peer sent)
        extra = {"event": "bad_input", "peer": peer, "reason": reason}
        logger.info("closing the session with %s: %s", peer, reason, extra=extra)

    def _log_stream(self, event: str, subscriber: int, message: str, *args: object, **fields: str) -> None:
        # Per stream, never per element; the caller checks the level first.
        extra = {"event": event, "peer": self.peer_address, "stream": subscriber, **fields}
        logger.debug("%s stream %d: " + message, self.peer_address, subscriber, *args, extra=extra)

    def _log_publisher_failure(self, name: str, exc: Exception, handle: PublicationHandle) -> None:
        peers_doing = isinstance(exc, (InvalidParameter, PublisherError))
        if not logger.isEnabledFor(logging.INFO if peers_doing else logging.WARNING):
            return
        # The peer decides how often its streams fail: the session's lines
        # about them are paced (LogThrottle), each saying how many were not
        # logged before it.
        if self._log_throttle is None:
            self._log_throttle = LogThrottle()
        skipped = self._log_throttle.admit()
        if skipped is None:
            return
        after = f" ({skipped} such lines of this session not logged before this one)" if skipped else ""
        if peers_doing:
            # The peer's doing: a subscriber's bad parameter, or an onError
            # on a stream the publisher relays (a topic's NAME/publish, an
            # echo). Its onError says why; the log gets one line with the
            # peer and its text cut (peer_text), not the publisher's traceback.
            peer = self.peer_address
            publisher, reason = peer_text(name), peer_text(str(exc))
            extra = {"event": "bad_input", "peer": peer, "stream": handle.subscriber, "publisher": publisher, "reason": reason}
            if skipped:
                extra["not_logged"] = skipped
            if isinstance(exc, InvalidParameter):
                logger.info("%s asked publisher '%s' with a bad parameter: %s%s", peer, publisher, reason, after, extra=extra)
            else:
                logger.info("%s: publisher '%s' ended, a stream it relays failed: %s%s", peer, publisher, reason, after, extra=extra)
        else:
            fields = {"not_logged": skipped} if skipped else {}
            logger.warning("publisher '%s' failed; sending onError%s", peer_text(name), after, exc_info=True, extra=fields)

    def share_log_throttle(self, throttle: LogThrottle) -> None:
        """Pace the lines about this session's streams with ``throttle``,
        shared with other sessions (a server's, of the same peer host)."""
        self._log_throttle = throttle

    def take_lines_not_logged(self) -> int:
        """Lines about the streams its log throttle held back since the last
        one written; from now on they count as said (``session_close``)."""
        return self._log_throttle.take_not_logged() if self._log_throttle is not None else 0

    @staticmethod
    def _publisher_error(subscription: StreamReceiver, message: str) -> PublisherError:
        if not subscription._subscribed and message.startswith("no such publisher"):
            return UnknownPublisher(subscription.name, message)
        return NotRetained.from_message(message) or PublisherError(message)

    # ---- publications -----------------------------------------------

    def _start_publication(self, event: Subscribe) -> None:
        conn = self._conn
        if conn.goodbye_received is not None or conn.goodbye_sent:
            # A goodbye came in the same read, after this subscribe (the
            # peer's, or ours because a later message in the read broke the
            # protocol), and has already ended every stream (the spec:
            # goodbye closes all open streams): there is nothing to answer.
            return
        name = event.publisher
        subscriber = event.subscriber
        if self._answered:
            # The peer reuses an Id only once our terminal signal for it has
            # been written, and so what came before it (a subscribe for an Id
            # still queued is a protocol error): that answer is gone.
            self._answered_bytes -= self._answered.pop(subscriber, 0)
        route: Route | None = None
        if self._log_streams:
            self._log_stream("stream_subscribe", subscriber, "subscribe %r", name, publisher=name)
        try:
            path, params = SubscribeRequest.parse_name(name)
        except TooManyParameters as exc:
            conn.fail(subscriber, f"bad publisher name: {exc}")  # (not the whole name again)
            return
        except ValueError:
            conn.fail(subscriber, f"bad publisher name: {name}")
            return
        if self._close_kind is not None:
            conn.fail(subscriber, "session closing")
            return
        # A name longer than most holds more than the stream's nominal cost
        # allows for it (a query of thousands of parameters, ten times its
        # length): charged too, for as long as the publication lasts.
        name_memory = _charged_name_memory(name, params)
        streams_cost = self._open_streams_cost(1, name_memory)  # with this one
        if streams_cost > self._streams_share:
            # Each open stream is charged against the outbound half; the
            # streams may take three quarters of it, so that data always
            # has room. The stream is refused, the session stays.
            names = self._names_memory + name_memory
            streams = (streams_cost - names) // STREAM_MEMORY_COST
            conn.fail(
                subscriber,
                f"memory budget exceeded: {streams_cost} bytes for {streams} open streams"
                f" of {STREAM_MEMORY_COST} bytes each" + (f" and {names} bytes of their names" if names else "")
                + f" (limit {self._streams_share}, max_connection_memory {self.config.max_connection_memory})",
            )
            if self._log_streams:
                self._log_stream("stream_error", subscriber, "refused %r: memory budget", name, reason="memory budget")
            return
        if self.config.authorize is not None and not self._authorized(path):
            conn.fail(subscriber, f"not authorized: {name}")
            if self._log_streams:
                self._log_stream("stream_error", subscriber, "not authorized %r", name, reason="not authorized")
            return
        if self.app is not None:
            route = self.app.resolve(path)
        if route is None:
            conn.fail(subscriber, unknown_publisher_message(name, path, self.app))
            if self._log_streams:
                self._log_stream("stream_error", subscriber, "no such publisher %r", name, reason="no such publisher")
            return
        handle = PublicationHandle(self, subscriber, route.element_size)
        if name_memory:
            handle.name_memory = name_memory
            self._names_memory += name_memory
        self._publications[subscriber] = handle
        conn.accept(subscriber, route.element_size)
        request = new_request(name, path, params, self, subscriber)
        sink = handle.sink = Sink(handle, route.resolved_codec)
        handle.name = name
        try:
            work = route.start(sink, request)
        except Exception as exc:
            # A plain ``def`` publisher failed while answering at once.
            self._log_publisher_failure(name, exc, handle)
            self._end_publication(handle, str(exc) or type(exc).__name__)
            return
        if work is None:
            # A plain ``def`` publisher answered at once: no task at all.
            self._end_publication(handle, None)
            self._answered_now.append(subscriber)
            return
        assert self._nursery is not None
        handle.scope = trio.CancelScope()
        self._nursery.start_soon(self._run_publication, handle, work, request, name=f"publisher {name}")

    def _count_published(self, handle: PublicationHandle) -> None:
        """Fold a publication's elements into the session's count, once: when
        it ends, or at once when it is cancelled (it leaves _publications
        then, and a stopped sink counts nothing more), so that statistics
        never miss a stream between the two."""
        if handle.sink is not None:
            self._elements_published += handle.sink._sent
            handle.sink = None

    def _end_publication(self, handle: PublicationHandle, error: str | None, *, answer: bool = True) -> None:
        """The publisher is done, at once or as a task: send onComplete (no
        ``error``) or onError, unless it was cancelled (``answer`` false) or
        the stream already ended, and forget the publication."""
        conn = self._conn
        subscriber = handle.subscriber
        self._count_published(handle)
        if handle.name_memory:
            self._forget_name(handle)  # (gone from _publications and _stopping below)
        if self._publications.get(subscriber) is handle:
            del self._publications[subscriber]
            if answer and conn.is_publishing(subscriber):
                if error is None:
                    conn.complete(subscriber)
                else:
                    conn.fail(subscriber, error)
                if self._log_streams:
                    if error is None:
                        self._log_stream("stream_complete", subscriber, "completed")
                    else:
                        self._log_stream("stream_error", subscriber, "onError %s", error, reason=error)
            if self._budget_waiters:
                # Its stream's cost is freed.
                self._wake_budget_waiters()
        elif handle in self._stopping:
            # A publication that ended before its task: its stream's cost is
            # freed now, and a subscribe the reader holds may fit.
            self._stopping.discard(handle)
            self._note_publication_stopped()
            if self._budget_waiters:
                self._wake_budget_waiters()
        handle.closed = True
        self._wake_writer()

    async def _run_publication(self, handle: PublicationHandle, work: Awaitable[None], request: SubscribeRequest) -> None:
        answer = False
        error: str | None = None
        assert handle.scope is not None
        with handle.scope:
            try:
                await work
                answer = True
            except SessionClosed as exc:
                if self._close_kind is None:
                    # Another session's end (one the publisher relays from):
                    # the publisher's failure, as any other error.
                    self._log_publisher_failure(request.name, exc, handle)
                    answer, error = True, str(exc) or type(exc).__name__
                # Else this session is ending, and a publisher that reads back
                # from it (a topic's publish route, the demo's echo) learns it
                # from its upstream: not a failure of its own, nothing to log
                # beyond the session's end, and no onError can go.
            except Exception as exc:
                self._log_publisher_failure(request.name, exc, handle)
                answer, error = True, str(exc) or type(exc).__name__
            finally:
                self._end_publication(handle, error, answer=answer)

    # ---- subscriptions ----------------------------------------------

    def subscribe(
        self, name: str, *, prefetch: int | None = DEFAULT_PREFETCH, codec: CodecLike = None, copy: bool = True
    ) -> Subscription:
        """Subscribe to the peer's publisher ``name`` (use with ``async with``).

        Args:
            name: the publisher name, e.g. ``"range?count=100"``.
            prefetch: elements kept requested ahead of the application, topped
                up automatically; 0 for manual demand with ``sub.request(n)``;
                None (the default) for a window that adapts to the consumer,
                within a byte budget (see :class:`~rstreams.protocol.AdaptiveDemand`).
            codec: how to decode elements ("raw", "msgpack", "json", a Codec).
            copy: False to opt in to zero-copy large elements, as pyzmq's
                ``recv(copy=False)``: an element the publisher split into
                parts (larger than its ``split_threshold``, 64 KiB by
                default) is received straight into one buffer (on plain
                TCP) and handed out as a read-only ``memoryview`` of it,
                not copied into ``bytes``; smaller elements stay ``bytes``.
                Takes no codec. The buffer counts against the connection's
                memory budget until the application takes the element; once
                nothing refers to it any more (no view, slice or ``obj`` of
                it is left), it is reused for a later element of the same
                size, so keep what you need of an element by keeping a view
                of it, never by its address.

        Entering the returned subscription sends subscribe and waits for the
        answer; it raises ``UnknownPublisher`` / ``PublisherError`` if the
        publisher refuses, and ``SessionClosed`` if the session ends first.
        """
        return Subscription(self, name, prefetch=prefetch, codec=codec, copy=copy)

    async def fetch(self, name: str, limit: int, *, codec: CodecLike = None) -> list[Any]:
        """Subscribe to ``name``, ask for ``limit`` elements, return them.

        The request-response form of a subscription: returns once the
        publisher completes, or once ``limit`` elements have arrived (the
        stream is then cancelled, so a publisher with more to give never
        holds the call). Cheaper than ``async with subscribe(...)`` and
        ``async for`` for short streams: nothing is set up for iteration or
        for topping demand up, and one task switch serves the whole answer.
        Everything asked for is held in memory until the call returns.

        Raises:
            ValueError: ``limit`` is not an int >= 1.
            UnknownPublisher / PublisherError: the publisher refused, or
                failed (the elements it sent before are not returned).
            SessionClosed / SessionBroken: the session ended first.
        """
        if type(limit) is not int or limit < 1:
            raise ValueError(f"limit must be an int >= 1, got {limit!r}")
        decoder = resolve_codec(codec) if codec is not None else None
        await trio.lowlevel.checkpoint_if_cancelled()
        fetch = _Fetch(name, limit)
        fetch.subscriber = self._open_subscription(fetch, limit)
        self._fetching += 1
        try:
            await fetch.wait()
        except BaseException:
            self._cancel_subscription(fetch)
            raise
        finally:
            self._fetching -= 1
        error = fetch._error
        if error is not None:
            # Raised from locals that the error's traceback holds (this
            # frame, and the _Fetch): let go of them, or they and the
            # session would wait for the cycle collector.
            fetch._error = None
            try:
                raise error
            finally:
                del error, fetch
        if not fetch._ended:
            self._cancel_subscription(fetch)
        elements = fetch.elements()
        if decoder is not None:
            return [decoder.decode(element) for element in elements]
        return elements

    def _open_subscription(self, subscription: StreamReceiver, initial_demand: int) -> int:
        if self._close_kind is not None:
            raise _closed_error(self._close_kind, self._close_reason or "closed", None)
        subscriber = self._conn.subscribe(subscription.name, initial_demand, copy=subscription.copy)
        subscriptions = self._subscriptions
        subscriptions[subscriber] = subscription
        if len(subscriptions) == 1:
            # The only stream in flight (one request at a time): nothing
            # could be coalesced with this subscribe, so it goes now.
            self._send_queued()
        else:
            # Others are in flight, and their callers are likely to send in
            # this same scheduling pass: the writer sends them all in one
            # write, and the peer answers them in one read.
            self._wake_writer()
        return subscriber

    def _cancel_subscription(self, subscription: StreamReceiver) -> None:
        assert subscription.subscriber is not None
        if self._subscriptions.pop(subscription.subscriber, None) is not None:
            self._conn.cancel(subscription.subscriber)
            self._wake_writer()

    def _request(self, subscriber: int, n: int) -> None:
        if subscriber in self._subscriptions:
            self._conn.request(subscriber, n)
            self._wake_writer()

    def _outstanding_demand(self, subscriber: int) -> int:
        return self._conn.outstanding_demand(subscriber)

    # ---- introspection --------------------------------------------------

    def statistics(self) -> SessionStatistics:
        """A snapshot of this session."""
        return SessionStatistics(
            state=self._conn.state.name,
            subscriptions=len(self._subscriptions),
            publications=len(self._publications),
            bytes_received=self._bytes_in,
            bytes_sent=self._bytes_out,
            elements_dropped=self._dropped,
            close_reason=self._close_reason,
            inbound_bytes=self._conn.inbound_bytes + self.held_elements.held,
            outbound_bytes=self._outbound_held(),
            publications_stopping=len(self._stopping),
        )

    def __repr__(self) -> str:
        return f"<Session {self._conn.state.name}>"


def _transport_token(stream: object) -> str | None:
    # A token the transport carried (WebSocket: from the upgrade's headers).
    current = stream
    for _ in range(4):
        token = getattr(current, "bearer_token", None)
        if isinstance(token, str):
            return token
        current = getattr(current, "transport", None) or getattr(current, "transport_stream", None)
        if current is None:
            break
    return None


def _peer_certificate(stream: object) -> dict[str, Any] | None:
    # The peer's TLS certificate, when mutual TLS gave us one.
    current = stream
    for _ in range(4):
        if isinstance(current, trio.SSLStream):
            try:
                certificate = current.getpeercert()
            except (ValueError, AttributeError):
                return None
            return dict(certificate) if certificate else None
        current = getattr(current, "transport", None) or getattr(current, "transport_stream", None)
        if current is None:
            break
    return None


def _charged_name_memory(name: str, params: Mapping[str, str] | None = None) -> int:
    """What a peer's publisher name is charged beyond its stream's nominal
    cost, for as long as its publication lasts: what it holds beyond
    NAME_MEMORY_ALLOWANCE (0 for a name that does not parse: it is refused)."""
    if params is None:
        try:
            _, params = SubscribeRequest.parse_name(name)
        except ValueError:
            return 0
    if len(name) <= _SHORT_NAME and len(params) <= _SHORT_NAME_PARAMS and name.isascii() and "%" not in name:
        return 0  # (the usual name, within the allowance by name_memory's own reckoning)
    held = SubscribeRequest.name_memory(name, params) - NAME_MEMORY_ALLOWANCE
    return held if held > 0 else 0


def _ended_by_a_failure_within(error: BaseException) -> bool:
    # What the caller's block raises when the session was cancelled under
    # it: by one of the session's own tasks failing, if that failure is in
    # the same group (see without_consequences).
    return isinstance(error, SessionClosed) and not error.by_peer and error.reason == _CANCELLED


@asynccontextmanager
async def open_stream_session(
    stream: trio.abc.Stream,
    *,
    app: Router | None = None,
    config: SessionConfig = DEFAULT_CONFIG,
) -> AsyncIterator[Session]:
    """Run a session over an already connected ``trio.abc.Stream``.

    The session owns the stream and closes it on exit: gracefully (goodbye)
    when the block ends normally or with an exception, forcefully when the
    block is cancelled.

    Args:
        app: publishers to serve to the peer (the protocol is symmetric: a
            client may publish too).
    """
    session = Session(stream, app=app, config=config)
    with caller_sees_its_own_exception(), without_consequences(_ended_by_a_failure_within):
        async with trio.open_nursery() as nursery:
            await nursery.start(session._run)
            try:
                yield session
            finally:
                await session.aclose()
