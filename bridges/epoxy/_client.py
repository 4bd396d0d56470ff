"""``epoxy://HOST:PORT``: an app's publishers served over Epoxy, as an :class:`rstreams.Peer`.

What ``rstreams.connect("epoxy://...")`` and ``rstreams sub epoxy://...``
use. A subscription is one ``rstreams.Publishers.Subscribe`` call (``_app``):
the request names the publisher, the response holds every element, and the
stream hands them to the subscriber as its demand allows. So a subscriber's
demand decides *when* the request goes out (never before there is any), and
the requests in flight on a connection are never more than the
subscriptions with demand; Epoxy's request-response has no way to ask for
part of a stream.

A subscription opened with demand (any ``prefetch`` > 0) sends its request
at once and counts as subscribed when the response arrives, so an unknown
publisher is raised by entering the ``async with``, as over TCP. With no
demand yet (``prefetch=0``), it counts as subscribed at once and sends the
request at the first ``request(n)``.

The connection is symmetric once open: a request the server sends us is
answered ``METHOD_NOT_FOUND`` (we serve no service) and an event is dropped,
so neither can stall the responses behind it.
"""

from __future__ import annotations

import difflib
import json
import ssl
from collections.abc import AsyncIterable, AsyncIterator
from contextlib import asynccontextmanager

import trio

from rstreams import PublisherError, UnknownPublisher
from rstreams.support import PUBLISHERS_PATH, StreamFeed, caller_sees_its_own_exception, parse_bridge_url, take_ready

from ..kit import BridgePeer, open_bridge_peer
from . import bond
from ._app import PUBLISHERS_SERVICE, Elements, PublishEvent, SubscribeRequest
from ._connect import open_epoxy_connection
from ._errors import EpoxyError, ErrorResponse
from ._service import MAX_EVENTS_AT_ONCE, serve_services
from ._settings import DEFAULT_PORT, DEFAULT_TLS_PORT
from ._structs import ErrorCode
from ._trio import EpoxyConnection

__all__ = ["EpoxyPeer", "connect_epoxy_url", "publish_epoxy_url", "subscribe_call"]


async def subscribe_call(connection: EpoxyConnection, name: str) -> list[bytes]:
    """Call ``rstreams.Publishers.Subscribe`` for ``name``; return the elements.

    Raises:
        UnknownPublisher: the answer was ``METHOD_NOT_FOUND``.
        PublisherError: another error response, or a response that is not
            ``rstreams.epoxy.Elements``.
        EpoxyClosed, PeerProtocolError, ...: the connection ended first.
    """
    try:
        result = await connection.call(PUBLISHERS_SERVICE, "Subscribe", SubscribeRequest(publisher=name), Elements)
    except ErrorResponse as exc:
        message = exc.error.message or exc.message
        if exc.error.error_code == ErrorCode.METHOD_NOT_FOUND:
            raise UnknownPublisher(name, message) from None
        raise PublisherError(message) from None
    except bond.BondDecodeError as exc:
        raise PublisherError(f"the Subscribe response is not an rstreams.epoxy.Elements: {exc}") from None
    return result.elements


class EpoxyPeer(BridgePeer[EpoxyConnection]):
    """An app served over Epoxy (``rstreams serve --epoxy``), read as an rstreams peer."""

    async def run_stream(self, feed: StreamFeed) -> None:
        if feed.demand <= 0:
            feed.subscribed()
            await feed.wait_demand()
            if feed.ended:
                return
        elements = await subscribe_call(self.connection, feed.name)
        feed.subscribed()
        while elements:
            await feed.wait_demand()
            if feed.ended:
                return
            count = min(feed.demand, len(elements))
            feed.deliver(elements[:count])
            del elements[:count]


async def _check_topic(connection: EpoxyConnection, topic: str) -> None:
    # A Publish event to a name that is not a topic is dropped (an event has
    # no response to refuse it with): ask the server's listing first, as
    # `rstreams ls` does, so that nothing is sent that would go nowhere. A
    # server that lists nothing (no $publishers, or too many routes to answer
    # with) is not checked.
    try:
        records = [json.loads(raw) for raw in await subscribe_call(connection, PUBLISHERS_PATH)]
    except (PublisherError, ValueError):
        return
    topics = sorted(str(r.get("name")) for r in records if isinstance(r, dict) and r.get("kind") == "topic")
    if topic not in topics:
        closest = difflib.get_close_matches(topic, topics, n=3)
        hint = f" (closest: {', '.join(closest)})" if closest else f" (its topics: {', '.join(topics[:10]) or 'none'})"
        raise UnknownPublisher(topic, f"no such topic: {topic}{hint}")


