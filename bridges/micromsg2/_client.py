"""``mm2://HOST:PORT``: a MicroMsg2 broker as an :class:`rstreams.Peer`.

What ``rstreams.connect("mm2://...")`` and ``rstreams sub mm2://...`` use.
A subscription is ``subscribe;destination=NAME``; its MESSAGEs are its
elements (their payloads), ``completed`` completes it and the stream ERROR
fails it (:class:`rstreams.UnknownPublisher` when the message starts with
``no such publisher:``, else :class:`rstreams.PublisherError`).

The window is the demand. The peer requires ``pubsub`` and suggests
``batch-ack:max-count=W``, where W is the URL's ``window`` or, by default,
the demand of the first subscriber when it first has some: ``rstreams sub
--prefetch N`` asks for N, so it subscribes with a window of N (capped at
``max_pending_messages``, 1024). A subscriber with no prefetch (the default:
its demand adapts, starting at 16), or one that runs such a window by hand
(:attr:`rstreams.Subscription.adaptive`: ``rstreams sub`` without
``--prefetch``), gets the largest window, 1024, since its first demand is
only where its window starts: the acks follow its demand. That is why the handshake waits for the
first subscription: the TCP (or TLS) connection is made at once, so a host
that does not answer fails ``connect``, but a broker that refuses the
handshake fails the first subscription, with the typed MicroMsg2 error.
A stream takes (and so acknowledges) messages when its subscriber has
demand for them, all that have arrived up to that demand in one batch with
one ack, and one message ahead when it has none, so that ``completed`` is
seen without demand, as onComplete is over TCP; a subscriber that stops asking
stops the acks, so the broker stops sending. One window serves every subscription of the connection (the
protocol has no other): a subscriber that never asks holds up to the window
of its messages, and with them the others.

A subscription opened with demand counts as subscribed when its first
message, ``completed`` or ERROR arrives, so an unknown publisher is raised
by entering the ``async with``, as over TCP; one opened with no demand
(``prefetch=0``) counts as subscribed at once.
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterable, AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace

import trio

from rstreams import PublisherError, UnknownPublisher
from rstreams.support import StreamFeed, caller_sees_its_own_exception, parse_bridge_url, report_confirmed, take_ready

from ..kit import BridgePeer, open_bridge_peer, open_tcp_stream, start_connection
from ._broker import MAX_SENDS_AT_ONCE, UNKNOWN_PUBLISHER
from ._connect import open_micromsg2_stream
from ._errors import MicroMsg2Closed, StreamError
from ._extensions import MAX_WINDOW, PUBSUB, ExtensionSpec
from ._settings import DEFAULT_SETTINGS, MicroMsg2Settings
from ._state import Role
from ._trio import MicroMsg2Connection

__all__ = ["PUBLISH_WINDOW", "MicroMsg2Peer", "confirm_sends", "connect_mm2_url", "publish_mm2_url", "stream_error"]

#: The batch-ack window :func:`publish_mm2_url` suggests when the URL has
#: none: SENDs in flight to the broker and not yet in their topic (the
#: broker's own suggestion, ``BROKER_WINDOW``, is the same).
PUBLISH_WINDOW = 64

# Without acks, how long (seconds) a publish waits after its last SEND for
# the broker to refuse them (an ERROR) before it closes.
UNACKNOWLEDGED_GRACE = 0.2


def stream_error(name: str, error: StreamError) -> PublisherError:
    """The rstreams error for a stream ERROR of the broker's."""
    if error.message.startswith(UNKNOWN_PUBLISHER):
        return UnknownPublisher(name, error.message)
    return PublisherError(error.message)


