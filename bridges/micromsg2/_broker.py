"""An rstreams app as a MicroMsg2 broker: ``rstreams serve --micromsg2``.

The mapping (``docs/bridges/micromsg2.md`` has a whole session byte for byte):

* ``subscribe;destination=D[,filter=F]`` subscribes to the app's publisher
  ``D``, its query included (``range?count=5``), or to its topic ``D``
  (a topic is a publisher too, ``chat?history=10``), and sends each element
  as a MESSAGE with destination ``D``. When the stream completes the broker
  sends ``completed;destination=D``; when it fails, or there is no such
  publisher, the ERROR ``error;destination=D,message=M`` (the connection
  stays; ``M`` starts with ``no such publisher:`` for the latter).
* The ack window is the demand: the broker sends within the window, as
  many messages at a time as it has room for, and asks the publisher for
  its share of the window (``window // subscriptions``, at least 1) once it
  has what it asked for before: so an ack that frees m messages becomes m
  more sent, and the publisher is never more than the window and one share
  ahead of the acks. Without acks it asks for :data:`PUSH_BATCH` at a
  time and the transport paces it.
* A filter keeps the messages whose properties match; the others are taken
  from the publisher and dropped. A dropped element costs the server about
  what a sent one does, so the connection's drops are paced as sends are
  (:class:`~bridges.kit.DropAllowance`): a window's worth between two of
  the client's acks, or, while nothing is in flight, per
  :data:`~bridges.kit.DROP_TICK`. A filter nothing passes on an endless
  publisher no longer takes a core.
* A SEND with destination ``D`` is published into the app's topic ``D``
  (:class:`~bridges.kit.TopicPublisher`), with its properties
  (``_envelope``: a topic element carries them). A topic subscriber
  therefore sees the properties each message was sent with, and its filter
  applies to them. A SEND to something that is not a topic is logged and
  dropped, and the client told with an ERROR for that destination that
  ends no stream (``refuse_sends``, ``for=send``; the ack still comes:
  acks are the window).
* ``unsubscribe;destination=D`` cancels that stream; several subscriptions
  may be open on one connection, at most ``max_subscriptions``.

Each connection gets its own in-process session to the app
(:func:`~bridges.kit.open_app_session`), so a MicroMsg2 subscriber goes
through the same router, demand and topics as a TCP one.
"""

from __future__ import annotations

import logging
from itertools import groupby
from operator import attrgetter

import trio

from rstreams import Router, Session, Subscription, SubscriptionError, UnknownPublisher

from ..kit import BatchesWithinBudget, DropAllowance, TopicPublisher, TopicRefused, check_count, next_ask, open_app_session
from ._connect import MicroMsg2Server
from ._envelope import unwrap, wrap
from ._errors import LocalProtocolError, MicroMsg2Error
from ._events import MessageReceived, Subscribe, Unsubscribe
from ._extensions import PUBSUB, ExtensionSpec
from ._filters import Filter
from ._properties import Properties
from ._settings import MicroMsg2Settings
from ._trio import MicroMsg2Connection

__all__ = [
    "BROKER_SETTINGS",
    "BROKER_WINDOW",
    "DEFAULT_MAX_SUBSCRIPTIONS",
    "PUSH_BATCH",
    "UNKNOWN_PUBLISHER",
    "MicroMsg2AppServer",
    "serve_broker",
]

logger = logging.getLogger("rstreams.micromsg2")

#: The batch-ack window the broker suggests.
BROKER_WINDOW = 64
#: The broker's settings: identity ``rstreams``, suggesting
#: ``batch-ack:max-count=64`` and ``pubsub``.
BROKER_SETTINGS = MicroMsg2Settings(
    identity="rstreams", optional=(ExtensionSpec.batch_ack(BROKER_WINDOW), ExtensionSpec(name=PUBSUB))
)
#: SENDs taken into the topics, and acknowledged, in one step at most
#: (those one read brought: they are read, and counted, already).
MAX_SENDS_AT_ONCE = 256
#: Elements asked of a publisher at a time when no ack extension is used.
PUSH_BATCH = 16
#: Subscriptions one connection may hold open at once; one more is refused
#: with its stream ERROR (each holds a task and up to its window share).
DEFAULT_MAX_SUBSCRIPTIONS = 64
#: How a stream ERROR for an unknown publisher starts.
UNKNOWN_PUBLISHER = "no such publisher:"


