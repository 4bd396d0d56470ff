"""The trio adapter: one EMP connection over any trio stream (TCP, TLS, memory).

Theory of operation
-------------------
EMP has no flow control of its own: a peer writes as fast as TCP lets it.
The only back-pressure there is comes from not reading. So the reader task
reads from the transport only while someone is waiting for what it would
read, which is:

* the peer's ``hello`` (during the handshake);
* more inbound ``data`` than is buffered, because a consumer is waiting in
  :meth:`EmpConnection.receive_data`;
* more requests than are buffered, because a server loop is waiting in
  :meth:`EmpConnection.receive_request`;
* the response to one of our calls;
* the ``pong`` to our ``ping``.

When nobody waits, the reader parks and the kernel's buffers fill, so TCP
carries the pressure back to the sender. A read returns up to
``receive_size`` bytes, which may hold messages nobody asked for yet; those
are kept in order (data, requests and responses each in their own queue), and
once ``max_read_ahead`` bytes of bodies are held the reader stops even if
someone waits: the bound wins, the peer waits. (EMP multiplexes everything
on one stream, so a consumer that never takes its data also stalls the
responses behind it: that is the protocol's head-of-line blocking, not
something an adapter can undo.)

Tasks (all in the nursery of :func:`open_emp_stream`): the reader; the
writer, the only task that writes, which takes what the sans-I/O machine
queued and closes the transport once the connection has ended; and the
keepalive, which pings every ``keepalive_interval`` and gives up after
``ping_timeout`` (error 2, then close). The pong clock stops while the reader
is held back by ``max_read_ahead``: a pong queued behind data we refuse to
read cannot arrive, and the data proves the peer is alive.

How it ends: ``bye`` (either way) ends inbound streams normally
(``trio.EndOfChannel``) once what was buffered is taken, and fails pending
calls with :class:`EmpClosed`; the peer's ``error`` ends everything with
:class:`PeerError`; a protocol violation by the peer with
:class:`RemoteProtocolError` (after the machine's ``error`` message went
out); a plain close with :class:`EmpConnectionLost`.
"""

from __future__ import annotations

from collections import deque

import trio

from ._config import DEFAULT_CONFIG, EmpConfig, EmpRequest, EmpStatistics
from ._connection import Connection
from ._errors import EmpClosed, EmpConnectionLost, EmpTimeout, ErrorCode, PeerError, RemoteProtocolError
from ._events import Bye, Compression, CompressionScheme, ConnectionClosed, Data, Error, Event, Hello, Pong
from ._state import ConnectionState

__all__ = ["EmpConnection", "PendingCall"]

#: What a message held for the application counts against max_read_ahead on
#: top of its body: without it, a flood of tiny requests would stay under
#: the byte bound while their count grew past max_pending_requests.
ITEM_COST = 64


def _clone(error: BaseException) -> BaseException:
    # Each waiter raises its own copy of why the connection ended: one
    # exception object raised in several tasks would collect all their
    # tracebacks. (copy.copy would call __init__, whose signatures differ.)
    clone = type(error).__new__(type(error))
    clone.args = error.args
    clone.__dict__.update(error.__dict__)
    return clone


class PendingCall:
    """A request we sent; :meth:`response` waits for its answer."""

    def __init__(self, connection: EmpConnection, request_id: int) -> None:
        self.request_id = request_id
        self._connection = connection
        self._done = trio.Event()
        self._body: bytes | None = None
        self._error: BaseException | None = None
        self._abandoned = False

    def _resolve(self, body: bytes | None, error: BaseException | None) -> None:
        self._body, self._error = body, error
        self._done.set()

    def abandon(self) -> None:
        """Drop the response when it arrives (it is still awaited on the wire)."""
        self._abandoned = True
        if self._body is not None:
            self._connection._buffered -= ITEM_COST + len(self._body)
            self._body = None
            self._connection._reader_lot.unpark_all()

    async def response(self) -> bytes:
        """Wait for the response body (decompressed).

        Raises:
            EmpClosed: the connection ended (bye or close) first.
            PeerError, RemoteProtocolError, EmpTimeout: it ended with an error.
            trio.BusyResourceError: the response was already taken.

        Cancellation: the call is abandoned (its response will be dropped).
        Always checkpoints.
        """
        if self._abandoned:
            raise trio.BusyResourceError("this call's response was already taken or abandoned")
        try:
            await self._done.wait()
        except BaseException:
            self.abandon()
            raise
        if self._error is not None:
            self._abandoned = True
            raise _clone(self._error)
        assert self._body is not None
        body, self._body = self._body, None
        self._abandoned = True
        self._connection._buffered -= ITEM_COST + len(body)
        self._connection._reader_lot.unpark_all()
        return body


