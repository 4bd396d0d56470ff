"""A/B sequential or concurrent ``fetch`` round trips, or the 10,000 el/s latency
stream, between checkouts, with CPU per operation and context switches on both sides.

    python bench/ab_latency.py ROOT rt|rt64|lat [--n N] [--server-poll S] [--client-poll S] [--dump FILE]

Starts ``rstreams serve _bench_app:app`` from the checkout at ROOT (a copy of
another commit's ``rstreams``, ``examples`` and ``bench/_bench_app.py``, say)
and runs, with ROOT's rstreams: ``rt``, N ``session.fetch("range?count=1",
1)`` one after another (the ``rt_seq`` row); ``rt64``, the same from 64
tasks at once (the ``rt_64`` row); ``lat``, ``stamps?rate=10000``
read with ``async for`` at prefetch 256 (the ``latency`` row), N elements.
Prints one JSON line: the rate (or the percentiles, in µs, and the rate
held), CPU per operation (µs; the client's from ``process_time``, the
server's from /proc, in 10 ms ticks: use enough operations) and each side's
voluntary and involuntary context switches. ``--dump`` writes the stream's
per-element latencies in arrival order, to find out which elements are
slow. ``--*-poll`` sets ``busy_poll`` (0 turns polling off).

On a shared machine absolute figures drift from minute to minute: alternate
runs of the two roots (several each, busy loops beside them for the loaded
case) and compare medians; issue 19's item 4 was measured this way (see
NOTES.md).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from _proc import Costs, percentiles, serve_checkout, wait_listening
from _worker import round_trips_on, stamp_latencies

parser = argparse.ArgumentParser()
parser.add_argument("root")
parser.add_argument("case", choices=["rt", "rt64", "lat"])
parser.add_argument("--n", type=int, default=None)
parser.add_argument("--server-poll", type=float, default=None)
parser.add_argument("--client-poll", type=float, default=None)
parser.add_argument("--dump", default=None)
args = parser.parse_args()
root = os.path.abspath(args.root)
count = args.n or {"rt": 4000, "rt64": 20000}.get(args.case, 20000)
sys.path.insert(0, root)
os.chdir(root)

import rstreams  # noqa: E402  (from ROOT)
import trio  # noqa: E402

options = ["--app-dir", os.path.join(root, "bench")]
if args.server_poll is not None:
    options += ["--busy-poll", str(args.server_poll)]
server, port = serve_checkout(root, "_bench_app:app", *options)


def switches(pid: int) -> tuple[int, int]:
    """(voluntary, involuntary) context switches of ``pid``'s main thread."""
    found = {}
    for line in open(f"/proc/{pid}/status"):
        key, _, value = line.partition(":")
        if key in ("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches"):
            found[key] = int(value)
    return found["voluntary_ctxt_switches"], found["nonvoluntary_ctxt_switches"]


async def main() -> None:
    url = f"tcp://127.0.0.1:{port}"
    wait_listening(port)
    config = rstreams.SessionConfig() if args.client_poll is None else rstreams.SessionConfig(busy_poll=args.client_poll)
    async with rstreams.open_session(url, config=config) as session:
        costs = Costs(server.pid)
        server_switches, client_switches = switches(server.pid), switches(os.getpid())
        out: dict[str, Any] = {}
        if args.case in ("rt", "rt64"):
            await round_trips_on(session, count, 1 if args.case == "rt" else 64)
            out["rt_s"] = round(count / costs.taken()[0])
        else:
            read = await stamp_latencies(session, 10000, count)
            latencies = read["latencies_us"]
            figures = percentiles(latencies)
            out.update({key: round(figures[key]) for key in ("p50", "p99", "p999", "max")})
            out["rate"] = round((len(latencies) - 1) / read["span_s"])
            if args.dump:
                with open(args.dump, "w") as file:
                    json.dump(latencies, file)
        _, client, served = costs.taken()
        out["client_cpu_us"] = round(client / count * 1e6, 1)
        out["server_cpu_us"] = round(served / count * 1e6, 1)
        now_server, now_client = switches(server.pid), switches(os.getpid())
        out["server_switches"] = [now_server[0] - server_switches[0], now_server[1] - server_switches[1]]
        out["client_switches"] = [now_client[0] - client_switches[0], now_client[1] - client_switches[1]]
        print(json.dumps(out), flush=True)


try:
    trio.run(main)
finally:
    server.terminate()
    server.wait()
