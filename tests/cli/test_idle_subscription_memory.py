"""What one idle subscription costs its client (issue 6: under 2 KiB).

The figure `bench/run.py` reports: a subscription opened with ``prefetch=0``
(subscribed, nothing asked for, so nothing ever arrives), measured with
tracemalloc in the client's process. The server is ``rstreams serve`` in a
process of its own, so none of its allocations are counted. The goal held
at about 1,170 bytes until the memory budget gave every subscription a
second deque (760 bytes empty), which took it past 2,048 unnoticed: the
benchmark reported it and no test failed.
"""

from __future__ import annotations

import gc
import tracemalloc

import rstreams

from ._support import ServeProcess

GOAL_BYTES = 2048
COUNT = 300


async def test_an_idle_subscription_costs_its_client_under_2_kib(demo_server: ServeProcess) -> None:
    async with rstreams.open_session(demo_server.url) as session:
        # Warm up first: the session's tables and caches grow with the
        # first subscriptions, not with each one.
        warm = [session.subscribe("range?count=1", prefetch=0) for _ in range(10)]
        for subscription in warm:
            await subscription.__aenter__()
        held = []
        gc.collect()
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            for _ in range(COUNT):
                subscription = session.subscribe("range?count=1", prefetch=0)
                await subscription.__aenter__()
                held.append(subscription)
            gc.collect()
            after = tracemalloc.get_traced_memory()[0]
        finally:
            tracemalloc.stop()
        for subscription in held + warm:
            assert subscription.statistics().buffered == 0  # (idle: nothing arrived)
            await subscription.__aexit__(None, None, None)
    # (The list that holds them is the test's, 8 bytes a subscription.)
    per_subscription = (after - before - 8 * COUNT) / COUNT
    assert per_subscription < GOAL_BYTES, per_subscription
