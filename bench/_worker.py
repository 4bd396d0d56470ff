"""A benchmark client process: ``python bench/_worker.py rstreams|raw|rsocket|zmq|nats|tws``.

It reads one JSON command per line on stdin, runs it against the server it
names, and writes one JSON result per line on stdout, so the runner keeps one
warm client process per system for the whole run and every measurement
opens its own connection. Nothing is timed here but the work itself:
connection setup is outside the clock for the stream and round-trip cases.
"""

from __future__ import annotations

import gc
import json
import sys
import time
import traceback
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _proc import rss_bytes  # noqa: E402

URL = "tcp://127.0.0.1:{port}"
WS_URL = "ws://127.0.0.1:{port}/"


# ---- rstreams -----------------------------------------------------------------


async def rstreams_stream(
    port: int, name: str, prefetch: int | None = None, mode: str = "batches", scheme: str = "tcp", copy: bool = True
) -> dict[str, Any]:
    """Read ``name``: ``batches`` with ``sub.batches()``, ``each`` with
    ``async for``; ``prefetch`` None leaves the subscription's default;
    ``copy=False`` subscribes with it (large elements as read-only views of
    the buffers they were received into, as pyzmq's ``copy=False``)."""
    import rstreams

    elements = nbytes = 0
    options: dict[str, Any] = {} if prefetch is None else {"prefetch": prefetch}
    if not copy:
        options["copy"] = False
    async with rstreams.open_session((WS_URL if scheme == "ws" else URL).format(port=port)) as session:
        start = time.perf_counter()
        async with session.subscribe(name, **options) as subscription:
            if mode == "batches":
                async for batch in subscription.batches():
                    elements += len(batch)
                    packed = getattr(batch, "packed", None)
                    nbytes += len(packed) if packed is not None else sum(map(len, batch))
            else:
                async for element in subscription:
                    elements += 1
                    nbytes += len(element)
        elapsed = time.perf_counter() - start
    return {"elements": elements, "bytes": nbytes, "seconds": elapsed}


async def rstreams_round_trips(port: int, total: int, concurrency: int, mode: str = "fetch") -> dict[str, Any]:
    """Subscribe to ``range?count=1`` ``total`` times, ``concurrency`` at once.

    ``fetch``: ``await session.fetch(name, 1)``, the request-response form
    (rsocket-py's side of the pair is request-response too); ``iterate``:
    ``async with session.subscribe(...)`` and ``async for``.
    """

    import rstreams

    async with rstreams.open_session(URL.format(port=port)) as session:
        start = time.perf_counter()
        await round_trips_on(session, total, concurrency, mode)
        elapsed = time.perf_counter() - start
    return {"elements": total, "bytes": 0, "seconds": elapsed}


