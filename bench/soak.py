"""A soak: mixed load with faults against one server, watching it stay flat (issue 18, item 11).

    python bench/soak.py                    # 10 minutes
    python bench/soak.py --duration 120     # 2 minutes, samples every 5 s

Starts ``rstreams serve rstreams.demo:app`` with ``--tcp``, ``--ws``,
``--emp``, ``--micromsg2`` and ``--metrics`` on free ports of 127.0.0.1, then
for ``--duration`` seconds runs, from this process, every kind of client at
once, each in a loop of short bounded rounds:

* long streams: ``range?count=200000`` over TCP and WebSocket, ``ticker``
  over micromsg2;
* request-response: ``fetch`` over TCP, and over EMP;
* the ``chat`` topic: a publisher (``publish_to_topic``) and a subscriber;
* slow subscribers: ``ticker?interval=0.001`` with prefetch 4, one element
  taken every 0.2 s;
* faults, on raw sockets: connections reset mid-stream (SO_LINGER 0) or
  closed abruptly; garbage bytes after hello; a split element left
  half-finished (``echo?source=up``, one onNextPart and then a reset);
  clients that subscribe to ``blob`` with demand and never read.

Every ``--interval`` seconds it samples the server: RSS, threads (both from
``/proc/PID/status``), open file descriptors (``/proc/PID/fd``), and the
open sessions and streams from ``/stats``. Trio's task count is not exposed
by the server, so tasks are judged by ``/stats``: once the load stops, the
open sessions and streams must drain to zero (every session task and
publication task has ended).

At the end it prints the samples and a verdict per resource: flat when the
median of the last third of the samples (after the first sixth, the
warm-up) is within the tolerance of the first third's: RSS 10 % or 8 MiB,
whichever is larger; file descriptors 10 % or 8; threads 2. It exits 1 if
any is not flat, if the server did not drain, or if it died. Nothing here is
run by the tests, except a few seconds of it in tests/test_bench.py.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import socket
import statistics
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import msgpack
import trio

import rstreams
from rstreams.protocol import MessageDecoder, OnNextPart, Subscribe, Subscribed, encode

ROOT = Path(__file__).resolve().parent.parent
MIB = 1 << 20
# The tolerances of "flat": (relative, absolute), the larger applies.
TOLERANCES: dict[str, tuple[float, float]] = {"rss": (0.10, 8 * MIB), "fds": (0.10, 8.0), "threads": (0.0, 2.0)}
# No round of a client may last longer than this: a stuck client is a finding, not a hang.
ROUND_TIMEOUT = 30.0
# How long the server gets to drain its sessions and streams after the load stops.
DRAIN_SECONDS = 10.0
HELLO = msgpack.packb([0, 0, []])


@dataclass
class Sample:
    at: float
    rss: int
    fds: int
    threads: int
    sessions: int
    streams: int


@dataclass
class Counts:
    rounds: dict[str, int] = field(default_factory=dict)
    failures: dict[str, int] = field(default_factory=dict)
    last_failure: dict[str, str] = field(default_factory=dict)


class Server:
    """``rstreams serve`` in its own process; its URLs are read from its stdout."""

    def __init__(self) -> None:
        listen = "127.0.0.1:0"
        command = [sys.executable, "-m", "rstreams", "serve", "rstreams.demo:app", "--tcp", listen, "--ws", listen]
        command += ["--emp", listen, "--micromsg2", listen, "--metrics", listen]
        self.process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        lines: queue.Queue[str] = queue.Queue()

        def read() -> None:
            assert self.process.stdout is not None
            for line in self.process.stdout:
                lines.put(line.strip())

        threading.Thread(target=read, daemon=True).start()
        self.urls: dict[str, str] = {}
        deadline = time.monotonic() + 30
        while len(self.urls) < 5:
            try:
                line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                self.close()
                raise RuntimeError("the server did not print its five listeners within 30 s") from None
            url = line.rsplit(" ", 1)[-1]
            self.urls[url.split(":", 1)[0]] = url
        self.metrics_port = int(self.urls["http"].rsplit(":", 1)[1].split("/")[0])

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None

    def close(self) -> None:
        if self.alive():
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def address(url: str) -> tuple[str, int]:
    host, port = url.split("://", 1)[1].rstrip("/").rsplit(":", 1)
    return host, int(port)


async def http_stats(port: int) -> dict[str, object]:
    with trio.fail_after(5):
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        async with stream:
            await stream.send_all(b"GET /stats HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            data = b""
            while chunk := await stream.receive_some(1 << 16):
                data += chunk
    body = data.split(b"\r\n\r\n", 1)[1]
    result: dict[str, object] = json.loads(body)
    return result


def proc_status(pid: int) -> tuple[int, int]:
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return int(fields["VmRSS"].split()[0]) * 1024, int(fields["Threads"])


async def sample(server: Server, started: float) -> Sample:
    rss, threads = proc_status(server.pid)
    fds = len(os.listdir(f"/proc/{server.pid}/fd"))
    stats = await http_stats(server.metrics_port)
    totals = stats["totals"]
    assert isinstance(totals, dict)
    return Sample(time.monotonic() - started, rss, fds, threads, int(totals["sessions"]), int(totals["streams"]))


# The clients. Each is one bounded round; `loop` repeats it until the deadline.


async def long_range(url: str) -> None:
    async with rstreams.connect(url) as peer:
        count = 0
        async with peer.subscribe("range?count=200000", prefetch=1024) as numbers:
            async for _ in numbers:
                count += 1
        assert count == 200000, count


async def ticker(url: str) -> None:
    async with rstreams.connect(url) as peer:
        async with peer.subscribe("ticker?interval=0.01", prefetch=16) as ticks:
            taken = 0
            async for _ in ticks:
                taken += 1
                if taken == 50:
                    break


async def fetches(url: str) -> None:
    async with rstreams.connect(url) as peer:
        for _ in range(50):
            assert len(await peer.fetch("range?count=10", 10)) == 10


async def chat_publish(url: str) -> None:
    async with rstreams.open_session(url, app=rstreams.Router()) as session:
        messages = [{"from": "soak", "text": f"message {i}"} for i in range(100)]
        await rstreams.publish_to_topic(session, "chat", messages, codec="json")


async def chat_subscribe(url: str) -> None:
    async with rstreams.open_session(url) as session:
        async with session.subscribe("chat?history=20", prefetch=16, codec="json") as room:
            taken = 0
            with trio.move_on_after(3):
                async for _ in room:
                    taken += 1


async def slow_subscriber(url: str) -> None:
    async with rstreams.open_session(url) as session:
        async with session.subscribe("ticker?interval=0.001", prefetch=4) as ticks:
            with trio.move_on_after(5):
                async for _ in ticks:
                    await trio.sleep(0.2)


async def raw_connection(url: str) -> trio.SocketStream:
    host, port = address(url)
    return await trio.open_tcp_stream(host, port)


def reset(stream: trio.SocketStream) -> None:
    # SO_LINGER 0: close() sends RST instead of FIN.
    stream.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))


async def killed_mid_stream(url: str, with_reset: bool) -> None:
    stream = await raw_connection(url)
    await stream.send_all(HELLO + msgpack.packb([1, "range?count=1000000000", 1, 100000]))
    received = 0
    while received < 64 * 1024:
        chunk = await stream.receive_some(1 << 16)
        if not chunk:
            break
        received += len(chunk)
    if with_reset:
        reset(stream)
    stream.socket.close()


async def garbage_after_hello(url: str) -> None:
    stream = await raw_connection(url)
    async with stream:
        await stream.send_all(HELLO + os.urandom(256))
        with trio.move_on_after(2):
            while await stream.receive_some(1 << 16):
                pass


async def half_split_element(url: str) -> None:
    stream = await raw_connection(url)
    await stream.send_all(HELLO + msgpack.packb([1, "echo?source=up", 1, 10]))
    decoder = MessageDecoder()
    with trio.move_on_after(5):
        while True:
            chunk = await stream.receive_some(1 << 16)
            if not chunk:
                break
            decoder.feed(chunk)
            subscribes = [message for message in decoder if isinstance(message, Subscribe)]
            if subscribes:
                ours = subscribes[0].subscriber
                part = OnNextPart(subscriber=ours, element=1, data=b"x" * 32768)
                await stream.send_all(encode(Subscribed(subscriber=ours, element_size=0)) + encode(part))
                await trio.sleep(0.2)
                break
    reset(stream)
    stream.socket.close()


async def never_reads(url: str) -> None:
    stream = await raw_connection(url)
    async with stream:
        await stream.send_all(HELLO + msgpack.packb([1, "blob?count=100000&size=65536", 1, 100000]))
        await trio.sleep(8)


async def loop(name: str, client: Callable[[], Awaitable[None]], deadline: float, counts: Counts) -> None:
    while trio.current_time() < deadline:
        try:
            with trio.fail_after(ROUND_TIMEOUT):
                await client()
        except Exception as error:  # a failed round is counted and reported, and the loop goes on
            counts.failures[name] = counts.failures.get(name, 0) + 1
            counts.last_failure[name] = f"{type(error).__name__}: {error}"[:160]
            await trio.sleep(0.5)
        counts.rounds[name] = counts.rounds.get(name, 0) + 1
        await trio.sleep(0.05)


async def run(server: Server, duration: float, interval: float) -> tuple[list[Sample], Sample | None, Counts]:
    urls = server.urls
    tcp, ws, emp, mm2 = urls["tcp"], urls["ws"], urls["emp"], urls["mm2"]
    clients: dict[str, Callable[[], Awaitable[None]]] = {
        "range/tcp": lambda: long_range(tcp),
        "range/ws": lambda: long_range(ws),
        "ticker/mm2": lambda: ticker(mm2),
        "ticker/tcp": lambda: ticker(tcp),
        "fetch/tcp": lambda: fetches(tcp),
        "fetch/emp": lambda: fetches(emp),
        "chat/publish": lambda: chat_publish(tcp),
        "chat/subscribe": lambda: chat_subscribe(ws),
        "slow/tcp": lambda: slow_subscriber(tcp),
        "slow/ws": lambda: slow_subscriber(ws),
        "fault/reset": lambda: killed_mid_stream(tcp, True),
        "fault/close": lambda: killed_mid_stream(tcp, False),
        "fault/garbage": lambda: garbage_after_hello(tcp),
        "fault/half-split": lambda: half_split_element(tcp),
        "fault/never-reads-1": lambda: never_reads(tcp),
        "fault/never-reads-2": lambda: never_reads(tcp),
    }
    counts = Counts()
    samples: list[Sample] = []
    started = time.monotonic()
    deadline = trio.current_time() + duration
    async with trio.open_nursery() as nursery:
        for name, client in clients.items():
            nursery.start_soon(loop, name, client, deadline, counts)
        while trio.current_time() < deadline and server.alive():
            await trio.sleep(min(interval, max(0.0, deadline - trio.current_time())))
            if server.alive():
                samples.append(await sample(server, started))
        nursery.cancel_scope.cancel()
    drained: Sample | None = None
    with trio.move_on_after(DRAIN_SECONDS):
        while server.alive():
            await trio.sleep(0.5)
            drained = await sample(server, started)
            if drained.sessions == 0 and drained.streams == 0:
                break
    return samples, drained, counts


def median(values: list[float]) -> float:
    return statistics.median(values) if values else 0.0


def verdicts(samples: list[Sample]) -> dict[str, tuple[float, float, float, bool]]:
    measured = samples[len(samples) // 6 :]
    third = max(1, len(measured) // 3)
    result = {}
    for name, (relative, absolute) in TOLERANCES.items():
        first = median([float(getattr(s, name)) for s in measured[:third]])
        last = median([float(getattr(s, name)) for s in measured[-third:]])
        tolerance = max(relative * first, absolute)
        result[name] = (first, last, tolerance, last - first <= tolerance)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration", type=float, default=600.0, help="seconds of load (default 600)")
    parser.add_argument("--interval", type=float, default=None, help="seconds between samples (default 5, less for short runs)")
    args = parser.parse_args()
    interval = args.interval if args.interval is not None else min(5.0, max(0.5, args.duration / 10))
    server = Server()
    try:
        samples, drained, counts = trio.run(run, server, args.duration, interval)
        alive = server.alive()
    finally:
        server.close()

    print(f"{'t (s)':>7} {'RSS MiB':>8} {'fds':>5} {'threads':>7} {'sessions':>8} {'streams':>7}")
    for s in samples:
        print(f"{s.at:7.1f} {s.rss / MIB:8.1f} {s.fds:5d} {s.threads:7d} {s.sessions:8d} {s.streams:7d}")
    if drained is not None:
        print(f"drained {drained.at:.1f} s: RSS {drained.rss / MIB:.1f} MiB, {drained.fds} fds, {drained.threads} threads,"
              f" {drained.sessions} sessions, {drained.streams} streams")
    print("rounds: " + ", ".join(f"{name} {n}" for name, n in counts.rounds.items()))
    for name, n in counts.failures.items():
        print(f"failed rounds of {name}: {n} (last: {counts.last_failure[name]})")

    flat = True
    for name, (first, last, tolerance, ok) in verdicts(samples).items():
        unit, scale = ("MiB", MIB) if name == "rss" else ("", 1)
        print(f"{name}: first third {first / scale:.1f}{unit}, last third {last / scale:.1f}{unit},"
              f" tolerance {tolerance / scale:.1f}{unit}: {'flat' if ok else 'NOT FLAT'}")
        flat = flat and ok
    emptied = drained is not None and drained.sessions == 0 and drained.streams == 0
    print(f"tasks (sessions and streams after the load): {'drained to 0' if emptied else 'NOT DRAINED'}")
    if not alive:
        print("the server DIED")
    if len(samples) < 3:
        print("too few samples for a verdict")
    return 0 if flat and emptied and alive and len(samples) >= 3 else 1


if __name__ == "__main__":
    sys.exit(main())
