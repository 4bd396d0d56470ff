"""Client entry points: open a session to a URL."""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from ._config import DEFAULT_CONFIG, SessionConfig
from ._publish import Router
from ._session import Session, open_stream_session
from ._transport import connect_stream, parse_url
from ._websocket import websocket_config

__all__ = ["open_session"]


@asynccontextmanager
async def open_session(
    url: str,
    *,
    app: Router | None = None,
    ssl_context: ssl.SSLContext | None = None,
    config: SessionConfig = DEFAULT_CONFIG,
) -> AsyncIterator[Session]:
    """Connect to ``url``: ``tcp://host:port``, ``tls://host:port``,
    ``ws://host:port/`` or ``wss://host:port/``.

    Example::

        async with rstreams.open_session("tcp://127.0.0.1:9000") as session:
            async with session.subscribe("range?count=5") as numbers:
                async for raw in numbers:
                    print(int.from_bytes(raw, "big"))

    Args:
        app: publishers this client serves to the server on the same
            connection (the server may subscribe back).
        ssl_context: for ``tls://`` and ``wss://``; default: verify against
            system roots.

    Raises:
        ValueError: a malformed URL.
        OSError: the connection could not be made (for WebSocket also:
            ``ConnectionRefusedError`` when the server answered the upgrade
            with an HTTP error such as 403, ``TimeoutError`` when it did not
            answer within ``config.handshake_timeout``).

    The session says goodbye when the block ends, or closes forcefully if the
    block is cancelled.
    """
    endpoint = parse_url(url)
    if endpoint.websocket:
        # Keep every WebSocket message we send within 256 KiB.
        config = websocket_config(config)
    stream = await connect_stream(endpoint, ssl_context, config=config)
    async with open_stream_session(stream, app=app, config=config) as session:
        yield session
