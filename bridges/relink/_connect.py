"""The connector: open a link over TCP (or TLS) and keep it up across drops.

:func:`open_relink_link` connects, handshakes, and yields the link's
:class:`~bridges.relink.RelinkLink`. The first connection must succeed (its
errors come out of the ``async with``). After that a supervisor task keeps
the link carried: when a connection ends for any reason but the link's own
end, it reconnects with a bounded exponential backoff (``reconnect_delay``
doubled up to ``reconnect_max_delay``), presenting the old epoch and link
id so that both sides resume where they were. A listener that does not know
the link any more (restarted: a new epoch; or it forgot the link) answers
with a new link: the old link's channels end with
:class:`~bridges.relink.LinkLostError` and the link carries on. A listener
that rejects the handshake, or no connection for ``reconnect_timeout``
seconds, ends the link.
"""

from __future__ import annotations

import math
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import trio
from trio.lowlevel import enable_ki_protection

from rstreams.support import caller_sees_its_own_exception

from ..kit import open_tcp_stream, start_connection
from ._connection import Connection
from ._errors import LinkLostError, RelinkError, RemoteProtocolError, UnsupportedVersionError
from ._handshake import LinkConfig
from ._link import Role
from ._link_errors import RelinkConnectionLost
from ._settings import DEFAULT_SETTINGS, RelinkSettings
from ._trio import RelinkConnection
from ._trio_link import RelinkLink

__all__ = ["open_relink_link", "DEFAULT_ENDPOINT"]

#: The endpoint an rstreams app is served on (``relink://HOST:PORT`` with no path).
DEFAULT_ENDPOINT = "rstreams"

# Errors after which reconnecting cannot help. Not HandshakeRejected: in a
# reconnect's handshake the listener accepted this link's endpoint and
# config already, so a connection that closes before the reply is far more
# likely one that dropped than a refusal, and is tried again like any other
# until reconnect_timeout (a listener that now refuses for good refuses
# every attempt, and the link still ends).
_PERMANENT = (UnsupportedVersionError, LinkLostError)

# Connections in a row that the listener broke before it sent a message on
# them, before the link ends with that error. One such connection may be a fluke
# (a link is resumed after a violation, as Go does); a "listener" that does
# it every time is not speaking Relink (another protocol's port, whose
# greeting happened to pass for a handshake), and reconnecting to it at
# once, forever, would be a hang for the user and a hammering for it.
MAX_BROKEN_CONNECTIONS = 3


def _broke_at_once(connection: RelinkConnection | None) -> RemoteProtocolError | None:
    """The listener's protocol error if ``connection`` ended in one before
    the listener sent a message on it (acks, pings or nothing at all)."""
    if connection is None:
        return None
    reason = connection.end_reason
    if isinstance(reason, RemoteProtocolError) and not connection.machine.statistics().messages_received:
        return reason
    return None


