"""Accepting EMP connections: :class:`EmpServer` and :func:`serve_emp`.

A :class:`~bridges.kit.BridgeServer` (the kit keeps the live connections,
the connection limit and the graceful close); EMP adds how a connection is
opened, and how one is refused: hello, then error 0, then close.
"""

from __future__ import annotations

import ssl
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import NoReturn

import trio

from rstreams.support import Listener

from ..kit import BridgeServer
from ._config import DEFAULT_CONFIG, EmpConfig
from ._connect import open_emp_stream
from ._connection import Connection
from ._errors import ErrorCode
from ._trio import EmpConnection

__all__ = ["EmpServer", "EmpHandler", "serve_emp"]

EmpHandler = Callable[[EmpConnection], Awaitable[None]]


class EmpServer(BridgeServer[EmpConnection]):
    """Runs ``handler`` on every EMP connection; can close them all with bye.

    Args:
        handler: ``async def handler(connection)``; when it returns, the
            connection says bye and closes.
        config: settings of each connection.
        max_connections: a connection beyond this many gets hello, then
            error 0 "server busy", and is closed.
    """

    def __init__(self, handler: EmpHandler, *, config: EmpConfig = DEFAULT_CONFIG, max_connections: int | None = None) -> None:
        super().__init__(handler, max_connections=max_connections, protocol="EMP", handshake_timeout=config.handshake_timeout)
        self.config = config

    def _open(self, stream: trio.abc.Stream) -> AbstractAsyncContextManager[EmpConnection]:
        return open_emp_stream(stream, config=self.config)

    async def _refuse(self, stream: trio.abc.Stream, reason: str) -> None:
        # EMP's way to refuse: our hello (always first), then error 0, then close.
        machine = Connection(framing=self.config.framing, limits=self.config.limits)
        machine.send_error(ErrorCode.UNSPECIFIED, reason)
        with trio.move_on_after(self.config.close_timeout):
            try:
                await stream.send_all(machine.data_to_send())
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass
        await trio.aclose_forcefully(stream)


async def serve_emp(
    handler: EmpHandler,
    host: str | None,
    port: int,
    *,
    ssl_context: ssl.SSLContext | None = None,
    config: EmpConfig = DEFAULT_CONFIG,
    max_connections: int | None = None,
    handler_nursery: trio.Nursery | None = None,
    task_status: trio.TaskStatus[list[Listener]] = trio.TASK_STATUS_IGNORED,
) -> NoReturn:
    """Serve EMP on TCP (TLS with ``ssl_context``) until cancelled.

    Example::

        async def echo(emp):
            async for body in emp:
                await emp.send_data(body)

        listeners = await nursery.start(serve_emp, echo, "127.0.0.1", 0)

    Use :class:`EmpServer` for a graceful shutdown with bye on every connection.
    """
    server = EmpServer(handler, config=config, max_connections=max_connections)
    await server.serve_tcp(host, port, ssl_context, handler_nursery=handler_nursery, task_status=task_status)
