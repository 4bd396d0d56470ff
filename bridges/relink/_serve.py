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

A link's id is all a connector shows to resume it, and resuming takes the
link from whatever connection carries it, so ids are drawn at random
(``secrets.randbelow``): a connector learns its own and no other.

Connections, links, and ``max_connections``
-------------------------------------------
A connection's place under ``max_connections`` is taken when it is
accepted and given back when the connection ends, not when its link does
(the link's task lives on in the task of the connection that made it). A
link that no connection carries still holds what its connection held: our
messages kept to resend and its handler's state (the app server's session
and the elements in hand), each bounded by the link's memory budget, and
its sends wait for a connection, so it grows no further. So such links
count under the same limit, which bounds memory as it bounds
connections: when a connection makes a new link and the open connections
plus the links without one exceed the limit, the links that have gone
longest without a connection are forgotten, as if their ``link_timeout``
had run out. A connector coming back to its link needs no room (its link
stops being one without a connection). Only when every place is an open
connection is a connection refused, and the log says so
(``connection_refused``).

What the log says
-----------------
The link is the session: ``session_open`` when it is made, ``session_close``
when it ends, naming it ``(link N)``, N counting the server's links from 1
(never its id: whoever reads the id may resume the link). A connection
ended by a peer's violation gets one ``bad_input`` line (Relink has no
error packet: the listener closes the connection without a word, and keeps
the link); a lost connection gets none, as the link waits for its
connector.

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

import itertools
import logging
import secrets
import ssl
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import NoReturn

import trio

from rstreams.support import (
    Admission,
    Admissions,
    Listener,
    describe_error,
    first_leaf,
    log_connection_refused,
    log_session_close,
    log_session_open,
    peer_address,
    serve_listeners,
    with_tls,
)

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

__all__ = ["EndpointPolicy", "RelinkHandler", "RelinkServer", "equal_id_sizes", "serve_relink"]

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


@dataclass(slots=True, eq=False)
class _LiveLink:
    # A live link as the server keeps it: the application's handle; the
    # number the log names it by (its id is a secret: whoever knows it may
    # resume the link, so it is never logged); how to end it early (its
    # task's cancel scope, and why it ended, the first reason first); and
    # when its last connection ended, for evicting the oldest first.
    handle: RelinkLink
    serial: int
    scope: trio.CancelScope | None = None
    reasons: list[str] = field(default_factory=list)
    detached_since: float = 0.0
    detached_order: int = 0

    @property
    def detached(self) -> bool:
        # Alive, and no connection carries it (what a connector that comes
        # back may resume).
        handle = self.handle
        return handle.connection is None and not handle.ended and handle.state is not None


