"""``Connection.events(max_events)``: parsing a large read in slices.

The I/O layer asks for a bounded number of events at a time so it can act on
the first of them (write their answers) before it parses the rest; the
slices must add up to exactly what one unbounded call returns.
"""

from __future__ import annotations

import hypothesis
import hypothesis.strategies as st
import pytest

from helpers import ConnectionPair
from rstreams.protocol import Elements, Event, OnNext, RemoteProtocolError, Subscribe, encode


def subscribes(pair: ConnectionPair, count: int) -> bytes:
    for index in range(count):
        pair.client.subscribe(f"range?count={index}", 1)
    return ConnectionPair.drain(pair.client)


def all_events(pair: ConnectionPair, max_events: int) -> list[list[Event]]:
    slices = []
    while True:
        events = pair.server.events(max_events)
        if not events:
            return slices
        assert len(events) <= max_events + 1  # a run flushed with the message that ends it
        slices.append(events)


def test_events_stop_at_the_budget_and_resume(pair: ConnectionPair) -> None:
    pair.server.receive_data(subscribes(pair, 100))
    slices = all_events(pair, 32)
    assert [len(s) for s in slices] == [32, 32, 32, 4]
    names = [event.publisher for s in slices for event in s if isinstance(event, Subscribe)]
    assert names == [f"range?count={index}" for index in range(100)]


@hypothesis.settings(max_examples=60, deadline=None)
@hypothesis.given(
    count=st.integers(min_value=0, max_value=80),
    budget=st.integers(min_value=1, max_value=40),
    cut=st.integers(min_value=0, max_value=4000),
)
def test_slices_add_up_to_one_unbounded_call(count: int, budget: int, cut: int) -> None:
    """Whatever the budget, and wherever the read is cut, the events are the same."""
    whole = ConnectionPair()
    whole.open()
    sliced = ConnectionPair()
    sliced.open()
    data = subscribes(whole, count)
    assert subscribes(sliced, count) == data
    whole.server.receive_data(data)
    expected = whole.server.events()
    cut = min(cut, len(data))
    got: list[Event] = []
    for part in (data[:cut], data[cut:]):
        sliced.server.receive_data(part)
        for events in all_events(sliced, budget):
            got.extend(events)
    assert got == expected


def test_a_run_of_on_next_is_one_event_within_the_budget(pair: ConnectionPair) -> None:
    first = pair.open_stream(pair.client, initial_demand=1000)
    second = pair.open_stream(pair.client, initial_demand=1000)
    data = b"".join(encode(OnNext(subscriber=s, element=b"x")) for s in (first,) * 10 + (second,) * 10 + (first,) * 10)
    pair.client.receive_data(data)
    slices = []
    while events := pair.client.events(2):
        slices.append(events)
    assert all(isinstance(event, Elements) for s in slices for event in s)
    assert sum(len(event.elements) for s in slices for event in s) == 30


def test_a_run_flushed_with_a_control_message_still_stops_the_slice(pair: ConnectionPair) -> None:
    """onNext, then subscribes: the run and the first subscribe come out
    together, past a budget of 1, and parsing still stops there."""
    first = pair.open_stream(pair.client, initial_demand=1000)
    pair.client.receive_data(
        encode(OnNext(subscriber=first, element=b"x"))
        + encode(Subscribe(publisher="a", subscriber=1, initial_demand=1))
        + encode(Subscribe(publisher="b", subscriber=2, initial_demand=1))
    )
    head = pair.client.events(1)
    assert [type(event) for event in head] == [Elements, Subscribe]
    assert [event.publisher for event in pair.client.events(1)] == ["b"]  # type: ignore[attr-defined]


def test_an_error_after_the_budget_still_comes_in_order(pair: ConnectionPair) -> None:
    data = subscribes(pair, 3) + b"\xc1"  # 0xc1 is never valid msgpack
    pair.server.receive_data(data)
    assert len(pair.server.events(2)) == 2
    assert len(pair.server.events(2)) == 1
    with pytest.raises(RemoteProtocolError):
        pair.server.events(2)


def test_the_budget_counts_answers_taken_in_one_step(pair: ConnectionPair) -> None:
    """subscribed and onComplete take a shorter path than other control
    messages; the budget still counts them."""
    ids = [pair.client.subscribe("range", 1) for _ in range(40)]
    pair.send(pair.client)
    for subscriber in ids:
        pair.server.accept(subscriber)
        pair.server.complete(subscriber)
    pair.client.receive_data(ConnectionPair.drain(pair.server))
    slices = []
    while events := pair.client.events(16):
        slices.append(events)
    assert [len(s) for s in slices] == [16] * 5
