"""Every performance case of issues 6 and 19, side by side, in one run.

    python bench/run.py               # 5 quiet rounds, then 5 with two busy loops beside
    python bench/run.py --quick       # 2 rounds, smaller counts, no loaded phase
    python bench/run.py --rounds 9 --load 2 --out /tmp/perf.md

The systems answer the same requests on loopback TCP, each server in its
own process, each client in its own process:

* **rstreams**: ``rstreams serve`` with the demo's publishers
  (``bench/_bench_app.py``), read by the rstreams client;
* **pyzmq** (libzmq): PUSH/PULL for streams, REQ/REP and DEALER/ROUTER for
  round trips, default socket options (``bench/_zmq.py``);
* **NATS**: Debian's ``nats-server`` with its defaults, a nats-py app
  publishing and answering, read by a nats-py client (``bench/_nats.py``);
  skipped, with the reason in the report, when ``nats-server`` is missing;
* **rsocket-py** (asyncio), from PyPI, with a minimal hand-written publisher
  (``bench/_rsocket.py``);
* **raw ceiling**: a minimal trio server writing the same wire messages as
  the demo's publishers, read by a plain socket and ``msgpack.Unpacker``
  (``bench/_raw.py``).

A further column, **probe**, is the raw consumer reading from the rstreams
server: what a client that costs nothing sees of the rstreams server.

Each round runs every case once on every system, back to back; ratios are
taken pair by pair within a round, then summarised (median, min-max), so
load from other processes on the machine cancels out as far as it can.
After the quiet rounds and the memory cases, ``--load N`` (2 by default, 0
with ``--quick``) starts N busy loops (``python -c 'while 1: pass'``, not
niced) and runs the issue-19 cases again (rstreams, pyzmq, NATS) for
``--load-rounds`` rounds. The results go to ``docs/PERFORMANCE.md`` (the
tables) and two plots and ``results.json`` beside it.

rsocket-py, pyzmq, nats-py and matplotlib live in the benchmark's own
environment, ``bench/.venv``: if this interpreter lacks them, the runner
creates that environment (``pip install -e '.[bench]'``, pinned in
``pyproject.toml``) and restarts itself there. ``nats-server`` is Debian's
package (``apt-get install nats-server``). Nothing here is run by the test
suite (a smoke test runs the pieces once on tiny inputs, with no timing
assertion).
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from _proc import free_port, percentiles

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
BENCH_VENV = HERE / ".venv"
#: The last run's cases and results, for --report-again (inside the
#: git-ignored environment: a local artefact, never committed).
LAST_RUN = BENCH_VENV / "last-run.pickle"
#: The rstreams / pyzmq goals of issue 19 hold when the median ratio holds in
#: a run of at least this many interleaved rounds.
MIN_ROUNDS_FOR_VERDICT = 5
#: The latency case's fixed rate, and how close to it a stream must stay
#: (elements over the span from the first stamp to the last arrival).
LATENCY_RATE = 10_000
RATE_HELD = 0.98

#: The WebSocket goal: rstreams over ws:// against trio-websocket sending one
#: WebSocket message per element.
WS_GOAL_RATIO = 10

SYSTEMS = ("rstreams", "pyzmq", "nats", "probe", "rsocket", "raw", "rstreams_ws", "tws")
LABELS = {
    "rstreams": "rstreams",
    "pyzmq": "pyzmq",
    "nats": "NATS",
    "probe": "rstreams server, raw consumer",
    "rsocket": "rsocket-py",
    "raw": "raw ceiling",
    "rstreams_ws": "rstreams over ws://",
    "tws": "trio-websocket, one message per element",
}
#: The systems of the loaded phase and of the latency case.
ISSUE19_SYSTEMS = ("rstreams", "pyzmq", "nats")


def websocket_available() -> bool:
    """Whether this rstreams serves WebSocket (the transport of issue-ws)."""
    import rstreams

    return hasattr(rstreams, "serve_websocket")


# ---- environment ----------------------------------------------------------------


BENCH_MODULES = ("rsocket", "matplotlib", "zmq", "nats")


def ensure_environment() -> None:
    """Re-run under bench/.venv (creating it) unless the bench extra imports."""
    missing = []
    for module in BENCH_MODULES:
        try:
            __import__(module)
        except ImportError:
            missing.append(module)
    if not missing:
        return
    if os.environ.get("RSTREAMS_BENCH_REEXEC"):
        raise SystemExit(f"bench/.venv lacks {', '.join(missing)} even after installing the bench extra")
    python = BENCH_VENV / "bin" / "python"
    if not python.exists():
        print("creating bench/.venv (pip install -e '.[bench]') ...", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(BENCH_VENV)], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", "-e", f"{ROOT}[bench]"], check=True)
    os.environ["RSTREAMS_BENCH_REEXEC"] = "1"
    os.execv(str(python), [str(python), *sys.argv])


def nats_server_binary() -> str | None:
    """Debian's nats-server (installed in /usr/sbin, not always on PATH)."""
    return shutil.which("nats-server") or shutil.which("nats-server", path="/usr/sbin:/usr/local/sbin")


def unavailable_systems() -> dict[str, str]:
    """Comparison systems this machine cannot run, with the reason."""
    skipped = {}
    try:
        import zmq  # noqa: F401
    except ImportError:
        skipped["pyzmq"] = "pyzmq is not installed in this environment (pip install -e '.[bench]')"
    try:
        import nats  # noqa: F401
    except ImportError:
        skipped["nats"] = "nats-py is not installed in this environment (pip install -e '.[bench]')"
    else:
        if nats_server_binary() is None:
            skipped["nats"] = "no nats-server binary (Debian: apt-get install nats-server)"
    return skipped


# ---- processes --------------------------------------------------------------------


class Server:
    def __init__(
        self, argv: list[str], parse_port: Any, listeners: int = 1, companions: list[subprocess.Popen[bytes]] = []
    ) -> None:
        # Processes this one depends on (the NATS broker), closed after it.
        self.companions = list(companions)
        self.process = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, cwd=ROOT)
        assert self.process.stdout is not None
        # One line per listener, in the order they were asked for.
        self.ports = [parse_port(self.process.stdout.readline()) for _ in range(listeners)]
        self.port = self.ports[0]

    @property
    def pid(self) -> int:
        return self.process.pid

    def close(self) -> None:
        for process in [self.process, *self.companions]:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()


