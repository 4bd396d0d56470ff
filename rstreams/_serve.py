"""Server entry points: serve an app over any stream, or over TCP / TLS."""

from __future__ import annotations

import logging
import ssl
from typing import NoReturn

import trio

from ._config import DEFAULT_CONFIG, SessionConfig
from ._publish import Router
from ._session import open_stream_session
from .protocol import Connection

__all__ = ["serve_stream", "serve_tcp"]

logger = logging.getLogger("rstreams")


async def serve_stream(app: Router, stream: trio.abc.Stream, *, config: SessionConfig = DEFAULT_CONFIG) -> None:
    """Serve ``app`` over one connected stream until the session closes.

    A misbehaving peer ends only this session; nothing escapes from here but
    cancellation.
    """
    try:
        async with open_stream_session(stream, app=app, config=config) as session:
            await session.wait_closed()
    except Exception:
        logger.exception("session ended with an unexpected error")


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


async def serve_tcp(
    app: Router,
    host: str | None,
    port: int,
    ssl_context: ssl.SSLContext | None = None,
    *,
    config: SessionConfig = DEFAULT_CONFIG,
    max_connections: int | None = None,
    handler_nursery: trio.Nursery | None = None,
    task_status: trio.TaskStatus[list[trio.SocketListener | trio.SSLListener[trio.SocketStream]]] = trio.TASK_STATUS_IGNORED,
) -> NoReturn:
    """Serve ``app`` on TCP (or TLS, with ``ssl_context``) until cancelled.

    Use ``await nursery.start(serve_tcp, app, "127.0.0.1", 0)``: it returns
    the listeners, so port 0 lets the kernel pick (read it from
    ``listeners[0].socket.getsockname()``, or ``.transport_listener.socket``
    for TLS).

    Args:
        host: the address to bind (None: all interfaces).
        max_connections: at most this many sessions at once; a connection
            beyond it is answered hello + goodbye ("server busy") and closed.
        handler_nursery: where per-connection tasks run (default: inside).
    """
    tcp_listeners = await trio.open_tcp_listeners(port, host=host)
    listeners: list[trio.SocketListener | trio.SSLListener[trio.SocketStream]]
    if ssl_context is not None:
        listeners = [trio.SSLListener(listener, ssl_context, https_compatible=True) for listener in tcp_listeners]
    else:
        listeners = list(tcp_listeners)
    limiter = trio.CapacityLimiter(max_connections) if max_connections else None

    async def handle(stream: trio.abc.Stream) -> None:
        if limiter is None:
            await serve_stream(app, stream, config=config)
            return
        try:
            limiter.acquire_nowait()
        except trio.WouldBlock:
            await _refuse(stream, f"server busy: {max_connections} connections already open")
            return
        try:
            await serve_stream(app, stream, config=config)
        finally:
            limiter.release()

    await trio.serve_listeners(handle, listeners, handler_nursery=handler_nursery, task_status=task_status)  # type: ignore[arg-type]