async def serve_broker(
    connection: MicroMsg2Connection, session: Session, *, max_subscriptions: int = DEFAULT_MAX_SUBSCRIPTIONS
) -> None:
    """Be the broker for ``session``'s app on ``connection`` until the client leaves.

    Returns when the client closed the connection.

    Raises:
        PeerError, RemoteProtocolError, MicroMsg2ConnectionLost: the
            connection ended with an error.
    """
    async with trio.open_nursery() as topics:
        publisher = TopicPublisher(session, topics, protocol="MicroMsg2")
        try:
            async with trio.open_nursery() as sending:
                sending.start_soon(_publish_sends, connection, publisher)
                async with trio.open_nursery() as streams:
                    broker = _Broker(connection, session, streams, max_subscriptions)
                    try:
                        await broker.obey_commands()
                    finally:
                        streams.cancel_scope.cancel()
                # The client left: what it sent before is still published.
        finally:
            # What was taken (and acknowledged) goes into its topic before
            # the streams into the topics end.
            await publisher.aclose()


async def _publish_sends(connection: MicroMsg2Connection, publisher: TopicPublisher) -> None:
    # The SENDs into their topics; acknowledged once the topics took them.
    # What one read brought goes in one step: each run of SENDs to one
    # destination is one batch into its topic, and the lot is acknowledged
    # with one ack (a client that writes SENDs one at a time gets an ack
    # each, as before).
    while True:
        try:
            messages = await connection.receive_sends(MAX_SENDS_AT_ONCE)
        except (trio.EndOfChannel, MicroMsg2Error):
            return  # the client left (or the connection failed: obey_commands raises why)
        # Taken out of the reader's queue, they still count in the
        # connection's budget until their topics took them: what one peer's
        # SENDs hold stays within its one limit, however many a read brought.
        with connection.budget.holding(sum(len(message.payload) for message in messages)):
            if not await _publish_runs(connection, publisher, messages):
                return  # the connection ended: obey_commands raises why
        connection.acknowledge(len(messages))


async def _publish_runs(connection: MicroMsg2Connection, publisher: TopicPublisher, messages: list[MessageReceived]) -> bool:
    # Each run of SENDs to one destination into its topic as one batch;
    # False if the connection ended while refusing one.
    for destination, run in groupby(messages, attrgetter("destination")):
        values = [wrap(message.properties, message.payload) for message in run]
        try:
            await publisher.publish_many(destination, values)
        except TopicRefused as exc:
            # Dropped (and logged): the client is told (ERROR ...,for=send);
            # the ack still comes, as the window.
            try:
                await connection.refuse_sends(destination, exc.reason)
            except MicroMsg2Error:
                return False
    return True


