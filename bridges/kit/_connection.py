"""The trio side of a bridge: one sans-I/O protocol machine over one trio stream.

Theory of operation
-------------------
A bridge's protocol lives in a sans-I/O machine (bytes in, events out; calls
in, bytes out). :class:`BridgeConnection` runs one over a ``trio.abc.Stream``
with two tasks, in a nursery of its own:

* the **reader** reads only while someone waits for what it would read
  (:meth:`BridgeConnection._wants_input`), feeds the machine, and hands each
  event to the subclass's :meth:`~BridgeConnection._dispatch`, synchronously.
  When nobody waits, it parks and the kernel's buffers fill, so TCP carries
  the pressure back to a sender that has no flow control of its own (EMP,
  Epoxy). A read returns up to ``receive_size`` bytes, which may hold
  messages nobody asked for yet; they are kept in order, and once
  ``max_read_ahead`` bytes are held (:meth:`~BridgeConnection._hold`) the
  reader stops even if someone waits: the bound wins, the peer waits.
* the **writer** is the only task that writes. Senders queue the machine's
  bytes (:meth:`~BridgeConnection._take_output`) and wait only while more
  than ``max_write_buffer`` bytes are unwritten, so small messages coalesce
  into one ``send_all`` and a sender is still paced by the transport. The
  last words (the protocol's goodbye or error) are written within
  ``close_timeout``, and the writer closes the transport when the connection
  has ended.

Memory: one budget per connection (:class:`~bridges.kit.MemoryBudget`,
``max_connection_memory``) counts every byte the connection holds: what the
machine holds of the peer's input (a partial frame, a message being joined:
:meth:`~BridgeConnection._input_held_by_machine`), items read ahead
(:meth:`~BridgeConnection._hold`), bytes queued for the writer until they
are written, and whatever the application takes from :attr:`budget` (a
response being built). The reader reads only while the budget has room,
and never more than fits it once counted: a message held for the
application counts ``ITEM_COST`` beyond its bytes, so reads are sized by
the protocol's smallest message (:meth:`~BridgeConnection._read_size`), and
the read-ahead keeps to a quarter of the budget, leaving the rest to the
responses it asks for. A read of many small messages is followed by
smaller reads (``EVENTS_PER_READ``), so that one peer's step of the run
loop stays short for every other connection. A peer whose input alone exceeds the budget
(its partial message fills it, or a message grew past it when decoded)
ends the connection with the protocol's error
(:meth:`~BridgeConnection._memory_budget_exceeded`), a message starting
"memory budget exceeded"; other connections are not touched.

A third task, the keepalive, pings every ``keepalive_interval`` (or after
that long without input) and gives up after ``ping_timeout``. Its clock stops
while the reader is held back by ``max_read_ahead``: a pong queued behind
data we refuse to read cannot arrive, and the data proves the peer is alive.

How it ends: the first reason wins (:meth:`~BridgeConnection._finish`), and
everything parked wakes to see it. A normal end (the protocol's goodbye)
lets inbound queues drain before they raise ``trio.EndOfChannel``; any other
end raises the recorded error, a fresh copy in each task.

What a subclass provides (the contract)
---------------------------------------
* ``_dispatch(event)``: act on one event of the machine (never blocks);
* ``_wants_more_input()``: whether something beyond the handshake, the
  inbound queues and a ping waits for input (a pending call, say);
* ``_read_paused_by_protocol()``: a protocol bound that stops reading (EMP:
  too many requests pending);
* ``_say_goodbye()``: queue the protocol's goodbye if the machine can still
  send one (``aclose``);
* ``_closed_locally()``, ``_lost(message)``: the errors for a local close
  and a lost transport;
* ``_queue_ping()`` and ``_ping_timed_out()``, ``_handshake_timed_out()``:
  the keepalive's and the handshake's protocol side (queue the message,
  return the error to end with);
* ``_on_finish(error)``: resolve whatever waits on the connection's own
  bookkeeping (pending calls);
* ``_input_held_by_machine()``: bytes of the peer's input the machine holds
  (its decoder's buffer, a reassembly), counted against the budget; by
  default the machine's ``buffered_input_size``;
* ``_output_kept()``: bytes of ours the machine keeps for the peer
  beyond the write queue (Relink's messages kept until acknowledged, to
  resend), counted against the budget;
* ``_input_frees_budget()``: whether reading can free the budget
  (MicroMsg2: acknowledgements let the messages we hold go out); then
  the reader goes on reading while our own messages exhaust it;
* ``_input_held_for_application()``: bytes of the peer's input held for
  the application outside the kit's queues (Relink's channels, which
  outlive a connection), counted against the budget;
* ``_memory_budget_exceeded(message)``: queue the protocol's error for a
  peer over the budget and return the error to end with; by default the
  machine's ``fail_memory_budget(message)``, since every protocol says it
  its own way and there is no error the kit could send.

The machine must offer ``receive_data(data)``, ``events()`` (raising a
subclass of ``rstreams.RemoteProtocolError`` for a peer's violation, after
queueing whatever the protocol says then), ``has_data_to_send`` and
``data_to_send()`` (``bridges.machine.ProtocolMachine`` has the output and
the order of events and errors), and for the memory budget
``buffered_input_size`` and ``fail_memory_budget(message)``: the type
checker then finds a machine whose held input the budget would not count.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, Generic, Protocol, TypeVar

import trio
from trio.lowlevel import enable_ki_protection

from rstreams.protocol import RemoteProtocolError
from rstreams.support import connection_lost_reason, unpace_loopback

from ._app import COLLECT_COPIES
from ._budget import MemoryBudget
from ._config import LinkSettings
from ._errors import copy_error
from ._inbound import ITEM_COST
from ._keepalive import keep_tcp_alive

#: About how many messages one read may bring: the reader shrinks its reads
#: to this many of the last read's messages when they were smaller, so that
#: one connection's step of the run loop stays short whatever its peer sends
#: (256 pings answered: about a millisecond).
EVENTS_PER_READ = 64
_NO_CAP = 2**62

__all__ = ["BridgeConnection", "SansIOMachine", "MEMORY_BUDGET_EXCEEDED"]

#: How every "memory budget exceeded" message starts, whichever protocol carries it.
MEMORY_BUDGET_EXCEEDED = "memory budget exceeded"

#: The writer sends queued messages together up to this many bytes; a larger
#: message goes alone, so that writing never copies it into a bigger buffer.
_COALESCE_BYTES = 64 * 1024


class SansIOMachine(Protocol):
    """What :class:`BridgeConnection` needs of a bridge's protocol machine."""

    def receive_data(self, data: bytes | bytearray | memoryview) -> None: ...

    def events(self) -> Sequence[Any]: ...

    @property
    def has_data_to_send(self) -> bool: ...

    def data_to_send(self) -> bytes: ...

    @property
    def buffered_input_size(self) -> int: ...

    def fail_memory_budget(self, message: str) -> BaseException: ...


