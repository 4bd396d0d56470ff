"""Many publishers waiting for demand on one connection (issue 18, defect 2).

    python bench/many_waiting.py              # 10,000 streams, blocks of 2,000
    python bench/many_waiting.py --n 4000 --block 1000

Starts ``rstreams serve examples.demo:app`` in its own process, then, from
this one:

* a raw peer sends hello and N subscribes to ``range?count=1000000000``
  with no demand, in one write: N publisher tasks that wait for demand; it
  times each block of subscribed answers, then requests one element on
  every stream (again in one write) and times until all N have arrived;
* meanwhile a second client on its own connection fetches ``range?count=1``
  in a loop: its round-trip times say what the other clients of the server
  see while the N streams open.

Reports seconds per block (they must not grow: opening N waiting streams is
O(N)), the time to serve all N, the server's CPU seconds, and the second
client's p50 / p99. Nothing here is run by the tests; the test that holds the
bound counts wake-ups instead (tests/runtime/test_waiting_publishers.py).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import msgpack
import trio

import rstreams
from _proc import cpu_seconds, free_port
from rstreams.protocol import MessageDecoder, OnNext, OnNextPacked, Subscribed

ROOT = Path(__file__).resolve().parent.parent


async def waiting_streams(port: int, n: int, block: int, report: dict[str, Any]) -> None:
    pack = msgpack.Packer(use_bin_type=True).pack
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    decoder = MessageDecoder()
    data = pack([0, 0, []]) + b"".join(pack([1, "range?count=1000000000", i, 0]) for i in range(1, n + 1))
    started = time.perf_counter()
    await stream.send_all(data)
    subscribed = elements = 0
    blocks: list[float] = []
    mark = started
    while elements < n:
        chunk = await stream.receive_some(1 << 20)
        if not chunk:
            raise RuntimeError("the server closed the connection")
        decoder.feed(chunk)
        for message in decoder:
            if type(message) is Subscribed:
                subscribed += 1
                if subscribed % block == 0:
                    now = time.perf_counter()
                    blocks.append(now - mark)
                    mark = now
                if subscribed == n:
                    report["open_s"] = time.perf_counter() - started
                    served = time.perf_counter()
                    await stream.send_all(b"".join(pack([2, i, 1]) for i in range(1, n + 1)))
            elif type(message) in (OnNext, OnNextPacked):
                elements += 1
    report["serve_s"] = time.perf_counter() - served
    report["blocks_s"] = blocks
    await stream.aclose()


async def round_trips(port: int, done: trio.Event, latencies: list[float]) -> None:
    async with rstreams.open_session(f"tcp://127.0.0.1:{port}") as session:
        while not done.is_set():
            start = time.perf_counter()
            await session.fetch("range?count=1", 1)
            latencies.append(time.perf_counter() - start)
            await trio.sleep(0.001)


async def main(n: int, block: int, port: int) -> dict[str, Any]:
    report: dict[str, Any] = {}
    latencies: list[float] = []
    done = trio.Event()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(round_trips, port, done, latencies)
        await trio.sleep(0.5)
        idle = len(latencies)
        await waiting_streams(port, n, block, report)
        done.set()
    busy = latencies[idle:] or [0.0]
    report["idle_p50_ms"] = statistics.median(latencies[:idle] or [0.0]) * 1e3
    report["busy_p50_ms"] = statistics.median(busy) * 1e3
    report["busy_p99_ms"] = sorted(busy)[int(0.99 * (len(busy) - 1))] * 1e3
    return report


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=10_000, help="waiting streams (default 10,000)")
    parser.add_argument("--block", type=int, default=2_000, help="subscribed answers per timed block")
    args = parser.parse_args()
    port = free_port()
    # Each open stream costs STREAM_MEMORY_COST (6 KiB) of the connection's
    # memory budget, and streams may take three quarters of its outbound
    # half: the default 64 MiB admits 4,096 streams, so N of them need a
    # budget of at least N x 6 KiB x 8 / 3 (10,000: 157 MiB).
    budget = -(-args.n * rstreams.STREAM_MEMORY_COST * 8 // 3)
    server = subprocess.Popen(
        [sys.executable, "-m", "rstreams", "serve", "examples.demo:app", "--tcp", f"127.0.0.1:{port}",
         "--max-connection-memory", str(max(budget, rstreams.DEFAULT_CONNECTION_MEMORY))],
        cwd=ROOT,
        stderr=subprocess.DEVNULL,
    )
    try:
        time.sleep(1.5)
        cpu_before = cpu_seconds(server.pid)
        result = trio.run(main, args.n, args.block, port)
        result["server_cpu_s"] = cpu_seconds(server.pid) - cpu_before
    finally:
        server.terminate()
        server.wait()
    blocks = ", ".join(f"{s:.2f}" for s in result.pop("blocks_s"))
    print(f"{args.n:,} waiting streams; s per block of {args.block:,} subscribes: {blocks}")
    print(
        "open {open_s:.2f} s, serve one element each {serve_s:.2f} s, server CPU {server_cpu_s:.2f} s;"
        " other client p50 {idle_p50_ms:.2f} ms idle, {busy_p50_ms:.2f} ms (p99 {busy_p99_ms:.1f}) meanwhile".format(**result)
    )
