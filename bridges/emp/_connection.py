"""The EMP connection state machine: bytes in, events out; calls in, bytes out.

A :class:`Connection` does no I/O. The I/O layer feeds it received bytes
(:meth:`Connection.receive_data`, with ``b""`` for end of file), takes the
events (:meth:`Connection.events`), calls it to send, and writes whatever
:meth:`Connection.data_to_send` returns. Timers are the I/O layer's too: the
machine knows whether a ping is outstanding, the I/O layer knows for how long,
and calls :meth:`Connection.ping_timed_out` when it gives up.

Whose fault
-----------
Local misuse (sending data during the handshake, a second ping before the
pong, a response to no request, anything after ``bye``) raises
``LocalProtocolError`` at once and changes nothing. A peer's violation
queues the EMP ``error`` message the spec prescribes (code 3, protocol
error, or code 4, extension error, with the extension's id and code),
moves the machine to ``ERROR`` and surfaces as ``RemoteProtocolError`` from
:meth:`Connection.events`; events parsed before the bad message are returned
first and the error is raised on the next call. A peer's ``error`` message
is not an exception here but an :class:`~bridges.emp.Error` event: what to
do about either is the I/O layer's decision.

Request-response
----------------
Our request ids come from a 64-bit counter incremented before each request,
so the first is 1 and 0 is never used. We remember the ids of our requests
until their response arrives (a response to anything else is a protocol
error), and the ids of the peer's requests until we respond (a duplicate is
a protocol error; at most ``max_pending_requests`` may be outstanding).
"""

from __future__ import annotations

from bridges.machine import ProtocolMachine, StateTable

from ._codec import DEFAULT_LIMITS, Decoder, EmpLimits, Framing, encode
from ._errors import (
    ErrorCode,
    ExtensionErrorCode,
    LocalProtocolError,
    RemoteProtocolError,
    UnsupportedVersionError,
)
from ._events import (
    MAX_REQUEST_ID,
    PROTOCOL_VERSION,
    Bye,
    Compression,
    CompressionScheme,
    ConnectionClosed,
    Data,
    Error,
    Event,
    Extension,
    ExtensionId,
    Hello,
    Message,
    Ping,
    Pong,
    RequestResponse,
    UnknownExtension,
)
from ._state import CONNECTION_TRANSITIONS, ConnectionEvent, ConnectionState

__all__ = ["Connection", "SUPPORTED_VERSIONS"]

#: The connection's state table (``_state``), refusing a step it has no row
#: for with this protocol's errors.
_STATES = StateTable(CONNECTION_TRANSITIONS, local_error=LocalProtocolError, remote_error=RemoteProtocolError)

#: The versions this implementation accepts in the peer's hello.
SUPPORTED_VERSIONS = frozenset({PROTOCOL_VERSION})
_DEAF_STATES = (ConnectionState.CLOSED, ConnectionState.ERROR)
_MAX_ERROR_TEXT = 1000  # characters of an exception text repeated to the peer


