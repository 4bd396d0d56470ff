"""Exposing an rstreams app over Epoxy: the Bond service ``rstreams.Publishers``.

The contract (``docs/bridges/epoxy.md`` has a byte-level example)::

    namespace rstreams.epoxy

    struct SubscribeRequest { 0: string publisher; }      // "range?count=3"
    struct Elements { 0: list<blob> elements; }
    struct PublishEvent { 0: string topic; 1: blob value; }

    service rstreams.Publishers
    {
        Elements Subscribe(SubscribeRequest);              // request-response
        nothing Publish(PublishEvent);                     // event
    }

* ``Subscribe`` subscribes to the publisher (its query included) and
  answers with every element once the stream completes. An unknown
  publisher is an error response ``METHOD_NOT_FOUND``; a failing stream, a
  stream past ``max_response_bytes`` of elements, or a request that does not
  decode, ``INTERNAL_SERVER_ERROR``; the text is in ``message``.
* ``Publish`` puts ``value`` into the app's :class:`rstreams.Topic` named
  ``topic``, as one element, byte for byte. The app server finds topics the
  way a TCP client does: through the router, by the route every mounted
  topic serves for publishers, ``TOPIC/publish`` (``Topic.mount``;
  :func:`rstreams.publish_to_topic`). So there is no second registry to keep
  in step with the app, any app whose topics are mounted works unchanged,
  and the element is stored as sent (a topic's codec applies to what
  server-side code publishes, not to elements that arrive encoded). The
  event is handled once the topic has accepted the element: a topic held
  back by a slow ``block`` subscriber holds the next event back, and TCP
  holds the sender. An unknown topic (or a topic that refuses) is logged and
  the event dropped: an event has no response.
* Any other service or method: ``METHOD_NOT_FOUND`` (``INVALID_INVOCATION``
  for ``Publish`` sent as a request).
* Several requests may be in flight on one connection (up to
  ``max_concurrency`` are answered at once); each response carries its
  request's conversation id, in whatever order they complete.

Each connection gets its own in-process rstreams session to the app (over
a bounded in-memory stream, as :func:`rstreams.open_local_session`), so
subscribing through Epoxy goes through the same router, demand and codecs
as a TCP subscriber's.
"""

from __future__ import annotations

import logging

from itertools import groupby
from operator import attrgetter

import trio

from rstreams import Router, Session, SubscriptionError, UnknownPublisher, publish_to_topic

from ..kit import (
    MemoryBudget,
    ResponseTooLarge,
    TopicPublisher,
    TopicRefused,
    collect_elements,
    open_app_session,
    warn_about_peer,
)
from . import bond
from ._serve import EpoxyServer
from ._service import DEFAULT_MAX_CONCURRENCY, ServiceError, event, hold_for_response, method, serve_services, service
from ._settings import DEFAULT_SETTINGS, AcceptFunction, EpoxySettings
from ._structs import ErrorCode
from ._trio import EpoxyConnection

__all__ = [
    "PUBLISHERS_SERVICE",
    "SubscribeRequest",
    "Elements",
    "PublishEvent",
    "Publishers",
    "EpoxyAppServer",
    "DEFAULT_MAX_RESPONSE_BYTES",
    "MAX_SUBSCRIBE_REQUEST_SIZE",
    "open_app_session",
]

logger = logging.getLogger("rstreams.epoxy")

#: The Bond service an rstreams app is served as.
PUBLISHERS_SERVICE = "rstreams.Publishers"
#: The most element bytes one ``Subscribe`` response may carry; a larger
#: stream is cancelled and answered ``INTERNAL_SERVER_ERROR``. Well under the
#: 32 MiB framelet a peer must be ready for ("should support").
DEFAULT_MAX_RESPONSE_BYTES = 4 * 1024 * 1024
#: The largest ``Subscribe`` request read: a request is one name, and the
#: session to the app carries names of at most ``max_string_size`` (64 KiB
#: by default); four times that leaves room for a session configured wider,
#: and past it the request is answered ``INTERNAL_SERVER_ERROR`` unread (it
#: used to be decoded whatever its size, up to a 32 MiB framelet).
MAX_SUBSCRIBE_REQUEST_SIZE = 256 * 1024
_SUBSCRIBE_REQUEST_LIMITS = bond.BondLimits(max_size=MAX_SUBSCRIBE_REQUEST_SIZE)


class SubscribeRequest(bond.Struct):
    """``rstreams.epoxy.SubscribeRequest``: a publisher name with its query (``range?count=3``)."""

    publisher: str = bond.field(0, bond.STRING)


class Elements(bond.Struct):
    """``rstreams.epoxy.Elements``: every element of a completed stream."""

    elements: list[bytes] = bond.field(0, bond.list_of(bond.BLOB))


class PublishEvent(bond.Struct):
    """``rstreams.epoxy.PublishEvent``: one element for the topic ``topic``."""

    topic: str = bond.field(0, bond.STRING)
    value: bytes = bond.field(1, bond.BLOB)


