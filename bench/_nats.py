"""NATS (nats-server from Debian, the nats-py client on asyncio), measured
on the same cases as rstreams.

NATS is a broker: three processes take part in each measurement, the
``nats-server`` the runner starts (its defaults: ``-a 127.0.0.1 -p PORT``,
nothing else), the publishing app below (``python bench/_nats.py
NATS_PORT``, which prints ``ready`` once subscribed), and the client. Core
NATS, no JetStream: at-most-once, no flow control between publisher and
subscriber, so a stream counts what arrived and says whether any was lost.
Every nats-py option is left at its default. One NATS message per element.

Subjects:

* ``bench.stream``: a request to stream; its payload is an rstreams-style
  publisher name (``blob?count=N&size=S`` or ``stamps?rate=R&count=N``), its
  reply subject the client's own ``bench.data.<NUID>``, to which it
  subscribed (and flushed) before asking. The app publishes the elements to
  that subject, one ``publish`` each (``blob``: bytes cut ahead of time, as
  in the rstreams demo; ``stamps``: ``time.perf_counter_ns()`` as 8
  big-endian bytes on the rstreams ``stamps`` schedule), then one empty
  message as end of stream. The client reads with a subscription
  callback (``nc.subscribe(subject, cb=...)``).
* ``bench.rt``: request-reply; every request is answered with 8 zero bytes
  (``msg.respond``). The client calls ``await nc.request(...)`` (nats-py's
  shared response inbox), from one task, or from 64 tasks at once.
"""

from __future__ import annotations

import asyncio
import sys
import time
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import nats

HOST = "127.0.0.1"
SPLIT = 64 * 1024
ANSWER = b"\x00" * 8
#: How long a stream may go without a message before the client gives up
#: (core NATS may drop messages, the end-of-stream one among them).
IDLE_TIMEOUT = 10.0


def url(port: int) -> str:
    return f"nats://{HOST}:{port}"


# ---- the publishing app -----------------------------------------------------


def _elements(name: str) -> tuple[int, Any]:
    parts = urlsplit(name)
    params = dict(parse_qsl(parts.query))
    count = int(params.get("count", 10))
    if parts.path != "blob":
        raise ValueError(f"no such publisher: {name}")
    size = int(params.get("size", 1024))
    pattern = bytes(range(256)) * (size // 256 + 2)
    distinct = [pattern[offset : offset + size] for offset in range(256)]
    return count, lambda i: distinct[i % 256]


async def _publish(nc: Any, subject: str, name: str) -> None:
    publish = nc.publish
    if name.startswith("stamps"):
        params = dict(parse_qsl(urlsplit(name).query))
        rate, count = float(params.get("rate", 10_000)), int(params.get("count", 10_000))
        loop = asyncio.get_running_loop()
        start = loop.time()
        for index in range(count):
            delay = start + index / rate - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            await publish(subject, time.perf_counter_ns().to_bytes(8, "big"))
    else:
        count, element = _elements(name)
        for i in range(count):
            await publish(subject, element(i))
    await publish(subject, b"")
    await nc.flush()


async def serve(port: int) -> None:
    nc = await nats.connect(url(port))
    streams: set[asyncio.Task[None]] = set()

    async def on_stream(msg: Any) -> None:
        # A task per stream, so the subscription's callback returns at once.
        task = asyncio.create_task(_publish(nc, msg.reply, msg.data.decode()))
        streams.add(task)
        task.add_done_callback(streams.discard)

    async def on_rt(msg: Any) -> None:
        await msg.respond(ANSWER)

    await nc.subscribe("bench.stream", cb=on_stream)
    await nc.subscribe("bench.rt", cb=on_rt)
    await nc.flush()
    print("ready", flush=True)
    await asyncio.Event().wait()


# ---- the client -------------------------------------------------------------


async def _read_stream(port: int, name: str, on_element: Any) -> tuple[bool, float]:
    """Subscribe to a fresh ``bench.data.<NUID>`` with a callback (nats-py's
    fast form: ``async for msg in sub.messages`` read 4x fewer messages a
    second here), ask ``bench.stream`` for ``name``, and call
    ``on_element(data)`` for each element until the empty end of stream.
    Returns whether the end arrived (a lost one ends the read after
    IDLE_TIMEOUT without a message), and the seconds from the request to the
    end of stream."""
    nc = await nats.connect(url(port))
    done = asyncio.Event()
    received = 0

    async def on_message(msg: Any) -> None:
        nonlocal received
        data = msg.data
        if data:
            received += 1
            on_element(data)
        else:
            done.set()

    try:
        inbox = "bench.data." + nc.new_inbox().rsplit(".", 1)[1]
        sub = await nc.subscribe(inbox, cb=on_message)
        await nc.flush()
        start = time.perf_counter()
        await nc.publish("bench.stream", name.encode(), reply=inbox)
        seen = -1
        while not done.is_set() and received != seen:
            seen = received
            try:
                await asyncio.wait_for(done.wait(), IDLE_TIMEOUT)
            except TimeoutError:
                pass
        elapsed = time.perf_counter() - start
        await sub.unsubscribe()
    finally:
        await nc.close()
    return done.is_set(), elapsed if done.is_set() else elapsed - IDLE_TIMEOUT


async def stream(port: int, name: str) -> dict[str, Any]:
    expected = int(dict(parse_qsl(urlsplit(name).query)).get("count", 10))
    elements = nbytes = 0

    def count(data: bytes) -> None:
        nonlocal elements, nbytes
        elements += 1
        nbytes += len(data)

    complete, elapsed = await _read_stream(port, name, count)
    return {"elements": elements, "bytes": nbytes, "seconds": elapsed, "lost": expected - elements, "complete": complete}


async def latency(port: int, rate: float, count: int) -> dict[str, Any]:
    latencies: list[float] = []
    stamps: list[int] = []
    last = 0
    clock = time.perf_counter_ns

    def measure(data: bytes) -> None:
        nonlocal last
        last = clock()
        stamp = int.from_bytes(data, "big")
        if not stamps:
            stamps.append(stamp)
        latencies.append((last - stamp) / 1000.0)

    await _read_stream(port, f"stamps?rate={rate}&count={count}", measure)
    return {"latencies_us": latencies, "span_s": (last - stamps[0]) / 1e9 if stamps else 0.0}


async def round_trips(port: int, total: int, concurrency: int) -> dict[str, float]:
    """``total`` requests to ``bench.rt``, from ``concurrency`` tasks. One
    request before the clock starts sets up nats-py's response inbox."""
    nc = await nats.connect(url(port))
    try:
        request = nc.request
        await request("bench.rt", b"one")

        async def worker(count: int) -> None:
            for _ in range(count):
                await request("bench.rt", b"one")

        start = time.perf_counter()
        await asyncio.gather(
            *(worker(total // concurrency + (1 if i < total % concurrency else 0)) for i in range(concurrency))
        )
        elapsed = time.perf_counter() - start
    finally:
        await nc.close()
    return {"elements": total, "bytes": 0, "seconds": elapsed}


if __name__ == "__main__":
    asyncio.run(serve(int(sys.argv[1])))
