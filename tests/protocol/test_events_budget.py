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
from rstreams.protocol import Cancel, Elements, Event, OnNext, RemoteProtocolError, Subscribe, encode


def subscribes(pair: ConnectionPair, count: int) -> bytes:
    for index in range(count):
        pair.client.subscribe(f"range?count={index}", 1)
    return ConnectionPair.drain(pair.client)


def all_events(pair: ConnectionPair, max_events: int) -> list[list[Event]]:
    slices = []
    while True:
        events = pair.server.events(max_events)
        if not events:
            if pair.server.parse_paused:
                continue  # (messages that left no event: more to parse)
            return slices
        assert len(events) <= max_events + 1  # a run flushed with the message that ends it
        slices.append(events)


def unbounded_events(pair: ConnectionPair, data: bytes) -> list[Event]:
    pair.server.receive_data(data)
    return pair.server.events()


def sliced_events(pair: ConnectionPair, data: bytes, budget: int, cut: int) -> list[Event]:
    """The events of ``data`` cut in two reads at ``cut``, taken ``budget``
    at a time; after each read, nothing is left paused."""
    cut = min(cut, len(data))
    got: list[Event] = []
    for part in (data[:cut], data[cut:]):
        pair.server.receive_data(part)
        for events in all_events(pair, budget):
            got.extend(events)
        assert not pair.server.parse_paused
    return got


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
    assert sliced_events(sliced, data, budget, cut) == unbounded_events(whole, data)


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


def finished_stream(pair: ConnectionPair) -> int:
    """A stream the server has answered and completed: a cancel of it is late, and dropped."""
    subscriber = pair.client.subscribe("range", 1)
    pair.send(pair.client)
    pair.server.accept(subscriber)
    pair.server.complete(subscriber)
    pair.send(pair.server)
    return subscriber


def test_messages_that_leave_no_event_count_toward_the_budget(pair: ConnectionPair) -> None:
    # A read of cancels naming a finished stream gives no event: parsed in
    # one call it was 65,000 messages in one step of the run loop while
    # every other connection waited. Now each call handles at most the
    # budget's worth, says there is more (parse_paused), and the subscribe
    # behind them still comes out, in order.
    done = finished_stream(pair)
    data = encode(Cancel(subscriber=done)) * 1000 + encode(Subscribe(publisher="after", subscriber=done + 1, initial_demand=1))
    pair.server.receive_data(data)
    calls = 0
    got: list[Event] = []
    while True:
        events = pair.server.events(32)
        calls += 1
        got += events
        if not events and not pair.server.parse_paused:
            break
        assert len(events) <= 32
    assert [event.publisher for event in got] == ["after"]  # type: ignore[attr-defined]
    assert calls >= 1000 // 32
    assert pair.server.events() == [] and not pair.server.parse_paused


@hypothesis.settings(max_examples=60, deadline=None)
@hypothesis.given(
    pattern=st.lists(st.sampled_from(["subscribe", "late cancel"]), max_size=120),
    budget=st.integers(min_value=1, max_value=40),
    cut=st.integers(min_value=0, max_value=4000),
)
def test_slices_with_eventless_messages_add_up_to_one_unbounded_call(pattern: list[str], budget: int, cut: int) -> None:
    """Subscribes among late cancels: whatever the budget and the cut, the
    events are those of one unbounded call, and a call returns nothing only
    when it has parsed everything or says it paused."""
    pairs = []
    for _ in range(2):
        pair = ConnectionPair()
        pair.open()
        done = finished_stream(pair)
        pairs.append(pair)
    messages = []
    next_id = done + 1
    for kind in pattern:
        if kind == "subscribe":
            messages.append(encode(Subscribe(publisher=f"p{next_id}", subscriber=next_id, initial_demand=1)))
            next_id += 1
        else:
            messages.append(encode(Cancel(subscriber=done)))
    data = b"".join(messages)
    whole, sliced = pairs
    assert sliced_events(sliced, data, budget, cut) == unbounded_events(whole, data)
