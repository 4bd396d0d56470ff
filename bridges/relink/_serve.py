"""The listener: accept connections, keep links across them, run a handler per link.

A :class:`RelinkServer` keeps a :class:`~bridges.relink.LinkRegistry` (one
epoch per server instance, read from the clock) and a
:class:`~bridges.relink.RelinkLink` per live link. A connector that presents
a link the registry knows resumes it on the new connection (an older
connection still carrying it is dropped); any other gets a new link, and
the handler runs for that link, in the task of the connection that created
it, for as long as the link lives, whatever happens to the connection. A
link with no connection for ``link_timeout`` seconds is forgotten: its
handler is cancelled and its channels end with
:class:`~bridges.relink.LinkLostError`.

Choosing the link config from the request
-----------------------------------------
The spec has the listener check the connector's channel id sizes and
transaction flags against the endpoint's. An endpoint here is either a
fixed :class:`LinkConfig` or a function of the request that returns the
config to accept (None: reject), which is how the app server accepts any id
size 0..8 as long as both directions agree. So the server reads the
connector's version block and request itself (answering the version in
between, as the half-duplex handshake wants) before it builds the sans-I/O
machine, then replays both into the machine, which checks the request
against the config chosen and goes on as usual. A rejected connector gets
no reply: the connection is closed, as the spec says.
"""

from __future__ import annotations

import logging
import ssl
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import NoReturn

import trio

from rstreams.support import Listener, describe_error, first_leaf, log_session_close, log_session_open, peer_address, serve_listeners, with_tls

from ..kit import check_count, open_connection
from ._connection import Connection
from ._errors import LinkLostError, RelinkError, RemoteProtocolError
from ._handshake import (
    VERSION_SIZE,
    HandshakeRequest,
    LinkConfig,
    check_endpoint_name,
    decode_request,
    decode_version,
    encode_version,
)
from ._link import LinkRegistry, Role
from ._link_errors import RelinkConnectionLost
from ._packets import PROTOCOL_VERSION
from ._settings import DEFAULT_SETTINGS, RelinkSettings
from ._trio import RelinkConnection
from ._trio_link import RelinkLink

__all__ = ["RelinkServer", "RelinkHandler", "EndpointPolicy", "serve_relink", "equal_id_sizes"]

logger = logging.getLogger("rstreams.bridges")

RelinkHandler = Callable[[RelinkLink], Awaitable[None]]
#: Chooses the config to accept for a connector's request (None: reject it).
EndpointPolicy = Callable[[HandshakeRequest], "LinkConfig | None"]

# The connector's request is at most 1 + 255 + 3 + 7 + 16 bytes.
_MAX_REQUEST_BYTES = 512


def equal_id_sizes(request: HandshakeRequest) -> LinkConfig | None:
    """Accept any channel id sizes 0..8 if both directions agree, without transactions."""
    asked = request.config
    if asked.connector_id_size != asked.listener_id_size or asked.connector_transactions or asked.listener_transactions:
        return None
    return asked


@dataclass(frozen=True, slots=True)
class _Opening:
    version_block: bytes
    request: HandshakeRequest
    data: bytes  # the request's bytes and anything after them


async def _read_opening(stream: trio.abc.Stream) -> _Opening:
    # The connector's version block, our version, then its request (see the module docstring).
    buffer = bytearray()

    async def read() -> None:
        chunk = await stream.receive_some(4096)
        if not chunk:
            raise RelinkConnectionLost("the connector closed the connection during the handshake")
        buffer.extend(chunk)

    while len(buffer) < VERSION_SIZE:
        await read()
    version_block = bytes(buffer[:VERSION_SIZE])
    del buffer[:VERSION_SIZE]
    decode_version(version_block)  # any version: we answer 0, "the same or lower"
    await stream.send_all(encode_version(PROTOCOL_VERSION))
    while (parsed := decode_request(buffer)) is None:
        if len(buffer) > _MAX_REQUEST_BYTES:
            raise RemoteProtocolError("the connector's handshake request is too long")
        await read()
    return _Opening(version_block, parsed[0], bytes(buffer))


def _now_epoch() -> int:
    return time.time_ns() // 1000


