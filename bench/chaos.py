"""Connections that drop on purpose: every scheme, cut at random offsets, through a proxy.

    python bench/chaos.py                       # 8 rounds of the six schemes
    python bench/chaos.py --rounds 30 --seed 7  # longer; a seed replays a run
    python bench/chaos.py --pub                 # rstreams pub instead of sub

Starts ``rstreams serve rstreams.demo:app`` with every listener (tcp, ws,
emp, relink, mm2, epoxy) on free ports of 127.0.0.1. Each round, for each
scheme, ``rstreams sub`` reads a finite publisher (``range``, ``blob`` of
small or of split elements) through a proxy that cuts the first connection
after a random number of bytes, in a random direction, by FIN or by RST
(``SO_LINGER`` 0), and carries any later connection whole. Meanwhile a
direct client streams ``ticker`` over TCP for the whole run.

What must hold, or the run exits 1:

* every ``sub`` ends by itself (its ``--timeout`` is never what ends it),
  without a traceback, with exit status 0 (and then every element, right),
  1, 3 or 4, each with its one-line message;
* over Relink, once elements flowed the link resumes on the next
  connection: the stream completes, exactly once and in order (a cut in
  the first handshake may still fail the command: no link yet);
* the server lives, logs no traceback and no error, keeps its file
  descriptors flat, and the direct client is never disturbed.

With ``--pub``, each round, for each scheme that can publish (tcp, ws, mm2,
epoxy), ``rstreams pub URL chat`` sends ``PUB_LINES`` lines through such a
proxy into the demo's ``chat`` topic, which a direct subscriber reads live.
Besides the rules above for the command and the server:

* the lines the topic took are the first K of the input, in order, with
  none twice;
* K is at most the count ``pub`` says it sent, and at least the count it
  says the topic confirmed (its message is where a user starts again: a
  confirmed line missing would be lost);
* exit status 0 means every line is in the topic. Epoxy is the exception
  its docs state: its events have no answer, so 0 there means every line
  was written, and a cut may still drop the last of them.

Nothing here is run by the tests, except one short round of each mode in
tests/test_bench.py.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import signal
import socket
import struct
import subprocess
import sys
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import trio

from _proc import free_port, wait_listening

ROOT = Path(__file__).resolve().parent.parent
SCHEMES = {
    "tcp": "tcp://127.0.0.1:{port}",
    "ws": "ws://127.0.0.1:{port}/",
    "emp": "emp://127.0.0.1:{port}",
    "relink": "relink://127.0.0.1:{port}/rstreams",
    "mm2": "mm2://127.0.0.1:{port}",
    "epoxy": "epoxy://127.0.0.1:{port}",
}
SERVE_OPTION = {"tcp": "--tcp", "ws": "--ws", "emp": "--emp", "relink": "--relink", "mm2": "--micromsg2", "epoxy": "--epoxy"}
# Finite publishers, and how to check what a complete run printed (--format hex).
PUBLISHERS = {
    "range?count=5000": [b"%016x" % n for n in range(5000)],
    "blob?count=300&size=3000": [bytes((i + j) % 256 for j in range(3000)).hex().encode() for i in range(300)],
    "blob?count=3&size=300000": [bytes((i + j) % 256 for j in range(300000)).hex().encode() for i in range(3)],
}
OFFSETS = [0, 1, 2, 5, 9, 17, 40, 100, 300, 1000, 5000, 20000, 100000, 400000]
ALLOWED = {0, 1, 3, 4}
SUB_TIMEOUT = 30.0
# --pub: the schemes that can publish into a topic, and how many lines a run sends.
PUB_SCHEMES = ("tcp", "ws", "mm2", "epoxy")
PUB_LINES = 3000
# A run's lines are still arriving at the watcher until it saw none for this long.
PUB_SETTLE = 1.0


@dataclass
class Outcome:
    scheme: str
    publisher: str
    cut: str
    status: int | None
    printed: int
    seconds: float
    message: str
    problem: str | None


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


class Cut(Exception):
    pass


async def _pump(source: trio.SocketStream, sink: trio.SocketStream, left: list[int] | None) -> None:
    while True:
        try:
            data = await source.receive_some(65536)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            raise Cut from None
        if not data:
            raise Cut
        if left is not None and len(data) >= left[0]:
            try:
                if left[0]:
                    await sink.send_all(data[: left[0]])
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass
            raise Cut
        if left is not None:
            left[0] -= len(data)
        try:
            await sink.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            raise Cut from None


class CuttingProxy:
    """Cuts its first connection as told; carries later ones whole (a reconnect)."""

    def __init__(self, target: int, direction: str, offset: int, how: str) -> None:
        self.target, self.direction, self.offset, self.how = target, direction, offset, how
        self.connections = 0

    async def relay(self, client: trio.SocketStream) -> None:
        self.connections += 1
        first = self.connections == 1
        try:
            upstream = await trio.open_tcp_stream("127.0.0.1", self.target)
        except OSError:
            await trio.aclose_forcefully(client)
            return
        left = [self.offset] if first else None
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_pump, client, upstream, left if self.direction == "up" else None)
                nursery.start_soon(_pump, upstream, client, left if self.direction == "down" else None)
        except BaseException as exc:  # the Cut, in the nursery's group; cancellation goes on
            if not isinstance(exc, (Cut, BaseExceptionGroup)):
                raise
        for stream in (client, upstream):
            if first and self.how == "rst":
                try:
                    stream.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                except OSError:
                    pass
            await trio.aclose_forcefully(stream)


def command_problem(status: int, message: str) -> str | None:
    """What is wrong with how a command ended, whatever it did: a traceback,
    an exit status other than those allowed, more than its one line."""
    if "Traceback" in message:
        return "traceback"
    if status not in ALLOWED:
        return f"exit status {status}"
    if message.count("\n"):
        return "more than one line on stderr"
    return None


async def one_run(scheme: str, port: int, publisher: str, rng: random.Random) -> Outcome:
    direction, offset, how = rng.choice(["up", "down"]), rng.choice(OFFSETS), rng.choice(["fin", "rst"])
    proxy = CuttingProxy(port, direction, offset, how)
    cut = f"{direction} after {offset} bytes, {how}"
    async with trio.open_nursery() as nursery:
        [listener] = await nursery.start(partial(trio.serve_tcp, proxy.relay, 0, host="127.0.0.1"))
        url = SCHEMES[scheme].format(port=listener.socket.getsockname()[1])
        began = time.monotonic()
        result = await trio.run_process(
            [sys.executable, "-m", "rstreams", "sub", url, publisher, "--format", "hex", "--timeout", str(SUB_TIMEOUT)],
            cwd=ROOT,
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
        nursery.cancel_scope.cancel()
    seconds = time.monotonic() - began
    lines = result.stdout.splitlines()
    message = result.stderr.decode(errors="replace").strip()
    problem = command_problem(result.returncode, message)
    if problem is None:
        if result.returncode == 0 and lines != PUBLISHERS[publisher]:
            problem = "exit 0 without every element, right"
        elif result.returncode != 0 and lines != PUBLISHERS[publisher][: len(lines)]:
            problem = "elements wrong before the failure"
        elif scheme == "relink" and lines and result.returncode != 0:
            problem = "the link was up and did not resume"
    return Outcome(scheme, publisher, cut, result.returncode, len(lines), seconds, message, problem)


class TopicWatcher:
    """A direct subscriber to ``chat`` (not through a proxy), reading every
    element live with the ``block`` policy, so that nothing published
    while it reads is skipped; the elements, in the order they came."""

    def __init__(self) -> None:
        self.elements: list[bytes] = []
        self.last_arrival = time.monotonic()
        self.error: BaseException | None = None

    async def run(self, port: int, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        import rstreams

        try:
            async with rstreams.open_session(f"tcp://127.0.0.1:{port}") as session:
                async with session.subscribe("chat?policy=block") as subscription:
                    task_status.started()
                    async for element in subscription:
                        self.elements.append(element)
                        self.last_arrival = time.monotonic()
        except Exception as exc:  # judged at the end: the watcher must outlive every run
            self.error = exc

    async def settle(self) -> None:
        while time.monotonic() - self.last_arrival < PUB_SETTLE:
            await trio.sleep(0.1)


_SENT = re.compile(rb"(\d+) lines? sent to ")
_CONFIRMED = re.compile(rb"sent to \S+ before it, (none|all|the first (\d+)) of them confirmed")
_PUBLISHED = re.compile(rb"published (\d+) lines? into ")


async def one_pub_run(scheme: str, port: int, run: int, watcher: TopicWatcher, rng: random.Random) -> Outcome:
    direction, offset, how = rng.choice(["up", "down"]), rng.choice(OFFSETS), rng.choice(["fin", "rst"])
    proxy = CuttingProxy(port, direction, offset, how)
    cut = f"{direction} after {offset} bytes, {how}"
    lines = [b"chaos %d %s line %06d" % (run, scheme.encode(), i) for i in range(PUB_LINES)]
    tag = b"chaos %d %s " % (run, scheme.encode())
    async with trio.open_nursery() as nursery:
        [listener] = await nursery.start(partial(trio.serve_tcp, proxy.relay, 0, host="127.0.0.1"))
        url = SCHEMES[scheme].format(port=listener.socket.getsockname()[1])
        began = time.monotonic()
        with trio.move_on_after(SUB_TIMEOUT) as timer:
            result = await trio.run_process(
                [sys.executable, "-m", "rstreams", "pub", url, "chat"],
                cwd=ROOT,
                stdin=b"\n".join(lines) + b"\n",
                capture_stdout=True,
                capture_stderr=True,
                check=False,
            )
        nursery.cancel_scope.cancel()
    seconds = time.monotonic() - began
    if timer.cancelled_caught:
        return Outcome(scheme, "pub chat", cut, None, 0, seconds, "", f"still running after {SUB_TIMEOUT:.0f} s")
    await watcher.settle()
    taken = [element for element in watcher.elements if element.startswith(tag)]
    message = result.stderr.decode(errors="replace").strip()
    found = _SENT.search(result.stderr) or _PUBLISHED.search(result.stderr)
    claimed = int(found.group(1)) if found else None
    said = _CONFIRMED.search(result.stderr)
    confirmed = None if said is None else {b"none": 0, b"all": claimed}.get(said.group(1), int(said.group(2) or 0))
    problem = command_problem(result.returncode, message)
    if problem is None:
        if taken != lines[: len(taken)]:
            problem = "the topic took lines out of order, twice, or past a gap"
        elif result.returncode == 0 and len(taken) != PUB_LINES and scheme != "epoxy":
            problem = f"exit 0 with {len(taken)} of {PUB_LINES} lines in the topic"
        elif claimed is not None and len(taken) > claimed:
            problem = f"says {claimed} lines sent, the topic took {len(taken)}"
        elif claimed is None and taken:
            problem = "no count of the lines sent, and the topic took some"
        elif confirmed is not None and confirmed > len(taken):
            problem = f"says {confirmed} lines confirmed, the topic took {len(taken)}"
    return Outcome(scheme, "pub chat", cut, result.returncode, len(taken), seconds, message, problem)


async def chaos(args: argparse.Namespace, ports: dict[str, int], server: subprocess.Popen[bytes]) -> list[Outcome]:
    rng = random.Random(args.seed)
    outcomes: list[Outcome] = []
    async with trio.open_nursery() as nursery:
        watcher = TopicWatcher()
        if args.pub:
            await nursery.start(watcher.run, ports["tcp"])
        await _rounds(args, ports, server, rng, watcher, outcomes)
        nursery.cancel_scope.cancel()
    if watcher.error is not None:
        raise SystemExit(f"the topic's watcher stopped: {watcher.error!r}")
    return outcomes


async def _rounds(
    args: argparse.Namespace,
    ports: dict[str, int],
    server: subprocess.Popen[bytes],
    rng: random.Random,
    watcher: TopicWatcher,
    outcomes: list[Outcome],
) -> None:
    for round_ in range(args.rounds):
        for scheme in args.schemes:
            if args.pub:
                outcome = await one_pub_run(scheme, ports[scheme], round_ + 1, watcher, rng)
            else:
                outcome = await one_run(scheme, ports[scheme], rng.choice(sorted(PUBLISHERS)), rng)
            outcomes.append(outcome)
            flag = "  ok " if outcome.problem is None else " FAIL"
            print(
                f"{flag} round {round_ + 1} {scheme:<6} {outcome.publisher:<26} cut {outcome.cut:<28}"
                f" exit {outcome.status} after {outcome.printed} in {outcome.seconds:.1f} s"
                + (f": {outcome.message}" if outcome.message else "")
                + (f"  <- {outcome.problem}" if outcome.problem else ""),
                flush=True,
            )
            if server.poll() is not None:
                raise SystemExit(f"the server died ({server.returncode})")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--schemes", default=None, help="comma-separated, of " + ", ".join(SCHEMES) + " (default: all; with --pub, those that publish)")
    parser.add_argument("--pub", action="store_true", help="cut rstreams pub into the chat topic instead of sub")
    parser.add_argument("--log", default=None, help="the server's log (default: a temporary file)")
    args = parser.parse_args()
    if args.schemes is None:
        args.schemes = ",".join(PUB_SCHEMES if args.pub else SCHEMES)
    args.schemes = [scheme for scheme in args.schemes.split(",") if scheme]
    unknown = set(args.schemes) - set(PUB_SCHEMES if args.pub else SCHEMES)
    if unknown:
        parser.error(f"unknown schemes{' for --pub' if args.pub else ''}: {', '.join(sorted(unknown))}")
    ports = {scheme: free_port() for scheme in SCHEMES}
    log_path = Path(args.log) if args.log else Path(os.environ.get("TMPDIR", "/tmp")) / f"rstreams-chaos-{os.getpid()}.log"
    command = [sys.executable, "-m", "rstreams", "serve", "rstreams.demo:app", "--log-level", "info"]
    for scheme, port in ports.items():
        command += [SERVE_OPTION[scheme], f"127.0.0.1:{port}"]
    with open(log_path, "wb") as log:
        server = subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    try:
        for port in ports.values():
            wait_listening(port)
        steady = subprocess.Popen(
            [sys.executable, "-m", "rstreams", "sub", f"tcp://127.0.0.1:{ports['tcp']}", "ticker?interval=0.01", "--format", "raw"],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        fds_before = open_fds(server.pid)
        outcomes = trio.run(chaos, args, ports, server)
        time.sleep(1.0)  # the last runs' sessions close
        fds_after = open_fds(server.pid)
        steady_alive = steady.poll() is None
        steady.terminate()
        steady_err = steady.communicate(timeout=10)[1].decode(errors="replace").strip()
    finally:
        server.send_signal(signal.SIGINT)
        try:
            server.wait(20)
        except subprocess.TimeoutExpired:
            server.kill()
    text = log_path.read_text(errors="replace")
    failures = [outcome for outcome in outcomes if outcome.problem]
    problems = [f"{len(failures)} of {len(outcomes)} runs failed"] if failures else []
    if "Traceback" in text:
        problems.append(f"the server logged {text.count('Traceback')} tracebacks ({log_path})")
    errors = [line for line in text.splitlines() if " ERROR " in line or " CRITICAL " in line]
    if errors:
        problems.append(f"the server logged {len(errors)} errors, the first: {errors[0]}")
    if fds_after > fds_before + 4:
        problems.append(f"the server's file descriptors grew from {fds_before} to {fds_after}")
    if not steady_alive:
        problems.append(f"the direct client stopped: {steady_err}")
    statuses = sorted({outcome.status for outcome in outcomes if outcome.status is not None})
    print(
        f"\n{len(outcomes)} runs, exit statuses {statuses}; server file descriptors {fds_before} -> {fds_after};"
        f" direct client {'streaming' if steady_alive else 'STOPPED'}; log {log_path}"
    )
    for problem in problems:
        print("PROBLEM:", problem)
    print("verdict:", "contained" if not problems else "NOT contained")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
