"""One stream read through each bridge by URL, with CPU per element on both sides.

    python bench/bridge_stream.py ROOT [--schemes tcp,mm2,relink,emp,epoxy] [--count N] [--size BYTES] [--prefetch N]

Starts ``rstreams serve rstreams.demo:app`` from the checkout at ROOT (a copy
of another commit's ``rstreams``, ``bridges`` and ``bench``, say) with every
bridge on its own loopback port, then reads ``blob?count=N&size=BYTES``
through ``rstreams.connect(URL)`` and ``batches()`` once per scheme, with
ROOT's rstreams, as ``rstreams sub SCHEME://...`` would (default settings:
no prefetch, so the demand adapts). Prints one JSON line per scheme:
elements a second, MB/s, the client's CPU per element (process time) and
the server's (from /proc, in 10 ms ticks: use enough elements).

``emp`` and ``epoxy`` carry a stream as one response, so their streams are
bounded by the response limit (4 MiB): a larger stream is reported as the
error it is. Interleave runs of two roots for an A/B, as with
``ab_stream.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from _proc import Costs, free_port, serve_checkout, wait_listening

parser = argparse.ArgumentParser()
parser.add_argument("root")
parser.add_argument("--schemes", default="tcp,mm2,relink,emp,epoxy")
parser.add_argument("--count", type=int, default=20000)
parser.add_argument("--size", type=int, default=8)
parser.add_argument("--prefetch", type=int, default=None)
args = parser.parse_args()
root = os.path.abspath(args.root)
sys.path.insert(0, root)
os.chdir(root)

import rstreams  # noqa: E402  (from ROOT)
import trio  # noqa: E402

ports = {scheme: free_port() for scheme in ("emp", "epoxy", "mm2", "relink")}
server, tcp_port = serve_checkout(
    root,
    "rstreams.demo:app",
    "--emp", f"127.0.0.1:{ports['emp']}",
    "--epoxy", f"127.0.0.1:{ports['epoxy']}",
    "--micromsg2", f"127.0.0.1:{ports['mm2']}",
    "--relink", f"127.0.0.1:{ports['relink']}",
)
ports["tcp"] = tcp_port


async def read(scheme: str) -> dict[str, object]:
    url = f"{scheme}://127.0.0.1:{ports[scheme]}"
    options: dict[str, object] = {} if args.prefetch is None else {"prefetch": args.prefetch}
    elements = nbytes = 0
    async with rstreams.connect(url) as peer:
        costs = Costs(server.pid)
        try:
            async with peer.subscribe(f"blob?count={args.count}&size={args.size}", **options) as subscription:
                async for batch in subscription.batches():
                    elements += len(batch)
                    nbytes += sum(map(len, batch))
        except rstreams.SubscriptionError as exc:
            return {"scheme": scheme, "error": str(exc)}
        wall, client, served = costs.taken()
    assert elements == args.count, elements
    return {
        "scheme": scheme,
        "el_s": round(elements / wall),
        "MBps": round(nbytes / wall / 1e6, 1),
        "client_us_per_el": round(client / elements * 1e6, 1),
        "server_us_per_el": round(served / elements * 1e6, 1),
    }


async def main() -> None:
    for port in ports.values():
        wait_listening(port)
    for scheme in args.schemes.split(","):
        print(json.dumps(await read(scheme)), flush=True)


try:
    trio.run(main)
finally:
    server.terminate()
    server.wait()
