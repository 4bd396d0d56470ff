"""A live sensor feed into the demo app's ``sensors`` topic.

::

    rstreams demo                    # or: rstreams serve rstreams.demo:app --tcp 127.0.0.1:9000
    python examples/sensors.py       # 4 sensors, 10 readings/s each
    rstreams sub tcp://127.0.0.1:9000 'sensors?policy=latest' --format msgpack --prefetch 1

Readings are msgpack ``{"sensor", "ts", "value"}``. The feed is paced by
demand: if a ``block`` subscriber of the topic stops reading, the topic
fills and this client stops being asked for readings (they are not queued
up); ``latest`` and ``drop`` subscribers never hold it back.
"""

from __future__ import annotations

import argparse
import math
import random
import sys
import time
from collections.abc import AsyncIterator
from typing import Any

import trio

import rstreams


async def readings(sensors: int, rate: float, count: int) -> AsyncIterator[dict[str, Any]]:
    walk = random.Random(1)
    values = [20.0 + 5 * i for i in range(sensors)]
    sent = 0
    next_tick = trio.current_time()
    while not count or sent < count:
        now = time.time()
        for i in range(sensors):
            values[i] += walk.gauss(0.0, 0.3)
            yield {"sensor": f"s{i}", "ts": now, "value": round(values[i] + 3 * math.sin(now / 5 + i), 3)}
            sent += 1
            if count and sent >= count:
                return
        next_tick += 1.0 / rate
        await rstreams.sleep_until(next_tick)  # (a deadline already past is a checkpoint)


async def main(url: str, sensors: int, rate: float, count: int) -> None:
    async with rstreams.open_session(url, app=rstreams.Router()) as session:
        sent = await rstreams.publish_to_topic(session, "sensors", readings(sensors, rate, count), codec="msgpack")
    print(f"published {sent} readings", flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="publish sensor readings into the demo app's sensors topic")
    parser.add_argument(
        "url", nargs="?", default="tcp://127.0.0.1:9000", help="tcp://, tls://, ws:// or wss:// URL of the demo app (default: %(default)s)"
    )
    parser.add_argument("--sensors", type=int, default=4)
    parser.add_argument("--rate", type=float, default=10.0, help="readings per sensor per second")
    parser.add_argument("--count", type=int, default=0, help="stop after this many readings (0: never)")
    args = parser.parse_args()
    try:
        trio.run(main, args.url, args.sensors, args.rate, args.count)
    except* KeyboardInterrupt:
        sys.exit(130)  # Ctrl-C: stop quietly, with the status shells expect