class MicroMsg2Peer(BridgePeer[MicroMsg2Connection]):
    """A MicroMsg2 broker (``rstreams serve --micromsg2``), read as an rstreams peer.

    Args:
        connection: a client connection not started yet.
        nursery: where the connection's tasks will run.
        window: the batch-ack window; None: the first subscriber's demand.
        settings: the rest of the connection's settings.
    """

    def __init__(
        self,
        connection: MicroMsg2Connection,
        nursery: trio.Nursery,
        *,
        window: int | None = None,
        settings: MicroMsg2Settings = DEFAULT_SETTINGS,
    ) -> None:
        super().__init__(connection)
        self.window = window
        self.settings = settings
        self._connection_nursery = nursery
        self._start_lock = trio.Lock()
        self._started = False

    async def _start(self, feed: StreamFeed) -> MicroMsg2Connection:
        # The handshake, once, with the window of the first demand; an
        # adaptive subscriber's first demand is only where its window
        # starts, so it gets the largest window instead, and its acks (one
        # per message it takes) pace the broker as its demand grows.
        async with self._start_lock:
            if not self._started:
                largest = min(self.settings.limits.max_pending_messages, MAX_WINDOW)
                wanted = largest if feed.adaptive else feed.demand
                window = self.window or max(1, min(wanted, largest))
                settings = replace(
                    self.settings,
                    required=(ExtensionSpec(name=PUBSUB),),
                    optional=(ExtensionSpec.batch_ack(window),),
                )
                self.connection._use_settings(settings)
                self._started = True
                await start_connection(self.connection, self._connection_nursery)
        return self.connection

    async def run_stream(self, feed: StreamFeed) -> None:
        announced = feed.demand <= 0
        if announced:
            feed.subscribed()
            await feed.wait_demand()
            if feed.ended:
                return
        connection = await self._start(feed)
        stream = await connection.subscribe(feed.name)
        try:
            while True:
                # What the subscriber asks for is taken (and acknowledged)
                # as one batch of what has arrived, and at least one message
                # even without demand, so that ``completed`` is seen without
                # demand, as onComplete is over TCP: one message beyond the
                # demand at most.
                try:
                    payloads = [message.payload for message in await stream.receive_batch(max(1, feed.demand))]
                finally:
                    if not announced:
                        feed.subscribed()
                        announced = True
                await feed.wait_demand()
                if feed.ended:
                    return
                feed.deliver(payloads)
        except StreamError as exc:
            raise stream_error(feed.name, exc) from None
        except MicroMsg2Closed as exc:
            # The connection's normal end, which the peer's watch reports to
            # every stream too: the same error whichever of the two sees it
            # first, so that a ``sub`` says one thing for one event.
            reason = connection.end_reason
            raise self.stream_error(reason if reason is not None else exc) from None
        except trio.EndOfChannel:
            return  # completed
        finally:
            stream.unsubscribe()


def _parse_mm2_url(url: str, ssl_context: ssl.SSLContext | None) -> tuple[str, int, int | None, ssl.SSLContext | None]:
    # host, port, the URL's window (None: not given) and the TLS context.
    secure = url.lower().startswith("mm2s:")
    parsed = parse_bridge_url(url, secure=secure, allowed_query=frozenset({"window"}))
    if parsed.path:
        raise ValueError(f"URL {url!r} has a path; name the destination separately")
    window: int | None = None
    if "window" in parsed.query:
        text = parsed.query["window"]
        if not text.isdigit() or not 1 <= int(text) <= MAX_WINDOW:
            raise ValueError(f"URL {url!r}: window must be an integer in [1, {MAX_WINDOW}]")
        window = int(text)
    if secure and ssl_context is None:
        ssl_context = ssl.create_default_context()
    elif not secure and ssl_context is not None:
        raise ValueError("ssl_context given for an mm2:// URL; use mm2s://")
    return parsed.host, parsed.port, window, ssl_context


@asynccontextmanager
async def connect_mm2_url(url: str, *, ssl_context: ssl.SSLContext | None = None) -> AsyncIterator[MicroMsg2Peer]:
    """Open ``mm2://HOST:PORT`` (``mm2s://`` for TLS) as a peer; ``?window=N`` fixes the window.

    Raises:
        ValueError: a malformed URL (no port, a path, an unknown query
            parameter, a window that is not in [1, 65535]).
        OSError: the connection could not be made.
    """
    host, port, window, ssl_context = _parse_mm2_url(url, ssl_context)
    stream = await open_tcp_stream(host, port, ssl_context=ssl_context)
    connection = MicroMsg2Connection(stream, Role.CLIENT, DEFAULT_SETTINGS)
    with caller_sees_its_own_exception():
        async with trio.open_nursery() as nursery:
            try:
                async with open_bridge_peer(MicroMsg2Peer(connection, nursery, window=window)) as peer:
                    yield peer
            finally:
                nursery.cancel_scope.cancel()


