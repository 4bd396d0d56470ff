"""The trio adapter: one Epoxy connection over any trio stream (TCP, TLS, memory).

Built on the bridge kit's :class:`~bridges.kit.BridgeConnection` (reader,
writer, handshake timeout, how it ends; its docstring has the theory of
operation). What is Epoxy's own is here: what the reader reads for, what
each event means, and the server's say on the handshake.

Epoxy has no flow control, so the reader reads only while someone waits for
what it would read: the handshake's config; a request (a server loop in
:meth:`EpoxyConnection.receive_request`); an event (a consumer in
:meth:`EpoxyConnection.receive_event`); the response to one of our calls.
Requests, events and responses read ahead of their takers are kept in
order, each kind in its own queue, within ``max_read_ahead``. (One TCP
stream carries everything, so events nobody takes stall the requests
behind them once the bound is reached: head-of-line blocking is the
protocol's, not the adapter's.)

The handshake, server side: the client's config arrives (the machine is in
``SERVER_DECIDING``), the application's ``accept`` function gets a
:class:`ConnectionInfo` (address, TLS certificate, the client's config) and
answers; accepting sends our config, rejecting an Error frame with
``CONNECTION_REJECTED`` (and the application's ``bond.comm.Error`` as its
details), then the connection closes. The decision comes after the config is
read, not at accept time as in Bond's C#: closing a socket with the
client's config unread would make the kernel reset the connection, and the
client could lose our Error frame. ``handshake_timeout`` bounds the wait for
the config and the decision together (then ``TIMEOUT``).

How it ends: the peer's Error frame ends everything with
:class:`PeerProtocolError`; a violation by the peer with
:class:`RemoteProtocolError` (after the machine's Error frame went out); a
missing handshake with :class:`EpoxyTimeout` (``TIMEOUT`` sent first); a
transport that fails with :class:`EpoxyConnectionLost`. The peer closing
its side (end of file) is Epoxy's normal end: our calls still pending fail
with :class:`EpoxyClosed` (the peer has sent everything it will), but we
still answer the requests it sent before closing (for
``half_close_timeout`` at most: it may have closed for good), and then
close too; an inbound queue then ends with ``trio.EndOfChannel`` once
drained.
"""

from __future__ import annotations

import inspect
import logging
from dataclasses import replace
from typing import Any, TypeVar

import trio

from ..kit import BridgeConnection, InboundQueue, PendingCalls
from ..kit import PendingCall as KitPendingCall
from . import bond
from ._connection import Connection
from ._errors import (
    ConversationIdsExhaustedError,
    EpoxyClosed,
    EpoxyConnectionLost,
    EpoxyTimeout,
    ErrorResponse,
    PeerProtocolError,
)
from ._events import ConfigReceived, ConnectionClosed, Event, ProtocolErrorReceived, Request, Response
from ._settings import DEFAULT_SETTINGS, AcceptFunction, ConnectionInfo, EpoxySettings, EpoxyStatistics, Verdict
from ._state import HANDSHAKE_STATES, ConnectionState, Role
from ._structs import EpoxyConfig, Error, ProtocolErrorCode

__all__ = ["EpoxyConnection", "PendingCall", "Payload", "connection_info"]

logger = logging.getLogger("rstreams.epoxy")

S = TypeVar("S", bound=bond.Struct)
#: A payload to send: a struct (marshalled Compact Binary v1 here) or bytes already marshalled.
Payload = bytes | bytearray | memoryview | bond.Struct

# States in which we may still queue our side's close.
_CLOSABLE = HANDSHAKE_STATES | {ConnectionState.OPEN, ConnectionState.REMOTE_CLOSED}


class PendingCall(KitPendingCall[Response]):
    """A request we sent; :meth:`response` waits for its answer.

    The answer is a payload or an error (``Response.is_error``).
    :meth:`response` raises :class:`EpoxyClosed` if the peer closed its
    side, or we closed, first; :class:`PeerProtocolError`,
    ``RemoteProtocolError`` or :class:`EpoxyConnectionLost` if the
    connection ended otherwise. The spec lets a client give up on a call:
    :meth:`abandon`.
    """

    def __init__(self, connection: EpoxyConnection, conversation_id: int) -> None:
        super().__init__(connection, _payload_size)
        self.conversation_id = conversation_id


