"""Accepting a bridge's connections: :class:`BridgeServer` and :class:`ListenerService`.

The same shape as :class:`rstreams.Server`: the server owns no task; its
``serve_tcp`` runs under the caller's nursery and each connection's handler
runs in the handler nursery. It keeps its live connections so that
:meth:`BridgeServer.aclose` can say goodbye on each.
:class:`ListenerService` puts a server behind the addresses of an
``rstreams serve`` option (``--emp HOST:PORT``).
"""

from __future__ import annotations

import abc
import logging
import ssl
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from functools import partial
from typing import Generic, NoReturn, TypeVar

import trio

from rstreams.support import (
    Admission,
    Admissions,
    Listener,
    caller_sees_its_own_exception,
    describe_error,
    first_leaf,
    listener_url,
    log_connection_refused,
    log_session_close,
    log_session_open,
    peer_address,
    serve_listeners,
    speaks_plain,
    with_tls,
)

from ._config import check_count
from ._connection import BridgeConnection
from bridges import BridgeError

__all__ = ["BridgeServer", "ListenerService"]

logger = logging.getLogger("rstreams.bridges")

ConnectionT = TypeVar("ConnectionT", bound=BridgeConnection)  # type: ignore[type-arg]


class BridgeServer(abc.ABC, Generic[ConnectionT]):
    """Runs ``handler`` on every connection of a bridge; can close them all gracefully.

    A bridge subclasses it with :meth:`_open` (start the protocol over an
    accepted stream, handshake included) and :meth:`_refuse` (the protocol's
    way to turn a connection away).

    Args:
        handler: ``async def handler(connection)``; when it returns, the
            connection says goodbye and closes.
        max_connections: a connection beyond this many is refused ("server
            busy").
        protocol: the protocol's name, for log lines.
        scheme: its URL scheme (default: ``protocol`` in lower case), the
            ``transport`` of its log records (with an ``s`` over TLS).
        handshake_timeout: how long a client may take to begin (its
            settings' ``handshake_timeout``). At a TLS listener, a client
            that begins with something else than TLS (a plain URL) is
            refused in the plain protocol: "this port speaks TLS: use
            SCHEMEs://", as ``rstreams serve`` does for ``tcp://``.

    Each connection is logged as ``rstreams serve`` logs its own sessions
    (``docs/operating.md``): ``session_open`` once the protocol's handshake
    is done, ``session_close`` with the reason when it ends (the only line
    of a connection that never got through its handshake), and
    ``connection_refused`` for one turned away (busy, shutting down, a
    plain client at a TLS port), at info, with the fields ``peer``,
    ``transport`` and ``reason``.
    """

    def __init__(
        self,
        handler: Callable[[ConnectionT], Awaitable[None]],
        *,
        max_connections: int | None = None,
        protocol: str = "bridge",
        scheme: str | None = None,
        handshake_timeout: float = 10.0,
    ) -> None:
        if max_connections is not None:
            check_count("max_connections", max_connections)
        self.handler = handler
        self.max_connections = max_connections
        self.protocol = protocol
        self.scheme = scheme or protocol.lower()
        self.handshake_timeout = handshake_timeout
        self._connections: set[ConnectionT] = set()
        self._admissions = Admissions()
        self._closing = False

    @abc.abstractmethod
    def _open(self, stream: trio.abc.Stream) -> AbstractAsyncContextManager[ConnectionT]:
        """Run the protocol over ``stream`` for the duration of a block."""

    @abc.abstractmethod
    async def _refuse(self, stream: trio.abc.Stream, reason: str) -> None:
        """Turn the connection away, as the protocol does it, and close ``stream``."""

    @property
    def connections(self) -> frozenset[ConnectionT]:
        """The connections open right now."""
        return frozenset(self._connections)

    async def serve_stream(self, stream: trio.abc.Stream) -> None:
        """Run the handler over one connected stream; only cancellation escapes."""
        # (Read now: once the peer is gone, so is its address.)
        peer = peer_address(stream)
        transport = self.scheme + ("s" if isinstance(stream, trio.SSLStream) else "")
        # Reserve the place before the first await, so that connections
        # arriving together cannot all pass the check; on a full server, it
        # is taken from the oldest connection still in its handshake.
        admission = None if self._closing else self._admissions.admit(self.max_connections)
        if admission is None:
            await self._refuse_logged(stream, peer, transport, "server shutting down" if self._closing else "server busy")
            return
        with self._admissions.held(admission):
            if isinstance(stream, trio.SSLStream) and await speaks_plain(stream, self.handshake_timeout):
                # A plain URL at a TLS port: answered in its own terms.
                reason = f"this port speaks TLS: use {self.scheme}s://"
                await self._refuse_logged(stream.transport_stream, peer, transport, reason)
                return
            await self._run_handler(stream, peer, transport, admission)

    async def _run_handler(self, stream: trio.abc.Stream, peer: str, transport: str, admission: Admission) -> None:
        reason = "closed"
        try:
            async with self._open(stream) as connection:
                admission.handshake_done()  # (_open returns once the handshake is done)
                self._connections.add(connection)
                log_session_open(peer, transport, log=logger)
                try:
                    await self.handler(connection)
                finally:
                    self._connections.discard(connection)
                    ended = connection.end_reason
                    if self._closing and (ended is None or getattr(ended, "by_peer", None) is False):
                        reason = "server shutting down"  # (this side closed it: aclose)
                    elif ended is not None:
                        reason = describe_error(ended)
        except* BridgeError as ended:
            # The end of one client (a lost connection, a violation), also
            # when it comes out of the handler's nurseries wrapped in groups.
            reason = describe_error(first_leaf(ended))
        except* Exception as failed:
            reason = f"the connection's handler failed: {describe_error(first_leaf(failed))}"
            logger.exception("%s connection handler failed", self.protocol)
        finally:
            log_session_close(peer, transport, admission.evicted or reason, log=logger)

    async def _refuse_logged(self, stream: trio.abc.Stream, peer: str, transport: str, reason: str) -> None:
        log_connection_refused(peer, transport, reason, log=logger)
        await self._refuse(stream, reason)

    async def serve_tcp(
        self,
        host: str | None,
        port: int,
        ssl_context: ssl.SSLContext | None = None,
        *,
        handler_nursery: trio.Nursery | None = None,
        task_status: trio.TaskStatus[list[Listener]] = trio.TASK_STATUS_IGNORED,
    ) -> NoReturn:
        """Accept connections over TCP (TLS with ``ssl_context``) until cancelled.

        ``await nursery.start(server.serve_tcp, "127.0.0.1", 0)`` returns the
        listeners (``rstreams.listener_port`` reads the port).
        """
        listeners = with_tls(await trio.open_tcp_listeners(port, host=host), ssl_context)
        # rstreams' accept loop: backs off quietly when descriptors run out.
        await serve_listeners(self.serve_stream, listeners, handler_nursery=handler_nursery, task_status=task_status)

    async def aclose(self) -> None:
        """Stop admitting connections, say goodbye on each open one and close it."""
        self._closing = True
        async with trio.open_nursery() as nursery:
            for connection in list(self._connections):
                nursery.start_soon(connection.aclose)


