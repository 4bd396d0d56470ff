"""Receiving split elements straight into their buffer (``copy=False``).

``Connection.receive_buffers`` offers, in the middle of a split part of a
``copy=False`` stream, the element's own buffer (and small buffers for the
headers of the parts it expects next) for one scattering read;
``buffers_received`` then says how much arrived. The tests drive a client
the way the session does over plain TCP (a readv fills the buffers in
order, as far as the "socket" has data), and hold it to the same events,
the same errors and the same memory bound as reading the same bytes with
``receive_data``.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rstreams.protocol import (
    Connection,
    Elements,
    Event,
    Hello,
    OnNext,
    OnNextLastPart,
    OnNextPart,
    ProtocolLimits,
    RemoteProtocolError,
    Subscribed,
)
from rstreams.protocol._codec import encode

from ._wire import message_starts, normalized, read_sizes
from .test_part_reader import payload, split_traffic

LIMITS = ProtocolLimits(max_message_size=1 << 20, max_element_size=4 << 20, split_threshold=64 * 1024)
MEMORY = 64 << 20


def opened_client(streams: int, *, copy: bool, memory: int = MEMORY) -> tuple[Connection, bytes]:
    """A client subscribed to ``streams`` streams (Ids 1..), and the bytes
    its peer sends to open them."""
    client = Connection(limits=LIMITS, max_connection_memory=memory)
    for _ in range(streams):
        client.subscribe("blob", 1 << 40, copy=copy)
    client.data_to_send()
    opening = encode(Hello()) + b"".join(encode(Subscribed(subscriber=s)) for s in range(1, streams + 1))
    return client, opening


def fill(buffers: Sequence[memoryview | bytearray], data: bytes) -> None:
    """What readv does: ``data`` into the buffers, in order."""
    position = 0
    for buffer in buffers:
        if position >= len(data):
            return
        piece = data[position : position + len(buffer)]
        memoryview(buffer)[: len(piece)] = piece
        position += len(piece)


def feed(client: Connection, data: bytes, reads: list[int], *, into: bool) -> tuple[list[Event], str | None, int]:
    """Deliver ``data`` in reads of the given sizes (then the rest at once):
    into the offered buffers where the client offers them and ``into`` is
    set, else with receive_data. Returns the events, the protocol error
    that ended the connection (if any), and how many bytes went in place."""
    events: list[Event] = []
    sizes = iter(reads)
    position = placed = 0
    half = client.max_connection_memory // 2
    try:
        while position < len(data):
            size = min(next(sizes, len(data)), len(data) - position)
            buffers = client.receive_buffers(size) if into else []
            if buffers:
                size = min(size, sum(map(len, buffers)))
                fill(buffers, data[position : position + size])
                client.buffers_received(size)
                placed += min(size, len(buffers[0]))
            else:
                client.receive_data(data[position : position + size])
            position += size
            while True:
                batch = client.events()
                if not batch:
                    break
                events += batch
            # The memory bound holds whichever way the bytes came.
            assert client.inbound_bytes <= half + 64
    except RemoteProtocolError as exc:
        return events, str(exc), placed
    return events, None, placed


def elements_by_stream(events: list[Event]) -> dict[int, list[bytes | memoryview]]:
    received: dict[int, list[bytes | memoryview]] = {}
    for event in events:
        if type(event) is Elements:
            received.setdefault(event.subscriber, []).extend(event.elements)
    return received


def part(subscriber: int, element: int, data: bytes, *, last: bool = False) -> bytes:
    return encode((OnNextLastPart if last else OnNextPart)(subscriber=subscriber, element=element, data=data))


def split(subscriber: int, element: int, data: bytes, part_size: int = 64 * 1024) -> bytes:
    """``data`` as a publisher splits it: parts of ``part_size``, the last smaller."""
    parts = [data[start : start + part_size] for start in range(0, len(data), part_size)] or [b""]
    return b"".join(part(subscriber, element, piece, last=index == len(parts) - 1) for index, piece in enumerate(parts))


# ---- the usual stream -------------------------------------------------------


def test_a_split_element_is_received_in_its_buffer_and_handed_out_as_a_view_of_it() -> None:
    client, opening = opened_client(1, copy=False)
    # The first element sizes the buffer of the next (the wire does not say
    # how large a split element is until its end).
    events, error, _ = feed(client, opening + split(1, 0, payload(1, 0, 1 << 20)), [], into=True)
    assert error is None and len(elements_by_stream(events)[1]) == 1
    element = payload(1, 1, 1 << 20)
    wire = split(1, 1, element)
    # Up to the first part's payload as a plain read; then the offers.
    header_end = 10
    client.receive_data(wire[:header_end])
    assert client.events() == []
    buffers = client.receive_buffers(4 << 20)
    assert len(buffers) > 3  # the part's rest, then header and payload places
    fill(buffers, wire[header_end:])
    client.buffers_received(min(len(wire) - header_end, sum(map(len, buffers))))
    events = client.events()
    [got] = elements_by_stream(events)[1]
    assert type(got) is memoryview and got.readonly
    assert got == element
    # The very buffer the reads went into: no copy.
    assert got.obj is buffers[0].obj
    assert client.inbound_bytes == 0


@pytest.mark.parametrize("parts", [16, 5])
def test_a_read_cut_by_max_bytes_ends_at_the_next_header_and_the_next_starts_at_its_payload(parts: int) -> None:
    # 16 parts: the header a read ends with is an onNextPart's; 5: the
    # first read ends with the onNextLastPart's header.
    client, opening = opened_client(1, copy=False)
    events, error, _ = feed(client, opening + split(1, 0, payload(1, 0, parts * 65536)), [], into=True)
    assert error is None
    element = payload(1, 1, parts * 65536)
    wire = split(1, 1, element)
    header = len(part(1, 1, b"x" * 65536)) - 65536
    client.receive_data(wire[:header])
    assert client.events() == []
    position = header
    reads = 0
    expected_reads = -(-parts // 4)  # four parts' payload a read
    while position < len(wire):
        buffers = client.receive_buffers(256 * 1024)
        assert buffers, position
        reads += 1
        # The rest of the part, then (header, payload) places; past
        # max_bytes, one more header with an empty place, and nothing after.
        assert len(buffers[0]) == 65536
        if reads < expected_reads:
            assert len(buffers) % 2 == 1 and len(buffers[-1]) == 0 and len(buffers[-2]) == header
        else:  # (the element's last part: a buffer for what follows)
            assert len(buffers) % 2 == 0 and len(buffers[-1]) > header
        size = min(len(wire) - position, sum(map(len, buffers)))
        fill(buffers, wire[position : position + size])
        client.buffers_received(size)
        position += size
        events = client.events()
    [got] = elements_by_stream(events)[1]
    assert got == element and got.obj is buffers[0].obj
    # Every payload byte was read in place: each read ended at a header.
    assert reads == expected_reads and client.inbound_bytes == 0


def test_a_stream_cancelled_during_the_read_skips_its_part_and_the_rest_parses() -> None:
    # The application cancels while the read into the element's buffer is
    # under way: what arrived is parsed as bytes (the part skipped), and
    # the other stream's element behind it arrives.
    client, opening = opened_client(2, copy=False)
    events, error, _ = feed(client, opening + split(1, 0, payload(1, 0, 300_000)), [], into=True)
    assert error is None
    wire = split(1, 1, payload(1, 1, 300_000)) + split(2, 0, payload(2, 0, 100_000))
    client.receive_data(wire[:1000])
    assert client.events() == []
    buffers = client.receive_buffers(1 << 20)
    assert buffers
    client.cancel(1)
    rest = wire[1000:]
    size = min(len(rest), sum(map(len, buffers)))
    fill(buffers, rest[:size])
    client.buffers_received(size)
    client.receive_data(rest[size:])
    assert elements_by_stream(client.events()) == {2: [payload(2, 0, 100_000)]}
    assert client.inbound_bytes == 0


def test_elements_sent_whole_stay_bytes() -> None:
    client, opening = opened_client(1, copy=False)
    events, error, _ = feed(client, opening + encode(OnNext(subscriber=1, element=b"small")), [], into=True)
    assert error is None
    assert elements_by_stream(events)[1] == [b"small"]
    assert type(elements_by_stream(events)[1][0]) is bytes


def test_copy_true_receives_into_the_streams_buffer_too_and_hands_out_bytes() -> None:
    # The stream's buffer, kept from its last element, takes the reads as a
    # copy=False element's would; the element handed out is bytes of its
    # own, so the buffer stays the stream's.
    client, opening = opened_client(1, copy=True)
    events, error, _ = feed(client, opening + split(1, 0, payload(1, 0, 300_000)), [], into=True)
    assert error is None and len(elements_by_stream(events)[1]) == 1
    element = payload(1, 1, 300_000)
    wire = split(1, 1, element)
    client.receive_data(wire[:1000])
    client.events()
    buffers = client.receive_buffers(1 << 20)
    assert buffers and buffers[0].obj is client._subscriptions[1].reassembler._buffer
    fill(buffers, wire[1000:])
    client.buffers_received(min(len(wire) - 1000, sum(map(len, buffers))))
    [got] = elements_by_stream(client.events())[1]
    assert type(got) is bytes and got == element
    assert client.inbound_bytes == 300_000  # (the kept buffer, counted)


def test_elements_larger_and_smaller_than_the_last_one() -> None:
    # The buffer is sized to the previous element: a larger one grows it,
    # a smaller one is trimmed, and each arrives exact.
    sizes = [65_537, 1 << 20, 200_001, 3 * 65_536 + 7, (1 << 20) + 3, 65_536 * 4, 1]
    client, opening = opened_client(1, copy=False)
    wire = opening + b"".join(split(1, index, payload(1, index, size)) for index, size in enumerate(sizes))
    events, error, placed = feed(client, wire, [100, 70_000] * 50, into=True)
    assert error is None
    assert elements_by_stream(events)[1] == [payload(1, index, size) for index, size in enumerate(sizes)]
    assert placed > sum(sizes) // 2
    assert client.inbound_bytes == 0


def test_a_buffer_guess_larger_than_the_budget_allows_is_not_taken() -> None:
    # Stream 1's elements were 3 MiB, so its next buffer is guessed at
    # 3 MiB; but stream 2 holds 2 MiB of an unfinished element, and the
    # inbound half is 4 MiB: the guess shrinks to fit, and the peer, who
    # sent nothing over the budget, is not refused.
    client, opening = opened_client(2, copy=False, memory=8 << 20)
    big, half_done, small = payload(1, 0, 3 << 20), payload(2, 0, 2 << 20), payload(1, 1, 100_000)
    parts_two = split(2, 0, half_done)
    last_two = part(2, 0, half_done[-65_536:], last=True)
    wire = opening + split(1, 0, big) + parts_two[: -len(last_two)] + split(1, 1, small) + last_two
    events, error, _ = feed(client, wire, [70_000] * 200, into=True)
    assert error is None
    assert elements_by_stream(events) == {1: [big, small], 2: [half_done]}
    assert client.inbound_bytes == 0


def test_another_message_where_the_next_part_was_expected_is_parsed_as_usual() -> None:
    # Stream 2's elements come between stream 1's parts: each such header
    # slot fails its check, and what was read from there on is parsed as
    # if it had come by receive_data.
    client, opening = opened_client(2, copy=False)
    one, two = payload(1, 0, 400_000), payload(2, 0, 300_000)
    parts_one = [one[start : start + 65_536] for start in range(0, len(one), 65_536)]
    wire = bytearray(opening)
    for index, piece in enumerate(parts_one):
        wire += part(1, 0, piece, last=index == len(parts_one) - 1)
        if index == 1:
            wire += encode(OnNext(subscriber=2, element=b"between"))
        if index == 2:
            wire += split(2, 0, two)
    events, error, _ = feed(client, bytes(wire), [65_000] * 40, into=True)
    assert error is None
    assert elements_by_stream(events) == {1: [one], 2: [b"between", two]}


def test_an_element_larger_than_the_limit_is_refused_either_way() -> None:
    for into in (False, True):
        client, opening = opened_client(1, copy=False)
        wire = opening + part(1, 0, bytes(65_536)) * 64 + part(1, 0, bytes(65_536), last=True)
        events, error, _ = feed(client, wire, [300_000] * 100, into=into)
        assert error is not None and "larger than the limit" in error


# ---- the same events and errors as receive_data -------------------------------


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(
    traffic=split_traffic(),
    reads=read_sizes(40),
)
def test_split_elements_arrive_as_with_receive_data(
    traffic: tuple[bytes, int, dict[int, list[bytes]]], reads: list[int]
) -> None:
    wire, streams, expected = traffic
    results = []
    for into, copy in ((False, True), (True, False), (True, True)):
        client, opening = opened_client(streams, copy=copy)
        events, error, _ = feed(client, opening + wire, reads, into=into)
        assert error is None
        # Nothing held but the buffers copy=True streams keep for their next
        # element, counted.
        assert client.inbound_bytes == sum(
            sub.reassembler.reserved for sub in client._subscriptions.values() if sub.reassembler is not None
        )
        assert copy or client.inbound_bytes == 0
        results.append(normalized(events))
        received = elements_by_stream(events)
        assert {stream: received.get(stream, []) for stream in expected} == expected
    assert results[0] == results[1] == results[2]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    sizes=st.lists(st.one_of(st.integers(0, 300_000), st.sampled_from([65_535, 65_536, 65_537, 131_072, 1 << 20])), min_size=1, max_size=5),
    part_size=st.sampled_from([1000, 65_536, 100_000]),
    reads=st.lists(st.one_of(st.integers(1, 100), st.integers(1, 2 << 20)), max_size=40),
    copy=st.booleans(),
)
def test_a_stream_of_split_elements_in_any_reads(sizes: list[int], part_size: int, reads: list[int], copy: bool) -> None:
    # One stream, parts of one size (what receive_buffers predicts), any
    # element sizes: byte-exact, in order, and nothing held at the end but
    # the buffer a copy=True stream keeps (counted).
    client, opening = opened_client(1, copy=copy)
    elements = [payload(1, index, size) for index, size in enumerate(sizes)]
    wire = opening + b"".join(split(1, index, element, part_size) for index, element in enumerate(elements))
    events, error, _ = feed(client, wire, reads, into=True)
    assert error is None
    received = elements_by_stream(events).get(1, [])
    assert received == elements
    assert all(type(element) is bytes for element in received) or not copy
    reassembler = client._subscriptions[1].reassembler
    kept = reassembler._buffer if reassembler is not None else None
    assert client.inbound_bytes == (len(kept) if kept is not None else 0)
    assert copy or client.inbound_bytes == 0


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(
    traffic=split_traffic(),
    flips=st.lists(
        st.tuples(
            st.integers(0, 2**32),
            st.integers(0, 11),
            st.sampled_from([0x00, 0x01, 0x09, 0x0A, 0x7F, 0x80, 0x94, 0xC4, 0xC5, 0xC6, 0xCC, 0xCF, 0xFF]) | st.integers(0, 255),
        ),
        min_size=1,
        max_size=3,
    ),
    reads=read_sizes(20),
)
def test_damaged_traffic_fails_as_with_receive_data(
    traffic: tuple[bytes, int, dict[int, list[bytes]]], flips: list[tuple[int, int, int]], reads: list[int]
) -> None:
    wire, streams, _ = traffic
    if not wire:
        return
    starts = message_starts(wire)
    damaged = bytearray(wire)
    for message, offset, value in flips:
        damaged[min(starts[message % len(starts)] + offset, len(damaged) - 1)] = value
    results = []
    for into in (False, True):
        client, opening = opened_client(streams, copy=False)
        events, error, _ = feed(client, opening + bytes(damaged), reads, into=into)
        results.append((normalized(events), error))
    (plain_events, plain_error), (into_events, into_error) = results
    # The same elements before the damage; the same verdict, but that a
    # part whose header is read outside the Unpacker fails as soon as its
    # header is in, where the Unpacker waits for the rest of it (reads cut
    # differently choose differently; see test_part_reader).
    shorter = min(len(plain_events), len(into_events))
    assert plain_events[:shorter] == into_events[:shorter]
    if plain_error != into_error:
        assert plain_error is None or into_error is None
