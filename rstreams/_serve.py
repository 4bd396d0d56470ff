"""Server entry points: serve an app over any stream, over TCP / TLS, or over WebSocket.

A :class:`Server` keeps track of its live sessions so that shutting down is
graceful: stop accepting, say goodbye on every session (each drains what it
has queued first, within its drain timeout), then close. ``serve_tcp`` is the
one-call form for when no graceful shutdown is needed beyond cancellation.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import socket
import ssl
import time
from collections.abc import Iterable, Sequence
from functools import partial
from pathlib import Path
from typing import Any, NoReturn

import trio

from ._accept import serve_listeners
from ._admission import HANDSHAKE_GRACE, Admissions
from ._auth import Authenticate, Authorize
from ._config import DEFAULT_SERVER_CONFIG, SessionConfig
from ._event_loop import require_trio
from ._http import DEFAULT_STATIC_DIR, Endpoint, OriginPolicy, Site, accept_http, listener_origins
from ._endpoints import operator_endpoints
from ._logs import PeerLogThrottles, log_connection_refused, log_session_close, log_session_open, peer_address, transport_name
from ._stats import ServerTotals, StatisticsSource, server_statistics
from ._snapshots import SharedStatistics
from ._stats_publisher import STATS_PUBLISHER, ServerRoutes, stats_route
from ._publish import Router
from ._session import Session, open_stream_session
from ._websocket import websocket_config
from .protocol import Connection

__all__ = ["Server", "Listener", "serve_stream", "serve_tcp", "serve_websocket", "with_tls", "listener_port", "listener_address", "listener_url"]

logger = logging.getLogger("rstreams")

#: Connections the ``--metrics`` listener answers at once; a newcomer beyond
#: them closes the oldest (a scrape or a health check takes milliseconds).
METRICS_CONNECTIONS = 64

Listener = trio.SocketListener | trio.SSLListener[trio.SocketStream]


class Server:
    """Serves an app to every connection, and can close them all gracefully.

    Example::

        server = rstreams.Server(app)
        async with trio.open_nursery() as nursery:
            listeners = await nursery.start(server.serve_tcp, "127.0.0.1", 9000)
            ...
            await server.aclose()       # goodbye to every session
            nursery.cancel_scope.cancel()

    Besides the app's publishers, every server publishes ``$stats``: its
    :meth:`statistics` as a JSON record once a second (see docs/operating.md).

    Args:
        app: the publishers to serve.
        config: settings of each session (None: ``DEFAULT_SERVER_CONFIG``, the
            defaults plus a 300 s idle timeout).
        max_connections: at most this many sessions at once; a connection
            beyond it is answered hello + goodbye ("server busy") and closed,
            unless a connection still waits for its peer's hello: then the
            oldest such is closed to make room (silent sockets must not hold
            every place for the handshake timeout).
        authenticate: ``async def (token, peer) -> Principal | None``, run
            once each peer's hello is in (see ``SessionConfig.authenticate``);
            None refuses the peer with goodbye "authentication failed".
        authorize: ``def (principal, publisher_name) -> bool``, per
            subscribe; False answers onError "not authorized: NAME".
    """

    def __init__(
        self,
        app: Router,
        *,
        config: SessionConfig | None = None,
        max_connections: int | None = None,
        authenticate: Authenticate | None = None,
        authorize: Authorize | None = None,
    ) -> None:
        if max_connections is not None and (type(max_connections) is not int or max_connections <= 0):
            raise ValueError(f"max_connections must be a positive int or None, got {max_connections!r}")
        # The snapshots peers ask for ($stats, /stats, /metrics): shared
        # within a CPU budget, however many ask.
        self._snapshots = SharedStatistics(self.statistics)
        # Paces the lines about peers' streams, per peer host (not per
        # connection: reconnecting must not buy a new burst).
        self._log_throttles = PeerLogThrottles()
        # What sessions resolve names with: self.app, then $stats.
        self._routes = ServerRoutes(app, {STATS_PUBLISHER: stats_route(self._snapshots)})
        self.config = DEFAULT_SERVER_CONFIG if config is None else config
        if authenticate is not None or authorize is not None:
            self.config = dataclasses.replace(
                self.config,
                authenticate=authenticate or self.config.authenticate,
                authorize=authorize or self.config.authorize,
            )
        self.max_connections = max_connections
        self._sessions: set[Session] = set()
        # Connections admitted, counted before their session opens; and the
        # WebSocket listeners' connections until their request is read.
        self._admissions = Admissions()
        self._http_admissions = Admissions()
        self._closing = False
        # For statistics: each open session's transport and opening time,
        # what ended sessions counted, and the bridges' services.
        self._described: dict[Session, tuple[str, float]] = {}
        self._totals = ServerTotals()
        self._bridges: dict[str, Sequence[StatisticsSource]] = {}

    @property
    def app(self) -> Router:
        """The publishers served; assign another router to serve it from the next subscribe on."""
        return self._routes.app

    @app.setter
    def app(self, app: Router) -> None:
        self._routes.serve(app)

    @property
    def sessions(self) -> frozenset[Session]:
        """The sessions open right now."""
        return frozenset(self._sessions)

    async def serve_stream(self, stream: trio.abc.Stream) -> None:
        """Serve one connected stream until its session closes.

        A misbehaving peer ends only this session; nothing escapes from here
        but cancellation.
        """
        await self._serve_session(stream, self.config)

    async def _serve_session(self, stream: trio.abc.Stream, config: SessionConfig) -> None:
        if self._closing:
            self._totals.connection_refused()
            await _refuse(stream, "server shutting down")
            return
        # Reserve the place before the first await, so that connections
        # arriving together cannot all pass the check.
        admission = self._admissions.admit(self.max_connections)
        if admission is None:
            self._totals.connection_refused()
            await _refuse(stream, f"server busy: {self.max_connections} connections already open")
            return
        transport = transport_name(stream)
        opened: Session | None = None
        try:
            with self._admissions.held(admission):
                if isinstance(stream, trio.SSLStream) and await speaks_plain(stream, config.handshake_timeout):
                    # A tcp:// client at a TLS port: answered in its own terms.
                    self._totals.connection_refused()
                    await _refuse(stream.transport_stream, TLS_PORT_REASON)
                    return
                async with open_stream_session(stream, app=self._routes, config=config) as session:
                    opened = session
                    admission.handshake_done_when(session.hello_received)
                    admission.close_with(session._close_for_newcomer)
                    self._sessions.add(session)
                    self._described[session] = (transport, time.monotonic())
                    self._totals.session_opened(transport)
                    peer = session.peer_address
                    session.share_log_throttle(self._log_throttles.for_peer(peer))
                    log_session_open(peer, transport)
                    try:
                        await session.wait_closed()
                    finally:
                        self._sessions.discard(session)
                        not_logged = session.take_lines_not_logged()
                        log_session_close(
                            peer,
                            transport,
                            admission.evicted or session.close_reason or "session cancelled",
                            detail=f"({not_logged} lines about its host's streams not logged since the last)" if not_logged else "",
                        )
        except Exception:
            logger.exception("session ended with an unexpected error")
        finally:
            if opened is not None:
                # Once its tasks have all ended, so that every publication's
                # elements are counted: then its figures move to the totals.
                del self._described[opened]
                self._totals.session_ended(opened, transport)

    def statistics(self) -> dict[str, Any]:
        """A fresh snapshot of the whole server, as plain data.

        What ``/stats``, ``/metrics`` and ``$stats`` serve, with ``time``
        added; they share snapshots within a CPU budget (``_snapshots``),
        while this call, the application's own, always takes a new one.

        Sessions, streams, outstanding demand, bytes and elements, in total,
        per transport and per session; the topics mounted on the app (lag
        and drops); the bridges added with :meth:`add_bridge_services`. The
        keys are listed in docs/operating.md. Costs one pass over the open
        sessions and streams; nothing is counted per element for it.
        """
        sessions = [(session, *described) for session, described in self._described.items()]
        return server_statistics(sessions, self._totals, self.app, accepting=not self._closing, bridges=self._bridges)

    def add_bridge_services(self, name: str, services: Sequence[StatisticsSource]) -> None:
        """Report a bridge's services (``rstreams serve --emp``) in :meth:`statistics`.

        Each service with a ``statistics()`` method answering a mapping of
        counts (connections, bytes_received, ...) adds them under ``name``.
        """
        self._bridges[name] = list(services)

    def operator_endpoints(self) -> dict[str, Endpoint]:
        """``/healthz``, ``/stats`` and ``/metrics`` for an HTTP listener (see ``_endpoints``)."""
        return operator_endpoints(self._snapshots, lambda: not self._closing)

    async def serve_metrics(
        self,
        host: str | None,
        port: int,
        *,
        task_status: trio.TaskStatus[list[Listener]] = trio.TASK_STATUS_IGNORED,
    ) -> NoReturn:
        """Serve ``/healthz``, ``/stats`` and ``/metrics`` over HTTP until cancelled.

        For servers without a WebSocket listener (whose HTTP front answers
        the same paths): a listener with nothing else, no files, no upgrades.
        Use ``await nursery.start(server.serve_metrics, "127.0.0.1", 0)``.
        """
        site = Site(
            static_dir=None,
            origins=OriginPolicy(),
            max_message_size=self.config.limits.max_message_size,
            endpoints=self.operator_endpoints(),
            upgrades=False,
        )
        listeners: list[Listener] = list(await trio.open_tcp_listeners(port, host=host))
        # Every connection here is in its handshake until answered, so a
        # newcomer finds a place unless METRICS_CONNECTIONS came within the
        # last HANDSHAKE_GRACE: sockets that send nothing hold at most that
        # many descriptors, not until the request-head timeout, and a health
        # check gets through.
        admissions = Admissions()

        async def answer(stream: trio.abc.Stream) -> None:
            admission = admissions.admit(METRICS_CONNECTIONS)
            if admission is None:
                await trio.aclose_forcefully(stream)  # (a burst beyond them: the client tries again)
                return
            with admissions.held(admission):
                await accept_http(stream, site)  # never an upgrade: upgrades=False

        await serve_listeners(answer, listeners, task_status=task_status)

    async def serve_tcp(
        self,
        host: str | None,
        port: int,
        ssl_context: ssl.SSLContext | None = None,
        *,
        handler_nursery: trio.Nursery | None = None,
        task_status: trio.TaskStatus[list[Listener]] = trio.TASK_STATUS_IGNORED,
    ) -> NoReturn:
        """Accept TCP (or TLS, with ``ssl_context``) connections until cancelled.

        Use ``await nursery.start(server.serve_tcp, "127.0.0.1", 0)``: it
        returns the listeners, so port 0 lets the kernel pick (read it with
        :func:`listener_port`). For a graceful shutdown, pass a
        ``handler_nursery`` that outlives this task: then cancelling the
        accept loop leaves the sessions running until :meth:`aclose` has said
        goodbye on each.
        """
        require_trio("Server.serve_tcp")
        listeners = with_tls(await trio.open_tcp_listeners(port, host=host), ssl_context)
        await serve_listeners(self.serve_stream, listeners, handler_nursery=handler_nursery, task_status=task_status)

    async def serve_websocket(
        self,
        host: str | None,
        port: int,
        ssl_context: ssl.SSLContext | None = None,
        *,
        allowed_origins: Iterable[str] = (),
        static_dir: str | os.PathLike[str] | None = None,
        handler_nursery: trio.Nursery | None = None,
        task_status: trio.TaskStatus[list[Listener]] = trio.TASK_STATUS_IGNORED,
    ) -> NoReturn:
        """Accept WebSocket (``ws://``, or ``wss://`` with ``ssl_context``) connections until cancelled.

        One HTTP listener does two jobs: a WebSocket upgrade at ``/`` becomes
        a session (binary messages, subprotocol ``rstreams.v0``), and
        ``GET /NAME`` serves the file ``NAME`` of ``static_dir`` (``GET /``
        serves ``index.html``), so a browser can load the client and its
        page from the server it then connects to. See docs/websocket.md.

        Use ``await nursery.start(server.serve_websocket, "127.0.0.1", 0)``:
        it returns the listeners (read the port with :func:`listener_port`).
        Sessions count against ``max_connections`` and get their goodbye
        from :meth:`aclose` like TCP ones.

        Args:
            allowed_origins: origins (``scheme://host:port``, or ``"*"``)
                allowed besides the listener's own; an upgrade with any other
                ``Origin`` header is refused with 403. Requests without
                ``Origin`` (not from a browser) are allowed.
            static_dir: the directory of static files (None: the package's
                ``rstreams/web``); only files directly in it are served, and
                never a path built from the request (``..`` finds nothing).
                The browser client's modules (``/rstreams.js`` and its
                neighbours, ``CLIENT_MODULES``) are served from the package
                too unless the directory has its own, so a page of yours
                can import the client from the origin it connects to.
            handler_nursery: as for :meth:`serve_tcp`.

        Raises:
            ValueError: an entry of ``allowed_origins`` is not an origin.
            OSError: the address cannot be listened on.
        """
        require_trio("Server.serve_websocket")
        policy_extra = list(allowed_origins)
        OriginPolicy((), policy_extra)  # fail before listening on a bad origin
        tcp_listeners = await trio.open_tcp_listeners(port, host=host)
        addresses = [(str(name[0]), int(name[1])) for name in (listener.socket.getsockname() for listener in tcp_listeners)]
        own = listener_origins(host, addresses, secure=ssl_context is not None)
        site = Site(
            static_dir=DEFAULT_STATIC_DIR if static_dir is None else Path(static_dir),
            client_dir=None if static_dir is None else DEFAULT_STATIC_DIR,
            origins=OriginPolicy(own, policy_extra),
            max_message_size=self.config.limits.max_message_size,
            endpoints=self.operator_endpoints(),
        )
        listeners = with_tls(tcp_listeners, ssl_context)
        handler = partial(self._serve_http, site)
        await serve_listeners(handler, listeners, handler_nursery=handler_nursery, task_status=task_status)

    async def _serve_http(self, site: Site, stream: trio.abc.Stream) -> None:
        # Until its request has been read, a connection holds one of the
        # places of the HTTP front, as many as the sessions' but apart from
        # them: sockets that send no request (or half of one) cannot hold
        # more descriptors than that, and never a session's place. A full
        # front closes the oldest past HANDSHAKE_GRACE for a newcomer; one
        # that finds no place has HANDSHAKE_GRACE for its request. An
        # upgrade then takes a session's place as a TCP connection does
        # (refused with goodbye "server busy", which a page can show).
        admission = None if self._closing else self._http_admissions.admit(self.max_connections)
        if admission is None:
            site = dataclasses.replace(site, head_timeout=min(site.head_timeout, HANDSHAKE_GRACE))
            websocket = await accept_http(stream, site)
        else:
            peer = peer_address(stream)
            websocket = None
            with self._http_admissions.held(admission):
                websocket = await accept_http(stream, site)  # (cancelled: the stream is closed)
            if websocket is None and admission.evicted is not None:
                transport = "wss" if isinstance(stream, trio.SSLStream) else "ws"
                log_connection_refused(peer, transport, admission.evicted)
        if websocket is not None:
            await self._serve_session(websocket, websocket_config(self.config))

    async def aclose(self, reason: str = "server shutting down") -> None:
        """Say goodbye on every session and wait until they have closed.

        New connections are refused from now on. Each session drains its
        queued elements first (bounded by its drain timeout). Cancellation:
        the sessions still open are closed forcefully.
        """
        self._closing = True
        async with trio.open_nursery() as nursery:
            for session in list(self._sessions):
                nursery.start_soon(session.aclose, reason)


def with_tls(tcp_listeners: list[trio.SocketListener], ssl_context: ssl.SSLContext | None) -> list[Listener]:
    """The listeners as they are, or wrapped in TLS when there is a context.

    ``https_compatible``: our goodbye (or the bridged protocol's own ending),
    not TLS close_notify, marks a clean end.
    """
    if ssl_context is None:
        return list(tcp_listeners)
    return [trio.SSLListener(listener, ssl_context, https_compatible=True) for listener in tcp_listeners]


def listener_port(listener: Listener) -> int:
    """The TCP port a listener returned by ``serve_tcp`` is bound to."""
    return listener_address(listener)[1]


def listener_address(listener: Listener) -> tuple[str, int]:
    """The (host, port) a TCP or TLS listener is bound to."""
    transport = listener.transport_listener if isinstance(listener, trio.SSLListener) else listener
    assert isinstance(transport, trio.SocketListener)
    host, port = transport.socket.getsockname()[:2]
    return str(host), int(port)


def listener_url(listener: Listener, scheme: str, path: str = "") -> str:
    """``scheme://host:port`` (IPv6 in brackets) for a listener, then ``path``."""
    host, port = listener_address(listener)
    host = f"[{host}]" if ":" in host else host
    return f"{scheme}://{host}:{port}{path}"


#: The goodbye a plain (tcp://) client gets from a TLS port, in plain rstreams.
TLS_PORT_REASON = "this port speaks TLS: use tls://"

# A TLS client's first byte is 0x16 (a handshake record); an rstreams hello
# starts 0x93 (a 3-item msgpack array).
_TLS_HANDSHAKE_RECORD = 0x16


async def speaks_plain(stream: trio.SSLStream[Any], timeout: float) -> bool:
    """Whether the client of a TLS server's ``stream`` speaks something else.

    Peeks (``MSG_PEEK``: the bytes stay for the TLS handshake) at the
    client's first byte, within ``timeout``, before TLS reads it: anything
    but a TLS handshake record is a client that does not speak TLS (a
    ``tcp://`` URL at a ``tls://`` port), which would otherwise see the
    connection close without a word (OpenSSL sends no alert there). The
    server may then refuse it in the plain protocol, saying which scheme to
    use. False when nothing came in time, or for a stream without a socket.
    """
    transport = stream.transport_stream
    if not isinstance(transport, trio.SocketStream):
        return False
    first = b""
    with trio.move_on_after(timeout):
        try:
            first = await transport.socket.recv(1, socket.MSG_PEEK)
        except OSError:
            return False
    return bool(first) and first[0] != _TLS_HANDSHAKE_RECORD


async def _refuse(stream: trio.abc.Stream, reason: str) -> None:
    # Say hello and goodbye (the protocol's way to refuse), then close.
    log_connection_refused(peer_address(stream), transport_name(stream), reason)
    connection = Connection()
    connection.send_goodbye(reason)
    with trio.move_on_after(1):
        try:
            await stream.send_all(connection.data_to_send())
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
    await trio.aclose_forcefully(stream)


async def serve_stream(app: Router, stream: trio.abc.Stream, *, config: SessionConfig | None = None) -> None:
    """Serve ``app`` over one connected stream until the session closes."""
    require_trio("serve_stream")
    await Server(app, config=config).serve_stream(stream)


async def serve_tcp(
    app: Router,
    host: str | None,
    port: int,
    ssl_context: ssl.SSLContext | None = None,
    *,
    config: SessionConfig | None = None,
    max_connections: int | None = None,
    handler_nursery: trio.Nursery | None = None,
    task_status: trio.TaskStatus[list[Listener]] = trio.TASK_STATUS_IGNORED,
) -> NoReturn:
    """Serve ``app`` on TCP (or TLS, with ``ssl_context``) until cancelled.

    Use ``await nursery.start(serve_tcp, app, "127.0.0.1", 0)``: it returns
    the listeners (see :func:`listener_port`). For a graceful shutdown with
    goodbye to every session, use :class:`Server`.

    Args:
        host: the address to bind (None: all interfaces).
        max_connections: at most this many sessions at once; a connection
            beyond it is answered hello + goodbye ("server busy") and closed.
        handler_nursery: where per-connection tasks run (default: inside).
    """
    require_trio("serve_tcp")
    server = Server(app, config=config, max_connections=max_connections)
    await server.serve_tcp(host, port, ssl_context, handler_nursery=handler_nursery, task_status=task_status)


async def serve_websocket(
    app: Router,
    host: str | None,
    port: int,
    ssl_context: ssl.SSLContext | None = None,
    *,
    allowed_origins: Iterable[str] = (),
    static_dir: str | os.PathLike[str] | None = None,
    config: SessionConfig | None = None,
    max_connections: int | None = None,
    handler_nursery: trio.Nursery | None = None,
    task_status: trio.TaskStatus[list[Listener]] = trio.TASK_STATUS_IGNORED,
) -> NoReturn:
    """Serve ``app`` over WebSocket (``wss://`` with ``ssl_context``) until cancelled.

    Use ``await nursery.start(serve_websocket, app, "127.0.0.1", 0)``; clients
    connect to ``ws://127.0.0.1:PORT/``. The same listener serves the static
    files of ``static_dir`` to browsers. See :meth:`Server.serve_websocket`
    for the arguments; for a graceful shutdown, use :class:`Server`.
    """
    require_trio("serve_websocket")
    server = Server(app, config=config, max_connections=max_connections)
    await server.serve_websocket(
        host,
        port,
        ssl_context,
        allowed_origins=allowed_origins,
        static_dir=static_dir,
        handler_nursery=handler_nursery,
        task_status=task_status,
    )
