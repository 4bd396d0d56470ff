"""The connection's own reader of split parts ("Large parts" in _connection).

Parts are read outside the Unpacker whenever one is the next message; the
tests compare that path with the Unpacker's, forced by making the header
reader answer "not a part" to everything: the same bytes, split into the
same reads, must give the same events and the same errors.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers import elements_of
from rstreams.protocol import (
    Connection,
    Elements,
    Event,
    Hello,
    OnComplete,
    OnNext,
    OnNextLastPart,
    OnNextPart,
    ProtocolLimits,
    Subscribed,
)
from rstreams.protocol import _connection
from rstreams.protocol._split import KEEP_BUFFER_FROM
from rstreams.protocol._codec import (
    INCOMPLETE_PART_HEADER,
    MAX_PART_HEADER_SIZE,
    PartHeader,
    encode,
    read_part_header,
)

from ._wire import LIMITS, feed_reads, message_starts, normalized, read_sizes, split_into_reads


@contextmanager
def unpacker_only() -> Iterator[None]:
    """Every part through the Unpacker, as before the part reader existed."""
    with mock.patch.object(_connection, "read_part_header", lambda data, limit: None):
        yield


def opened_client(streams: int, *, demand: int = 1 << 40, limits: ProtocolLimits = LIMITS) -> tuple[Connection, bytes]:
    """A client subscribed to ``streams`` streams (Ids 1..streams), and the
    bytes its peer sends to open them: hello and one subscribed each."""
    client = Connection(limits=limits)
    for _ in range(streams):
        client.subscribe("blob", demand)
    client.data_to_send()
    opening = encode(Hello()) + b"".join(encode(Subscribed(subscriber=s)) for s in range(1, streams + 1))
    return client, opening


def opening_bytes(streams: int) -> bytes:
    return opened_client(streams)[1]


def feed(client: Connection, reads: list[bytes], max_events: list[int] | None = None) -> tuple[list[Event], str | None]:
    return feed_reads(client, reads, max_events)


def both_paths(wire: bytes, reads: list[int], streams: int, **kwargs: object) -> tuple[object, object]:
    results = []
    for slow in (False, True):
        client, opening = opened_client(streams, **kwargs)  # type: ignore[arg-type]
        data = opening + wire
        with unpacker_only() if slow else nullcontext():
            events, error = feed(client, split_into_reads(data, reads))
        results.append((normalized(events), error))
    return results[0], results[1]


def payload(stream: int, index: int, size: int) -> bytes:
    return random.Random(stream * 1_000_003 + index).randbytes(size)


# ---- the header reader ------------------------------------------------------


@pytest.mark.parametrize("last", [False, True])
@pytest.mark.parametrize("subscriber", [0, 5, 127, 128, 255, 256, 65535, 65536, 2**32, 2**63 - 1])
@pytest.mark.parametrize("size", [0, 1, 255, 256, 65535, 65536])
def test_every_well_formed_header_is_read(last: bool, subscriber: int, size: int) -> None:
    kind = OnNextLastPart if last else OnNextPart
    message = encode(kind(subscriber=subscriber, element=subscriber // 3, data=bytes(size)))
    header = read_part_header(message[:MAX_PART_HEADER_SIZE], 1 << 20)
    assert header == PartHeader(len(message) - size, last, subscriber, subscriber // 3, size)
    # Every shorter prefix of the header asks for more.
    for cut in range(1, header.length):
        assert read_part_header(message[:cut], 1 << 20) is INCOMPLETE_PART_HEADER


@pytest.mark.parametrize(
    "message",
    [
        encode(OnNext(subscriber=1, element=b"x")),
        encode(Subscribed(subscriber=1)),
        b"\x94\x08\x01\x01\xc4\x00",  # onNextPacked
        b"\x94\x09\xa1x\x01\xc4\x00",  # a str subscriber
        b"\x94\x09\x01\xff\xc4\x00",  # a negative element
        b"\x94\x09\x01\x01\xa1x",  # str data
        b"\x94\x09\x01\x01\xc0",  # nil data
        b"\x94\x09\xcf\x80\x00\x00\x00\x00\x00\x00\x00\x01\xc4\x00",  # 2**63: not an Id
        b"\x94\x09\x01\xcf\x80\x00\x00\x00\x00\x00\x00\x00\xc4\x00",  # nor as an element
        b"\x95\x09\x01\x01\xc4\x00\xc0",  # five fields
        b"\x93\x09\x01\x01",  # three
        b"\x94\x09\x01\x01\xc6\x00\x10\x00\x00",  # over max_message_size
        b"",
    ],
)
@pytest.mark.parametrize("more", [b"", bytes(MAX_PART_HEADER_SIZE)])
def test_anything_else_is_left_to_the_unpacker(message: bytes, more: bytes) -> None:
    # (With what follows it, the header is read by the other branch.)
    assert read_part_header((message + more)[:MAX_PART_HEADER_SIZE], 1 << 20) is None


# ---- the same events and errors as the Unpacker's path ---------------------


@st.composite
def split_traffic(draw: st.DrawFn) -> tuple[bytes, int, dict[int, list[bytes]]]:
    """Elements on 1-3 streams, split at random part sizes (or sent whole
    as onNext), their messages interleaved across the streams."""
    streams = draw(st.integers(1, 3))
    queues: dict[int, list[bytes]] = {}
    expected: dict[int, list[bytes]] = {}
    for stream in range(1, streams + 1):
        queue: list[bytes] = []
        elements: list[bytes] = []
        for index in range(draw(st.integers(0, 3))):
            size = draw(st.one_of(st.integers(0, 64), st.integers(0, 300 * 1024)))
            element = payload(stream, index, size)
            elements.append(element)
            if size <= 64 and draw(st.booleans()):
                queue.append(encode(OnNext(subscriber=stream, element=element)))
                continue
            cuts = sorted(draw(st.lists(st.integers(0, size), max_size=6)))
            bounds = [0, *cuts, size]
            for number, (start, end) in enumerate(zip(bounds, bounds[1:])):
                kind = OnNextLastPart if number == len(bounds) - 2 else OnNextPart
                queue.append(encode(kind(subscriber=stream, element=index, data=element[start:end])))
        if draw(st.booleans()):
            queue.append(encode(OnComplete(subscriber=stream)))
        queues[stream] = queue
        expected[stream] = elements
    # Which stream sends its next message, in turn; what is left at the
    # end follows stream by stream.
    wire = bytearray()
    for stream in draw(st.lists(st.sampled_from(sorted(queues)), max_size=sum(map(len, queues.values())))):
        if queues[stream]:
            wire += queues[stream].pop(0)
    for queue in queues.values():
        wire += b"".join(queue)
    return bytes(wire), streams, expected


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(
    traffic=split_traffic(),
    reads=read_sizes(40),
)
def test_split_elements_arrive_as_through_the_unpacker(
    traffic: tuple[bytes, int, dict[int, list[bytes]]], reads: list[int]
) -> None:
    wire, streams, expected = traffic
    fast, slow = both_paths(wire, reads, streams)
    assert fast == slow
    events, error = fast
    assert error is None
    received: dict[int, list[bytes]] = {stream: [] for stream in expected}
    for event in events:
        if type(event) is tuple:
            received[event[0]] += event[1]
    assert received == expected


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(
    traffic=split_traffic(),
    flips=st.lists(
        st.tuples(
            st.integers(0, 2**32),
            st.integers(0, 11),
            # Bytes that mean something in a header, or any.
            st.sampled_from([0x00, 0x01, 0x09, 0x0A, 0x7F, 0x80, 0x93, 0x94, 0x95, 0xA1, 0xC0, 0xC4, 0xC5, 0xC6, 0xCC, 0xCD, 0xCE, 0xCF, 0xD0, 0xD3, 0xE0, 0xFF])
            | st.integers(0, 255),
        ),
        min_size=1,
        max_size=3,
    ),
    reads=read_sizes(20),
    message_per_read=st.booleans(),
)
def test_damaged_traffic_fails_as_through_the_unpacker(
    traffic: tuple[bytes, int, dict[int, list[bytes]]],
    flips: list[tuple[int, int, int]],
    reads: list[int],
    message_per_read: bool,
) -> None:
    wire, streams, _ = traffic
    if not wire:
        return
    # Damage the first bytes of a message or two: its header.
    starts = message_starts(wire)
    damaged = bytearray(wire)
    for message, offset, value in flips:
        damaged[min(starts[message % len(starts)] + offset, len(damaged) - 1)] = value
    if message_per_read:
        # Every message at the start of a read: every part goes the part
        # reader's way (else most start inside a read the Unpacker has).
        reads = [len(opening_bytes(streams))] + [end - start for start, end in zip(starts, [*starts[1:], len(wire)])]
    results = []
    for slow in (False, True):
        client, opening = opened_client(streams)
        with unpacker_only() if slow else nullcontext():
            events, error = feed(client, split_into_reads(opening + bytes(damaged), reads))
        results.append((normalized(events), error, client))
    (fast_events, fast_error, _), (slow_events, slow_error, slow_client) = results
    assert fast_events == slow_events
    if fast_error != slow_error:
        # The one difference allowed: a part's rules are checked when its
        # header arrives, so a broken part whose payload never arrives
        # fails at once, where the Unpacker still waits for the rest.
        assert slow_error is None and fast_error is not None
        assert slow_client._fed != slow_client._message_end


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    sizes=st.lists(st.integers(0, 200 * 1024), min_size=1, max_size=3),
    reads=st.lists(st.integers(1, 100 * 1024), max_size=20),
    steps=st.lists(st.integers(1, 3), max_size=20),
)
def test_max_events_stops_and_resumes_inside_parts(sizes: list[int], reads: list[int], steps: list[int]) -> None:
    wire = b""
    for index, size in enumerate(sizes):
        element = payload(1, index, size)
        wire += encode(OnNextPart(subscriber=1, element=index, data=element[: size // 2]))
        wire += encode(OnNext(subscriber=2, element=b"small")) * 3
        wire += encode(OnNextLastPart(subscriber=1, element=index, data=element[size // 2 :]))
    client, opening = opened_client(2)
    events, error = feed(client, split_into_reads(opening + wire, reads), steps)
    assert error is None
    assert elements_of(events, 1) == [payload(1, index, size) for index, size in enumerate(sizes)]
    assert elements_of(events, 2) == [b"small"] * 3 * len(sizes)


def part(subscriber: int, element: int, data: bytes, *, last: bool = False) -> bytes:
    return encode((OnNextLastPart if last else OnNextPart)(subscriber=subscriber, element=element, data=data))


BIG = bytes(100 * 1024)

# Each: the bytes after the streams are open, on a client subscribed to
# streams 1 and 2 (with demand), and stream 2 cancelled (see below).
BROKEN = {
    "another element mid-element": part(1, 1, BIG) + part(1, 2, BIG, last=True),
    "onNext mid-element": part(1, 1, BIG) + encode(OnNext(subscriber=1, element=b"x")),
    "onComplete mid-element": part(1, 1, BIG) + encode(OnComplete(subscriber=1)),
    "over max_element_size": part(1, 1, BIG) * 41 + part(1, 1, BIG, last=True),
    "unknown stream": part(9, 1, BIG, last=True),
    "str subscriber": b"\x94\x0a\xa1x\x01\xc5\x00\x01x",
    "negative element": b"\x94\x0a\x01\xff\xc5\x00\x01x",
    "str data": b"\x94\x0a\x01\x01\xa1x",
    "four fields and one": b"\x95\x0a\x01\x01\xc4\x01x\xc0",
    "over max_message_size": b"\x94\x0a\x01\x01\xc6\x00\x10\x01\x00" + bytes((1 << 20) + 300),
    "non-canonical ints": b"\x94\x0a\xcc\x01\xcd\x00\x01\xc4\x01x" + part(1, 2, BIG, last=True),
    "a cancelled stream's part, then an error": part(2, 1, BIG, last=True) + part(1, 1, BIG) + part(1, 5, b"", last=True),
}


@pytest.mark.parametrize("name", sorted(BROKEN))
@pytest.mark.parametrize("read", [1, 7, 1000, 70 * 1024, 1 << 30])
def test_broken_parts_fail_as_through_the_unpacker(name: str, read: int) -> None:
    results = []
    for slow in (False, True):
        client, opening = opened_client(2)
        client.cancel(2)
        wire = opening + BROKEN[name]
        read = max(read, len(wire) // 3000)  # (a few thousand reads at most)
        reads = split_into_reads(wire, [read] * (len(wire) // read + 1))
        with unpacker_only() if slow else nullcontext():
            events, error = feed(client, reads)
        results.append((normalized(events), error))
    assert results[0] == results[1]
    if name != "non-canonical ints":
        assert results[0][1] is not None


@pytest.mark.parametrize("last", [False, True])
def test_a_part_without_demand_or_of_the_wrong_size_fails_alike(last: bool) -> None:
    for element_size, demand, wire in [
        (0, 0, part(1, 1, BIG, last=True)),
        (1000, 5, part(1, 1, BIG) + part(1, 1, b"x", last=True)),
    ]:
        results = []
        for slow in (False, True):
            client = Connection(limits=LIMITS)
            client.subscribe("blob", demand)
            opening = encode(Hello()) + encode(Subscribed(subscriber=1, element_size=element_size))
            with unpacker_only() if slow else nullcontext():
                results.append(feed(client, split_into_reads(opening + wire, [4096] * 100)))
        assert results[0][1] is not None
        assert results[0][1] == results[1][1]


# ---- the payload's bytes ----------------------------------------------------


def test_a_large_element_holds_its_payload_only_until_its_join() -> None:
    client, opening = opened_client(1)
    client.receive_data(opening)
    client.events()
    element = payload(1, 0, 1 << 20)
    wire = b"".join(
        part(1, 0, element[start : start + 65536], last=start + 65536 >= len(element))
        for start in range(0, len(element), 65536)
    )
    reads = split_into_reads(wire, [256 * 1024] * 5)
    sub = client._subscriptions[1]
    for data in reads[:-1]:
        client.receive_data(data)
        assert client.events() == []
        assert sub.reassembler is not None
        # The memory held is the payload received so far (copied out of the
        # reads, which a connection's memory budget could not count once
        # per stream: see _split, "Beyond the guess"), never more than announced.
        assert 0 < sub.reassembler.buffered <= sub.reassembler.size
        assert client.inbound_bytes >= sub.reassembler.size
    client.receive_data(reads[-1])
    assert elements_of(client.events(), 1) == [element]
    # (The stream's first element: nothing kept for the next one.)
    assert sub.reassembler.buffered == 0 and not sub.reassembler.in_progress


def test_a_mutable_buffer_is_copied_not_kept() -> None:
    client, opening = opened_client(1)
    client.receive_data(opening)
    client.events()
    element = payload(1, 0, 64 * 1024)
    first = bytearray(part(1, 0, element[:-10]))
    client.receive_data(first)
    assert client.events() == []
    first[:] = bytes(len(first))  # the caller reuses its buffer
    client.receive_data(part(1, 0, element[-10:], last=True))
    assert elements_of(client.events(), 1) == [element]


def test_a_large_element_is_received_into_the_buffer_kept_from_the_last_one() -> None:
    # From the stream's second large element on, its parts go into one
    # buffer, sized to the element before and kept from element to element
    # (no pieces, no new buffer), and each element is handed out as bytes
    # of its own.
    client, opening = opened_client(1)
    client.receive_data(opening)
    client.events()
    size = KEEP_BUFFER_FROM + 1000
    elements = [payload(1, index, size) for index in range(3)]
    received: list[bytes] = []
    buffers = []
    for index, element in enumerate(elements):
        halves = part(1, index, element[: size // 2]) + part(1, index, element[size // 2 :], last=True)
        client.receive_data(halves[: len(halves) // 2])
        assert client.events() == []
        reassembler = client._subscriptions[1].reassembler
        assert reassembler is not None
        buffers.append(reassembler._buffer)
        client.receive_data(halves[len(halves) // 2 : -1])
        assert client.events() == []
        if index:
            assert reassembler.filled == size - 1 and not reassembler._pieces
        client.receive_data(halves[-1:])
        received += elements_of(client.events(), 1)
    assert received == elements and all(type(got) is bytes for got in received)
    assert buffers[0] is None  # (the first: its size unknown, its pieces joined)
    assert buffers[1] is buffers[2] is not None and len(buffers[1]) == size
    assert client.inbound_bytes == size  # the kept buffer, counted


def test_a_stream_cancelled_while_its_part_arrives_gets_nothing() -> None:
    client, opening = opened_client(2)
    client.receive_data(opening)
    client.events()
    wire = part(1, 0, BIG, last=True) + encode(OnNext(subscriber=2, element=b"after"))
    client.receive_data(wire[:50_000])
    assert client.events() == []
    client.cancel(1)
    client.receive_data(wire[50_000:])
    assert client.events() == [Elements(subscriber=2, elements=_connection.ElementBatch([b"after"]))]


def test_max_events_stops_after_a_split_element() -> None:
    client, opening = opened_client(1)
    client.receive_data(opening)
    client.events()
    client.receive_data((part(1, 0, BIG) + part(1, 0, b"a", last=True)) * 2 + part(1, 1, b"b", last=True))
    assert elements_of(client.events(1), 1) == [BIG + b"a"]
    assert elements_of(client.events(1), 1) == [BIG + b"a"]
    assert elements_of(client.events(1), 1) == [b"b"]
    assert client.events(1) == []


def test_a_part_a_read_ends_inside_is_taken_back_from_the_unpacker() -> None:
    client, opening = opened_client(2)
    client.receive_data(opening)
    client.events()
    element = payload(1, 0, 200 * 1024)
    wire = encode(OnComplete(subscriber=2)) + part(1, 0, element, last=True)
    # One read: the onComplete sends it to the Unpacker, with the part's
    # start (an onNext would not: a run of them is read outside it).
    client.receive_data(wire[:100 * 1024])
    assert client.events() == [OnComplete(subscriber=2)]
    # The part was taken back: the Unpacker holds nothing, and the payload
    # so far waits in the stream's reassembler.
    assert client._fed == client._message_end == 0
    assert client._part_left == len(wire) - 100 * 1024
    reassembler = client._subscriptions[1].reassembler
    headers = len(wire) - len(element)  # the onComplete, and the part's header
    assert reassembler is not None and reassembler.buffered == 100 * 1024 - headers
    client.receive_data(wire[100 * 1024 :])
    assert elements_of(client.events(), 1) == [element]


@pytest.mark.parametrize(
    "template",
    [
        part(1, 0, b"x" * 40) + part(1, 0, b"y" * 300, last=True),
        # (uint8 and uint32 ids, a bin32 header: a peer may write them so)
        b"\x94\x0a\xcc\x01\xce\x00\x01\x11\x70\xc6\x00\x00\x01\x00" + b"z" * 256,
    ],
    ids=["fixints-bin8-bin16", "uint8-uint32-bin32"],
)
@pytest.mark.parametrize("message_per_read", [False, True])
def test_every_one_byte_damage_to_a_header_fails_as_through_the_unpacker(template: bytes, message_per_read: bool) -> None:
    # Exhaustive where the fuzz above samples: each byte of the first
    # header, set to each value, read whole or from the start of a read.
    streams = 1
    for offset in range(12):
        for value in range(256):
            damaged = bytearray(template)
            damaged[offset] = value
            results = []
            for slow in (False, True):
                client, opening = opened_client(streams)
                reads = [opening, bytes(damaged)] if message_per_read else [opening + bytes(damaged)]
                with unpacker_only() if slow else nullcontext():
                    events, error = feed(client, reads)
                results.append((normalized(events), error, client))
            (fast_events, fast_error, _), (slow_events, slow_error, slow_client) = results
            assert fast_events == slow_events, (offset, value)
            if fast_error != slow_error:
                assert slow_error is None and fast_error is not None, (offset, value)
                assert slow_client._fed != slow_client._message_end, (offset, value)
