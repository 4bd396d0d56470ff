"""A/B one stream read from the demo's ``blob``, with CPU per element on both sides.

    python bench/ab_stream.py ROOT each|batches COUNT SIZE [PREFETCH] [nocopy]

Starts ``rstreams serve examples.demo:app`` from the checkout at ROOT (a copy
of another commit's ``rstreams`` and ``examples``, say), reads
``blob?count=COUNT&size=SIZE`` with ``async for`` or ``batches()`` using
ROOT's rstreams, and prints one JSON line: MB/s, the client's CPU per
element (process time) and the server's (from /proc, so in 10 ms ticks:
use enough elements). ``nocopy`` subscribes with ``copy=False`` (large
elements as read-only memoryviews; ROOT must have it). Interleave runs of two roots for an A/B; issue 19's
item 3 was measured this way (see NOTES.md).
"""

from __future__ import annotations

import json
import os
import sys

from _proc import Costs, serve_checkout, wait_listening

root, mode, count, size = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
prefetch = int(sys.argv[5]) if len(sys.argv) > 5 else None
copy = not (len(sys.argv) > 6 and sys.argv[6] == "nocopy")
sys.path.insert(0, root)
os.chdir(root)

import rstreams  # noqa: E402  (from ROOT)
import trio  # noqa: E402

server, port = serve_checkout(root, "examples.demo:app")


async def main() -> None:
    wait_listening(port)
    options: dict[str, object] = {} if prefetch is None else {"prefetch": prefetch}
    if not copy:
        options["copy"] = False
    elements = nbytes = 0
    async with rstreams.open_session(f"tcp://127.0.0.1:{port}") as session:
        costs = Costs(server.pid)
        async with session.subscribe(f"blob?count={count}&size={size}", **options) as subscription:
            if mode == "batches":
                async for batch in subscription.batches():
                    elements += len(batch)
                    nbytes += sum(map(len, batch))
            else:
                async for element in subscription:
                    elements += 1
                    nbytes += len(element)
        wall, client, served = costs.taken()
    assert elements == count, elements
    print(
        json.dumps(
            {
                "MBps": nbytes / wall / 1e6,
                "client_us_per_el": client / elements * 1e6,
                "server_us_per_el": served / elements * 1e6,
                "wall": wall,
            }
        )
    )


try:
    trio.run(main)
finally:
    server.terminate()
    server.wait()
