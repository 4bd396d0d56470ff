"""Serving an rstreams app over Relink: a channel is a subscription.

The mapping (``docs/bridges/relink.md`` has a byte-level example):

* The app is served on one endpoint (``rstreams`` by default) that takes any
  channel id size 0..8, the same in both directions (a connector asking for
  unequal sizes, or for transactions, is turned away: the connection is
  closed, as the spec says for a config the listener does not offer).
* A connector **subscribes** by sending, on one of its channels, a message
  of one part: the publisher name with its query, UTF-8
  (``range?count=5``).
* Each **element** comes back as a one-part message on the listener's
  channel with the same id. The connector's consumed acknowledgements are
  the subscriber's demand: the listener never has more than its window
  (``--relink-window``, default 65,536) of elements unconsumed.
* The publisher **completes**: the listener closes its channel. One that
  completes without an element first opens the channel with a message of
  no parts, which is no element: a channel opens with its first message,
  and the close of one never opened is ignored.
* It **fails** (an unknown publisher included, or the server shutting
  down): one two-part message, the first part empty and the second the
  error text in UTF-8, then the close. Our connector reads the text
  :data:`SHUTTING_DOWN` as the server leaving (``RelinkClosed``), not as
  the publisher failing.
* The connector **closing** its channel cancels the subscription. The
  listener consumes the subscribe message only once its side of the
  channel is over (its close acknowledged, or the channel never opened),
  so the connector's close is acknowledged after the connector has taken
  the listener's last message and close, whatever a reconnection does to
  the order of packets: once a connector has its close acknowledged, the
  id is free again.

A publisher name longer than the app session carries (the wire's
``max_string_size``, 64 KiB, less 1 KiB for an answer that quotes it)
fails it as an unknown publisher would
(``no such publisher: a name of N bytes``), without reaching the session:
a longer one closed the session and failed every later subscription of
the link. A message that is not one UTF-8 part fails the subscription the same way,
as does a channel beyond ``max_subscriptions`` (1,024) running at once on
one link (``too many subscriptions``); further messages on a channel that
already carries a subscription are consumed and ignored.
"""

from __future__ import annotations

import logging

import trio

from rstreams import Router, Session, Subscription, SubscriptionError, UnknownPublisher
from rstreams.support import peer_text

from ..kit import BatchesWithinBudget, MemoryBudget, check_count, check_name_fits, next_ask, open_app_session
from ._errors import RelinkError
from ._serve import RelinkServer, equal_id_sizes
from ._settings import DEFAULT_SETTINGS, RelinkSettings
from ._inbound_channel import InboundChannel
from ._trio_link import RelinkLink

__all__ = ["RelinkAppServer", "SUBSCRIBE_PREFETCH", "SHUTTING_DOWN", "TOO_MANY", "DEFAULT_MAX_SUBSCRIPTIONS"]

logger = logging.getLogger("rstreams.bridges")

#: The most demand per subscription on the app's side (the Relink window is
#: the connector's); less when its elements are large (see _forward). 64
#: made the app server ask, and wait for its in-process session, every 64
#: small elements: a quarter of its CPU per element.
SUBSCRIBE_PREFETCH = 1024
#: The error text sent to subscribers when the server stops.
SHUTTING_DOWN = "server shutting down"
#: The error text for a channel beyond ``max_subscriptions``.
TOO_MANY = "too many subscriptions"
#: Subscriptions running at once per link (each is a task and a stream of the app).
DEFAULT_MAX_SUBSCRIPTIONS = 1024