class Connection(ProtocolMachine[Event, RemoteProtocolError]):
    """A sans-I/O EMP connection; client and server behave the same.

    Creating it queues our ``hello``: send it (:meth:`data_to_send`) first.

    Args:
        framing: how envelope and block sizes are counted; both peers must
            agree. Default: as the spec says (sizes include the size field).
        limits: what the peer may send.
        auto_pong: answer each ``ping`` with a ``pong`` automatically (the
            ``Ping`` event is still returned). Default True.
    """

    def __init__(
        self,
        *,
        framing: Framing = Framing.SIZE_INCLUDES_FIELD,
        limits: EmpLimits = DEFAULT_LIMITS,
        auto_pong: bool = True,
    ) -> None:
        self.framing = framing
        self.limits = limits
        self.auto_pong = auto_pong
        self._state = ConnectionState.HANDSHAKING
        self._decoder = Decoder(framing=framing, limits=limits)
        super().__init__(RemoteProtocolError, output=encode(Hello(version=PROTOCOL_VERSION), framing=framing))
        self._eof = False
        self._ping_outstanding = False
        self._last_request_id = 0
        self._our_requests: set[int] = set()
        self._peer_requests: set[int] = set()
        self.peer_version: int | None = None

    # ---- state ----------------------------------------------------------

    @property
    def state(self) -> ConnectionState:
        """Where the connection is: handshaking, open, closed or failed."""
        return self._state

    @property
    def ping_outstanding(self) -> bool:
        """True from :meth:`send_ping` until the next ``pong`` arrives."""
        return self._ping_outstanding

    @property
    def pending_requests(self) -> frozenset[int]:
        """Ids of our requests that have no response yet."""
        return frozenset(self._our_requests)

    @property
    def peer_pending_count(self) -> int:
        """How many of the peer's requests await our response (cheap)."""
        return len(self._peer_requests)

    @property
    def peer_pending_requests(self) -> frozenset[int]:
        """Ids of the peer's requests we have not responded to yet."""
        return frozenset(self._peer_requests)

    def _transition(self, event: ConnectionEvent) -> None:
        self._state = _STATES.after_local(self._state, event)

    def _receive_transition(self, event: ConnectionEvent, what: str) -> None:
        self._state = _STATES.after_received(self._state, event, what)

    # ---- receiving --------------------------------------------------------

    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        """Add bytes received from the peer; ``b""`` means end of file.

        :meth:`events` parses them. Bytes received after the connection
        closed or failed are ignored.
        """
        if self._state in _DEAF_STATES:
            return
        if not data:
            self._eof = True
        elif not self._eof:
            self._decoder.feed(data)

    def events(self) -> list[Event]:
        """Parse what was received; return the events, in order.

        Returns:
            Messages (:class:`~bridges.emp.Hello`, ``Bye``, ``Ping``,
            ``Pong``, ``Error``, ``Data``) and, at end of file,
            :class:`~bridges.emp.ConnectionClosed`.

        Raises:
            RemoteProtocolError: the peer broke the protocol (raised after
                the events before the offending message have been returned).
                The EMP ``error`` message is queued and the state is ``ERROR``.
            UnsupportedVersionError: the peer's hello named a version we do
                not speak.
        """
        return self._take_events()

    @property
    def buffered_input_size(self) -> int:
        """Bytes received and not yet parsed into a message (a partial message)."""
        return self._decoder.buffered

    def fail_memory_budget(self, message: str) -> RemoteProtocolError:
        """The peer made us hold more than the connection's memory budget.

        Queues ``error`` 3 (protocol, as for a message over the size limit)
        with ``message``, moves to ``ERROR``, drops the unparsed input, and
        returns the error to end with. Nothing is queued once the connection
        has ended.
        """
        error = RemoteProtocolError(message, code=ErrorCode.PROTOCOL)
        if self._state not in _DEAF_STATES:
            self._fail(error)
        self._decoder = Decoder(framing=self.framing, limits=self.limits)  # what it sent is dropped
        return error

    def _parse(self, events: list[Event]) -> None:
        while self._state not in _DEAF_STATES:
            message = self._decoder.next_message()
            if message is None:
                break
            self._dispatch(message)  # raises before a bad message becomes an event
            events.append(message)
        if self._eof and self._state not in _DEAF_STATES:
            self._decoder.check_eof()
            self._receive_transition(ConnectionEvent.RECEIVE_EOF, "end of file")
            events.append(ConnectionClosed())

    def _fail(self, error: RemoteProtocolError) -> None:
        self._outbound += encode(
            Error(
                code=error.code,
                extension_id=error.extension_id,
                extension_code=error.extension_code,
                message=error.message[:_MAX_ERROR_TEXT],
            ),
            framing=self.framing,
        )
        self._state = ConnectionState.ERROR

    @staticmethod
    def _check_extensions(message: Message) -> None:
        for block in message.extensions:
            extension_id = _extension_id(block)
            if isinstance(block, UnknownExtension):
                raise RemoteProtocolError(
                    f"unsupported extension {extension_id}",
                    code=ErrorCode.EXTENSION,
                    extension_id=extension_id,
                    extension_code=ExtensionErrorCode.UNSUPPORTED_EXTENSION,
                )
            if not isinstance(message, Data):
                raise RemoteProtocolError(
                    f"extension {extension_id} on a {type(message).__name__.lower()} message",
                    code=ErrorCode.EXTENSION,
                    extension_id=extension_id,
                    extension_code=ExtensionErrorCode.NOT_ALLOWED_HERE,
                )

    def _dispatch(self, message: Message) -> None:
        if isinstance(message, Hello):
            self._receive_transition(ConnectionEvent.RECEIVE_HELLO, "hello")
            self._check_extensions(message)
            if message.version not in SUPPORTED_VERSIONS:
                raise UnsupportedVersionError(
                    f"unsupported EMP version {message.version}; this side speaks {PROTOCOL_VERSION}",
                    peer_version=message.version,
                )
            self.peer_version = message.version
        elif isinstance(message, Bye):
            self._receive_transition(ConnectionEvent.RECEIVE_BYE, "bye")
        elif isinstance(message, Error):
            self._receive_transition(ConnectionEvent.RECEIVE_ERROR, "error")
        else:
            self._receive_transition(ConnectionEvent.RECEIVE_EXCHANGE, type(message).__name__.lower())
            self._check_extensions(message)
            if isinstance(message, Ping):
                if self.auto_pong:
                    self._outbound += encode(message.response(), framing=self.framing)
            elif isinstance(message, Pong):
                # The first pong after our ping ends the procedure; a pong
                # with no ping outstanding is harmless and ignored.
                self._ping_outstanding = False
            elif isinstance(message, Data):
                self._receive_request_response(message.request_response)

    def _receive_request_response(self, block: RequestResponse | None) -> None:
        if block is None:
            return
        request_id = block.request_id
        if block.is_request:
            if request_id in self._peer_requests:
                raise RemoteProtocolError(f"request id {request_id} is already pending")
            if len(self._peer_requests) >= self.limits.max_pending_requests:
                raise RemoteProtocolError(
                    f"more than {self.limits.max_pending_requests} requests pending without a response"
                )
            self._peer_requests.add(request_id)
        else:
            if request_id not in self._our_requests:
                raise RemoteProtocolError(f"response to request id {request_id}, which is not pending")
            self._our_requests.remove(request_id)

    # ---- sending ------------------------------------------------------------

    def _queue(self, message: Message, compressed_body: bytes | None = None) -> None:
        self._outbound += encode(message, framing=self.framing, compressed_body=compressed_body)

    def send_ping(self) -> None:
        """Queue a ``ping``; :attr:`ping_outstanding` stays true until the pong.

        Raises:
            LocalProtocolError: the handshake is not over, the connection has
                ended, or a ping is already outstanding.
        """
        if self._ping_outstanding:
            raise LocalProtocolError("a ping is already outstanding")
        self._transition(ConnectionEvent.SEND_EXCHANGE)
        self._queue(Ping())
        self._ping_outstanding = True

    def send_pong(self) -> None:
        """Queue a ``pong`` (only needed with ``auto_pong=False``).

        Raises:
            LocalProtocolError: the handshake is not over or the connection
                has ended.
        """
        self._transition(ConnectionEvent.SEND_EXCHANGE)
        self._queue(Pong())

    def ping_timed_out(self) -> None:
        """The pong did not arrive in time: queue ``error`` (code 2, timeout).

        The connection is ``ERROR`` afterwards; close it once the error is
        written.

        Raises:
            LocalProtocolError: no ping is outstanding.
        """
        if not self._ping_outstanding:
            raise LocalProtocolError("no ping is outstanding")
        self.send_error(ErrorCode.TIMEOUT, "no pong received within the timeout")

    @staticmethod
    def _compression(compression: CompressionScheme | None) -> tuple[Extension, ...]:
        return () if compression is None else (Compression(scheme=compression),)

    def send_data(self, body: bytes, *, compression: CompressionScheme | None = None) -> None:
        """Queue a plain ``data`` message.

        Raises:
            LocalProtocolError: the handshake is not over or the connection
                has ended.
        """
        message = Data(body=body, extensions=self._compression(compression))
        self._transition(ConnectionEvent.SEND_EXCHANGE)
        self._queue(message)

    def send_request(self, body: bytes, *, compression: CompressionScheme | None = None) -> int:
        """Queue a ``data`` message that is a request; return its id.

        Raises:
            LocalProtocolError: the handshake is not over, the connection has
                ended, or the 64-bit id counter is exhausted.
        """
        if self._last_request_id >= MAX_REQUEST_ID:
            raise LocalProtocolError("request ids are exhausted")
        request_id = self._last_request_id + 1
        block = RequestResponse(request_id=request_id, is_request=True)
        message = Data(body=body, extensions=(block, *self._compression(compression)))
        self._transition(ConnectionEvent.SEND_EXCHANGE)
        self._queue(message)
        self._last_request_id = request_id
        self._our_requests.add(request_id)
        return request_id

    def send_response(
        self,
        request_id: int,
        body: bytes,
        *,
        compression: CompressionScheme | None = None,
        compressed_body: bytes | None = None,
    ) -> None:
        """Queue the response to the peer's request ``request_id``.

        ``compressed_body``: ``body`` already compressed with ``compression``
        (``compress_body``: a server compresses off the event loop), sent as is.

        Raises:
            LocalProtocolError: no such request is pending, the handshake is
                not over, or the connection has ended.
        """
        if request_id not in self._peer_requests:
            raise LocalProtocolError(f"request id {request_id!r} is not pending")
        block = RequestResponse(request_id=request_id, is_request=False)
        message = Data(body=body, extensions=(block, *self._compression(compression)))
        self._transition(ConnectionEvent.SEND_EXCHANGE)
        self._queue(message, compressed_body if compression is not None else None)
        self._peer_requests.remove(request_id)

    def send_bye(self) -> None:
        """Queue ``bye``; close the connection once it is written.

        Raises:
            LocalProtocolError: the connection has already ended.
        """
        self._transition(ConnectionEvent.SEND_BYE)
        self._queue(Bye())

    def send_error(
        self, code: int, message: str = "", *, extension_id: int = 0, extension_code: int = 0
    ) -> None:
        """Queue ``error``; close the connection once it is written.

        Raises:
            LocalProtocolError: the connection has already ended, or a field
                is out of range.
        """
        error = Error(code=code, extension_id=extension_id, extension_code=extension_code, message=message)
        self._transition(ConnectionEvent.SEND_ERROR)
        self._queue(error)

    def __repr__(self) -> str:
        return (
            f"<emp.Connection {self._state.name}: ping outstanding={self._ping_outstanding},"
            f" {len(self._our_requests)} requests pending>"
        )


def _extension_id(block: Extension) -> int:
    if isinstance(block, UnknownExtension):
        return block.extension_id
    if isinstance(block, RequestResponse):
        return ExtensionId.REQUEST_RESPONSE
    return ExtensionId.COMPRESSION
