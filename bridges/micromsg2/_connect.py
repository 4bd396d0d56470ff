"""Opening and serving MicroMsg2 connections: over any trio stream, or over TCP / TLS.

trio's entry shapes, from the kit: ``open_*`` (an async context manager
that owns the connection's tasks), ``connect_micromsg2(nursery, ...)`` (the
tasks run in the caller's nursery; the caller closes the connection), and
:class:`MicroMsg2Server` (``serve_tcp`` under the caller's nursery).
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager

import trio

from ..kit import BridgeServer, open_connection, open_tcp_stream, start_connection
from ._codec import encode_frame
from ._frames import ErrorFrame
from ._payloads import NamedArguments
from ._settings import DEFAULT_SETTINGS, MicroMsg2Settings
from ._state import Role
from ._trio import MicroMsg2Connection

__all__ = [
    "open_micromsg2_stream",
    "open_micromsg2_connection",
    "connect_micromsg2",
    "MicroMsg2Server",
    "MicroMsg2Handler",
]

MicroMsg2Handler = Callable[[MicroMsg2Connection], Awaitable[None]]


@asynccontextmanager
async def open_micromsg2_stream(
    stream: trio.abc.Stream, *, role: Role = Role.CLIENT, settings: MicroMsg2Settings = DEFAULT_SETTINGS
) -> AsyncIterator[MicroMsg2Connection]:
    """Run MicroMsg2 over a connected stream: handshake, then yield the connection.

    The connection owns the stream. Leaving the block closes the transport
    (MicroMsg2 has no goodbye; bounded by ``settings.close_timeout``);
    cancellation closes it at once.

    Raises:
        PeerError: the peer refused the handshake with an ERROR frame.
        RemoteProtocolError: the peer broke the handshake
            (``UnsupportedVersionError``, ``UnsupportedExtensionError``, ...);
            our ERROR frame went out first.
        MicroMsg2Timeout: no handshake within ``handshake_timeout``.
        MicroMsg2Closed, MicroMsg2ConnectionLost: the transport closed first.
    """
    async with open_connection(MicroMsg2Connection(stream, role, settings)) as connection:
        yield connection


@asynccontextmanager
async def open_micromsg2_connection(
    host: str,
    port: int,
    *,
    ssl_context: ssl.SSLContext | None = None,
    server_hostname: str | None = None,
    settings: MicroMsg2Settings = DEFAULT_SETTINGS,
) -> AsyncIterator[MicroMsg2Connection]:
    """Connect to a MicroMsg2 server over TCP, or TLS with ``ssl_context``.

    Example::

        settings = MicroMsg2Settings(required=(ExtensionSpec(name="pubsub"),),
                                     optional=(ExtensionSpec.batch_ack(16),))
        async with open_micromsg2_connection("127.0.0.1", 7010, settings=settings) as mm2:
            async for message in await mm2.subscribe("range?count=3"):
                print(message.payload)

    Raises:
        OSError: the connection could not be made; and as :func:`open_micromsg2_stream`.
    """
    stream = await open_tcp_stream(host, port, ssl_context=ssl_context, server_hostname=server_hostname)
    async with open_micromsg2_stream(stream, settings=settings) as connection:
        yield connection


async def connect_micromsg2(
    nursery: trio.Nursery,
    host: str,
    port: int,
    *,
    ssl_context: ssl.SSLContext | None = None,
    server_hostname: str | None = None,
    settings: MicroMsg2Settings = DEFAULT_SETTINGS,
) -> MicroMsg2Connection:
    """Connect and handshake; the connection's tasks run in ``nursery``.

    Close it with ``await connection.aclose()``; until then it keeps
    ``nursery`` open.

    Raises:
        as :func:`open_micromsg2_connection`.
    """
    stream = await open_tcp_stream(host, port, ssl_context=ssl_context, server_hostname=server_hostname)
    connection = MicroMsg2Connection(stream, Role.CLIENT, settings)
    await start_connection(connection, nursery)
    return connection


class MicroMsg2Server(BridgeServer[MicroMsg2Connection]):
    """Runs ``handler`` on every MicroMsg2 connection; can close them all.

    Args:
        handler: ``async def handler(connection)``; when it returns, the
            connection closes.
        settings: settings of each connection (a server's identity defaults
            to ``rstreams``).
        max_connections: a connection beyond this many is refused: its
            handshake is answered with ERROR ``error;message=server busy``.
    """

    def __init__(
        self,
        handler: MicroMsg2Handler,
        *,
        settings: MicroMsg2Settings = DEFAULT_SETTINGS,
        max_connections: int | None = None,
    ) -> None:
        super().__init__(
            handler, max_connections=max_connections, protocol="MicroMsg2", scheme="mm2", handshake_timeout=settings.handshake_timeout
        )
        self.settings = settings

    def _open(self, stream: trio.abc.Stream) -> AbstractAsyncContextManager[MicroMsg2Connection]:
        return open_micromsg2_stream(stream, role=Role.SERVER, settings=self.settings)

    async def _refuse(self, stream: trio.abc.Stream, reason: str) -> None:
        # Read the client's handshake first (within close_timeout): closing a
        # socket with it unread would reset the connection, and the client
        # could lose the ERROR frame. A refusal is the spec's "ERROR frame,
        # then disconnect", where the client expects the server's handshake.
        with trio.move_on_after(self.settings.close_timeout):
            try:
                await stream.receive_some(self.settings.receive_size)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass
        refusal = encode_frame(ErrorFrame(error=NamedArguments.of("error", {"message": reason})))
        with trio.move_on_after(self.settings.close_timeout):
            try:
                await stream.send_all(refusal)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass
        await trio.aclose_forcefully(stream)
