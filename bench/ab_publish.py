"""A/B a publisher that calls ``await sink.send`` per element, between checkouts.

    python bench/ab_publish.py ROOT [COUNT] [SIZE] [fixed]

Starts ``rstreams serve _bench_app:app`` from the checkout at ROOT (a copy
of another commit's ``rstreams``, ``examples`` and ``bench``, say) and reads
its ``each`` publisher (COUNT elements of SIZE bytes, default 200,000 of 8,
each one ``await sink.send`` in a loop with nothing else in it) with ROOT's
rstreams: ``batches()`` at prefetch 4096, so that the publisher, not the
reader, sets the pace. Prints one JSON line: elements/s, the server's CPU
per element (from /proc, in 10 ms ticks: use enough elements) and the
client's (process time). ``fixed`` reads ``each_fixed`` instead: the same
loop on a fixed-size route, ``element_size=8`` (so SIZE must be 8; ROOT's
``bench/_bench_app.py`` must have it).

On a shared machine absolute figures drift from minute to minute: alternate
runs of the two roots and compare medians (NOTES.md, "Runs of send").
"""

from __future__ import annotations

import json
import os
import sys

from _proc import Costs, serve_checkout, wait_listening

root = os.path.abspath(sys.argv[1])
count = int(sys.argv[2]) if len(sys.argv) > 2 else 200_000
size = int(sys.argv[3]) if len(sys.argv) > 3 else 8
name = "each_fixed" if len(sys.argv) > 4 and sys.argv[4] == "fixed" else "each"
sys.path.insert(0, root)
os.chdir(root)

import rstreams  # noqa: E402  (from ROOT)
import trio  # noqa: E402

server, port = serve_checkout(root, "_bench_app:app", "--app-dir", os.path.join(root, "bench"))


async def main() -> None:
    wait_listening(port)
    url = f"tcp://127.0.0.1:{port}"
    elements = 0
    async with rstreams.open_session(url) as session:
        costs = Costs(server.pid)
        async with session.subscribe(f"{name}?count={count}&size={size}", prefetch=4096) as subscription:
            async for batch in subscription.batches():
                elements += len(batch)
        wall, client, served = costs.taken()
    assert elements == count, elements
    print(
        json.dumps(
            {
                "el_s": round(elements / wall),
                "server_us_per_el": round(served / elements * 1e6, 2),
                "client_us_per_el": round(client / elements * 1e6, 2),
            }
        ),
        flush=True,
    )


try:
    trio.run(main)
finally:
    server.terminate()
    server.wait()
