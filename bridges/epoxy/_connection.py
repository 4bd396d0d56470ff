"""The Epoxy connection: bytes in, events out; calls in, bytes out.

A :class:`Connection` does no I/O. The I/O layer feeds it what it receives
(:meth:`Connection.receive_data`, ``b""`` for end of file), takes the
events (:meth:`Connection.events`), calls it to send, and writes whatever
:meth:`Connection.data_to_send` returns. Timers belong to the I/O layer: it
calls :meth:`Connection.handshake_timed_out` when it gives up waiting.

Whose fault
-----------
Local misuse (a message before the handshake, a response to no pending
request, anything after an Error frame) raises ``LocalProtocolError`` and
changes nothing. A peer's violation queues the Error frame the spec
prescribes, moves the machine to ``ERROR`` and surfaces as
``RemoteProtocolError`` from :meth:`Connection.events`, after the events
parsed before it. The codes:

* ``PROTOCOL_VIOLATED``: an unknown framelet, framelets out of order, an
  empty framelet or frame, a Message frame before the handshake is over, a
  second Config frame, a request or event carrying ``ErrorData``, end of
  file in the middle of a frame;
* ``MALFORMED_DATA``: ``EpoxyHeaders`` that do not decode (including a
  missing ``message_type``, which is required, and headers that break a
  Bond limit, such as skipping more than ``max_skipped_items`` values);
* ``NOT_SUPPORTED``: a message type other than request, response, event
  (Bond's C# does the same);
* ``LIMIT_EXCEEDED``: a frame over a limit (headers over
  ``max_headers_size`` included), or more pending requests than
  ``max_pending_requests``;
* ``CLIENT_BAD_HANDSHAKE`` / ``SERVER_BAD_HANDSHAKE``: a Config frame whose
  ``EpoxyConfig`` does not decode, received by the server / the client;
* ``BAD_CONVERSATION_ID``: a request or event with an id of our parity, a
  response with an id of the peer's parity, or a request reusing the id of
  one still pending.

We send ``CONVERSATION_IDS_EXHAUSTED`` when our ids run out,
``CONNECTION_REJECTED`` (or what the application chooses) from
:meth:`Connection.reject`, and ``TIMEOUT`` from
:meth:`Connection.handshake_timed_out`. An Error frame from the peer is
not an exception but a :class:`~bridges.epoxy.ProtocolErrorReceived` event;
one that does not decode is reported as ``ERROR_IN_ERROR`` and answered
with nothing (as Bond's C# does: never an error about an error).

Conversation ids
----------------
Ours are odd from 1 for a client, even from 2 for a server, stepping by 2,
up to ``max_conversation_id`` (default 2**64 - 1). We remember our pending
requests until their response, and the peer's until we respond. A response
with an id of our parity that is not pending (we never sent it, or already
had its response) is dropped, as the spec allows, and counted in
:attr:`Connection.dropped_responses`.
"""

from __future__ import annotations

from bridges.machine import ProtocolMachine, StateTable

from . import bond
from ._errors import ConversationIdsExhaustedError, LocalProtocolError, RemoteProtocolError
from ._events import (
    MAX_CONVERSATION_ID,
    ConfigReceived,
    ConnectionClosed,
    EpoxyEvent,
    Event,
    ProtocolErrorReceived,
    Request,
    Response,
    is_conversation_id,
)
from ._frames import (
    DEFAULT_LIMITS,
    EpoxyLimits,
    Frame,
    FrameDecoder,
    FrameletType,
    config_frame,
    error_frame,
    message_frame,
)
from ._state import HANDSHAKE_STATES, LISTENING_STATES, TRANSITIONS, ConnectionState, Role, StateInput
from ._structs import EpoxyConfig, EpoxyHeaders, EpoxyMessageType, Error, ProtocolError, ProtocolErrorCode

__all__ = ["Connection"]

_FAST = bond.Protocol.FAST
_Code = ProtocolErrorCode


def _remote(message: str, code: ProtocolErrorCode) -> RemoteProtocolError:
    return RemoteProtocolError(message, error_code=code)


