"""A sender keeps the split elements it has begun within what a receiver may hold.

The receiver holds the parts of every split element begun and not finished,
against its connection's memory budget (its inbound half), and closes a peer
that makes it hold more. The sender's round-robin interleaves the parts of
every stream with a large element, so without a bound of its own an honest
sender with many such streams would be closed by an honest receiver. So a
new split element begins only while the elements being split add up to at
most a quarter of the sender's budget with it (or none is being split):
with equal budgets, the receiver never holds more than half its inbound half.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from helpers import SMALL_LIMITS
from rstreams.protocol import UNBOUNDED, Connection, Elements, Hello, OnNextLastPart, OnNextPart, Subscribed, encode

BUDGET = 40_000  # inbound half 20,000; the sender splits at most 10,000 at once


def pair(streams: int) -> tuple[Connection, Connection, list[int]]:
    server = Connection(limits=SMALL_LIMITS, max_connection_memory=BUDGET)
    client = Connection(limits=SMALL_LIMITS, max_connection_memory=BUDGET)
    ids = [client.subscribe("blob", UNBOUNDED) for _ in range(streams)]
    server.receive_data(client.data_to_send())
    for event in server.events():
        if hasattr(event, "subscriber") and event.subscriber in ids:
            server.accept(event.subscriber)
    client.receive_data(server.data_to_send())
    client.events()
    return server, client, ids


@settings(deadline=None, max_examples=80)
@given(
    sizes=st.lists(st.lists(st.integers(0, 16384), min_size=1, max_size=4), min_size=1, max_size=8),
    writes=st.lists(st.integers(1, 9000), min_size=1, max_size=20),
)
def test_many_streams_of_large_elements_stay_within_the_receivers_budget(sizes: list[list[int]], writes: list[int]) -> None:
    server, client, ids = pair(len(sizes))
    sent: dict[int, list[bytes]] = {}
    for subscriber, stream in zip(ids, sizes):
        elements = [bytes([subscriber % 251]) * size for size in stream]
        sent[subscriber] = elements
        server.send_elements(subscriber, elements)
    received: dict[int, list[bytes]] = {subscriber: [] for subscriber in ids}
    turn = 0
    while server.has_data_to_send:
        client.receive_data(server.data_to_send(writes[turn % len(writes)]))
        turn += 1
        for event in client.events():  # never "memory budget exceeded"
            if isinstance(event, Elements):
                received[event.subscriber].extend(bytes(element) for element in event.elements)
        assert client.inbound_bytes <= BUDGET // 4 + SMALL_LIMITS.max_element_size
    assert received == sent


def test_a_second_large_element_waits_for_the_first_while_small_ones_go_on() -> None:
    server, client, ids = pair(3)
    big = b"b" * 9000
    server.send_elements(ids[0], [big])
    server.send_elements(ids[1], [big])
    server.send_elements(ids[2], [b"small"] * 3)
    data = bytes(server.data_to_send(1 << 20))
    client.receive_data(data)
    events = client.events()
    # Every part of the first element went out before the second began; the
    # small elements were not held up.
    order = [(type(message).__name__, message.subscriber) for message in _messages(data) if isinstance(message, (OnNextPart, OnNextLastPart))]
    first_last = order.index(("OnNextLastPart", ids[0]))
    assert all(subscriber == ids[0] for _, subscriber in order[: first_last + 1])
    assert ("OnNextPart", ids[1]) in order[first_last:]
    assert [bytes(e) for event in events if isinstance(event, Elements) and event.subscriber == ids[2] for e in event.elements] == [b"small"] * 3


def _messages(data: bytes) -> list[object]:
    from helpers import decode

    return decode(data, SMALL_LIMITS)
