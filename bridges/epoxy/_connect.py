"""Opening an Epoxy connection: over any trio stream, or over TCP / TLS.

Two of trio's entry shapes, from the kit: ``open_*`` (an async context
manager that owns the connection's tasks) and ``connect_epoxy(nursery, ...)``
(the tasks run in the caller's nursery; the caller closes the connection).
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import trio

from ..kit import open_connection, open_tcp_stream, start_connection
from ._settings import DEFAULT_PORT, DEFAULT_SETTINGS, AcceptFunction, EpoxySettings
from ._state import Role
from ._trio import EpoxyConnection

__all__ = ["open_epoxy_stream", "open_epoxy_connection", "connect_epoxy"]


@asynccontextmanager
async def open_epoxy_stream(
    stream: trio.abc.Stream,
    *,
    role: Role = Role.CLIENT,
    settings: EpoxySettings = DEFAULT_SETTINGS,
    accept: AcceptFunction | None = None,
) -> AsyncIterator[EpoxyConnection]:
    """Run Epoxy over a connected stream: handshake, then yield the connection.

    The connection owns the stream. Leaving the block closes our side and
    the transport (bounded by ``settings.close_timeout``); cancellation
    closes it at once.

    Args:
        role: ``Role.CLIENT`` (we send the first config) or ``Role.SERVER``.
        accept: a server's say on the client (see ``AcceptFunction``).

    Raises:
        EpoxyTimeout: no handshake in time (``TIMEOUT`` was sent).
        PeerProtocolError: the peer sent an Error frame instead
            (``CONNECTION_REJECTED``: a server refused us).
        RemoteProtocolError: the peer broke the handshake.
        EpoxyConnectionLost: the transport closed during the handshake.
        EpoxyClosed: a server rejected the client (``accept`` said no).
    """
    async with open_connection(EpoxyConnection(stream, role, settings, accept=accept)) as connection:
        yield connection


@asynccontextmanager
async def open_epoxy_connection(
    host: str,
    port: int = DEFAULT_PORT,
    *,
    ssl_context: ssl.SSLContext | None = None,
    server_hostname: str | None = None,
    settings: EpoxySettings = DEFAULT_SETTINGS,
) -> AsyncIterator[EpoxyConnection]:
    """Connect to an Epoxy server over TCP, or TLS with ``ssl_context``.

    Example::

        async with open_epoxy_connection("127.0.0.1", 25188) as epoxy:
            result = await epoxy.call("examples.calc.Calc", "Calculate", Params(x=67, y=87), Result)

    Raises:
        OSError: the connection could not be made; and as :func:`open_epoxy_stream`.
    """
    stream = await open_tcp_stream(host, port, ssl_context=ssl_context, server_hostname=server_hostname)
    async with open_epoxy_stream(stream, settings=settings) as connection:
        yield connection


async def connect_epoxy(
    nursery: trio.Nursery,
    host: str,
    port: int = DEFAULT_PORT,
    *,
    ssl_context: ssl.SSLContext | None = None,
    server_hostname: str | None = None,
    settings: EpoxySettings = DEFAULT_SETTINGS,
) -> EpoxyConnection:
    """Connect and handshake; the connection's tasks run in ``nursery``.

    Close it with ``await connection.aclose()``; until then it keeps
    ``nursery`` open.

    Raises:
        OSError: the connection could not be made; and as :func:`open_epoxy_stream`.
    """
    stream = await open_tcp_stream(host, port, ssl_context=ssl_context, server_hostname=server_hostname)
    connection = EpoxyConnection(stream, Role.CLIENT, settings)
    await start_connection(connection, nursery)
    return connection
