"""Opening the transport of a reactive-streams-io URL: TCP, TLS or WebSocket.

The URLs themselves are parsed in ``_url``.
"""

from __future__ import annotations

import ssl

import trio

from ._config import DEFAULT_CONFIG, SessionConfig
from ._url import Endpoint

__all__ = ["connect_stream"]

async def connect_stream(
    endpoint: Endpoint,
    ssl_context: ssl.SSLContext | None = None,
    *,
    config: SessionConfig = DEFAULT_CONFIG,
) -> trio.abc.Stream:
    """Open the transport for ``endpoint``.

    For ``tls://`` and ``wss://`` the default context verifies the server's
    certificate against the system's roots; pass ``ssl_context`` for your
    own CA. For ``ws://`` and ``wss://`` the WebSocket handshake is done
    here (bounded by ``config.handshake_timeout``), and the stream returned
    carries the protocol in binary WebSocket messages.
    """
    if endpoint.secure:
        context = ssl_context if ssl_context is not None else ssl.create_default_context()
        # https_compatible: our goodbye, not TLS close_notify, marks a clean end.
        stream: trio.abc.Stream = await trio.open_ssl_over_tcp_stream(
            endpoint.host, endpoint.port, ssl_context=context, https_compatible=True
        )
    elif ssl_context is not None:
        raise ValueError(f"ssl_context given for a {endpoint.scheme}:// URL; use tls:// or wss://")
    else:
        stream = await trio.open_tcp_stream(endpoint.host, endpoint.port)
    if not endpoint.websocket:
        return stream
    # Imported here: a tcp:// or tls:// client (``rstreams sub tcp://...``)
    # has no use for wsproto and h11, nor for the time they take to import.
    from ._websocket import open_websocket_client

    try:
        return await open_websocket_client(stream, endpoint, config=config)
    except BaseException:
        await trio.aclose_forcefully(stream)
        raise
