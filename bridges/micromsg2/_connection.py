"""The MicroMsg2 connection state machine: bytes in, events out; calls in, bytes out.

A :class:`Connection` does no I/O. The I/O layer feeds it received bytes
(:meth:`Connection.receive_data`, ``b""`` for end of file), takes the
events (:meth:`Connection.events`), calls it to send, and writes whatever
:meth:`Connection.data_to_send` returns. It fits ``bridges.kit``'s
``BridgeConnection``: an adapter dispatches :class:`HandshakeCompleted`
(the handshake is over), :class:`MessageReceived` (an element),
:class:`Acknowledged` (``request(count)`` on the sending side) and the
pubsub events, and calls :meth:`Connection.acknowledge` as its application
consumes messages.

Whose fault
-----------
Local misuse raises ``LocalProtocolError`` at once and changes nothing. A
peer's violation (or exceeded limit) queues ``error;message=M``, moves to
``ERROR`` and is raised by :meth:`Connection.events` after the events parsed
before it; the I/O layer writes what is queued and disconnects. A peer's own
ERROR frame is an event (:class:`ConnectionFailed`, :class:`StreamFailed`).

Windows
-------
With ``ack`` or ``batch-ack``, both directions have the negotiated window:
we send at most that many unacknowledged (:attr:`Connection.send_credit`),
ack as the application consumes (:meth:`Connection.acknowledge`), and
refuse a peer that sends beyond it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from bridges.machine import ProtocolMachine, StateTable

from ._codec import DEFAULT_LIMITS, MIB, Decoder, Limits, encode_frame, encode_handshake
from ._errors import (
    LocalProtocolError,
    MalformedTextError,
    MessageTooLargeError,
    RemoteProtocolError,
    TooManyPendingMessagesError,
    WindowExceededError,
)
from ._events import (
    Acknowledged,
    Completed,
    ConnectionClosed,
    ConnectionFailed,
    Event,
    HandshakeCompleted,
    MessageReceived,
    SendsRefused,
    StreamFailed,
    Subscribe,
    Unsubscribe,
)
from ._extensions import ACK, BATCH_ACK, DOTNET, MAX_WINDOW, PUBSUB, ExtensionSpec
from ._filters import Filter, parse_filter
from ._frames import CommandFrame, ErrorFrame, ExtensionFrame, Frame, Handshake, MessageFrame
from ._handshake import HandshakeOptions, ack_window, check_final, client_final, negotiated_version, server_reply
from ._payloads import NamedArguments
from ._properties import FilterValue, make_properties
from ._reassembly import Reassembler
from ._state import CONNECTION_TRANSITIONS, ConnectionEvent, ConnectionState, Role
from ._windows import InboundWindow, OutboundWindow

__all__ = ["Connection", "SPLIT_SIZE", "SERVER_IDENTITY", "COMMAND_WORK_PER_CALL"]

#: The connection's state table (``_state``), refusing a step it has no row
#: for with this protocol's errors.
_STATES = StateTable(CONNECTION_TRANSITIONS, local_error=LocalProtocolError, remote_error=RemoteProtocolError)

#: Messages over this many bytes are sent as CONTINUED frames of this size.
SPLIT_SIZE = MIB
#: Our server's identity in the handshake (its version may follow: ``rstreams/1.2``).
SERVER_IDENTITY = "rstreams"
_DEAF_STATES = (ConnectionState.CLOSED, ConnectionState.ERROR)
_HANDSHAKING = (ConnectionState.AWAITING_HELLO, ConnectionState.AWAITING_REPLY, ConnectionState.AWAITING_FINAL)
# Characters of an error text we send (ERROR frames: the connection's, a
# stream's, a refusal of SENDs). Such texts often repeat what the peer sent
# (a filter, a name), so that a peer's 1 MiB filter never comes back whole.
_MAX_ERROR_TEXT = 1000
#: The most of the peer's commands one call of :meth:`Connection.events`
#: parses (a command 1, each filter condition 1 more; messages are bounded by
#: the reads): then it returns and ``events_pending`` is True. One read held
#: hundreds of filtered subscribes, parsed in one step (a bystander waited 237 ms).
COMMAND_WORK_PER_CALL = 64


class Connection(ProtocolMachine[Event, RemoteProtocolError]):
    """A sans-I/O MicroMsg2 connection, client or server.

    A client queues its handshake when created: send it
    (:meth:`data_to_send`) first.

    Args:
        role: ``Role.CLIENT`` (we connected) or ``Role.SERVER``.
        identity: our handshake identity (a server is ``rstreams``).
        required: extensions the peer must implement.
        optional: extensions we suggest.
        accept: (client) which server suggestions to take; None for all we
            implement.
        limits: what the peer may make us hold.

    Raises:
        ValueError: an extension we do not implement, or a bad batch-ack count.
        LocalProtocolError: an identity that is not ASCII of at most 255
            bytes, or an extension listed twice.
    """

    def __init__(
        self,
        role: Role,
        *,
        identity: str | None = None,
        required: Iterable[ExtensionSpec] = (),
        optional: Iterable[ExtensionSpec] = (),
        accept: Iterable[str] | None = None,
        limits: Limits = DEFAULT_LIMITS,
    ) -> None:
        if identity is None:
            identity = SERVER_IDENTITY if role is Role.SERVER else ""
        self.role = role
        self.options = HandshakeOptions(
            identity=identity,
            required=tuple(required),
            optional=tuple(optional),
            accept=None if accept is None else frozenset(accept),
            max_window=min(limits.max_pending_messages, MAX_WINDOW),
        )
        self.limits = limits
        self._state = ConnectionState.AWAITING_REPLY if role is Role.CLIENT else ConnectionState.AWAITING_HELLO
        self._decoder = Decoder(limits)
        super().__init__(RemoteProtocolError)
        self._eof = False
        self._reassembler = Reassembler(limits.max_message_size)
        self._sending = OutboundWindow(None)
        self._receiving = InboundWindow(None, limits.max_pending_messages)
        self._indexes: dict[str, int] = {}
        self._dotnet_type: str | None = None
        self._subscriptions: set[str] = set()
        self._command_work, self._events_pending = 0, False  # (COMMAND_WORK_PER_CALL)
        self.version: tuple[int, int] | None = None
        self.peer_identity: str | None = None
        self.extensions: tuple[ExtensionSpec, ...] = ()
        if role is Role.CLIENT:
            self._outbound += encode_handshake(self.options.hello())

    # ---- state ----------------------------------------------------------

    @property
    def state(self) -> ConnectionState:
        """Where the connection is in the handshake, open, or ended."""
        return self._state

    @property
    def window(self) -> int | None:
        """The negotiated ack window, or None (no acks)."""
        return self._sending.window

    @property
    def send_credit(self) -> int | None:
        """How many messages we may send now; None for unlimited (no acks)."""
        return self._sending.credit

    @property
    def unacknowledged(self) -> int:
        """How many of our messages await the peer's ack."""
        return self._sending.unacknowledged

    @property
    def pending_messages(self) -> int:
        """How many received messages the application has not acknowledged."""
        return self._receiving.pending

    @property
    def subscriptions(self) -> frozenset[str]:
        """Destinations subscribed on this connection (pubsub)."""
        return frozenset(self._subscriptions)

    def uses(self, name: str) -> bool:
        """Whether the extension ``name`` is used on this connection."""
        return name in self._indexes

    def _transition(self, event: ConnectionEvent) -> None:
        self._state = _STATES.after_local(self._state, event)

    def _receive_transition(self, event: ConnectionEvent, what: str) -> None:
        self._state = _STATES.after_received(self._state, event, what)

    # ---- receiving --------------------------------------------------------

    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        """Add bytes received from the peer; ``b""`` means end of file.

        :meth:`events` parses them. Bytes received after the connection
        ended are ignored.
        """
        if self._state in _DEAF_STATES:
            return
        if not data:
            self._eof = True
        elif not self._eof:
            self._decoder.feed(data)

    @property
    def buffered_input_size(self) -> int:
        """Bytes of the peer's input held here: received and not yet parsed,
        plus the CONTINUED frames of the message being joined."""
        return self._decoder.buffered + self._reassembler.size

    def fail_memory_budget(self, message: str) -> RemoteProtocolError:
        """The peer made us hold more than the connection's memory budget.

        Queues ``error;message=...`` (unless ended), moves to ``ERROR``, drops
        the unparsed and partly joined input, and returns the error to end
        with (a :class:`MessageTooLargeError`).
        """
        error = MessageTooLargeError(message)
        if self._state not in _DEAF_STATES:
            self._fail(error)
        self._decoder, self._reassembler = Decoder(self.limits), Reassembler(self.limits.max_message_size)
        return error

    def events(self) -> list[Event]:
        """Parse what was received; return the events, in order.

        Returns:
            ``HandshakeCompleted``, ``MessageReceived``, ``Acknowledged``, the
            pubsub events, a peer's ERROR (``StreamFailed``,
            ``ConnectionFailed``), and ``ConnectionClosed`` at end of file.

        Raises:
            RemoteProtocolError: the peer broke the protocol or a limit (after
                the events before it were returned); the ERROR frame is queued.
        """
        return self._take_events()

    @property
    def events_pending(self) -> bool:
        """The last :meth:`events` stopped at :data:`COMMAND_WORK_PER_CALL`: call again."""
        return self._events_pending

    def _parse(self, events: list[Event]) -> None:
        self._command_work, self._events_pending = 0, False
        while self._state not in _DEAF_STATES:
            if self._command_work >= COMMAND_WORK_PER_CALL:
                self._events_pending = True
                return
            if self._state in _HANDSHAKING:
                item = self._decoder.next_handshake()
                if item is None:
                    break
                if isinstance(item, ErrorFrame):
                    self._receive_error(item, events)
                else:
                    self._receive_handshake(item, events)
                continue
            frame = self._decoder.next_frame()
            if frame is None:
                break
            self._receive_frame(frame, events)
        if self._eof and self._state not in _DEAF_STATES:
            if self._decoder.buffered or self._reassembler.in_progress:
                raise RemoteProtocolError("the connection closed in the middle of a frame or message")
            self._receive_transition(ConnectionEvent.RECEIVE_EOF, "end of file")
            events.append(ConnectionClosed())

    def _fail(self, error: RemoteProtocolError) -> None:
        message = NamedArguments.of("error", {"message": error.message[:_MAX_ERROR_TEXT]})
        self._outbound += encode_frame(ErrorFrame(error=message))
        self._state = ConnectionState.ERROR

    def _receive_handshake(self, handshake: Handshake, events: list[Event]) -> None:
        state = self._state
        if state is ConnectionState.AWAITING_HELLO:
            reply = server_reply(self.options, handshake)
            self._receive_transition(ConnectionEvent.RECEIVE_HANDSHAKE, "handshake")
            self.peer_identity = handshake.identity
            self._outbound += encode_handshake(reply)
            return
        if state is ConnectionState.AWAITING_FINAL:
            version, extensions = check_final(self.options, handshake)
        else:
            final = client_final(self.options, handshake)
            version, extensions = negotiated_version(handshake), final.extensions
            self._outbound += encode_handshake(final)
        self._receive_transition(ConnectionEvent.RECEIVE_HANDSHAKE, "handshake")
        self._open(version, extensions, handshake.identity, events)

    def _open(
        self, version: tuple[int, int], extensions: tuple[ExtensionSpec, ...], peer: str, events: list[Event]
    ) -> None:
        self.version, self.extensions, self.peer_identity = version, extensions, peer
        self._indexes = {extension.name: index for index, extension in enumerate(extensions, start=1)}
        window = ack_window(extensions)
        self._sending = OutboundWindow(window)
        self._receiving = InboundWindow(window, self.limits.max_pending_messages)
        events.append(HandshakeCompleted(peer_identity=peer, version=version, extensions=extensions, window=window))

    def _receive_error(self, frame: ErrorFrame, events: list[Event]) -> None:
        error = frame.error
        if error.name != "error":
            raise RemoteProtocolError(f"an ERROR frame named {error.name!r}, not 'error'")
        message = error.get("message") or ""
        destination = error.get("destination")
        if destination is None:
            self._receive_transition(ConnectionEvent.RECEIVE_ERROR, "ERROR frame")
            events.append(ConnectionFailed(message=message))
            return
        self._receive_transition(ConnectionEvent.RECEIVE_FRAME, "stream ERROR frame")
        if error.get("for") == "send":
            # (ours: the SENDs to D were dropped; no stream of ours ends)
            events.append(SendsRefused(destination=destination, message=message))
            return
        self._subscriptions.discard(destination)
        events.append(StreamFailed(destination=destination, message=message))

    def _receive_frame(self, frame: Frame, events: list[Event]) -> None:
        if isinstance(frame, ErrorFrame):
            self._receive_error(frame, events)
            return
        self._receive_transition(ConnectionEvent.RECEIVE_FRAME, "frame")
        if isinstance(frame, MessageFrame):
            self._receive_message(frame, events)
        elif isinstance(frame, ExtensionFrame):
            self._receive_extension(frame, events)
        else:
            self._receive_command(frame.command, events)

    def _receive_message(self, frame: MessageFrame, events: list[Event]) -> None:
        receiving = self._receiving
        if not self._reassembler.in_progress:
            if frame.sequence != receiving.expected_sequence:
                raise RemoteProtocolError(
                    f"sequence number {frame.sequence} where {receiving.expected_sequence} was due"
                )
            if receiving.window_full:
                raise WindowExceededError(f"a message beyond the ack window of {receiving.window}")
            if receiving.limit_reached:
                raise TooManyPendingMessagesError(f"more than {receiving.max_pending} messages pending")
        whole = self._reassembler.add(frame)
        if whole is None:
            return
        receiving.received(whole.sequence)
        events.append(
            MessageReceived(
                sequence=whole.sequence,
                destination=whole.destination,
                properties=whole.properties,
                payload=whole.payload,
                dotnet_type=self._dotnet_type,
            )
        )

    def _receive_extension(self, frame: ExtensionFrame, events: list[Event]) -> None:
        if not 1 <= frame.extension_id <= len(self.extensions):
            raise RemoteProtocolError(f"EXTENSION frame for index {frame.extension_id}, which is not negotiated")
        name = self.extensions[frame.extension_id - 1].name
        if name in (ACK, BATCH_ACK):
            if len(frame.payload) != 2:
                raise RemoteProtocolError(f"a {name} frame carries 2 bytes, not {len(frame.payload)}")
            sequence = int.from_bytes(frame.payload, "big")
            try:
                count = self._sending.acknowledge(sequence)
            except ValueError as exc:
                raise RemoteProtocolError(str(exc)) from None
            events.append(Acknowledged(sequence=sequence, count=count))
        elif name == DOTNET:
            if self._reassembler.in_progress:
                raise RemoteProtocolError("a dotnet frame between the frames of one message")
            try:
                type_name = frame.payload.decode("utf-8")
            except UnicodeDecodeError:
                raise RemoteProtocolError("a dotnet type name is not UTF-8") from None
            if not type_name:
                raise RemoteProtocolError("an empty dotnet type name")
            self._dotnet_type = type_name
        else:
            raise RemoteProtocolError(f"extension {name!r} defines no EXTENSION frames")

    def _receive_command(self, command: NamedArguments, events: list[Event]) -> None:
        if not self.uses(PUBSUB):
            raise RemoteProtocolError(f"command {command.name!r} without the pubsub extension")
        expected = ("subscribe", "unsubscribe") if self.role is Role.SERVER else ("completed",)
        if command.name not in expected:
            raise RemoteProtocolError(f"unexpected command {command.name!r} from the {_peer(self.role)}")
        destination = command.get("destination")
        if destination is None:
            raise RemoteProtocolError(f"command {command.name!r} without a destination")
        if len(destination.encode("utf-8", "surrogatepass")) > 255:
            raise RemoteProtocolError("a destination is at most 255 bytes of UTF-8")
        self._command_work += 1
        if command.name == "completed":
            self._subscriptions.discard(destination)
            events.append(Completed(destination=destination))
        elif command.name == "unsubscribe":
            if destination in self._subscriptions:  # else it already ended: nothing to cancel
                self._subscriptions.remove(destination)
                events.append(Unsubscribe(destination=destination))
        else:
            if destination in self._subscriptions:
                raise RemoteProtocolError(f"destination {destination!r} is already subscribed")
            filter_text, limits = command.get("filter"), self.limits
            self._command_work += 0 if filter_text is None else min(filter_text.count(";") + 1, limits.max_filter_conditions)
            try:  # (within the limits, checked before any condition is parsed)
                parsed = None if filter_text is None else parse_filter(
                    filter_text, max_length=limits.max_filter_length, max_conditions=limits.max_filter_conditions)  # fmt: skip
            except MalformedTextError as exc:
                # A bad filter, or one over the limits, fails that one subscription; the connection stays.
                self._queue(_stream_error(destination, exc.message))
                return
            self._subscriptions.add(destination)
            events.append(Subscribe(destination=destination, filter=parsed))

    # ---- sending ------------------------------------------------------------

    def _queue(self, frame: Frame) -> None:
        self._outbound += encode_frame(frame)

    def _check_open(self) -> None:
        if self._state is not ConnectionState.OPEN:
            raise LocalProtocolError(f"cannot send a frame in state {self._state.name}")

    def _check_command(self, role: Role) -> None:
        self._check_open()
        if self.role is not role:
            raise LocalProtocolError(f"only the {role.value} sends this command")
        if not self.uses(PUBSUB):
            raise LocalProtocolError("pubsub commands need the pubsub extension")

    def send_message(
        self,
        destination: str,
        payload: bytes,
        *,
        properties: Mapping[str, FilterValue] | Iterable[tuple[str, FilterValue]] = (),
        dotnet_type: str | None = None,
    ) -> int:
        """Queue a MESSAGE (server) or SEND (client); return its sequence number.

        A payload over 1 MiB goes as CONTINUED frames of 1 MiB; it counts as
        one message for the window. With ``dotnet_type``, a dotnet frame
        carrying it goes first.

        Raises:
            LocalProtocolError: not open, the ack window is full
                (:attr:`send_credit` is 0), a bad destination or property, or
                ``dotnet_type`` without the dotnet extension.
        """
        self._check_open()
        try:
            checked = make_properties(properties)
        except MalformedTextError as exc:
            raise LocalProtocolError(exc.message) from None
        # The first frame is built (and so checked, payload included) before
        # the sequence number is taken: a message refused here leaves no gap.
        size, sending = len(payload), self._sending
        first = MessageFrame(sequence=sending.next_sequence, destination=destination, properties=checked,
                             payload=payload[:SPLIT_SIZE], continued=size > SPLIT_SIZE)  # fmt: skip
        if dotnet_type is not None and (not self.uses(DOTNET) or not dotnet_type):
            raise LocalProtocolError("a dotnet type needs the dotnet extension and a non-empty name")
        if sending.credit == 0:
            raise LocalProtocolError(f"the ack window of {sending.window} is full")
        sequence = sending.take_sequence()
        if dotnet_type is not None:
            self._queue(ExtensionFrame(extension_id=self._indexes[DOTNET], payload=dotnet_type.encode("utf-8")))
        self._queue(first)
        for start in range(SPLIT_SIZE, size, SPLIT_SIZE):  # the CONTINUED frames of a large payload
            chunk, continued = payload[start : start + SPLIT_SIZE], start + SPLIT_SIZE < size
            self._queue(MessageFrame(sequence=sequence, destination=destination, properties=checked,
                                     payload=chunk, continued=continued))  # fmt: skip
        return sequence

    def acknowledge(self, count: int = 1) -> None:
        """The application consumed ``count`` more received messages.

        When acks are used, queues one ack frame naming the last of them
        (``02 ID 02 SS SS``), which frees the peer's window; otherwise only
        counts them.

        Raises:
            LocalProtocolError: not open, or fewer than ``count`` messages
                are pending.
        """
        self._check_open()
        try:
            sequence = self._receiving.consume(count)
        except ValueError as exc:
            raise LocalProtocolError(str(exc)) from None
        index = self._indexes.get(BATCH_ACK, self._indexes.get(ACK))
        if index is not None:
            self._queue(ExtensionFrame(extension_id=index, payload=sequence.to_bytes(2, "big")))

    def subscribe(self, destination: str, filter: Filter | str | None = None) -> None:
        """(client) Queue ``subscribe;destination=D[,filter=F]``.

        Raises:
            LocalProtocolError: not open, not a client, no pubsub, already
                subscribed to ``destination``, or a filter that does not parse.
        """
        self._check_command(Role.CLIENT)
        if destination in self._subscriptions:
            raise LocalProtocolError(f"already subscribed to {destination!r}")
        arguments = {"destination": destination}
        if filter is not None:
            try:
                arguments["filter"] = str(parse_filter(filter) if isinstance(filter, str) else filter)
            except MalformedTextError as exc:
                raise LocalProtocolError(exc.message) from None
        self._queue(CommandFrame(command=NamedArguments.of("subscribe", arguments)))
        self._subscriptions.add(destination)

    def unsubscribe(self, destination: str) -> None:
        """(client) Queue ``unsubscribe;destination=D``.

        Raises:
            LocalProtocolError: not open, not a client, no pubsub, or not
                subscribed to ``destination``.
        """
        self._check_command(Role.CLIENT)
        if destination not in self._subscriptions:
            raise LocalProtocolError(f"not subscribed to {destination!r}")
        self._queue(CommandFrame(command=NamedArguments.of("unsubscribe", {"destination": destination})))
        self._subscriptions.remove(destination)

    def complete(self, destination: str) -> None:
        """(server) Queue ``completed;destination=D``: the stream ended.

        Raises:
            LocalProtocolError: not open, not a server, no pubsub, or
                ``destination`` is not subscribed.
        """
        self._check_command(Role.SERVER)
        if destination not in self._subscriptions:
            raise LocalProtocolError(f"{destination!r} is not subscribed")
        self._queue(CommandFrame(command=NamedArguments.of("completed", {"destination": destination})))
        self._subscriptions.remove(destination)

    def fail_stream(self, destination: str, message: str) -> None:
        """(server) Queue ERROR ``error;destination=D,message=M``: that stream failed.

        Raises:
            LocalProtocolError: not open, not a server, no pubsub, or
                ``destination`` is not subscribed.
        """
        self._check_command(Role.SERVER)
        if destination not in self._subscriptions:
            raise LocalProtocolError(f"{destination!r} is not subscribed")
        self._queue(_stream_error(destination, message))
        self._subscriptions.remove(destination)

    def refuse_sends(self, destination: str, message: str) -> None:
        """(server) Queue ERROR ``error;destination=D,for=send,message=M``: the SENDs to ``D`` were dropped.

        *Ours:* MicroMsg2 cannot refuse one message (its acks are the window);
        ``for=send`` sets this apart from a stream's failure, so no
        subscription to ``D`` ends (the client's machine reports
        :class:`SendsRefused`). The connection stays.

        Raises:
            LocalProtocolError: not open, or not a server.
        """
        self._check_open()
        if self.role is not Role.SERVER:
            raise LocalProtocolError("only the server refuses SENDs")
        arguments = {"destination": destination, "for": "send", "message": message[:_MAX_ERROR_TEXT]}
        self._queue(ErrorFrame(error=NamedArguments.of("error", arguments)))

    def send_error(self, message: str) -> None:
        """Queue ERROR ``error;message=M``; disconnect once it is written.

        Raises:
            LocalProtocolError: the connection has already ended.
        """
        self._transition(ConnectionEvent.SEND_ERROR)
        self._queue(ErrorFrame(error=NamedArguments.of("error", {"message": message})))

    def close(self) -> None:
        """We are closing the transport without an error (``CLOSED``).

        Raises:
            LocalProtocolError: the connection has already ended.
        """
        self._transition(ConnectionEvent.CLOSE)

    def __repr__(self) -> str:
        return (
            f"<micromsg2.Connection {self.role.value} {self._state.name}: window={self.window},"
            f" {self.unacknowledged} unacknowledged, {self.pending_messages} pending>"
        )


def _peer(role: Role) -> str:
    return "client" if role is Role.SERVER else "server"


def _stream_error(destination: str, message: str) -> ErrorFrame:
    arguments = {"destination": destination, "message": message[:_MAX_ERROR_TEXT]}
    return ErrorFrame(error=NamedArguments.of("error", arguments))