MachineT = TypeVar("MachineT", bound=SansIOMachine)
SettingsT = TypeVar("SettingsT", bound=LinkSettings)


def _check_budget_hooks(connection_type: type[BridgeConnection[Any, Any]], machine: object) -> None:
    # The memory budget asks the machine what input it holds and how to end
    # a peer over the budget, unless the connection answers itself. A machine
    # written before these defaults (or without them) is refused here, with
    # what to add, instead of failing in the reader mid-connection.
    for hook, member in (("_input_held_by_machine", "buffered_input_size"), ("_memory_budget_exceeded", "fail_memory_budget")):
        if getattr(connection_type, hook) is getattr(BridgeConnection, hook) and not hasattr(type(machine), member):
            raise TypeError(
                f"{type(machine).__name__} has no {member}, which {connection_type.__name__} needs for the "
                f"connection's memory budget: give the machine one, or override {hook}"
            )


class BridgeConnection(trio.abc.AsyncResource, Generic[MachineT, SettingsT]):
    """A bridge's protocol machine running over a trio stream (see the module docstring).

    Start it with :func:`bridges.kit.open_connection` or
    :func:`bridges.kit.start_connection`, which run its tasks and its
    handshake.
    """

    def __init__(self, stream: trio.abc.Stream, machine: MachineT, config: SettingsT) -> None:
        _check_budget_hooks(type(self), machine)
        self.stream = stream
        self.config = config
        unpace_loopback(stream, config.loopback_congestion_control)
        keep_tcp_alive(stream, config.tcp_keepalive)
        self._machine = machine
        self._cancel_scope: trio.CancelScope | None = None
        self._nursery: trio.Nursery | None = None
        # Output: bytes taken from the machine, waiting for the writer.
        self._outgoing: deque[bytes] = deque()  # bounded: senders wait past max_write_buffer
        self._queued = 0
        self._written = 0
        self._writer_lot = trio.lowlevel.ParkingLot()
        self._written_lot = trio.lowlevel.ParkingLot()
        self._writer_done = trio.Event()
        # Input: the reader parks here; takers of inbound items park in
        # _inbound_lot. _buffered counts what was read and not yet taken.
        self._reader_lot = trio.lowlevel.ParkingLot()
        self._inbound_lot = trio.lowlevel.ParkingLot()
        self._inbound_queues: list[Any] = []  # InboundQueue, registered by their constructor
        self._buffered = 0
        # The one budget: every buffer below takes from it (module docstring).
        self.budget = MemoryBudget(config.max_connection_memory, on_room=self._reader_lot.unpark_all)
        self._machine_held = 0  # what the budget counts for _input_held_by_machine()
        self._application_held = 0  # ... and for _input_held_for_application()
        self._output_counted = 0  # ... and for _output_kept()
        self._bytes_in = 0
        self._last_input = 0.0
        self._read_cap = _NO_CAP  # (see _reader: fairness)
        self._parse_again: bool | None = None  # at end of file or not: see _machine_paused_parsing
        self._paused = False
        self._write_broken = False
        self._paused_during_ping = False
        self._pong: trio.Event | None = None
        self._handshake_done = trio.Event()
        self._handshake_settled = trio.Event()
        # Why the connection ended (None while open); normal: by goodbye.
        self._end: BaseException | None = None
        self._end_normal = False
        self._ended = trio.Event()

    #: The fewest bytes one message of the peer takes on the wire. A message
    #: read for the application counts ``ITEM_COST`` bytes beyond its own
    #: (a flood of tiny messages must cost something), so a read of N bytes
    #: may count up to N * ITEM_COST / SMALLEST_MESSAGE: the reader sizes
    #: its reads by that, so that what it reads always fits (_read_size).
    #: Subclasses give their protocol's figure; 1 is the safe default.
    SMALLEST_MESSAGE = 1

    # ---- the subclass's side (see the module docstring) -----------------

    def _dispatch(self, event: Any) -> None:
        raise NotImplementedError

    def _wants_more_input(self) -> bool:
        return False

    def _read_paused_by_protocol(self) -> bool:
        return False

    def _receive_size(self) -> int:
        # The most bytes the next read asks for (a protocol may read more
        # once its own flow control bounds what the peer may send).
        return self.config.receive_size

    def _largest_receive_size(self) -> int:
        # The most bytes any read of this connection may ask for.
        return self.config.receive_size

    def _say_goodbye(self) -> None:
        pass

    def _closed_locally(self) -> BaseException:
        return trio.ClosedResourceError("connection closed by this side")

    def _lost(self, message: str) -> BaseException:
        return trio.BrokenResourceError(message)

    def _queue_ping(self) -> None:
        raise NotImplementedError

    def _ping_timed_out(self) -> BaseException:
        return TimeoutError(f"no pong within {self.config.ping_timeout} s")

    def _handshake_timed_out(self) -> BaseException:
        return TimeoutError(f"no handshake within {self.config.handshake_timeout} s")

    def _on_finish(self, error: BaseException) -> None:
        pass

    def _holds_open(self) -> bool:
        # Whether something is open that may stay quiet for long (a
        # subscription, a request being answered, a call): the idle timeout
        # spares the connection then. Bridges that know say; by default a
        # connection is never idle but for a stalled message.
        return True

    def _idle_timed_out(self, message: str) -> BaseException:
        # The error an idle connection ends with; a protocol that can say
        # why queues its error message here (as for _handshake_timed_out).
        return TimeoutError(message)

    def _input_held_by_machine(self) -> int:
        return self._machine.buffered_input_size

    def _input_held_for_application(self) -> int:
        return 0

    def _input_frees_budget(self) -> bool:
        return False

    def _machine_paused_parsing(self) -> bool:
        # Whether the machine's last events() stopped before parsing all it
        # was fed, to keep one step short (MicroMsg2: its peer's filters):
        # the reader then parses the rest in the next step, before reading.
        return False

    def _output_kept(self) -> int:
        return 0

    def _memory_budget_exceeded(self, message: str) -> BaseException:
        return self._machine.fail_memory_budget(message)

    # ---- state --------------------------------------------------------------

    @property
    def ended(self) -> bool:
        """True once the connection has ended, for whatever reason."""
        return self._end is not None

    @property
    def end_reason(self) -> BaseException | None:
        """Why the connection ended (None while it is open)."""
        return self._end

    @property
    def bytes_received(self) -> int:
        """Transport bytes read so far."""
        return self._bytes_in

    @property
    def bytes_sent(self) -> int:
        """Transport bytes written so far."""
        return self._written

    @property
    def max_response_in_budget(self) -> int:
        """The largest response this connection may collect within its budget.

        What a response being collected counts (``COLLECT_COPIES`` times
        its size) must leave room for what the peer's input may hold
        meanwhile (the read-ahead and one read), so that a response waiting
        for room never waits for room that only its own answering would
        free. A response larger than this is refused the protocol's way (a
        response too large), not awaited forever.
        """
        limit = self.budget.limit
        room = limit - self.read_ahead_limit - self._largest_receive_size()
        return max(room, 0) // COLLECT_COPIES

    @property
    def read_ahead_limit(self) -> int:
        """The most bytes of items read ahead (``max_read_ahead``), within a
        quarter of the budget: the rest stays free for responses being
        built and bytes being written, so that a peer's pipelined requests
        never take the room their own answers need."""
        return min(self.config.max_read_ahead, self.budget.limit // 4)

    def response_limit(self, max_bytes: int) -> int:
        """``max_bytes`` cut to :attr:`max_response_in_budget`: what one response or message may take room for.

        An app server's cap on a response (its ``max_response_bytes``, or
        less where the budget is smaller), and the room a sender takes for a
        message of ``max_bytes`` (a larger message takes what fits and
        counts the rest once queued). Either way, never a wait for room
        that cannot come.
        """
        return min(max_bytes, self.max_response_in_budget)

    @property
    def buffered_bytes(self) -> int:
        """Bytes read and not yet taken by the application."""
        return self._buffered

    async def wait_ended(self) -> None:
        """Wait until the connection has ended (goodbye, error or close)."""
        await self._ended.wait()

    # ---- the end --------------------------------------------------------------

    def _finish(self, error: BaseException, *, normal: bool = False) -> None:
        # The first reason wins. Everything parked is woken to see it.
        if self._end is not None:
            return
        self._end, self._end_normal = error, normal
        self._on_finish(error)
        self.budget.close(error)
        if self._pong is not None:
            self._pong.set()
        self._ended.set()
        self._handshake_settled.set()
        for lot in (self._reader_lot, self._inbound_lot, self._writer_lot, self._written_lot):
            lot.unpark_all()

    def _stream_end(self) -> BaseException:
        # What an inbound stream raises once drained: EndOfChannel after a goodbye.
        assert self._end is not None
        if self._end_normal:
            return trio.EndOfChannel()
        return copy_error(self._end)

    def _check_open(self) -> None:
        if self._end is not None:
            raise copy_error(self._end)

    async def aclose(self) -> None:
        """Say goodbye (if the connection is still open) and close the transport.

        Idempotent. Bounded by ``close_timeout``. Cancellation: the transport
        is closed forcefully. Always checkpoints.
        """
        if self._end is None:
            self._say_goodbye()
            self._take_output()
            self._finish(self._closed_locally(), normal=True)
        try:
            with trio.move_on_after(self.config.close_timeout):
                await self._writer_done.wait()
        finally:
            if self._cancel_scope is not None:
                self._cancel_scope.cancel()

    async def _close_with(self, error: BaseException) -> None:
        # The machine has queued its last words (an error message): end with
        # ``error`` and give the writer close_timeout to flush them.
        self._take_output()
        self._finish(error)
        with trio.move_on_after(self.config.close_timeout):
            await self._writer_done.wait()

    # ---- output ----------------------------------------------------------------

    def _take_output(self) -> int:
        # Move what the machine queued to the writer; return the byte count
        # that must be written for it to have gone out.
        machine = self._machine
        if machine.has_data_to_send:
            data = machine.data_to_send()
            size = len(data)
            self._outgoing.append(data)
            self._queued += size
            self.budget.charge(size)  # counted until written (the writer gives it back)
            self._writer_lot.unpark_all()
        return self._queued

    async def _send_within_budget(self, size: int, queue: Callable[[], object]) -> None:
        # A message we build for the peer (``queue`` has the machine build
        # it, about ``size`` bytes): wait for room in the budget first, in
        # order with the other takers, so that what a connection sends is
        # paced by what the peer reads, not only by max_write_buffer per
        # sender. Then wait as any send does.
        prepaid = self.response_limit(size)
        await self.budget.take(prepaid)
        await self._wait_written(self._queue_prepaid(prepaid, queue))

    def _queue_prepaid(self, prepaid: int, queue: Callable[[], object]) -> int:
        # The one way a sender that holds ``prepaid`` bytes of the budget
        # for a message (room taken before building it, or the elements it
        # is built from) hands them over: ``queue()`` has the machine build
        # the message; then what the machine queued and keeps is counted
        # (_hand_over), and only then are the prepaid bytes given back,
        # exactly once, whether ``queue`` raised or not. Returns what
        # _take_output returns. The sender need not wait for the writer:
        # the budget paces it.
        try:
            queue()
        finally:
            target = self._hand_over(prepaid)
        return target

    def _hand_over(self, prepaid: int) -> int:
        # What the machine was just made to queue (and keep: _output_kept)
        # takes over from ``prepaid`` bytes the sender held for it: counted
        # first, so that the takers the give-back wakes see it counted (never
        # room handed out twice), then given back. Returns what _take_output
        # returns.
        target = self._take_output()
        self._count_machine_input()
        self.budget.give_back(prepaid)
        return target

    async def _wait_written(self, target: int, *, or_ended: bool = False) -> None:
        # Wait until at most max_write_buffer bytes, ours included, are left
        # unwritten: small messages coalesce into one send_all, and a sender
        # is still paced by the transport once the bound is reached.
        # ``or_ended``: return once the connection has ended instead.
        target -= self.config.max_write_buffer
        while self._written < target:
            if or_ended and self._end is not None:
                return
            if self._writer_done.is_set():
                self._check_open()
                raise self._lost("the transport closed before the message was written")
            await self._written_lot.park()

    async def wait_writable(self, *, or_ended: bool = False) -> None:
        """Wait until at most ``max_write_buffer`` bytes queued so far are unwritten.

        What a send waits for after queueing its message, for a sender that
        queued with a ``*_nowait`` method and let go of its copy first: its
        bytes went (or the end error says they may not have).

        Args:
            or_ended: return, without an error and without waiting for the
                last words to be written, once the connection has ended: for
                a sender that then looks for another connection (a Relink
                link outlives its connections) rather than for its bytes.

        Raises:
            the connection's end error (or the bridge's lost-connection
            error) if the transport closed before; with ``or_ended``, only
            the lost-connection error, for a transport closed while the
            connection had not ended (its tasks were cancelled).

        Cancellation: nothing is undone (what is queued may still go out).
        Always checkpoints.
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        await self._wait_written(self._queued, or_ended=or_ended)
        await trio.lowlevel.cancel_shielded_checkpoint()

    async def _send_queued(self) -> None:
        # What a send does once the machine has queued its message.
        await self._wait_written(self._take_output())

    @enable_ki_protection
    async def _writer(self) -> None:
        try:
            while True:
                while not self._outgoing:
                    if self._end is not None:
                        return
                    await self._writer_lot.park()
                data = self._next_chunk()
                try:
                    if self._end is not None:
                        # The last words (goodbye, error): bounded, the peer may not read.
                        with trio.move_on_after(self.config.close_timeout):
                            await self.stream.send_all(data)
                    else:
                        await self.stream.send_all(data)
                except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                    # The peer may have said why (an error, a goodbye) just
                    # before it went: let the reader take what is left before
                    # calling it a lost connection.
                    self._write_broken = True
                    self._reader_lot.unpark_all()
                    with trio.move_on_after(self.config.close_timeout):
                        await self._ended.wait()
                    self._finish(self._lost(connection_lost_reason(exc, "writing")))
                    return
                self._written += len(data)
                self.budget.give_back(len(data))
                self._written_lot.unpark_all()
        finally:
            # Closing gracefully (TLS close_notify) may fail or hang when the
            # peer is gone; either way the transport ends up closed.
            graceful = False
            with trio.move_on_after(self.config.close_timeout) as scope:
                scope.shield = True
                try:
                    await self.stream.aclose()
                    graceful = True
                except (trio.BrokenResourceError, trio.ClosedResourceError, trio.BusyResourceError):
                    pass
            if not graceful:
                await trio.aclose_forcefully(self.stream)
            self._writer_done.set()
            self._written_lot.unpark_all()

    def _next_chunk(self) -> bytes:
        # Small messages coalesce into one send_all; a large one goes alone,
        # never copied into a bigger buffer (it is counted once, as queued).
        outgoing = self._outgoing
        first = outgoing.popleft()
        if len(first) >= _COALESCE_BYTES or not outgoing:
            return first
        chunks, size = [first], len(first)
        while outgoing and size + len(outgoing[0]) <= _COALESCE_BYTES:
            chunk = outgoing.popleft()
            chunks.append(chunk)
            size += len(chunk)
        return b"".join(chunks)

    # ---- input ---------------------------------------------------------------------

    def _hold(self, size: int) -> None:
        # Count ``size`` bytes read and not yet taken against max_read_ahead
        # and the budget (they are in memory already: charged, not taken).
        self._buffered += size
        self.budget.charge(size)

    def _release(self, size: int) -> None:
        # The application took ``size`` held bytes: the reader may go on
        # (the budget wakes it).
        self._buffered -= size
        self.budget.give_back(size)
        self._reader_lot.unpark_all()

    def _reading_room(self) -> int:
        # What the reader may read into. Messages we wait to build come
        # first (MemoryBudget.room: a peer that asks and does not read gets
        # no further request read), except while the machine holds part of
        # a message: that part can only be freed by reading the rest, and a
        # builder waiting for it would wait forever.
        return self.budget.available if self._machine_held else self.budget.room

    def _count_machine_input(self) -> None:
        # Bring the budget up to date with what the machine holds of the
        # peer's input (a partial frame, a message being joined), and what
        # the subclass holds of it for the application.
        self._machine_held = self._recount(self._machine_held, self._input_held_by_machine())
        self._application_held = self._recount(self._application_held, self._input_held_for_application())
        self._output_counted = self._recount(self._output_counted, self._output_kept())

    def _recount(self, counted: int, held: int) -> int:
        if held > counted:
            self.budget.charge(held - counted)
        elif held < counted:
            self.budget.give_back(counted - held)
        return held

    def _check_memory(self) -> None:
        # The peer's misbehaviour: its input alone is past the budget (a
        # message that grew past it when decoded), or the machine's part of
        # it fills the budget (a partial message that can never complete,
        # since the reader reads only into room).
        limit = self.budget.limit
        inbound = self._machine_held + self._buffered + self._application_held
        if self._end is None and (inbound > limit or self._machine_held >= limit):
            error = self._memory_budget_exceeded(
                f"{MEMORY_BUDGET_EXCEEDED}: the peer's input holds {inbound} bytes"
                f" ({self._machine_held} of them unparsed or being joined), the budget is {limit}"
            )
            self._take_output()
            self._finish(error)

    def _wake_reader(self) -> None:
        # Someone now waits for input (a call was sent, say).
        self._reader_lot.unpark_all()

    def _read_size(self) -> int:
        """How many bytes the next read may ask for; 0: none now.

        What a read brings is the peer's input, counted as soon as it is
        parsed (charged, not taken): the machine's partial message 1:1, and
        each message read for the application ``ITEM_COST`` bytes beyond
        its own. So a read is sized by the worst case, ``expansion`` counted
        bytes per byte read (the protocol's smallest message, all of them
        held), to fit three bounds: the budget's room (messages we wait to
        build first), the read-ahead's (``read_ahead_limit``; at least one
        message is always read), and, while only input can free the budget
        (acknowledgements of what we keep to resend), the room left for the
        peer's input alone. A peer that stays within the protocol is then
        paced (the reader waits, and TCP carries it back) and never closed
        for "memory budget exceeded"; only a message too large for the
        budget is.
        """
        room = self._reading_room()
        smallest = self.SMALLEST_MESSAGE
        expansion = -(-ITEM_COST // smallest) if smallest < ITEM_COST else 1
        if room < expansion and self._input_frees_budget():
            room = self.budget.limit - self._buffered - self._application_held
        if self._buffered > 0:
            room = min(room, self.read_ahead_limit - self._buffered)
        size = min(self._receive_size(), self._read_cap, room // expansion)
        if size <= 0 and self._machine_held and room > 0:
            # Too little room for a read of the smallest messages, but a
            # message is begun: only reading its rest frees what its start
            # holds, and that counts 1:1 (a message that can never fit
            # then fills the budget, and _check_memory ends the connection,
            # rather than the reader waiting for ever).
            return min(self._receive_size(), room)
        return max(size, 0)

    def _wants_input(self) -> bool:
        if self._end is not None:
            return False
        if self._write_broken:
            return True  # to find out why: the peer's last message, or the reset
        wanted = (
            not self._handshake_done.is_set()
            or any(queue.wanted for queue in self._inbound_queues)
            or self._pong is not None
            or self._wants_more_input()
        )
        self._paused = wanted and (self._read_size() == 0 or self._read_paused_by_protocol())
        if self._paused and self._pong is not None:
            self._paused_during_ping = True
        return wanted and not self._paused

    @enable_ki_protection
    async def _reader(self) -> None:
        while True:
            if self._parse_again is not None and self._end is None:
                # What was read and not yet parsed, a step at a time (the
                # machine's bound), before anything more is read.
                at_end_of_file, self._parse_again = self._parse_again, None
                await trio.lowlevel.checkpoint()
                self._process(at_end_of_file=at_end_of_file)
                self._count_machine_input()
                self._check_memory()
                continue
            while not self._wants_input():
                if self._end is not None:
                    return
                await self._reader_lot.park()
            try:
                # Never more than fits, counted as it will be (_read_size).
                data = await self.stream.receive_some(max(self._read_size(), 1))
            except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                # trio's error often says nothing itself ("BrokenResourceError()")
                # while its cause does (a certificate that failed to verify).
                self._finish(self._lost(connection_lost_reason(exc, "reading")))
                return
            self._bytes_in += len(data)
            self._last_input = trio.current_time()
            self._machine.receive_data(data)
            events = self._process(at_end_of_file=not data)
            self._count_machine_input()
            self._check_memory()
            # Fair to the other connections: a read is one step of the run
            # loop, so a read of many tiny messages (a flood of pings, each
            # answered at once) held every other connection up for its whole
            # length. The next read asks for about EVENTS_PER_READ messages'
            # worth, at the size this one's messages had.
            # (Between half and all of that, a capped read keeps its cap.)
            if events >= EVENTS_PER_READ:
                self._read_cap = max(len(data) * EVENTS_PER_READ // events, 1)
            elif 0 < events < EVENTS_PER_READ // 2:
                self._read_cap = _NO_CAP

    def _process(self, *, at_end_of_file: bool = False) -> int:
        # The events of what the machine was fed, dispatched: how many.
        dispatched = 0
        while self._end is None:
            try:
                events = self._machine.events()
            except RemoteProtocolError as exc:
                self._take_output()  # what the machine queued about it
                if at_end_of_file:
                    # What the peer's end of file breaks is a message cut
                    # short: the machine calls it a violation (h11 does
                    # too), but for the application the connection was
                    # lost in the middle of a message, as over tcp:// and
                    # Relink (a peer that crashed mid-write, a cut cable).
                    lost = self._lost(exc.message)
                    lost.__cause__ = exc
                    self._finish(lost)
                else:
                    self._finish(exc)
                return dispatched
            for event in events:
                self._dispatch(event)
            dispatched += len(events)
            if self._machine_paused_parsing():
                self._parse_again = at_end_of_file
                break
            if not events:
                break
        self._take_output()  # automatic answers (pongs)
        self._inbound_lot.unpark_all()
        return dispatched

    # ---- handshake and keepalive ---------------------------------------------------

    def _handshake_complete(self) -> None:
        # The subclass calls this when the peer's side of the handshake arrived.
        self._handshake_done.set()
        self._handshake_settled.set()

    async def _run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        # The connection's own nursery, one level below the caller's block:
        # ending the connection cancels these tasks, never the caller's code.
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            self._cancel_scope = nursery.cancel_scope
            self._last_input = trio.current_time()
            nursery.start_soon(self._writer)
            nursery.start_soon(self._reader)
            task_status.started()

    async def _handshake(self) -> None:
        self._take_output()  # our side of the handshake, if the machine queued it
        self._wake_reader()
        with trio.move_on_after(self.config.handshake_timeout):
            await self._handshake_settled.wait()  # the peer's side, or the end
        if self._handshake_done.is_set():
            # Done, even if the connection ended in the same read (hello,
            # data and bye together): what came with it is still taken as
            # after any other ending.
            return
        if self._end is not None:
            raise copy_error(self._end)
        if not self._handshake_done.is_set():
            error = self._handshake_timed_out()
            self._take_output()
            self._finish(error)
            raise copy_error(error)

    def _start_ping(self) -> trio.Event:
        # One ping at a time: a second asker waits for the same pong.
        if self._pong is None:
            self._queue_ping()
            self._pong = trio.Event()
            self._paused_during_ping = False
            self._take_output()
            self._reader_lot.unpark_all()
        return self._pong

    def _pong_received(self) -> None:
        # The subclass calls this when the pong to our ping arrived.
        if self._pong is not None:
            self._pong.set()
            self._pong = None

    @enable_ki_protection
    async def _watch_idle(self, timeout: float) -> None:
        # Checked every quarter of the timeout, as a session's: the
        # connection ends between ``timeout`` and 1.25 times it after the
        # peer last sent anything.
        while self._end is None:
            await trio.sleep(timeout / 4)
            quiet = trio.current_time() - self._last_input
            if self._end is not None or quiet < timeout or not self._wants_input():
                continue  # (not waiting for input: held back by us, or nobody asks)
            if self._machine_held:
                message = f"idle timeout: a message begun and nothing more for {quiet:.0f} s"
            elif not self._holds_open():
                message = f"idle timeout: nothing received for {quiet:.0f} s and nothing open"
            else:
                continue
            error = self._idle_timed_out(message)
            self._take_output()
            self._finish(error)
            return

    @enable_ki_protection
    async def _keepalive(self, interval: float) -> None:
        while self._end is None:
            if self.config.keepalive_when_idle:
                # Ping only after ``interval`` of silence from the peer.
                while self._end is None:
                    quiet_until = self._last_input + interval
                    if trio.current_time() >= quiet_until:
                        break
                    await trio.sleep_until(quiet_until)
            else:
                await trio.sleep(interval)
            if self._end is not None:
                return
            pong = self._start_ping()
            while True:
                with trio.move_on_after(self.config.ping_timeout):
                    await pong.wait()
                    break
                if self._paused_during_ping:
                    # Held back by our own read-ahead bound: not the peer's fault.
                    self._paused_during_ping = self._paused
                    continue
                if self._end is None:
                    error = self._ping_timed_out()
                    self._take_output()
                    self._finish(error)
                return
