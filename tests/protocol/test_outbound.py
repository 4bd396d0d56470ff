"""The outbound scheduler: control first, fair round-robin, packing and splitting.

The scheduler is reached through the connection (it needs publications in
the right states); the wire it writes is checked with ``MessageDecoder``.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers import SMALL_LIMITS, ConnectionPair, decode, elements_of
from rstreams.protocol import (
    Cancel,
    OnComplete,
    OnNext,
    OnNextLastPart,
    OnNextPacked,
    OnNextPart,
    ProtocolLimits,
    Request,
    Subscribe,
    Subscribed,
    encode,
)


def written_messages(pair: ConnectionPair, max_bytes: int) -> list[list[object]]:
    """The messages of each data_to_send(max_bytes) call, until nothing is left."""
    writes = []
    while pair.server.has_data_to_send:
        writes.append(decode(bytes(pair.server.data_to_send(max_bytes)), SMALL_LIMITS))
    return writes


def test_control_goes_before_data_queued_earlier(small_pair: ConnectionPair) -> None:
    pair = small_pair
    subscriber = pair.open_stream(pair.client, initial_demand=100)
    pair.server.send_elements(subscriber, [b"d" * 100] * 100)
    pair.server.data_to_send(200)  # part of the data is out already
    own = pair.server.subscribe("the-other-way", 1)
    pair.server.request(own, 2)
    pair.server.cancel(own)
    first_write = decode(bytes(pair.server.data_to_send(200)), SMALL_LIMITS)
    assert first_write[:3] == [
        Subscribe(publisher="the-other-way", subscriber=own, initial_demand=1),
        Request(subscriber=own, demand=2),
        Cancel(subscriber=own),
    ]
    assert all(isinstance(message, OnNext) for message in first_write[3:])


def test_subscribed_goes_before_the_elements_of_its_stream(small_pair: ConnectionPair) -> None:
    pair = small_pair
    subscriber = pair.client.subscribe("ticker", 1)
    pair.send(pair.client)
    pair.server.accept(subscriber)
    pair.server.send_elements(subscriber, [b"x"])
    assert decode(pair.drain(pair.server)) == [
        Subscribed(subscriber=subscriber),
        OnNext(subscriber=subscriber, element=b"x"),
    ]


def test_streams_take_turns(small_pair: ConnectionPair) -> None:
    pair = small_pair
    streams = [pair.open_stream(pair.client, initial_demand=100) for _ in range(3)]
    for subscriber in streams:
        pair.server.send_elements(subscriber, [b"%d" % subscriber * 100] * 100)
    order = [message.subscriber for message in decode(pair.drain(pair.server), SMALL_LIMITS)]
    turns = [(subscriber, len(list(run))) for subscriber, run in itertools.groupby(order)]
    # A turn writes about split_threshold bytes (1024): ten 105-byte onNext
    # messages, then the next stream's turn comes.
    assert turns == [(subscriber, 10) for _ in range(10) for subscriber in streams]


def test_packed_runs_are_bounded_by_the_split_threshold(small_pair: ConnectionPair) -> None:
    pair = small_pair
    subscriber = pair.open_stream(pair.client, initial_demand=1000, element_size=8)
    packed = bytes(range(256)) * 16  # 512 elements
    pair.server.send_packed(subscriber, packed)
    messages = decode(pair.drain(pair.server), SMALL_LIMITS)
    assert all(isinstance(message, OnNextPacked) for message in messages)
    assert all(len(message.messages) <= SMALL_LIMITS.split_threshold for message in messages)
    assert b"".join(message.messages for message in messages) == packed


def test_list_of_fixed_size_elements_is_packed(small_pair: ConnectionPair) -> None:
    pair = small_pair
    subscriber = pair.open_stream(pair.client, initial_demand=1000, element_size=4)
    elements = [b"%04d" % i for i in range(600)]
    pair.server.send_elements(subscriber, elements)
    messages = decode(pair.drain(pair.server), SMALL_LIMITS)
    assert all(isinstance(message, OnNextPacked) for message in messages)
    assert sum(message.count for message in messages) == 600
    assert b"".join(message.messages for message in messages) == b"".join(elements)


def test_split_parts_have_the_size_of_the_split_threshold(small_pair: ConnectionPair) -> None:
    pair = small_pair
    subscriber = pair.open_stream(pair.client, initial_demand=2)
    pair.server.send_elements(subscriber, [b"a" * 4096, b"b" * 1025])
    messages = decode(pair.drain(pair.server), SMALL_LIMITS)
    sizes = [(type(message), len(message.data)) for message in messages]
    assert sizes == [
        (OnNextPart, 1024),
        (OnNextPart, 1024),
        (OnNextPart, 1024),
        (OnNextLastPart, 1024),
        (OnNextPart, 1024),
        (OnNextLastPart, 1),
    ]
    # Each split element has its own element Id within the stream.
    assert messages[0].element == messages[3].element != messages[4].element == messages[5].element


def _part_sizes(limits: ProtocolLimits, *sizes: int) -> list[tuple[type, int]]:
    pair = ConnectionPair(limits)
    pair.open()
    subscriber = pair.open_stream(pair.client, initial_demand=len(sizes))
    pair.server.send_elements(subscriber, [bytes([index]) * size for index, size in enumerate(sizes)])
    messages = decode(pair.drain(pair.server), limits)
    return [(type(m), len(m.element if isinstance(m, OnNext) else m.data)) for m in messages]


def test_parts_carry_part_size_and_small_split_elements_go_in_two_halves() -> None:
    limits = ProtocolLimits(split_threshold=1024, part_size=4096)
    assert _part_sizes(limits, 1024, 1025, 4096, 4097, 10000) == [
        (OnNext, 1024),  # not above the threshold: whole
        (OnNextPart, 513),  # above it, but no larger than a part: halves
        (OnNextLastPart, 512),
        (OnNextPart, 2048),
        (OnNextLastPart, 2048),
        (OnNextPart, 4096),  # larger than a part: parts of part_size, then the rest
        (OnNextLastPart, 1),
        (OnNextPart, 4096),
        (OnNextPart, 4096),
        (OnNextLastPart, 1808),
    ]


def test_the_default_parts_are_256_kib() -> None:
    assert _part_sizes(ProtocolLimits(), 1 << 20, 100 * _KiB) == [
        (OnNextPart, 256 * _KiB),
        (OnNextPart, 256 * _KiB),
        (OnNextPart, 256 * _KiB),
        (OnNextLastPart, 256 * _KiB),
        (OnNextPart, 50 * _KiB),
        (OnNextLastPart, 50 * _KiB),
    ]


def test_parts_stay_within_the_message_size() -> None:
    # A part_size beyond what a message may carry is cut to fit (with room
    # for the header), so that the peer with the same limits accepts it.
    limits = ProtocolLimits(max_message_size=4096, max_element_size=65536, split_threshold=1024, part_size=1 << 20)
    sizes = _part_sizes(limits, 20000)
    assert [size for _, size in sizes] == [4032] * 4 + [20000 - 4 * 4032]
    assert [kind for kind, _ in sizes] == [OnNextPart] * 4 + [OnNextLastPart]


def test_each_visit_writes_one_part_of_a_split_element(small_pair: ConnectionPair) -> None:
    pair = small_pair
    subscriber = pair.open_stream(pair.client, initial_demand=1)
    pair.server.send_elements(subscriber, [b"x" * 3000])
    writes = written_messages(pair, max_bytes=1)
    assert [[type(message) for message in write] for write in writes] == [[OnNextPart], [OnNextPart], [OnNextLastPart]]


def test_data_to_send_returns_a_fresh_buffer_each_time(small_pair: ConnectionPair) -> None:
    pair = small_pair
    subscriber = pair.open_stream(pair.client, initial_demand=2)
    pair.server.send_elements(subscriber, [b"a"])
    first = pair.server.data_to_send()
    pair.server.send_elements(subscriber, [b"b"])
    second = pair.server.data_to_send()
    first[:] = b"overwritten by the caller"
    assert bytes(second) == encode(OnNext(subscriber=subscriber, element=b"b"))


def test_nothing_to_send_is_an_empty_buffer(small_pair: ConnectionPair) -> None:
    assert not small_pair.server.has_data_to_send
    assert small_pair.server.data_to_send() == b""


def test_queued_bytes_counts_what_is_not_written_yet(small_pair: ConnectionPair) -> None:
    pair = small_pair
    subscriber = pair.open_stream(pair.client, initial_demand=10)
    pair.server.send_elements(subscriber, [b"x" * 3000, b"y" * 10])
    assert pair.server.queued_bytes(subscriber) == 3010
    pair.server.data_to_send(1)  # one part of the first element
    assert pair.server.queued_bytes(subscriber) == 3010 - 1024
    pair.drain(pair.server)
    assert pair.server.queued_bytes(subscriber) == 0


def test_terminal_is_written_once_the_queue_is_empty(small_pair: ConnectionPair) -> None:
    pair = small_pair
    subscriber = pair.open_stream(pair.client, initial_demand=100)
    pair.server.send_elements(subscriber, [b"e" * 100] * 30)
    pair.server.complete(subscriber)
    writes = written_messages(pair, max_bytes=1)
    assert len(writes) > 2
    flat = [message for write in writes for message in write]
    assert flat[-1] == OnComplete(subscriber=subscriber)
    assert sum(isinstance(message, OnNext) for message in flat) == 30


def test_data_to_send_exceeds_max_bytes_by_at_most_one_message(small_pair: ConnectionPair) -> None:
    pair = small_pair
    subscriber = pair.open_stream(pair.client, initial_demand=1000)
    pair.server.send_elements(subscriber, [b"x" * 10] * 1000)
    message_size = len(encode(OnNext(subscriber=subscriber, element=b"x" * 10)))
    while pair.server.has_data_to_send:
        assert len(pair.server.data_to_send(100)) < 100 + message_size


def test_fixed_size_elements_larger_than_the_split_threshold_are_split(small_pair: ConnectionPair) -> None:
    pair = small_pair
    subscriber = pair.open_stream(pair.client, initial_demand=1, element_size=3000)
    pair.server.send_packed(subscriber, b"p" * 3000)
    messages = decode(pair.drain(pair.server), SMALL_LIMITS)
    assert [type(message) for message in messages] == [OnNextPart, OnNextPart, OnNextLastPart]


def test_packed_messages_fit_the_peers_max_message_size(small_pair: ConnectionPair) -> None:
    pair = small_pair
    # 3000-byte elements are within max_message_size (4096), so the peer accepts the stream...
    subscriber = pair.open_stream(pair.client, initial_demand=2, element_size=3000)
    pair.server.send_elements(subscriber, [b"a" * 3000, b"b" * 3000])
    # ...and must then receive its elements without a protocol error.
    assert elements_of(pair.send(pair.server), subscriber) == [b"a" * 3000, b"b" * 3000]


@pytest.mark.parametrize("max_bytes", [1, 7, 40, 100, 1000, 100_000])
def test_runs_of_small_elements_keep_order_sizes_and_write_bounds(small_pair: ConnectionPair, max_bytes: int) -> None:
    # Runs of one size go out through one join, runs of mixed sizes (empty
    # elements included) element by element: either way every element
    # arrives in order, and a write passes max_bytes by at most one message.
    pair = small_pair
    subscriber = pair.open_stream(pair.client, initial_demand=10_000)
    uniform = [bytes([i % 256]) * 10 for i in range(300)]
    mixed = [bytes([i % 256]) * (i % 7) for i in range(300)]
    large = [b"y" * 900, b"z" * 5]
    pair.server.send_elements(subscriber, uniform)
    pair.server.send_elements(subscriber, mixed)
    pair.server.send_elements(subscriber, large)
    largest = max(len(encode(OnNext(subscriber=subscriber, element=e))) for e in uniform + mixed + large)
    received: list[bytes] = []
    while pair.server.has_data_to_send:
        data = bytes(pair.server.data_to_send(max_bytes))
        assert len(data) < max(max_bytes, 1) + largest
        for message in decode(data, SMALL_LIMITS):
            assert isinstance(message, OnNext)
            received.append(message.element)
    assert received == uniform + mixed + large


@pytest.mark.parametrize("subscriber", [0, 1, 127, 128, 65536, 2**32, 2**63 - 1])
@pytest.mark.parametrize("element_size", [0, 8, 300, 2**20])
def test_stream_control_layouts_are_encode_byte_for_byte(subscriber: int, element_size: int) -> None:
    from rstreams.protocol._outbound import Publication

    publication = Publication(subscriber, "name", 0)
    publication.element_size = element_size
    assert publication.subscribed_message() == encode(Subscribed(subscriber=subscriber, element_size=element_size))
    assert publication.on_complete_message() == encode(OnComplete(subscriber=subscriber))


# ---- gathered writes: buffers_to_send --------------------------------------

_KiB = 1024


def _queue(pair: ConnectionPair, streams: list[list[bytes]]) -> None:
    # All streams open first: opening one drains what the server queued.
    subscribers = [pair.open_stream(pair.client, initial_demand=len(elements) + 1) for elements in streams]
    for subscriber, elements in zip(subscribers, streams):
        pair.server.send_elements(subscriber, elements)


@settings(deadline=None, max_examples=60)
@given(
    streams=st.lists(
        st.lists(
            st.sampled_from([8, 1000, 16 * _KiB - 1, 16 * _KiB + 1, 64 * _KiB, 64 * _KiB + 1, 200 * _KiB, 300 * _KiB]),
            min_size=1,
            max_size=5,
        ),
        min_size=1,
        max_size=3,
    ),
    max_bytes=st.sampled_from([1, 1000, 64 * _KiB, 100 * _KiB, 256 * _KiB, 1 << 20]),
    runs=st.lists(st.tuples(st.sampled_from([0, 8, 1000]), st.sampled_from([1, 20, 3000])), max_size=3),
)
def test_buffers_to_send_writes_exactly_what_data_to_send_writes(
    streams: list[list[int]], max_bytes: int, runs: list[tuple[int, int]]
) -> None:
    # Same schedule, two ways of taking it: every call returns the same
    # bytes, large parts come as views of the element, not copies, and long
    # runs of small elements as their one join (runs: more streams, each
    # of elements of one size).
    streams = streams + [[size] * count for size, count in runs]
    contents = [[bytes([index % 251]) * size for index, size in enumerate(sizes)] for sizes in streams]
    copying, gathering = ConnectionPair(), ConnectionPair()
    for pair in (copying, gathering):
        pair.open()
        _queue(pair, contents)
    elements = {id(element) for elements in contents for element in elements}
    views = joins = 0
    while copying.server.has_data_to_send:
        expected = bytes(copying.server.data_to_send(max_bytes))
        buffers = gathering.server.buffers_to_send(max_bytes)
        assert b"".join(buffers) == expected
        assert all(len(buffer) for buffer in buffers)
        for buffer in buffers:
            if isinstance(buffer, memoryview) and isinstance(buffer.obj, bytes):
                assert len(buffer) >= 16 * _KiB
                if id(buffer.obj) in elements:
                    views += 1
                else:  # a run's join: whole onNext messages
                    assert all(isinstance(message, OnNext) for message in decode(bytes(buffer)))
                    joins += 1
    assert not gathering.server.has_data_to_send
    assert gathering.server.buffers_to_send(max_bytes) == []
    if any(size > 64 * _KiB for sizes in streams for size in sizes):
        assert views  # a split element's parts went out uncopied
    if max_bytes >= 64 * _KiB and any(size and count == 3000 for size, count in runs):
        assert joins  # a long run of one size went out as its join


@settings(deadline=None, max_examples=60)
@given(
    streams=st.lists(
        st.lists(st.sampled_from([8, 1000, 16 * _KiB + 1, 64 * _KiB + 1, 200 * _KiB, 1 << 20]), min_size=1, max_size=4),
        min_size=1,
        max_size=3,
    ),
    max_bytes=st.sampled_from([1, 1000, 64 * _KiB, 256 * _KiB]),
    factor=st.sampled_from([2, 4, 16]),
)
def test_larger_gathered_writes_carry_the_same_bytes(streams: list[list[int]], max_bytes: int, factor: int) -> None:
    # max_gathered lets a write carry more views than it copies bytes: the
    # calls end elsewhere (so the streams' turns may fall elsewhere too),
    # each stays within its two bounds (one message, one part past them),
    # and the peer receives every element, in order.
    contents = [[bytes([index % 251]) * size for index, size in enumerate(sizes)] for sizes in streams]
    gathering = ConnectionPair()
    gathering.open()
    subscribers = [gathering.open_stream(gathering.client, initial_demand=len(elements) + 1) for elements in contents]
    for subscriber, elements in zip(subscribers, contents):
        gathering.server.send_elements(subscriber, elements)
    written = bytearray()
    while gathering.server.has_data_to_send:
        buffers = gathering.server.buffers_to_send(max_bytes, max_gathered=factor * max_bytes)
        views = sum(len(b) for b in buffers if isinstance(b, memoryview) and isinstance(b.obj, bytes))
        copied = sum(map(len, buffers)) - views
        assert copied <= max_bytes + (1 << 20) + 64
        assert views <= factor * max_bytes + ProtocolLimits().part_size
        written += b"".join(buffers)
    gathering.client.receive_data(written)
    events = gathering.client.events()
    assert [elements_of(events, subscriber) for subscriber in subscribers] == contents


def test_buffers_to_send_then_data_to_send_keeps_the_byte_budget(pair: ConnectionPair) -> None:
    # A gathered call leaves nothing behind that would shorten the next
    # copying one.
    subscriber = pair.open_stream(pair.client, initial_demand=10)
    pair.server.send_elements(subscriber, [b"a" * 300 * _KiB, b"b" * 8] * 3)
    first = pair.server.buffers_to_send(128 * _KiB)
    assert sum(map(len, first)) >= 128 * _KiB
    assert len(pair.server.data_to_send(128 * _KiB)) >= 128 * _KiB


def _received_in_sends(
    elements: Sequence[bytes | memoryview],
    batches: list[int] | None,
    written_between: set[int],
    max_bytes: int,
    element_size: int = 0,
) -> list[bytes]:
    """What the subscriber receives of ``elements`` sent on a new stream in
    one ``send_elements`` (``batches`` None), or in sends of ``batches``
    elements each and of one after those, with the writes so far taken
    after each send that ends at an index in ``written_between``."""
    pair = ConnectionPair(SMALL_LIMITS)
    pair.open()
    subscriber = pair.open_stream(pair.client, initial_demand=len(elements), element_size=element_size)
    got: list[bytes] = []
    if batches is None:
        pair.server.send_elements(subscriber, elements)
    else:
        index = 0
        for step in itertools.chain(batches, itertools.repeat(1)):
            if index >= len(elements):
                break
            pair.server.send_elements(subscriber, elements[index : index + step])
            index += step
            if index - 1 in written_between:
                got += elements_of(pair.send(pair.server, max_bytes), subscriber)
    while pair.server.has_data_to_send:
        got += elements_of(pair.send(pair.server, max_bytes), subscriber)
    return got


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(st.sampled_from([0, 1, 7, 100, 300, 2000]), min_size=1, max_size=40),
    max_bytes=st.sampled_from([64, 500, 4096, 1 << 20]),
    written_between=st.sets(st.integers(min_value=0, max_value=39)),
)
def test_single_sends_write_what_one_send_of_the_same_elements_writes(
    sizes: list[int], max_bytes: int, written_between: set[int]
) -> None:
    # One send_elements per element (what Sink.send does), each joining the
    # publication's last chunk while the size stays the same, with writes
    # taken in the middle (a chunk being written may still grow): the
    # elements on the wire, in order, are those of one call with them all.
    # (Sizes above SMALL_LIMITS' split threshold go out in parts.)
    elements = [bytes([index % 256]) * size for index, size in enumerate(sizes)]
    singles = _received_in_sends(elements, [], written_between, max_bytes)
    assert singles == _received_in_sends(elements, None, set(), max_bytes) == elements


def test_single_sends_of_one_size_share_a_chunk(pair: ConnectionPair) -> None:
    subscriber = pair.open_stream(pair.client, initial_demand=10)
    for size in (3, 3, 3, 5, 5, 3):
        pair.server.send_elements(subscriber, [b"x" * size])
    publication = pair.server._publications[subscriber]
    assert [len(chunk) for chunk in publication.chunks] == [3, 2, 1]
    assert publication.queued_count == 6 and publication.queued_bytes == 22
    assert [len(e) for e in elements_of(pair.send(pair.server), subscriber)] == [3, 3, 3, 5, 5, 3]


@settings(max_examples=60, deadline=None)
@given(
    size=st.sampled_from([1, 8, 100, 2000]),
    count=st.integers(min_value=1, max_value=40),
    max_bytes=st.sampled_from([64, 500, 4096, 1 << 20]),
    written_between=st.sets(st.integers(min_value=0, max_value=39)),
    views=st.booleans(),
    batches=st.lists(st.integers(min_value=1, max_value=4), max_size=40),
)
def test_single_sends_on_a_fixed_size_stream_write_what_one_send_writes(
    size: int, count: int, max_bytes: int, written_between: set[int], views: bool, batches: list[int]
) -> None:
    # The same property on a fixed-size stream, whose runs of single sends
    # the scheduler packs as it packs a joined chunk (2000 bytes is above
    # SMALL_LIMITS' split threshold: those go out in parts), mixed with
    # sends of a few (packed chunks) as ``batches`` says. Elements may be
    # views of bytes, as a publisher's slices of a larger buffer are.
    backing = b"".join(bytes([index % 256]) * size for index in range(count))
    elements: list[bytes | memoryview] = [
        memoryview(backing)[index * size : (index + 1) * size] if views else backing[index * size : (index + 1) * size]
        for index in range(count)
    ]
    expected = [bytes(element) for element in elements]
    mixed = _received_in_sends(elements, batches, written_between, max_bytes, size)
    assert mixed == _received_in_sends(elements, None, set(), max_bytes, size) == expected


def test_single_sends_on_a_fixed_size_stream_share_a_chunk_and_go_out_packed(pair: ConnectionPair) -> None:
    subscriber = pair.open_stream(pair.client, initial_demand=10, element_size=4)
    for index in range(6):
        pair.server.send_elements(subscriber, [bytes([index]) * 4])
    publication = pair.server._publications[subscriber]
    assert [len(chunk) for chunk in publication.chunks] == [6]
    assert publication.queued_count == 6 and publication.queued_bytes == 24
    messages = decode(pair.drain(pair.server))
    assert messages == [OnNextPacked(subscriber=subscriber, count=6, messages=b"".join(bytes([i]) * 4 for i in range(6)))]


def test_a_single_buffer_of_another_type_on_a_fixed_size_stream_is_copied(pair: ConnectionPair) -> None:
    # Only bytes and views of bytes join a run; any other buffer on a
    # fixed-size stream is copied by the join, as for a batch (a reused
    # bytearray does not change what was sent).
    subscriber = pair.open_stream(pair.client, initial_demand=2, element_size=4)
    element = bytearray(b"abcd")
    pair.server.send_elements(subscriber, [element])
    element[:] = b"zzzz"
    pair.server.send_elements(subscriber, [b"efgh"])
    assert elements_of(pair.send(pair.server), subscriber) == [b"abcd", b"efgh"]


def test_an_empty_element_counts_one_byte_queued_however_it_was_queued(pair: ConnectionPair) -> None:
    # Else a queue of empty elements never reached max_queued_bytes nor the
    # memory budget (tests/runtime/test_empty_elements.py); every path that
    # queues or writes elements counts them the same way, and all of it
    # comes back once written.
    subscriber = pair.open_stream(pair.client, initial_demand=100)
    server = pair.server
    control = server.outbound_bytes
    server.send_elements(subscriber, [b""] * 5)  # one size
    assert server.queued_bytes(subscriber) == 5
    server.send_elements(subscriber, [b"", b"ab", b""])  # mixed sizes
    assert server.queued_bytes(subscriber) == 5 + 4
    for _ in range(3):
        server.send_elements(subscriber, [b""])  # one at a time (joined into one chunk)
    server.send_elements(subscriber, [b"cd"])
    server.send_elements(subscriber, [b""])
    assert server.queued_bytes(subscriber) == 5 + 4 + 3 + 2 + 1
    assert server.outbound_bytes == control + 15
    written = bytes(server.data_to_send(control + 7))  # the control, then part of the elements
    assert 0 < server.queued_bytes(subscriber) < 15
    assert server.outbound_bytes == server.queued_bytes(subscriber)
    written += pair.drain(server)
    assert server.queued_bytes(subscriber) == 0 and server.outbound_bytes == 0
    pair.client.receive_data(written)
    assert elements_of(pair.client.events(), subscriber) == [b""] * 6 + [b"ab"] + [b""] * 4 + [b"cd", b""]
