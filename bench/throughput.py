"""End-to-end throughput: an rstreams client reading from an rstreams server.

The server runs in its own process (``bench/server.py``); this process is the
client, over loopback TCP. Each case runs ``--rounds`` times and the median
is reported, as in the performance goals of issue 6.

    python bench/throughput.py              # all cases, 5 rounds
    python bench/throughput.py --quick      # 1 round, smaller counts

No test asserts on these numbers; they are measurements, not checks.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import trio

import rstreams

HERE = Path(__file__).resolve().parent


async def stream_case(session: rstreams.Session, name: str, prefetch: int) -> tuple[int, int]:
    elements = nbytes = 0
    async with session.subscribe(name, prefetch=prefetch) as subscription:
        async for batch in subscription.batches():
            elements += len(batch)
            packed = getattr(batch, "packed", None)
            nbytes += len(packed) if packed is not None else sum(map(len, batch))
    return elements, nbytes


async def round_trips(session: rstreams.Session, total: int, concurrency: int) -> tuple[int, int]:
    done = 0

    async def worker(count: int) -> None:
        nonlocal done
        for _ in range(count):
            async with session.subscribe("one", prefetch=1) as subscription:
                async for _element in subscription:
                    pass
            done += 1

    async with trio.open_nursery() as nursery:
        for index in range(concurrency):
            nursery.start_soon(worker, total // concurrency + (1 if index < total % concurrency else 0))
    return done, 0


def cases(quick: bool) -> list[tuple[str, str, Callable[[rstreams.Session], Awaitable[tuple[int, int]]]]]:
    scale = 10 if quick else 1
    return [
        ("8-byte elements, one onNext each", "el/s", lambda s: stream_case(s, f"numbers?count={3_000_000 // scale}", 65536)),
        ("8-byte elements, packed", "el/s", lambda s: stream_case(s, f"packed?count={30_000_000 // scale}", 1 << 20)),
        ("1 KiB elements", "MB/s", lambda s: stream_case(s, f"blob?count={500_000 // scale}&size=1024", 4096)),
        ("1 MiB elements (split)", "MB/s", lambda s: stream_case(s, f"blob?count={2000 // scale}&size=1048576", 16)),
        ("subscribe to 1 element, sequential", "rt/s", lambda s: round_trips(s, 5000 // scale, 1)),
        ("subscribe to 1 element, 64 concurrent", "rt/s", lambda s: round_trips(s, 30000 // scale, 64)),
    ]


async def run(port: int, rounds: int, quick: bool) -> None:
    async with rstreams.open_session(f"tcp://127.0.0.1:{port}") as session:
        print(f"{'case':45} {'median':>14}  unit   rounds")
        for title, unit, case in cases(quick):
            results = []
            for _ in range(rounds):
                start = time.perf_counter()
                count, nbytes = await case(session)
                elapsed = time.perf_counter() - start
                results.append((nbytes / 1e6 if unit == "MB/s" else count) / elapsed)
            print(f"{title:45} {statistics.median(results):>14,.0f}  {unit:5}  {len(results)}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="one round, a tenth of the work")
    args = parser.parse_args()
    server = subprocess.Popen([sys.executable, str(HERE / "server.py"), "0"], stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline())
        trio.run(run, port, 1 if args.quick else args.rounds, args.quick)
    finally:
        server.terminate()
        server.wait(timeout=10)


if __name__ == "__main__":
    main()