def start_nats(binary: str) -> Server:
    """nats-server with its defaults on a free loopback port, and the
    publishing app (``_nats.py``) connected to it; the port is the broker's."""
    port = free_port()
    broker = subprocess.Popen(
        [binary, "-a", "127.0.0.1", "-p", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    deadline = time.monotonic() + 10
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            if broker.poll() is not None or time.monotonic() > deadline:
                broker.kill()
                raise RuntimeError(f"nats-server did not start on port {port}")
            time.sleep(0.05)

    def ready(line: str) -> int:
        if line.strip() != "ready":
            raise RuntimeError(f"the NATS app did not start: {line!r}")
        return port

    return Server([sys.executable, str(HERE / "_nats.py"), str(port)], ready, companions=[broker])


class BusyLoops:
    """``count`` processes spinning ``while 1: pass`` (not niced), standing
    in for the other work on a busy machine; stopped by their own pids."""

    def __init__(self, count: int) -> None:
        self.processes = [subprocess.Popen([sys.executable, "-c", "while 1: pass"]) for _ in range(count)]

    def close(self) -> None:
        for process in self.processes:
            process.kill()
            process.wait(timeout=10)


class Worker:
    def __init__(self, kind: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, str(HERE / "_worker.py"), kind],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=ROOT,
        )

    def run(self, **command: Any) -> dict[str, Any]:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(json.dumps(command) + "\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"worker died running {command}")
        result: dict[str, Any] = json.loads(line)
        if "error" in result:
            print(result.get("traceback", ""), file=sys.stderr)
            raise RuntimeError(f"{command}: {result['error']}")
        return result

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait(timeout=30)


def start_servers(websocket: bool, skipped: dict[str, str]) -> dict[str, Server]:
    servers = {}
    argv = [sys.executable, "-m", "rstreams", "serve", "_bench_app:app", "--app-dir", str(HERE), "--tcp", "127.0.0.1:0"]
    if websocket:
        argv += ["--ws", "127.0.0.1:0"]
    # "rstreams: serving APP on tcp://HOST:PORT", then "... on ws://HOST:PORT/".
    servers["rstreams"] = Server(argv, lambda line: int(line.strip().rstrip("/").rsplit(":", 1)[1]), 2 if websocket else 1)
    if websocket:
        servers["tws"] = Server([sys.executable, str(HERE / "_ws.py"), "0"], int)
    servers["raw"] = Server([sys.executable, str(HERE / "_raw.py"), "0"], int)
    servers["rsocket"] = Server([sys.executable, str(HERE / "_rsocket.py"), "0"], int)
    if "pyzmq" not in skipped:
        # Three listeners: streams (REP), REQ/REP, DEALER/ROUTER.
        servers["pyzmq"] = Server([sys.executable, str(HERE / "_zmq.py"), "0"], int, 3)
    if "nats" not in skipped:
        binary = nats_server_binary()
        assert binary is not None
        servers["nats"] = start_nats(binary)
    return servers


# ---- cases ----------------------------------------------------------------------


@dataclass
class Case:
    key: str
    title: str
    unit: str  # "el/s", "MB/s" or "rt/s"
    # system -> the command its worker runs (port filled in later)
    commands: dict[str, dict[str, Any]]
    goal: float | None = None
    goal_rsocket: float | None = None
    goal_raw: float | None = None
    #: Issue 19: the row's name in the table against pyzmq, and its goal.
    issue19: str | None = None
    goal_pyzmq: float | None = None
    headline: bool = True
    element_size: int = 0
    results: dict[str, list[float]] = field(default_factory=dict)

    def value(self, result: dict[str, Any]) -> float:
        if self.unit == "MB/s":
            return float(result["bytes"]) / 1e6 / float(result["seconds"])
        return float(result["elements"]) / float(result["seconds"])


def throughput_case(
    key: str, title: str, unit: str, name: str, counts: dict[str, int], prefetch: int | None, size: int,
    mode: str = "batches", **goals: Any,
) -> Case:
    """One stream read by each system in ``counts``: rstreams with
    ``mode`` (``batches`` or ``each``) and ``prefetch`` (None: the default);
    rsocket-py with the same demand window; pyzmq and NATS one message per
    element (pyzmq with ``copy=False`` above 64 KiB, and rstreams too: its
    ``subscribe(..., copy=False)`` for elements split into parts)."""
    commands: dict[str, dict[str, Any]] = {}
    for system, count in counts.items():
        if system in ("rsocket", "pyzmq", "nats") and name.startswith("range"):
            # No packed elements there: their 8-byte stream is the pair.
            target = f"blob?count={count}&size=8"
        else:
            target = name.format(count=count)
        command: dict[str, Any] = {"case": "stream", "name": target}
        if system == "pyzmq":
            command["copy"] = size <= 65536
        elif system in ("rstreams", "rstreams_ws"):
            if prefetch is not None:
                command["prefetch"] = prefetch
            if mode != "batches":
                command["mode"] = mode
            if size > 65536:
                command["copy"] = False
        elif system == "rsocket":
            command["prefetch"] = prefetch or 32
        commands[system] = command
    return Case(key, title, unit, commands, element_size=size, **goals)


def make_cases(scale: float, websocket: bool = False) -> list[Case]:
    def n(count: int) -> int:
        return max(1, int(count * scale))

    cases = [
        # Issue 19: the user's code as most write it, then with a wider window.
        throughput_case(
            "each_default", "8-byte elements, `async for`, default prefetch (32)", "el/s", "blob?count={count}&size=8",
            {"rstreams": n(600_000), "pyzmq": n(1_000_000), "nats": n(200_000)},
            None, 8, mode="each", headline=False, issue19="8 B, `async for`, default settings", goal_pyzmq=1.0,
        ),
        throughput_case(
            "onnext8_each", "8-byte elements, `async for`, prefetch 4096", "el/s", "blob?count={count}&size=8",
            {"rstreams": n(1_000_000), "pyzmq": n(1_000_000), "nats": n(200_000)},
            4096, 8, mode="each", headline=False, issue19="8 B, `async for`, prefetch 4096", goal_pyzmq=1.5,
        ),
        throughput_case(
            "onnext8", "8-byte elements, one onNext each (elementSize 0)", "el/s", "blob?count={count}&size=8",
            {"rstreams": n(1_000_000), "pyzmq": n(1_000_000), "nats": n(200_000), "probe": n(2_000_000), "rsocket": n(20_000), "raw": n(2_000_000)},
            65536, 8, goal=1_300_000, goal_rsocket=30, goal_raw=0.3,
            issue19="8 B, `batches()` (prefetch 65536)", goal_pyzmq=3.0,
        ),
        throughput_case(
            "packed8", "8-byte elements, packed (elementSize 8)", "el/s", "range?count={count}",
            {"rstreams": n(10_000_000), "probe": n(100_000_000), "rsocket": n(20_000), "raw": n(100_000_000)},
            1 << 20, 8, goal=7_500_000, goal_rsocket=180, goal_raw=0.5,
        ),
        throughput_case(
            "kib", "1 KiB elements", "MB/s", "blob?count={count}&size=1024",
            {"rstreams": n(300_000), "pyzmq": n(300_000), "nats": n(100_000), "probe": n(500_000), "rsocket": n(20_000), "raw": n(500_000)},
            4096, 1024, goal=650, goal_rsocket=15, goal_raw=0.3,
            issue19="1 KiB, `batches()` (prefetch 4096)", goal_pyzmq=2.0,
        ),
        throughput_case(
            "mib", "1 MiB elements (split in 256 KiB parts)", "MB/s", "blob?count={count}&size=1048576",
            {"rstreams": n(600), "pyzmq": n(800), "nats": n(300), "probe": n(800), "rsocket": n(400), "raw": n(800)},
            16, 1 << 20, goal=1800, goal_rsocket=1.1, goal_raw=0.7,
            issue19="1 MiB, `batches()` (prefetch 16; pyzmq `copy=False`)", goal_pyzmq=1.0,
        ),
    ]
    # More element sizes for the throughput curve.
    for size, counts in (
        (64, {"rstreams": n(600_000), "rsocket": n(20_000), "raw": n(1_500_000)}),
        (16384, {"rstreams": n(60_000), "rsocket": n(10_000), "raw": n(100_000)}),
        (262144, {"rstreams": n(3000), "rsocket": n(1500), "raw": n(4000)}),
    ):
        cases.append(
            throughput_case(
                f"size{size}", f"{size}-byte elements", "MB/s", f"blob?count={{count}}&size={size}", counts,
                4096 if size < 65536 else 16, size, headline=False,
            )
        )
    def round_trips(concurrency: int, totals: dict[str, int], **extra: Any) -> dict[str, dict[str, Any]]:
        return {
            system: {"case": "round_trips", "total": n(total), "concurrency": concurrency, **(extra if system == "rstreams" else {})}
            for system, total in totals.items()
        }

    cases.append(
        Case(
            "rt_seq", "subscribe to a 1-element publisher, sequential (rstreams: `session.fetch()`; rsocket-py: request-response)", "rt/s",
            round_trips(1, {"rstreams": 4000, "pyzmq": 4000, "nats": 2000, "probe": 4000, "rsocket": 2000, "raw": 4000}),
            goal=10_000, goal_rsocket=2, issue19="round trips, sequential (`fetch` / REQ-REP)", goal_pyzmq=1.0,
        )
    )
    cases.append(
        Case(
            "rt_64", "the same, 64 concurrent", "rt/s",
            round_trips(64, {"rstreams": 30_000, "pyzmq": 30_000, "nats": 20_000, "probe": 30_000, "rsocket": 10_000, "raw": 60_000}),
            goal=60_000, goal_rsocket=3, issue19="round trips, 64 in flight (`fetch` / DEALER-ROUTER)", goal_pyzmq=1.0,
        )
    )
    cases.append(
        Case(
            "rt_64_iterate", "the same, 64 concurrent, with `async with subscribe()` and `async for` instead of `fetch()`", "rt/s",
            round_trips(64, {"rstreams": 30_000, "rsocket": 10_000}, mode="iterate"),
            headline=False,
        )
    )
    if websocket:
        ws = throughput_case(
            "ws8", "8-byte elements over WebSocket", "el/s", "blob?count={count}&size=8",
            {"rstreams_ws": n(1_000_000), "tws": n(20_000)}, 65536, 8, goal=500_000,
        )
        ws.commands["rstreams_ws"]["scheme"] = "ws"
        cases.append(ws)
    return cases


def worker_for(system: str) -> str:
    return {
        "rstreams": "rstreams", "probe": "raw", "rsocket": "rsocket", "raw": "raw", "rstreams_ws": "rstreams", "tws": "tws",
        "pyzmq": "zmq", "nats": "nats",
    }[system]


def server_for(system: str) -> tuple[str, int]:
    """Which server a system reads from, and which of its listeners."""
    return {"probe": ("rstreams", 0), "rstreams_ws": ("rstreams", 1)}.get(system, (system, 0))


# ---- summaries --------------------------------------------------------------------


def summary(values: list[float]) -> tuple[float, float, float] | None:
    if not values:
        return None
    return statistics.median(values), min(values), max(values)


def ratios(case: Case, numerator: str, denominator: str) -> list[float]:
    top, bottom = case.results.get(numerator, []), case.results.get(denominator, [])
    return [a / b for a, b in zip(top, bottom) if b]


def fmt(value: float, unit: str = "") -> str:
    if unit == "x":
        return f"{value:,.2f}x" if value < 10 else f"{value:,.0f}x"
    if value >= 100:
        return f"{value:,.0f}"
    return f"{value:,.2f}"


def fmt_summary(values: list[float], unit: str = "") -> str:
    s = summary(values)
    if s is None:
        return "–"
    median, low, high = s
    return f"**{fmt(median, unit)}** ({fmt(low, unit)}–{fmt(high, unit)})"


def verdict(ok: bool | None) -> str:
    return "–" if ok is None else ("yes" if ok else "**no**")


# ---- the run ----------------------------------------------------------------------


def run_round(
    cases: list[Case], round_index: int, servers: dict[str, Server], workers: dict[str, Worker],
    only: tuple[str, ...] | None, extra: dict[str, Any], phase: str,
) -> None:
    """Every case once on every system (``only`` those, if given), back to back."""
    for case in cases:
        systems = [s for s in SYSTEMS if s in case.commands and (only is None or s in only)]
        # Rotate the order each round, so no system always goes first.
        shift = round_index % len(systems)
        for system in systems[shift:] + systems[:shift]:
            server, listener = server_for(system)
            command = dict(case.commands[system], port=servers[server].ports[listener])
            if system == "pyzmq":
                command["ports"] = servers[server].ports
            result = workers[worker_for(system)].run(**command)
            if result.get("lost") or result.get("complete") is False:
                # Core NATS may drop: say so next to the figure, never hide it.
                extra.setdefault("lost", []).append(
                    {"phase": phase, "round": round_index + 1, "case": case.key, "system": system,
                     "lost": result.get("lost"), "complete": result.get("complete")}
                )
            case.results.setdefault(system, []).append(case.value(result))
        line = "  ".join(f"{s}={case.results[s][-1]:,.0f}" for s in systems)
        print(f"  {case.key:14} {case.unit:5} {line}", flush=True)


def run_latency(
    round_index: int, count: int, servers: dict[str, Server], workers: dict[str, Worker], latency: dict[str, Any]
) -> None:
    """A steady LATENCY_RATE elements/s for ``count`` elements on each system."""
    systems = [s for s in ISSUE19_SYSTEMS if s in servers]
    shift = round_index % len(systems)
    for system in systems[shift:] + systems[:shift]:
        result = workers[worker_for(system)].run(case="latency", port=servers[system].port, rate=LATENCY_RATE, count=count)
        values = result["latencies_us"]
        entry = percentiles(values) if values else {"n": 0}
        span = result.get("span_s") or 0.0
        entry["expected"] = count
        entry["rate"] = (len(values) - 1) / span if span > 0 and len(values) > 1 else 0.0
        latency.setdefault("latency", {}).setdefault(system, []).append(entry)
        latency.setdefault("latencies_us", {}).setdefault(system, []).extend(values)
        print(
            f"  latency {system:8} p50={entry.get('p50', 0):,.0f} us p99={entry.get('p99', 0):,.0f} us"
            f" rate={entry['rate']:,.0f}/s ({entry['n']:,} of {count:,})",
            flush=True,
        )


def loadavg() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def run(args: argparse.Namespace) -> None:
    started = time.time()
    scale = 0.25 if args.quick else 1.0
    rounds = args.rounds or (2 if args.quick else 5)
    load = args.load if args.load is not None else (0 if args.quick else 2)
    load_rounds = args.load_rounds or rounds
    latency_count = int(2 * LATENCY_RATE * scale)
    websocket = websocket_available()
    skipped = unavailable_systems()
    for system, reason in skipped.items():
        print(f"skipping {LABELS[system]}: {reason}", flush=True)
    cases = make_cases(scale, websocket)
    for case in cases:
        for system in skipped:
            case.commands.pop(system, None)
    servers = start_servers(websocket, skipped)
    kinds = ["rstreams", "raw", "rsocket"] + (["tws"] if websocket else [])
    kinds += [worker_for(s) for s in ("pyzmq", "nats") if s not in skipped]
    workers = {kind: Worker(kind) for kind in kinds}
    extra: dict[str, Any] = {"skipped": skipped}
    quiet: dict[str, Any] = {"rounds": rounds, "load": 0, "loadavg_start": loadavg()}
    busy: BusyLoops | None = None
    try:
        for round_index in range(rounds):
            print(f"round {round_index + 1}/{rounds}", flush=True)
            run_round(cases, round_index, servers, workers, None, extra, "quiet")
            run_latency(round_index, latency_count, servers, workers, quiet)
        quiet["loadavg_end"] = loadavg()
        quiet["latency_rounds"] = quiet.get("latency", {}).get("rstreams", [])
        print("memory and scale", flush=True)
        port = servers["rstreams"].port
        extra["idle_memory"] = workers["rstreams"].run(case="idle_memory", port=port, n=1000)
        print(f"  idle subscription: {extra['idle_memory']['bytes_per_subscription']:.0f} bytes", flush=True)
        extra["slow_subscribers"] = workers["rstreams"].run(
            case="slow_subscribers", port=port, server_pid=servers["rstreams"].pid, n=1000, connections=10,
            seconds=4.0 if args.quick else 8.0,
        )
        print(f"  slow subscribers: {describe_rss(extra['slow_subscribers'])}", flush=True)
        extra["many_streams"] = workers["rstreams"].run(case="many_streams", port=port, n=10_000)
        print(f"  10,000 streams: {extra['many_streams']}", flush=True)
        extra["many_connections"] = workers["rstreams"].run(case="many_connections", port=port, n=1000)
        print(f"  1,000 connections: {extra['many_connections']}", flush=True)
        if load:
            loaded_cases = [c for c in make_cases(scale) if c.issue19]
            for case in loaded_cases:
                case.commands = {s: c for s, c in case.commands.items() if s in ISSUE19_SYSTEMS and s not in skipped}
            loaded: dict[str, Any] = {"rounds": load_rounds, "load": load, "cases": loaded_cases}
            print(f"loaded: {load} busy loops beside the run", flush=True)
            busy = BusyLoops(load)
            time.sleep(1.0)  # let them settle on the cores
            loaded["loadavg_start"] = loadavg()
            for round_index in range(load_rounds):
                print(f"loaded round {round_index + 1}/{load_rounds}", flush=True)
                run_round(loaded_cases, round_index, servers, workers, ISSUE19_SYSTEMS, extra, "loaded")
                run_latency(round_index, latency_count, servers, workers, loaded)
            loaded["loadavg_end"] = loadavg()
            busy.close()
            busy = None
            extra["loaded"] = loaded
    finally:
        if busy is not None:
            busy.close()
        for worker in workers.values():
            worker.close()
        for server in servers.values():
            server.close()
    extra["quiet"] = quiet
    extra["latency_rounds"] = quiet["latency_rounds"]
    extra["elapsed"] = time.time() - started
    extra["rounds"] = rounds
    extra["quick"] = args.quick
    extra["command"] = "python bench/run.py" + "".join(
        f" {flag}" for flag, on in (("--quick", args.quick), (f"--rounds {args.rounds}", args.rounds),
                                     (f"--load {args.load}", args.load is not None),
                                     (f"--load-rounds {args.load_rounds}", args.load_rounds)) if on
    )
    extra["machine"] = machine()
    with LAST_RUN.open("wb") as saved:
        pickle.dump({"cases": cases, "extra": extra}, saved)
    write_report(cases, extra, Path(args.out))
    print(f"done in {extra['elapsed']:.0f} s; wrote {args.out}", flush=True)


def run_focused(args: argparse.Namespace) -> None:
    """A few cases, rstreams and pyzmq only, for A/B work on one row: the
    same servers, workers and interleaving as the full run, but no report
    and no memory cases. ``latency`` selects the latency case."""
    keys = {k.strip() for k in args.cases.split(",") if k.strip()}
    rounds = args.rounds or 3
    scale = 0.25 if args.quick else 1.0
    skipped = unavailable_systems()
    cases = [c for c in make_cases(scale) if c.key in keys]
    only = ("rstreams", "pyzmq")
    for case in cases:
        case.commands = {s: c for s, c in case.commands.items() if s in only and s not in skipped}
    servers = start_servers(False, {**skipped, "nats": "not in a focused run"})
    workers = {kind: Worker(kind) for kind in ("rstreams", worker_for("pyzmq"))}
    latency: dict[str, Any] = {}
    busy = BusyLoops(args.load) if args.load else None
    try:
        if busy is not None:
            time.sleep(1.0)
        for round_index in range(rounds):
            print(f"round {round_index + 1}/{rounds}", flush=True)
            run_round(cases, round_index, servers, workers, only, {}, "focused")
            if "latency" in keys:
                run_latency(round_index, int(2 * LATENCY_RATE * scale), servers, workers, latency)
    finally:
        if busy is not None:
            busy.close()
        for worker in workers.values():
            worker.close()
        for server in servers.values():
            server.close()
    for case in cases:
        s = summary(ratios(case, "rstreams", "pyzmq"))
        if s:
            print(f"{case.key:16} rstreams/pyzmq median {s[0]:.2f}x ({s[1]:.2f}x-{s[2]:.2f}x)", flush=True)
    if latency:
        p99 = {s: [r["p99"] for r in latency["latency"].get(s, []) if r.get("n")] for s in only}
        pairs = [a / b for a, b in zip(p99["rstreams"], p99["pyzmq"]) if b]
        if pairs:
            print(f"latency p99      rstreams/pyzmq median {statistics.median(pairs):.2f}x"
                  f" (rstreams {statistics.median(p99['rstreams']):.0f} us, pyzmq {statistics.median(p99['pyzmq']):.0f} us)",
                  flush=True)


def report_again(out: Path) -> None:
    """Write the report of the last run again (after editing bench/NOTES.md,
    which the report carries), from what the run saved; nothing is measured."""
    if not LAST_RUN.exists():
        raise SystemExit(f"no saved run at {LAST_RUN}: run the benchmark first")
    with LAST_RUN.open("rb") as saved:
        last = pickle.load(saved)
    write_report(last["cases"], last["extra"], out)
    print(f"wrote {out} from the run of {last['extra']['machine']['date']}", flush=True)


def describe_rss(result: dict[str, Any]) -> str:
    samples = result["samples"]
    settled = [rss for t, rss in samples if t >= 1.0] or [samples[-1][1]]
    first, last, peak = settled[0], settled[-1], max(settled)
    return (
        f"server RSS {first / 2**20:.1f} MiB after 1 s, {last / 2**20:.1f} MiB at {samples[-1][0]:.0f} s"
        f" (peak {peak / 2**20:.1f} MiB); {result['received']:,} elements read"
    )


# ---- the report -------------------------------------------------------------------


def machine() -> dict[str, str]:
    import msgpack
    import trio

    import rstreams

    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    from importlib.metadata import version

    def installed(name: str) -> str:
        try:
            return version(name)
        except Exception:
            return "not installed"

    rsocket_version = installed("rsocket")
    pyzmq_version = installed("pyzmq")
    try:
        import zmq

        pyzmq_version += f" on libzmq {zmq.zmq_version()}"
    except ImportError:
        pass
    nats_server = "not installed"
    binary = nats_server_binary()
    if binary:
        try:
            nats_server = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=10).stdout.strip()
            nats_server = nats_server.replace("nats-server: ", "")
        except (OSError, subprocess.SubprocessError):
            nats_server = "unknown version"
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT).stdout.strip()
    return {
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": f"{os.cpu_count()} cores, {cpu}, {platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "versions": f"rstreams {rstreams.__version__} ({commit}), trio {trio.__version__}, msgpack {'.'.join(map(str, msgpack.version))}, "
        f"pyzmq {pyzmq_version}, nats-server {nats_server} with nats-py {installed('nats-py')}, rsocket-py {rsocket_version}",
        "load": " ".join(f"{x:.1f}" for x in os.getloadavg()),
    }


def issue19_lines(cases: list[Case], phase: dict[str, Any], skipped: dict[str, str]) -> list[str]:
    """The table against pyzmq (and NATS) for one phase, every row of issue 19."""
    rounds = phase["rounds"]
    enough = rounds >= MIN_ROUNDS_FOR_VERDICT

    def holds(ok: bool | None) -> str:
        if ok is None:
            return "–"
        if not enough:
            return f"({'yes' if ok else 'no'}; {rounds} rounds, a verdict needs {MIN_ROUNDS_FOR_VERDICT})"
        return verdict(ok)

    def missing(system: str) -> str:
        return "skipped" if system in skipped else "–"

    lines = [
        "| case | unit | rstreams | pyzmq | NATS | rstreams / pyzmq | rstreams / NATS | goal (rstreams / pyzmq) | holds |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    held = counted = 0
    for case in cases:
        if not case.issue19:
            continue
        r_zmq = ratios(case, "rstreams", "pyzmq")
        r_nats = ratios(case, "rstreams", "nats")
        ok = statistics.median(r_zmq) >= case.goal_pyzmq if r_zmq and case.goal_pyzmq else None
        if ok is not None:
            counted += 1
            held += ok
        lines.append(
            f"| {case.issue19} | {case.unit} | {fmt_summary(case.results.get('rstreams', []))}"
            f" | {fmt_summary(case.results.get('pyzmq', [])) if 'pyzmq' in case.results else missing('pyzmq')}"
            f" | {fmt_summary(case.results.get('nats', [])) if 'nats' in case.results else missing('nats')}"
            f" | {fmt_summary(r_zmq, 'x')} | {fmt_summary(r_nats, 'x')} | ≥ {case.goal_pyzmq:.1f}x | {holds(ok)} |"
        )
    latency = phase.get("latency", {})
    mine, theirs = latency.get("rstreams", []), latency.get("pyzmq", [])
    if mine:
        p99 = {s: [r["p99"] for r in latency.get(s, []) if r.get("n")] for s in ISSUE19_SYSTEMS}
        r_zmq = [a / b for a, b in zip(p99["rstreams"], p99["pyzmq"]) if b]
        r_nats = [a / b for a, b in zip(p99["rstreams"], p99["nats"]) if b]
        rate_held = all(r["n"] == r["expected"] and r["rate"] >= RATE_HELD * LATENCY_RATE for r in mine)
        ok = (statistics.median(r_zmq) <= 1.0 and rate_held) if r_zmq else None
        if ok is not None:
            counted += 1
            held += ok
        lines.append(
            f"| latency at {LATENCY_RATE:,} el/s, p99 | µs | {fmt_summary(p99['rstreams'])}"
            f" | {fmt_summary(p99['pyzmq']) if theirs else missing('pyzmq')}"
            f" | {fmt_summary(p99['nats']) if latency.get('nats') else missing('nats')}"
            f" | {fmt_summary(r_zmq, 'x')} | {fmt_summary(r_nats, 'x')}"
            f" | p99 ≤ pyzmq's (≤ 1.00x), rate held (every round ≥ {RATE_HELD:.0%} of {LATENCY_RATE:,}/s, nothing lost)"
            f" | {holds(ok)}{'' if rate_held else ' (rate not held)'} |"
        )
    lines += [
        "",
        f"Goals held: **{held} of {counted}**" + ("" if enough else f" (indicative only: {rounds} rounds)")
        + ". Ratios above 1 mean rstreams is faster, except latency, where below 1 means a lower p99.",
    ]
    if latency:
        lines += [
            "",
            "| latency at 10,000 el/s | p50 µs | p99 µs | p99.9 µs | max µs | rate held (el/s) | elements |",
            "|---|---|---|---|---|---|---|",
        ]
        for system in ISSUE19_SYSTEMS:
            entries = [r for r in latency.get(system, []) if r.get("n")]
            if not entries:
                continue
            lines.append(
                f"| {LABELS[system]} | " + " | ".join(fmt_summary([r[k] for r in entries]) for k in ("p50", "p99", "p999", "max"))
                + f" | {fmt_summary([r['rate'] for r in entries])} | {sum(r['n'] for r in entries):,} of {sum(r['expected'] for r in entries):,} |"
            )
    return lines


def write_report(cases: list[Case], extra: dict[str, Any], out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    images = out.parent / "performance"
    images.mkdir(exist_ok=True)
    info = extra.get("machine") or machine()
    try:
        import matplotlib  # noqa: F401
    except ImportError:  # the smoke test runs without it; the real run has it
        pass
    else:
        plot_throughput(cases, images / "throughput.png")
        if extra.get("quiet", {}).get("latencies_us"):
            plot_latency(extra["quiet"]["latencies_us"], images / "latency.png")
    (images / "results.json").write_text(
        json.dumps(
            {
                "machine": info,
                "cases": {c.key: c.results for c in cases},
                "loaded_cases": {c.key: c.results for c in extra.get("loaded", {}).get("cases", [])},
                "extra": extra_summary(extra),
            },
            indent=1,
        )
    )
    skipped = extra.get("skipped", {})
    quiet = extra.get("quiet", {"rounds": extra["rounds"]})
    lines = [
        "# Performance",
        "",
        f"Generated by `{extra.get('command', 'python bench/run.py')}`"
        f" ({extra['rounds']} rounds, {extra['elapsed']:.0f} s); do not edit by hand, run it again.",
        "",
        f"* **When**: {info['date']}; load average at the end {info['load']}",
        f"* **Machine**: {info['machine']}; Python {info['python']}",
        f"* **Versions**: {info['versions']}",
        "* **Setup**: loopback TCP; every server and every client in its own process (NATS: the",
        "  broker, the publishing app and the client). Each round runs each case once per system,",
        "  back to back, in an order that rotates from round to round; connection setup is outside",
        "  the clock. `bench/NOTES.md` (below) says how each system is set up.",
        "* **Figures**: median over the rounds, min–max in brackets. Ratios are taken pair by pair",
        "  within each round, then summarised the same way. Absolute figures drift by ±30% on this",
        "  shared machine; the ratios govern.",
    ]
    for system, reason in skipped.items():
        lines.append(f"* **{LABELS[system]} skipped**: {reason}.")
    lines += [
        "",
        "## Against pyzmq (issue 19)",
        "",
        "rstreams against pyzmq (PUSH/PULL, one `recv` per element; REQ/REP; DEALER/ROUTER with 64 in",
        "flight; default socket options and HWM) and NATS (core NATS, nats-py), the same cases in",
        f"the same rounds. A goal holds when its median ratio holds in a run of at least {MIN_ROUNDS_FOR_VERDICT}",
        "interleaved rounds. The 8-byte rows read the same stream (`blob?count=N&size=8`, one onNext",
        "per element) three ways; pyzmq's and NATS's side is the same in all three (measured again",
        "beside each).",
        "",
        f"### Quiet machine ({quiet['rounds']} rounds; load average {quiet.get('loadavg_start', '?')} before, {quiet.get('loadavg_end', '?')} after)",
        "",
    ]
    lines += issue19_lines(cases, quiet, skipped)
    loaded = extra.get("loaded")
    if loaded:
        lines += [
            "",
            f"### Loaded machine: {loaded['load']} busy loops beside it ({loaded['rounds']} rounds; load average"
            f" {loaded.get('loadavg_start', '?')} at the start, {loaded.get('loadavg_end', '?')} at the end)",
            "",
            f"The same cases, rstreams, pyzmq and NATS only, while {loaded['load']} processes spin `while 1: pass`",
            "(not niced) on the 2 cores.",
            "",
        ]
        lines += issue19_lines(loaded["cases"], loaded, skipped)
    else:
        lines += ["", "### Loaded machine", "", "Not run this time (`--load 0`, or `--quick`).", ""]
    lost = extra.get("lost")
    if lost:
        lines += ["", "Streams that lost elements (core NATS drops a slow consumer's messages; the figure counts what arrived):", ""]
        for item in lost:
            lines.append(f"* {item['phase']} round {item['round']}, {item['case']}, {LABELS.get(item['system'], item['system'])}: "
                         f"{item['lost']} lost{'' if item['complete'] else ', end of stream lost'}")
    lines += [
        "",
        "## Issue 6: against rsocket-py and the raw ceiling",
        "",
        "rstreams: `rstreams serve` with the demo's `range` / `blob` publishers, read by the",
        "rstreams client with `sub.batches()` (the per-element `async for` has its own row).",
        "rsocket-py: request-stream with a minimal hand-written publisher, read with the same",
        "demand window; request-response for the round trips; 256 KiB reads (its default of 1 KiB",
        "would cap it far lower). Raw ceiling: a minimal trio server writing the same wire",
        "messages (onNext 256 per `send_all`, 16 above 1 KiB; onNextPacked 16,384 per message;",
        "256 KiB parts above 64 KiB, one `send_all` each), read by a plain socket and `msgpack.Unpacker`.",
        "*Probe*: that raw consumer reading from the rstreams server.",
        "",
        "### Throughput and round trips",
        "",
        "| case | unit | rstreams | rsocket-py | raw ceiling | vs rsocket-py | vs raw | probe vs raw | goal | holds |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for case in cases:
        if (not case.headline and case.key not in ("onnext8_each", "rt_64_iterate")) or case.key == "ws8":
            continue
        r_rsocket = ratios(case, "rstreams", "rsocket")
        r_raw = ratios(case, "rstreams", "raw")
        r_probe = ratios(case, "probe", "raw")
        goal_parts = []
        checks: list[bool] = []
        if case.goal is not None:
            goal_parts.append(f"≥ {fmt(case.goal)}")
        if case.goal_rsocket is not None:
            goal_parts.append(f"≥ {case.goal_rsocket:g}x rsocket-py")
            if r_rsocket:
                checks.append(statistics.median(r_rsocket) >= case.goal_rsocket)
        if case.goal_raw is not None:
            goal_parts.append(f"≥ {case.goal_raw:g} of raw")
            if r_raw:
                checks.append(statistics.median(r_raw) >= case.goal_raw)
            if r_probe:
                checks.append(statistics.median(r_probe) >= case.goal_raw)
        if case.goal is not None and not case.goal_rsocket and not case.goal_raw and case.results.get("rstreams"):
            checks.append(statistics.median(case.results["rstreams"]) >= case.goal)
        lines.append(
            f"| {case.title} | {case.unit} | {fmt_summary(case.results.get('rstreams', []))}"
            f" | {fmt_summary(case.results.get('rsocket', []))} | {fmt_summary(case.results.get('raw', []))}"
            f" | {fmt_summary(r_rsocket, 'x')} | {fmt_summary(r_raw, 'x')} | {fmt_summary(r_probe, 'x')}"
            f" | {'; '.join(goal_parts) or '–'} | {verdict(all(checks) if checks else None)} |"
        )
    ws_case = next((c for c in cases if c.key == "ws8"), None)
    if ws_case is not None and ws_case.results.get("rstreams_ws"):
        r_tws = ratios(ws_case, "rstreams_ws", "tws")
        lines.append(
            f"| 8-byte elements over WebSocket (rstreams client over ws://; the pair: trio-websocket, one message per element)"
            f" | el/s | {fmt_summary(ws_case.results['rstreams_ws'])} | – | {fmt_summary(ws_case.results.get('tws', []))} (trio-websocket)"
            f" | – | {fmt_summary(r_tws, 'x')} vs trio-websocket | – | ≥ 500,000; ≥ 10x trio-websocket one message per element"
            f" | {verdict(bool(r_tws) and statistics.median(r_tws) >= WS_GOAL_RATIO)} |"
        )
    else:
        lines.append(
            "| 8-byte elements over WebSocket | el/s | pending the WebSocket transport | | | | | | ≥ 500,000; ≥ 10x trio-websocket one message per element | – |"
        )
    lines += [
        "",
        "The ratio goals count as held when the median ratio reaches them; the absolute goals are",
        "given for orientation (they assume a quiet machine). `probe vs raw` is the rstreams",
        "server read by the raw consumer against the raw ceiling, as an outside probe measures it.",
        "",
        "### Probe: the rstreams server read by the raw consumer",
        "",
        "| case | unit | probe | raw ceiling | probe vs raw |",
        "|---|---|---|---|---|",
    ]
    for case in cases:
        if "probe" in case.results:
            lines.append(
                f"| {case.title} | {case.unit} | {fmt_summary(case.results['probe'])}"
                f" | {fmt_summary(case.results.get('raw', []))} | {fmt_summary(ratios(case, 'probe', 'raw'), 'x')} |"
            )
    lines += ["", "### Throughput against element size", "", "![throughput](performance/throughput.png)", ""]
    curve = ("rstreams", "pyzmq", "nats", "rsocket", "raw")
    lines += [
        "| element size | " + " | ".join(f"{LABELS[s]} MB/s" for s in curve) + " |",
        "|---|" + "---|" * len(curve),
    ]
    for case in sorted((c for c in cases if c.element_size and c.key not in ("packed8", "onnext8_each", "each_default", "ws8")), key=lambda c: c.element_size):
        values = {s: mbps(case, s) for s in curve}
        lines.append(f"| {case.element_size:,} | " + " | ".join(fmt_summary(values[s]) for s in curve) + " |")
    lines += ["", "## Latency", ""]
    if extra.get("latency_rounds"):
        rounds_ = extra["latency_rounds"]
        p99 = [r["p99"] for r in rounds_]
        lines += [
            "Publish-to-consume: the `stamps` publisher hands an element to `sink.send` 10,000 times a",
            "second, stamped with `time.perf_counter_ns()` (CLOCK_MONOTONIC, shared by the processes);",
            "the client subtracts it from its own clock when `async for` returns the element (prefetch 256).",
            "pyzmq's and NATS's publishers send the same stamps on the same schedule (the comparison is",
            "in the issue-19 tables above; the plot's tail shows all three).",
            "",
            "| rounds | elements | p50 µs | p90 µs | p99 µs | p99.9 µs | max µs | goal | holds |",
            "|---|---|---|---|---|---|---|---|---|",
            f"| {len(rounds_)} | {sum(r['n'] for r in rounds_):,} | "
            + " | ".join(fmt_summary([r[k] for r in rounds_]) for k in ("p50", "p90", "p99", "p999", "max"))
            + f" | p99 < 1,000 µs | {verdict(statistics.median(p99) < 1000)} |",
            "",
            "![latency](performance/latency.png)",
            "",
        ]
    lines += ["## Memory and scale", "", "| case | measured | goal | holds |", "|---|---|---|---|"]
    idle = extra.get("idle_memory")
    if idle:
        per = idle["bytes_per_subscription"]
        lines.append(
            f"| one idle subscription (client side: the Subscription and its protocol state, tracemalloc over {idle['n']:,}) "
            f"| {per:,.0f} bytes | < 2,048 bytes | {verdict(per < 2048)} |"
        )
    slow = extra.get("slow_subscribers")
    if slow:
        samples = slow["samples"]
        settled = [rss for t, rss in samples if t >= 1.0] or [samples[-1][1]]
        growth = (settled[-1] - settled[0]) / 2**20
        lines.append(
            f"| server memory while 1,000 slow subscribers (10 connections, prefetch 16, a batch per 10 ms) read `range` "
            f"| {describe_rss(slow)}; growth {growth:+.1f} MiB | flat | {verdict(abs(growth) < 16)} |"
        )
    streams = extra.get("many_streams")
    if streams:
        lines.append(
            f"| concurrent streams on one connection | {streams['opened']:,} open at once, {streams['elements']:,} elements read,"
            f" {streams['seconds']:.1f} s | 10,000 | {verdict(streams['opened'] >= 10_000 and streams['elements'] >= 1_000_000)} |"
        )
    connections = extra.get("many_connections")
    if connections:
        lines.append(
            f"| concurrent connections to one server | {connections['opened']:,} sessions open at once, {connections['elements']:,}"
            f" elements read, {connections['seconds']:.1f} s | 1,000 | {verdict(connections['opened'] >= 1000 and connections['elements'] >= 100_000)} |"
        )
    lines.append("")
    notes = ROOT / "bench" / "NOTES.md"
    if notes.exists():
        lines += [notes.read_text().rstrip(), ""]
    out.write_text("\n".join(lines))


def mbps(case: Case, system: str) -> list[float]:
    values = case.results.get(system, [])
    if case.unit == "el/s":
        return [v * case.element_size / 1e6 for v in values]
    return values


def extra_summary(extra: dict[str, Any]) -> dict[str, Any]:
    """What results.json keeps: everything but each element's latency (the
    percentiles stay) and the loaded phase's cases (kept beside)."""
    summary_ = {k: v for k, v in extra.items() if k not in ("latencies_us", "quiet", "loaded")}
    for phase in ("quiet", "loaded"):
        if phase in extra:
            summary_[phase] = {k: v for k, v in extra[phase].items() if k not in ("latencies_us", "cases")}
    return summary_


def plot_throughput(cases: list[Case], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sized = sorted((c for c in cases if c.element_size and c.key not in ("packed8", "onnext8_each", "each_default", "ws8")), key=lambda c: c.element_size)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for system, style in (("rstreams", "o-"), ("pyzmq", "D-"), ("nats", "v-"), ("rsocket", "s-"), ("raw", "^--")):
        xs, ys, lows, highs = [], [], [], []
        for case in sized:
            s = summary(mbps(case, system))
            if s is None:
                continue
            xs.append(case.element_size)
            ys.append(s[0])
            lows.append(s[0] - s[1])
            highs.append(s[2] - s[0])
        if xs:
            ax.errorbar(xs, ys, yerr=[lows, highs], fmt=style, capsize=3, label=LABELS[system])
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("element size (bytes)")
    ax.set_ylabel("throughput (MB/s of element payload)")
    ax.set_title("Throughput against element size (loopback, median and min-max)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_latency(latencies: dict[str, list[float]], path: Path) -> None:
    """rstreams' histogram, and every system's tail (complementary CDF)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (hist, cdf) = plt.subplots(1, 2, figsize=(10, 4))
    for system, values in latencies.items():
        ordered = sorted(values)
        if not ordered:
            continue
        n = len(ordered)
        if system == "rstreams":
            cap = ordered[min(n - 1, int(0.999 * n))]
            hist.hist([v for v in ordered if v <= cap], bins=80)
        cdf.plot(ordered, [1 - (i + 0.5) / n for i in range(n)], label=LABELS.get(system, system))
    hist.set_xlabel("publish-to-consume latency (µs), up to p99.9")
    hist.set_ylabel("elements")
    hist.set_title(f"rstreams at {LATENCY_RATE:,} elements/s")
    cdf.set_xscale("log")
    cdf.set_yscale("log")
    cdf.axvline(1000, color="red", linestyle=":", label="1 ms")
    cdf.set_xlabel("latency (µs)")
    cdf.set_ylabel("fraction of elements slower")
    cdf.set_title(f"tail at {LATENCY_RATE:,} el/s (complementary CDF)")
    cdf.grid(True, which="both", alpha=0.3)
    cdf.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="2 rounds, a quarter of the work (under 2 minutes)")
    parser.add_argument("--rounds", type=int, default=0, help="rounds (default 5, or 2 with --quick)")
    parser.add_argument(
        "--load", type=int, default=None,
        help="after the quiet rounds, run the issue-19 cases again beside this many busy loops (default 2, 0 with --quick)",
    )
    parser.add_argument("--load-rounds", type=int, default=0, help="rounds of the loaded phase (default: as many as --rounds)")
    parser.add_argument("--out", default=str(ROOT / "docs" / "PERFORMANCE.md"), help="where the table goes")
    parser.add_argument(
        "--report-again", action="store_true",
        help="write the report of the last run again from its saved results (after editing bench/NOTES.md); measures nothing",
    )
    parser.add_argument(
        "--cases", default="",
        help="comma-separated case keys (e.g. rt_64,latency): run only those against pyzmq, print median ratios, write nothing",
    )
    args = parser.parse_args()
    ensure_environment()
    if args.report_again:
        report_again(Path(args.out))
        return
    if args.cases:
        run_focused(args)
        return
    run(args)


if __name__ == "__main__":
    main()
