"""Connecting a bridge: open the transport, start the connection's tasks, handshake.

Two of trio's entry shapes for every bridge: :func:`open_connection` (an
async context manager that owns the connection's tasks) and
:func:`start_connection` (the tasks run in the caller's nursery; the caller
closes the connection).
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TypeVar

import trio

from rstreams.support import caller_sees_its_own_exception

from ._connection import BridgeConnection

__all__ = ["open_tcp_stream", "start_connection", "open_connection"]

ConnectionT = TypeVar("ConnectionT", bound=BridgeConnection)  # type: ignore[type-arg]


async def open_tcp_stream(
    host: str,
    port: int,
    *,
    ssl_context: ssl.SSLContext | None = None,
    server_hostname: str | None = None,
) -> trio.abc.Stream:
    """A TCP connection to ``host:port``, in TLS when there is an ``ssl_context``.

    ``https_compatible``: the bridged protocol's own ending (bye, shutdown),
    not TLS close_notify, marks a clean end.

    Raises:
        OSError: the connection could not be made.
    """
    stream: trio.abc.Stream = await trio.open_tcp_stream(host, port)
    if ssl_context is not None:
        stream = trio.SSLStream(stream, ssl_context, server_hostname=server_hostname or host, https_compatible=True)
    return stream


async def start_connection(connection: BridgeConnection, nursery: trio.Nursery) -> None:  # type: ignore[type-arg]
    """Run ``connection``'s tasks in ``nursery``, then its handshake and keepalive.

    Raises:
        whatever the handshake raises (the connection is then closed).
    """
    await nursery.start(connection._run)
    try:
        await connection._handshake()
    except BaseException:
        with trio.CancelScope(shield=True):
            await connection.aclose()
        raise
    interval = connection.config.keepalive_interval
    # (Not for a connection that ended in the very read that finished its
    # handshake: its tasks are gone, and so is their nursery.)
    if interval is not None and connection._nursery is not None and connection._end is None:
        connection._nursery.start_soon(connection._keepalive, interval)
    idle_timeout = connection.config.idle_timeout
    if idle_timeout is not None and connection._nursery is not None and connection._end is None:
        connection._nursery.start_soon(connection._watch_idle, idle_timeout)


@asynccontextmanager
async def open_connection(connection: ConnectionT) -> AsyncIterator[ConnectionT]:
    """Start ``connection`` (tasks, handshake, keepalive) for the duration of the block.

    Leaving the block says goodbye and closes the transport (bounded by
    ``close_timeout``); cancellation closes it at once. The caller's own
    exception comes out of the block unwrapped.
    """
    with caller_sees_its_own_exception():
        async with trio.open_nursery() as nursery:
            await start_connection(connection, nursery)
            try:
                yield connection
            finally:
                await connection.aclose()
