"""The trio adapter: one EMP connection over any trio stream (TCP, TLS, memory).

Built on the bridge kit's :class:`~bridges.kit.BridgeConnection` (reader,
writer, keepalive, handshake timeout, how it ends; its docstring has the
theory of operation). What is EMP's own is here: what the reader reads for,
and what each event means.

EMP has no flow control of its own, so the reader reads only while someone
waits for what it would read: the peer's ``hello``; more inbound ``data``
(a consumer waiting in :meth:`EmpConnection.receive_data`); more requests
(a server loop waiting in :meth:`EmpConnection.receive_request`); the
response to one of our calls; the ``pong`` to our ``ping``. Data, requests
and responses read ahead of their takers are kept in order, each in its own
queue, within ``max_read_ahead``. (EMP multiplexes everything on one
stream, so a consumer that never takes its data also stalls the responses
behind it: that is the protocol's head-of-line blocking, not something an
adapter can undo.)

How it ends: ``bye`` (either way) ends inbound streams normally
(``trio.EndOfChannel``) once what was buffered is taken, and fails pending
calls with :class:`EmpClosed`; the peer's ``error`` ends everything with
:class:`PeerError`; a protocol violation by the peer with
:class:`RemoteProtocolError` (after the machine's ``error`` message went
out); a plain close with :class:`EmpConnectionLost`; a missing hello or
pong with :class:`EmpTimeout` (error 2 sent first).
"""

from __future__ import annotations

import trio

from ..kit import BridgeConnection, InboundQueue, PendingCalls
from ..kit import PendingCall as KitPendingCall
from ._config import DEFAULT_CONFIG, EmpConfig, EmpRequest, EmpStatistics
from ._connection import Connection
from ._errors import EmpClosed, EmpConnectionLost, EmpTimeout, ErrorCode, PeerError
from ._events import Bye, Compression, CompressionScheme, ConnectionClosed, Data, Error, Hello, Pong
from ._state import ConnectionState

__all__ = ["EmpConnection", "PendingCall"]


class PendingCall(KitPendingCall[bytes]):
    """A request we sent; :meth:`response` waits for its body (decompressed).

    :meth:`response` raises :class:`EmpClosed` if the connection ended (bye
    or close) first, and :class:`PeerError`, ``RemoteProtocolError`` or
    :class:`EmpTimeout` if it ended with an error.
    """

    def __init__(self, connection: EmpConnection, request_id: int) -> None:
        super().__init__(connection, len)
        self.request_id = request_id


