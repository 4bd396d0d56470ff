"""``emp://HOST:PORT``: an EMP peer's publishers as an :class:`rstreams.Peer`.

What ``rstreams.connect("emp://...")`` and ``rstreams sub emp://...`` use. A
subscription is one request of the app contract (``_app``): the request body
names the publisher, the response holds every element, and the stream hands
them to the subscriber as its demand allows. So a subscriber's demand
decides *when* the request goes out (never before there is any), not how
many elements the response carries: EMP request-response has no way to ask
for part of a stream.

A subscription opened with demand (any ``prefetch`` > 0) sends its request
at once and counts as subscribed when the response arrives, so an unknown
publisher is raised by entering the ``async with`` as it is over TCP. With
no demand yet (``prefetch=0``), it counts as subscribed at once and sends
the request at the first ``request(n)``.
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from rstreams import PublisherError, UnknownPublisher
from rstreams.support import StreamFeed, parse_bridge_url

from ..kit import BridgePeer, open_bridge_peer
from ._app import decode_response
from ._codec import Framing
from ._config import EmpConfig
from ._connect import open_emp_connection
from ._trio import EmpConnection

__all__ = ["EmpPeer", "connect_emp_url", "FRAMINGS"]

#: The ``?framing=`` values of an EMP URL (and of ``--framing``).
FRAMINGS = {"spec": Framing.SIZE_INCLUDES_FIELD, "author": Framing.SIZE_EXCLUDES_FIELD}


class EmpPeer(BridgePeer[EmpConnection]):
    """An app served over EMP (``rstreams serve --emp``), read as an rstreams peer."""

    async def run_stream(self, feed: StreamFeed) -> None:
        if feed.demand <= 0:
            feed.subscribed()
            await feed.wait_demand()
            if feed.ended:
                return
        body = await self.connection.call(feed.name.encode("utf-8"))
        try:
            elements = decode_response(body)
        except PublisherError as exc:
            if exc.message.startswith("no such publisher"):
                raise UnknownPublisher(feed.name, exc.message) from None
            raise
        feed.subscribed()
        while elements:
            await feed.wait_demand()
            if feed.ended:
                return
            count = min(feed.demand, len(elements))
            feed.deliver(elements[:count])
            del elements[:count]


@asynccontextmanager
async def connect_emp_url(url: str, *, ssl_context: ssl.SSLContext | None = None) -> AsyncIterator[EmpPeer]:
    """Open ``emp://HOST:PORT`` (``emps://`` for TLS; ``?framing=author``) as a peer.

    Raises:
        ValueError: a malformed URL or an unknown framing.
        OSError: the connection could not be made; and the EMP errors of the
            handshake (``EmpTimeout``, ``PeerError``, ...).
    """
    secure = url.lower().startswith("emps:")
    parsed = parse_bridge_url(url, secure=secure, allowed_query=frozenset({"framing"}))
    if parsed.path:
        raise ValueError(f"URL {url!r} has a path; name the publisher separately")
    framing_name = parsed.query.get("framing", "spec")
    if framing_name not in FRAMINGS:
        raise ValueError(f"URL {url!r}: framing must be one of {', '.join(FRAMINGS)}, not {framing_name!r}")
    if secure and ssl_context is None:
        ssl_context = ssl.create_default_context()
    elif not secure and ssl_context is not None:
        raise ValueError("ssl_context given for an emp:// URL; use emps://")
    config = EmpConfig(framing=FRAMINGS[framing_name])
    async with open_emp_connection(parsed.host, parsed.port, ssl_context=ssl_context, config=config) as connection:
        async with open_bridge_peer(EmpPeer(connection)) as peer:
            yield peer