async def _serve_nothing(connection: EpoxyConnection) -> None:
    try:
        await serve_services(connection, [])
    except EpoxyError:
        pass  # the peer's streams see why the connection ended


def _parse_epoxy_url(url: str, ssl_context: ssl.SSLContext | None) -> tuple[str, int, ssl.SSLContext | None]:
    # host, port and the TLS context.
    secure = url.lower().startswith("epoxys:")
    parsed = parse_bridge_url(url, default_port=DEFAULT_TLS_PORT if secure else DEFAULT_PORT, secure=secure)
    if parsed.path:
        raise ValueError(f"URL {url!r} has a path; name the publisher separately")
    if secure and ssl_context is None:
        ssl_context = ssl.create_default_context()
    elif not secure and ssl_context is not None:
        raise ValueError("ssl_context given for an epoxy:// URL; use epoxys://")
    return parsed.host, parsed.port, ssl_context


@asynccontextmanager
async def connect_epoxy_url(url: str, *, ssl_context: ssl.SSLContext | None = None) -> AsyncIterator[EpoxyPeer]:
    """Open ``epoxy://HOST[:PORT]`` (``epoxys://`` for TLS) as a peer.

    The ports default to the spec's: 25188, and 25156 for TLS.

    Raises:
        ValueError: a malformed URL (a path or query is not allowed).
        OSError: the connection could not be made; and the Epoxy errors of
            the handshake (``PeerProtocolError`` for a rejection,
            ``EpoxyTimeout``, ...).
    """
    host, port, ssl_context = _parse_epoxy_url(url, ssl_context)
    async with open_epoxy_connection(host, port, ssl_context=ssl_context) as connection:
        with caller_sees_its_own_exception():
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_serve_nothing, connection)
                async with open_bridge_peer(EpoxyPeer(connection)) as peer:
                    yield peer
                nursery.cancel_scope.cancel()


async def publish_epoxy_url(
    url: str, topic: str, elements: AsyncIterable[bytes], *, ssl_context: ssl.SSLContext | None = None
) -> int:
    """Publish ``elements`` into the app's topic ``topic``, one ``Publish`` event each; return how many.

    What ``rstreams pub epoxy://HOST:PORT NAME`` uses. Each element is an
    ``rstreams.Publishers.Publish`` event (``PublishEvent { topic, value }``).
    The server runs a connection's events one after the other and reads the
    next only once the topic took the previous one, so TCP paces the
    sender: the next element is pulled from ``elements`` only when the
    connection's writer has room (``max_write_buffer``). Epoxy events carry
    no answer, so the count is of events written: it returns once every
    event was written to the transport, then closes the connection
    gracefully, and the server runs every event it reads before the close.

    The listing of the server's routes (``$publishers``, as ``rstreams ls``)
    is asked for first: a name that is not a topic there raises before
    anything is sent, since a ``Publish`` event to it would be dropped
    without a word (an event has no response).

    Raises:
        UnknownPublisher: the server lists its routes and ``topic`` is not
            a topic among them.
        ValueError: a malformed URL (as :func:`connect_epoxy_url`) or a
            topic that is empty or has a query.
        OSError: the connection could not be made; the Epoxy errors of the
            handshake and of a connection that ended.

    Cancellation closes the connection; events already written may have
    been published. Always checkpoints.
    """
    if not topic or "?" in topic:
        raise ValueError(f"{topic!r} is not a topic name")
    host, port, ssl_context = _parse_epoxy_url(url, ssl_context)
    published = 0
    async with open_epoxy_connection(host, port, ssl_context=ssl_context) as connection:
        with caller_sees_its_own_exception():
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_serve_nothing, connection)
                await _check_topic(connection, topic)
                async for element in elements:
                    # With it, those ready already (rstreams.support.take_ready):
                    # queued one after the other with no wait between, they
                    # go in one write, and the server runs them as one batch.
                    for each in (element, *take_ready(elements, MAX_EVENTS_AT_ONCE - 1)):
                        await connection.send_event(PUBLISHERS_SERVICE, "Publish", PublishEvent(topic=topic, value=each))
                        published += 1
                # Closing gives the writer only close_timeout: a server that
                # paces us (a full topic) could leave events unwritten then.
                await connection.wait_written()
                nursery.cancel_scope.cancel()
    return published
