"""Client entry points: open a session to a URL, or a peer to any URL."""

from __future__ import annotations

import dataclasses
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from ._config import DEFAULT_CONFIG, SessionConfig
from ._event_loop import require_trio
from ._memory import memory_stream_pair
from ._peer import Peer
from ._publish import Router
from ._registry import find_scheme
from ._session import Session, open_stream_session
from ._transport import connect_stream
from ._url import SCHEMES, parse_url, url_scheme

__all__ = ["open_session", "connect", "open_local_session"]


@asynccontextmanager
async def open_session(
    url: str,
    *,
    app: Router | None = None,
    ssl_context: ssl.SSLContext | None = None,
    config: SessionConfig | None = None,
    token: str | None = None,
) -> AsyncIterator[Session]:
    """Connect to ``url``: ``tcp://host:port``, ``tls://host:port``,
    ``ws://host:port/`` or ``wss://host:port/``.

    Example::

        async with rstreams.open_session("tcp://127.0.0.1:9000") as session:
            async with session.subscribe("range?count=5") as numbers:
                async for raw in numbers:
                    print(int.from_bytes(raw, "big"))

    For any URL, a bridge's included (``emp://``, ...), use :func:`connect`.

    Args:
        app: publishers this client serves to the server on the same
            connection (the server may subscribe back).
        ssl_context: for ``tls://`` and ``wss://``; default: verify against
            system roots.
        token: a bearer token for the server's ``authenticate`` hook,
            carried in our hello (never logged).

    Raises:
        ValueError: a malformed URL.
        OSError: the connection could not be made (for WebSocket also:
            ``ConnectionRefusedError`` when the server answered the upgrade
            with an HTTP error such as 403, ``TimeoutError`` when it did not
            answer within ``config.handshake_timeout``).
        RuntimeError: awaited under asyncio (use :mod:`rstreams.sync`).

    The session says goodbye when the block ends, or closes forcefully if the
    block is cancelled.
    """
    require_trio("open_session")
    config = DEFAULT_CONFIG if config is None else config
    if token is not None:
        config = dataclasses.replace(config, token=token)
    endpoint = parse_url(url)
    if endpoint.websocket:
        from ._websocket import websocket_config  # only WebSocket clients need wsproto

        # Keep every WebSocket message we send within 256 KiB.
        config = websocket_config(config)
    stream = await connect_stream(endpoint, ssl_context, config=config)
    async with open_stream_session(stream, app=app, config=config) as session:
        yield session


@asynccontextmanager
async def connect(
    url: str,
    *,
    ssl_context: ssl.SSLContext | None = None,
    config: SessionConfig | None = None,
    token: str | None = None,
) -> AsyncIterator[Peer]:
    """Connect to the publishers at ``url``, whatever protocol carries them.

    ``tcp://``, ``tls://``, ``ws://`` and ``wss://`` open a
    :class:`~rstreams.Session` (as :func:`open_session`); every other scheme
    goes to the bridge that registered it (``emp://HOST:PORT``,
    ``relink://HOST:PORT/ENDPOINT``, ...). Either way the result has
    ``subscribe(name, prefetch=...)`` and ``fetch``::

        async with rstreams.connect("emp://127.0.0.1:7000") as peer:
            async with peer.subscribe("range?count=3") as numbers:
                async for raw in numbers:
                    print(raw.hex())

    Args:
        ssl_context: for the TLS schemes; default: verify against system roots.
        token: a bearer token (reactive-streams-io URLs; see :func:`open_session`).
            Bridges' URLs ignore it: their protocols carry no credential
            (docs/bridges/README.md; use mutual TLS there).
        config: the session's settings (reactive-streams-io URLs only;
            None: the defaults, ``SessionConfig()``).

    Raises:
        UnsupportedScheme: no installed bridge handles the scheme (a
            ``ValueError`` whose message lists the schemes that are handled).
        ValueError: a malformed URL.
        OSError: the connection could not be made.
        RuntimeError: awaited under asyncio (use :mod:`rstreams.sync`).
    """
    require_trio("connect")
    scheme = url_scheme(url)
    if scheme in SCHEMES:
        async with open_session(url, ssl_context=ssl_context, config=config, token=token) as session:
            yield session
        return
    bridge, _ = find_scheme(url, scheme)
    async with bridge.connect(url, ssl_context=ssl_context) as peer:
        yield peer


@asynccontextmanager
async def open_local_session(app: Router, *, config: SessionConfig | None = None) -> AsyncIterator[Session]:
    """A session to ``app``'s publishers in this process, over an in-memory stream.

    What a bridge uses to serve an app: subscribing goes through the same
    router, demand and codecs as a TCP subscriber's, without a socket.
    """
    config = DEFAULT_CONFIG if config is None else config
    client_stream, server_stream = memory_stream_pair()
    async with open_stream_session(server_stream, app=app, config=config):
        async with open_stream_session(client_stream, config=config) as session:
            yield session
