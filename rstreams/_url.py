"""URLs: the reactive-streams-io ones (``tcp://``, ``tls://``, ``ws://``, ``wss://``)
and the generic form every bridge's scheme uses.

The same URL forms are used everywhere a peer is named (the API, the CLI,
Spark options, the browser client), so they are parsed in one place. A
bridge's URL (``emp://host:port``, ``relink://host:port/endpoint``) is split
here into a :class:`BridgeURL`; what its path and query mean is the bridge's
business.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import parse_qsl, urlsplit

__all__ = ["Endpoint", "BridgeURL", "parse_url", "parse_bridge_url", "url_scheme", "SCHEMES"]

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
    if parts.query:
        raise ValueError(f"URL {url!r} has a query; name the publisher separately")
    if parts.fragment:
        raise ValueError(f"URL {url!r} has a fragment (#...); name the publisher separately")
    if scheme in _WEBSOCKET:
        return Endpoint(scheme, parts.hostname, port, parts.path or "/")
    if parts.path not in ("", "/"):
        raise ValueError(f"URL {url!r} has a path; name the publisher separately")
    return Endpoint(scheme, parts.hostname, port)


def url_scheme(url: str) -> str:
    """The scheme of ``url``, lower case ("" when it has none).

    Raises:
        TypeError: ``url`` is not a str (every way of naming a peer starts here).
    """
    if type(url) is not str:
        raise TypeError(f"a URL is a str, got {type(url).__name__}")
    scheme, separator, _ = url.partition("://")
    return scheme.lower() if separator else ""


@dataclass(frozen=True, slots=True)
class BridgeURL:
    """A bridge's URL, split: ``scheme://host:port/path?query``.

    Attributes:
        port: the port, or the scheme's default when the URL names none.
        path: the path without its leading ``/`` ("" when there is none).
        query: the query parameters (the last value wins).
        secure: whether the scheme is the protocol's TLS form.
    """

    scheme: str
    host: str
    port: int
    path: str = ""
    query: dict[str, str] = field(default_factory=dict)
    secure: bool = False

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        text = f"{self.scheme}://{host}:{self.port}"
        if self.path:
            text += "/" + self.path
        if self.query:
            text += "?" + "&".join(f"{key}={value}" for key, value in self.query.items())
        return text


def parse_bridge_url(url: str, *, default_port: int | None = None, secure: bool = False, allowed_query: frozenset[str] = frozenset()) -> BridgeURL:
    """Split a bridge URL; the bridge says which query keys it takes.

    Raises:
        ValueError: no host, no port (and no default), a bad port, a
            fragment, or a query key not in ``allowed_query``.
    """
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        raise ValueError(f"invalid port in URL {url!r}") from None
    if port is None:
        port = default_port
    if not parts.hostname or port is None:
        raise ValueError(f"URL {url!r} needs a host and a port")
    if parts.fragment:
        raise ValueError(f"URL {url!r} has a fragment")
    query = dict(parse_qsl(parts.query, keep_blank_values=True))
    unknown = sorted(set(query) - allowed_query)
    if unknown:
        known = ", ".join(sorted(allowed_query)) or "none"
        raise ValueError(f"URL {url!r}: unknown query parameter {unknown[0]!r} (known: {known})")
    return BridgeURL(parts.scheme.lower(), parts.hostname, port, parts.path.lstrip("/"), query, secure)