class ListenerService:
    """A :class:`BridgeServer` on the addresses of an ``rstreams serve`` option.

    Args:
        server: the server to run.
        addresses: ``(host, port)`` pairs to listen on (host None: every interface).
        ssl_context: TLS for every listener, or None.
        scheme: the URL scheme its listeners are reported with (``emp``);
            ``secure_scheme`` with TLS (``emps``).
    """

    def __init__(
        self,
        server: BridgeServer,  # type: ignore[type-arg]
        addresses: Sequence[tuple[str | None, int]],
        ssl_context: ssl.SSLContext | None,
        *,
        scheme: str,
        secure_scheme: str,
        path: str = "",
    ) -> None:
        self.server = server
        self.addresses = list(addresses)
        self.ssl_context = ssl_context
        self.scheme = secure_scheme if ssl_context is not None else scheme
        self.path = path

    async def serve(
        self, *, handler_nursery: trio.Nursery, task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED
    ) -> NoReturn:
        """Listen on every address and report the listeners' URLs; accept until cancelled.

        Raises:
            OSError: an address cannot be listened on (its message names the
                address and the protocol).
        """
        # The nursery would wrap a listener's OSError in a group: the caller
        # (rstreams serve) reports the OSError itself.
        with caller_sees_its_own_exception(), trio.CancelScope():
            await self._serve(handler_nursery, task_status)
        raise AssertionError("unreachable")  # pragma: no cover

    async def _serve(self, handler_nursery: trio.Nursery, task_status: trio.TaskStatus[list[str]]) -> None:
        async with trio.open_nursery() as nursery:
            urls: list[str] = []
            for host, port in self.addresses:
                serve = partial(self.server.serve_tcp, host, port, self.ssl_context, handler_nursery=handler_nursery)
                try:
                    listeners: list[Listener] = await nursery.start(serve)
                except OSError as exc:
                    where = f"[{host}]:{port}" if host and ":" in host else f"{host or '*'}:{port}"
                    raise OSError(exc.errno, f"cannot listen on {where} for {self.server.protocol}: {exc.strerror or exc}") from None
                urls.extend(listener_url(listener, self.scheme, self.path) for listener in listeners)
            task_status.started(urls)
            await trio.sleep_forever()

    async def aclose(self) -> None:
        """Say goodbye on every connection (each bounded by its close timeout)."""
        await self.server.aclose()

    def statistics(self) -> dict[str, int]:
        """Open connections and their transport bytes so far, for ``rstreams serve``'s ``/stats``."""
        connections = self.server.connections
        return {
            "connections": len(connections),
            "bytes_received": sum(connection.bytes_received for connection in connections),
            "bytes_sent": sum(connection.bytes_sent for connection in connections),
        }
