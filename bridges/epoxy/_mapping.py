"""Epoxy onto rstreams for any service: events as elements, calls paced by demand.

Epoxy has no flow control, so demand becomes reading (inbound) and waiting
(outbound):

* Inbound events are a publisher (:func:`event_publisher`): it takes the
  connection's next event only while its subscriber has demand, and the
  connection reads the socket only while someone takes, so a slow rstreams
  subscriber slows the Epoxy sender down through TCP.
* Outbound, any stream of payloads (an rstreams
  :class:`~rstreams.Subscription` included) becomes events, one per element,
  paced by the connection's write bound (:func:`send_events`).
* Client calls: a stream of requests becomes the stream of their responses,
  in request order, with never more requests in flight than the downstream
  demand (:func:`call_publisher`). :meth:`EpoxyConnection.call` is the
  one-element case, and ``rstreams.Publishers`` (``_app``, ``_client``)
  the one an rstreams app is served as.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, Awaitable, Callable

import trio

from rstreams import Sink, SubscribeRequest

from ..kit import check_count, pace_calls
from ._errors import ErrorResponse
from ._trio import EpoxyConnection, Payload, PendingCall

__all__ = ["event_publisher", "send_events", "call_publisher", "DEFAULT_MAX_IN_FLIGHT"]

#: Requests in flight per call stream when the subscriber's demand is
#: unbounded (2**63 - 1): demand bounds them, and so does this.
DEFAULT_MAX_IN_FLIGHT = 64

PublisherFunction = Callable[[Sink, SubscribeRequest], Awaitable[None]]


def event_publisher(connection: EpoxyConnection, *, service_name: str | None = None, method_name: str | None = None) -> PublisherFunction:
    """An rstreams publisher of the connection's inbound events: each element is one event's payload.

    Add it to a router (``app.add("events", event_publisher(epoxy))``): one
    subscriber at a time takes the events, each read only once it has
    demand. The payloads are as received (marshalled Bond structs). With
    ``service_name`` / ``method_name``, events naming anything else are
    dropped. The connection's normal end completes the stream; any other
    end fails it with the connection's error.
    """

    async def publish(sink: Sink, request: SubscribeRequest) -> None:
        while True:
            await sink.wait_demand()
            try:
                message = await connection.receive_event()
            except trio.EndOfChannel:
                return
            if service_name is not None and message.service_name != service_name:
                continue
            if method_name is not None and message.method_name != method_name:
                continue
            await sink.send(message.payload)

    return publish


async def send_events(
    connection: EpoxyConnection, service_name: str, method_name: str, payloads: AsyncIterable[Payload]
) -> int:
    """Send each payload as an event, paced by the connection's write bound; return how many.

    ``payloads`` may be an rstreams subscription (its elements are payloads
    already marshalled) or any async iterable of structs or bytes.
    """
    count = 0
    async for payload in payloads:
        await connection.send_event(service_name, method_name, payload)
        count += 1
    return count


def call_publisher(
    connection: EpoxyConnection,
    service_name: str,
    method_name: str,
    requests: AsyncIterable[Payload],
    *,
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
) -> PublisherFunction:
    """An rstreams publisher of the responses to ``requests``, in request order.

    Each element is a response's payload (marshalled). A request is sent
    only while the requests in flight are fewer than the subscriber's
    outstanding demand (and ``max_in_flight``), so demand paces the calls.
    An error response fails the stream with :class:`ErrorResponse`.
    ``requests`` is consumed once: subscribe once.
    """
    check_count("max_in_flight", max_in_flight)

    async def start(payload: Payload) -> PendingCall:
        return await connection.start_call(service_name, method_name, payload)

    async def take_payload(call: PendingCall) -> bytes:
        response = await call.response()
        if response.is_error:
            raise ErrorResponse(response.decode_error())
        return response.payload

    async def publish(sink: Sink, request: SubscribeRequest) -> None:
        await pace_calls(sink, requests, start, take_payload, max_in_flight=max_in_flight)

    return publish
