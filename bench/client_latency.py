"""Where the latency of a paced stream goes: the same server, three clients.

    python bench/client_latency.py [blocking|trio|session ...] [--n N]

Starts ``rstreams serve _bench_app:app`` (this checkout) and reads its
``stamps?rate=10000`` stream, N elements (default 30,000), with each client
named (default: all three, one after the other), printing the p50, p99 and
p99.9 of publish-to-read latency in µs for each:

* ``blocking``: a plain blocking socket and the sans-I/O ``Connection``, in
  one thread (no trio at all);
* ``trio``: one trio task, trio's ``SocketStream`` and the ``Connection``;
* ``session``: ``rstreams.open_session`` and ``async for`` at prefetch 256,
  as ``bench/ab_latency.py lat`` and the benchmark's latency row read it.

The first two ask for more every 64 elements, as the session's window does
about as often. Same server, same wire: what differs is the client. On
2026-11-26 (NOTES.md, "Where the quiet p99 goes"), the first two were at
pyzmq's level and the session's p50 and p99 well above it.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

import trio  # noqa: E402

import rstreams  # noqa: E402
from _proc import free_port  # noqa: E402
from rstreams.protocol import Connection, Elements, OnComplete, OnError  # noqa: E402

CLIENTS = ("blocking", "trio", "session")
TOP_UP = 64
clock = time.perf_counter_ns


def _take(connection: Connection, subscriber: int, now: int, latencies: list[float], pending: list[int]) -> bool:
    """Apply the connection's events to ``latencies``; True once the stream ended."""
    ended = False
    for event in connection.events():
        if isinstance(event, Elements):
            latencies.extend((now - int.from_bytes(element, "big")) / 1000 for element in event.elements)
            pending[0] += len(event.elements)
            if pending[0] >= TOP_UP:
                connection.request(subscriber, pending[0])
                pending[0] = 0
        elif isinstance(event, (OnComplete, OnError)):
            ended = True
    return ended


def read_blocking(port: int, name: str) -> list[float]:
    latencies: list[float] = []
    connection = Connection()
    subscriber = connection.subscribe(name, 256)
    pending = [0]
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.sendall(connection.data_to_send())
        while True:
            data = sock.recv(65536)
            now = clock()
            if not data:
                break
            connection.receive_data(data)
            ended = _take(connection, subscriber, now, latencies, pending)
            out = connection.data_to_send()
            if out:
                sock.sendall(out)
            if ended:
                break
    return latencies


async def read_trio(port: int, name: str) -> list[float]:
    latencies: list[float] = []
    connection = Connection()
    subscriber = connection.subscribe(name, 256)
    pending = [0]
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        await stream.send_all(connection.data_to_send())
        while True:
            data = await stream.receive_some(65536)
            now = clock()
            if not data:
                break
            connection.receive_data(data)
            ended = _take(connection, subscriber, now, latencies, pending)
            out = connection.data_to_send()
            if out:
                await stream.send_all(out)
            if ended:
                break
    return latencies


async def read_session(port: int, name: str) -> list[float]:
    latencies: list[float] = []
    async with rstreams.open_session(f"tcp://127.0.0.1:{port}") as session:
        async with session.subscribe(name, prefetch=256) as subscription:
            async for element in subscription:
                latencies.append((clock() - int.from_bytes(element, "big")) / 1000)
    return latencies


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("clients", nargs="*", help=f"any of {', '.join(CLIENTS)} (default: all three)")
    parser.add_argument("--n", type=int, default=30_000)
    args = parser.parse_args()
    unknown = set(args.clients) - set(CLIENTS)
    if unknown:
        parser.error(f"unknown client(s): {', '.join(sorted(unknown))}; choose from {', '.join(CLIENTS)}")
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "rstreams", "serve", "_bench_app:app", "--app-dir", str(HERE), "--tcp", f"127.0.0.1:{port}"],
        cwd=HERE.parent,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", port)).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        name = f"stamps?rate=10000&count={args.n}"
        for client in args.clients or CLIENTS:
            if client == "blocking":
                latencies = read_blocking(port, name)
            elif client == "trio":
                latencies = trio.run(read_trio, port, name)
            else:
                latencies = trio.run(read_session, port, name)
            ordered = sorted(latencies)

            def at(q: float) -> int:
                return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))])

            print(f"{client:8} n={len(ordered)} p50={at(0.5)} p99={at(0.99)} p99.9={at(0.999)} µs", flush=True)
    finally:
        server.terminate()
        server.wait()


if __name__ == "__main__":
    main()