async def round_trips_on(session: Any, total: int, concurrency: int, mode: str = "fetch") -> None:
    """``total`` subscribes to ``range?count=1`` on ``session``, from
    ``concurrency`` tasks at once (see ``rstreams_round_trips``)."""
    import trio

    async def worker(count: int) -> None:
        if mode == "fetch":
            for _ in range(count):
                await session.fetch("range?count=1", 1)
            return
        for _ in range(count):
            async with session.subscribe("range?count=1", prefetch=1) as subscription:
                async for _element in subscription:
                    pass

    async with trio.open_nursery() as nursery:
        for index in range(concurrency):
            nursery.start_soon(worker, total // concurrency + (1 if index < total % concurrency else 0))


async def rstreams_latency(port: int, rate: float, count: int) -> dict[str, Any]:
    import rstreams

    async with rstreams.open_session(URL.format(port=port)) as session:
        return await stamp_latencies(session, rate, count)


async def stamp_latencies(session: Any, rate: float, count: int) -> dict[str, Any]:
    """Read ``stamps`` from ``session`` (``async for``, prefetch 256): each
    element's latency in µs, and the span from the first stamp to the last
    arrival, over which the rate the stream held is (elements - 1) / span_s."""
    latencies: list[float] = []
    first_stamp = last = 0
    clock = time.perf_counter_ns
    async with session.subscribe(f"stamps?rate={rate}&count={count}", prefetch=256) as subscription:
        async for element in subscription:
            last = clock()
            stamp = int.from_bytes(element, "big")
            if not latencies:
                first_stamp = stamp
            latencies.append((last - stamp) / 1000.0)
    return {"latencies_us": latencies, "span_s": (last - first_stamp) / 1e9}


async def rstreams_idle_memory(port: int, n: int) -> dict[str, Any]:
    import tracemalloc

    import rstreams

    async with rstreams.open_session(URL.format(port=port)) as session:
        # prefetch=0: subscribed, no demand, so the publisher sits waiting.
        warm = [session.subscribe("range?count=1", prefetch=0) for _ in range(10)]
        for subscription in warm:
            await subscription.__aenter__()
        subscriptions = []
        gc.collect()
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(n):
            subscription = session.subscribe("range?count=1", prefetch=0)
            await subscription.__aenter__()
            subscriptions.append(subscription)
        gc.collect()
        after = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
        # (Idle: nothing arrived on any of them.)
        buffered = sum(subscription.statistics().buffered for subscription in subscriptions)
        for subscription in subscriptions + warm:
            await subscription.__aexit__(None, None, None)
    # (The list that holds them is ours, 8 bytes a subscription.)
    return {"bytes_per_subscription": (after - before - 8 * n) / n, "n": n, "buffered": buffered}


async def rstreams_slow_subscribers(port: int, server_pid: int, n: int, connections: int, seconds: float) -> dict[str, Any]:
    import trio

    import rstreams

    received = 0
    samples: list[tuple[float, int]] = []

    async def slow(session: rstreams.Session) -> None:
        nonlocal received
        async with session.subscribe("range?count=1000000000000", prefetch=16) as subscription:
            async for batch in subscription.batches():
                received += len(batch)
                await trio.sleep(0.01)

    start = time.perf_counter()
    async with trio.open_nursery() as outer:
        sessions = []
        for _ in range(connections):
            sessions.append(await outer.start(_session_task, port))
        async with trio.open_nursery() as nursery:
            for index in range(n):
                nursery.start_soon(slow, sessions[index % connections])
            while time.perf_counter() - start < seconds:
                samples.append((time.perf_counter() - start, rss_bytes(server_pid)))
                await trio.sleep(0.25)
            nursery.cancel_scope.cancel()
        outer.cancel_scope.cancel()
    return {"samples": samples, "received": received, "seconds": time.perf_counter() - start}


async def _session_task(port: int, task_status: Any) -> None:
    import trio

    import rstreams

    async with rstreams.open_session(URL.format(port=port)) as session:
        task_status.started(session)
        await trio.sleep_forever()


async def _all_open_then_read(n: int, open_one: Any) -> dict[str, Any]:
    """Run n copies of ``open_one(read)``; each opens a subscription to
    ``range?count=100`` its own way and hands it to ``read``, which waits
    until all n are open (so they are open at once), then reads it."""
    import trio

    opened = elements = 0
    everyone_open = trio.Event()

    async def read(subscription: Any) -> None:
        nonlocal opened, elements
        opened += 1
        if opened == n:
            everyone_open.set()
        await everyone_open.wait()
        async for batch in subscription.batches():
            elements += len(batch)

    start = time.perf_counter()
    with trio.fail_after(120):
        async with trio.open_nursery() as nursery:
            for _ in range(n):
                nursery.start_soon(open_one, read)
    return {"opened": opened, "elements": elements, "seconds": time.perf_counter() - start}


async def rstreams_many_streams(port: int, n: int) -> dict[str, Any]:
    """n streams open at once on one connection, each reading 100 elements."""
    import rstreams

    async with rstreams.open_session(URL.format(port=port)) as session:

        async def one(read: Any) -> None:
            async with session.subscribe("range?count=100", prefetch=128) as subscription:
                await read(subscription)

        return await _all_open_then_read(n, one)


async def rstreams_many_connections(port: int, n: int) -> dict[str, Any]:
    """n sessions open at once to one server, each reading 100 elements."""
    import rstreams

    async def one(read: Any) -> None:
        async with rstreams.open_session(URL.format(port=port)) as session:
            async with session.subscribe("range?count=100", prefetch=128) as subscription:
                await read(subscription)

    return await _all_open_then_read(n, one)


def run_rstreams(command: dict[str, Any]) -> dict[str, Any]:
    import trio

    case = command.pop("case")
    function = {
        "stream": rstreams_stream,
        "round_trips": rstreams_round_trips,
        "latency": rstreams_latency,
        "idle_memory": rstreams_idle_memory,
        "slow_subscribers": rstreams_slow_subscribers,
        "many_streams": rstreams_many_streams,
        "many_connections": rstreams_many_connections,
    }[case]
    return trio.run(lambda: function(**command))  # type: ignore[no-any-return]


# ---- raw and rsocket ------------------------------------------------------------


def run_raw(command: dict[str, Any]) -> dict[str, Any]:
    import _raw

    case = command.pop("case")
    if case == "round_trips":
        return _raw.round_trips("127.0.0.1", command["port"], command["total"], command["concurrency"])
    assert case == "stream"
    return _raw.consume("127.0.0.1", command["port"], command["name"])


def run_tws(command: dict[str, Any]) -> dict[str, Any]:
    import trio

    import _ws

    assert command.pop("case") == "stream"
    return trio.run(_ws.consume, WS_URL.format(port=command["port"]), command["name"])  # type: ignore[no-any-return]


def run_zmq(command: dict[str, Any]) -> dict[str, Any]:
    import _zmq

    case = command.pop("case")
    if case == "stream":
        return _zmq.stream(command["port"], command["name"], command.get("copy", True))
    if case == "round_trips":
        return _zmq.round_trips(command["ports"], command["total"], command["concurrency"])
    if case == "latency":
        return _zmq.latency(command["port"], command["rate"], command["count"])
    raise ValueError(f"pyzmq has no case {case}")


def run_nats(command: dict[str, Any]) -> dict[str, Any]:
    import asyncio

    import _nats

    case = command.pop("case")
    if case == "stream":
        return asyncio.run(_nats.stream(command["port"], command["name"]))
    if case == "round_trips":
        return asyncio.run(_nats.round_trips(command["port"], command["total"], command["concurrency"]))
    if case == "latency":
        return asyncio.run(_nats.latency(command["port"], command["rate"], command["count"]))
    raise ValueError(f"NATS has no case {case}")


def run_rsocket(command: dict[str, Any]) -> dict[str, Any]:
    import asyncio

    import _rsocket

    case = command.pop("case")
    if case == "stream":
        command.pop("mode", None)
        return asyncio.run(_rsocket.stream(command["port"], command["name"], command["prefetch"]))
    if case == "round_trips":
        return asyncio.run(_rsocket.round_trips(**command))
    raise ValueError(f"rsocket has no case {case}")


def main() -> None:
    run = {
        "rstreams": run_rstreams, "raw": run_raw, "rsocket": run_rsocket, "tws": run_tws, "zmq": run_zmq, "nats": run_nats
    }[sys.argv[1]]
    for line in sys.stdin:
        command = json.loads(line)
        try:
            result = run(command)
        except Exception as exc:  # reported to the runner, which records the failure
            result = {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}
        print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
