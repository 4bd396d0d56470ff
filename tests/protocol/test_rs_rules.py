"""Reactive Streams rules, checked at the level of the protocol machine.

Each test is named after the rule of the Reactive Streams specification
(https://github.com/reactive-streams/reactive-streams-jvm) that it checks,
as carried over the wire by the rstreams profile.
"""

from __future__ import annotations

import pytest

from helpers import ConnectionPair, decode, elements_of
from rstreams.protocol import (
    UNBOUNDED,
    Cancel,
    ConnectionState,
    InvalidRequest,
    LocalProtocolError,
    OnComplete,
    OnError,
    OnNext,
    OnNextLastPart,
    OnNextPacked,
    OnNextPart,
    RemoteProtocolError,
    Request,
    Subscribe,
    encode,
)


# ---- 1.1: never more elements than requested ------------------------------------


def test_rule_1_1_publisher_cannot_queue_more_than_requested(pair: ConnectionPair) -> None:
    subscriber = pair.open_stream(pair.client, initial_demand=3)
    pair.server.send_elements(subscriber, [b"1", b"2"])
    with pytest.raises(LocalProtocolError):
        pair.server.send_elements(subscriber, [b"3", b"4"])
    pair.server.send_elements(subscriber, [b"3"])
    with pytest.raises(LocalProtocolError):
        pair.server.send_elements(subscriber, [b"4"])
    assert pair.server.publication_demand(subscriber) == 0
    assert elements_of(pair.send(pair.server), subscriber) == [b"1", b"2", b"3"]
    # More demand, more elements.
    pair.client.request(subscriber, 1)
    pair.send(pair.client)
    pair.server.send_elements(subscriber, [b"4"])
    assert elements_of(pair.send(pair.server), subscriber) == [b"4"]


def test_rule_1_1_fixed_size_publisher_cannot_queue_more_than_requested(pair: ConnectionPair) -> None:
    subscriber = pair.open_stream(pair.client, initial_demand=2, element_size=1)
    with pytest.raises(LocalProtocolError):
        pair.server.send_packed(subscriber, b"abc")
    with pytest.raises(LocalProtocolError):
        pair.server.send_elements(subscriber, [b"a", b"b", b"c"])
    assert pair.server.publication_demand(subscriber) == 2


@pytest.mark.parametrize(
    "overrun",
    [
        [OnNext(subscriber=1, element=b"3")],
        [OnNextPacked(subscriber=1, count=1, messages=b"3")],
        [OnNextPart(subscriber=1, element=0, data=b"3"), OnNextLastPart(subscriber=1, element=0, data=b"")],
    ],
    ids=["onNext", "onNextPacked", "split element"],
)
def test_rule_1_1_subscriber_detects_an_overrun(pair: ConnectionPair, overrun: list[object]) -> None:
    subscriber = pair.open_stream(pair.client, initial_demand=2, element_size=1)
    assert subscriber == 1
    allowed = encode(OnNext(subscriber=1, element=b"1")) + encode(OnNext(subscriber=1, element=b"2"))
    assert elements_of(pair.deliver(pair.client, allowed), 1) == [b"1", b"2"]
    with pytest.raises(RemoteProtocolError, match="demand"):
        pair.deliver(pair.client, b"".join(encode(message) for message in overrun))  # type: ignore[arg-type]
    assert pair.client.state is ConnectionState.ERROR


# ---- 1.7: terminal signals are exclusive and final ---------------------------------


def test_rule_1_7_publisher_cannot_signal_after_a_terminal(pair: ConnectionPair) -> None:
    completed = pair.open_stream(pair.client, initial_demand=5, element_size=1)
    failed = pair.open_stream(pair.client, initial_demand=5, element_size=1)
    pair.server.complete(completed)
    pair.server.fail(failed, "boom")
    for subscriber in (completed, failed):
        with pytest.raises(LocalProtocolError):
            pair.server.send_elements(subscriber, [b"x"])
        with pytest.raises(LocalProtocolError):
            pair.server.send_packed(subscriber, b"x")
        with pytest.raises(LocalProtocolError):
            pair.server.complete(subscriber)
        with pytest.raises(LocalProtocolError):
            pair.server.fail(subscriber, "again")
    assert pair.send(pair.server) == [OnComplete(subscriber=completed), OnError(subscriber=failed, error="boom")]


@pytest.mark.parametrize("terminal", ["onComplete", "onError"])
def test_rule_1_7_subscriber_refuses_signals_after_a_terminal(pair: ConnectionPair, terminal: str) -> None:
    subscriber = pair.open_stream(pair.client, initial_demand=5)
    if terminal == "onComplete":
        message: OnComplete | OnError = OnComplete(subscriber=subscriber)
    else:
        message = OnError(subscriber=subscriber, error="x")
    assert pair.deliver(pair.client, encode(message)) == [message]
    with pytest.raises(RemoteProtocolError):
        pair.deliver(pair.client, encode(OnNext(subscriber=subscriber, element=b"late")))


# ---- 2.8: elements may still arrive after cancel --------------------------------------