class EmpConnection(BridgeConnection[Connection, EmpConfig]):
    """An open EMP connection, handshake done. Create with :func:`open_emp_connection` or :func:`open_emp_stream`.

    Iterating over it yields inbound ``data`` bodies (not requests or
    responses) until the peer says bye; each step reads only what it needs.
    """

    #: A message with no extension and an empty body: the size field and
    #: the 4-byte header (the kit sizes its reads by it).
    SMALLEST_MESSAGE = 8

    def __init__(self, stream: trio.abc.Stream, config: EmpConfig = DEFAULT_CONFIG) -> None:
        super().__init__(stream, Connection(framing=config.framing, limits=config.limits), config)
        self._data: InboundQueue[bytes] = InboundQueue(self)
        self._requests: InboundQueue[EmpRequest] = InboundQueue(self)
        self._calls: PendingCalls[bytes] = PendingCalls()

    # ---- state and statistics -------------------------------------------

    @property
    def state(self) -> ConnectionState:
        """The sans-I/O machine's state."""
        return self._machine.state

    @property
    def peer_version(self) -> int | None:
        """The version in the peer's hello."""
        return self._machine.peer_version

    def statistics(self) -> EmpStatistics:
        """A snapshot: bytes in and out, bodies held, pending calls, whether reading is allowed."""
        return EmpStatistics(
            bytes_received=self.bytes_received,
            bytes_sent=self.bytes_sent,
            buffered_bytes=self.buffered_bytes,
            pending_calls=len(self._calls),
            reading=self._wants_input(),
        )

    # ---- the kit's hooks ------------------------------------------------------

    def _wants_more_input(self) -> bool:
        return self._calls.waiting

    def _read_paused_by_protocol(self) -> bool:
        # Half the limit: one read (receive_size bytes, 28 bytes per smallest
        # request) must not carry the peer past it.
        return self._machine.peer_pending_count >= self.config.limits.max_pending_requests // 2

    def _say_goodbye(self) -> None:
        if self._machine.state in (ConnectionState.HANDSHAKING, ConnectionState.OPEN):
            self._machine.send_bye()

    def _closed_locally(self) -> BaseException:
        return EmpClosed("connection closed by this side", by_peer=False)

    def _lost(self, message: str) -> BaseException:
        return EmpConnectionLost(message)

    def _queue_ping(self) -> None:
        self._machine.send_ping()

    def _ping_timed_out(self) -> BaseException:
        self._machine.ping_timed_out()
        return EmpTimeout(f"no pong within {self.config.ping_timeout} s")

    def _handshake_timed_out(self) -> BaseException:
        self._machine.send_error(ErrorCode.TIMEOUT, "no hello within the handshake timeout")
        return EmpTimeout(f"no hello within {self.config.handshake_timeout} s")

    def _on_finish(self, error: BaseException) -> None:
        self._calls.fail_all(error)

    def _dispatch(self, event: object) -> None:
        if isinstance(event, Data):
            block = event.request_response
            size = len(event.body)
            if block is None:
                self._data.put(event.body, size)
            elif block.is_request:
                compression = next((b.scheme for b in event.extensions if isinstance(b, Compression)), None)
                self._requests.put(EmpRequest(block.request_id, event.body, compression), size)
            else:
                self._calls.deliver(block.request_id, event.body)
        elif isinstance(event, Pong):
            self._pong_received()
        elif isinstance(event, Hello):
            self._handshake_complete()
        elif isinstance(event, Bye):
            self._finish(EmpClosed("the peer said bye", by_peer=True), normal=True)
        elif isinstance(event, Error):
            self._finish(
                PeerError(
                    event.message,
                    code=event.code,
                    extension_id=event.extension_id,
                    extension_code=event.extension_code,
                )
            )
        elif isinstance(event, ConnectionClosed):
            self._finish(EmpConnectionLost("the peer closed the connection without bye or error"))
        # Ping: the machine queued the pong already.

    # ---- the application's side --------------------------------------------------------

    async def send_error(
        self, code: int, message: str = "", *, extension_id: int = 0, extension_code: int = 0
    ) -> None:
        """Send ``error`` and close, as the spec requires after an error.

        Raises:
            LocalProtocolError: a field is out of range.
            EmpClosed and others: the connection had already ended.
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        self._check_open()
        self._machine.send_error(code, message, extension_id=extension_id, extension_code=extension_code)
        await self._close_with(EmpClosed(f"connection closed by this side with error {code}", by_peer=False))

    async def receive_data(self) -> bytes:
        """The next inbound ``data`` body (not a request or response), decompressed.

        Reads from the transport only if nothing is buffered.

        Raises:
            trio.EndOfChannel: the connection ended by bye and nothing is left.
            PeerError, RemoteProtocolError, EmpConnectionLost, EmpTimeout:
                it ended otherwise.

        Cancellation: nothing is taken. Always checkpoints.
        """
        return await self._data.take()

    def __aiter__(self) -> EmpConnection:
        return self

    async def __anext__(self) -> bytes:
        try:
            return await self.receive_data()
        except trio.EndOfChannel:
            raise StopAsyncIteration from None

    async def receive_request(self) -> EmpRequest:
        """The next request from the peer; answer it with :meth:`respond`.

        Raises and cancellation as :meth:`receive_data`.
        """
        return await self._requests.take()

    async def send_data(self, body: bytes, *, compression: CompressionScheme | None = None) -> None:
        """Send a ``data`` message; wait while more than ``max_write_buffer`` bytes are unwritten.

        Raises:
            LocalProtocolError: the body is not bytes.
            EmpClosed and the other end errors: the connection has ended.

        Cancellation: if cancelled while waiting for the transport, the
        message may still go out. Always checkpoints.
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        self._check_open()
        self._machine.send_data(body, compression=compression)
        await self._send_queued()

    async def respond(self, request: EmpRequest, body: bytes, *, compression: CompressionScheme | None | bool = True) -> None:
        """Send the response to ``request``; by default compressed as the request was.

        Args:
            compression: True (default): the request's scheme; None: no
                compression block; or a scheme.

        Raises and cancellation as :meth:`send_data`; also
        ``LocalProtocolError`` for a request already answered.
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        self.respond_nowait(request, body, compression=compression)
        await self._send_queued()

    def respond_nowait(
        self,
        request: EmpRequest,
        body: bytes,
        *,
        compression: CompressionScheme | None | bool = True,
        prepaid: int = 0,
        compressed_body: bytes | None = None,
    ) -> None:
        """Queue the response to ``request`` for the writer and return at once.

        ``compressed_body``: ``body`` already compressed with the scheme
        (``compress_body``, off the event loop: see ``EmpAppServer``).

        For a server whose responses are paced by the connection's memory
        budget rather than by the transport: the queued bytes count against
        :attr:`budget` until they are written, and while it is exhausted the
        reader reads no further requests.

        ``prepaid``: bytes of :attr:`budget` the caller holds for this
        response (the elements it was built from): handed over to the
        queued bytes, given back once they are counted (or at once if
        nothing is queued: this raises), so exactly once either way.

        Raises:
            LocalProtocolError: the request was already answered.
            EmpClosed and the other end errors: the connection has ended.
        """
        scheme = request.compression if compression is True else compression
        assert scheme is None or isinstance(scheme, CompressionScheme)

        def queue() -> None:
            self._check_open()
            self._machine.send_response(request.request_id, body, compression=scheme, compressed_body=compressed_body)

        self._queue_prepaid(prepaid, queue)

    async def start_call(self, body: bytes, *, compression: CompressionScheme | None = None) -> PendingCall:
        """Send a request; return the :class:`PendingCall` that awaits its response.

        Cancellation: the request may still go out; its response is dropped.
        Always checkpoints.
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        self._check_open()
        request_id = self._machine.send_request(body, compression=compression)
        call = PendingCall(self, request_id)
        self._calls.add(request_id, call)
        self._wake_reader()
        try:
            await self._send_queued()
        except BaseException:
            call.abandon()
            raise
        return call

    async def call(self, body: bytes, *, compression: CompressionScheme | None = None) -> bytes:
        """Send a request and return the response body: a one-element stream.

        Raises:
            EmpClosed: the connection ended (bye, close) before the response.
            PeerError, RemoteProtocolError, EmpTimeout: it ended with an error.
        """
        pending = await self.start_call(body, compression=compression)
        return await pending.response()

    async def ping(self) -> float:
        """Ping the peer and wait for the pong; return the round trip in seconds.

        If a ping is already outstanding (the keepalive's), waits for its
        pong instead: EMP allows one at a time. No timeout of its own: wrap
        it in ``trio.fail_after``.
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        self._check_open()
        start = trio.current_time()
        pong = self._start_ping()
        await pong.wait()
        self._check_open()
        return trio.current_time() - start
