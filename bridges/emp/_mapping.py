"""EMP onto rstreams: data as publishers, request-response as demand-bounded calls.

EMP has no flow control, so demand is turned into reading (inbound) and into
waiting (outbound):

* Inbound ``data`` is a publisher (:func:`data_publisher`): it asks the
  connection for the next body only while its subscriber has demand, and the
  connection reads the socket only while someone asks, so a slow rstreams
  subscriber slows the EMP sender down through TCP.
* Outbound, any stream of bodies (an rstreams :class:`~rstreams.Subscription`
  included) is written as ``data`` messages one after the other, paced by
  the connection's write bound (:func:`send_stream`); :func:`pipe_publisher`
  subscribes to a publisher with ``prefetch=window``, so what is pulled from
  it comes in bounded windows.
* Client calls: a stream of request bodies becomes a stream of response
  bodies in request order, with never more requests in flight than the
  downstream demand (:func:`call_publisher` for an rstreams subscriber, whose
  demand is the sink's; :class:`ResponseStream` for a plain ``async for``,
  whose demand is its ``window``). :meth:`EmpConnection.call` is the
  one-element case.
* Server: :func:`serve_requests` answers requests with an async function or
  a processor (an async generator from request bodies to response bodies),
  reading a request only when one of ``max_concurrency`` slots is free.
"""

from __future__ import annotations

import inspect
import logging
from collections import deque
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable
from typing import Any, Union

import trio

from rstreams import Session, Sink, SubscribeRequest, open_local_session

from ..kit import RequestSlots, check_count, check_name_fits, pace_calls
from ._errors import EmpClosed, EmpConnectionLost, EmpError, ErrorCode
from ._events import CompressionScheme
from ._config import EmpRequest
from ._trio import EmpConnection, PendingCall

__all__ = [
    "data_publisher",
    "send_stream",
    "pipe_publisher",
    "call_publisher",
    "ResponseStream",
    "RequestHandler",
    "serve_requests",
    "answer_requests",
    "open_local_session",
]

logger = logging.getLogger("rstreams.emp")

#: Requests in flight per call stream when the subscriber's demand is
#: unbounded (2**63 - 1): demand bounds them, and so does this.
DEFAULT_MAX_IN_FLIGHT = 64

RequestFunction = Callable[[bytes], Awaitable[bytes]]
Processor = Callable[[AsyncIterator[bytes]], AsyncIterator[bytes]]
RequestHandler = Union[RequestFunction, Processor]
PublisherFunction = Callable[[Sink, SubscribeRequest], Awaitable[None]]


def data_publisher(connection: EmpConnection) -> PublisherFunction:
    """An rstreams publisher of the connection's inbound ``data`` bodies.

    Add it to a router (``app.add("emp", data_publisher(emp))``): one
    subscriber at a time takes the bodies, each read only once it has demand.
    ``bye`` completes the stream; the peer's ``error`` fails it with the
    error's text.
    """

    async def publish(sink: Sink, request: SubscribeRequest) -> None:
        while True:
            await sink.wait_demand()
            try:
                body = await connection.receive_data()
            except trio.EndOfChannel:
                return
            await sink.send(body)

    return publish


async def send_stream(
    connection: EmpConnection, bodies: AsyncIterable[bytes], *, compression: CompressionScheme | None = None
) -> int:
    """Send each body as a ``data`` message, paced by the connection's write bound.

    Returns:
        How many messages were sent.
    """
    count = 0
    async for body in bodies:
        await connection.send_data(body, compression=compression)
        count += 1
    return count


async def pipe_publisher(
    connection: EmpConnection,
    session: Session,
    name: str,
    *,
    window: int | None = None,
    compression: CompressionScheme | None = None,
) -> int:
    """Subscribe to ``name`` on ``session`` and send its elements as ``data``.

    Demand goes to the publisher as they are written. By default it is the
    subscription's adaptive demand: a small window that grows while the
    EMP connection takes what arrives and shrinks when it falls behind,
    bounded by the subscription's byte budget (see ``Session.subscribe``).
    ``window`` fixes it instead: at most ``window`` elements are then ever
    requested ahead. Returns how many were sent; a publisher error raises.

    Raises:
        ValueError: ``window`` is not positive (a window of 0 would ask
            for nothing, and wait forever).
    """
    if window is not None and window <= 0:
        raise ValueError(f"window must be positive (or None: adaptive demand), got {window}")
    check_name_fits(name)  # (a longer name would close the session: UnknownPublisher instead)
    async with session.subscribe(name, prefetch=window) as elements:
        return await send_stream(connection, elements, compression=compression)


def call_publisher(
    connection: EmpConnection,
    bodies: AsyncIterable[bytes],
    *,
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
    compression: CompressionScheme | None = None,
) -> PublisherFunction:
    """An rstreams publisher of the responses to ``bodies``, in request order.

    A request is sent only while the requests in flight are fewer than the
    subscriber's outstanding demand (and ``max_in_flight``), so demand is
    what paces the calls. ``bodies`` is consumed once: subscribe once.
    """

    check_count("max_in_flight", max_in_flight)

    async def start(body: bytes) -> PendingCall:
        return await connection.start_call(body, compression=compression)

    async def publish(sink: Sink, request: SubscribeRequest) -> None:
        await pace_calls(sink, bodies, start, PendingCall.response, max_in_flight=max_in_flight)

    return publish


