"""The trio adapter: one MicroMsg2 connection over any trio stream (TCP, TLS, memory).

Built on the bridge kit's :class:`~bridges.kit.BridgeConnection` (reader,
writer, handshake timeout, how it ends; its docstring has the theory of
operation). What is MicroMsg2's own is here: what the reader reads for,
what each event means, and the ack window as demand.

Windows, both ways
------------------
*Sending*: with ``ack`` or ``batch-ack:max-count=N`` negotiated, a
:class:`~bridges.kit.SendWindow` of 1 or N holds :meth:`send_message` back
while that many messages are unacknowledged; an ``Acknowledged`` event that
frees m messages releases m, which is exactly a Reactive Streams
``request(m)``. Without an ack extension a sender is paced by the transport
only (``max_write_buffer``).

*Receiving*: a client's message counts as consumed when the application
takes it (:meth:`MessageStream.receive` or :meth:`~MessageStream.receive_batch`),
which queues one ack naming the last taken, at once (a peer that sent one
message is never left waiting). A server acknowledges a SEND once handled
(the broker: once the topic took it). Without acks, the reader reads only
while someone waits for a message (:class:`~bridges.kit.InboundQueue`), and
pauses before one read could carry the peer past ``max_pending_messages``.

Who reads what
--------------
A client's messages (then ``completed`` or a stream ERROR) go to their
destination's :class:`MessageStream` (:meth:`subscribe`); one for no stream
(it crossed an unsubscribe) is dropped and acknowledged. A server's SENDs go
to :meth:`receive_send`, its pubsub commands to :meth:`receive_command`.

How it ends
-----------
MicroMsg2 has no goodbye: closing the transport is the normal end
(:class:`MicroMsg2Closed`; inbound queues end with ``trio.EndOfChannel``
once drained). The peer's ERROR ends it with :class:`PeerError`, a
violation with ``RemoteProtocolError`` (after our ERROR frame), a missing
handshake with :class:`MicroMsg2Timeout`, the transport with
:class:`MicroMsg2ConnectionLost`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Union

import trio

from ..kit import BridgeConnection, InboundQueue, SendWindow
from ._connection import Connection
from ._errors import MicroMsg2Closed, MicroMsg2ConnectionLost, MicroMsg2Timeout, PeerError, SendRefused
from ._events import (
    Acknowledged,
    Completed,
    ConnectionClosed,
    ConnectionFailed,
    HandshakeCompleted,
    MessageReceived,
    SendsRefused,
    StreamFailed,
    Subscribe,
    Unsubscribe,
)
from ._extensions import ExtensionSpec
from ._filters import Filter
from ._properties import FilterValue
from ._settings import DEFAULT_SETTINGS, SMALLEST_MESSAGE, MicroMsg2Settings, MicroMsg2Statistics
from ._state import ConnectionState, Role
from ._stream import MessageStream

__all__ = ["MicroMsg2Connection", "MessageStream", "Command"]

#: A pubsub command from a client, as a server receives it.
Command = Union[Subscribe, Unsubscribe]
#: Destinations a client remembers the server's refusal of (``refused``): a
#: publisher sends to one or a few; a server naming many costs no more.
MAX_REFUSED = 16
_OPEN_OR_HANDSHAKING = (
    ConnectionState.AWAITING_HELLO,
    ConnectionState.AWAITING_REPLY,
    ConnectionState.AWAITING_FINAL,
    ConnectionState.OPEN,
)


class MicroMsg2Connection(BridgeConnection[Connection, MicroMsg2Settings]):
    """An open MicroMsg2 connection, handshake done (either role).

    Create one with :func:`open_micromsg2_connection`,
    :func:`open_micromsg2_stream` or a :class:`MicroMsg2Server`.

    Args:
        stream: the transport; the connection owns it.
        role: ``Role.CLIENT`` (we send the first handshake) or ``Role.SERVER``.
        settings: identity, extensions, timeouts, bounds and limits.
    """

    #: (The kit sizes its reads by it.)
    SMALLEST_MESSAGE = SMALLEST_MESSAGE

    def __init__(
        self, stream: trio.abc.Stream, role: Role = Role.CLIENT, settings: MicroMsg2Settings = DEFAULT_SETTINGS
    ) -> None:
        machine = Connection(
            role,
            identity=settings.identity,
            required=settings.required,
            optional=settings.optional,
            accept=settings.accept,
            limits=settings.limits,
        )
        super().__init__(stream, machine, settings)
        self.role = role
        self._started = False
        self._window: SendWindow | None = None
        self._streams: dict[str, MessageStream] = {}
        self._sends: InboundQueue[MessageReceived] = InboundQueue(self)
        self._commands: InboundQueue[Command] = InboundQueue(self)
        self._all_acknowledged = trio.Event()
        self._all_acknowledged.set()
        self._acknowledgement = trio.Event()  # set (and replaced) at each ack: wait_acknowledgement
        self._refused: dict[str, str] = {}  # (client) the server's refuse_sends, by destination

    def _use_settings(self, settings: MicroMsg2Settings) -> None:
        # Before the connection starts: handshake with these settings instead
        # (a client that learns its window from its first subscriber's demand).
        if self._started:
            raise RuntimeError("the connection has started: its handshake is sent")
        self.config = settings
        self._machine = Connection(
            self.role,
            identity=settings.identity,
            required=settings.required,
            optional=settings.optional,
            accept=settings.accept,
            limits=settings.limits,
        )

    async def _run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        self._started = True
        await super()._run(task_status=task_status)

    async def aclose(self) -> None:
        """Close the transport (MicroMsg2 has no goodbye); see ``BridgeConnection.aclose``.

        A connection that never started (a peer that never subscribed) just
        closes its transport. Always checkpoints.
        """
        if not self._started:
            self._finish(self._closed_locally(), normal=True)
            await trio.aclose_forcefully(self.stream)
            return
        await super().aclose()

    # ---- state ------------------------------------------------------------

    @property
    def state(self) -> ConnectionState:
        """The sans-I/O machine's state."""
        return self._machine.state

    @property
    def peer_identity(self) -> str | None:
        """The identity in the peer's handshake."""
        return self._machine.peer_identity

    @property
    def extensions(self) -> tuple[ExtensionSpec, ...]:
        """The extensions in use, in index order (empty before the handshake)."""
        return self._machine.extensions

    @property
    def window(self) -> int | None:
        """The negotiated ack window (1 for ``ack``, N for ``batch-ack``), or None."""
        return self._machine.window

    @property
    def send_credit(self) -> int | None:
        """How many messages we may send now without waiting; None for unlimited (no acks)."""
        return self._machine.send_credit

    @property
    def unacknowledged(self) -> int:
        """Our messages the peer has not acknowledged yet."""
        return self._machine.unacknowledged

    def uses(self, name: str) -> bool:
        """Whether the extension ``name`` is used on this connection."""
        return self._machine.uses(name)

    def statistics(self) -> MicroMsg2Statistics:
        """A snapshot: bytes in and out, messages held, the window, whether reading is allowed."""
        machine = self._machine
        return MicroMsg2Statistics(
            bytes_received=self.bytes_received,
            bytes_sent=self.bytes_sent,
            buffered_bytes=self.buffered_bytes,
            window=machine.window,
            unacknowledged=machine.unacknowledged,
            pending_messages=machine.pending_messages,
            subscriptions=len(machine.subscriptions),
            reading=self._wants_input(),
        )

    # ---- the kit's hooks ------------------------------------------------------

    def _wants_more_input(self) -> bool:
        # Acks for what we sent; and a server always listens for commands
        # while a subscription streams (an unsubscribe must get through).
        return self._machine.unacknowledged > 0

    def _read_paused_by_protocol(self) -> bool:
        if self._machine.window is not None:
            return False  # the window bounds the peer already
        per_read = self.config.receive_size // SMALLEST_MESSAGE
        return self._machine.pending_messages + per_read > self.config.limits.max_pending_messages

    def _receive_size(self) -> int:
        if self._machine.window is not None:
            return self.config.windowed_receive_size  # the window bounds the peer
        return self.config.receive_size

    def _largest_receive_size(self) -> int:
        return max(self.config.receive_size, self.config.windowed_receive_size)

    def _say_goodbye(self) -> None:
        if self._machine.state in _OPEN_OR_HANDSHAKING:
            self._machine.close()

    def _closed_locally(self) -> BaseException:
        return MicroMsg2Closed("connection closed by this side", by_peer=False)

    def _lost(self, message: str) -> BaseException:
        return MicroMsg2ConnectionLost(message)

    def _handshake_timed_out(self) -> BaseException:
        message = f"no handshake within {self.config.handshake_timeout} s"
        if self._machine.state in _OPEN_OR_HANDSHAKING:
            self._machine.send_error(message)
        return MicroMsg2Timeout(message)

    def _holds_open(self) -> bool:
        # A subscription (either side), messages not yet acknowledged, or
        # what waits to be taken.
        machine = self._machine
        return bool(
            machine.subscriptions
            or self._streams
            or machine.unacknowledged
            or machine.pending_messages
            or len(self._sends)
            or len(self._commands)
        )

    def _idle_timed_out(self, message: str) -> BaseException:
        if self._machine.state in _OPEN_OR_HANDSHAKING:
            self._machine.send_error(message)
        return MicroMsg2Timeout(message)

    def _input_frees_budget(self) -> bool:
        # Acknowledgements let the messages we hold (window waiters) go out.
        return self._window is not None and self._window.in_flight > 0

    def _machine_paused_parsing(self) -> bool:
        return self._machine.events_pending

    def _on_finish(self, error: BaseException) -> None:
        if self._window is not None:
            self._window.close(error)
        self._all_acknowledged.set()
        self._acknowledgement.set()

    def _dispatch(self, event: object) -> None:
        if isinstance(event, MessageReceived):
            if self.role is Role.SERVER:
                self._sends.put(event, len(event.payload))
            else:
                stream = self._streams.get(event.destination)
                if stream is None:
                    self._consumed(1)  # crossed our unsubscribe: nobody will take it
                else:
                    stream._queue.put(event, len(event.payload))
        elif isinstance(event, Acknowledged):
            if self._window is not None:
                self._window.release(min(event.count, self._window.in_flight))
            if self._machine.unacknowledged == 0:
                self._all_acknowledged.set()
            self._acknowledgement.set()  # (wait_acknowledgement's waiters)
            self._acknowledgement = trio.Event()
        elif isinstance(event, (Subscribe, Unsubscribe)):
            self._commands.put(event, 0)
        elif isinstance(event, (Completed, StreamFailed)):
            stream = self._streams.get(event.destination)
            if stream is not None:
                stream._queue.put(event, 0)
        elif isinstance(event, SendsRefused):
            if len(self._refused) < MAX_REFUSED:
                self._refused.setdefault(event.destination, event.message)  # see refused()
        elif isinstance(event, HandshakeCompleted):
            if event.window is not None:
                self._window = SendWindow(event.window)
            self._handshake_complete()
        elif isinstance(event, ConnectionFailed):
            self._finish(PeerError(event.message or "the peer sent an ERROR frame"))
        elif isinstance(event, ConnectionClosed):
            if not self._handshake_done.is_set():
                # No goodbye in MicroMsg2, so a close is how a connection
                # ends normally; but one that never got through its
                # handshake failed to connect (as EMP and Epoxy say).
                self._finish(self._lost("the peer closed the connection during the handshake"))
            else:
                self._finish(MicroMsg2Closed("the peer closed the connection", by_peer=True), normal=True)

    def _consumed(self, count: int) -> None:
        # The application took ``count`` messages: acknowledge them now.
        if count and self._machine.state is ConnectionState.OPEN:
            self._machine.acknowledge(count)
            self._take_output()

    # ---- sending ----------------------------------------------------------------

    async def send_message(
        self,
        destination: str,
        payload: bytes,
        *,
        properties: Mapping[str, FilterValue] | Iterable[tuple[str, FilterValue]] = (),
        dotnet_type: str | None = None,
        prepaid: int | None = None,
    ) -> int:
        """Send a MESSAGE (server) or SEND (client); return its sequence number.

        Waits while the ack window is full (that is the peer's demand), then
        for room in the connection's memory budget, then while more than
        ``max_write_buffer`` bytes are unwritten. A payload
        over 1 MiB goes as CONTINUED frames and counts once.

        Raises:
            LocalProtocolError: a bad destination or property, or a dotnet
                type without the dotnet extension.
            MicroMsg2Closed and the other end errors: the connection ended.

        ``prepaid``: bytes of the connection's budget the caller already
        holds for this message (the broker counts an element from the moment
        it has it); they are handed over, no room is waited for, and neither
        is the writer (the budget paces the caller, which then holds no copy
        of the message while it waits to be written).

        Cancellation: while waiting for the window, nothing was sent; once
        queued, the message may still go out (``prepaid`` is handed over or
        given back either way). Always checkpoints.
        """
        sequences = await self._send_in_steps(
            destination, [(payload, properties)], None if prepaid is None else [prepaid], dotnet_type
        )
        return sequences[0]

    async def send_messages(
        self,
        destination: str,
        messages: Sequence[tuple[bytes, Mapping[str, FilterValue] | Iterable[tuple[str, FilterValue]]]],
        *,
        prepaid: Sequence[int] | None = None,
    ) -> None:
        """Send ``messages`` (payload, properties) in order, as many at a time as the window takes.

        The batch form of :meth:`send_message` for high rates: each step
        waits as that does for room in the window for one message, then
        queues as many as the window has room for, so that the writer sends
        them in one write and the peer reads them in one read, instead of
        one write, one read and one ack each.

        ``prepaid``: as :meth:`send_message`'s, one count per message, all
        of them handed over: each with its message, and those of the
        messages not sent given back if this raises.

        Raises:
            ValueError: no messages, or ``prepaid`` of another length.
            LocalProtocolError: a bad destination or property (the messages
                before it were sent).
            MicroMsg2Closed and the other end errors: the connection ended.

        Cancellation: the messages queued before stay queued; none is
        half-sent. Always checkpoints.
        """
        if not messages or (prepaid is not None and len(prepaid) != len(messages)):
            raise ValueError("send_messages needs messages, and as many prepaid counts when prepaid is given")
        await self._send_in_steps(destination, messages, prepaid, None)

    async def _send_in_steps(
        self,
        destination: str,
        messages: Sequence[tuple[bytes, Mapping[str, FilterValue] | Iterable[tuple[str, FilterValue]]]],
        prepaid: Sequence[int] | None,
        dotnet_type: str | None,
    ) -> list[int]:
        # What send_message and send_messages share: each step waits for room
        # in the window for one message, takes it for as many as it has
        # (acquire_up_to), and queues those within the budget (their prepaid
        # bytes handed over, or room waited for). The prepaid bytes of the
        # messages not sent are given back if this raises. Their sequence
        # numbers, in order.
        sequences: list[int] = []
        sent = 0
        try:
            while sent < len(messages):
                await trio.lowlevel.checkpoint_if_cancelled()
                self._check_open()
                window = self._window
                left = len(messages) - sent
                count = left if window is None else await window.acquire_up_to(left)
                batch = messages[sent : sent + count]
                queued = len(sequences)

                def queue() -> None:
                    self._check_open()
                    machine = self._machine
                    for payload, properties in batch:
                        sequences.append(
                            machine.send_message(destination, payload, properties=properties, dotnet_type=dotnet_type)
                        )
                    if machine.unacknowledged and self._all_acknowledged.is_set():
                        self._all_acknowledged = trio.Event()
                    self._wake_reader()  # the acks will need reading

                try:
                    if prepaid is None:
                        # Room for the payloads is waited for before the frames are built.
                        await self._send_within_budget(sum(len(payload) for payload, _ in batch), queue)
                    else:
                        try:
                            self._queue_prepaid(sum(prepaid[sent : sent + count]), queue)
                        finally:
                            sent += count  # their prepaid bytes are handed over, queued or not
                        await trio.lowlevel.cancel_shielded_checkpoint()
                        continue
                except BaseException:
                    unqueued = count - (len(sequences) - queued)
                    if window is not None and unqueued:
                        window.release(min(unqueued, window.in_flight))
                    raise
                sent += count
        finally:
            if prepaid is not None and sent < len(messages):
                self.budget.give_back(sum(prepaid[sent:]))
        return sequences

    async def wait_acknowledgement(self) -> None:
        """Wait for the peer's next ack or the connection's end. Always checkpoints."""
        await self._acknowledgement.wait()  # (set for good once ended: _on_finish)

    async def wait_acknowledged(self) -> None:
        """Wait until the peer has acknowledged every message we sent (at once without acks).

        Raises:
            the connection's end error, if it ended with messages unacknowledged.
        """
        await self._all_acknowledged.wait()
        if self._machine.unacknowledged:
            self._check_open()
        await self._wait_written(self._queued + self.config.max_write_buffer)

    async def subscribe(self, destination: str, filter: Filter | str | None = None) -> MessageStream:
        """(client) Send ``subscribe;destination=D[,filter=F]``; return the stream of its messages.

        Raises:
            LocalProtocolError: not a client, no pubsub, already subscribed,
                or a filter that does not parse.
            MicroMsg2Closed and the other end errors: the connection ended.

        Cancellation: the subscribe may still go out; the stream is then
        unsubscribed. Always checkpoints.
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        self._check_open()
        self._machine.subscribe(destination, filter)
        stream = self._streams[destination] = MessageStream(self, destination)
        try:
            await self._send_queued()
        except BaseException:
            stream.unsubscribe()
            raise
        return stream

    def _unsubscribe(self, destination: str) -> None:
        if self._machine.state is ConnectionState.OPEN and destination in self._machine.subscriptions:
            self._machine.unsubscribe(destination)
            self._take_output()

    async def complete(self, destination: str) -> None:
        """(server) Send ``completed;destination=D``: the stream ended.

        Raises:
            LocalProtocolError: not a server, no pubsub, or not subscribed.
            MicroMsg2Closed and the other end errors: the connection ended.
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        self._check_open()
        self._machine.complete(destination)
        await self._send_queued()

    async def fail_stream(self, destination: str, message: str) -> None:
        """(server) Send ERROR ``error;destination=D,message=M``; the connection stays.

        Raises as :meth:`complete`.
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        self._check_open()
        self._machine.fail_stream(destination, message)
        await self._send_queued()

    async def refuse_sends(self, destination: str, message: str) -> None:
        """(server) Send ERROR ``error;destination=D,for=send,message=M``: the SENDs to ``D`` were dropped.

        The connection stays, and so do the client's subscriptions (see
        ``Connection.refuse_sends``).

        Raises:
            LocalProtocolError: not a server.
            MicroMsg2Closed and the other end errors: the connection ended.
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        self._check_open()
        self._machine.refuse_sends(destination, message)
        await self._send_queued()

    def refused(self, destination: str) -> SendRefused | None:
        """(client) Why the server dropped what we sent to ``destination``, if it said so.

        The server's :meth:`refuse_sends` (:class:`SendsRefused`). The first
        few destinations are kept.
        """
        message = self._refused.get(destination)
        return None if message is None else SendRefused(destination, message)

    def is_subscribed(self, destination: str) -> bool:
        """(server) Whether ``destination`` is an open subscription of the client's."""
        return destination in self._machine.subscriptions

    async def send_error(self, message: str) -> None:
        """Send ERROR ``error;message=M`` and close, as the spec requires.

        Raises:
            MicroMsg2Closed and the other end errors: the connection had ended.
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        self._check_open()
        self._machine.send_error(message)
        await self._close_with(MicroMsg2Closed(f"connection closed by this side with an error: {message}", by_peer=False))

    # ---- receiving ------------------------------------------------------------------

    async def receive_send(self) -> MessageReceived:
        """(server) The next SEND from the client.

        Call :meth:`acknowledge` once it is handled (published, stored):
        that frees the client's window, and without acks it still counts
        against ``max_pending_messages`` until then.

        Raises:
            trio.EndOfChannel: the client closed the connection, nothing is left.
            PeerError, RemoteProtocolError, MicroMsg2ConnectionLost: it ended
                with an error.

        Cancellation: nothing is taken. Always checkpoints.
        """
        return await self._sends.take()

    async def receive_sends(self, max_count: int) -> list[MessageReceived]:
        """(server) The next SEND from the client, and those already read after it: at most ``max_count``.

        The batch form of :meth:`receive_send` for high rates: a client that
        writes many SENDs at once has them handled in one step and
        acknowledged with one ack (:meth:`acknowledge` of them all), instead
        of a step and an ack each. Waits only for the first.

        Raises:
            ValueError: ``max_count`` is not positive.
            and as :meth:`receive_send`.

        Cancellation: nothing is taken. Always checkpoints.
        """
        return await self._sends.take_batch(max_count)

    def acknowledge(self, count: int = 1) -> None:
        """(server) ``count`` more SENDs taken with :meth:`receive_send` are handled: ack them now.

        Never blocks (the ack is queued for the writer).

        Raises:
            LocalProtocolError: more than were taken and not acknowledged.
        """
        self._consumed(count)

    async def receive_command(self) -> Command:
        """(server) The next ``subscribe`` or ``unsubscribe`` from the client.

        Raises and cancellation as :meth:`receive_send`.
        """
        return await self._commands.take()