class RelinkServer:
    """Runs ``handler`` once per link (see the module docstring).

    Args:
        handler: ``async def handler(link)``; when it returns, the link is
            shut down gracefully.
        endpoints: endpoint name → :class:`LinkConfig`, or → an
            :data:`EndpointPolicy` choosing the config from the request.
        settings: windows, timeouts, ``link_timeout``.
        max_connections: a connection beyond this many is closed at once.
        epoch: this instance's epoch (default: now, microseconds since 1970).
    """

    protocol = "Relink"
    #: Handlers end by themselves once :attr:`closing` is set (the app server's
    #: do, after telling each subscriber); otherwise aclose shuts links down at once.
    handlers_watch_closing = False

    def __init__(
        self,
        handler: RelinkHandler,
        endpoints: Mapping[str, LinkConfig | EndpointPolicy],
        *,
        settings: RelinkSettings = DEFAULT_SETTINGS,
        max_connections: int | None = None,
        epoch: int | None = None,
    ) -> None:
        if not endpoints:
            raise ValueError("a Relink server needs at least one endpoint")
        for name in endpoints:
            check_endpoint_name(name, ValueError)
        if max_connections is not None:
            check_count("max_connections", max_connections)
        self.handler = handler
        self.endpoints = dict(endpoints)
        self.settings = settings
        self.max_connections = max_connections
        self.registry = LinkRegistry(_now_epoch() if epoch is None else epoch)
        self.closing = trio.Event()
        self._links: dict[int, RelinkLink] = {}
        self._connections: set[RelinkConnection] = set()
        self._active = 0
        self._links_lot = trio.lowlevel.ParkingLot()

    @property
    def links(self) -> tuple[RelinkLink, ...]:
        """The live links."""
        return tuple(self._links.values())

    @property
    def connections(self) -> frozenset[RelinkConnection]:
        """The TCP (or TLS) connections open now, links' and handshaking ones.

        What the kit's ``ListenerService.statistics`` (``rstreams serve``'s
        ``/stats``) reads of every bridge server.
        """
        return frozenset(self._connections)

    def _config_for(self, request: HandshakeRequest) -> LinkConfig | None:
        choice = self.endpoints.get(request.endpoint_name)
        if choice is None or isinstance(choice, LinkConfig):
            return choice
        return choice(request)

    def _decide(self, connection: RelinkConnection, request: HandshakeRequest) -> None:
        machine = connection.machine
        known = self.registry.lookup(request.old_epoch, request.old_link_id)
        handle = self._links.get(known.link_id) if known is not None else None
        if known is not None and handle is not None and known.config == request.config:
            machine.accept_link(known)
            connection.handle = handle
            return
        state = machine.accept_link(new_link_id=self.registry.new_link_id())
        if state is None:
            return  # the connector required its old link: refused
        self.registry.add(state)
        handle = RelinkLink(Role.LISTENER, self.settings, accept_channels=True)
        self._links[state.link_id] = handle
        connection.handle = handle

    async def serve_stream(self, stream: trio.abc.Stream) -> None:
        """Serve one connected stream; only cancellation escapes."""
        if self.closing.is_set() or (self.max_connections is not None and self._active >= self.max_connections):
            await trio.aclose_forcefully(stream)
            return
        self._active += 1
        # (Read now: once the peer is gone, so is its address.)
        peer = peer_address(stream)
        transport = "relinks" if isinstance(stream, trio.SSLStream) else "relink"
        try:
            try:
                with trio.fail_after(self.settings.handshake_timeout):
                    opening = await _read_opening(stream)
            except (RelinkError, trio.TooSlowError, trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                # (No handshake within the timeout: as the other bridges say it; the error itself says nothing.)
                why = f"no handshake within {self.settings.handshake_timeout:g} s" if isinstance(exc, trio.TooSlowError) else describe_error(exc)
                log_session_close(peer, transport, f"handshake failed: {why}", log=logger)
                await trio.aclose_forcefully(stream)
                return
            config = self._config_for(opening.request)
            if config is None:
                log_session_close(peer, transport, f"connector rejected: {opening.request!r}", log=logger)
                await trio.aclose_forcefully(stream)
                return
            machine = Connection(
                Role.LISTENER,
                endpoints={opening.request.endpoint_name: config},
                epoch=self.registry.epoch,
                send_window=self.settings.send_window,
                ack_window=self.settings.ack_window,
                limits=self.settings.limits,
            )
            # Replay what _read_opening took; our version block went out already.
            machine.receive_data(opening.version_block)
            machine.events()
            machine.data_to_send()
            machine.receive_data(opening.data)
            connection = RelinkConnection(stream, machine, self.settings, decide=self._decide)
            async with open_connection(connection):
                self._connections.add(connection)
                try:
                    handle = connection.handle
                    assert handle is not None
                    if connection.resumed:
                        await connection.wait_ended()
                    else:
                        await self._run_link(handle, peer, transport)
                finally:
                    self._connections.discard(connection)
        except* RelinkError as ended:
            # (Also when it comes out of the handler's nurseries in groups.)
            logger.info("Relink connection ended: %s", describe_error(first_leaf(ended)))
        except* Exception:
            logger.exception("Relink connection handler failed")
        finally:
            self._active -= 1

    async def _run_link(self, handle: RelinkLink, peer: str, transport: str) -> None:
        # The link's own task: its handler, and forgetting it when nobody
        # comes back. A link is the session the log speaks of (it outlives
        # its connections): session_open now, session_close when it ends.
        assert handle.state is not None
        link_id = handle.state.link_id
        log_session_open(peer, transport, log=logger, detail=f"(link {link_id})")
        reasons: list[str] = []  # (the first says why it ended)
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._expire, handle, nursery.cancel_scope, reasons)
                try:
                    await self.handler(handle)
                except* RelinkError as ended:
                    # The link ended under the handler (lost, forgotten, shut down).
                    reasons.append(describe_error(first_leaf(ended)))
                except* Exception as failed:
                    reasons.append(f"the link's handler failed: {describe_error(first_leaf(failed))}")
                    logger.exception("Relink link handler failed")
                finally:
                    with trio.CancelScope(shield=True):
                        await handle.aclose()
                    nursery.cancel_scope.cancel()
        finally:
            self.registry.remove(link_id)
            self._links.pop(link_id, None)
            self._links_lot.unpark_all()
            normal_end = "server shutting down" if self.closing.is_set() else "the link was shut down"
            log_session_close(peer, transport, reasons[0] if reasons else normal_end, log=logger, detail=f"(link {link_id})")

    async def _expire(self, handle: RelinkLink, scope: trio.CancelScope, reasons: list[str]) -> None:
        while True:
            await handle.wait_disconnected()
            if handle.ended:
                return
            with trio.move_on_after(self.settings.link_timeout):
                try:
                    await handle.wait_connected()
                except RelinkError:
                    return
                continue
            if handle.state is not None:
                self.registry.remove(handle.state.link_id)
            # (Its connection's loss was not logged: the link outlives it.)
            reasons.append(f"forgotten: no connection for {self.settings.link_timeout:g} s")
            scope.cancel()  # the handler first: what it would do has no link left
            handle._fail(LinkLostError(f"no connection for {self.settings.link_timeout} s: the link was forgotten"))
            return

    async def serve_tcp(
        self,
        host: str | None,
        port: int,
        ssl_context: ssl.SSLContext | None = None,
        *,
        handler_nursery: trio.Nursery | None = None,
        task_status: trio.TaskStatus[list[Listener]] = trio.TASK_STATUS_IGNORED,
    ) -> NoReturn:
        """Accept connections over TCP (TLS with ``ssl_context``) until cancelled; reports the listeners."""
        listeners = with_tls(await trio.open_tcp_listeners(port, host=host), ssl_context)
        await serve_listeners(self.serve_stream, listeners, handler_nursery=handler_nursery, task_status=task_status)

    async def aclose(self) -> None:
        """Stop admitting connections; let every link's handler finish and shut its link down.

        Handlers see :attr:`closing` set. Bounded by ``shutdown_timeout`` plus
        ``close_timeout``; then the remaining connections are closed.
        """
        self.closing.set()
        with trio.move_on_after(self.settings.shutdown_timeout + self.settings.close_timeout):
            # A handler that does not watch ``closing`` still gets its link
            # shut down: its calls then raise RelinkClosed.
            if not self.handlers_watch_closing:
                async with trio.open_nursery() as nursery:
                    for handle in list(self._links.values()):
                        nursery.start_soon(handle.aclose)
            while self._links:
                await self._links_lot.park()
        for connection in list(self._connections):
            await connection.aclose()


async def serve_relink(
    handler: RelinkHandler,
    host: str | None,
    port: int,
    *,
    endpoints: Mapping[str, LinkConfig | EndpointPolicy],
    ssl_context: ssl.SSLContext | None = None,
    settings: RelinkSettings = DEFAULT_SETTINGS,
    max_connections: int | None = None,
    handler_nursery: trio.Nursery | None = None,
    task_status: trio.TaskStatus[list[Listener]] = trio.TASK_STATUS_IGNORED,
) -> NoReturn:
    """Serve Relink on TCP (TLS with ``ssl_context``) until cancelled: ``handler(link)`` per link.

    Example::

        async def echo(link):  # the unnamed channel's messages, sent back
            async for parts in link.inbound(0):
                await link.send(0, parts)

        listeners = await nursery.start(partial(serve_relink, echo, "127.0.0.1", 0,
                                                endpoints={"echo": LinkConfig()}))

    Use :class:`RelinkServer` for a graceful shutdown.
    """
    server = RelinkServer(handler, endpoints, settings=settings, max_connections=max_connections)
    await server.serve_tcp(host, port, ssl_context, handler_nursery=handler_nursery, task_status=task_status)
