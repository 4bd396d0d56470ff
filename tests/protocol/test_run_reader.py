"""The connection's reader of onNext runs ("Runs of onNext" in _connection).

Whenever the Unpacker holds nothing and the next message is an onNext, the
run of onNext that repeat its header is taken outside the Unpacker. The
tests compare that path with the Unpacker's, forced by making the header
reader answer "not an onNext" to everything: the same bytes, cut into the
same reads, must give the same events and the same error.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager, nullcontext

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers import elements_of
from rstreams.protocol import (
    Cancel,
    Connection,
    Elements,
    Hello,
    OnComplete,
    OnNextPart,
    Request,
    Subscribe,
    Subscribed,
)
from rstreams.protocol import _connection
from rstreams.protocol._codec import encode
from rstreams.protocol._runs import (
    INCOMPLETE_ON_NEXT_HEADER,
    MAX_ON_NEXT_HEADER_SIZE,
    OnNextHeader,
    RunReader,
    read_on_next_header,
)

from ._wire import LIMITS, feed_reads, message_starts, normalized, split_into_reads


@contextmanager
def unpacker_only() -> Iterator[None]:
    """Every onNext through the Unpacker, as before the run reader existed."""
    with mock_header_reader():
        yield


@contextmanager
def mock_header_reader() -> Iterator[None]:
    from unittest import mock

    with mock.patch.object(_connection, "read_on_next_header", lambda data, limit: None):
        yield


# msgpack's encodings of an unsigned int and of a bin header, by name: a
# peer may write any of them, not only the shortest.
ID_FORMS = {
    "fixint": lambda n: bytes((n,)) if n < 128 else None,
    "uint8": lambda n: b"\xcc" + n.to_bytes(1, "big") if n < 256 else None,
    "uint16": lambda n: b"\xcd" + n.to_bytes(2, "big") if n < 2**16 else None,
    "uint32": lambda n: b"\xce" + n.to_bytes(4, "big") if n < 2**32 else None,
    "uint64": lambda n: b"\xcf" + n.to_bytes(8, "big"),
}
BIN_FORMS = {
    "bin8": lambda n: b"\xc4" + n.to_bytes(1, "big") if n < 256 else None,
    "bin16": lambda n: b"\xc5" + n.to_bytes(2, "big") if n < 65536 else None,
    "bin32": lambda n: b"\xc6" + n.to_bytes(4, "big"),
}


def on_next(subscriber: int, element: bytes, id_form: str = "fixint", bin_form: str = "bin8") -> bytes:
    """An onNext with its Id and bin header written the given way (the
    shortest form that fits, if that one does not)."""
    id_bytes = ID_FORMS[id_form](subscriber) or ID_FORMS["uint64"](subscriber)
    bin_bytes = BIN_FORMS[bin_form](len(element)) or BIN_FORMS["bin32"](len(element))
    assert id_bytes is not None and bin_bytes is not None
    return b"\x93\x05" + id_bytes + bin_bytes + element


def opened_client(
    demands: list[int], element_sizes: list[int] | None = None
) -> tuple[Connection, bytes]:
    """A client subscribed to one stream per demand (Ids 1..), and the bytes
    its peer sends to open them: hello and one subscribed each."""
    client = Connection(limits=LIMITS)
    for demand in demands:
        client.subscribe("blob", demand)
    client.data_to_send()
    sizes = element_sizes or [0] * len(demands)
    opening = encode(Hello()) + b"".join(
        encode(Subscribed(subscriber=s, element_size=size)) for s, size in enumerate(sizes, 1)
    )
    return client, opening


def feed(client: Connection, reads: list[bytes], steps: list[int] | None = None) -> tuple[list[object], str | None]:
    """feed_reads, its events normalized."""
    events, error = feed_reads(client, reads, steps)
    return normalized(events, bytes_only=True), error


def both_paths(
    wire: bytes,
    reads: list[int],
    demands: list[int],
    element_sizes: list[int] | None = None,
    steps: list[int] | None = None,
) -> tuple[object, object]:
    results = []
    for slow in (False, True):
        client, opening = opened_client(demands, element_sizes)
        with unpacker_only() if slow else nullcontext():
            results.append(feed(client, split_into_reads(opening + wire, reads), steps))
    return results[0], results[1]


def element(stream: int, index: int, size: int) -> bytes:
    return bytes((stream * 31 + index + offset) % 256 for offset in range(size))


# ---- the header reader ------------------------------------------------------


@pytest.mark.parametrize("id_form", sorted(ID_FORMS))
@pytest.mark.parametrize("bin_form", sorted(BIN_FORMS))
@pytest.mark.parametrize("subscriber", [0, 1, 127, 128, 255, 256, 65535, 65536, 2**32, 2**63 - 1])
@pytest.mark.parametrize("size", [0, 1, 8, 255, 256, 65535, 65536])
def test_every_well_formed_header_is_read(id_form: str, bin_form: str, subscriber: int, size: int) -> None:
    message = on_next(subscriber, bytes(size), id_form, bin_form)
    header = read_on_next_header(message, LIMITS.max_message_size)
    assert header is not None
    assert (header.subscriber, header.size, header.length) == (subscriber, size, len(message))
    assert header.header == message[: len(message) - size]
    assert msgpack.unpackb(message) == [5, subscriber, bytes(size)]
    # Every prefix of the header is "more bytes will tell".
    for cut in range(1, len(header.header)):
        assert read_on_next_header(message[:cut], LIMITS.max_message_size) == INCOMPLETE_ON_NEXT_HEADER
    # A message over the limit is the Unpacker's to refuse.
    assert read_on_next_header(message, len(message) - 1) is None


@pytest.mark.parametrize(
    "message",
    [
        encode(Request(subscriber=1, demand=5)),
        encode(OnComplete(subscriber=1)),
        encode(Subscribed(subscriber=1, element_size=8)),
        b"\x93\x05\xd0\x01\xc4\x01x",  # an int8 Id: not the usual header
        b"\x93\x05\x01\xa1x",  # a str element
        b"\x93\x05\xcf\x80\x00\x00\x00\x00\x00\x00\x00\xc4\x00",  # an Id above 2**63 - 1
        b"\x94\x05\x01\xc4\x00",
        b"",
    ],
)
def test_anything_else_is_left_to_the_unpacker(message: bytes) -> None:
    assert read_on_next_header(message, LIMITS.max_message_size) is None


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=MAX_ON_NEXT_HEADER_SIZE + 4))
def test_a_header_read_from_any_bytes_is_what_msgpack_reads(data: bytes) -> None:
    header = read_on_next_header(data, LIMITS.max_message_size)
    if header is None or header == INCOMPLETE_ON_NEXT_HEADER:
        return
    message = data[: header.length].ljust(header.length, b"\x00")
    assert msgpack.unpackb(message, raw=False) == [5, header.subscriber, message[len(header.header) :]]


# ---- the run reader ---------------------------------------------------------


def header_of(message: bytes) -> OnNextHeader:
    header = read_on_next_header(message, LIMITS.max_message_size)
    assert header is not None and header.length
    return header


@settings(max_examples=200, deadline=None)
@given(
    size=st.sampled_from([0, 1, 8, 100, 255, 256, 3000]),
    count=st.integers(1, 2100),
    max_count=st.integers(1, 3000),
    tail=st.sampled_from(
        [
            b"",
            encode(OnComplete(subscriber=1)),
            on_next(2, b"12345678"),
            on_next(1, b"1234567"),  # another size
            on_next(1, b"12345678", "uint8"),  # the same Id, written otherwise
            b"\x93\x05\x01\xc4",  # the start of one
        ]
    ),
)
def test_a_run_ends_at_the_first_message_with_another_header(
    size: int, count: int, max_count: int, tail: bytes
) -> None:
    elements = [element(1, index, size) for index in range(count)]
    data = b"".join(on_next(1, one) for one in elements) + tail
    reader = RunReader()
    taken = reader.take(memoryview(data), header_of(data), max_count)
    expected = elements[:max_count]
    if tail[: len(header_of(data).header)] == header_of(data).header and len(tail) >= header_of(data).length:
        expected = (elements + [tail[len(header_of(data).header) :]])[:max_count]
    assert taken == expected
    assert all(type(one) is bytes for one in taken)


def test_the_reader_keeps_a_bounded_number_of_compiled_headers() -> None:
    reader = RunReader()
    for size in range(100):
        data = on_next(1, bytes(size)) * 3
        assert reader.take(data, header_of(data), 10) == [bytes(size)] * 3
    assert len(reader._forms) <= 16


# ---- the connection: the same events as through the Unpacker ----------------


@st.composite
def run_traffic(draw: st.DrawFn) -> tuple[bytes, list[int], list[int]]:
    """Runs of onNext for up to three streams, written in any msgpack form,
    mixed with control messages; and each stream's demand and element size
    (small demands and fixed sizes make some runs break a rule)."""
    streams = draw(st.integers(1, 3))
    demands = [draw(st.sampled_from([1 << 40, 1 << 40, 3, 20, 200])) for _ in range(streams)]
    sizes = [draw(st.sampled_from([0, 0, 0, 8])) for _ in range(streams)]
    wire = bytearray()
    counters = [0] * (streams + 2)
    for _ in range(draw(st.integers(0, 8))):
        kind = draw(st.sampled_from(["run", "run", "run", "control"]))
        stream = draw(st.integers(1, streams + 1))  # (streams + 1: not subscribed)
        if kind == "control":
            message = draw(
                st.sampled_from(
                    [
                        encode(OnComplete(subscriber=stream)),
                        encode(Cancel(subscriber=stream)),
                        encode(Request(subscriber=stream, demand=4)),
                        encode(Subscribed(subscriber=stream)),
                    ]
                )
            )
            wire += message
            continue
        size = draw(st.sampled_from([0, 1, 8, 8, 8, 255, 256, 1024, 70000]))
        id_form = draw(st.sampled_from(sorted(ID_FORMS)))
        bin_form = draw(st.sampled_from(sorted(BIN_FORMS)))
        count = draw(st.integers(1, 5) if size > 1024 else st.one_of(st.integers(1, 5), st.integers(1, 400)))
        for _ in range(count):
            wire += on_next(stream, element(stream, counters[stream], size), id_form, bin_form)
            counters[stream] += 1
    return bytes(wire), demands, sizes


READS = st.lists(st.one_of(st.integers(1, 20), st.integers(1, 5000), st.integers(1, 200_000)), max_size=30)


def reads_at_messages(opening: int, wire: bytes, picks: list[int]) -> list[int]:
    """Read sizes that end where messages start (at the picked ones, or all
    if none is picked): every run starts at the front of a read, where the
    run reader sees it first."""
    starts = message_starts(wire)
    ends = sorted({starts[pick % len(starts)] for pick in picks} or set(starts)) if starts else []
    bounds = [0, *(opening + end for end in ends if end), opening + len(wire)]
    return [end - start for start, end in zip(bounds, bounds[1:]) if end > start]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(
    traffic=run_traffic(),
    reads=READS,
    steps=st.lists(st.integers(1, 3), max_size=10),
    at_messages=st.none() | st.lists(st.integers(0, 2**16), max_size=8),
)
def test_runs_arrive_as_through_the_unpacker(
    traffic: tuple[bytes, list[int], list[int]], reads: list[int], steps: list[int], at_messages: list[int] | None
) -> None:
    wire, demands, sizes = traffic
    if at_messages is not None:
        reads = reads_at_messages(len(opened_client(demands, sizes)[1]), wire, at_messages)
    fast, slow = both_paths(wire, reads, demands, sizes, steps)
    assert fast == slow


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(
    traffic=run_traffic(),
    flips=st.lists(
        st.tuples(
            st.integers(0, 2**32),
            st.sampled_from([0x00, 0x01, 0x05, 0x08, 0x7F, 0x80, 0x93, 0x94, 0xA1, 0xC0, 0xC4, 0xC5, 0xC6, 0xCC, 0xCF, 0xD0, 0xFF])
            | st.integers(0, 255),
        ),
        min_size=1,
        max_size=3,
    ),
    reads=READS,
)
def test_damaged_runs_fail_as_through_the_unpacker(
    traffic: tuple[bytes, list[int], list[int]], flips: list[tuple[int, int]], reads: list[int]
) -> None:
    wire, demands, sizes = traffic
    if not wire:
        return
    damaged = bytearray(wire)
    for position, value in flips:
        damaged[position % len(damaged)] = value
    fast, slow = both_paths(bytes(damaged), reads, demands, sizes)
    assert fast == slow


def mixed_wire() -> bytes:
    """Two streams' runs of two sizes, control messages between them."""
    return (
        b"".join(on_next(1, element(1, index, 8)) for index in range(5))
        + encode(Subscribe(publisher="echo", subscriber=3, initial_demand=1))
        + b"".join(on_next(2, element(2, index, 3), "uint16", "bin32") for index in range(4))
        + b"".join(on_next(1, element(1, index, 8)) for index in range(5, 9))
        + b"".join(on_next(1, element(1, index, 300)) for index in range(9, 12))
        + encode(OnComplete(subscriber=2))
        + on_next(1, element(1, 12, 8))
    )


