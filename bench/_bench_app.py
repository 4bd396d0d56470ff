"""The app the benchmark serves: the demo's publishers, plus ``stamps``.

Every throughput and round-trip case subscribes to the demo's own ``range``
and ``blob`` (so the numbers are those of ``rstreams serve examples.demo:app``);
``stamps`` exists only for the latency case, which needs elements published
at a steady rate and stamped with the time they were handed to the sink;
``each``, for ``bench/ab_publish.py``, publishes the way most publishers are
written: ``await sink.send`` per element, in a loop (``each_fixed``: the
same on a fixed-size route, 8-byte elements).

Served by the benchmark as ``rstreams serve _bench_app:app --app-dir bench``.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import trio

import rstreams

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository, for examples/
from examples import demo  # noqa: E402

__all__ = ["app"]


async def stamps(sink: rstreams.Sink, request: rstreams.SubscribeRequest) -> None:
    """``count`` elements at ``rate`` per second, each ``time.perf_counter_ns()``
    (8 bytes, big-endian) at the moment it is handed to the sink.

    The clock is CLOCK_MONOTONIC, shared by every process on the machine, so
    the consumer can subtract it from its own reading.
    """
    rate = request.float_param("rate", 10_000.0, minimum=1.0)
    count = request.int_param("count", 10_000, minimum=0)
    start = trio.current_time()
    for index in range(count):
        # Elements fall due on a fixed schedule; a late wake-up sends every
        # element already due, one send each, as a steady producer would.
        await rstreams.sleep_until(start + index / rate)
        await sink.send(time.perf_counter_ns().to_bytes(8, "big"))


async def each(sink: rstreams.Sink, request: rstreams.SubscribeRequest) -> None:
    """``count`` elements of ``size`` bytes (8 by default), one ``await
    sink.send`` each, with nothing else in the loop."""
    count = request.int_param("count", 10_000, minimum=0)
    size = request.int_param("size", 8, minimum=0, maximum=demo.MAX_BLOB_SIZE)
    element = bytes(size)
    for _ in range(count):
        await sink.send(element)


app = rstreams.Router({path: demo.app.resolve(path) for path in demo.app.paths})  # type: ignore[misc]
app.add("stamps", stamps, element_size=8)
app.add("each", each)
app.add("each_fixed", each, element_size=8)
