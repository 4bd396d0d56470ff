"""Calls: a request sent and its response awaited, and calls paced by demand.

Every request-response protocol a bridge speaks (EMP's requests, Epoxy's
conversations, and any later one) needs the same two things on the trio
side, so they are written once here:

* :class:`PendingCall`: one request on the wire and the response it awaits;
  :class:`PendingCalls`, a connection's calls by their ids.
  The reader delivers the response (or fails the call when the connection
  ends); whoever waits takes the response once, or abandons it (a
  cancelled wait, a stream that was cancelled), and then the response is
  dropped when it arrives. A response that arrived counts against the
  connection's read-ahead budget until it is taken or dropped.
* :func:`pace_calls`: an rstreams publisher's body that sends requests only
  while the calls in flight are fewer than the subscriber's demand, and
  sends their responses, in request order, as elements. Demand is what paces
  the calls, as for every stream.
"""

from __future__ import annotations

from collections import deque
from collections.abc import AsyncIterable, Awaitable, Callable
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import trio

from rstreams import Sink

from ._config import check_count
from ._errors import copy_error
from ._inbound import ITEM_COST

if TYPE_CHECKING:
    from ._connection import BridgeConnection

__all__ = ["PendingCall", "PendingCalls", "pace_calls"]

R = TypeVar("R")
Q = TypeVar("Q")
C = TypeVar("C", bound="PendingCall[Any]")


class PendingCall(Generic[R]):
    """A request we sent; :meth:`response` waits for its answer.

    ``size`` tells how many bytes a response holds: one that arrived before
    its taker counts against the connection's read-ahead budget
    (``ITEM_COST`` plus its size) until it is taken or dropped.
    """

    def __init__(self, connection: BridgeConnection[Any, Any], size: Callable[[R], int]) -> None:
        self._connection = connection
        self._size = size
        self._done = trio.Event()
        self._response: R | None = None
        self._error: BaseException | None = None
        self._abandoned = False

    @property
    def done(self) -> bool:
        """True once the response (or the connection's end) arrived."""
        return self._done.is_set()

    def deliver(self, response: R) -> None:
        """The reader's part: the response arrived (dropped if abandoned)."""
        if self._abandoned or self.done:
            return
        self._response = response
        self._done.set()
        self._connection._hold(ITEM_COST + self._size(response))

    def fail(self, error: BaseException) -> None:
        """The reader's part: the connection ended before the response."""
        if not self.done:
            self._error = error
            self._done.set()

    def abandon(self) -> None:
        """Drop the response when it arrives (it is still awaited on the wire)."""
        self._abandoned = True
        if self._response is not None:
            self._connection._release(ITEM_COST + self._size(self._response))
            self._response = None

    async def response(self) -> R:
        """Wait for the response and take it.

        Raises:
            the connection's end, as a fresh copy of its typed error, if it
                ended first (see the bridge's connection for which);
            trio.BusyResourceError: the response was already taken.

        Cancellation: the call is abandoned (its response will be dropped).
        Always checkpoints.
        """
        if self._abandoned:
            raise trio.BusyResourceError("this call's response was already taken or abandoned")
        try:
            await self._done.wait()
        except BaseException:
            self.abandon()
            raise
        self._abandoned = True
        if self._error is not None:
            raise copy_error(self._error)
        response, self._response = self._response, None
        assert response is not None
        self._connection._release(ITEM_COST + self._size(response))
        return response


class PendingCalls(Generic[R]):
    """A connection's calls that await their responses, by the id the protocol gives each.

    The reader hands each response to the call with its id
    (:meth:`deliver`; a response for no call is dropped, as a protocol whose
    peer may answer a call we abandoned must allow), the connection's end
    fails every call still waiting (:meth:`fail_all`), and the connection
    reads for its calls while one waits (:attr:`waiting`).
    """

    def __init__(self) -> None:
        self._calls: dict[int, PendingCall[R]] = {}

    def add(self, call_id: int, call: PendingCall[R]) -> None:
        """``call`` awaits the response with ``call_id``."""
        self._calls[call_id] = call

    def deliver(self, call_id: int, response: R) -> None:
        """The reader's part: the response with ``call_id`` arrived."""
        call = self._calls.pop(call_id, None)
        if call is not None:
            call.deliver(response)

    def fail_all(self, error: BaseException) -> None:
        """The connection ended (or can no longer be answered): every call fails with ``error``."""
        for call in self._calls.values():
            call.fail(error)
        self._calls.clear()

    # A call leaves the table as it is done (deliver pops it, fail_all
    # clears them all), so every call in it still waits: both answers are
    # the table's size, not a walk over it.

    @property
    def waiting(self) -> bool:
        """True while a call waits for its response (the reader should read)."""
        return bool(self._calls)

    def __len__(self) -> int:
        """How many calls wait for their responses."""
        return len(self._calls)


async def pace_calls(
    sink: Sink,
    requests: AsyncIterable[Q],
    start_call: Callable[[Q], Awaitable[C]],
    take_response: Callable[[C], Awaitable[bytes]],
    *,
    max_in_flight: int,
) -> None:
    """Send ``requests``, and their responses to ``sink``, paced by its demand.

    A request is sent only while the calls in flight are fewer than the
    subscriber's outstanding demand (and ``max_in_flight``). ``take_response``
    turns an answered call into the element to send (or raises, failing the
    stream). When the stream ends early, the calls still in flight are
    abandoned. Completing needs no demand, so one request is looked at ahead
    to know whether there is another.
    """
    check_count("max_in_flight", max_in_flight)
    source = aiter(requests)
    pending: deque[C] = deque()
    held: list[Q] = []  # the next request, pulled but not sent (at most one)
    try:
        while True:
            while len(pending) < min(sink.demand, max_in_flight):
                if not held:
                    try:
                        held.append(await anext(source))
                    except StopAsyncIteration:
                        break
                pending.append(await start_call(held.pop()))
            if not pending:
                if not held:
                    try:
                        held.append(await anext(source))
                    except StopAsyncIteration:
                        return
                await sink.wait_demand()
                continue
            element = await take_response(pending[0])
            pending.popleft()
            await sink.send(element)
    finally:
        for call in pending:
            call.abandon()