class RelinkServer:
    """Runs ``handler`` once per link (see the module docstring).

    Args:
        handler: ``async def handler(link)``; when it returns, the link is
            shut down gracefully.
        endpoints: endpoint name → :class:`LinkConfig`, or → an
            :data:`EndpointPolicy` choosing the config from the request.
        settings: windows, timeouts, ``link_timeout``.
        max_connections: at most this many connections open at once (one
            beyond them is refused, with a ``connection_refused`` log line);
            links without a connection count too, but never keep a
            connection out: a new link takes the room of the link that has
            gone longest without one (see the module docstring).
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
        # Link ids drawn at random: a link's id is all it takes to resume it
        # (and take it from its connection), so a connector must not be
        # able to guess another's from its own (docs: Handshake item 7).
        self.registry = LinkRegistry(_now_epoch() if epoch is None else epoch, randbelow=secrets.randbelow)
        self.closing = trio.Event()
        self._links: dict[int, _LiveLink] = {}
        self._connections: set[RelinkConnection] = set()
        # Connections accepted and not ended; on a full server, a
        # newcomer takes the place of the oldest still in its handshake.
        self._admissions = Admissions()
        self._serials = itertools.count(1)
        self._detachments = itertools.count(1)
        self._links_lot = trio.lowlevel.ParkingLot()

    @property
    def links(self) -> tuple[RelinkLink, ...]:
        """The live links."""
        return tuple(entry.handle for entry in self._links.values())

    @property
    def detached_links(self) -> tuple[RelinkLink, ...]:
        """The live links no connection carries now (kept for their connector to come back)."""
        return tuple(entry.handle for entry in self._links.values() if entry.detached)

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
        entry = self._links.get(known.link_id) if known is not None else None
        if known is not None and entry is not None and known.config == request.config:
            machine.accept_link(known)
            connection.handle = entry.handle
            return
        state = machine.accept_link(new_link_id=self.registry.new_link_id())
        if state is None:
            return  # the connector required its old link: refused
        self._make_room()
        self.registry.add(state)
        handle = RelinkLink(Role.LISTENER, self.settings, accept_channels=True)
        self._links[state.link_id] = _LiveLink(handle, next(self._serials))
        connection.handle = handle

    @property
    def _open(self) -> int:
        return self._admissions.count

    def _make_room(self) -> None:
        # A connection (counted in _open) is making a new link. Links without
        # a connection count under max_connections as well: each keeps what
        # its connection held (its messages kept to resend, its app session),
        # so the limit bounds them as it bounds connections, and a client
        # that drops connection after connection cannot pile them up. But
        # they never keep a live client out: the links that have gone
        # longest without a connection are forgotten to make room, as if
        # their link_timeout had run out.
        limit = self.max_connections
        if limit is None or self._open + len(self._links) <= limit:
            return  # (every link counted as if detached: room enough)
        detached = sorted((entry for entry in self._links.values() if entry.detached), key=lambda entry: entry.detached_order)
        excess = self._open + len(detached) - limit
        now = trio.current_time()
        for entry in detached[: max(excess, 0)]:
            waited = now - entry.detached_since
            how_long = f"{waited:.3g}" if waited < 1000 else f"{waited:.0f}"  # (never 1.2e+03)
            self._forget(
                entry,
                f"forgotten: no connection for {how_long} s, and a new link needed its room"
                f" (max_connections {limit} counts the links kept without one)",
                f"no connection for {how_long} s: the link was forgotten to make room for a new one",
            )

    def _forget(self, entry: _LiveLink, reason: str, message: str) -> None:
        # End a link nobody is connected to: what its connector gets back, if
        # it comes, is a new link (its old channels end with LinkLostError).
        # (Its connection's loss was not logged: the link outlives it; the
        # link's own session_close says why it ended.)
        handle = entry.handle
        if handle.state is not None:
            self.registry.remove(handle.state.link_id)
        entry.reasons.append(reason)
        if entry.scope is not None:
            entry.scope.cancel()  # the handler first: what it would do has no link left
        handle._fail(LinkLostError(message))

    def _entry_of(self, handle: RelinkLink | None) -> _LiveLink | None:
        if handle is None or handle.state is None:
            return None
        entry = self._links.get(handle.state.link_id)
        return entry if entry is not None and entry.handle is handle else None

    def _connection_ended(self, admission: Admission, peer: str, transport: str, connection: RelinkConnection) -> None:
        # Synchronous, from the connection's end (its link detached first):
        # its place under max_connections is free now, whatever becomes of
        # the link; and a peer's violation gets its one log line, as on every
        # bridge: Relink has no error packet, and the link, kept for its
        # connector to come back, logs its session_close only when it ends.
        # (It stays in ``connections`` until its task ends: for the one that
        # made a link, when the link ends, as before; tests read its end there.)
        self._admissions.leave(admission)  # (once: the serving task's end gives back nothing more)
        handle = connection.handle
        entry = self._entry_of(handle)
        if entry is not None and handle is not None and handle.connection is None:
            entry.detached_since = trio.current_time()
            entry.detached_order = next(self._detachments)
        error = connection.end_reason
        if handle is not None and isinstance(error, RemoteProtocolError):
            # (Only once the link was decided: a violation in the handshake
            # is the session_close "handshake failed" of serve_stream.)
            reason = describe_error(error)
            detail = f" (link {entry.serial})" if entry is not None else ""
            fields = {"event": "bad_input", "peer": peer, "transport": transport, "reason": reason}
            logger.info("closing the connection with %s over %s%s: %s", peer, transport, detail, reason, extra=fields)

    async def serve_stream(self, stream: trio.abc.Stream) -> None:
        """Serve one connected stream; only cancellation escapes."""
        # (Read now: once the peer is gone, so is its address.)
        peer = peer_address(stream)
        transport = "relinks" if isinstance(stream, trio.SSLStream) else "relink"
        admission = None if self.closing.is_set() else self._admissions.admit(self.max_connections)
        if admission is None:
            busy = f"server busy: {self.max_connections} connections already open"
            log_connection_refused(peer, transport, "server shutting down" if self.closing.is_set() else busy, log=logger)
            await trio.aclose_forcefully(stream)  # (Relink has no word for it: the spec's refusal)
            return
        # A connection's place is taken before the first await, and given
        # back once: when the connection ends (or when its handshake never
        # got as far as a connection), not when the link it made ends, whose
        # task lives on in this connection's task.
        with self._admissions.held(admission):
            await self._serve_admitted(stream, peer, transport, admission)
        if admission.evicted is not None:
            log_session_close(peer, transport, admission.evicted, log=logger)
            await trio.aclose_forcefully(stream)

    async def _serve_admitted(self, stream: trio.abc.Stream, peer: str, transport: str, admission: Admission) -> None:
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
            on_end = partial(self._connection_ended, admission, peer, transport)
            connection = RelinkConnection(stream, machine, self.settings, decide=self._decide, on_end=on_end)
            try:
                async with open_connection(connection):
                    admission.handshake_done()  # (never closed for a newcomer from now on)
                    if not connection.ended:
                        self._connections.add(connection)
                    entry = self._entry_of(connection.handle)
                    if connection.resumed:
                        await connection.wait_ended()
                    elif entry is not None:
                        await self._run_link(entry, peer, transport)
            finally:
                self._connections.discard(connection)
        except* RelinkError as ended:
            # The handshake failed after the request (the machine's check):
            # the link's errors stay in _run_link. (Also in groups.)
            log_session_close(peer, transport, f"handshake failed: {describe_error(first_leaf(ended))}", log=logger)
        except* Exception:
            logger.exception("Relink connection handler failed")

    async def _run_link(self, entry: _LiveLink, peer: str, transport: str) -> None:
        # The link's own task: its handler, and forgetting it when nobody
        # comes back. A link is the session the log speaks of (it outlives
        # its connections): session_open now, session_close when it ends,
        # naming the link by its serial number, never by its id.
        handle = entry.handle
        assert handle.state is not None
        link_id = handle.state.link_id
        reasons = entry.reasons  # (the first says why it ended)
        log_session_open(peer, transport, log=logger, detail=f"(link {entry.serial})")
        try:
            async with trio.open_nursery() as nursery:
                entry.scope = nursery.cancel_scope
                if reasons:
                    nursery.cancel_scope.cancel()  # forgotten before its task began
                nursery.start_soon(self._expire, entry)
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
            log_session_close(peer, transport, reasons[0] if reasons else normal_end, log=logger, detail=f"(link {entry.serial})")

    async def _expire(self, entry: _LiveLink) -> None:
        handle = entry.handle
        timeout = self.settings.link_timeout
        while True:
            await handle.wait_disconnected()
            if handle.ended:
                return
            with trio.move_on_after(timeout):
                try:
                    await handle.wait_connected()
                except RelinkError:
                    return
                continue
            self._forget(entry, f"forgotten: no connection for {timeout:g} s", f"no connection for {timeout} s: the link was forgotten")
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
                    for entry in list(self._links.values()):
                        nursery.start_soon(entry.handle.aclose)
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