class _Connector:
    # What it takes to (re)connect one link, and the supervisor that does it.

    def __init__(
        self,
        handle: RelinkLink,
        host: str,
        port: int,
        endpoint: str,
        config: LinkConfig,
        ssl_context: ssl.SSLContext | None,
        server_hostname: str | None,
    ) -> None:
        self.handle = handle
        self.host = host
        self.port = port
        self.endpoint = endpoint
        self.config = config
        self.ssl_context = ssl_context
        self.server_hostname = server_hostname
        self.last: RelinkConnection | None = None

    async def connect(self, nursery: trio.Nursery) -> None:
        settings = self.handle.settings
        stream = await open_tcp_stream(
            self.host, self.port, ssl_context=self.ssl_context, server_hostname=self.server_hostname
        )
        state = self.handle.state
        if state is not None and (state.ended or state.discarded):
            state = None
        machine = Connection(
            Role.CONNECTOR,
            config=self.config,
            endpoint_name=self.endpoint,
            link=state,
            send_window=settings.send_window,
            ack_window=settings.ack_window,
            limits=settings.limits,
        )
        connection = self.last = RelinkConnection(stream, machine, settings, handle=self.handle)
        await start_connection(connection, nursery)

    @enable_ki_protection
    async def maintain(self, nursery: trio.Nursery) -> None:
        handle, settings = self.handle, self.handle.settings
        broken = 0  # connections in a row the listener broke at once
        delay = settings.reconnect_delay
        while True:
            await handle.wait_disconnected()
            if handle.ended:
                return
            reason = self.last.end_reason if self.last is not None else None
            if isinstance(reason, _PERMANENT):
                handle._fail(reason)
                return
            violation = _broke_at_once(self.last)
            if violation is None:
                broken = 0
                delay = settings.reconnect_delay
            else:
                broken += 1
                if broken >= MAX_BROKEN_CONNECTIONS:
                    error = RemoteProtocolError(
                        f"on {broken} connections in a row, before any message: {violation}"
                        f" (is {self.host}:{self.port} a Relink listener?)"
                    )
                    error.__cause__ = violation
                    handle._fail(error)
                    return
                # No reconnect at once: the backoff goes on growing.
                await trio.sleep(delay)
                delay = min(delay * 2, settings.reconnect_max_delay)
            timeout = settings.reconnect_timeout
            deadline = math.inf if timeout is None else trio.current_time() + timeout
            last_error: BaseException | None = reason
            while not handle.ended:
                with trio.move_on_at(deadline):
                    try:
                        await self.connect(nursery)
                        break
                    except _PERMANENT as exc:
                        handle._fail(exc)
                        return
                    except (OSError, RelinkError, trio.BrokenResourceError) as exc:
                        last_error = exc
                if trio.current_time() + delay >= deadline:
                    handle._fail(
                        RelinkConnectionLost(f"could not reconnect within {timeout} s (last: {last_error!s})")
                    )
                    return
                await trio.sleep(delay)
                delay = min(delay * 2, settings.reconnect_max_delay)


@asynccontextmanager
async def open_relink_link(
    host: str,
    port: int,
    *,
    endpoint: str = DEFAULT_ENDPOINT,
    config: LinkConfig | None = None,
    ssl_context: ssl.SSLContext | None = None,
    server_hostname: str | None = None,
    settings: RelinkSettings = DEFAULT_SETTINGS,
    accept_channels: bool = False,
) -> AsyncIterator[RelinkLink]:
    """Connect to a Relink listener and keep the link up for the duration of the block.

    Example::

        async with open_relink_link("127.0.0.1", 7100, config=LinkConfig(connector_id_size=1,
                                                                       listener_id_size=1)) as link:
            replies = link.inbound(3)
            await link.send(3, [b"range?count=5"])
            async for parts in replies:
                print(parts)

    Args:
        host, port: the listener.
        endpoint: the endpoint name (``rstreams`` for an app server).
        config: channel id sizes and transactions (default: 0-byte ids, none).
        ssl_context: TLS, or None for plain TCP.
        settings: windows, timeouts, reconnection.
        accept_channels: offer the listener's unsolicited channels to
            :meth:`~bridges.relink.RelinkLink.accept_channel`.

    Leaving the block shuts the link down gracefully (bounded by
    ``settings.shutdown_timeout``); cancellation closes it at once.

    Raises:
        OSError: the first connection could not be made.
        HandshakeRejected, UnsupportedVersionError, RelinkTimeout,
        RelinkConnectionLost: the first handshake failed.
    """
    handle = RelinkLink(Role.CONNECTOR, settings, accept_channels=accept_channels)
    connector = _Connector(
        handle, host, port, endpoint, config if config is not None else LinkConfig(), ssl_context, server_hostname
    )
    with caller_sees_its_own_exception():
        async with trio.open_nursery() as nursery:
            await connector.connect(nursery)
            nursery.start_soon(connector.maintain, nursery)
            try:
                yield handle
            finally:
                with trio.CancelScope(shield=True):
                    await handle.aclose()
                nursery.cancel_scope.cancel()
