"""Accepting EMP connections: :class:`EmpServer` and :func:`serve_emp`.

The same shape as :class:`rstreams.Server`: the server owns no task; its
``serve_tcp`` runs under the caller's nursery and each connection's handler
runs in the handler nursery. It keeps its live connections so that
:meth:`EmpServer.aclose` can say bye on each.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Awaitable, Callable
from typing import NoReturn

import trio

from rstreams._serve import Listener, with_tls

from ._errors import EmpError, ErrorCode
from ._config import DEFAULT_CONFIG, EmpConfig
from ._connection import Connection
from ._connect import open_emp_stream
from ._trio import EmpConnection

__all__ = ["EmpServer", "EmpHandler", "serve_emp"]

logger = logging.getLogger("rstreams.emp")

EmpHandler = Callable[[EmpConnection], Awaitable[None]]


class EmpServer:
    """Runs ``handler`` on every EMP connection; can close them all with bye.

    Args:
        handler: ``async def handler(connection)``; when it returns, the
            connection says bye and closes.
        config: settings of each connection.
        max_connections: a connection beyond this many gets hello, then
            error 0 "server busy", and is closed.
    """

    def __init__(self, handler: EmpHandler, *, config: EmpConfig = DEFAULT_CONFIG, max_connections: int | None = None) -> None:
        if max_connections is not None and max_connections <= 0:
            raise ValueError("max_connections must be positive")
        self.handler = handler
        self.config = config
        self.max_connections = max_connections
        self._connections: set[EmpConnection] = set()
        self._active = 0
        self._closing = False

    @property
    def connections(self) -> frozenset[EmpConnection]:
        """The connections open right now."""
        return frozenset(self._connections)

    async def serve_stream(self, stream: trio.abc.Stream) -> None:
        """Run the handler over one connected stream; only cancellation escapes."""
        if self._closing or (self.max_connections is not None and self._active >= self.max_connections):
            await _refuse(stream, self.config, "server shutting down" if self._closing else "server busy")
            return
        self._active += 1
        try:
            async with open_emp_stream(stream, config=self.config) as connection:
                self._connections.add(connection)
                try:
                    await self.handler(connection)
                finally:
                    self._connections.discard(connection)
        except EmpError as exc:
            logger.info("EMP connection ended: %r", exc)
        except Exception:
            logger.exception("EMP connection handler failed")
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
        """Accept EMP over TCP (TLS with ``ssl_context``) until cancelled.

        ``await nursery.start(server.serve_tcp, "127.0.0.1", 0)`` returns the
        listeners (``rstreams.listener_port`` reads the port).
        """
        listeners = with_tls(await trio.open_tcp_listeners(port, host=host), ssl_context)
        await trio.serve_listeners(self.serve_stream, listeners, handler_nursery=handler_nursery, task_status=task_status)

    async def aclose(self) -> None:
        """Stop admitting connections, say bye on each open one and close it.

        Each close is bounded by ``config.close_timeout``.
        """
        self._closing = True
        async with trio.open_nursery() as nursery:
            for connection in list(self._connections):
                nursery.start_soon(connection.aclose)


async def _refuse(stream: trio.abc.Stream, config: EmpConfig, reason: str) -> None:
    # EMP's way to refuse: our hello (always first), then error 0, then close.
    machine = Connection(framing=config.framing, limits=config.limits)
    machine.send_error(ErrorCode.UNSPECIFIED, reason)
    with trio.move_on_after(config.close_timeout):
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
