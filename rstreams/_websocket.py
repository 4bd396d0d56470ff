"""The protocol over WebSocket: a ``trio.abc.Stream`` made of binary messages.

A session reads and writes a byte stream; the wire profile puts that stream
into binary WebSocket messages, each carrying one or more *whole* protocol
messages back to back. :class:`WebSocketStream` is the adapter, written on
wsproto (sans-I/O) rather than on trio-websocket, because:

* the session already is the reader and the writer: wsproto's events map
  straight onto ``receive_some`` / ``send_all`` with no extra task, queue or
  copy per message (trio-websocket adds a reader task and a channel, and
  would join each message into one buffer before we could parse any of it);
* every limit is ours and explicit: the read size is the session's
  ``read_size``, and an incoming message is counted as it arrives and
  refused past ``limits.max_message_size`` without ever being buffered;
* the server's HTTP front (``_http.py``) has parsed the request head with
  h11 already, and wsproto can take over from those headers.

Sending. Each ``send_all`` is one WebSocket message. The session's writer
hands over whole protocol messages (``Connection.data_to_send``), about
``write_size`` bytes, possibly past it by one message. So a WebSocket
session writes with :func:`websocket_config`'s smaller ``write_size``: the
write size plus the largest message the scheduler ends a batch with (a
split part or an unsplit element, at most ``split_threshold`` here, plus
its header) stays within
:data:`MAX_OUTGOING_MESSAGE` (256 KiB). Anything larger that still reaches
``send_all`` (a burst of control messages, which are taken whole) is cut at
protocol message boundaries into several WebSocket messages.

Receiving. Binary message payloads are handed to the session as they
arrive, in read-sized pieces: since every message holds whole protocol
messages, their concatenation is the byte stream the session parses. A text
message, a message larger than the limit, or a frame that breaks RFC 6455
(wsproto reports those as a close of its own, the connection still open)
is the peer breaking the protocol: ``receive_some`` raises
:class:`RemoteProtocolError`, the session says goodbye naming it, and
``aclose`` sends the matching close code (1003, 1009; 1002 or 1007). Pings are answered (only the latest, as RFC 6455 allows), sharing the
send lock with the writer so frames never interleave.

One read is handled in steps. wsproto parses a frame in about 8 µs
whatever its size, so a read of 256 KiB of the smallest frames (7 bytes:
a one-byte fragment, masked) is 37,000 frames, 0.3 s of one step of the
run loop in which no other task runs. ``receive_some`` takes at most
:data:`MAX_EVENTS_PER_STEP` events from wsproto per step and lets the
other tasks run between (a checkpoint); the rest stay in wsproto, in
order, and nothing more is read from the transport until they are taken.
A stream of ordinary messages (a few large frames per read) never comes
near the bound. A message made of many tiny fragments is not refused: a
peer can send as many tiny *messages* instead, at the same cost per byte,
so the bound per step is what protects the others, whatever the frames.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterator

import msgpack
import trio
from wsproto import ConnectionType, WSConnection
from wsproto.connection import ConnectionState
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Event,
    Ping,
    RejectConnection,
    RejectData,
    Request,
    TextMessage,
)
from wsproto.utilities import ProtocolError as WebSocketProtocolError

from ._config import SessionConfig
from ._errors import RemoteProtocolError, describe_error
from ._url import Endpoint
from .protocol import MESSAGE_HEADER_BOUND

__all__ = [
    "SUBPROTOCOL",
    "MAX_OUTGOING_MESSAGE",
    "MAX_EVENTS_PER_STEP",
    "WebSocketStream",
    "websocket_config",
    "open_websocket_client",
]

KiB = 1024

#: How a browser, which cannot set ``Authorization`` on a WebSocket, offers a
#: bearer token: a second subprotocol ``rstreams.bearer.TOKEN`` beside
#: ``rstreams.v0`` (the server never chooses it).
BEARER_SUBPROTOCOL_PREFIX = "rstreams.bearer."

#: The WebSocket subprotocol of wire profile v0.
SUBPROTOCOL = "rstreams.v0"

#: No WebSocket message we send is larger than this (wire profile advice, so
#: that a browser's receive path never holds more than this per message).
MAX_OUTGOING_MESSAGE = 256 * KiB

#: The most wsproto events (frames, or the parts of a frame that came in
#: pieces) handled in one step of the run loop before the other tasks get a
#: turn: about 0.5 ms of the smallest frames (8 µs each), and a checkpoint
#: (4 µs) per 64 frames costs them 1%. A read of ordinary messages has a
#: few events: one step, as before.
MAX_EVENTS_PER_STEP = 64

# The smallest write size worth having, for when a huge part_size
# leaves no room under the bound (each part then goes alone, over it).
_MIN_WRITE_SIZE = 16 * KiB
# The response to a refused client handshake: how much of the body to read
# for the error message, and how long to read each piece.
_REJECT_BODY_LIMIT = 4 * KiB
_HANDSHAKE_READ_SIZE = 16 * KiB

# Close codes (RFC 6455 §7.4.1).
CLOSE_NORMAL = 1000
CLOSE_UNSUPPORTED_DATA = 1003
CLOSE_MESSAGE_TOO_BIG = 1009


def websocket_config(config: SessionConfig) -> SessionConfig:
    """``config`` with the part and write sizes that keep each WebSocket message ≤ 256 KiB.

    ``data_to_send(write_size)`` may end one message past ``write_size``; the
    largest such message is a split part (``part_size`` + header), so the
    write size is the bound minus that. Parts are therefore no larger than
    ``split_threshold`` here (64 KiB by default, not plain TCP's 256 KiB),
    which leaves a write size of 192 KiB - 64 with the defaults.
    """
    limits = config.limits.for_copied_writes()
    # An unsplit element may be as large as the threshold, a part as large
    # as part_size: a batch may end with either.
    room = MAX_OUTGOING_MESSAGE - max(limits.part_size, limits.split_threshold) - MESSAGE_HEADER_BOUND
    write_size = min(config.write_size, max(room, _MIN_WRITE_SIZE))
    if write_size == config.write_size and limits is config.limits:
        return config
    return dataclasses.replace(config, write_size=write_size, limits=limits)


def split_whole_messages(data: bytes | bytearray, bound: int) -> list[memoryview]:
    """Cut ``data`` (whole msgpack protocol messages) into runs of at most ``bound`` bytes.

    Cuts fall only between protocol messages; a single message larger than
    ``bound`` becomes a run of its own, and so does anything that does not
    parse as msgpack (never produced by a session; it goes out uncut).
    """
    view = memoryview(data)
    unpacker = msgpack.Unpacker(max_buffer_size=max(len(data), 1))
    unpacker.feed(data)
    runs: list[memoryview] = []
    start = end = 0
    while end < len(data):
        try:
            unpacker.skip()
        except Exception:  # msgpack's parse errors have no common base class
            boundary = len(data)
        else:
            boundary = unpacker.tell()
        if boundary - start > bound and end > start:
            runs.append(view[start:end])
            start = end
        end = boundary
    if end > start:
        runs.append(view[start:end])
    return runs


class WebSocketStream(trio.abc.Stream):
    """A byte stream over an open WebSocket: binary messages out, payloads in.

    Args:
        stream: the transport the handshake was done on (it is owned from
            now on, and closed by :meth:`aclose`).
        connection: the wsproto connection, after the handshake.
        max_message_size: the largest incoming message accepted.
        subprotocol: what the handshake agreed on (None: no subprotocol).
        trailing: bytes read past the handshake.
        bearer_token: a token the upgrade request carried (server side), for
            the server's authenticate hook when the hello carries none.
        peer_name: the peer's ``host:port`` as read before the handshake
            (None: read from the socket when asked), which logs keep for a
            peer whose socket is gone by then.

    One task may send and one may receive at the same time (the session's
    writer and reader).
    """

    def __init__(
        self,
        stream: trio.abc.Stream,
        connection: WSConnection,
        *,
        max_message_size: int,
        subprotocol: str | None,
        trailing: bytes = b"",
        bearer_token: str | None = None,
        peer_name: str | None = None,
    ) -> None:
        self.transport = stream
        self.peer_name = peer_name
        self.subprotocol = subprotocol
        self.bearer_token = bearer_token
        self.max_message_size = max_message_size
        self._ws = connection
        self._send_lock = trio.StrictFIFOLock()
        self._incoming = bytearray()
        self._message_bytes = 0  # of the incoming message so far
        self._pong: bytes | None = None  # the answer to the latest ping, not yet sent
        # wsproto's events of the last read while some may be left (more
        # than MAX_EVENTS_PER_STEP); None once all are taken, and only then
        # is the transport read again.
        self._events: Iterator[Event] | None = None
        self._peer_closed = False
        self._error: RemoteProtocolError | None = None  # the peer broke the protocol here
        self._closed = False
        self._close_code = CLOSE_NORMAL
        self._close_reason = ""
        # Counters, for statistics and tests.
        self.messages_sent = 0
        self.messages_received = 0
        self.largest_message_sent = 0
        # Frames that arrived with the handshake are parsed now (the first
        # step's worth), so that the first receive_some does not wait for
        # more while they sit here.
        if trailing:
            connection.receive_data(trailing)
        self._events = connection.events()
        self._process_events()

    # ---- sending -------------------------------------------------------

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        """Send ``data`` (whole protocol messages) as one binary message.

        Data over :data:`MAX_OUTGOING_MESSAGE` goes as several messages, cut
        between protocol messages. Cancellation: as the transport's
        ``send_all`` (the stream is then broken); always checkpoints.

        Raises:
            trio.ClosedResourceError: this stream was closed.
            trio.BrokenResourceError: the peer closed the WebSocket, or the
                transport failed.
        """
        if self._closed:
            raise trio.ClosedResourceError("the WebSocket stream is closed")
        if self._ws.state is not ConnectionState.OPEN:
            await trio.lowlevel.checkpoint()
            raise trio.BrokenResourceError("the peer closed the WebSocket")
        if len(data) <= MAX_OUTGOING_MESSAGE:
            frames = self._ws.send(BytesMessage(data=bytes(data)))
            count, largest = 1, len(data)
        else:
            runs = split_whole_messages(bytes(data), MAX_OUTGOING_MESSAGE)
            frames = b"".join(self._ws.send(BytesMessage(data=bytes(run))) for run in runs)
            count, largest = len(runs), max(len(run) for run in runs)
        async with self._send_lock:
            await self.transport.send_all(frames)
            self.messages_sent += count
            self.largest_message_sent = max(self.largest_message_sent, largest)
            await self._send_pong()

    async def wait_send_all_might_not_block(self) -> None:
        await self.transport.wait_send_all_might_not_block()

    async def _send_pong(self) -> None:
        # Called holding the send lock.
        pong, self._pong = self._pong, None
        if pong is not None:
            await self.transport.send_all(pong)

    # ---- receiving ------------------------------------------------------

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        """Payload bytes of incoming binary messages; ``b""`` once the WebSocket closed.

        Raises:
            RemoteProtocolError: the peer sent a text message, a message
                larger than ``max_message_size``, or a frame that breaks
                RFC 6455. The close code that :meth:`aclose` will send says
                which (1003, 1009; 1002 or 1007 as wsproto found it).
            trio.ClosedResourceError / trio.BrokenResourceError: as the transport.

        Always checkpoints, and between steps of at most
        :data:`MAX_EVENTS_PER_STEP` frames of one read. Cancelled, it loses
        nothing: what was taken from wsproto is returned by the next call.
        """
        if self._closed:
            raise trio.ClosedResourceError("the WebSocket stream is closed")
        if self._incoming or self._error is not None or self._peer_closed:
            await trio.lowlevel.checkpoint()
        while not self._incoming and self._error is None and not self._peer_closed:
            if self._events is not None:
                # The rest of the last read, once the other tasks had a turn.
                await trio.lowlevel.checkpoint()
            else:
                data = await self.transport.receive_some(max_bytes)
                if not data:
                    self._peer_closed = True
                    break
                self._ws.receive_data(bytes(data))
                self._events = self._ws.events()
            self._process_events()
            # One pong per read, as before the reads were cut into steps.
            if self._pong is not None and self._events is None and not self._send_lock.locked():
                async with self._send_lock:
                    await self._send_pong()
        incoming = self._incoming
        if not incoming and self._error is not None:
            # Raised once whatever came before the offending message is read.
            raise self._error
        if max_bytes is None or len(incoming) <= max_bytes:
            self._incoming = bytearray()
            return incoming
        chunk = incoming[:max_bytes]
        del incoming[:max_bytes]
        return chunk

    def _process_events(self) -> None:
        # At most MAX_EVENTS_PER_STEP events; self._events is set again when
        # that many were taken, as wsproto may hold more. After an error or
        # the peer's close it stays None: nothing more is read.
        events, self._events = self._events, None
        if events is None:
            return
        taken = 0
        for event in itertools.islice(events, MAX_EVENTS_PER_STEP):
            taken += 1
            if type(event) is BytesMessage:
                self._message_bytes += len(event.data)
                if self._message_bytes > self.max_message_size:
                    self._fail(CLOSE_MESSAGE_TOO_BIG, f"WebSocket message larger than {self.max_message_size} bytes")
                    return
                self._incoming += event.data
                if event.message_finished:
                    self._message_bytes = 0
                    self.messages_received += 1
            elif type(event) is TextMessage:
                self._fail(CLOSE_UNSUPPORTED_DATA, "text WebSocket message (rstreams uses binary messages only)")
                return
            elif type(event) is Ping:
                self._pong = self._ws.send(event.response())
            elif type(event) is CloseConnection:
                if self._ws.state is ConnectionState.OPEN:
                    # Not the peer's close frame (that moves wsproto to
                    # REMOTE_CLOSING): a framing error wsproto reports as a
                    # close (an unmasked frame, a control frame over 125
                    # bytes, a reserved opcode...). The peer broke the
                    # protocol: said as such, and answered with its code.
                    self._fail(event.code, f"WebSocket framing error: {event.reason}")
                    return
                # The peer's close: end of stream; aclose answers it.
                self._peer_closed = True
                if event.code not in (CLOSE_NORMAL, 1005):
                    self._close_code = event.code
                return
        if taken == MAX_EVENTS_PER_STEP:
            self._events = events

    def _fail(self, code: int, message: str) -> None:
        self._close_code = code
        self._close_reason = message[:120]
        self._error = RemoteProtocolError(message)

    # ---- closing --------------------------------------------------------

    async def aclose(self) -> None:
        """Send a close frame if the WebSocket is still open, then close the transport.

        The close frame is skipped if another task is in the middle of
        sending (it gets ``ClosedResourceError``). Cancellation: the
        transport is closed all the same.
        """
        if self._closed:
            await trio.lowlevel.checkpoint()
            return
        self._closed = True
        try:
            if self._ws.state in (ConnectionState.OPEN, ConnectionState.REMOTE_CLOSING) and not self._send_lock.locked():
                close = self._ws.send(CloseConnection(code=self._close_code, reason=self._close_reason))
                async with self._send_lock:
                    await self.transport.send_all(close)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        finally:
            await self.transport.aclose()


async def open_websocket_client(stream: trio.abc.Stream, endpoint: Endpoint, *, config: SessionConfig) -> WebSocketStream:
    """Do the client's WebSocket handshake on ``stream``, offering ``rstreams.v0``.

    Raises:
        ConnectionRefusedError: the server answered with an HTTP status
            instead of switching protocols (403 for a refused origin, ...).
        ConnectionError: the server closed the connection or broke the
            handshake, or chose a subprotocol other than ``rstreams.v0``.
        TimeoutError: no answer within ``config.handshake_timeout``.
    """
    connection = WSConnection(ConnectionType.CLIENT)
    host = f"[{endpoint.host}]" if ":" in endpoint.host else endpoint.host
    request = Request(host=f"{host}:{endpoint.port}", target=endpoint.path, subprotocols=[SUBPROTOCOL])
    try:
        return await _client_handshake(stream, connection, request, config)
    except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
        # Often a TLS failure (an untrusted certificate), said by the cause.
        raise ConnectionError(f"WebSocket handshake failed: {describe_error(exc)}") from exc


async def _client_handshake(stream: trio.abc.Stream, connection: WSConnection, request: Request, config: SessionConfig) -> WebSocketStream:
    with trio.move_on_after(config.handshake_timeout):
        await stream.send_all(connection.send(request))
        status: int | None = None
        body = bytearray()
        while True:
            data = await stream.receive_some(_HANDSHAKE_READ_SIZE)
            if not data and status is None:
                raise ConnectionError("the server closed the connection during the WebSocket handshake")
            try:
                connection.receive_data(bytes(data) if data else None)
                for event in connection.events():
                    if isinstance(event, AcceptConnection):
                        if event.subprotocol not in (None, SUBPROTOCOL):
                            raise ConnectionError(f"the server chose the WebSocket subprotocol {event.subprotocol!r}")
                        return WebSocketStream(
                            stream,
                            connection,
                            max_message_size=config.limits.max_message_size,
                            subprotocol=event.subprotocol,
                        )
                    if isinstance(event, RejectConnection):
                        status = event.status_code
                        if not event.has_body:
                            raise _refused(status, body)
                    elif isinstance(event, RejectData):
                        body += event.data[: _REJECT_BODY_LIMIT - len(body)]
                        if event.body_finished:
                            raise _refused(status, body)
            except WebSocketProtocolError as exc:
                raise ConnectionError(f"WebSocket handshake failed: {exc}") from None
            if not data:  # a refusal whose body ended with the connection
                raise _refused(status, body)
    raise TimeoutError(f"no WebSocket handshake answer within {config.handshake_timeout:g} s")


def _refused(status: int | None, body: bytes | bytearray) -> ConnectionRefusedError:
    text = bytes(body).decode("utf-8", "replace").strip()
    return ConnectionRefusedError(f"WebSocket upgrade refused: HTTP {status}" + (f": {text}" if text else ""))