def test_rule_2_8_elements_in_flight_after_cancel_are_tolerated(pair: ConnectionPair) -> None:
    subscriber = pair.open_stream(pair.client, initial_demand=10)
    other = pair.open_stream(pair.client, initial_demand=10)
    pair.server.send_elements(subscriber, [b"1", b"2", b"x" * 100_000])
    pair.server.send_elements(other, [b"kept"])
    pair.server.complete(subscriber)
    in_flight = pair.drain(pair.server)  # written before the server saw the cancel
    pair.client.cancel(subscriber)
    events = pair.deliver(pair.client, in_flight)
    assert elements_of(events, subscriber) == []
    assert OnComplete(subscriber=subscriber) not in events
    assert elements_of(events, other) == [b"kept"]
    assert pair.client.state is ConnectionState.OPEN
    # The cancel crosses the onComplete; the publisher ignores it quietly.
    assert pair.send(pair.client) == []
    assert pair.server.state is ConnectionState.OPEN


def test_rule_2_8_cancel_before_subscribed_tolerates_what_follows(pair: ConnectionPair) -> None:
    subscriber = pair.client.subscribe("ticker", 2)
    pair.send(pair.client)
    pair.client.cancel(subscriber)
    pair.server.accept(subscriber)
    pair.server.send_elements(subscriber, [b"1", b"2"])
    assert pair.send(pair.server) == []
    assert pair.send(pair.client) == [Cancel(subscriber=subscriber)]
    assert not pair.server.is_publishing(subscriber)


# ---- 3.6: request after cancel is a no-op ------------------------------------------


def test_rule_3_6_request_after_cancel_is_a_no_op(pair: ConnectionPair) -> None:
    subscriber = pair.open_stream(pair.client, initial_demand=1)
    pair.client.cancel(subscriber)
    assert decode(pair.drain(pair.client)) == [Cancel(subscriber=subscriber)]
    pair.client.request(subscriber, 1)
    pair.client.request(subscriber, UNBOUNDED)
    assert pair.drain(pair.client) == b""


# ---- 3.9: request(n <= 0) signals onError for that stream only -----------------------


@pytest.mark.parametrize("n", [0, -1])
def test_rule_3_9_nonpositive_request_fails_only_that_stream(pair: ConnectionPair, n: int) -> None:
    bad = pair.open_stream(pair.client, initial_demand=1)
    good = pair.open_stream(pair.client, initial_demand=1)
    events = pair.deliver(pair.server, encode(Request(subscriber=bad, demand=n)))
    assert events == [InvalidRequest(subscriber=bad, demand=n)]
    events = pair.send(pair.server)
    assert len(events) == 1 and isinstance(events[0], OnError) and events[0].subscriber == bad
    assert pair.client.state is pair.server.state is ConnectionState.OPEN
    pair.server.send_elements(good, [b"still here"])
    assert elements_of(pair.send(pair.server), good) == [b"still here"]


def test_rule_3_9_local_nonpositive_request_is_refused(pair: ConnectionPair) -> None:
    subscriber = pair.open_stream(pair.client)
    with pytest.raises(LocalProtocolError):
        pair.client.request(subscriber, 0)


# ---- 3.17: demand up to 2^63 - 1 and beyond means unbounded ---------------------------


def test_rule_3_17_requests_summing_past_the_maximum_are_unbounded(pair: ConnectionPair) -> None:
    subscriber = pair.open_stream(pair.client, initial_demand=UNBOUNDED - 1)
    pair.client.request(subscriber, 5)
    assert pair.client.outstanding_demand(subscriber) == UNBOUNDED
    assert pair.send(pair.client) == [Request(subscriber=subscriber, demand=5)]
    assert pair.server.publication_demand(subscriber) == UNBOUNDED
    pair.server.send_elements(subscriber, [b"e"] * 1000)
    # Unbounded demand is never used up, on either side.
    assert pair.server.publication_demand(subscriber) == UNBOUNDED
    assert len(elements_of(pair.send(pair.server), subscriber)) == 1000
    assert pair.client.outstanding_demand(subscriber) == UNBOUNDED
    # Once unbounded, asking for more says nothing on the wire.
    pair.client.request(subscriber, 1)
    assert pair.drain(pair.client) == b""


def test_rule_3_17_largest_wire_request_is_unbounded(pair: ConnectionPair) -> None:
    subscriber = pair.open_stream(pair.client)
    assert pair.deliver(pair.server, encode(Request(subscriber=subscriber, demand=2**64 - 1))) == [
        Request(subscriber=subscriber, demand=2**64 - 1)
    ]
    assert pair.server.publication_demand(subscriber) == UNBOUNDED


def test_rule_3_17_largest_wire_initial_demand_is_unbounded(pair: ConnectionPair) -> None:
    subscribe = Subscribe(publisher="p", subscriber=1, initial_demand=2**64 - 1)
    assert pair.deliver(pair.server, encode(subscribe)) == [subscribe]
    pair.server.accept(1)
    assert pair.server.publication_demand(1) == UNBOUNDED


def test_rule_3_17_local_request_beyond_the_wire_range_is_capped(pair: ConnectionPair) -> None:
    subscriber = pair.open_stream(pair.client)
    pair.client.request(subscriber, 2**100)
    assert pair.send(pair.client) == [Request(subscriber=subscriber, demand=UNBOUNDED)]
    assert pair.server.publication_demand(subscriber) == UNBOUNDED
    unbounded_from_start = pair.client.subscribe("p", 2**70)
    assert decode(pair.drain(pair.client)) == [
        Subscribe(publisher="p", subscriber=unbounded_from_start, initial_demand=UNBOUNDED)
    ]