class EmpConnection(trio.abc.AsyncResource):
    """An open EMP connection, handshake done. Create with :func:`open_emp_connection` or :func:`open_emp_stream`.

    Iterating over it yields inbound ``data`` bodies (not requests or
    responses) until the peer says bye; each step reads only what it needs.
    """

    def __init__(self, stream: trio.abc.Stream, config: EmpConfig = DEFAULT_CONFIG) -> None:
        self.stream = stream
        self.config = config
        self._machine = Connection(framing=config.framing, limits=config.limits)
        self._cancel_scope: trio.CancelScope | None = None
        self._nursery: trio.Nursery | None = None
        # Output: bytes taken from the machine, waiting for the writer.
        self._outgoing: list[bytes] = []  # bounded: senders wait past max_write_buffer
        self._queued = 0
        self._written = 0
        self._writer_lot = trio.lowlevel.ParkingLot()
        self._written_lot = trio.lowlevel.ParkingLot()
        self._writer_done = trio.Event()
        # Input: what was read and not yet taken.
        self._reader_lot = trio.lowlevel.ParkingLot()
        self._inbound_lot = trio.lowlevel.ParkingLot()
        self._data: deque[bytes] = deque()
        self._requests: deque[EmpRequest] = deque()
        self._calls: dict[int, PendingCall] = {}
        self._buffered = 0
        self._data_waiters = 0
        self._request_waiters = 0
        self._bytes_in = 0
        self._paused = False
        self._write_broken = False
        self._paused_during_ping = False
        self._pong: trio.Event | None = None
        self._handshake_done = trio.Event()
        self._handshake_settled = trio.Event()
        # Why the connection ended (None while open); normal: by bye.
        self._end: BaseException | None = None
        self._end_normal = False
        self._ended = trio.Event()

    # ---- state and statistics -------------------------------------------

    @property
    def state(self) -> ConnectionState:
        """The sans-I/O machine's state."""
        return self._machine.state

    @property
    def peer_version(self) -> int | None:
        """The version in the peer's hello."""
        return self._machine.peer_version

    @property
    def ended(self) -> bool:
        """True once the connection has ended, for whatever reason."""
        return self._end is not None

    def statistics(self) -> EmpStatistics:
        """A snapshot: bytes in and out, bodies held, pending calls, whether reading is allowed."""
        return EmpStatistics(
            bytes_received=self._bytes_in,
            bytes_sent=self._written,
            buffered_bytes=self._buffered,
            pending_calls=sum(not call._done.is_set() for call in self._calls.values()),
            reading=self._wants_input(),
        )

    async def wait_ended(self) -> None:
        """Wait until the connection has ended (bye, error or close)."""
        await self._ended.wait()

    # ---- the end ------------------------------------------------------------

    def _finish(self, error: BaseException, *, normal: bool = False) -> None:
        # The first reason wins. Everything parked is woken to see it.
        if self._end is not None:
            return
        self._end, self._end_normal = error, normal
        for call in self._calls.values():
            call._resolve(None, error)
        self._calls.clear()
        if self._pong is not None:
            self._pong.set()
        self._ended.set()
        self._handshake_settled.set()
        for lot in (self._reader_lot, self._inbound_lot, self._writer_lot, self._written_lot):
            lot.unpark_all()

    def _stream_end(self) -> BaseException:
        # What an inbound stream raises once drained: EndOfChannel after bye.
        assert self._end is not None
        if self._end_normal:
            return trio.EndOfChannel()
        return _clone(self._end)

    def _check_open(self) -> None:
        if self._end is not None:
            raise _clone(self._end)

    async def aclose(self) -> None:
        """Say bye (if the connection is still open) and close the transport.

        Idempotent. Bounded by ``close_timeout``. Cancellation: the transport
        is closed forcefully. Always checkpoints.
        """
        if self._end is None:
            if self._machine.state in (ConnectionState.HANDSHAKING, ConnectionState.OPEN):
                self._machine.send_bye()
                self._take_output()
            self._finish(EmpClosed("connection closed by this side", by_peer=False), normal=True)
        try:
            with trio.move_on_after(self.config.close_timeout):
                await self._writer_done.wait()
        finally:
            if self._cancel_scope is not None:
                self._cancel_scope.cancel()

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
        self._take_output()
        self._finish(EmpClosed(f"connection closed by this side with error {code}", by_peer=False))
        with trio.move_on_after(self.config.close_timeout):
            await self._writer_done.wait()

    # ---- output ----------------------------------------------------------------

    def _take_output(self) -> int:
        # Move what the machine queued to the writer; return the byte count
        # that must be written for it to have gone out.
        if self._machine.has_data_to_send:
            data = self._machine.data_to_send()
            self._outgoing.append(data)
            self._queued += len(data)
            self._writer_lot.unpark_all()
        return self._queued

    async def _wait_written(self, target: int) -> None:
        # Wait until at most max_write_buffer bytes, ours included, are left
        # unwritten: small messages coalesce into one send_all, and a sender
        # is still paced by the transport once the bound is reached.
        target -= self.config.max_write_buffer
        while self._written < target:
            if self._writer_done.is_set():
                self._check_open()
                raise EmpConnectionLost("the transport closed before the message was written")
            await self._written_lot.park()

    async def _writer(self) -> None:
        try:
            while True:
                while not self._outgoing:
                    if self._end is not None:
                        return
                    await self._writer_lot.park()
                data = b"".join(self._outgoing)
                self._outgoing.clear()
                try:
                    if self._end is not None:
                        # The last words (bye, error): bounded, the peer may not read.
                        with trio.move_on_after(self.config.close_timeout):
                            await self.stream.send_all(data)
                    else:
                        await self.stream.send_all(data)
                except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                    # The peer may have said why (error, bye) just before it
                    # went: let the reader take what is left before calling
                    # it a lost connection.
                    self._write_broken = True
                    self._reader_lot.unpark_all()
                    with trio.move_on_after(self.config.close_timeout):
                        await self._ended.wait()
                    self._finish(EmpConnectionLost(f"connection lost while writing: {exc!r}"))
                    return
                self._written += len(data)
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

    # ---- input ---------------------------------------------------------------------

    def _wants_input(self) -> bool:
        if self._end is not None:
            return False
        if self._write_broken:
            return True  # to find out why: the peer's last message, or the reset
        wanted = (
            not self._handshake_done.is_set()
            or self._data_waiters > len(self._data)
            or self._request_waiters > len(self._requests)
            or any(not call._done.is_set() for call in self._calls.values())
            or self._pong is not None
        )
        self._paused = wanted and (
            (self._buffered > 0 and self._buffered >= self.config.max_read_ahead)
            # Half the limit: one read (receive_size bytes, 28 bytes per
            # smallest request) must not carry the peer past it.
            or self._machine.peer_pending_count >= self.config.limits.max_pending_requests // 2
        )
        if self._paused and self._pong is not None:
            self._paused_during_ping = True
        return wanted and not self._paused

    async def _reader(self) -> None:
        while True:
            while not self._wants_input():
                if self._end is not None:
                    return
                await self._reader_lot.park()
            try:
                data = await self.stream.receive_some(self.config.receive_size)
            except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                self._finish(EmpConnectionLost(f"connection lost while reading: {exc!r}"))
                return
            self._bytes_in += len(data)
            self._machine.receive_data(data)
            self._process()

    def _process(self) -> None:
        while self._end is None:
            try:
                events = self._machine.events()
            except RemoteProtocolError as exc:
                self._take_output()  # the error message the machine queued
                self._finish(exc)
                return
            if not events:
                break
            for event in events:
                self._dispatch(event)
        self._take_output()  # pongs
        self._inbound_lot.unpark_all()

    def _dispatch(self, event: Event) -> None:
        if isinstance(event, Data):
            block = event.request_response
            size = len(event.body)
            if block is None:
                self._data.append(event.body)
            elif block.is_request:
                compression = next((b.scheme for b in event.extensions if isinstance(b, Compression)), None)
                self._requests.append(EmpRequest(block.request_id, event.body, compression))
            else:
                call = self._calls.pop(block.request_id, None)
                if call is None or call._abandoned:
                    return
                call._resolve(event.body, None)
            self._buffered += ITEM_COST + size
        elif isinstance(event, Pong):
            if self._pong is not None:
                self._pong.set()
                self._pong = None
        elif isinstance(event, Hello):
            self._handshake_done.set()
            self._handshake_settled.set()
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

    async def _take(self, queue: deque[bytes] | deque[EmpRequest], waiters: str) -> None:
        # Wait until ``queue`` has an item, counting this task as a waiter so
        # the reader reads on its behalf.
        await trio.lowlevel.checkpoint_if_cancelled()
        setattr(self, waiters, getattr(self, waiters) + 1)
        try:
            while not queue:
                if self._end is not None:
                    raise self._stream_end()
                self._reader_lot.unpark_all()
                await self._inbound_lot.park()
        finally:
            setattr(self, waiters, getattr(self, waiters) - 1)

    # ---- the application's side --------------------------------------------------------

    async def receive_data(self) -> bytes:
        """The next inbound ``data`` body (not a request or response), decompressed.

        Reads from the transport only if nothing is buffered.

        Raises:
            trio.EndOfChannel: the connection ended by bye and nothing is left.
            PeerError, RemoteProtocolError, EmpConnectionLost, EmpTimeout:
                it ended otherwise.

        Cancellation: nothing is taken. Always checkpoints.
        """
        await self._take(self._data, "_data_waiters")
        body = self._data.popleft()
        self._buffered -= ITEM_COST + len(body)
        self._reader_lot.unpark_all()
        await trio.lowlevel.cancel_shielded_checkpoint()
        return body

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
        await self._take(self._requests, "_request_waiters")
        request = self._requests.popleft()
        self._buffered -= ITEM_COST + len(request.body)
        self._reader_lot.unpark_all()
        await trio.lowlevel.cancel_shielded_checkpoint()
        return request

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
        await self._wait_written(self._take_output())

    async def respond(self, request: EmpRequest, body: bytes, *, compression: CompressionScheme | None | bool = True) -> None:
        """Send the response to ``request``; by default compressed as the request was.

        Args:
            compression: True (default): the request's scheme; None: no
                compression block; or a scheme.

        Raises and cancellation as :meth:`send_data`; also
        ``LocalProtocolError`` for a request already answered.
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        self._check_open()
        scheme = request.compression if compression is True else compression
        assert scheme is None or isinstance(scheme, CompressionScheme)
        self._machine.send_response(request.request_id, body, compression=scheme)
        await self._wait_written(self._take_output())

    async def start_call(self, body: bytes, *, compression: CompressionScheme | None = None) -> PendingCall:
        """Send a request; return the :class:`PendingCall` that awaits its response.

        Cancellation: the request may still go out; its response is dropped.
        Always checkpoints.
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        self._check_open()
        request_id = self._machine.send_request(body, compression=compression)
        call = PendingCall(self, request_id)
        self._calls[request_id] = call
        self._reader_lot.unpark_all()
        try:
            await self._wait_written(self._take_output())
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
        pong = self._send_ping()
        await pong.wait()
        self._check_open()
        return trio.current_time() - start

    def _send_ping(self) -> trio.Event:
        if self._pong is None:
            self._machine.send_ping()
            self._pong = trio.Event()
            self._paused_during_ping = False
            self._take_output()
            self._reader_lot.unpark_all()
        return self._pong

    async def _keepalive(self, interval: float) -> None:
        while self._end is None:
            await trio.sleep(interval)
            if self._end is not None:
                return
            pong = self._send_ping()
            while True:
                with trio.move_on_after(self.config.ping_timeout):
                    await pong.wait()
                    break
                if self._paused_during_ping:
                    # Held back by our own read-ahead bound: not the peer's fault.
                    self._paused_during_ping = self._paused
                    continue
                if self._end is None:
                    self._machine.ping_timed_out()
                    self._take_output()
                    self._finish(EmpTimeout(f"no pong within {self.config.ping_timeout} s"))
                return

    async def _run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        # The connection's own nursery, one level below the caller's block:
        # ending the connection cancels these tasks, never the caller's code.
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            self._cancel_scope = nursery.cancel_scope
            nursery.start_soon(self._writer)
            nursery.start_soon(self._reader)
            task_status.started()

    async def _handshake(self) -> None:
        self._take_output()  # our hello
        with trio.move_on_after(self.config.handshake_timeout):
            await self._handshake_settled.wait()  # the hello, or the end
        if self._end is not None:
            raise _clone(self._end)
        if not self._handshake_done.is_set():
            self._machine.send_error(ErrorCode.TIMEOUT, "no hello within the handshake timeout")
            self._take_output()
            error = EmpTimeout(f"no hello within {self.config.handshake_timeout} s")
            self._finish(error)
            raise _clone(error)
