"""What the runtime logs, and how an operator reads it.

Every record goes to the ``rstreams`` logger. The records an operator acts on
carry their facts as attributes (``extra=``), so that a log shipper gets
fields rather than a sentence to parse:

==============================  =====  ==========================================
``event``                       level  other fields
==============================  =====  ==========================================
``session_open``                info   ``peer``, ``transport``
``session_close``               info   ``peer``, ``transport``, ``reason``
``connection_refused``          info   ``peer``, ``transport``, ``reason``
``origin_refused``              info   ``peer``, ``origin``
``auth_refused``                info   ``peer`` (never the token)
``bad_input``                   info   ``peer``, ``reason`` (one line, no traceback;
                                       ``stream``, ``publisher`` when a publisher
                                       ended because of the peer's input)
``stream_subscribe``            debug  ``peer``, ``stream``, ``publisher``
``stream_cancel``               debug  ``peer``, ``stream``
``stream_complete``             debug  ``peer``, ``stream``
``stream_error``                debug  ``peer``, ``stream``, ``reason``
==============================  =====  ==========================================

The bridges' servers log their connections with the same two session
events, ``transport`` being the bridge's scheme (``emp``, ``mm2``, ...).

A peer's mistake (a protocol error, a bad parameter, an onError on a stream
a publisher relays, such as a topic's ``NAME/publish``) is the peer's
problem, not the server's: it is one ``info`` line naming the peer, never a
traceback. Text the peer chose (an error message, a publisher name) goes
into a line through :func:`peer_text`: control characters escaped, so that
it stays one line and cannot forge others, and cut to
:data:`PEER_TEXT_LOGGED` characters, so that a peer cannot fill the log.
Nothing is logged per element. Whether a session logs its streams (debug) is
decided when it opens, so that a subscribe costs no level check.

:class:`JsonFormatter` writes each record as one JSON object per line
(``rstreams serve --log-format json``).
"""

from __future__ import annotations

import json
import logging
import socket
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import trio

__all__ = [
    "logger",
    "JsonFormatter",
    "innermost_stream",
    "tcp_socket",
    "peer_address",
    "transport_name",
    "RECORD_FIELDS",
    "log_session_open",
    "log_session_close",
    "log_connection_refused",
    "peer_text",
    "PEER_TEXT_LOGGED",
    "LogThrottle",
    "PeerLogThrottles",
    "LOG_LINES_BURST",
    "LOG_LINES_INTERVAL",
]

logger = logging.getLogger("rstreams")

#: The ``extra=`` attributes the runtime's records may carry; the JSON
#: formatter copies those present into the object.
RECORD_FIELDS = ("event", "peer", "transport", "reason", "origin", "stream", "publisher", "not_logged")


#: How many characters of a peer's text a log line quotes: enough to read
#: what went wrong, while a peer's 60 KB error message costs the log one
#: short line.
PEER_TEXT_LOGGED = 300


#: Lines about one session's streams (a bad parameter, a publisher failing)
#: that reach the log at once; after them, one every LOG_LINES_INTERVAL
#: seconds, each saying how many were not logged since.
LOG_LINES_BURST = 20
LOG_LINES_INTERVAL = 10.0


