"""Exposing an rstreams app over EMP: a request names a publisher, the response holds its elements.

The contract (``docs/bridges/emp.md`` has a byte-level example):

* request body: a publisher name in UTF-8, query included (``range?count=5``);
* response body: a msgpack map with exactly one key, ``{"elements": [bin,
  ...]}`` once the stream completed, or ``{"error": "text"}`` if it failed,
  the name is not UTF-8, or the elements exceed ``max_response_bytes``;
* a response is gzip-compressed when its request was;
* several requests may be in flight on one connection (up to
  ``max_concurrency`` are handled at once); responses may come in any order,
  each with its request's id;
* every response is built within the connection's memory budget
  (``max_connection_memory``): before collecting, a request takes room for
  its largest response (``max_response_bytes``, or less if the budget is
  smaller) and waits for it; the response, once queued, counts until it is
  written. While the budget is exhausted no further request is read, so a
  client that asks and never reads stops itself (TCP carries it back) and
  costs at most its budget;
* plain ``data`` messages (no request-response block) mean nothing here and
  are read and dropped, so they cannot stall the requests behind them.

Each EMP connection gets its own in-process rstreams session to the app
(:func:`bridges.kit.open_app_session`), so subscribing goes through the same
router, demand and codecs as a TCP subscriber's.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from functools import partial

import msgpack
import trio

from rstreams import Peer, Router, SubscriptionError

from ..kit import MemoryBudget, RequestSlots, collect_elements, open_app_session
from ._codec import EmpLimits, compress_body
from ._config import DEFAULT_CONFIG, EmpConfig, EmpRequest
from ._errors import EmpError
from ._events import CompressionScheme
from ._mapping import answer_requests
from ._serve import EmpServer
from ._trio import EmpConnection

__all__ = ["EmpAppServer", "DEFAULT_MAX_RESPONSE_BYTES", "answer_publisher_request", "decode_response"]

logger = logging.getLogger("rstreams.emp")

#: The most element bytes one response may carry; a larger stream is
#: cancelled and answered ``{"error": ...}``. Well under the 16 MiB message
#: limit of a peer with default limits.
DEFAULT_MAX_RESPONSE_BYTES = 4 * 1024 * 1024
#: The app server's request limits: a request is a publisher name, so a
#: body inflates to at most 64 KiB (the longest name wire v0 carries); one
#: beyond is refused with EMP's BODY_TOO_LARGE error. The default 16 MiB let
#: a 16 KB gzip message cost 100 ms of inflating in the reader.
APP_SERVER_CONFIG = replace(DEFAULT_CONFIG, limits=EmpLimits(max_body_size=64 * 1024))
#: A response body larger than this is compressed in a worker thread (a
#: thread's round trip, about 100 µs, is worth it only for what takes
#: longer than that to gzip: about 64 KiB).
COMPRESS_IN_THREAD_BYTES = 64 * 1024


def _pack(value: dict[str, object]) -> bytes:
    packed: bytes = msgpack.packb(value, use_bin_type=True)
    return packed


async def answer_publisher_request(
    session: Peer,
    body: bytes,
    *,
    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
    budget: MemoryBudget | None = None,
) -> bytes:
    """The response body for a request ``body`` naming a publisher on ``session``.

    With ``budget``, the elements are collected within it
    (:func:`~bridges.kit.collect_elements`) and their bytes are given back
    once packed.
    """
    response, held = await _build_response(session, body, max_response_bytes=max_response_bytes, budget=budget)
    if budget is not None:
        budget.give_back(held)
    return response


async def _build_response(
    session: Peer, body: bytes, *, max_response_bytes: int, budget: MemoryBudget | None
) -> tuple[bytes, int]:
    # The packed response, and the element bytes still taken from ``budget``
    # for it (the caller gives them back once the response is counted
    # elsewhere: queued for the writer).
    try:
        name = body.decode("utf-8")
    except UnicodeDecodeError:
        return _pack({"error": "the request body is not a UTF-8 publisher name"}), 0
    try:
        elements = await collect_elements(session, name, max_bytes=max_response_bytes, budget=budget)
    except SubscriptionError as exc:
        return _pack({"error": str(exc)}), 0
    held = sum(map(len, elements)) if budget is not None else 0
    try:
        return _pack({"elements": elements}), held
    except BaseException:
        if budget is not None:
            budget.give_back(held)
        raise


def decode_response(body: bytes) -> list[bytes]:
    """The elements of a response body of this contract.

    Raises:
        ValueError: the body is not such a response.
        rstreams.PublisherError: it is ``{"error": ...}`` (the text is the error's).
    """
    from rstreams import PublisherError

    try:
        value = msgpack.unpackb(body, raw=False)
    except Exception as exc:  # msgpack raises several unrelated types
        raise ValueError(f"the response is not MessagePack: {exc}") from None
    if isinstance(value, dict) and len(value) == 1:
        if isinstance(value.get("error"), str):
            raise PublisherError(value["error"])
        elements = value.get("elements")
        if isinstance(elements, list) and all(isinstance(element, bytes) for element in elements):
            return elements
    raise ValueError('the response is neither {"elements": [bytes, ...]} nor {"error": text}')


class EmpAppServer(EmpServer):
    """An :class:`EmpServer` answering requests with an app's publishers.

    Args:
        app: the router whose publishers are served.
        max_concurrency: requests handled at once per connection.
        max_response_bytes: the most element bytes per response.
    """

    def __init__(
        self,
        app: Router,
        *,
        config: EmpConfig = APP_SERVER_CONFIG,
        max_connections: int | None = None,
        max_concurrency: int = 16,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
    ) -> None:
        super().__init__(self._serve_connection, config=config, max_connections=max_connections)
        self.app = app
        self.max_concurrency = max_concurrency
        self.max_response_bytes = max_response_bytes

    async def _serve_connection(self, connection: EmpConnection) -> None:
        # A response larger than the budget can hold is an error response,
        # never a wait for room that cannot come.
        build = partial(
            _build_response,
            max_response_bytes=connection.response_limit(self.max_response_bytes),
            budget=connection.budget,
        )

        async def respond_to(request: EmpRequest) -> None:
            # Queued, and counted as queued output, before the elements' room
            # is given back (respond_nowait hands it over); and this task
            # keeps no copy of the response while it waits to be written: it
            # does not wait (the budget paces the next requests instead).
            response, held = await build(session, request.body)
            try:
                compressed = None
                scheme = request.compression
                if scheme not in (None, CompressionScheme.IDENTITY) and len(response) > COMPRESS_IN_THREAD_BYTES:
                    # Off the event loop (zlib releases the GIL): 170 ms of
                    # gzip of one response in one step held every connection up.
                    try:
                        compressed = await trio.to_thread.run_sync(compress_body, scheme, response)
                    except BaseException:
                        connection.budget.give_back(held)  # (else respond_nowait's to give back)
                        raise
                connection.respond_nowait(request, response, prepaid=held, compressed_body=compressed)
            finally:
                del response

        async with open_app_session(self.app, max_connection_memory=connection.budget.limit) as session:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_drop_data, connection)
                # The peer's error, a violation (already answered with
                # error), a lost connection: the end of one client, which the
                # kit's server reports in its session_close line.
                try:
                    await answer_requests(connection, respond_to, RequestSlots(self.max_concurrency))
                finally:
                    nursery.cancel_scope.cancel()


async def _drop_data(connection: EmpConnection) -> None:
    try:
        async for _ in connection:
            pass
    except EmpError:
        pass