def _violation(message: str) -> RemoteProtocolError:
    return _remote(message, ProtocolErrorCode.PROTOCOL_VIOLATED)


#: The connection's state table (``_state``): a step it has no row for is
#: this program's LocalProtocolError, or the peer's violation of the protocol.
_STATES = StateTable(TRANSITIONS, local_error=LocalProtocolError, remote_error=_violation)


class Connection(ProtocolMachine[EpoxyEvent, RemoteProtocolError]):
    """A sans-I/O Epoxy connection, for either end.

    A client queues its Config frame on creation: send it
    (:meth:`data_to_send`) first.

    Args:
        role: :attr:`Role.CLIENT` or :attr:`Role.SERVER`.
        limits: what the peer may send.
        config: the ``EpoxyConfig`` we send (the client's proposal, or the
            server's answer); empty by default, the only one defined.
        max_conversation_id: the largest id we use before declaring our ids
            exhausted. Default 2**64 - 1; lower it to test exhaustion.
    """

    def __init__(
        self,
        role: Role,
        *,
        limits: EpoxyLimits = DEFAULT_LIMITS,
        config: EpoxyConfig | None = None,
        max_conversation_id: int = MAX_CONVERSATION_ID,
    ) -> None:
        if not isinstance(role, Role):
            raise TypeError(f"role must be a Role, got {role!r}")
        if not is_conversation_id(max_conversation_id):
            raise ValueError(f"max_conversation_id must be a uint64, got {max_conversation_id!r}")
        self.role = role
        self.limits = limits
        self.max_conversation_id = max_conversation_id
        self._config = config if config is not None else EpoxyConfig()
        self._decoder = FrameDecoder(limits=limits)
        super().__init__(RemoteProtocolError)
        self._eof = False
        self._parity = 1 if role is Role.CLIENT else 0
        self._next_id = 1 if role is Role.CLIENT else 2
        self._our_requests: set[int] = set()
        self._peer_requests: set[int] = set()
        #: Responses dropped because no request of ours was pending with their id.
        self.dropped_responses = 0
        #: The peer's EpoxyConfig, once received.
        self.peer_config: EpoxyConfig | None = None
        if role is Role.CLIENT:
            self._state = ConnectionState.CLIENT_AWAITING_CONFIG
            self._outbound += config_frame(self._config).encode()
        else:
            self._state = ConnectionState.SERVER_AWAITING_CONFIG

    # ---- state ----------------------------------------------------------------

    @property
    def state(self) -> ConnectionState:
        """Where the connection is (see ``_state.py``)."""
        return self._state

    @property
    def pending_requests(self) -> frozenset[int]:
        """Ids of our requests that have no response yet."""
        return frozenset(self._our_requests)

    @property
    def peer_pending_requests(self) -> frozenset[int]:
        """Ids of the peer's requests we have not answered yet."""
        return frozenset(self._peer_requests)

    @property
    def next_conversation_id(self) -> int:
        """The id our next request or event will use."""
        return self._next_id

    def _local_transition(self, event: StateInput) -> ConnectionState:
        # The next state, or LocalProtocolError; the caller commits it once
        # nothing else can fail.
        return _STATES.after_local(self._state, event)

    def _remote_transition(self, event: StateInput, what: str) -> ConnectionState:
        return _STATES.after_received(self._state, event, what)

    # ---- receiving --------------------------------------------------------------

    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        """Add bytes received from the peer; ``b""`` means end of file.

        :meth:`events` parses them. Bytes that arrive once the connection no
        longer listens (after end of file, ``REMOTE_CLOSED``, ``CLOSED``,
        ``ERROR``) are ignored.
        """
        if self._state not in LISTENING_STATES or self._eof:
            return
        if not data:
            self._eof = True
        else:
            self._decoder.feed(data)

    def events(self) -> list[EpoxyEvent]:
        """Parse what was received; return the events, in order.

        Returns:
            :class:`ConfigReceived`, :class:`Request`, :class:`Response`,
            :class:`Event`, :class:`ProtocolErrorReceived` and, at end of
            file, :class:`ConnectionClosed`.

        Raises:
            RemoteProtocolError: the peer broke the protocol (raised after the
                events before the offending frame have been returned). The
                Error frame is queued and the state is ``ERROR``.
        """
        return self._take_events()

    def _parse(self, events: list[EpoxyEvent]) -> None:
        while self._state in LISTENING_STATES:
            frame = self._decoder.next_frame()
            if frame is None:
                break
            event = self._dispatch(frame)
            if event is not None:
                events.append(event)
        if self._eof and self._state in LISTENING_STATES:
            self._decoder.check_eof()
            self._state = self._remote_transition(StateInput.RECEIVE_EOF, "end of file")
            events.append(ConnectionClosed())

    @property
    def buffered_input_size(self) -> int:
        """Bytes received and not yet parsed into a frame (a partial frame)."""
        return self._decoder.held

    def fail_memory_budget(self, message: str) -> RemoteProtocolError:
        """The peer made us hold more than the connection's memory budget.

        Queues an Error frame ``LIMIT_EXCEEDED`` (as for a framelet over its
        size limit) whose ``details`` carry ``message``, moves to ``ERROR``,
        drops the unparsed input, and returns the error to end with. Nothing
        is queued once the connection can no longer send.
        """
        error = _remote(message, _Code.LIMIT_EXCEEDED)
        if self._state in LISTENING_STATES:
            if self._state is not ConnectionState.LOCAL_CLOSED:
                details = Error(error_code=_Code.LIMIT_EXCEEDED, message=message[:1000])
                protocol_error = ProtocolError(error_code=_Code.LIMIT_EXCEEDED, details=bond.Bonded(details))
                self._outbound += error_frame(protocol_error).encode()
            self._state = ConnectionState.ERROR
        self._decoder = FrameDecoder(limits=self.limits)
        return error

    def _fail(self, error: RemoteProtocolError) -> None:
        if self._state is not ConnectionState.LOCAL_CLOSED:  # else we can no longer send
            self._outbound += error_frame(ProtocolError(error_code=error.error_code)).encode()
        self._state = ConnectionState.ERROR

    def _dispatch(self, frame: Frame) -> EpoxyEvent | None:
        # The decoder has checked the order rules: the first framelet says it all.
        first = frame.framelets[0]
        if first.type == FrameletType.EPOXY_CONFIG:
            return self._receive_config(first.content)
        if first.type == FrameletType.PROTOCOL_ERROR:
            return self._receive_protocol_error(first.content)
        return self._receive_message(frame)

    def _receive_config(self, content: bytes) -> ConfigReceived:
        next_state = self._remote_transition(StateInput.RECEIVE_CONFIG, "Config frame")
        try:
            config = bond.deserialize(EpoxyConfig, content, _FAST, limits=self.limits.bond)
        except bond.BondDecodeError as exc:
            code = _Code.CLIENT_BAD_HANDSHAKE if self.role is Role.SERVER else _Code.SERVER_BAD_HANDSHAKE
            raise _remote(f"the peer's EpoxyConfig does not decode: {exc}", code) from None
        self._state = next_state
        self.peer_config = config
        return ConfigReceived(config=config)

    def _receive_protocol_error(self, content: bytes) -> ProtocolErrorReceived:
        details: Error | None = None
        try:
            error = bond.deserialize(ProtocolError, content, _FAST, limits=self.limits.bond)
        except bond.BondDecodeError:
            code: int = _Code.ERROR_IN_ERROR
        else:
            code = error.error_code
            if error.details is not None:
                try:
                    details = error.details.value
                except bond.BondDecodeError:
                    details = None  # the code is what matters; the details are a courtesy
        self._state = self._remote_transition(StateInput.RECEIVE_PROTOCOL_ERROR, "Error frame")
        return ProtocolErrorReceived(error_code=code, details=details)

    def _receive_message(self, frame: Frame) -> EpoxyEvent | None:
        next_state = self._remote_transition(StateInput.RECEIVE_MESSAGE, "Message frame")
        try:
            headers = bond.deserialize(EpoxyHeaders, frame.framelets[0].content, _FAST, limits=self.limits.bond)
        except bond.BondDecodeError as exc:
            raise _remote(f"EpoxyHeaders do not decode: {exc}", _Code.MALFORMED_DATA) from None
        last = frame.framelets[-1]
        is_error = last.type == FrameletType.ERROR_DATA
        layer_data = frame.get(FrameletType.LAYER_DATA)
        conversation_id = headers.conversation_id
        message_type = headers.message_type
        ours = conversation_id % 2 == self._parity
        event: EpoxyEvent | None
        if message_type == EpoxyMessageType.RESPONSE:
            if not ours:
                raise _remote(
                    f"response to conversation {conversation_id}, an id of the peer's parity",
                    _Code.BAD_CONVERSATION_ID,
                )
            if conversation_id in self._our_requests:
                self._our_requests.remove(conversation_id)
                event = Response(
                    conversation_id=conversation_id,
                    payload=last.content,
                    is_error=is_error,
                    service_name=headers.service_name,
                    method_name=headers.method_name,
                    layer_data=layer_data,
                )
            else:
                self.dropped_responses += 1  # "may be dropped"
                event = None
        elif message_type in (EpoxyMessageType.REQUEST, EpoxyMessageType.EVENT):
            name = "request" if message_type == EpoxyMessageType.REQUEST else "event"
            if is_error:
                raise _remote(f"{name} {conversation_id} carries ErrorData", _Code.PROTOCOL_VIOLATED)
            if ours:
                raise _remote(f"{name} with conversation id {conversation_id}, of our parity", _Code.BAD_CONVERSATION_ID)
            if message_type == EpoxyMessageType.EVENT:
                event = Event(
                    conversation_id=conversation_id,
                    service_name=headers.service_name,
                    method_name=headers.method_name,
                    payload=last.content,
                    layer_data=layer_data,
                )
            else:
                if conversation_id in self._peer_requests:
                    raise _remote(f"request id {conversation_id} is already pending", _Code.BAD_CONVERSATION_ID)
                if len(self._peer_requests) >= self.limits.max_pending_requests:
                    raise _remote(
                        f"more than {self.limits.max_pending_requests} requests pending", _Code.LIMIT_EXCEEDED
                    )
                self._peer_requests.add(conversation_id)
                event = Request(
                    conversation_id=conversation_id,
                    service_name=headers.service_name,
                    method_name=headers.method_name,
                    payload=last.content,
                    layer_data=layer_data,
                )
        else:
            raise _remote(f"unknown message type {int(message_type)}", _Code.NOT_SUPPORTED)
        self._state = next_state
        return event

    # ---- the handshake ----------------------------------------------------------------

    def accept(self, config: EpoxyConfig | None = None) -> None:
        """Server: accept the client's config; queue ours. The connection is then open.

        Args:
            config: the config to answer with (default: the constructor's).

        Raises:
            LocalProtocolError: not a server, or no client config to accept.
        """
        if self.role is not Role.SERVER:
            raise LocalProtocolError("only a server accepts a connection")
        next_state = self._local_transition(StateInput.SEND_ACCEPT)
        self._outbound += config_frame(config if config is not None else self._config).encode()
        self._state = next_state

    def reject(self, error_code: int = ProtocolErrorCode.CONNECTION_REJECTED, details: Error | None = None) -> None:
        """Server: refuse the connection with an Error frame; close once it is written.

        Args:
            error_code: ``CONNECTION_REJECTED`` (the application said no) or
                ``CLIENT_BAD_HANDSHAKE`` (the client's config is unacceptable).
            details: an optional ``bond.comm.Error`` for the client.

        Raises:
            LocalProtocolError: not a server, or the handshake is over.
        """
        if self.role is not Role.SERVER:
            raise LocalProtocolError("only a server rejects a connection")
        if self._state not in (ConnectionState.SERVER_AWAITING_CONFIG, ConnectionState.SERVER_DECIDING):
            raise LocalProtocolError(f"cannot reject in state {self._state.name}")
        self.send_protocol_error(error_code, details)

    def handshake_timed_out(self) -> None:
        """The I/O layer gave up on the handshake: queue ``TIMEOUT``; the state is ``ERROR``.

        Raises:
            LocalProtocolError: the handshake is over.
        """
        if self._state not in HANDSHAKE_STATES:
            raise LocalProtocolError(f"no handshake in progress in state {self._state.name}")
        self.send_protocol_error(ProtocolErrorCode.TIMEOUT)

    # ---- sending -----------------------------------------------------------------------

    @staticmethod
    def _marshalled(value: bytes | bytearray | memoryview | bond.Struct, what: str) -> bytes:
        if isinstance(value, bond.Struct):
            try:
                return bond.marshal(value)
            except bond.BondEncodeError as exc:
                raise LocalProtocolError(f"cannot marshal the {what}: {exc}") from None
        if not isinstance(value, (bytes, bytearray, memoryview)):
            raise LocalProtocolError(f"the {what} must be bytes or a bond.Struct, not {type(value).__name__}")
        content = bytes(value)
        if not content:
            raise LocalProtocolError(f"the {what} is empty (a framelet cannot be)")
        return content

    def _message(
        self,
        headers: EpoxyHeaders,
        payload: bytes | bytearray | memoryview | bond.Struct,
        layer_data: bytes | bytearray | memoryview | bond.Struct | None,
        is_error: bool = False,
    ) -> bytes:
        content = self._marshalled(payload, "error" if is_error else "payload")
        layer = None if layer_data is None else self._marshalled(layer_data, "layer data")
        try:
            return message_frame(headers, content, layer_data=layer, is_error=is_error).encode()
        except bond.BondEncodeError as exc:
            raise LocalProtocolError(f"cannot encode the headers: {exc}") from None

    def _new_conversation(self) -> int:
        conversation_id = self._next_id
        if conversation_id > self.max_conversation_id:
            self.send_protocol_error(ProtocolErrorCode.CONVERSATION_IDS_EXHAUSTED)
            raise ConversationIdsExhaustedError(
                f"conversation ids exhausted: {conversation_id} is above {self.max_conversation_id}"
            )
        return conversation_id

    @staticmethod
    def _check_names(service_name: object, method_name: object) -> None:
        if not isinstance(service_name, str) or not isinstance(method_name, str):
            raise LocalProtocolError("service_name and method_name must be str")

    def send_request(
        self,
        service_name: str,
        method_name: str,
        payload: bytes | bytearray | memoryview | bond.Struct,
        *,
        layer_data: bytes | bytearray | memoryview | bond.Struct | None = None,
    ) -> int:
        """Queue a request; return its conversation id.

        Args:
            service_name: the fully qualified service name (``examples.calc.Calc``).
            method_name: the method (``Calculate``).
            payload: the request struct (marshalled here, Compact Binary v1),
                or bytes already marshalled.
            layer_data: optional layer data, the same way.

        Raises:
            LocalProtocolError: the connection is not open, or the payload is
                empty or does not encode.
            ConversationIdsExhaustedError: our ids ran out; the Error frame is
                queued and the state is ``ERROR``.
        """
        conversation_id = self._start_conversation(EpoxyMessageType.REQUEST, service_name, method_name, payload, layer_data)
        self._our_requests.add(conversation_id)
        return conversation_id

    def send_event(
        self,
        service_name: str,
        method_name: str,
        payload: bytes | bytearray | memoryview | bond.Struct,
        *,
        layer_data: bytes | bytearray | memoryview | bond.Struct | None = None,
    ) -> int:
        """Queue an event (no response will come); return its conversation id.

        Raises:
            LocalProtocolError: as :meth:`send_request`.
            ConversationIdsExhaustedError: as :meth:`send_request`.
        """
        return self._start_conversation(EpoxyMessageType.EVENT, service_name, method_name, payload, layer_data)

    def _start_conversation(
        self,
        message_type: EpoxyMessageType,
        service_name: str,
        method_name: str,
        payload: bytes | bytearray | memoryview | bond.Struct,
        layer_data: bytes | bytearray | memoryview | bond.Struct | None,
    ) -> int:
        # A request or an event: a new conversation id, committed (with the
        # state) only once the message has encoded.
        next_state = self._local_transition(StateInput.SEND_MESSAGE)
        self._check_names(service_name, method_name)
        conversation_id = self._new_conversation()
        headers = EpoxyHeaders(
            conversation_id=conversation_id,
            message_type=message_type,
            service_name=service_name,
            method_name=method_name,
        )
        self._outbound += self._message(headers, payload, layer_data)
        self._state = next_state
        self._next_id = conversation_id + 2
        return conversation_id

    def _respond(
        self,
        conversation_id: int,
        payload: bytes | bytearray | memoryview | bond.Struct,
        layer_data: bytes | bytearray | memoryview | bond.Struct | None,
        is_error: bool,
    ) -> None:
        if conversation_id not in self._peer_requests:
            raise LocalProtocolError(f"no request of the peer is pending with id {conversation_id!r}")
        next_state = self._local_transition(StateInput.SEND_MESSAGE)
        headers = EpoxyHeaders(conversation_id=conversation_id, message_type=EpoxyMessageType.RESPONSE)
        self._outbound += self._message(headers, payload, layer_data, is_error)
        self._state = next_state
        self._peer_requests.remove(conversation_id)

    def send_response(
        self,
        conversation_id: int,
        payload: bytes | bytearray | memoryview | bond.Struct,
        *,
        layer_data: bytes | bytearray | memoryview | bond.Struct | None = None,
    ) -> None:
        """Queue the response to the peer's request ``conversation_id``.

        Raises:
            LocalProtocolError: no such request is pending, the connection
                cannot send, or the payload is empty or does not encode.
        """
        self._respond(conversation_id, payload, layer_data, False)

    def send_error_response(
        self,
        conversation_id: int,
        error: Error | bytes | bytearray | memoryview,
        *,
        layer_data: bytes | bytearray | memoryview | bond.Struct | None = None,
    ) -> None:
        """Queue an error response (``ErrorData``) to the peer's request ``conversation_id``.

        Args:
            error: a ``bond.comm.Error`` (or a struct derived from it), or
                bytes already marshalled.

        Raises:
            LocalProtocolError: as :meth:`send_response`.
        """
        if isinstance(error, bond.Struct) and not isinstance(error, Error):
            raise LocalProtocolError(f"an error response carries a bond.comm.Error, not {type(error).__name__}")
        self._respond(conversation_id, error, layer_data, True)

    def send_protocol_error(self, error_code: int, details: Error | None = None) -> None:
        """Queue an Error frame; the state is ``ERROR``: close once it is written.

        Args:
            error_code: a :class:`ProtocolErrorCode` (not ``ERROR_IN_ERROR``,
                which must never be sent).
            details: an optional ``bond.comm.Error``.

        Raises:
            LocalProtocolError: the connection can no longer send, or the
                arguments are invalid.
        """
        if type(error_code) is not int and not isinstance(error_code, ProtocolErrorCode):
            raise LocalProtocolError(f"error_code must be an int, got {error_code!r}")
        if error_code == ProtocolErrorCode.ERROR_IN_ERROR:
            raise LocalProtocolError("ERROR_IN_ERROR must not be sent over the network")
        if details is not None and not isinstance(details, Error):
            raise LocalProtocolError(f"details must be a bond.comm.Error, not {type(details).__name__}")
        next_state = self._local_transition(StateInput.SEND_PROTOCOL_ERROR)
        protocol_error = ProtocolError(
            error_code=error_code, details=None if details is None else bond.Bonded(details)
        )
        try:
            frame = error_frame(protocol_error)
        except bond.BondEncodeError as exc:
            raise LocalProtocolError(f"cannot encode the ProtocolError: {exc}") from None
        self._outbound += frame.encode()
        self._state = next_state

    def close(self) -> None:
        """We have nothing more to send: the I/O layer closes our side once flushed.

        Raises:
            LocalProtocolError: our side is already closed, or an error ended the connection.
        """
        self._state = self._local_transition(StateInput.SEND_CLOSE)

    def __repr__(self) -> str:
        return (
            f"<epoxy.Connection {self.role.value} {self._state.name}: {len(self._our_requests)} requests pending,"
            f" {len(self._peer_requests)} to answer>"
        )
