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
from rstreams.protocol import UNBOUNDED, Connection, Elements, OnNextLastPart, OnNextPart

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
    wire = bytearray()
    turn = 0
    while server.has_data_to_send:
        data = server.data_to_send(writes[turn % len(writes)])
        wire += data
        client.receive_data(data)
        turn += 1
        for event in client.events():  # never "memory budget exceeded"
            if isinstance(event, Elements):
                received[event.subscriber].extend(bytes(element) for element in event.elements)
        assert client.inbound_bytes <= BUDGET // 4 + SMALL_LIMITS.max_element_size
    assert received == sent
    # The bound above is looser than the sender's own: it would pass a sender
    # that split up to half the budget at once. What the receiver holds of
    # elements begun and not finished never exceeds the sender's cap (a
    # quarter of the budget), or the one element being split if larger.
    largest = max((len(element) for elements in sent.values() for element in elements), default=0)
    assert held_of_unfinished_elements(bytes(wire)) <= max(BUDGET // 4, largest)


def held_of_unfinished_elements(data: bytes) -> int:
    """The most bytes of begun, unfinished elements a receiver of ``data`` holds at once."""
    begun: dict[int, int] = {}
    most = 0
    for message in _messages(data):
        if isinstance(message, (OnNextPart, OnNextLastPart)):
            # The last part is held too, for a moment, with the others.
            begun[message.subscriber] = begun.get(message.subscriber, 0) + len(message.data)
            most = max(most, sum(begun.values()))
            if isinstance(message, OnNextLastPart):
                del begun[message.subscriber]
    return most


def _split_order(data: bytes) -> list[tuple[str, int]]:
    return [(type(message).__name__, message.subscriber) for message in _messages(data) if isinstance(message, (OnNextPart, OnNextLastPart))]


def test_two_elements_that_fill_the_cap_exactly_are_split_at_once() -> None:
    # Cap 10,000 (BUDGET // 4): 5,000 + 5,000 fits, so both begin and their
    # parts interleave.
    server, client, ids = pair(2)
    server.send_elements(ids[0], [b"a" * 5000])
    server.send_elements(ids[1], [b"b" * 5000])
    data = bytes(server.data_to_send(1 << 20))
    order = _split_order(data)
    assert order.index(("OnNextPart", ids[1])) < order.index(("OnNextLastPart", ids[0]))
    assert 5000 < held_of_unfinished_elements(data) <= 10_000
    client.receive_data(data)
    client.events()


def test_two_elements_one_byte_over_the_cap_go_one_after_the_other() -> None:
    # 5,000 + 5,001 is one byte over the cap: the second waits until the
    # first's last part is out.
    server, client, ids = pair(2)
    server.send_elements(ids[0], [b"a" * 5000])
    server.send_elements(ids[1], [b"b" * 5001])
    data = bytes(server.data_to_send(1 << 20))
    order = _split_order(data)
    assert order.index(("OnNextLastPart", ids[0])) < order.index(("OnNextPart", ids[1]))
    assert held_of_unfinished_elements(data) == 5001
    client.receive_data(data)
    client.events()


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
