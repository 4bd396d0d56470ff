"""Server entry points: serve an app over any stream, over TCP / TLS, or over WebSocket.

A :class:`Server` keeps track of its live sessions so that shutting down is
graceful: stop accepting, say goodbye on every session (each drains what it
has queued first, within its drain timeout), then close. ``serve_tcp`` is the
one-call form for when no graceful shutdown is needed beyond cancellation.
"""

from __future__ import annotations

import logging
import os
import ssl
from collections.abc import Iterable
from functools import partial
from pathlib import Path
from typing import NoReturn

import trio

from ._accept import serve_listeners
from ._config import DEFAULT_SERVER_CONFIG, SessionConfig
from ._http import DEFAULT_STATIC_DIR, OriginPolicy, Site, accept_http, listener_origins
from ._publish import Router
from ._session import Session, open_stream_session
from ._websocket import websocket_config
from .protocol import Connection

__all__ = ["Server", "Listener", "serve_stream", "serve_tcp", "serve_websocket", "with_tls", "listener_port", "listener_address", "listener_url"]

logger = logging.getLogger("rstreams")

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

    Args:
        app: the publishers to serve.
        config: settings of each session (None: ``DEFAULT_SERVER_CONFIG``, the
            defaults plus a 300 s idle timeout).
        max_connections: at most this many sessions at once; a connection
            beyond it is answered hello + goodbye ("server busy") and closed.
    """

    def __init__(
        self,
        app: Router,
        *,
        config: SessionConfig | None = None,
        max_connections: int | None = None,
    ) -> None:
        if max_connections is not None and max_connections <= 0:
            raise ValueError("max_connections must be positive")
        self.app = app
        self.config = DEFAULT_SERVER_CONFIG if config is None else config
        self.max_connections = max_connections
        self._sessions: set[Session] = set()
        self._active = 0  # connections admitted, counted before their session opens
        self._closing = False

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
            await _refuse(stream, "server shutting down")
            return
        # Reserve the slot before the first await, so that connections
        # arriving together cannot all pass the check.
        if self.max_connections is not None and self._active >= self.max_connections:
            await _refuse(stream, f"server busy: {self.max_connections} connections already open")
            return
        self._active += 1
        try:
            async with open_stream_session(stream, app=self.app, config=config) as session:
                self._sessions.add(session)
                try:
                    await session.wait_closed()
                finally:
                    self._sessions.discard(session)
        except Exception:
            logger.exception("session ended with an unexpected error")
        finally:
            self._active -= 1

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
                ``rstreams/web``); only files directly in it are served.
            handler_nursery: as for :meth:`serve_tcp`.

        Raises:
            ValueError: an entry of ``allowed_origins`` is not an origin.
            OSError: the address cannot be listened on.
        """
        policy_extra = list(allowed_origins)
        OriginPolicy((), policy_extra)  # fail before listening on a bad origin
        tcp_listeners = await trio.open_tcp_listeners(port, host=host)
        addresses = [(str(name[0]), int(name[1])) for name in (listener.socket.getsockname() for listener in tcp_listeners)]
        own = listener_origins(host, addresses, secure=ssl_context is not None)
        site = Site(
            static_dir=DEFAULT_STATIC_DIR if static_dir is None else Path(static_dir),
            origins=OriginPolicy(own, policy_extra),
            max_message_size=self.config.limits.max_message_size,
        )
        listeners = with_tls(tcp_listeners, ssl_context)
        handler = partial(self._serve_http, site)
        await serve_listeners(handler, listeners, handler_nursery=handler_nursery, task_status=task_status)

    async def _serve_http(self, site: Site, stream: trio.abc.Stream) -> None:
        websocket = await accept_http(stream, site)
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


async def _refuse(stream: trio.abc.Stream, reason: str) -> None:
    # Say hello and goodbye (the protocol's way to refuse), then close.
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