def _payload_size(response: Response) -> int:
    return len(response.payload)


def connection_info(stream: trio.abc.Stream, config: EpoxyConfig | None = None) -> ConnectionInfo:
    """What can be known of the peer of ``stream``: addresses and TLS details."""
    tls = isinstance(stream, trio.SSLStream)
    transport: object = stream.transport_stream if isinstance(stream, trio.SSLStream) else stream
    peer_address = local_address = None
    if isinstance(transport, trio.SocketStream):
        try:
            peer_address = tuple(transport.socket.getpeername())
            local_address = tuple(transport.socket.getsockname())
        except OSError:
            pass
    certificate: dict[str, Any] | None = None
    der: bytes | None = None
    version = cipher = None
    if isinstance(stream, trio.SSLStream):
        try:
            certificate = stream.getpeercert() or None
            der = stream.getpeercert(binary_form=True)
            version = stream.version()
            cipher_info = stream.cipher()
            cipher = cipher_info[0] if cipher_info else None
        except (ValueError, AttributeError, trio.NeedHandshakeError):  # the TLS handshake has not happened
            pass
    return ConnectionInfo(
        peer_address=peer_address,
        local_address=local_address,
        tls=tls,
        tls_version=version,
        cipher=cipher,
        peer_certificate=certificate,
        peer_certificate_der=der,
        config=config,
    )


