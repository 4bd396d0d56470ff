"""``relink://HOST:PORT/ENDPOINT``: an app served over Relink, as an :class:`rstreams.Peer`.

What ``rstreams.connect("relink://...")`` and ``rstreams sub relink://...``
use. Each subscription takes a free channel id (round robin, so an id just
released is the last to be reused), claims the listener's channel with that
id, and sends the publisher name on its own channel. Elements are taken from
the listener's channel only while the subscriber has demand: taking one
consumes it, and those consumed acknowledgements are what lets the listener
send more (never more than its window ahead). The subscriber's ``prefetch``
is the stream's consumed-ack window (with no prefetch, the adaptive demand:
the window grows as the demand does): the acknowledgement goes out once that
many were taken, or when everything received was taken (the listener may
be waiting on a window smaller than our prefetch), or after the link's
short ack delay, whichever comes first. A two-part message with an
empty first part is the publisher's error (``no such publisher: ...`` is
raised as :class:`rstreams.UnknownPublisher`; ``server shutting down``, the
listener's app server stopping, as :class:`~bridges.relink.RelinkClosed`
with ``by_peer`` true, as the peer's shutdown). A subscriber that leaves
early closes our channel, which cancels the subscription; whatever the
listener had sent is consumed and dropped.

The link reconnects by itself after a drop and resumes: the streams carry
on, nothing lost or duplicated. A listener that lost the link (restarted)
ends the open streams with :class:`~bridges.relink.LinkLostError`; the
peer's shutdown ends them with :class:`~bridges.relink.RelinkClosed`.
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import trio
from trio.lowlevel import enable_ki_protection

from rstreams import PublisherError, UnknownPublisher
from rstreams.support import StreamFeed, parse_bridge_url

from ..kit import BridgePeer, open_bridge_peer
from ._app import SHUTTING_DOWN
from ._connect import DEFAULT_ENDPOINT, open_relink_link
from ._errors import RelinkError, RemoteProtocolError
from ._events import MessageReceived
from ._handshake import LinkConfig, check_endpoint_name
from ._link_errors import RelinkClosed
from ._settings import DEFAULT_SETTINGS, RelinkSettings
from ._inbound_channel import InboundChannel
from ._trio_link import RelinkLink

__all__ = ["RelinkPeer", "connect_relink_url", "DEFAULT_CLIENT_ID_SIZE"]

#: Channel id bytes a ``relink://`` client asks for (``?id_size=`` changes it).
DEFAULT_CLIENT_ID_SIZE = 4


class _ChannelIds:
    # Free channel ids, handed out round robin; waits when all are taken.

    def __init__(self, size: int) -> None:
        self.count = 1 << (8 * size)
        self.next = 0
        self.taken: set[int] = set()
        self.lot = trio.lowlevel.ParkingLot()

    async def take(self) -> int:
        while len(self.taken) >= self.count:
            await self.lot.park()
        while self.next in self.taken:
            self.next = (self.next + 1) % self.count
        channel = self.next
        self.taken.add(channel)
        self.next = (self.next + 1) % self.count
        return channel

    def give_back(self, channel: int) -> None:
        self.taken.discard(channel)
        self.lot.unpark(count=1)


class RelinkPeer(BridgePeer[RelinkLink]):  # type: ignore[type-var]
    """An app served over Relink (``rstreams serve --relink``), read as an rstreams peer.

    The kit's peer over a link rather than over one connection: the link
    has the parts of a connection the peer uses (``aclose``, how it ended),
    and outlives the connections that carry it.
    """

    def __init__(self, link: RelinkLink, *, id_size: int) -> None:
        super().__init__(link)
        self.link = link
        self._ids = _ChannelIds(id_size)

    async def run_stream(self, feed: StreamFeed) -> None:
        link = self.link
        # The subscriber's prefetch is the stream's consumed-ack window: once
        # that many were taken since the last acknowledgement, it goes out
        # now rather than after the link's ack delay.
        ack_window = max(feed.demand, 1)
        unacknowledged = 0
        channel = await self._ids.take()
        inbound = link.inbound(channel)
        try:
            if feed.demand <= 0:
                feed.subscribed()
                await feed.wait_demand()
                if feed.ended:
                    return
            await link.send(channel, [feed.name.encode("utf-8")])
            while True:
                if feed.demand <= 0:
                    await _wait_demand_or_end(feed, inbound)
                    if feed.ended:
                        return
                try:
                    parts = await inbound.receive(consume=False)
                except trio.EndOfChannel:
                    feed.subscribed()
                    return  # the publisher completed
                # An adaptive subscriber's demand grows while it keeps up:
                # the ack window grows with it (and never passes an explicit
                # prefetch, which demand never exceeds).
                ack_window = max(ack_window, feed.demand)
                batch = [parts]
                if feed.demand > 1 and len(inbound):
                    batch += inbound.receive_held(feed.demand - 1, consume=False)
                inbound.consume(len(batch))  # one acknowledgement step for the batch
                # (A message of no parts is no element: it opens the
                # listener's channel for a stream that completes empty.)
                feed.deliver([_element(feed.name, parts) for parts in batch if parts])
                unacknowledged += len(batch)
                if unacknowledged >= ack_window or not len(inbound):
                    # A full ack window; or we took all there is, and the
                    # listener may be waiting for room (its window may be
                    # smaller than our prefetch): acknowledge now.
                    unacknowledged = 0
                    link.flush_acks()
        finally:
            # Cancelled or done: close our channel and free the id in the
            # background (the listener's close and ours must both be over).
            if self._nursery is not None and not link.ended:
                self._nursery.start_soon(self._release, channel, inbound)
            else:
                self._ids.give_back(channel)

    @enable_ki_protection
    async def _release(self, channel: int, inbound: InboundChannel) -> None:
        try:
            inbound.discard()
            await self.link.close_channel(channel)
            # Ours acknowledged means the listener's side is over: it
            # consumes the request only once we acknowledged its close.
            if inbound.received_any:
                await inbound.wait_closed()  # already true (the close came first)
            self.link.forget_inbound(inbound)
        except RelinkError:
            pass
        finally:
            self._ids.give_back(channel)

    @enable_ki_protection
    async def _watch(self) -> None:
        # The link ends (lost, given up, shut down), or the peer shuts down.
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._watch_shutdown)
            await self.link.wait_ended()
            nursery.cancel_scope.cancel()
        reason = self.link.end_reason
        if reason is not None:
            self.end_streams(self.stream_error(reason))

    @enable_ki_protection
    async def _watch_shutdown(self) -> None:
        try:
            await self.link.wait_peer_shutdown()
        except RelinkError:
            return  # the link ended first: _watch ends the streams
        # The server is going away: its channels are closed; end ours too.
        self.end_streams(RelinkClosed("the listener shut the link down", by_peer=True))
        await self.link.aclose()


async def _wait_demand_or_end(feed: StreamFeed, inbound: InboundChannel) -> None:
    # Elements wait for demand; the end of a stream (completion, or the
    # publisher's error first in line) does not, as in Reactive Streams.
    async def the_end() -> None:
        while True:
            if inbound.ended and not len(inbound):
                return
            item = inbound.peek()
            if isinstance(item, MessageReceived) and len(item.parts) == 2 and not item.parts[0]:
                return
            if isinstance(item, MessageReceived) and not item.parts and inbound.ended and len(inbound) == 1:
                return  # an empty stream's opening, then its close: the end
            if inbound.ended:
                await trio.sleep_forever()  # elements first: they need demand
            await inbound.wait_more_than(len(inbound))

    async with trio.open_nursery() as nursery:

        async def first(wait: Callable[[], Awaitable[None]]) -> None:
            await wait()
            nursery.cancel_scope.cancel()

        nursery.start_soon(first, feed.wait_demand)
        nursery.start_soon(first, the_end)


def _element(name: str, parts: tuple[bytes, ...]) -> bytes:
    if len(parts) == 1:
        return parts[0]
    if len(parts) == 2 and not parts[0]:
        text = parts[1].decode("utf-8", errors="replace")
        if text == SHUTTING_DOWN:
            # The listener's app server stopping, not this publisher failing:
            # what a goodbye says over tcp://, so the same outcome (sub: 3).
            raise RelinkClosed(f"the listener is shutting down: {text}", by_peer=True)
        if text.startswith("no such publisher"):
            raise UnknownPublisher(name, text)
        raise PublisherError(text)
    raise RemoteProtocolError(f"an element is a one-part message, got {len(parts)} parts")


@asynccontextmanager
async def connect_relink_url(
    url: str, *, ssl_context: ssl.SSLContext | None = None, settings: RelinkSettings = DEFAULT_SETTINGS
) -> AsyncIterator[RelinkPeer]:
    """Open ``relink://HOST:PORT[/ENDPOINT][?id_size=N]`` (``relinks://`` for TLS) as a peer.

    Raises:
        ValueError: a malformed URL.
        OSError: the connection could not be made; and the Relink errors of
            the first handshake.
    """
    secure = url.lower().startswith("relinks:")
    parsed = parse_bridge_url(url, secure=secure, allowed_query=frozenset({"id_size"}))
    endpoint = parsed.path or DEFAULT_ENDPOINT
    try:
        check_endpoint_name(endpoint, ValueError)
    except ValueError as exc:
        raise ValueError(f"URL {url!r}: {exc}") from None
    try:
        id_size = int(parsed.query.get("id_size", DEFAULT_CLIENT_ID_SIZE))
        config = LinkConfig(connector_id_size=id_size, listener_id_size=id_size)
    except (ValueError, RelinkError):
        raise ValueError(f"URL {url!r}: id_size must be an int from 0 to 8") from None
    if secure and ssl_context is None:
        ssl_context = ssl.create_default_context()
    elif not secure and ssl_context is not None:
        raise ValueError("ssl_context given for a relink:// URL; use relinks://")
    async with open_relink_link(
        parsed.host, parsed.port, endpoint=endpoint, config=config, ssl_context=ssl_context, settings=settings
    ) as link:
        async with open_bridge_peer(RelinkPeer(link, id_size=id_size)) as peer:
            yield peer
