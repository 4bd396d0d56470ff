"""Opening an EMP connection: over any trio stream, or over TCP / TLS.

Two of trio's entry shapes, from the kit: ``open_*`` (an async context
manager that owns the connection's tasks) and ``connect_emp(nursery, ...)``
(the tasks run in the caller's nursery; the caller closes the connection).
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import trio

from ..kit import open_connection, open_tcp_stream, start_connection
from ._config import DEFAULT_CONFIG, EmpConfig
from ._trio import EmpConnection

__all__ = ["open_emp_stream", "open_emp_connection", "connect_emp"]


@asynccontextmanager
async def open_emp_stream(stream: trio.abc.Stream, *, config: EmpConfig = DEFAULT_CONFIG) -> AsyncIterator[EmpConnection]:
    """Run EMP over a connected stream: handshake, then yield the connection.

    The connection owns the stream. Leaving the block says bye and closes it
    (bounded by ``config.close_timeout``); cancellation closes it at once.

    Raises:
        EmpTimeout: no hello in time. PeerError / EmpClosed: the peer sent
        error or bye instead of hello. UnsupportedVersionError: its version.
    """
    async with open_connection(EmpConnection(stream, config)) as connection:
        yield connection


@asynccontextmanager
async def open_emp_connection(
    host: str,
    port: int,
    *,
    ssl_context: ssl.SSLContext | None = None,
    server_hostname: str | None = None,
    config: EmpConfig = DEFAULT_CONFIG,
) -> AsyncIterator[EmpConnection]:
    """Connect to an EMP peer over TCP, or TLS with ``ssl_context``.

    Example::

        async with open_emp_connection("127.0.0.1", 7000) as emp:
            print(await emp.call(b"range?count=5"))

    Raises:
        OSError: the connection could not be made; and as :func:`open_emp_stream`.
    """
    stream = await open_tcp_stream(host, port, ssl_context=ssl_context, server_hostname=server_hostname)
    async with open_emp_stream(stream, config=config) as connection:
        yield connection


async def connect_emp(
    nursery: trio.Nursery,
    host: str,
    port: int,
    *,
    ssl_context: ssl.SSLContext | None = None,
    server_hostname: str | None = None,
    config: EmpConfig = DEFAULT_CONFIG,
) -> EmpConnection:
    """Connect and handshake; the connection's tasks run in ``nursery``.

    Close it with ``await connection.aclose()`` (bye, then close); until
    then it keeps ``nursery`` open.

    Raises:
        OSError: the connection could not be made; and as :func:`open_emp_stream`.
    """
    stream = await open_tcp_stream(host, port, ssl_context=ssl_context, server_hostname=server_hostname)
    connection = EmpConnection(stream, config)
    await start_connection(connection, nursery)
    return connection
