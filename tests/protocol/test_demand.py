"""Demand arithmetic (rule 3.17 saturation) and the DemandWindow top-up rule."""

from __future__ import annotations

import pytest

from rstreams.protocol import UNBOUNDED, Demand, DemandWindow


def test_demand_starts_empty() -> None:
    demand = Demand()
    assert demand.outstanding == 0
    assert not demand.unbounded
    assert demand.take(0)
    assert not demand.take(1)


def test_demand_is_cumulative() -> None:
    demand = Demand(3)
    demand.add(2)
    assert demand.outstanding == 5


@pytest.mark.parametrize("n", [0, -1, -(2**63)])
def test_adding_nonpositive_demand_is_refused(n: int) -> None:
    demand = Demand(4)
    with pytest.raises(ValueError, match="3.9"):
        demand.add(n)
    assert demand.outstanding == 4


def test_take_consumes_only_when_enough() -> None:
    demand = Demand(5)
    assert demand.take(3)
    assert demand.outstanding == 2
    assert not demand.take(3)
    assert demand.outstanding == 2  # a refused take changes nothing
    assert demand.take(2)
    assert demand.outstanding == 0


@pytest.mark.parametrize(
    "additions",
    [[UNBOUNDED], [UNBOUNDED - 1, 1], [UNBOUNDED - 1, 5], [2**64 - 1], [UNBOUNDED, UNBOUNDED], [2**100]],
    ids=["exactly", "sum exactly", "sum past", "largest wire int", "twice", "huge"],
)
def test_demand_saturates_at_unbounded(additions: list[int]) -> None:
    demand = Demand()
    for n in additions:
        demand.add(n)
    assert demand.outstanding == UNBOUNDED
    assert demand.unbounded


def test_unbounded_demand_is_never_used_up() -> None:
    demand = Demand(UNBOUNDED)
    assert demand.take(UNBOUNDED)
    assert demand.take(10**6)
    assert demand.outstanding == UNBOUNDED


def test_just_below_unbounded_is_counted() -> None:
    demand = Demand(UNBOUNDED - 1)
    assert not demand.unbounded
    assert demand.take(1)
    assert demand.outstanding == UNBOUNDED - 2


def test_initial_demand_saturates() -> None:
    assert Demand(2**64 - 1).outstanding == UNBOUNDED
    assert Demand(UNBOUNDED).unbounded


@pytest.mark.parametrize("initial", [0, 1, UNBOUNDED - 1, UNBOUNDED, 2**64 - 1])
def test_initial_demand_is_what_adding_it_gives(initial: int) -> None:
    added = Demand()
    if initial:
        added.add(initial)
    assert Demand(initial).outstanding == added.outstanding


def test_negative_initial_demand_is_refused() -> None:
    with pytest.raises(ValueError, match="3.9"):
        Demand(-1)


def test_demand_repr() -> None:
    assert repr(Demand(3)) == "Demand(3)"
    assert repr(Demand(UNBOUNDED)) == "Demand(unbounded)"


# ---- DemandWindow -------------------------------------------------------------


@pytest.mark.parametrize("size", [0, -1])
def test_window_size_must_be_positive(size: int) -> None:
    with pytest.raises(ValueError):
        DemandWindow(size)


def test_window_requests_its_size_up_front() -> None:
    assert DemandWindow(16).initial == 16


def test_window_tops_up_exactly_what_was_consumed_after_half() -> None:
    window = DemandWindow(10)
    assert [window.consumed() for _ in range(4)] == [0, 0, 0, 0]
    assert window.consumed() == 5  # half the window consumed: request all five
    assert [window.consumed() for _ in range(4)] == [0, 0, 0, 0]
    assert window.consumed() == 5


def test_window_top_up_counts_batches() -> None:
    window = DemandWindow(10)
    assert window.consumed(3) == 0
    assert window.consumed(4) == 7
    assert window.consumed(12) == 12  # a batch larger than the window is requested whole


@pytest.mark.parametrize("size", [1, 2, 3])
def test_tiny_windows_top_up_after_every_element(size: int) -> None:
    window = DemandWindow(size)
    assert [window.consumed() for _ in range(5)] == [1] * 5


def test_window_keeps_outstanding_demand_above_half() -> None:
    # Simulate a subscriber: outstanding demand never drops below size - size//2.
    size = 8
    window = DemandWindow(size)
    outstanding = window.initial
    lowest = outstanding
    for _ in range(100):
        outstanding -= 1
        lowest = min(lowest, outstanding)
        outstanding += window.consumed()
        assert outstanding <= size
    assert lowest == size - size // 2
