"""What one idle subscription costs its client (issue 6: under 2 KiB).

The figure `bench/run.py` reports, measured by the same function
(``bench/_worker.py``'s ``rstreams_idle_memory``): subscriptions opened
with ``prefetch=0`` (subscribed, nothing asked for, so nothing ever
arrives), tracemalloc in the client's process. The server is ``rstreams
serve`` in a process of its own, so none of its allocations are counted.
The goal held at about 1,170 bytes until the memory budget gave every
subscription a second deque (760 bytes empty), which took it past 2,048
unnoticed: the benchmark reported it and no test failed.
"""

from __future__ import annotations

import sys

from ._support import ROOT, ServeProcess

if str(ROOT / "bench") not in sys.path:
    sys.path.insert(0, str(ROOT / "bench"))

from _worker import rstreams_idle_memory  # noqa: E402  (bench/, as the report measures it)

GOAL_BYTES = 2048
COUNT = 300


async def test_an_idle_subscription_costs_its_client_under_2_kib(demo_server: ServeProcess) -> None:
    measured = await rstreams_idle_memory(demo_server.port, COUNT)
    assert measured["buffered"] == 0  # (idle: nothing arrived)
    assert measured["bytes_per_subscription"] < GOAL_BYTES, measured
