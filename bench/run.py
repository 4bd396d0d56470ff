"""Every performance case of issue 6, side by side, in one run.

    python bench/run.py               # 5 rounds, 1.5-3 minutes
    python bench/run.py --quick       # 2 rounds, smaller counts, about 20 s
    python bench/run.py --rounds 9 --out /tmp/perf.md

Three systems answer the same requests on loopback TCP, each server in its
own process, each client in its own process:

* **rstreams**: ``rstreams serve`` with the demo's publishers
  (``bench/_bench_app.py``), read by the rstreams client;
* **rsocket-py** (asyncio), from PyPI, with a minimal hand-written publisher
  (``bench/_rsocket.py``);
* **raw ceiling**: a minimal trio server writing the same wire messages as
  the demo's publishers, read by a plain socket and ``msgpack.Unpacker``
  (``bench/_raw.py``).

A fourth column, **probe**, is the raw consumer reading from the rstreams
server: what a client that costs nothing sees of the rstreams server.

Each round runs every case once on every system, back to back; ratios are
taken pair by pair within a round, then summarised (median, min-max), so
load from other processes on the machine cancels out as far as it can. The
results go to ``docs/PERFORMANCE.md`` (a table) and two plots beside it.

rsocket-py and matplotlib live in the benchmark's own environment,
``bench/.venv``: if this interpreter lacks them, the runner creates that
environment (``pip install -e . rsocket==0.4.20 matplotlib``) and restarts
itself there. Nothing here is run by the test suite (a smoke test runs one
tiny round of the pieces, with no timing assertion).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
BENCH_VENV = HERE / ".venv"
RSOCKET_VERSION = "0.4.20"

#: The WebSocket goal: rstreams over ws:// against trio-websocket sending one
#: WebSocket message per element.
WS_GOAL_RATIO = 10

SYSTEMS = ("rstreams", "probe", "rsocket", "raw", "rstreams_ws", "tws")
LABELS = {
    "rstreams": "rstreams",
    "probe": "rstreams server, raw consumer",
    "rsocket": "rsocket-py",
    "raw": "raw ceiling",
    "rstreams_ws": "rstreams over ws://",
    "tws": "trio-websocket, one message per element",
}


def websocket_available() -> bool:
    """Whether this rstreams serves WebSocket (the transport of issue-ws)."""
    import rstreams

    return hasattr(rstreams, "serve_websocket")


# ---- environment ----------------------------------------------------------------


def ensure_environment() -> None:
    """Re-run under bench/.venv (creating it) unless rsocket and matplotlib import."""
    try:
        import matplotlib  # noqa: F401
        import rsocket  # noqa: F401
        return
    except ImportError:
        pass
    if os.environ.get("RSTREAMS_BENCH_REEXEC"):
        raise SystemExit("bench/.venv lacks rsocket or matplotlib even after installing them")
    python = BENCH_VENV / "bin" / "python"
    if not python.exists():
        print("creating bench/.venv (rsocket-py, matplotlib) ...", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(BENCH_VENV)], check=True)
    subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", "-e", str(ROOT), f"rsocket=={RSOCKET_VERSION}", "matplotlib"],
        check=True,
    )
    os.environ["RSTREAMS_BENCH_REEXEC"] = "1"
    os.execv(str(python), [str(python), *sys.argv])


# ---- processes --------------------------------------------------------------------


class Server:
    def __init__(self, argv: list[str], parse_port: Any, listeners: int = 1) -> None:
        self.process = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, cwd=ROOT)
        assert self.process.stdout is not None
        # One line per listener, in the order they were asked for.
        self.ports = [parse_port(self.process.stdout.readline()) for _ in range(listeners)]
        self.port = self.ports[0]

    @property
    def pid(self) -> int:
        return self.process.pid

    def close(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()


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


def start_servers(websocket: bool) -> dict[str, Server]:
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
    headline: bool = True
    element_size: int = 0
    results: dict[str, list[float]] = field(default_factory=dict)

    def value(self, result: dict[str, Any]) -> float:
        if self.unit == "MB/s":
            return float(result["bytes"]) / 1e6 / float(result["seconds"])
        return float(result["elements"]) / float(result["seconds"])


def throughput_case(
    key: str, title: str, unit: str, name: str, counts: dict[str, int], prefetch: int, size: int, **goals: Any
) -> Case:
    commands = {}
    for system, count in counts.items():
        if system == "rsocket" and name.startswith("range"):
            # rsocket-py has no packed elements: its 8-byte stream is the pair.
            target = f"blob?count={count}&size=8"
        else:
            target = name.format(count=count)
        commands[system] = {"case": "stream", "name": target, "prefetch": prefetch}
    return Case(key, title, unit, commands, element_size=size, **goals)


def make_cases(scale: float, websocket: bool = False) -> list[Case]:
    def n(count: int) -> int:
        return max(1, int(count * scale))

    cases = [
        throughput_case(
            "onnext8", "8-byte elements, one onNext each (elementSize 0)", "el/s", "blob?count={count}&size=8",
            {"rstreams": n(1_000_000), "probe": n(2_000_000), "rsocket": n(20_000), "raw": n(2_000_000)},
            65536, 8, goal=1_300_000, goal_rsocket=30, goal_raw=0.3,
        ),
        throughput_case(
            "packed8", "8-byte elements, packed (elementSize 8)", "el/s", "range?count={count}",
            {"rstreams": n(10_000_000), "probe": n(100_000_000), "rsocket": n(20_000), "raw": n(100_000_000)},
            1 << 20, 8, goal=7_500_000, goal_rsocket=180, goal_raw=0.5,
        ),
        throughput_case(
            "kib", "1 KiB elements", "MB/s", "blob?count={count}&size=1024",
            {"rstreams": n(300_000), "probe": n(500_000), "rsocket": n(20_000), "raw": n(500_000)},
            4096, 1024, goal=650, goal_rsocket=15, goal_raw=0.3,
        ),
        throughput_case(
            "mib", "1 MiB elements (split in 64 KiB parts)", "MB/s", "blob?count={count}&size=1048576",
            {"rstreams": n(600), "probe": n(800), "rsocket": n(400), "raw": n(800)},
            16, 1 << 20, goal=1800, goal_rsocket=1.1, goal_raw=0.7,
        ),
    ]
    # The same stream consumed one element at a time with ``async for``.
    each = throughput_case(
        "onnext8_each", "8-byte elements, one onNext each, `async for` per element", "el/s", "blob?count={count}&size=8",
        {"rstreams": n(1_000_000)}, 65536, 8, headline=False,
    )
    each.commands["rstreams"]["mode"] = "each"
    cases.append(each)
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
            round_trips(1, {"rstreams": 4000, "probe": 4000, "rsocket": 2000, "raw": 4000}),
            goal=10_000, goal_rsocket=2,
        )
    )
    cases.append(
        Case(
            "rt_64", "the same, 64 concurrent", "rt/s",
            round_trips(64, {"rstreams": 30_000, "probe": 30_000, "rsocket": 10_000, "raw": 60_000}),
            goal=60_000, goal_rsocket=3,
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
    return {"rstreams": "rstreams", "probe": "raw", "rsocket": "rsocket", "raw": "raw", "rstreams_ws": "rstreams", "tws": "tws"}[system]


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


def run(args: argparse.Namespace) -> None:
    started = time.time()
    scale = 0.25 if args.quick else 1.0
    rounds = args.rounds or (2 if args.quick else 5)
    websocket = websocket_available()
    cases = make_cases(scale, websocket)
    servers = start_servers(websocket)
    workers = {kind: Worker(kind) for kind in ("rstreams", "raw", "rsocket") + (("tws",) if websocket else ())}
    extra: dict[str, Any] = {}
    try:
        for round_index in range(rounds):
            print(f"round {round_index + 1}/{rounds}", flush=True)
            for case in cases:
                systems = [s for s in SYSTEMS if s in case.commands]
                # Rotate the order each round, so no system always goes first.
                shift = round_index % len(systems)
                for system in systems[shift:] + systems[:shift]:
                    server, listener = server_for(system)
                    command = dict(case.commands[system], port=servers[server].ports[listener])
                    result = workers[worker_for(system)].run(**command)
                    case.results.setdefault(system, []).append(case.value(result))
                line = "  ".join(f"{s}={case.results[s][-1]:,.0f}" for s in systems)
                print(f"  {case.key:14} {case.unit:5} {line}", flush=True)
            # Latency: a steady 10,000 elements/s for a couple of seconds.
            count = int(20_000 * scale) if round_index < 3 else 0
            if count:
                result = workers["rstreams"].run(
                    case="latency", port=servers["rstreams"].port, rate=10_000, count=count
                )
                extra.setdefault("latency_rounds", []).append(percentiles(result["latencies_us"]))
                extra.setdefault("latencies_us", []).extend(result["latencies_us"])
                print(f"  latency        p50={extra['latency_rounds'][-1]['p50']:.0f} us p99={extra['latency_rounds'][-1]['p99']:.0f} us", flush=True)
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
    finally:
        for worker in workers.values():
            worker.close()
        for server in servers.values():
            server.close()
    extra["elapsed"] = time.time() - started
    extra["rounds"] = rounds
    extra["quick"] = args.quick
    write_report(cases, extra, Path(args.out))
    print(f"done in {extra['elapsed']:.0f} s; wrote {args.out}", flush=True)


def percentiles(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)

    def at(q: float) -> float:
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    return {"p50": at(0.5), "p90": at(0.9), "p99": at(0.99), "p999": at(0.999), "max": ordered[-1], "n": len(ordered)}


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
    try:
        from importlib.metadata import version

        rsocket_version = version("rsocket")
    except Exception:
        rsocket_version = "not installed"
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT).stdout.strip()
    return {
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": f"{os.cpu_count()} cores, {cpu}, {platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "versions": f"rstreams {rstreams.__version__} ({commit}), trio {trio.__version__}, msgpack {'.'.join(map(str, msgpack.version))}, rsocket-py {rsocket_version}",
        "load": " ".join(f"{x:.1f}" for x in os.getloadavg()),
    }


def write_report(cases: list[Case], extra: dict[str, Any], out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    images = out.parent / "performance"
    images.mkdir(exist_ok=True)
    info = machine()
    try:
        import matplotlib  # noqa: F401
    except ImportError:  # the smoke test runs without it; the real run has it
        pass
    else:
        plot_throughput(cases, images / "throughput.png")
        if extra.get("latencies_us"):
            plot_latency(extra["latencies_us"], images / "latency.png")
    (images / "results.json").write_text(
        json.dumps({"machine": info, "cases": {c.key: c.results for c in cases}, "extra": extra_summary(extra)}, indent=1)
    )
    lines = [
        "# Performance",
        "",
        "Generated by `python bench/run.py" + (" --quick" if extra["quick"] else "") + "`"
        f" ({extra['rounds']} rounds, {extra['elapsed']:.0f} s); do not edit by hand, run it again.",
        "",
        f"* **When**: {info['date']}; load average at the end {info['load']}",
        f"* **Machine**: {info['machine']}; Python {info['python']}",
        f"* **Versions**: {info['versions']}",
        "* **Setup**: loopback TCP; every server and every client in its own process.",
        "  rstreams: `rstreams serve` with the demo's `range` / `blob` publishers, read by the",
        "  rstreams client with `sub.batches()` (the per-element `async for` has its own row).",
        "  rsocket-py: request-stream with a minimal hand-written publisher, read with the same",
        "  demand window; request-response for the round trips; 256 KiB reads (its default of 1 KiB",
        "  would cap it far lower). Raw ceiling: a minimal trio server writing the same wire",
        "  messages (onNext 256 per `send_all`, 16 above 1 KiB; onNextPacked 16,384 per message;",
        "  64 KiB parts, one `send_all` each), read by a plain socket and `msgpack.Unpacker`.",
        "  *Probe*: that raw consumer reading from the rstreams server.",
        "* **Figures**: median over the rounds, min–max in brackets. Ratios are taken pair by pair",
        "  within each round, then summarised the same way. Absolute figures drift by ±30% on this",
        "  shared machine; the ratios govern.",
        "",
        "## Throughput and round trips",
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
    lines += ["| element size | rstreams MB/s | rsocket-py MB/s | raw ceiling MB/s |", "|---|---|---|---|"]
    for case in sorted((c for c in cases if c.element_size and c.key not in ("packed8", "onnext8_each", "ws8")), key=lambda c: c.element_size):
        values = {s: mbps(case, s) for s in ("rstreams", "rsocket", "raw")}
        lines.append(f"| {case.element_size:,} | " + " | ".join(fmt_summary(values[s]) for s in ("rstreams", "rsocket", "raw")) + " |")
    lines += ["", "## Latency", ""]
    if extra.get("latency_rounds"):
        rounds_ = extra["latency_rounds"]
        p99 = [r["p99"] for r in rounds_]
        lines += [
            "Publish-to-consume: the `stamps` publisher hands an element to `sink.send` 10,000 times a",
            "second, stamped with `time.perf_counter_ns()` (CLOCK_MONOTONIC, shared by the processes);",
            "the client subtracts it from its own clock when `async for` returns the element.",
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
    return {k: v for k, v in extra.items() if k != "latencies_us"}


def plot_throughput(cases: list[Case], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sized = sorted((c for c in cases if c.element_size and c.key not in ("packed8", "onnext8_each", "ws8")), key=lambda c: c.element_size)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for system, style in (("rstreams", "o-"), ("rsocket", "s-"), ("raw", "^--")):
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


def plot_latency(latencies: list[float], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ordered = sorted(latencies)
    fig, (hist, cdf) = plt.subplots(1, 2, figsize=(10, 4))
    cap = ordered[min(len(ordered) - 1, int(0.999 * len(ordered)))]
    hist.hist([v for v in ordered if v <= cap], bins=80)
    hist.set_xlabel("publish-to-consume latency (µs), up to p99.9")
    hist.set_ylabel("elements")
    hist.set_title("rstreams at 10,000 elements/s")
    n = len(ordered)
    cdf.plot(ordered, [1 - (i + 0.5) / n for i in range(n)])
    cdf.set_xscale("log")
    cdf.set_yscale("log")
    cdf.axvline(1000, color="red", linestyle=":", label="1 ms")
    cdf.set_xlabel("latency (µs)")
    cdf.set_ylabel("fraction of elements slower")
    cdf.set_title("tail (complementary CDF)")
    cdf.grid(True, which="both", alpha=0.3)
    cdf.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="2 rounds, a quarter of the work (under 2 minutes)")
    parser.add_argument("--rounds", type=int, default=0, help="rounds (default 5, or 2 with --quick)")
    parser.add_argument("--out", default=str(ROOT / "docs" / "PERFORMANCE.md"), help="where the table goes")
    args = parser.parse_args()
    ensure_environment()
    run(args)


if __name__ == "__main__":
    main()