class LogThrottle:
    """How many lines about one peer's streams reach the log.

    A peer decides how often its streams fail: 64 pipelined subscribes with a
    bad parameter made 7,700 ``bad_input`` lines a second (1.2 MB/s, some
    100 GB a day) at ``--log-level info``, and a publisher that fails on a
    peer's input logs a traceback each time even at the default level. The
    first :data:`LOG_LINES_BURST` lines of a session (of a peer host, on a
    server: :class:`PeerLogThrottles`) are written; after them, one every
    :data:`LOG_LINES_INTERVAL` seconds, which says how many were not (its
    ``not_logged`` field), and a ``session_close`` line says how many were
    not logged since the last one.

    Args:
        burst: lines written before the pace applies.
        interval: seconds between two lines after the burst.
        clock: monotonic seconds (a test's own).
    """

    __slots__ = ("_left", "_interval", "_next_at", "_clock", "not_logged")

    def __init__(
        self, burst: int = LOG_LINES_BURST, interval: float = LOG_LINES_INTERVAL, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._left = burst
        self._interval = interval
        self._clock = clock
        self._next_at = 0.0
        #: Lines not logged since the last one that was.
        self.not_logged = 0

    def admit(self) -> int | None:
        """None: skip this line. Else write it, saying that the returned
        number of lines before it were not logged (usually 0)."""
        if self._left > 0:
            self._left -= 1
        else:
            now = self._clock()
            if now < self._next_at:
                self.not_logged += 1
                return None
            self._next_at = now + self._interval
        skipped, self.not_logged = self.not_logged, 0
        return skipped

    def take_not_logged(self) -> int:
        """The lines not logged since the last one written, counted as said
        from now on (a ``session_close`` line says them)."""
        skipped, self.not_logged = self.not_logged, 0
        return skipped


class PeerLogThrottles:
    """One :class:`LogThrottle` per peer host, for a server's sessions.

    A throttle per session was reset by every new connection: a peer that
    reconnected for each failure got 20 lines each time (675 KB of
    tracebacks a second from 119 connections a second). A server's sessions
    from one host share one throttle. At most ``hosts`` are remembered, the
    least recently used forgotten first, so that many hosts cost bounded
    memory (a forgotten host starts a new burst).
    """

    def __init__(self, hosts: int = 4096, **throttle: Any) -> None:
        self._hosts = hosts
        self._throttle = throttle
        self._by_host: OrderedDict[str, LogThrottle] = OrderedDict()

    def for_peer(self, peer: str) -> LogThrottle:
        """The throttle of ``peer``'s host (``peer``: ``host:port`` as logged)."""
        host = peer.rsplit(":", 1)[0] if ":" in peer else peer  # ("[::1]:5" -> "[::1]"; "-" stays)
        throttle = self._by_host.get(host)
        if throttle is None:
            if len(self._by_host) >= self._hosts:
                self._by_host.popitem(last=False)
            throttle = self._by_host[host] = LogThrottle(**self._throttle)
        else:
            self._by_host.move_to_end(host)
        return throttle


def peer_text(text: str, limit: int = PEER_TEXT_LOGGED) -> str:
    """``text`` that a peer chose, fit to quote in one log line.

    At most ``limit`` characters of it, then ``... (N more characters)`` if
    it was longer; every character that is not printable (newlines, other
    control characters, lone surrogates) and the backslash written as its
    Python escape (``\\n``, ``\\x1b``, ``\\\\``), so that the line stays one
    line and what looks like an escape in it is one.
    """
    cut = len(text) - limit
    if cut > 0:
        text = text[:limit]
    if not text.isprintable() or "\\" in text:
        text = "".join(
            character if character.isprintable() and character != "\\" else character.encode("unicode_escape").decode("ascii")
            for character in text
        )
    return f"{text}... ({cut} more characters)" if cut > 0 else text


def innermost_stream(stream: object) -> object:
    """The transport under a WebSocket or TLS stream, down to the socket
    stream (``stream`` itself when it wraps nothing)."""
    for _ in range(4):  # WebSocket over TLS over TCP is the deepest we build
        inner = getattr(stream, "transport", None) or getattr(stream, "transport_stream", None)
        if inner is None:
            break
        stream = inner
    return stream


def tcp_socket(stream: object) -> trio.socket.SocketType | None:
    """The TCP socket under ``stream`` (TLS and WebSocket unwrapped), for
    the options a connection sets on it; None for a stream with none
    (memory streams, pipes, Unix sockets) or one already closed."""
    inner = innermost_stream(stream)
    if not isinstance(inner, trio.SocketStream):
        return None
    sock = inner.socket
    try:
        if sock.family not in (socket.AF_INET, socket.AF_INET6):
            return None
    except OSError:
        return None
    return sock


def log_session_open(peer: str, transport: str, *, log: logging.Logger = logger, detail: str = "") -> None:
    """``session_open`` (info): ``session open: PEER over TRANSPORT[ DETAIL]``.

    The one wording of the session lines, for ``rstreams serve`` and every
    bridge's server alike (``log``: the logger to write to; ``detail``: more
    to say of the session, ``(link 3)``, after the transport).
    """
    fields = {"event": "session_open", "peer": peer, "transport": transport}
    log.info("session open: %s over %s%s", peer, transport, f" {detail}" if detail else "", extra=fields)


def log_session_close(peer: str, transport: str, reason: str, *, log: logging.Logger = logger, detail: str = "") -> None:
    """``session_close`` (info): ``session closed: PEER over TRANSPORT[ DETAIL]: REASON``.

    The reason is often the peer's own text (its goodbye, up to 64 KiB: a
    reconnecting peer made 36 MB of log a second with one), so it is quoted
    through :func:`peer_text`.
    """
    reason = peer_text(reason)
    fields = {"event": "session_close", "peer": peer, "transport": transport, "reason": reason}
    log.info("session closed: %s over %s%s: %s", peer, transport, f" {detail}" if detail else "", reason, extra=fields)


def log_connection_refused(peer: str, transport: str, reason: str, *, log: logging.Logger = logger) -> None:
    """``connection_refused`` (info): ``connection refused: PEER over TRANSPORT: REASON``."""
    reason = peer_text(reason)
    fields = {"event": "connection_refused", "peer": peer, "transport": transport, "reason": reason}
    log.info("connection refused: %s over %s: %s", peer, transport, reason, extra=fields)


def peer_address(stream: object) -> str:
    """``host:port`` of the peer of ``stream`` (a socket, TLS or WebSocket stream).

    ``"-"`` for a stream without a socket (memory streams, pipes) or one
    already closed.
    """
    known = getattr(stream, "peer_name", None)  # (read before the socket could go: WebSocketStream)
    if isinstance(known, str):
        return known
    inner = innermost_stream(stream)
    if not isinstance(inner, trio.SocketStream):
        return "-"
    try:
        name = inner.socket.getpeername()
    except OSError:
        return "-"
    if isinstance(name, tuple) and len(name) >= 2:
        host = str(name[0])
        return f"[{host}]:{name[1]}" if ":" in host else f"{host}:{name[1]}"
    return str(name) or "-"


def transport_name(stream: object) -> str:
    """``tcp``, ``tls``, ``ws``, ``wss``, or ``stream`` for anything else."""
    secure = False
    websocket = False
    current = stream
    for _ in range(4):
        if type(current).__name__ == "WebSocketStream":
            websocket = True
        if isinstance(current, trio.SSLStream):
            secure = True
        inner = getattr(current, "transport", None) or getattr(current, "transport_stream", None)
        if inner is None:
            break
        current = inner
    if not isinstance(current, trio.SocketStream):
        return "stream"
    if websocket:
        return "wss" if secure else "ws"
    return "tls" if secure else "tcp"


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line.

    Keys: ``time`` (UTC, ISO 8601 with milliseconds), ``level``, ``logger``,
    ``message``, then each of :data:`RECORD_FIELDS` the record carries, and
    ``exception`` (the formatted traceback) when there is one.
    """

    def format(self, record: logging.LogRecord) -> str:
        created = time.gmtime(record.created)
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", created) + f".{int(record.msecs):03d}Z"
        entry: dict[str, object] = {
            "time": stamp,
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key in RECORD_FIELDS:
            value = record.__dict__.get(key)
            if value is not None:
                entry[key] = value
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False, default=str)
