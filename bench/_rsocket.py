"""rsocket-py (asyncio), the transport a Python user picks today, measured the
same way: a server with ``range``/``blob`` request-stream publishers and a
1-element request-response, and a client that consumes them with windowed
demand (the same window the rstreams client uses).

The publisher is a minimal hand-written one (what a user who cares about
speed writes): on ``request(n)`` it emits up to ``n`` payloads at once, the
last one flagged complete. Elements are cut from bytes built ahead of time,
as in the rstreams demo.

Only the benchmark imports this module; rsocket-py is installed in the
benchmark's own environment, never as a dependency of rstreams.

Run the server with ``python bench/_rsocket.py PORT``; it prints its port.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import time
from urllib.parse import parse_qsl, urlsplit

from reactivestreams.publisher import Publisher
from reactivestreams.subscriber import Subscriber
from reactivestreams.subscription import Subscription
from rsocket.helpers import create_future, single_transport_provider
from rsocket.payload import Payload
from rsocket.request_handler import BaseRequestHandler
from rsocket.rsocket_client import RSocketClient
from rsocket.rsocket_server import RSocketServer
from rsocket.transports.tcp import TransportTCP

_PATTERN = bytes(range(256)) * 4100
# rsocket-py reads 1 KiB per receive by default, which caps large payloads far
# below what it can do; a user who cares about speed raises it, so we do, to
# the read size rstreams uses.
READ_BUFFER_SIZE = 256 * 1024


class _Elements(Publisher, Subscription):
    """``count`` elements made by ``element(i)``, emitted as demand arrives."""

    def __init__(self, count: int, element) -> None:  # type: ignore[no-untyped-def]
        self._count = count
        self._element = element
        self._next = 0
        self._cancelled = False
        self._subscriber: Subscriber | None = None

    def subscribe(self, subscriber: Subscriber) -> None:
        self._subscriber = subscriber
        subscriber.on_subscribe(self)
        if not self._count:
            subscriber.on_complete()

    def request(self, n: int) -> None:
        subscriber = self._subscriber
        assert subscriber is not None
        end = min(self._count, self._next + n)
        element = self._element
        for i in range(self._next, end):
            if self._cancelled:
                return
            subscriber.on_next(Payload(element(i)), is_complete=i == self._count - 1)
        self._next = end

    def cancel(self) -> None:
        self._cancelled = True


def _publisher(name: str) -> _Elements:
    parts = urlsplit(name)
    params = dict(parse_qsl(parts.query))
    count = int(params.get("count", 10))
    if parts.path == "range":
        return _Elements(count, lambda i: i.to_bytes(8, "big"))
    if parts.path == "blob":
        size = int(params.get("size", 1024))
        if size <= 64 * 1024:
            distinct = [_PATTERN[offset : offset + size] for offset in range(256)]
            return _Elements(count, lambda i: distinct[i % 256])
        pattern = bytes(range(256)) * (size // 256 + 2)
        return _Elements(count, lambda i: pattern[i % 256 : i % 256 + size])
    raise ValueError(f"no such publisher: {name}")


class _Handler(BaseRequestHandler):
    async def request_stream(self, payload: Payload) -> Publisher:
        return _publisher(payload.data.decode())

    async def request_response(self, payload: Payload):  # type: ignore[no-untyped-def]
        return create_future(Payload(b"\x00" * 8))


async def serve(port: int) -> None:
    # Cancels crossing the last element are routine here; keep its log quiet.
    logging.getLogger("pyrsocket").setLevel(logging.ERROR)

    def session(*connection):  # type: ignore[no-untyped-def]
        RSocketServer(TransportTCP(*connection, read_buffer_size=READ_BUFFER_SIZE), handler_factory=_Handler)

    server = await asyncio.start_server(session, "127.0.0.1", port)
    print(server.sockets[0].getsockname()[1], flush=True)
    async with server:
        await server.serve_forever()


# ---- the client -------------------------------------------------------------


class _Counter(Subscriber):
    def __init__(self, window: int, done: asyncio.Future) -> None:  # type: ignore[type-arg]
        self.elements = 0
        self.nbytes = 0
        self._window = window
        self._half = max(1, window // 2)
        self._since = 0
        self._done = done
        self._subscription: Subscription | None = None

    def on_subscribe(self, subscription: Subscription) -> None:
        self._subscription = subscription

    def on_next(self, value: Payload, is_complete: bool = False) -> None:
        self.elements += 1
        self.nbytes += len(value.data)
        if is_complete:
            self.on_complete()
            return
        self._since += 1
        if self._since >= self._half:
            assert self._subscription is not None
            self._subscription.request(self._since)
            self._since = 0

    def on_error(self, exception: Exception) -> None:
        if not self._done.done():
            self._done.set_exception(exception)

    def on_complete(self) -> None:
        if not self._done.done():
            self._done.set_result(None)


async def stream(port: int, name: str, window: int) -> dict[str, float]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    async with RSocketClient(single_transport_provider(TransportTCP(reader, writer, read_buffer_size=READ_BUFFER_SIZE))) as client:
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        counter = _Counter(window, done)
        start = time.perf_counter()
        client.request_stream(Payload(name.encode())).initial_request_n(window).subscribe(counter)
        await done
        elapsed = time.perf_counter() - start
    return {"elements": counter.elements, "bytes": counter.nbytes, "seconds": elapsed}


async def round_trips(port: int, total: int, concurrency: int) -> dict[str, float]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    async with RSocketClient(single_transport_provider(TransportTCP(reader, writer, read_buffer_size=READ_BUFFER_SIZE))) as client:

        async def worker(count: int) -> None:
            for _ in range(count):
                await client.request_response(Payload(b"one"))

        start = time.perf_counter()
        await asyncio.gather(
            *(worker(total // concurrency + (1 if i < total % concurrency else 0)) for i in range(concurrency))
        )
        elapsed = time.perf_counter() - start
    return {"elements": total, "bytes": 0, "seconds": elapsed}


if __name__ == "__main__":
    asyncio.run(serve(int(sys.argv[1]) if len(sys.argv) > 1 else 0))
