"""URLs and connections: ``tcp://``, ``tls://``, ``ws://`` and ``wss://``.

The same URL forms are used everywhere a peer is named (the API, the CLI,
Spark options, the browser client), so they are parsed in one place.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from urllib.parse import urlsplit

import trio

from ._config import DEFAULT_CONFIG, SessionConfig
from ._websocket import open_websocket_client

__all__ = ["Endpoint", "parse_url", "connect_stream", "SCHEMES"]

SCHEMES = ("tcp", "tls", "ws", "wss")
_SECURE = frozenset({"tls", "wss"})
_WEBSOCKET = frozenset({"ws", "wss"})


@dataclass(frozen=True, slots=True)
class Endpoint:
    """A parsed rstreams URL.

    Attributes:
        path: the HTTP path of a WebSocket URL (``/`` when the URL names
            none); always ``/`` for ``tcp://`` and ``tls://``.
    """

    scheme: str
    host: str
    port: int
    path: str = "/"

    @property
    def secure(self) -> bool:
        """True for ``tls://`` and ``wss://``."""
        return self.scheme in _SECURE

    @property
    def websocket(self) -> bool:
        """True for ``ws://`` and ``wss://``."""
        return self.scheme in _WEBSOCKET

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        if self.websocket:
            return f"{self.scheme}://{host}:{self.port}{self.path}"
        return f"{self.scheme}://{host}:{self.port}"


def parse_url(url: str) -> Endpoint:
    """Parse ``tcp://host:port``, ``tls://host:port``, ``ws://host:port/path``
    or ``wss://host:port/path`` (IPv6 in brackets).

    A WebSocket URL may name a path (default ``/``, where ``rstreams serve``
    accepts the upgrade; another path is for a proxy in front). No URL takes
    a query: the publisher is named separately.

    Raises:
        ValueError: another scheme, no host, no valid port, a path on a
            tcp/tls URL, or a query.
    """
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in SCHEMES:
        raise ValueError(f"unsupported URL {url!r}: use tcp://, tls://, ws:// or wss:// with host:port")
    try:
        port = parts.port
    except ValueError:
        raise ValueError(f"invalid port in URL {url!r}") from None
    if not parts.hostname or port is None:
        raise ValueError(f"URL {url!r} needs a host and a port")
    if parts.query or parts.fragment:
        raise ValueError(f"URL {url!r} has a query; name the publisher separately")
    if scheme in _WEBSOCKET:
        return Endpoint(scheme, parts.hostname, port, parts.path or "/")
    if parts.path not in ("", "/"):
        raise ValueError(f"URL {url!r} has a path; name the publisher separately")
    return Endpoint(scheme, parts.hostname, port)


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
    try:
        return await open_websocket_client(stream, endpoint, config=config)
    except BaseException:
        await trio.aclose_forcefully(stream)
        raise