def test_a_wire_cut_at_every_byte_gives_the_same_events() -> None:
    wire = mixed_wire()
    demands = [1 << 40, 1 << 40]
    opening = len(opened_client(demands)[1])
    whole = both_paths(wire, [], demands)
    assert whole[0] == whole[1] and whole[0][1] is None  # type: ignore[index]
    for cut in range(1, len(wire)):
        assert both_paths(wire, [opening + cut], demands) == whole
    for size in (1, 2, 3, 7, 13):
        assert both_paths(wire, [opening] + [size] * len(wire), demands) == whole


@pytest.mark.parametrize("demand", [1, 7, 8, 9])
def test_a_run_beyond_demand_fails_after_the_elements_within_it(demand: int) -> None:
    wire = b"".join(on_next(1, element(1, index, 8)) for index in range(8))
    fast, slow = both_paths(wire, [len(wire) + 1000], [demand])
    assert fast == slow
    events, error = fast  # type: ignore[misc]
    if demand < 8:
        assert error is not None and "onNext without demand on stream 1" in error
    assert events[-1] == (1, [element(1, index, 8) for index in range(min(demand, 8))])


def test_a_long_run_is_read_outside_the_unpacker() -> None:
    client, opening = opened_client([1 << 40])
    client.receive_data(opening)
    client.events()
    elements = [element(1, index, 8) for index in range(5000)]
    wire = b"".join(on_next(1, one) for one in elements)
    # Reads that end inside a message, as they usually do.
    received: list[bytes] = []
    for start in range(0, len(wire), 4099):
        client.receive_data(wire[start : start + 4099])
        received += elements_of(client.events(), 1)
        # The Unpacker was only ever fed the rest of a message a read
        # ended inside, and holds nothing once it is all there.
        assert client._fed - client._message_end < 13
    assert received == elements
    assert client._fed < 13 * (len(wire) // 4099 + 1)
    assert client.outstanding_demand(1) == (1 << 40) - 5000


@pytest.mark.parametrize("kind", ["sizes", "streams"])
def test_messages_that_are_not_a_run_go_to_the_unpacker_whole(kind: str) -> None:
    # Elements of changing sizes, or two streams taking turns: no message
    # repeats the one before it, so the read goes to the Unpacker at once
    # instead of through the run reader one message at a time (which
    # cost ten times the Unpacker's path per element).
    client, opening = opened_client([1 << 40, 1 << 40])
    client.receive_data(opening)
    client.events()
    if kind == "sizes":
        messages = [(1, element(1, index, 8 + index % 3)) for index in range(300)]
    else:
        messages = [(1 + index % 2, element(1 + index % 2, index, 8)) for index in range(300)]
    wire = b"".join(on_next(stream, one) for stream, one in messages)
    taken = []
    real_take = client._runs.take
    client._runs.take = lambda *args: taken.append(args) or real_take(*args)  # type: ignore[method-assign]
    fed = client._fed
    client.receive_data(wire)
    events = client.events()
    assert taken == []
    assert client._fed - fed == len(wire)  # all of it through the Unpacker
    assert [(stream, one) for stream, elements in normalized(events) for one in elements] == messages  # type: ignore[misc]


@pytest.mark.parametrize(
    ("pieces", "counted"),
    [
        # A read that ends inside a message: the Unpacker finishes that one,
        # and the rest of the next read is a run.
        ([(8, 5), "cut", (8, 6)], True),
        # A run, then the same stream's element of another size, last.
        ([(8, 6), (3, 1)], True),
        # Finished by the Unpacker, a run, another size last.
        ([(8, 5), "cut", (8, 6), (3, 1)], True),
        # A read that starts with no run goes to the Unpacker whole.
        ([(3, 1), (8, 6), (5, 1)], False),
    ],
    ids=["read-ends-inside", "other-size-last", "around-a-run", "no-run-first"],
)
def test_a_batch_knows_its_byte_count_whichever_path_took_its_elements(pieces: list[object], counted: bool) -> None:
    """A batch's byte count is its elements' (the session charges it against
    the memory budget); where a run took elements, the connection counts it
    as it takes them rather than have it measured element by element."""
    client, opening = opened_client([1 << 40])
    client.receive_data(opening)
    client.events()
    wire = bytearray()
    cuts = []
    index = 0
    for piece in pieces:
        if piece == "cut":
            cuts.append(len(wire) - 3)
            continue
        size, count = piece  # type: ignore[misc]
        for _ in range(count):
            wire += on_next(1, element(1, index, size))
            index += 1
    bounds = [0, *cuts, len(wire)]
    batches = []
    for start, end in zip(bounds, bounds[1:]):
        client.receive_data(bytes(wire[start:end]))
        batches += [event.elements for event in client.events() if type(event) is Elements]
    assert sum(map(len, batches)) == index
    assert (batches[-1]._nbytes is not None) == counted
    for batch in batches:
        assert batch.nbytes == sum(map(len, batch))


def test_elements_are_bytes_that_do_not_hold_the_read() -> None:
    client, opening = opened_client([1 << 40])
    client.receive_data(opening + on_next(1, b"a" * 8) * 4)
    (event,) = [event for event in client.events() if type(event) is Elements]
    assert list(event.elements) == [b"a" * 8] * 4
    assert all(type(one) is bytes for one in event.elements)


RUN = b"".join(on_next(1, element(1, index, 8)) for index in range(6))


@pytest.mark.parametrize(
    ("before", "run", "element_size", "error"),
    [
        (b"", b"".join(on_next(1, bytes(7)) for _ in range(6)), 8, "element of 7 bytes on a stream with elementSize 8"),
        (encode(OnComplete(subscriber=1)), RUN, 0, "onNext for unknown subscriber id 1"),
        (b"", RUN.replace(b"\x93\x05\x01", b"\x93\x05\x05"), 0, "onNext for unknown subscriber id 5"),
        (encode(OnNextPart(subscriber=1, element=0, data=b"ab")), RUN, 0, "onNext in the middle of a split element"),
        (b"", RUN, 8, None),
    ],
    ids=["wrong-size", "completed", "unknown", "mid-split", "right-size"],
)
def test_a_run_a_rule_refuses_fails_as_through_the_unpacker(
    before: bytes, run: bytes, element_size: int, error: str | None
) -> None:
    opening = len(opened_client([1 << 40], [element_size])[1])
    fast, slow = both_paths(before + run, [opening, len(before)], [1 << 40], [element_size])
    assert fast == slow
    if error is None:
        assert fast[1] is None  # type: ignore[index]
    else:
        assert error in fast[1]  # type: ignore[index, operator]


def test_a_run_for_a_cancelled_stream_is_dropped() -> None:
    for slow in (False, True):
        client, opening = opened_client([1 << 40, 1 << 40])
        client.receive_data(opening)
        client.events()
        client.cancel(1)
        with unpacker_only() if slow else nullcontext():
            client.receive_data(RUN)
            client.receive_data(on_next(2, b"x") * 3)
            assert normalized(client.events()) == [(2, [b"x"] * 3)]


def test_a_run_before_subscribed_fails_as_through_the_unpacker() -> None:
    results = []
    for slow in (False, True):
        client = Connection(limits=LIMITS)
        client.subscribe("blob", 100)
        client.data_to_send()
        with unpacker_only() if slow else nullcontext():
            results.append(feed(client, [encode(Hello()), RUN]))
    assert results[0] == results[1]
    assert results[0][1] is not None and "onNext" in results[0][1]
