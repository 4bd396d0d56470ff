"""Accepting Epoxy connections: :class:`EpoxyServer` and :func:`serve_epoxy`.

A :class:`~bridges.kit.BridgeServer` (the kit keeps the live connections,
the connection limit and the graceful close); Epoxy adds how a connection
is opened (the server's side of the handshake, with the application's
``accept``), and how one is refused when the server is busy or shutting
down: read the client's config, answer ``CONNECTION_REJECTED`` with a
``bond.comm.Error`` saying why, close.
"""

from __future__ import annotations

import ssl
from collections.abc import Awaitable, Callable, Iterable
from contextlib import AbstractAsyncContextManager
from functools import partial
from typing import NoReturn

import trio

from rstreams.support import Listener

from ..kit import BridgeServer
from ._connect import open_epoxy_stream
from ._connection import Connection
from ._events import ConfigReceived
from ._errors import EpoxyError
from ._service import DEFAULT_MAX_CONCURRENCY, ServiceTable, serve_services
from ._settings import DEFAULT_SETTINGS, AcceptFunction, EpoxySettings
from ._state import Role
from ._structs import Error, ErrorCode, ProtocolErrorCode
from ._trio import EpoxyConnection

__all__ = ["EpoxyServer", "EpoxyHandler", "serve_epoxy"]

EpoxyHandler = Callable[[EpoxyConnection], Awaitable[None]]


class EpoxyServer(BridgeServer[EpoxyConnection]):
    """Runs ``handler`` on every Epoxy connection; can close them all.

    Args:
        handler: ``async def handler(connection)``; when it returns, the
            connection closes.
        settings: settings of each connection.
        accept: the application's say on each client (see
            :data:`AcceptFunction`); None accepts every client.
        max_connections: a connection beyond this many is rejected with
            ``CONNECTION_REJECTED`` (details: "server busy").
    """

    def __init__(
        self,
        handler: EpoxyHandler,
        *,
        settings: EpoxySettings = DEFAULT_SETTINGS,
        accept: AcceptFunction | None = None,
        max_connections: int | None = None,
    ) -> None:
        super().__init__(handler, max_connections=max_connections, protocol="Epoxy", handshake_timeout=settings.handshake_timeout)
        self.settings = settings
        self.accept = accept

    def _open(self, stream: trio.abc.Stream) -> AbstractAsyncContextManager[EpoxyConnection]:
        return open_epoxy_stream(stream, role=Role.SERVER, settings=self.settings, accept=self.accept)

    async def _refuse(self, stream: trio.abc.Stream, reason: str) -> None:
        # Read the client's config first (within close_timeout): closing a
        # socket with it unread would reset the connection, and the client
        # could lose the Error frame.
        machine = Connection(Role.SERVER, limits=self.settings.limits)
        code = ErrorCode.CONNECTION_SHUT_DOWN if "shutting down" in reason else ErrorCode.INTERNAL_SERVER_ERROR
        with trio.move_on_after(self.settings.close_timeout):
            try:
                while True:
                    data = await stream.receive_some(self.settings.receive_size)
                    machine.receive_data(data)
                    if not data or any(isinstance(event, ConfigReceived) for event in machine.events()):
                        break
            except (trio.BrokenResourceError, trio.ClosedResourceError, EpoxyError):
                pass
        try:
            machine.reject(ProtocolErrorCode.CONNECTION_REJECTED, Error(error_code=code, message=reason))
        except EpoxyError:
            pass  # the client broke the handshake: the machine queued its own Error frame
        with trio.move_on_after(self.settings.close_timeout):
            try:
                await stream.send_all(machine.data_to_send())
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass
        await trio.aclose_forcefully(stream)


async def serve_epoxy(
    host: str | None,
    port: int,
    *,
    services: Iterable[object] = (),
    handler: EpoxyHandler | None = None,
    accept: AcceptFunction | None = None,
    ssl_context: ssl.SSLContext | None = None,
    settings: EpoxySettings = DEFAULT_SETTINGS,
    max_connections: int | None = None,
    max_concurrency: int = DEFAULT_MAX_CONCURRENCY,
    handler_nursery: trio.Nursery | None = None,
    task_status: trio.TaskStatus[list[Listener]] = trio.TASK_STATUS_IGNORED,
) -> NoReturn:
    """Serve Epoxy on TCP (TLS with ``ssl_context``) until cancelled.

    Example::

        listeners = await nursery.start(partial(serve_epoxy, "127.0.0.1", 25188, services=[Calc()]))

    Args:
        services: ``@service`` objects answering every connection's requests
            and events (:func:`serve_services`).
        handler: instead of ``services``, ``async def handler(connection)``
            run on each connection.
        accept: the application's say on each client.
        max_concurrency: with ``services``, requests answered at once per
            connection.

    Use :class:`EpoxyServer` for a graceful shutdown of every connection.

    Raises:
        TypeError: both ``services`` and ``handler``, or a service object
            that is not a ``@service``.
        OSError: the address cannot be listened on.
    """
    services = tuple(services)
    if handler is None:
        table = ServiceTable(services)
        handler = partial(serve_services, services=table, max_concurrency=max_concurrency)
    elif services:
        raise TypeError("serve_epoxy takes services or a handler, not both")
    server = EpoxyServer(handler, settings=settings, accept=accept, max_connections=max_connections)
    await server.serve_tcp(host, port, ssl_context, handler_nursery=handler_nursery, task_status=task_status)