class ResponseStream:
    """Responses to ``bodies``, in request order, for ``async for``.

    The consumer's demand is ``window``: at most that many requests are in
    flight; the next request goes out as a response is taken. ``window=1``
    is strictly one call after the other. Use as an async context manager
    (or call :meth:`aclose`) so that responses still in flight are dropped.
    """

    def __init__(
        self,
        connection: EmpConnection,
        bodies: AsyncIterable[bytes],
        *,
        window: int = 8,
        compression: CompressionScheme | None = None,
    ) -> None:
        check_count("window", window)
        self.connection = connection
        self.window = window
        self.compression = compression
        self._source = aiter(bodies)
        self._pending: deque[PendingCall] = deque()
        self._exhausted = False
        self._busy = False  # one consumer at a time: two would race for the head

    @property
    def in_flight(self) -> int:
        """Requests sent whose response has not been taken."""
        return len(self._pending)

    async def __aenter__(self) -> ResponseStream:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Drop the responses still in flight."""
        while self._pending:
            self._pending.popleft().abandon()
        await trio.lowlevel.checkpoint()

    def __aiter__(self) -> ResponseStream:
        return self

    async def __anext__(self) -> bytes:
        if self._busy:
            raise trio.BusyResourceError("another task is already iterating this ResponseStream")
        self._busy = True
        try:
            return await self._next()
        finally:
            self._busy = False

    async def _next(self) -> bytes:
        while not self._exhausted and len(self._pending) < self.window:
            try:
                body = await anext(self._source)
            except StopAsyncIteration:
                self._exhausted = True
                break
            self._pending.append(await self.connection.start_call(body, compression=self.compression))
        if not self._pending:
            raise StopAsyncIteration
        response = await self._pending[0].response()
        self._pending.popleft()
        return response


async def serve_requests(connection: EmpConnection, handler: RequestHandler, *, max_concurrency: int = 16) -> None:
    """Answer the peer's requests until it says bye.

    Args:
        handler: ``async def handler(body) -> bytes``, run concurrently, one
            task per request; or a processor, an async generator function
            ``async def processor(bodies): ... yield response`` that yields
            exactly one response per request body, in order.
        max_concurrency: requests being handled at once; the next request
            is read from the socket only when one finishes.

    Responses are compressed as their requests were. EMP has no way to fail
    one request: a handler that raises ends the connection with error 0
    (unspecified) carrying the exception's text.

    Raises:
        PeerError, RemoteProtocolError, EmpConnectionLost, EmpTimeout: the
            connection ended other than by bye.
    """
    slots = RequestSlots(max_concurrency)
    if inspect.isasyncgenfunction(handler):
        await _serve_processor(connection, handler, slots)
        return
    function: RequestFunction = handler  # type: ignore[assignment]

    async def respond_to(request: EmpRequest) -> None:
        await connection.respond(request, await function(request.body))

    await answer_requests(connection, respond_to, slots)


async def answer_requests(
    connection: EmpConnection, respond_to: Callable[[EmpRequest], Awaitable[None]], slots: RequestSlots
) -> None:
    """:func:`serve_requests` for a ``respond_to(request)`` that sends its response itself.

    One task per request, each holding one of ``slots`` until it returns; a
    ``respond_to`` that raises ends the connection with error 0.
    """

    async def answer(request: EmpRequest) -> None:
        try:
            try:
                await respond_to(request)
            except Exception as exc:
                if isinstance(exc, EmpError) and connection.ended:
                    raise  # the connection ended under the response
                logger.exception("EMP request handler failed")
                await _fail(connection, exc)
        except EmpError:
            pass  # the connection ended: the loop below sees why
        finally:
            slots.release()

    # How the connection ended, raised once the handlers in flight are done
    # (outside the nursery, so the caller gets it unwrapped).
    end: EmpError | None = None
    async with trio.open_nursery() as nursery:
        while True:
            try:
                request = await _next_request(connection, slots)
            except EmpError as exc:
                end = exc
                break
            if request is None:
                break  # bye, or we closed it (a handler failed, or aclose)
            nursery.start_soon(answer, request)
    if end is not None:
        raise end


async def _next_request(connection: EmpConnection, slots: RequestSlots) -> EmpRequest | None:
    """The next request, once a slot is free (the slot is then the caller's
    to release); None after bye, or once we closed the connection."""
    try:
        return await slots.receive(connection.receive_request)
    except (trio.EndOfChannel, EmpClosed) as exc:
        if isinstance(exc, trio.EndOfChannel) or not exc.by_peer:
            return None
        raise


async def _fail(connection: EmpConnection, exc: Exception) -> None:
    try:
        await connection.send_error(ErrorCode.UNSPECIFIED, f"request handler failed: {exc}"[:1000])
    except EmpError:
        pass


async def _serve_processor(connection: EmpConnection, processor: Any, slots: RequestSlots) -> None:
    order: deque[EmpRequest] = deque()

    async def requests() -> AsyncIterator[bytes]:
        while (request := await _next_request(connection, slots)) is not None:
            order.append(request)
            yield request.body

    responses = processor(requests())
    try:
        async for body in responses:
            if not order:
                raise RuntimeError("the processor yielded more responses than it received requests")
            await connection.respond(order.popleft(), body)
            slots.release()
    except EmpClosed as exc:
        if isinstance(exc, EmpConnectionLost):
            raise
        # bye (a response to a request read before it), or we closed it
    except EmpError:
        raise
    except Exception as exc:
        logger.exception("EMP request processor failed")
        await _fail(connection, exc)
    finally:
        await responses.aclose()