class _Broker:
    # One connection's subscriptions: a task each, under a cancel scope that
    # unsubscribe cancels.
    def __init__(
        self, connection: MicroMsg2Connection, session: Session, nursery: trio.Nursery, max_subscriptions: int
    ) -> None:
        self.connection = connection
        self.session = session
        self.nursery = nursery
        self.max_subscriptions = max_subscriptions
        self.scopes: dict[str, trio.CancelScope] = {}
        window = connection.window
        self.drops = DropAllowance(BROKER_WINDOW if window is None else window, now=trio.current_time())

    async def obey_commands(self) -> None:
        connection = self.connection
        while True:
            try:
                command = await connection.receive_command()
            except trio.EndOfChannel:
                return
            if isinstance(command, Unsubscribe):
                scope = self.scopes.pop(command.destination, None)
                if scope is not None:
                    scope.cancel()
            elif isinstance(command, Subscribe):
                if len(self.scopes) >= self.max_subscriptions:
                    await connection.fail_stream(
                        command.destination, f"too many subscriptions on one connection (at most {self.max_subscriptions})"
                    )
                    continue
                scope = self.scopes[command.destination] = trio.CancelScope()
                self.nursery.start_soon(self.stream, command.destination, command.filter, scope)

    async def stream(self, destination: str, filter: Filter | None, scope: trio.CancelScope) -> None:
        budget = self.connection.budget
        held = 0  # the filter's room, taken from the budget for as long as the stream lasts
        try:
            with scope:
                try:
                    if filter is not None:
                        size = _filter_bytes(filter)
                        if size > self.connection.max_response_in_budget:
                            await self.end(destination, f"its filter needs {size} bytes, more than this connection may hold")
                            return
                        await budget.take(size)
                        held = size
                    async with self.session.subscribe(destination, prefetch=0) as upstream:
                        await self.pump(upstream, destination, filter)
                except UnknownPublisher as exc:
                    message = exc.message if exc.message.startswith(UNKNOWN_PUBLISHER) else f"{UNKNOWN_PUBLISHER} {destination}"
                    await self.end(destination, message)
                except SubscriptionError as exc:
                    await self.end(destination, str(exc) or type(exc).__name__)
                except LocalProtocolError as exc:
                    # An element MicroMsg2 cannot carry: that stream fails.
                    await self.end(destination, f"cannot send an element of {destination}: {exc.message}")
                else:
                    await self.end(destination, None)
        except MicroMsg2Error as exc:
            logger.debug("MicroMsg2 stream %r ended with the connection: %r", destination, exc)
        finally:
            budget.give_back(held)
            if self.scopes.get(destination) is scope:
                del self.scopes[destination]

    async def end(self, destination: str, error: str | None) -> None:
        if not self.connection.is_subscribed(destination):
            return  # unsubscribed meanwhile: nothing to say
        if error is None:
            await self.connection.complete(destination)
        else:
            await self.connection.fail_stream(destination, error)

    def demand(self) -> int:
        # What one subscription asks its publisher for when it has nothing
        # in hand: its share of the window, at least 1. Not of the window's
        # free room, which is nothing right after a window's worth went
        # out: asking for max(1, that) made every window's first element a
        # step of its own (a request, a write, a wait), and with acks of
        # one or two messages every element. What arrives beyond the free
        # room waits in send_messages, counted in the budget: the broker
        # holds at most one share beyond the window.
        window = self.connection.window
        if window is None:
            return PUSH_BATCH
        return max(1, window // max(1, len(self.scopes)))

    async def pump(self, upstream: Subscription, destination: str, filter: Filter | None) -> None:
        # Within the connection's memory budget: each element counts from
        # the moment it is taken out of the app session until its frames are
        # queued (handed over to send_messages). Room is taken when the
        # elements are there and before they are taken
        # (kit.BatchesWithinBudget), not when they are asked for: their size
        # is unknown before the first, and a reservation at the ask would
        # be held for as long as the publisher sends nothing (two idle
        # subscriptions held the room of every other one). Until taken they
        # count in the app session's inbound half (that session has this
        # budget's size, so that half is half of it). What is asked: one
        # element first, then as many as this subscription's share of half
        # the budget allows at its largest element so far, the half shared
        # among the subscriptions open now (kit.next_ask; the other half
        # stays the peer's to send commands and SENDs into), and within its
        # share of the window. So a client
        # that subscribes to many streams and never acknowledges holds its
        # budget here, and then the app session's.
        budget = self.connection.budget
        largest = 0  # the largest element seen: the estimate for the next
        outstanding = 0  # asked of the publisher, not yet taken
        batches = BatchesWithinBudget(upstream, budget, max_bytes=self.connection.max_response_in_budget)
        while True:
            if outstanding == 0:
                outstanding = next_ask(budget.limit, len(self.scopes), largest, self.demand())
                upstream.request(outstanding)
            try:
                batch = await batches.__anext__()  # its bytes are counted from here
            except StopAsyncIteration:
                return
            outstanding -= len(batch)
            largest = max(largest, *map(len, batch), 1)
            elements = list(batch)  # forward lets go of each once sent
            del batch
            await self.forward(destination, filter, elements)

    async def forward(self, destination: str, filter: Filter | None, batch: list[bytes]) -> None:
        # Elements counted in the budget, handed over to their frames as
        # many at a time as the window takes (send_messages owns their
        # bytes from then on); those the filter drops are given back at
        # once. Each element is let go of as soon as its payload is taken
        # out of it (the list is the caller's too).
        budget = self.connection.budget
        owned = sum(map(len, batch))  # what this call must hand over or give back
        messages: list[tuple[bytes, Properties]] = []
        sizes: list[int] = []
        try:
            for index, element in enumerate(batch):
                batch[index] = b""
                size = len(element)
                properties, payload = unwrap(bytes(element))
                del element
                if filter is not None and not filter.matches(properties):
                    budget.give_back(size)
                    owned -= size
                else:
                    messages.append((payload, properties))
                    sizes.append(size)
        except BaseException:
            budget.give_back(owned)
            raise
        self.drops.drop(len(batch) - len(messages))
        if messages:
            await self.connection.send_messages(destination, messages, prepaid=sizes)
        else:
            await trio.lowlevel.checkpoint()
        await self.wait_drop_room()

    async def wait_drop_room(self) -> None:
        # While the connection's drops are used up (kit.DropAllowance): the
        # client's next ack tops them up if anything is in flight (it
        # reads, so it paces the drops as the sends), else the tick. The
        # elements already taken are sent or dropped: none wait here.
        drops, connection = self.drops, self.connection
        while drops.exhausted and not connection.ended:
            if connection.unacknowledged:
                await connection.wait_acknowledgement()
                drops.acknowledged(trio.current_time())
            else:
                await trio.sleep(drops.due(trio.current_time()))
                drops.tick_passed(trio.current_time())


def _filter_bytes(filter: Filter) -> int:
    # What a parsed filter holds while its subscription lasts, counted in
    # the connection's budget: about 120 bytes of objects per condition
    # (measured with tracemalloc) plus its text. Within the default Limits
    # (32 conditions, 4 KiB) at most about 8 KB, but 64 subscriptions of
    # them are 0.5 MB, half a 1 MiB budget: a peer's filters are its own
    # cost, as the rest of what it sends.
    return sum(_CONDITION_BYTES + len(str(condition)) for condition in filter.conditions)


_CONDITION_BYTES = 128


class MicroMsg2AppServer(MicroMsg2Server):
    """A :class:`MicroMsg2Server` that is a broker for ``app`` (see the module docstring).

    Args:
        app: the router whose publishers and topics are served.
        settings: each connection's settings (default :data:`BROKER_SETTINGS`).
        max_connections: as :class:`MicroMsg2Server`.
        max_subscriptions: subscriptions open at once per connection.
    """

    def __init__(
        self,
        app: Router,
        *,
        settings: MicroMsg2Settings = BROKER_SETTINGS,
        max_connections: int | None = None,
        max_subscriptions: int = DEFAULT_MAX_SUBSCRIPTIONS,
    ) -> None:
        check_count("max_subscriptions", max_subscriptions)
        super().__init__(self._serve_connection, settings=settings, max_connections=max_connections)
        self.app = app
        self.max_subscriptions = max_subscriptions

    async def _serve_connection(self, connection: MicroMsg2Connection) -> None:
        async with open_app_session(self.app, max_connection_memory=connection.budget.limit) as session:
            await serve_broker(connection, session, max_subscriptions=self.max_subscriptions)
