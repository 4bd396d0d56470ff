"""Demand arithmetic (rule 3.17 saturation), the DemandWindow top-up rule, and the adaptive window."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rstreams.protocol import UNBOUNDED, AdaptiveDemand, Demand, DemandWindow


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


# ---- AdaptiveDemand ---------------------------------------------------------


class _Subscriber:
    """What an adaptive window sees of its subscription: a model for the tests."""

    def __init__(self, element_bytes: int = 8, **kwargs: int) -> None:
        self.element_bytes = element_bytes
        self.outstanding = 0
        self.window = AdaptiveDemand(self.probe, **kwargs)
        self.requested = self.window.initial
        self.consumed = 0

    def probe(self) -> tuple[int, int]:
        return self.outstanding, self.element_bytes

    def consume(self, n: int = 1) -> int:
        self.consumed += n
        more = self.window.consumed(n)
        self.requested += more
        return more


def test_adaptive_starts_at_initial_and_tops_up_at_half() -> None:
    subscriber = _Subscriber(initial=16)
    assert subscriber.window.initial == 16
    subscriber.outstanding = 4
    assert [subscriber.consume() for _ in range(7)] == [0] * 7
    assert subscriber.consume() == 8  # neither starved nor drained: the same window
    assert subscriber.window.size == 16


def test_adaptive_doubles_while_the_consumer_is_starved() -> None:
    subscriber = _Subscriber(initial=16, maximum=128)
    sizes = []
    for _ in range(6):
        subscriber.window.starved()
        subscriber.outstanding = 3
        while not subscriber.consume():
            pass
        sizes.append(subscriber.window.size)
    assert sizes == [32, 64, 128, 128, 128, 128]
    assert subscriber.window.grown == 3


def test_adaptive_shrinks_while_everything_requested_waits_unconsumed() -> None:
    subscriber = _Subscriber(initial=64, minimum=4)
    sizes = []
    for _ in range(12):
        subscriber.outstanding = 0
        for _ in range(subscriber.window.size):
            subscriber.consume()
        sizes.append(subscriber.window.size)
    assert sizes[0] < 64
    assert sizes == sorted(sizes, reverse=True)
    assert sizes[-1] == 4
    # What was requested and not consumed never exceeds the largest window.
    assert subscriber.requested - subscriber.consumed <= 64


def test_adaptive_window_is_capped_by_the_byte_budget() -> None:
    subscriber = _Subscriber(element_bytes=1024 * 1024, initial=16, minimum=2, byte_budget=8 * 1024 * 1024)
    for _ in range(4):
        subscriber.window.starved()
        subscriber.outstanding = 1
        for _ in range(subscriber.window.size):
            subscriber.consume()
    assert subscriber.window.size == 8  # 8 MiB of 1 MiB elements
    assert subscriber.window.grown == 0


def test_adaptive_refuses_bad_bounds() -> None:
    with pytest.raises(ValueError):
        AdaptiveDemand(lambda: (0, 0), initial=2, minimum=4)
    with pytest.raises(ValueError):
        AdaptiveDemand(lambda: (0, 0), initial=8, maximum=4)
    with pytest.raises(ValueError):
        AdaptiveDemand(lambda: (0, 0), byte_budget=0)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(1, 40), st.booleans(), st.integers(0, 64), st.sampled_from([0, 1, 8, 1000, 2**20, 2**24])),
        max_size=200,
    )
)
def test_adaptive_bounds_hold_whatever_the_consumer_does(
    steps: list[tuple[int, bool, int, int]],
) -> None:
    """Fuzzed: the window stays within its bounds (the byte cap from the
    first top-up that saw the size), and the elements in flight (requested,
    not consumed) never exceed the largest window."""
    subscriber = _Subscriber(initial=16, minimum=4, maximum=4096, byte_budget=2**20)
    largest = subscriber.window.size
    for n, starved, outstanding, element_bytes in steps:
        in_flight = subscriber.requested - subscriber.consumed
        n = min(n, in_flight)  # nobody consumes what was not requested
        if n == 0:
            continue
        subscriber.element_bytes = element_bytes
        subscriber.outstanding = min(outstanding, in_flight - n)
        if starved:
            subscriber.window.starved()
        before = subscriber.window.size
        more = subscriber.consume(n)
        assert more >= 0
        size = subscriber.window.size
        assert 4 <= size <= 4096
        if element_bytes and (more or size != before):  # a top-up: the cap of this size applies
            assert size <= max(4, 2**20 // element_bytes)
        largest = max(largest, size)
        assert 0 <= subscriber.requested - subscriber.consumed <= largest


@settings(max_examples=200, deadline=None)
@given(
    st.booleans(),
    st.integers(1, 300),
    st.lists(
        st.tuples(st.integers(1, 50), st.booleans(), st.integers(0, 64), st.sampled_from([0, 1, 8, 2**20])),
        max_size=60,
    ),
)
def test_counting_a_run_before_the_top_up_at_once_changes_nothing(
    adaptive: bool, size: int, steps: list[tuple[int, bool, int, int]]
) -> None:
    """Fuzzed: a consumer that counts k < ``until_top_up`` elements in one
    call, then the one that reaches the top-up, gets the same requests and
    the same window as one that counts each (what Subscription's fast
    ``async for`` relies on)."""
    probe_answer = [0, 0]

    def make() -> DemandWindow | AdaptiveDemand:
        if adaptive:
            return AdaptiveDemand(lambda: (probe_answer[0], probe_answer[1]), initial=16, minimum=4, maximum=4096)
        return DemandWindow(size)

    each, at_once = make(), make()
    for run, starved, outstanding, element_bytes in steps:
        probe_answer[:] = [outstanding, element_bytes]
        until = at_once.until_top_up
        assert until == each.until_top_up and until >= 1
        run = min(run, until - 1)
        if starved and isinstance(each, AdaptiveDemand) and isinstance(at_once, AdaptiveDemand):
            each.starved()
            at_once.starved()
        requests_each = [each.consumed(1) for _ in range(run + 1)]
        assert requests_each[:-1] == [0] * run
        assert at_once.consumed(run) == 0
        assert at_once.consumed(1) == requests_each[-1]
        assert (at_once.size, at_once.until_top_up) == (each.size, each.until_top_up)


def test_until_top_up_counts_down_to_the_top_up() -> None:
    window = DemandWindow(10)
    assert window.until_top_up == 5
    window.consumed(3)
    assert window.until_top_up == 2
    assert window.consumed(1) == 0 and window.until_top_up == 1
    assert window.consumed(1) == 5 and window.until_top_up == 5
