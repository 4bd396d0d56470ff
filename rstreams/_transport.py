"""URLs and connections: ``tcp://host:port`` and ``tls://host:port``.

The same URL forms are used everywhere a peer is named (the API, the CLI,
Spark options, the browser client), so they are parsed in one place.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from urllib.parse import urlsplit

import trio

__all__ = ["Endpoint", "parse_url", "connect_stream", "SCHEMES"]

SCHEMES = ("tcp", "tls")


@dataclass(frozen=True, slots=True)
class Endpoint:
    """A parsed rstreams URL."""

    scheme: str
    host: str
    port: int

    @property
    def secure(self) -> bool:
        return self.scheme == "tls"

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}"


def parse_url(url: str) -> Endpoint:
    """Parse ``tcp://host:port`` or ``tls://host:port`` (IPv6 in brackets).

    Raises:
        ValueError: another scheme, no host, or no valid port.
    """
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in SCHEMES:
        raise ValueError(f"unsupported URL {url!r}: use tcp://host:port or tls://host:port")
    try:
        port = parts.port
    except ValueError:
        raise ValueError(f"invalid port in URL {url!r}") from None
    if not parts.hostname or port is None:
        raise ValueError(f"URL {url!r} needs a host and a port")
    if parts.path not in ("", "/") or parts.query:
        raise ValueError(f"URL {url!r} has a path or query; name the publisher separately")
    return Endpoint(scheme, parts.hostname, port)


async def connect_stream(endpoint: Endpoint, ssl_context: ssl.SSLContext | None = None) -> trio.abc.Stream:
    """Open the transport for ``endpoint``.

    For ``tls://`` the default context verifies the server's certificate
    against the system's roots; pass ``ssl_context`` for your own CA.
    """
    if endpoint.secure:
        context = ssl_context if ssl_context is not None else ssl.create_default_context()
        # https_compatible: our goodbye, not TLS close_notify, marks a clean end.
        return await trio.open_ssl_over_tcp_stream(
            endpoint.host, endpoint.port, ssl_context=context, https_compatible=True
        )
    if ssl_context is not None:
        raise ValueError("ssl_context given for a tcp:// URL; use tls://")
    return await trio.open_tcp_stream(endpoint.host, endpoint.port)
