"""``rstreams._snapshots``: the statistics snapshots peers ask for ($stats,
/stats, /metrics) are fresh within a CPU budget and shared beyond it, so
that no number of askers buys more than a set share of the server's core."""

from __future__ import annotations

import json
from typing import Any

import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

import rstreams
from rstreams._cpu_budget import CpuBudget
from rstreams._snapshots import SharedStatistics

from ._support import standard_app

TIMEOUT = 20


class FakeTime:
    """A monotonic clock and a cost timer the test moves by hand."""

    def __init__(self) -> None:
        self.now = 0.0
        self.spent = 0.0  # what the timer reads: advanced by each snapshot's cost

    def clock(self) -> float:
        return self.now

    def timer(self) -> float:
        return self.spent


def counting(fake: FakeTime, cost: float) -> tuple[list[int], Any]:
    taken: list[int] = []

    def take() -> dict[str, Any]:
        fake.spent += cost
        taken.append(len(taken))
        return {"n": len(taken)}

    return taken, take


def test_fresh_within_the_budget_then_the_newest_is_shared_until_it_refills() -> None:
    fake = FakeTime()
    taken, take = counting(fake, 3 / 64)  # (binary fractions: the sums are exact)
    shared = SharedStatistics(take, CpuBudget(1 / 8, 1 / 16, clock=fake.clock, timer=fake.timer))
    # 8/64 of burst: 5/64 and 2/64 left, then -1/64 (the last one overdraws).
    first = [shared.recent() for _ in range(3)]
    assert [snapshot.statistics["n"] for snapshot in first] == [1, 2, 3]
    assert shared.recent() is first[-1] and shared.recent() is first[-1]
    assert (shared.taken, shared.shared) == (3, 2)
    fake.now += 1 / 4  # refills 1/64: back to 0, not above
    assert shared.recent() is first[-1]
    fake.now += 1 / 8  # 1/128 above 0: one fresh one
    assert shared.recent().statistics["n"] == 4
    assert len(taken) == 4


def test_each_encoding_is_made_once_and_charged() -> None:
    # A timer that moves a second each time it is read: every measurement
    # (a snapshot, an encoding) costs exactly 1 s.
    fake = FakeTime()
    ticks = iter(range(1_000))
    take = rstreams.Server(standard_app()).statistics
    shared = SharedStatistics(take, CpuBudget(0.1, 0.05, clock=fake.clock, timer=lambda: float(next(ticks))))
    snapshot = shared.recent()  # 0.1 - 1 = -0.9
    record = snapshot.record()  # -1.9: the encoding is charged too
    assert json.loads(record) == snapshot.statistics and "time" in snapshot.statistics
    assert snapshot.record() is record and snapshot.metrics() is snapshot.metrics()  # -2.9 (metrics once)
    fake.now += 40.0  # +2.0: -0.9 (without the encodings' charges it would be +1.1)
    assert shared.recent() is snapshot
    fake.now += 20.0  # +1.0: 0.1
    assert shared.recent() is not snapshot


@pytest.mark.parametrize("burst, share", [(0.0, 0.05), (0.1, 0.0), (0.1, 1.5), (-1.0, 0.1)])
def test_a_budget_must_be_positive(burst: float, share: float) -> None:
    with pytest.raises(ValueError):
        CpuBudget(burst, share)


def test_a_budget_charges_what_a_block_takes_even_when_it_raises() -> None:
    fake = FakeTime()
    budget = CpuBudget(1 / 4, 1 / 8, clock=fake.clock, timer=fake.timer)
    with pytest.raises(KeyError), budget.spend():
        fake.spent += 1 / 2
        raise KeyError("the work failed")
    assert not budget.allows() and budget.seconds_until_allowed() == 2.0  # a debt of 1/4 at 1/8 a second
    fake.now += 2.0
    assert not budget.allows()  # (back to 0 exactly: not above)
    fake.now += 1 / 8
    assert budget.allows() and budget.seconds_until_allowed() == 0.0
    fake.now += 100.0  # the refill stops at the burst
    budget.charge(1 / 4)
    assert not budget.allows()


@settings(max_examples=200, deadline=None)
@given(
    steps=st.lists(
        st.tuples(st.floats(min_value=0.0, max_value=2.0), st.floats(min_value=0.0, max_value=0.05)),
        min_size=1,
        max_size=60,
    ),
    asks=st.lists(st.integers(min_value=0, max_value=20), min_size=60, max_size=60),
)
def test_snapshots_never_cost_more_than_the_budget(steps: list[tuple[float, float]], asks: list[int]) -> None:
    # Any sequence of waits and bursts of asks, snapshots of any cost: what
    # the snapshots took never exceeds the burst, plus the share of the time
    # gone by, plus one snapshot's overdraft; and an ask is answered fresh
    # whenever the budget is above 0.
    fake = FakeTime()
    costs: list[float] = []
    cost_now = [0.0]

    def take() -> dict[str, Any]:
        fake.spent += cost_now[0]
        costs.append(cost_now[0])
        return {}

    burst, share = 0.1, 0.05
    shared = SharedStatistics(take, CpuBudget(burst, share, clock=fake.clock, timer=fake.timer))
    for (wait, cost), count in zip(steps, asks):
        fake.now += wait
        cost_now[0] = cost
        for _ in range(count):
            before = shared.taken
            budget_left = shared.budget.allows()
            shared.recent()
            assert (shared.taken == before + 1) == (budget_left or before == 0)
        assert sum(costs) <= burst + share * fake.now + max(costs, default=0.0) + 1e-9


async def test_many_stats_streams_share_snapshots_and_each_still_gets_its_records() -> None:
    # A budget that one snapshot spends: every stream after the first shares
    # it, and waits for the refill for its next; each stream still gets a
    # record per request, each newer than its last.
    server = rstreams.Server(standard_app())
    snapshots = server._snapshots
    snapshots.budget = CpuBudget(1e-9, 0.002)
    streams, records = 20, 3
    received: dict[int, list[dict[str, Any]]] = {}
    with trio.fail_after(TIMEOUT):
        async with trio.open_nursery() as nursery:
            listeners = await nursery.start(server.serve_tcp, "127.0.0.1", 0)
            url = f"tcp://127.0.0.1:{rstreams.listener_port(listeners[0])}"
            async with rstreams.open_session(url) as client:

                async def read(index: int) -> None:
                    name = f"$stats?interval=0.01&count={records}"
                    received[index] = [json.loads(raw) for raw in await client.fetch(name, records)]

                async with trio.open_nursery() as readers:
                    for index in range(streams):
                        readers.start_soon(read, index)
            nursery.cancel_scope.cancel()
    assert sorted(received) == list(range(streams))
    for got in received.values():
        assert len(got) == records
        times = [record["time"] for record in got]
        assert times == sorted(set(times)), times  # a newer snapshot each time
        assert all("sessions" in record and "totals" in record for record in got)
    assert snapshots.shared >= (streams - 1) * records // 2
    assert snapshots.taken < streams * records
