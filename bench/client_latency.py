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
import socket
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

import trio  # noqa: E402

import rstreams  # noqa: E402
from _proc import percentiles, serve_checkout, wait_listening  # noqa: E402
from rstreams.protocol import Connection, Elements, OnComplete, OnError  # noqa: E402

CLIENTS = ("blocking", "trio", "session")
TOP_UP = 64
clock = time.perf_counter_ns


class _RawReader:
    """The sans-I/O side of the two clients without a session: one
    subscription, demand asked again every ``TOP_UP`` elements, each
    element's latency taken at the read that brought it."""

    def __init__(self, name: str) -> None:
        self.connection = Connection()
        self.subscriber = self.connection.subscribe(name, 256)
        self.latencies: list[float] = []
        self._pending = 0

    def opening(self) -> bytes | bytearray:
        return self.connection.data_to_send()

    def take(self, data: bytes, now: int) -> tuple[bytes | bytearray, bool]:
        """Apply one read made at ``now``: what to write back, and whether the stream ended."""
        connection = self.connection
        connection.receive_data(data)
        ended = False
        for event in connection.events():
            if isinstance(event, Elements):
                self.latencies.extend((now - int.from_bytes(element, "big")) / 1000 for element in event.elements)
                self._pending += len(event.elements)
                if self._pending >= TOP_UP:
                    connection.request(self.subscriber, self._pending)
                    self._pending = 0
            elif isinstance(event, (OnComplete, OnError)):
                ended = True
        return connection.data_to_send(), ended


def read_blocking(port: int, name: str) -> list[float]:
    reader = _RawReader(name)
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.sendall(reader.opening())
        while data := sock.recv(65536):
            out, ended = reader.take(data, clock())
            if out:
                sock.sendall(out)
            if ended:
                break
    return reader.latencies


async def read_trio(port: int, name: str) -> list[float]:
    reader = _RawReader(name)
    async with await trio.open_tcp_stream("127.0.0.1", port) as stream:
        await stream.send_all(reader.opening())
        while data := await stream.receive_some(65536):
            out, ended = reader.take(data, clock())
            if out:
                await stream.send_all(out)
            if ended:
                break
    return reader.latencies


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
    server, port = serve_checkout(str(HERE.parent), "_bench_app:app", "--app-dir", str(HERE))
    try:
        wait_listening(port)
        name = f"stamps?rate=10000&count={args.n}"
        for client in args.clients or CLIENTS:
            if client == "blocking":
                latencies = read_blocking(port, name)
            elif client == "trio":
                latencies = trio.run(read_trio, port, name)
            else:
                latencies = trio.run(read_session, port, name)
            figures = percentiles(latencies)
            print(
                f"{client:8} n={figures['n']} p50={figures['p50']:.0f} p99={figures['p99']:.0f}"
                f" p99.9={figures['p999']:.0f} µs",
                flush=True,
            )
    finally:
        server.terminate()
        server.wait()


if __name__ == "__main__":
    main()