async def publish_mm2_url(
    url: str, topic: str, elements: AsyncIterable[bytes], *, ssl_context: ssl.SSLContext | None = None
) -> int:
    """Publish ``elements`` into the broker's topic ``topic``, one SEND each; return how many.

    What ``rstreams pub mm2://HOST:PORT NAME`` uses. The connection suggests
    ``batch-ack:max-count=W`` (W: the URL's ``window``, else
    :data:`PUBLISH_WINDOW`); the broker acknowledges a SEND once the topic
    took it, so at most W elements are sent and not yet in the topic, and
    the next element is pulled from ``elements`` only when the window has
    room. When ``elements`` is :class:`rstreams.support.ReadyElements` (the
    lines ``rstreams pub`` has read already), those ready after each one go
    with it in one write, as many as the window has room for, and the
    broker takes them into the topic, and acknowledges them, together.
    Returns once every SEND was acknowledged. Without acks (a broker
    that refuses the extension) nothing confirms the SENDs: they were
    written, and the broker did not end the connection.

    Raises:
        ValueError: a malformed URL (as :func:`connect_mm2_url`).
        OSError: the connection could not be made.
        SendRefused: the broker dropped what was sent (``topic`` is not a
            topic of its app); nothing of it was published.
        MicroMsg2Error: the handshake failed, the broker sent an ERROR, or
            the connection ended before every SEND was acknowledged.

    Cancellation closes the connection; elements already sent may be in the
    topic. Always checkpoints.
    """
    host, port, window, ssl_context = _parse_mm2_url(url, ssl_context)
    settings = replace(DEFAULT_SETTINGS, optional=(ExtensionSpec.batch_ack(window or PUBLISH_WINDOW),))
    stream = await open_tcp_stream(host, port, ssl_context=ssl_context)
    published = 0
    async with open_micromsg2_stream(stream, role=Role.CLIENT, settings=settings) as connection:
        try:
            async for element in elements:
                refused = connection.refused(topic)
                if refused is not None:
                    raise refused  # (the broker dropped the ones before: say so now)
                # With it, those ready already, as the window has room for them:
                # one write, one read for the broker and one ack.
                credit = connection.send_credit
                room = MAX_SENDS_AT_ONCE if credit is None else min(credit, MAX_SENDS_AT_ONCE)
                batch = [element, *take_ready(elements, room - 1)]
                await connection.send_messages(topic, [(each, ()) for each in batch])  # waits for the window: the topic's pace
                published += len(batch)
            await confirm_sends(connection, topic)
        finally:
            if connection.window is not None and connection.refused(topic) is None:
                # An ack says the topic took the SEND: all but those unacked.
                report_confirmed(elements, max(published - connection.unacknowledged, 0))
    return published


async def confirm_sends(connection: MicroMsg2Connection, destination: str) -> None:
    """Return once every SEND to ``destination`` was taken; raise if the broker said otherwise.

    What ``publish_mm2_url`` and ``rstreams mm2 send`` end with: every SEND
    acknowledged (without acks nothing confirms them, so a broker that
    refuses them gets :data:`UNACKNOWLEDGED_GRACE` to say so before we
    close).

    Raises:
        SendRefused: the broker dropped what was sent to ``destination``
            (a broker of ours says so before the ack of the SEND).
        MicroMsg2Error: the broker sent an ERROR, or the connection ended
            otherwise than closed.
    """
    await connection.wait_acknowledged()
    if connection.window is None:
        with trio.move_on_after(UNACKNOWLEDGED_GRACE):
            await connection.wait_ended()
    reason = connection.end_reason
    if reason is not None and not isinstance(reason, MicroMsg2Closed):
        raise reason
    refused = connection.refused(destination)
    if refused is not None:
        raise refused