@service(PUBLISHERS_SERVICE)
class Publishers:
    """``rstreams.Publishers`` over one rstreams session (see the module docstring).

    Args:
        session: a session to the app, opened with an ``app`` of its own
            (possibly empty) so that it can publish into topics
            (:func:`open_app_session` makes one).
        max_response_bytes: the most element bytes per ``Subscribe`` response.
        nursery: where each topic's publishing stream runs; without one,
            every ``Publish`` is a publishing stream of its own (slower).
        budget: the connection's memory budget: each ``Subscribe`` takes
            room for its largest response from it before collecting (and
            waits for it), and hands the elements' bytes over to the
            response (:func:`hold_for_response`): :func:`serve_services`
            gives them back once the marshalled response is queued, where
            the queued bytes take over.

    Publishing: the first ``Publish`` to a topic opens one publishing stream
    into it (:func:`rstreams.publish_to_topic` fed from a channel without a
    buffer), and the next ones go down the same stream, in order. The
    stream pulls the next value only when the topic has room, so a
    ``Publish`` returns once its value was taken; :meth:`aclose` ends the
    streams once every value taken is in its topic.
    """

    def __init__(
        self,
        session: Session,
        *,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
        nursery: trio.Nursery | None = None,
        budget: MemoryBudget | None = None,
    ) -> None:
        self.session = session
        self.max_response_bytes = max_response_bytes
        self._budget = budget
        # One publishing stream per topic (the kit's, as MicroMsg2's SENDs).
        self._topics = TopicPublisher(session, nursery, protocol="Epoxy") if nursery is not None else None

    def _fits(self, name: str) -> bool:
        # Whether the session to the app can carry ``name``: a longer one
        # (a peer's 600 KB publisher name) closed that session ("exceeds
        # max_str_len") and failed every later Subscribe of the connection.
        limit = self.session.config.limits.max_string_size
        return len(name) <= limit // 4 or len(name.encode("utf-8", "surrogatepass")) <= limit

    @method(request_limits=_SUBSCRIBE_REQUEST_LIMITS)
    async def Subscribe(self, request: SubscribeRequest) -> Elements:  # noqa: N802 - Bond's method name
        try:
            # (A name longer than the app's session carries is refused by
            # collect_elements, kit.check_name_fits: UnknownPublisher below.)
            elements = await collect_elements(
                self.session, request.publisher, max_bytes=self.max_response_bytes, budget=self._budget
            )
        except UnknownPublisher as exc:
            raise ServiceError(ErrorCode.METHOD_NOT_FOUND, exc.message) from None
        except ResponseTooLarge as exc:
            raise ServiceError(ErrorCode.INTERNAL_SERVER_ERROR, f"{request.publisher}: {exc}") from None
        except SubscriptionError as exc:
            raise ServiceError(ErrorCode.INTERNAL_SERVER_ERROR, str(exc)) from None
        if self._budget is not None:
            # The elements' bytes count until the response built from them is
            # queued (and counted as queued output), then are given back
            # once: serve_services hands them over.
            size = sum(map(len, elements))
            if not hold_for_response(self._budget, size):
                self._budget.give_back(size)  # not answered by serve_services
        return Elements(elements=elements)

    async def Publish(self, request: PublishEvent) -> None:  # noqa: N802 - Bond's method name
        """One ``Publish`` event (the batch form, :meth:`publish_events`, is what the connection calls)."""
        await self.publish_events([request])

    @event(name="Publish", batch=True)
    async def publish_events(self, requests: list[PublishEvent]) -> None:
        """The ``Publish`` events one read brought: each run to one topic goes
        into it as one batch (one step of its publishing stream, not one per
        event), in order; returns once the topics took them."""
        for topic, run in groupby(requests, attrgetter("topic")):
            values = [request.value for request in run]
            if not topic or "?" in topic or not self._fits(f"{topic}/publish"):
                warn_about_peer(logger, "dropped %s: %r is not a topic name", _publish_events(len(values)), topic)
                continue
            if self._topics is None:
                try:
                    await publish_to_topic(self.session, topic, values)
                except SubscriptionError as exc:
                    warn_about_peer(logger, "dropped %s for topic %r: %s", _publish_events(len(values)), topic, exc)
                continue
            try:
                await self._topics.publish_many(topic, values)
            except TopicRefused:
                pass  # logged by the kit; an event has no response to say it in

    async def aclose(self) -> None:
        """End the publishing streams; they finish once what they took is in the topics."""
        if self._topics is not None:
            await self._topics.aclose()


class EpoxyAppServer(EpoxyServer):
    """An :class:`EpoxyServer` serving an app as ``rstreams.Publishers``.

    Args:
        app: the router whose publishers and topics are served.
        settings, accept, max_connections: as :class:`EpoxyServer`.
        max_concurrency: requests answered at once per connection.
        max_response_bytes: the most element bytes per ``Subscribe`` response.
    """

    def __init__(
        self,
        app: Router,
        *,
        settings: EpoxySettings = DEFAULT_SETTINGS,
        accept: AcceptFunction | None = None,
        max_connections: int | None = None,
        max_concurrency: int = DEFAULT_MAX_CONCURRENCY,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
    ) -> None:
        super().__init__(self._serve_connection, settings=settings, accept=accept, max_connections=max_connections)
        self.app = app
        self.max_concurrency = max_concurrency
        self.max_response_bytes = max_response_bytes

    async def _serve_connection(self, connection: EpoxyConnection) -> None:
        async with open_app_session(self.app, max_connection_memory=connection.budget.limit) as session:
            async with trio.open_nursery() as nursery:
                # A response larger than the budget can hold is an error
                # response, never a wait for room that cannot come.
                publishers = Publishers(
                    session,
                    max_response_bytes=connection.response_limit(self.max_response_bytes),
                    nursery=nursery,
                    budget=connection.budget,
                )
                # The peer's Error frame, a violation (already answered with
                # one), a lost connection: the end of one client, which the
                # kit's server reports in its session_close line.
                try:
                    await serve_services(connection, [publishers], max_concurrency=self.max_concurrency)
                finally:
                    await publishers.aclose()


def _publish_events(count: int) -> str:
    return "a Publish event" if count == 1 else f"{count} Publish events"