class _Subscriptions:
    # The cancel scopes of one link's running subscriptions, for a server
    # shutdown; and the elements they have taken from their publishers and
    # not yet handed to the link, bounded by half the link's memory budget
    # (see _forward).

    def __init__(self, max_connection_memory: int) -> None:
        self.scopes: set[trio.CancelScope] = set()
        self.running = 0
        self.shutting_down = False
        self.in_hand = MemoryBudget(max(max_connection_memory // 2, 1))

    def stop_all(self) -> None:
        self.shutting_down = True
        for scope in self.scopes:
            scope.cancel()


class RelinkAppServer(RelinkServer):
    """A :class:`RelinkServer` serving an app's publishers (see the module docstring).

    Args:
        app: the router whose publishers are served.
        endpoint: the endpoint name (default ``rstreams``).
        settings: windows and timeouts (``send_window`` is the window per subscription).
        max_connections, epoch: as :class:`RelinkServer`.
        max_subscriptions: subscriptions running at once per link; a channel
            beyond them is answered with the error ``too many subscriptions``.
    """

    handlers_watch_closing = True

    def __init__(
        self,
        app: Router,
        *,
        endpoint: str = "rstreams",
        settings: RelinkSettings = DEFAULT_SETTINGS,
        max_connections: int | None = None,
        epoch: int | None = None,
        max_subscriptions: int = DEFAULT_MAX_SUBSCRIPTIONS,
    ) -> None:
        check_count("max_subscriptions", max_subscriptions)
        super().__init__(
            self._serve_link, {endpoint: equal_id_sizes}, settings=settings, max_connections=max_connections, epoch=epoch
        )
        self.app = app
        self.max_subscriptions = max_subscriptions

    async def _serve_link(self, link: RelinkLink) -> None:
        subscriptions = _Subscriptions(self.settings.max_connection_memory)
        async with open_app_session(self.app, max_connection_memory=self.settings.max_connection_memory) as session:
            async with trio.open_nursery() as nursery:
                accepting, watching = trio.CancelScope(), trio.CancelScope()
                nursery.start_soon(self._stop_when_closing, watching, accepting, subscriptions)
                with accepting:
                    while True:
                        try:
                            channel = await link.accept_channel()
                        except trio.EndOfChannel:
                            break  # the connector shut down: it opens no more
                        nursery.start_soon(self._serve_channel, link, session, channel, subscriptions)
                watching.cancel()
                # The nursery waits for the running subscriptions to end.

    async def _stop_when_closing(
        self, watching: trio.CancelScope, accepting: trio.CancelScope, subscriptions: _Subscriptions
    ) -> None:
        with watching:
            await self.closing.wait()
            subscriptions.stop_all()
            accepting.cancel()

    async def _serve_channel(
        self, link: RelinkLink, session: Session, channel: InboundChannel, subscriptions: _Subscriptions
    ) -> None:
        subscriptions.running += 1
        try:
            await self._subscribe(link, session, channel, subscriptions)
        finally:
            subscriptions.running -= 1

    async def _forward(
        self, link: RelinkLink, channel_id: int, elements: Subscription, sent: list[bool], subscriptions: _Subscriptions
    ) -> None:
        # The elements as messages, asked of the publisher a batch at a time
        # and only once the previous batch was handed to the link (which
        # waits for room in the connection's memory budget, where what it
        # keeps until acknowledged counts): one element first, to learn the
        # size, then as many as this subscription's share of half the budget
        # allows at its largest element so far, shared among the link's
        # subscriptions running now (kit.next_ask; at most SUBSCRIBE_PREFETCH).
        # Whatever came goes out in one step, within the window. ``sent``
        # gets True once a message was handed over (even if this is then
        # cancelled: the channel must be closed after it).
        # Between the app session and the link, the elements count in
        # ``in_hand`` (half the budget, for all the link's subscriptions):
        # room there is taken when they have arrived and before they are
        # taken out of the session (kit.BatchesWithinBudget), and given back
        # once the link has them. Not when they are asked for: a first
        # element's size is unknown, and room reserved at the ask was held
        # for as long as the publisher sent nothing (one idle channel held
        # every other channel's first ask). Until taken, they count in the
        # app session's inbound half.
        in_hand = subscriptions.in_hand
        budget_limit = link.settings.max_connection_memory
        # One message of the window is kept for the error that may end the
        # stream: it needs no demand (as onError), and a connector that
        # stopped consuming must still learn why its stream ended, a server
        # shutting down most of all (it would otherwise wait for a window
        # that never opens, and the connector see a link lost a minute later).
        keep = 1 if link.settings.send_window > 1 else 0
        count = 1
        largest = 0
        batches = BatchesWithinBudget(elements, in_hand, max_bytes=in_hand.limit)
        while True:
            # Only what the channel's window takes now is asked for, once it
            # takes anything: a batch holds its room in in_hand (shared by
            # the link's channels) until the link has it, so it must never
            # wait there for a peer that stopped consuming this channel
            # while the other channels wait for that room. (This task is
            # the channel's only sender: the window's room only grows.)
            count = min(count, await link.wait_window(channel_id, keep=keep))
            elements.request(count)
            asked = count
            while asked:
                try:
                    batch = await batches.__anext__()  # counted in in_hand from here
                except StopAsyncIteration:
                    return
                asked -= len(batch)
                largest = max(largest, *map(len, batch), 1)
                messages = [(bytes(element),) for element in batch]
                del batch
                try:
                    while messages:
                        handed = messages[: await link.send_batch(channel_id, messages)]
                        del messages[: len(handed)]
                        sent[:] = [True]
                        in_hand.give_back(sum(len(element) for (element,) in handed))  # the link counts them now
                        del handed
                finally:
                    in_hand.give_back(sum(len(element) for (element,) in messages))  # (not handed over)
                count = next_ask(budget_limit, subscriptions.running, largest, SUBSCRIBE_PREFETCH)

    async def _subscribe(
        self, link: RelinkLink, session: Session, channel: InboundChannel, subscriptions: _Subscriptions
    ) -> None:
        channel_id = channel.id
        try:
            request = await channel.receive(consume=False)
        except (trio.EndOfChannel, RelinkError):
            return
        channel.ignore_further()  # (consumed with the request, at the end)
        # Only the name is kept, and only one the session can carry: this
        # task may outlive the connection by link_timeout (its close waits
        # for the connector's acknowledgement), and a peer's 600 KB request
        # held that long by each of its links added up to gigabytes.
        name, refusal = _publisher_name(request)
        del request
        forwarded: list[bool] = []  # True once a message went out
        try:
            error: str | None = None
            with trio.CancelScope() as scope:
                subscriptions.scopes.add(scope)
                if subscriptions.shutting_down:
                    scope.cancel()
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(_cancel_when_closed, channel, nursery.cancel_scope)
                    if subscriptions.running > self.max_subscriptions:
                        error = TOO_MANY
                    elif name is None:
                        error = refusal
                    else:
                        try:
                            async with session.subscribe(name, prefetch=0) as elements:
                                await self._forward(link, channel_id, elements, forwarded, subscriptions)
                        except SubscriptionError as exc:
                            error = str(exc)
                    nursery.cancel_scope.cancel()
            subscriptions.scopes.discard(scope)
            if channel.ended:
                error = None  # the connector cancelled: it wants nothing more
            elif scope.cancelled_caught and subscriptions.shutting_down:
                error = SHUTTING_DOWN
            if error is not None:
                await link.send(channel_id, [b"", error.encode("utf-8")])
                forwarded[:] = [True]
            elif not forwarded and not channel.ended and not scope.cancelled_caught:
                # Completed without an element: a message of no parts opens
                # our channel, so that its close can say so (a channel opens
                # with its first message; a close alone would be ignored).
                await link.send(channel_id, [])
                forwarded[:] = [True]
            if forwarded:
                # Until the connector acknowledges the close: it has every
                # message of ours, even if a reconnection reorders the packets.
                await link.close_channel(channel_id)
        except RelinkError as exc:
            logger.debug("Relink subscription on channel %d ended with the link: %r", channel_id, exc)
        finally:
            # Only now: the connector's close is acknowledged after our close.
            channel.consume(1)
            channel.discard()


async def _cancel_when_closed(channel: InboundChannel, scope: trio.CancelScope) -> None:
    await channel.wait_closed()
    scope.cancel()


#: Bytes of the wire's string limit left for the text the app may answer
#: a name with, so that "no such publisher: NAME (closest: ...)" quotes it
#: whole (the core cuts a longer text to the limit, text_within).
_ANSWER_ROOM = 1024


def _publisher_name(request: tuple[bytes, ...]) -> tuple[str | None, str]:
    # The publisher name a subscribe asks for, or None and the error text
    # to answer with. A name the session to the app cannot carry, with the
    # app's answer quoting it (as the Epoxy bridge's Publishers._fits, with
    # room for the answer), is refused as no such publisher before it is
    # decoded: a longer one (a peer's 66 KB name) closed the session
    # ("exceeds max_str_len"), failed the link's handler with a traceback
    # logged per link, and every later subscription of the link.
    if len(request) != 1:
        return None, _NOT_A_NAME
    try:
        name = request[0].decode("utf-8")
    except UnicodeDecodeError:
        return None, _NOT_A_NAME
    try:
        check_name_fits(name, room=_ANSWER_ROOM)  # (the kit's one rule, with room for our answer)
    except UnknownPublisher as exc:
        logger.debug("Relink subscription refused, %s: %s", exc.message, peer_text(name[:80]))
        return None, exc.message
    return name, ""


_NOT_A_NAME = "a subscription is one message of one part: a publisher name in UTF-8"
