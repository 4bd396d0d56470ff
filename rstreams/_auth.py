"""Authentication and authorization hooks for servers (issue 18, item 10).

A client carries a bearer token in its hello (the bearer extension,
``docs/PROTOCOL.md`` section 9), or, over WebSocket, in the
``Sec-WebSocket-Protocol`` (``rstreams.bearer.TOKEN``) or ``Authorization:
Bearer TOKEN`` header of its upgrade request. A server configured with
``authenticate`` hands the token (None without one) and what it knows of the
peer to that hook once the peer's hello is in, before any subscribe is
answered: a :class:`Principal` admits the peer, None refuses it with goodbye
``authentication failed`` and nothing else. ``authorize`` then decides, for
each subscribe, whether that principal may subscribe to the publisher name.

Tokens are credentials: they never appear in a repr, a log record or an
error message.
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "Principal",
    "PeerInfo",
    "Authenticate",
    "Authorize",
    "static_token",
    "AUTHENTICATION_FAILED",
]

#: The goodbye reason a refused peer gets.
AUTHENTICATION_FAILED = "authentication failed"


@dataclass(frozen=True, slots=True, kw_only=True)
class Principal:
    """Who an authenticated peer is, as the ``authenticate`` hook says.

    Attributes:
        name: how logs and ``authorize`` name the peer.
        claims: anything else the hook wants ``authorize`` to see.
    """

    name: str
    claims: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class PeerInfo:
    """What the server knows of a peer when it authenticates it.

    Attributes:
        address: ``host:port`` of the peer (``-`` without a socket).
        transport: ``tcp``, ``tls``, ``ws``, ``wss``, ...
        certificate: the peer's TLS client certificate as
            ``ssl.SSLSocket.getpeercert()`` gives it (mutual TLS), or None.
    """

    address: str
    transport: str
    certificate: Mapping[str, Any] | None = None


#: ``async def authenticate(token, peer) -> Principal | None``: None refuses.
Authenticate = Callable[[str | None, PeerInfo], Awaitable[Principal | None]]
#: ``def authorize(principal, publisher_name) -> bool``, per subscribe.
Authorize = Callable[[Principal, str], bool]


def static_token(token: str, *, name: str = "token") -> Authenticate:
    """The built-in hook: admit exactly the peers that present ``token``.

    Compares in constant time. Used by ``rstreams serve --token``.

    Args:
        token: the one token accepted (not empty).
        name: the :class:`Principal` name admitted peers get.

    Raises:
        ValueError: ``token`` is empty.
    """
    if not token:
        raise ValueError("the server token must not be empty")
    expected = token.encode("utf-8", "surrogatepass")
    principal = Principal(name=name)

    async def authenticate(presented: str | None, peer: PeerInfo) -> Principal | None:
        if presented is None:
            return None
        if hmac.compare_digest(presented.encode("utf-8", "surrogatepass"), expected):
            return principal
        return None

    return authenticate