class EpoxyConnection(BridgeConnection[Connection, EpoxySettings]):
    """An open Epoxy connection, handshake done (either role).

    Create one with :func:`open_epoxy_connection`, :func:`open_epoxy_stream`
    or an :class:`EpoxyServer`. Both ends may send requests and events once
    it is open (the protocol is symmetric after the handshake).

    Args:
        stream: the transport; the connection owns it.
        role: ``Role.CLIENT`` (odd conversation ids; sends the first config)
            or ``Role.SERVER``.
        settings: timeouts, bounds and limits.
        accept: a server's say on the handshake (see :data:`AcceptFunction`);
            None accepts every client.
    """

    #: A frame of one framelet with no content: its count and the
    #: framelet's header (the kit sizes its reads by it).
    SMALLEST_MESSAGE = 8

    def __init__(
        self,
        stream: trio.abc.Stream,
        role: Role = Role.CLIENT,
        settings: EpoxySettings = DEFAULT_SETTINGS,
        *,
        accept: AcceptFunction | None = None,
    ) -> None:
        machine = Connection(role, limits=settings.limits, max_conversation_id=settings.max_conversation_id)
        super().__init__(stream, machine, settings)
        if accept is not None and role is not Role.SERVER:
            raise ValueError("only a server accepts connections")
        self.role = role
        self._accept = accept
        self._requests: InboundQueue[Request] = InboundQueue(self)
        self._events: InboundQueue[Event] = InboundQueue(self)
        self._calls: PendingCalls[Response] = PendingCalls()
        self._peer_closed = False
        # The addresses now, while the socket has them (see info).
        self._info = connection_info(stream)

    # ---- state and statistics -------------------------------------------

    @property
    def state(self) -> ConnectionState:
        """The sans-I/O machine's state."""
        return self._machine.state

    @property
    def peer_config(self) -> EpoxyConfig | None:
        """The peer's ``EpoxyConfig`` (once the handshake got it)."""
        return self._machine.peer_config

    @property
    def info(self) -> ConnectionInfo:
        """The peer's address and TLS details (as a server's accept function saw them)."""
        known = self._info
        if known.config is None:
            # Read again (TLS details) until the handshake has brought the
            # peer's config, then cached; the addresses stay those read when
            # the connection was made (a socket that is gone has none: a log
            # line about a reset said "from ?").
            info = connection_info(self.stream, self._machine.peer_config)
            self._info = replace(info, peer_address=known.peer_address, local_address=known.local_address)
        return self._info

    @property
    def peer_closed(self) -> bool:
        """True once the peer closed its side (it sends nothing more)."""
        return self._peer_closed

    def statistics(self) -> EpoxyStatistics:
        """A snapshot: bytes in and out, payloads held, calls pending, whether reading is allowed."""
        return EpoxyStatistics(
            bytes_received=self.bytes_received,
            bytes_sent=self.bytes_sent,
            buffered_bytes=self.buffered_bytes,
            pending_calls=len(self._calls),
            requests_to_answer=len(self._machine.peer_pending_requests),
            dropped_responses=self._machine.dropped_responses,
            reading=self._wants_input(),
        )

    # ---- the kit's hooks ------------------------------------------------------

    def _wants_more_input(self) -> bool:
        return self._calls.waiting

    def _read_paused_by_protocol(self) -> bool:
        # After the peer's end of file there is nothing left to read. And at
        # half the limit of requests the peer may have pending with us: one
        # read (receive_size bytes, about 30 bytes per smallest request)
        # must not carry it past the limit, which would be LIMIT_EXCEEDED.
        if self._peer_closed:
            return True
        return len(self._machine.peer_pending_requests) >= self.config.limits.max_pending_requests // 2

    def _say_goodbye(self) -> None:
        # Epoxy's goodbye is closing our side of the transport: nothing to send.
        if self._machine.state in _CLOSABLE:
            self._machine.close()

    def _closed_locally(self) -> BaseException:
        return EpoxyClosed("connection closed by this side", by_peer=False)

    def _lost(self, message: str) -> BaseException:
        return EpoxyConnectionLost(message)

    def _queue_ping(self) -> None:
        raise NotImplementedError("Epoxy has no ping")  # EpoxySettings refuses a keepalive

    def _handshake_timed_out(self) -> BaseException:
        if self._machine.state in HANDSHAKE_STATES:
            self._machine.handshake_timed_out()
        return EpoxyTimeout(f"no handshake within {self.config.handshake_timeout} s")

    def _holds_open(self) -> bool:
        # A call of ours, a request of the peer's being answered (a
        # Subscribe collects its stream), or what waits to be taken.
        return bool(
            len(self._calls) or self._machine.peer_pending_requests or len(self._requests) or len(self._events)
        )

    def _idle_timed_out(self, message: str) -> BaseException:
        if self._machine.state is ConnectionState.OPEN:
            self._machine.send_protocol_error(ProtocolErrorCode.TIMEOUT)
        return EpoxyTimeout(message)

    def _on_finish(self, error: BaseException) -> None:
        self._calls.fail_all(error)

    def _dispatch(self, event: object) -> None:
        if isinstance(event, Request):
            self._requests.put(event, len(event.payload))
        elif isinstance(event, Event):
            self._events.put(event, len(event.payload))
        elif isinstance(event, Response):
            # "frames with unexpected conversation IDs may be dropped"
            self._calls.deliver(event.conversation_id, event)
        elif isinstance(event, ConfigReceived):
            self._config_received()
        elif isinstance(event, ProtocolErrorReceived):
            self._finish(PeerProtocolError(event.error_code, event.details))
        elif isinstance(event, ConnectionClosed):
            self._peer_closed_its_side()

    def _config_received(self) -> None:
        if self.role is Role.CLIENT:
            self._handshake_complete()
        elif self._machine.state is not ConnectionState.SERVER_DECIDING:
            # A violation in the same read as the config: the machine is in
            # ERROR already, with its Error frame queued; the kit raises it next.
            return
        elif self._accept is None:
            self._machine.accept()
            self._handshake_complete()
        else:
            assert self._nursery is not None
            self._nursery.start_soon(self._decide, self._accept)

    async def _decide(self, accept: AcceptFunction) -> None:
        # The application's say on a client whose config arrived.
        info = self.info
        verdict: Verdict
        try:
            answer = accept(info)
            verdict = await answer if inspect.isawaitable(answer) else answer
        except Exception:
            logger.exception("Epoxy accept function failed; rejecting %s", info.peer)
            verdict = False
        if self._end is not None or self._machine.state is not ConnectionState.SERVER_DECIDING:
            return  # the handshake timed out, the client left or broke the protocol
        if verdict is None or verdict is True:
            self._machine.accept()
            self._take_output()
            self._handshake_complete()
            return
        details = verdict if isinstance(verdict, Error) else None
        self._machine.reject(ProtocolErrorCode.CONNECTION_REJECTED, details)
        reason = f": {details.message}" if details is not None and details.message else ""
        await self._close_with(EpoxyClosed(f"rejected the connection from {info.peer}{reason}", by_peer=False))

    def _peer_closed_its_side(self) -> None:
        if self._machine.state is ConnectionState.CLOSED and not self._handshake_done.is_set():
            self._finish(EpoxyConnectionLost("the peer closed the connection during the handshake"))
            return
        self._peer_closed = True
        closed = EpoxyClosed("the peer closed the connection", by_peer=True)
        self._calls.fail_all(closed)  # it has sent everything it will
        self._end_if_answered()
        if self._end is None and self._nursery is not None:
            self._nursery.start_soon(self._close_after_half_close)

    async def _close_after_half_close(self) -> None:
        # The peer may have closed for good rather than half: we cannot tell
        # until we write. Answer for half_close_timeout at most, then close.
        with trio.move_on_after(self.config.half_close_timeout):
            await self._ended.wait()
        unanswered = len(self._machine.peer_pending_requests)
        self._finish(
            EpoxyClosed(
                f"the peer closed the connection; {unanswered} requests unanswered after"
                f" {self.config.half_close_timeout} s",
                by_peer=True,
            ),
            normal=True,
        )

    def _end_if_answered(self) -> None:
        # After the peer's end of file we answer what it asked, then close.
        if self._peer_closed and not self._machine.peer_pending_requests:
            self._finish(EpoxyClosed("the peer closed the connection", by_peer=True), normal=True)

    # ---- receiving ----------------------------------------------------------------

    async def receive_request(self) -> Request:
        """The next request from the peer; answer it with :meth:`respond` or :meth:`respond_error`.

        Reads from the transport only if none is held.

        Raises:
            trio.EndOfChannel: the connection ended normally and none is left.
            PeerProtocolError, RemoteProtocolError, EpoxyConnectionLost,
                EpoxyClosed: it ended otherwise.

        Cancellation: nothing is taken. Always checkpoints.
        """
        return await self._requests.take()

    async def receive_event(self) -> Event:
        """The next event from the peer (a one-way message).

        Raises and cancellation as :meth:`receive_request`.
        """
        return await self._events.take()

    async def receive_events(self, max_count: int) -> list[Event]:
        """The next event, and those already read after it: at most ``max_count``.

        The batch form of :meth:`receive_event`: what one read brought is
        handled in one step. Waits only for the first.

        Raises:
            ValueError: ``max_count`` is not positive.
            and as :meth:`receive_event`.

        Cancellation: nothing is taken. Always checkpoints.
        """
        return await self._events.take_batch(max_count)

    # ---- answering ------------------------------------------------------------------

    async def respond(self, request: Request | int, payload: Payload) -> None:
        """Send the response to ``request`` (a :class:`Request` or its conversation id).

        Waits only while more than ``max_write_buffer`` bytes are unwritten.

        Raises:
            LocalProtocolError: no such request is pending, or the payload is
                empty or does not encode.
            EpoxyClosed and the other end errors: the connection has ended.

        Cancellation: if cancelled while waiting for the transport, the
        response may still go out. Always checkpoints.
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        self.respond_nowait(request, payload)
        await self._wait_written(self._queued)

    def respond_nowait(self, request: Request | int, payload: Payload, *, prepaid: int = 0) -> None:
        """Queue the response to ``request`` for the writer and return at once.

        The queued bytes count against :attr:`budget` until written (and
        while it is exhausted no further request is read). For a caller that
        lets go of ``payload`` before it waits (:meth:`wait_written`), so
        that a response waiting to be written is held once, not twice.

        ``prepaid``: bytes of :attr:`budget` the caller holds for this
        response (what it was built from): handed over to the queued bytes,
        given back once they are counted (or at once if this raises), so
        exactly once either way.

        Raises as :meth:`respond`.
        """
        conversation_id = request.conversation_id if isinstance(request, Request) else request

        def queue() -> None:
            self._check_open()
            self._machine.send_response(conversation_id, payload)

        self._queue_prepaid(prepaid, queue)
        self._end_if_answered()

    async def respond_error(self, request: Request | int, error: Error) -> None:
        """Send an error response (``ErrorData`` holding ``error``) to ``request``.

        Raises and cancellation as :meth:`respond`.
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        self._check_open()
        conversation_id = request.conversation_id if isinstance(request, Request) else request
        self._machine.send_error_response(conversation_id, error)
        target = self._take_output()
        self._end_if_answered()
        await self._wait_written(target)

    # ---- calling ----------------------------------------------------------------------

    async def start_call(
        self, service_name: str, method_name: str, payload: Payload, *, layer_data: Payload | None = None
    ) -> PendingCall:
        """Send a request; return the :class:`PendingCall` that awaits its response.

        Raises:
            LocalProtocolError: the payload is empty or does not encode.
            ConversationIdsExhaustedError: our ids ran out (the connection is
                over: ``CONVERSATION_IDS_EXHAUSTED`` was sent).
            EpoxyClosed and the other end errors: the connection has ended,
                or the peer closed its side (it could not answer).

        Cancellation: the request may still go out; its response is dropped.
        Always checkpoints.
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        self._check_open()
        if self._peer_closed:
            raise EpoxyClosed("the peer closed the connection: it cannot answer a request", by_peer=True)
        try:
            conversation_id = self._machine.send_request(service_name, method_name, payload, layer_data=layer_data)
        except ConversationIdsExhaustedError as exc:
            await self._close_with(exc)
            raise
        call = PendingCall(self, conversation_id)
        self._calls.add(conversation_id, call)
        self._wake_reader()
        try:
            await self._send_queued()
        except BaseException:
            call.abandon()
            raise
        return call

    async def call_raw(
        self, service_name: str, method_name: str, payload: Payload, *, layer_data: Payload | None = None
    ) -> Response:
        """Send a request and return its :class:`Response`, payload or error, undecoded.

        Raises as :meth:`start_call` and :meth:`PendingCall.response`.
        """
        pending = await self.start_call(service_name, method_name, payload, layer_data=layer_data)
        return await pending.response()

    async def call(self, service_name: str, method_name: str, request: Payload, response_class: type[S]) -> S:
        """Call a method: send ``request``, return the response as ``response_class``.

        Example::

            result = await connection.call("examples.calc.Calc", "Calculate", Params(x=67, y=87), Result)

        Raises:
            ErrorResponse: the response was ``ErrorData`` (its ``.error`` is
                the ``bond.comm.Error``).
            bond.BondDecodeError: the response does not decode as
                ``response_class`` (or its error as ``bond.comm.Error``).
            EpoxyClosed, PeerProtocolError, ...: as :meth:`start_call`.
        """
        response = await self.call_raw(service_name, method_name, request)
        if response.is_error:
            raise ErrorResponse(response.decode_error())
        return response.decode(response_class)

    async def send_event(
        self, service_name: str, method_name: str, payload: Payload, *, layer_data: Payload | None = None
    ) -> int:
        """Send an event (one-way: no response, not even an error); return its conversation id.

        Raises and cancellation as :meth:`start_call` (the peer having closed
        its side is no error here: it may still read).
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        self._check_open()
        try:
            conversation_id = self._machine.send_event(service_name, method_name, payload, layer_data=layer_data)
        except ConversationIdsExhaustedError as exc:
            await self._close_with(exc)
            raise
        await self._send_queued()
        return conversation_id

    async def wait_written(self) -> None:
        """Wait until everything queued so far was written to the transport.

        :meth:`send_event` returns once at most ``max_write_buffer`` bytes
        are left unwritten; an event has no answer, so a sender that is about
        to close calls this to know its events left (closing gives the writer
        only ``close_timeout``).

        Raises:
            the connection's end error, if it ended before they were written.

        Cancellation: nothing is undone (what is queued may still go out).
        Always checkpoints.
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        await self._wait_written(self._queued + self.config.max_write_buffer)

    async def send_protocol_error(self, error_code: int, details: Error | None = None) -> None:
        """Send an Error frame and close: the connection is over.

        Raises:
            LocalProtocolError: the code is ``ERROR_IN_ERROR``, or we can no
                longer send.
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        self._check_open()
        self._machine.send_protocol_error(error_code, details)
        try:
            name = ProtocolErrorCode(error_code).name
        except ValueError:
            name = str(error_code)
        await self._close_with(EpoxyClosed(f"connection closed by this side with ProtocolError {name}", by_peer=False))
