"""The connection state machine, driven as a client/server pair without I/O."""

from __future__ import annotations

import msgpack
import pytest

from helpers import SMALL_LIMITS, ConnectionPair, decode, elements_of
from rstreams.protocol import (
    UNBOUNDED,
    Cancel,
    Connection,
    ConnectionState,
    ElementBatch,
    Elements,
    Goodbye,
    HandshakeError,
    Hello,
    InvalidRequest,
    LocalProtocolError,
    Message,
    OnComplete,
    OnError,
    OnNext,
    OnNextLastPart,
    OnNextPacked,
    OnNextPart,
    ProtocolLimits,
    RemoteProtocolError,
    Request,
    Subscribe,
    Subscribed,
    encode,
)


def wire(*messages: Message) -> bytes:
    return b"".join(encode(message) for message in messages)


def assert_protocol_error(pair: ConnectionPair, receiver: Connection, data: bytes) -> RemoteProtocolError:
    """Feed ``data``; the receiver must fail and say goodbye with ``protocol error:``."""
    receiver.receive_data(data)
    with pytest.raises(RemoteProtocolError) as error:
        receiver.events()
        receiver.events()  # in case events before the bad message came first
    assert receiver.state is ConnectionState.ERROR
    goodbyes = [message for message in decode(pair.drain(receiver)) if isinstance(message, Goodbye)]
    assert len(goodbyes) == 1
    assert goodbyes[0].reason.startswith("protocol error:")
    assert goodbyes[0].reason == error.value.goodbye_reason
    return error.value


# ---- handshake -------------------------------------------------------------


def test_hello_is_queued_on_creation() -> None:
    connection = Connection()
    assert connection.state is ConnectionState.HANDSHAKING
    assert decode(ConnectionPair.drain(connection)) == [Hello(version=0, extensions=())]


def test_hello_both_ways() -> None:
    pair = ConnectionPair()
    assert pair.send(pair.client) == [Hello()]
    assert pair.server.state is ConnectionState.OPEN
    assert pair.client.state is ConnectionState.HANDSHAKING
    assert pair.send(pair.server) == [Hello()]
    assert pair.client.state is ConnectionState.OPEN
    assert pair.client.peer_hello == pair.server.peer_hello == Hello()


def test_hellos_may_cross() -> None:
    # Loose handshake: neither side waits for the other's hello.
    pair = ConnectionPair()
    from_client, from_server = pair.drain(pair.client), pair.drain(pair.server)
    assert pair.deliver(pair.server, from_client) == [Hello()]
    assert pair.deliver(pair.client, from_server) == [Hello()]


def test_hello_announces_extensions_and_unknown_ones_are_ignored() -> None:
    client, server = Connection(extensions=[7, 1000]), Connection()
    server.receive_data(ConnectionPair.drain(client))
    assert server.events() == [Hello(version=0, extensions=(7, 1000))]
    assert server.state is ConnectionState.OPEN


def test_optimistic_subscribe_right_after_hello() -> None:
    pair = ConnectionPair()
    subscriber = pair.client.subscribe("ticker", 4)
    data = pair.drain(pair.client)
    subscribe = Subscribe(publisher="ticker", subscriber=subscriber, initial_demand=4)
    assert decode(data) == [Hello(), subscribe]
    assert pair.deliver(pair.server, data) == [Hello(), subscribe]
    pair.server.accept(subscriber)
    pair.server.send_elements(subscriber, [b"a"])
    assert pair.send(pair.server) == [
        Hello(),
        Subscribed(subscriber=subscriber),
        Elements(subscriber=subscriber, elements=ElementBatch([b"a"])),
    ]


@pytest.mark.parametrize("version", [1, 2, -1])
def test_version_mismatch_is_a_handshake_error(version: int) -> None:
    pair = ConnectionPair()
    assert pair.send(pair.server) == [Hello()]  # the server's hello went out unprompted
    pair.server.receive_data(encode(Hello(version=version)))
    with pytest.raises(HandshakeError) as error:
        pair.server.events()
    assert error.value.peer_version == version
    assert pair.server.state is ConnectionState.ERROR
    (goodbye,) = decode(pair.drain(pair.server))
    assert isinstance(goodbye, Goodbye)
    assert f"version {version}" in goodbye.reason
    # The peer being refused sees the goodbye, tolerated as a first message too.
    assert pair.deliver(pair.client, encode(goodbye)) == [goodbye]


def test_version_mismatch_discards_optimistic_messages() -> None:
    client = Connection()
    client.receive_data(wire(Hello(version=1), Subscribe(publisher="ticker", subscriber=1)))
    with pytest.raises(HandshakeError):
        client.events()
    assert client.events() == []


FIRST_MESSAGES_OTHER_THAN_HELLO = [
    Subscribe(publisher="ticker", subscriber=1),
    Request(subscriber=1, demand=1),
    Cancel(subscriber=1),
    Subscribed(subscriber=1),
    OnNext(subscriber=1, element=b"x"),
    OnComplete(subscriber=1),
    OnError(subscriber=1, error="boom"),
    OnNextPacked(subscriber=1, count=1, messages=b"x"),
    OnNextPart(subscriber=1, element=0, data=b"x"),
    OnNextLastPart(subscriber=1, element=0, data=b"x"),
]


@pytest.mark.parametrize("message", FIRST_MESSAGES_OTHER_THAN_HELLO, ids=lambda message: type(message).__name__)
@pytest.mark.parametrize("subscribed_first", [False, True], ids=["fresh", "after own subscribe"])
def test_first_message_other_than_hello_is_a_protocol_error(message: Message, subscribed_first: bool) -> None:
    pair = ConnectionPair()
    if subscribed_first:
        # Our own optimistic subscribe must not make the peer's onNext acceptable.
        pair.client.subscribe("ticker", 1)
    pair.drain(pair.client)
    error = assert_protocol_error(pair, pair.client, encode(message))
    assert "hello" in error.goodbye_reason


def test_goodbye_as_first_message_is_accepted() -> None:
    client = Connection()
    client.receive_data(encode(Goodbye(reason="go away")))
    assert client.events() == [Goodbye(reason="go away")]
    assert client.state is ConnectionState.GOODBYE_RECEIVED
    assert client.goodbye_received == Goodbye(reason="go away")


def test_second_hello_is_a_protocol_error(pair: ConnectionPair) -> None:
    assert_protocol_error(pair, pair.client, encode(Hello()))


# ---- one stream, start to end ------------------------------------------------


def test_subscribe_subscribed_elements_complete(pair: ConnectionPair) -> None:
    subscriber = pair.client.subscribe("ticker?count=3", 3)
    assert subscriber == 1
    assert pair.send(pair.client) == [Subscribe(publisher="ticker?count=3", subscriber=1, initial_demand=3)]
    pair.server.accept(1)
    assert pair.send(pair.server) == [Subscribed(subscriber=1, element_size=0)]
    assert pair.server.publication_demand(1) == 3
    pair.server.send_elements(1, [b"a", b"bb", b""])
    pair.server.complete(1)
    assert pair.server.publication_demand(1) == 0
    assert pair.server.is_publishing(1) is False
    assert pair.send(pair.server) == [
        Elements(subscriber=1, elements=ElementBatch([b"a", b"bb", b""])),
        OnComplete(subscriber=1),
    ]
    assert pair.client.outstanding_demand(1) == 0
    assert not pair.server.has_data_to_send
    assert pair.client.state is pair.server.state is ConnectionState.OPEN


def test_demand_is_tracked_on_both_sides(pair: ConnectionPair) -> None:
    subscriber = pair.open_stream(pair.client, initial_demand=2)
    pair.client.request(subscriber, 3)
    assert pair.client.outstanding_demand(subscriber) == 5
    assert pair.send(pair.client) == [Request(subscriber=subscriber, demand=3)]
    assert pair.server.publication_demand(subscriber) == 5
    pair.server.send_elements(subscriber, [b"1", b"2"])
    assert pair.server.publication_demand(subscriber) == 3
    assert elements_of(pair.send(pair.server), subscriber) == [b"1", b"2"]
    assert pair.client.outstanding_demand(subscriber) == 3


def test_request_before_subscribed_is_allowed(pair: ConnectionPair) -> None:
    subscriber = pair.client.subscribe("ticker")
    pair.client.request(subscriber, 2)
    assert pair.send(pair.client) == [
        Subscribe(publisher="ticker", subscriber=subscriber),
        Request(subscriber=subscriber, demand=2),
    ]
    pair.server.accept(subscriber)
    assert pair.server.publication_demand(subscriber) == 2


def test_refusal_with_fail_before_accept(pair: ConnectionPair) -> None:
    subscriber = pair.client.subscribe("nope", 1)
    pair.send(pair.client)
    pair.server.fail(subscriber, "no such publisher: nope")
    assert not pair.server.is_publishing(subscriber)
    assert pair.send(pair.server) == [OnError(subscriber=subscriber, error="no such publisher: nope")]
    # The stream is over on both sides; a request for it is now a no-op.
    pair.client.request(subscriber, 1)
    assert not pair.client.has_data_to_send
    with pytest.raises(LocalProtocolError):
        pair.server.accept(subscriber)


def test_subscribed_after_refusal_is_a_protocol_error(pair: ConnectionPair) -> None:
    subscriber = pair.client.subscribe("nope")
    pair.deliver(pair.client, encode(OnError(subscriber=subscriber, error="no such publisher: nope")))
    assert_protocol_error(pair, pair.client, encode(Subscribed(subscriber=subscriber)))


def test_both_sides_publish_and_subscribe_with_the_same_id(pair: ConnectionPair) -> None:
    client_subscription = pair.client.subscribe("from-server", 10)
    server_subscription = pair.server.subscribe("from-client", 10)
    assert client_subscription == server_subscription == 1
    assert pair.send(pair.client) == [Subscribe(publisher="from-server", subscriber=1, initial_demand=10)]
    assert pair.send(pair.server) == [Subscribe(publisher="from-client", subscriber=1, initial_demand=10)]
    pair.client.accept(1, element_size=1)
    pair.server.accept(1)
    pair.client.send_elements(1, [b"c", b"c"])
    pair.server.send_elements(1, [b"server"])
    assert pair.send(pair.client) == [
        Subscribed(subscriber=1, element_size=1),
        Elements(subscriber=1, elements=ElementBatch([b"c", b"c"])),
    ]
    assert pair.send(pair.server) == [
        Subscribed(subscriber=1, element_size=0),
        Elements(subscriber=1, elements=ElementBatch([b"server"])),
    ]
    # Each side's Id 1 is two streams: cancelling one leaves the other alone.
    pair.client.cancel(1)
    assert pair.send(pair.client) == [Cancel(subscriber=1)]
    assert not pair.server.is_publishing(1)
    assert pair.client.is_publishing(1)
    pair.client.send_elements(1, [b"c"])
    pair.client.complete(1)
    assert pair.send(pair.client) == [Elements(subscriber=1, elements=ElementBatch([b"c"])), OnComplete(subscriber=1)]


def test_elements_for_different_streams_arrive_as_separate_events(pair: ConnectionPair) -> None:
    first = pair.open_stream(pair.client, initial_demand=5)
    second = pair.open_stream(pair.client, initial_demand=5)
    data = wire(
        OnNext(subscriber=first, element=b"1"),
        OnNext(subscriber=first, element=b"2"),
        OnNext(subscriber=second, element=b"a"),
        OnNext(subscriber=first, element=b"3"),
    )
    assert pair.deliver(pair.client, data) == [
        Elements(subscriber=first, elements=ElementBatch([b"1", b"2"])),
        Elements(subscriber=second, elements=ElementBatch([b"a"])),
        Elements(subscriber=first, elements=ElementBatch([b"3"])),
    ]


# ---- packed elements -----------------------------------------------------------


def test_send_packed_arrives_as_a_packed_batch(pair: ConnectionPair) -> None:
    subscriber = pair.open_stream(pair.client, initial_demand=10, element_size=8)
    packed = bytes(range(32))
    pair.server.send_packed(subscriber, packed)
    data = pair.drain(pair.server)
    assert decode(data) == [OnNextPacked(subscriber=subscriber, count=4, messages=packed)]
    (event,) = pair.deliver(pair.client, data)
    assert isinstance(event, Elements)
    assert event.elements.packed == packed
    assert event.elements.element_size == 8
    assert list(event.elements) == [packed[i : i + 8] for i in range(0, 32, 8)]
    assert pair.client.outstanding_demand(subscriber) == 6
    assert pair.client.element_size(subscriber) == 8


def test_send_elements_on_a_fixed_size_stream_goes_out_packed(pair: ConnectionPair) -> None:
    subscriber = pair.open_stream(pair.client, initial_demand=10, element_size=2)
    pair.server.send_elements(subscriber, [b"ab", b"cd", b"ef"])
    data = pair.drain(pair.server)
    assert decode(data) == [OnNextPacked(subscriber=subscriber, count=3, messages=b"abcdef")]
    (event,) = pair.deliver(pair.client, data)
    assert isinstance(event, Elements)
    assert event.elements.packed == b"abcdef"
    assert event.elements.tolist() == [b"ab", b"cd", b"ef"]


def test_a_single_fixed_size_element_goes_out_as_onnext(pair: ConnectionPair) -> None:
    subscriber = pair.open_stream(pair.client, initial_demand=10, element_size=4)
    pair.server.send_packed(subscriber, b"abcd")
    data = pair.drain(pair.server)
    assert decode(data) == [OnNext(subscriber=subscriber, element=b"abcd")]
    assert elements_of(pair.deliver(pair.client, data), subscriber) == [b"abcd"]


def test_onnextpacked_over_demand_is_a_protocol_error(pair: ConnectionPair) -> None:
    subscriber = pair.open_stream(pair.client, initial_demand=2, element_size=1)
    assert_protocol_error(pair, pair.client, encode(OnNextPacked(subscriber=subscriber, count=3, messages=b"abc")))


@pytest.mark.parametrize("messages", [b"ab", b"abcd", b""], ids=["short", "long", "empty"])
def test_onnextpacked_with_wrong_byte_length_is_a_protocol_error(pair: ConnectionPair, messages: bytes) -> None:
    subscriber = pair.open_stream(pair.client, initial_demand=5, element_size=1)
    assert_protocol_error(pair, pair.client, encode(OnNextPacked(subscriber=subscriber, count=3, messages=messages)))


def test_onnextpacked_on_a_variable_size_stream_is_a_protocol_error(pair: ConnectionPair) -> None:
    subscriber = pair.open_stream(pair.client, initial_demand=5)
    assert_protocol_error(pair, pair.client, encode(OnNextPacked(subscriber=subscriber, count=1, messages=b"a")))


@pytest.mark.parametrize("element", [b"abc", b"abcde", b""], ids=["short", "long", "empty"])
def test_onnext_of_the_wrong_size_on_a_fixed_size_stream_is_a_protocol_error(
    pair: ConnectionPair, element: bytes
) -> None:
    subscriber = pair.open_stream(pair.client, initial_demand=5, element_size=4)
    assert_protocol_error(pair, pair.client, encode(OnNext(subscriber=subscriber, element=element)))


# ---- elements as views of bytes ------------------------------------------------


def test_views_of_bytes_go_out_as_the_bytes_they_show(small_pair: ConnectionPair) -> None:
    pair = small_pair
    subscriber = pair.open_stream(pair.client, initial_demand=10)
    buffer = bytes(range(256)) * 20
    view = memoryview(buffer)
    # Small (onNext each), mixed with bytes, and large (split, threshold 1024).
    elements = [view[0:8], b"plain", view[8:16], view[100:3100], view[0:0]]
    pair.server.send_elements(subscriber, elements)
    data = pair.drain(pair.server)
    assert elements_of(pair.deliver(pair.client, data), subscriber) == [bytes(e) for e in elements]
    # The same wire bytes as the copies would have produced.
    copies = ConnectionPair(SMALL_LIMITS)
    copies.open()
    other = copies.open_stream(copies.client, initial_demand=10)
    assert other == subscriber
    copies.server.send_elements(other, [bytes(e) for e in elements])
    assert copies.drain(copies.server) == data


def test_views_of_bytes_on_a_fixed_size_stream_go_out_packed(pair: ConnectionPair) -> None:
    subscriber = pair.open_stream(pair.client, initial_demand=10, element_size=2)
    view = memoryview(b"abcdef")
    pair.server.send_elements(subscriber, [view[0:2], view[2:4], b"ef"])
    assert decode(pair.drain(pair.server)) == [OnNextPacked(subscriber=subscriber, count=3, messages=b"abcdef")]


@pytest.mark.parametrize(
    ("element", "described"),
    [
        pytest.param(memoryview(bytearray(b"mutable")), "a memoryview of bytearray", id="view-of-bytearray"),
        pytest.param(memoryview(b"abcdefgh")[::2], "not one run of bytes", id="not-contiguous"),
        pytest.param(memoryview(b"abcdefgh").cast("I"), "not one run of bytes", id="not-bytes-format"),
        pytest.param(bytearray(b"mutable"), "got bytearray", id="bytearray"),
        pytest.param("text", "got str", id="str"),
    ],
)
def test_other_elements_are_refused_before_anything_is_queued(
    pair: ConnectionPair, element: object, described: str
) -> None:
    subscriber = pair.open_stream(pair.client, initial_demand=10)
    with pytest.raises(LocalProtocolError, match="elements must be bytes or a memoryview of bytes") as raised:
        pair.server.send_elements(subscriber, [b"fine", element])  # type: ignore[list-item]
    assert described in str(raised.value)
    assert pair.server.publication_demand(subscriber) == 10
    assert pair.drain(pair.server) == b""


# ---- split elements ------------------------------------------------------------


def test_large_element_goes_out_in_parts_and_is_joined(small_pair: ConnectionPair) -> None:
    pair = small_pair
    subscriber = pair.open_stream(pair.client, initial_demand=1)
    element = bytes(range(256)) * 10  # 2560 bytes, split threshold 1024
    pair.server.send_elements(subscriber, [element])
    data = pair.drain(pair.server)
    assert decode(data, SMALL_LIMITS) == [
        OnNextPart(subscriber=subscriber, element=0, data=element[:1024]),
        OnNextPart(subscriber=subscriber, element=0, data=element[1024:2048]),
        OnNextLastPart(subscriber=subscriber, element=0, data=element[2048:]),
    ]
    assert pair.deliver(pair.client, data) == [Elements(subscriber=subscriber, elements=ElementBatch([element]))]


def test_element_of_exactly_the_split_threshold_is_not_split(small_pair: ConnectionPair) -> None:
    pair = small_pair
    subscriber = pair.open_stream(pair.client, initial_demand=2)
    pair.server.send_elements(subscriber, [b"x" * 1024, b"y" * 1025])
    assert [type(message) for message in decode(pair.drain(pair.server), SMALL_LIMITS)] == [
        OnNext,
        OnNextPart,
        OnNextLastPart,
    ]


def test_each_split_element_is_joined_separately(small_pair: ConnectionPair) -> None:
    pair = small_pair
    subscriber = pair.open_stream(pair.client, initial_demand=3)
    elements = [b"a" * 3000, b"b" * 2000, b"c" * 1500]
    pair.server.send_elements(subscriber, elements)
    assert elements_of(pair.send(pair.server), subscriber) == elements


def test_split_elements_are_joined_on_a_fixed_size_stream(pair: ConnectionPair) -> None:
    subscriber = pair.open_stream(pair.client, initial_demand=2, element_size=4)
    data = wire(
        OnNextPart(subscriber=subscriber, element=0, data=b"ab"),
        OnNextLastPart(subscriber=subscriber, element=0, data=b"cd"),
    )
    assert elements_of(pair.deliver(pair.client, data), subscriber) == [b"abcd"]


def test_joined_element_of_the_wrong_size_is_a_protocol_error(pair: ConnectionPair) -> None:
    subscriber = pair.open_stream(pair.client, initial_demand=2, element_size=4)
    data = wire(
        OnNextPart(subscriber=subscriber, element=0, data=b"ab"),
        OnNextLastPart(subscriber=subscriber, element=0, data=b"cde"),
    )
    assert_protocol_error(pair, pair.client, data)


def test_split_element_counts_against_demand_at_its_last_part(pair: ConnectionPair) -> None:
    subscriber = pair.open_stream(pair.client, initial_demand=1)
    assert pair.deliver(pair.client, encode(OnNextPart(subscriber=subscriber, element=3, data=b"ab"))) == []
    assert pair.client.outstanding_demand(subscriber) == 1
    assert pair.deliver(pair.client, encode(OnNextPart(subscriber=subscriber, element=3, data=b"cd"))) == []
    events = pair.deliver(pair.client, encode(OnNextLastPart(subscriber=subscriber, element=3, data=b"e")))
    assert events == [Elements(subscriber=subscriber, elements=ElementBatch([b"abcde"]))]
    assert pair.client.outstanding_demand(subscriber) == 0


def test_other_streams_interleave_between_the_parts_of_a_large_element(small_pair: ConnectionPair) -> None:
    pair = small_pair
    huge_stream = pair.open_stream(pair.client, initial_demand=1)
    small_stream = pair.open_stream(pair.client, initial_demand=10)
    # Queued first, the huge element must still not hold up the small ones.
    pair.server.send_elements(huge_stream, [b"H" * 10 * 1024])
    pair.server.send_elements(small_stream, [b"s%d" % i for i in range(10)])
    messages = decode(pair.drain(pair.server), SMALL_LIMITS)
    kinds = [(type(message), message.subscriber) for message in messages]
    last_part = kinds.index((OnNextLastPart, huge_stream))
    small_positions = [i for i, kind in enumerate(kinds) if kind == (OnNext, small_stream)]
    assert len(small_positions) == 10
    assert small_positions[0] < last_part
    assert kinds.count((OnNextPart, huge_stream)) == 9


def test_parts_are_not_interleaved_with_elements_of_their_own_stream(small_pair: ConnectionPair) -> None:
    pair = small_pair
    subscriber = pair.open_stream(pair.client, initial_demand=3)
    pair.server.send_elements(subscriber, [b"before", b"L" * 5000, b"after"])
    messages = decode(pair.drain(pair.server), SMALL_LIMITS)
    assert [type(message) for message in messages] == [OnNext] + [OnNextPart] * 4 + [OnNextLastPart, OnNext]


def test_reassembly_over_max_element_size_is_a_protocol_error(small_pair: ConnectionPair) -> None:
    pair = small_pair
    subscriber = pair.open_stream(pair.client, initial_demand=1)
    part = b"x" * 1024
    parts = [OnNextPart(subscriber=subscriber, element=1, data=part) for _ in range(16)]  # exactly the limit
    assert pair.deliver(pair.client, wire(*parts)) == []
    assert_protocol_error(pair, pair.client, encode(OnNextLastPart(subscriber=subscriber, element=1, data=b"x")))


def test_reassembly_of_exactly_max_element_size_is_accepted(small_pair: ConnectionPair) -> None:
    pair = small_pair
    subscriber = pair.open_stream(pair.client, initial_demand=1)
    parts = [OnNextPart(subscriber=subscriber, element=1, data=b"x" * 1024) for _ in range(15)]
    last = OnNextLastPart(subscriber=subscriber, element=1, data=b"x" * 1024)
    assert elements_of(pair.deliver(pair.client, wire(*parts, last)), subscriber) == [b"x" * 16384]


MID_SPLIT_INTRUDERS = {
    "part of another element": OnNextPart(subscriber=1, element=8, data=b"x"),
    "last part of another element": OnNextLastPart(subscriber=1, element=8, data=b"x"),
    "onNext": OnNext(subscriber=1, element=b"x"),
    "onComplete": OnComplete(subscriber=1),
}


@pytest.mark.parametrize("intruder", MID_SPLIT_INTRUDERS.values(), ids=MID_SPLIT_INTRUDERS.keys())
def test_other_messages_of_the_stream_mid_split_are_a_protocol_error(pair: ConnectionPair, intruder: Message) -> None:
    subscriber = pair.open_stream(pair.client, initial_demand=5)
    assert subscriber == 1
    assert pair.deliver(pair.client, encode(OnNextPart(subscriber=1, element=7, data=b"ab"))) == []
    assert_protocol_error(pair, pair.client, encode(intruder))


def test_onnextpacked_mid_split_is_a_protocol_error(pair: ConnectionPair) -> None:
    subscriber = pair.open_stream(pair.client, initial_demand=5, element_size=2)
    assert pair.deliver(pair.client, encode(OnNextPart(subscriber=subscriber, element=7, data=b"a"))) == []
    assert_protocol_error(pair, pair.client, encode(OnNextPacked(subscriber=subscriber, count=1, messages=b"xy")))


def test_another_stream_may_interleave_mid_split(pair: ConnectionPair) -> None:
    first = pair.open_stream(pair.client, initial_demand=1)
    second = pair.open_stream(pair.client, initial_demand=1)
    data = wire(
        OnNextPart(subscriber=first, element=0, data=b"ab"),
        OnNext(subscriber=second, element=b"small"),
        OnNextLastPart(subscriber=first, element=0, data=b"cd"),
    )
    assert pair.deliver(pair.client, data) == [
        Elements(subscriber=second, elements=ElementBatch([b"small"])),
        Elements(subscriber=first, elements=ElementBatch([b"abcd"])),
    ]


# ---- terminal signals ------------------------------------------------------------


AFTER_TERMINAL = {
    "onNext": OnNext(subscriber=1, element=b"x"),
    "onNextPacked": OnNextPacked(subscriber=1, count=1, messages=b"x"),
    "onNextPart": OnNextPart(subscriber=1, element=0, data=b"x"),
    "onNextLastPart": OnNextLastPart(subscriber=1, element=0, data=b"x"),
    "onComplete": OnComplete(subscriber=1),
    "onError": OnError(subscriber=1, error="late"),
    "subscribed": Subscribed(subscriber=1),
}


@pytest.mark.parametrize("late", AFTER_TERMINAL.values(), ids=AFTER_TERMINAL.keys())
@pytest.mark.parametrize(
    "terminal", [OnComplete(subscriber=1), OnError(subscriber=1, error="boom")], ids=["onComplete", "onError"]
)
def test_nothing_follows_a_terminal_signal(pair: ConnectionPair, terminal: Message, late: Message) -> None:
    subscriber = pair.open_stream(pair.client, initial_demand=5)
    assert subscriber == 1
    assert pair.deliver(pair.client, encode(terminal)) == [terminal]
    assert_protocol_error(pair, pair.client, encode(late))


def test_complete_goes_out_after_the_queued_elements(small_pair: ConnectionPair) -> None:
    pair = small_pair
    subscriber = pair.open_stream(pair.client, initial_demand=20)
    elements = [b"%d" % i * 100 for i in range(19)] + [b"big" * 1000]
    pair.server.send_elements(subscriber, elements)
    pair.server.complete(subscriber)  # queued before anything was written
    messages = []
    while pair.server.has_data_to_send:  # small writes: several calls
        messages.extend(decode(bytes(pair.server.data_to_send(500)), SMALL_LIMITS))
    assert messages[-1] == OnComplete(subscriber=subscriber)
    assert sum(isinstance(message, (OnNext, OnNextLastPart)) for message in messages) == 20
    events = pair.deliver(pair.client, b"".join(encode(message) for message in messages))
    assert elements_of(events, subscriber) == elements
    assert events[-1] == OnComplete(subscriber=subscriber)


def test_fail_after_accept_goes_out_after_the_queued_elements(pair: ConnectionPair) -> None:
    subscriber = pair.open_stream(pair.client, initial_demand=5)
    pair.server.send_elements(subscriber, [b"1", b"2"])
    pair.server.fail(subscriber, "source broke")
    assert not pair.server.is_publishing(subscriber)
    assert pair.send(pair.server) == [
        Elements(subscriber=subscriber, elements=ElementBatch([b"1", b"2"])),
        OnError(subscriber=subscriber, error="source broke"),
    ]


def test_terminal_signal_does_not_overtake_a_split_element(small_pair: ConnectionPair) -> None:
    pair = small_pair
    subscriber = pair.open_stream(pair.client, initial_demand=1)
    pair.server.send_elements(subscriber, [b"x" * 3000])
    pair.server.complete(subscriber)
    messages = decode(pair.drain(pair.server, max_bytes=100), SMALL_LIMITS)
    assert [type(message) for message in messages] == [OnNextPart, OnNextPart, OnNextLastPart, OnComplete]


def test_publication_is_forgotten_once_its_terminal_is_written(pair: ConnectionPair) -> None:
    subscriber = pair.open_stream(pair.client, initial_demand=5)
    pair.server.complete(subscriber)
    pair.send(pair.server)
    # A request that crossed the onComplete is harmless...
    assert pair.deliver(pair.server, encode(Request(subscriber=subscriber, demand=1))) == []
    assert pair.deliver(pair.server, encode(Cancel(subscriber=subscriber))) == []
    # ...and the peer may open a new stream with the same Id afterwards.
    assert pair.deliver(pair.server, encode(Subscribe(publisher="again", subscriber=subscriber))) == [
        Subscribe(publisher="again", subscriber=subscriber)
    ]


# ---- cancel -----------------------------------------------------------------


def test_cancel_reaches_the_publisher_and_drops_its_queue(pair: ConnectionPair) -> None:
    subscriber = pair.open_stream(pair.client, initial_demand=5)
    pair.server.send_elements(subscriber, [b"1", b"2"])
    pair.client.cancel(subscriber)
    assert pair.send(pair.client) == [Cancel(subscriber=subscriber)]
    assert not pair.server.is_publishing(subscriber)
    assert pair.server.queued_bytes(subscriber) == 0
    assert pair.drain(pair.server) == b""
    with pytest.raises(LocalProtocolError):
        pair.server.send_elements(subscriber, [b"3"])


def test_nothing_to_send_after_cancel_dropped_the_queue(pair: ConnectionPair) -> None:
    subscriber = pair.open_stream(pair.client, initial_demand=5)
    pair.server.send_elements(subscriber, [b"1", b"2"])
    pair.client.cancel(subscriber)
    pair.send(pair.client)
    assert not pair.server.has_data_to_send


def test_late_elements_and_complete_after_cancel_are_dropped(pair: ConnectionPair) -> None:
    subscriber = pair.open_stream(pair.client, initial_demand=5, element_size=1)
    pair.server.send_elements(subscriber, [b"1"])
    pair.server.send_packed(subscriber, b"23")
    pair.server.complete(subscriber)
    in_flight = pair.drain(pair.server)
    assert [type(message) for message in decode(in_flight)] == [OnNext, OnNextPacked, OnComplete]
    pair.client.cancel(subscriber)
    split = wire(
        OnNextPart(subscriber=subscriber, element=0, data=b"4"),
        OnNextLastPart(subscriber=subscriber, element=0, data=b""),
    )
    assert pair.deliver(pair.client, in_flight[:-3] + split + in_flight[-3:]) == []
    assert pair.client.state is ConnectionState.OPEN


def test_late_subscribed_after_cancel_is_dropped(pair: ConnectionPair) -> None:
    subscriber = pair.client.subscribe("ticker", 1)
    pair.send(pair.client)
    pair.client.cancel(subscriber)
    pair.server.accept(subscriber)
    pair.server.send_elements(subscriber, [b"x"])
    assert pair.send(pair.server) == []
    assert pair.send(pair.client) == [Cancel(subscriber=subscriber)]


def test_cancel_is_idempotent(pair: ConnectionPair) -> None:
    subscriber = pair.open_stream(pair.client, initial_demand=1)
    pair.client.cancel(subscriber)
    pair.client.cancel(subscriber)
    assert decode(pair.drain(pair.client)) == [Cancel(subscriber=subscriber)]


def test_request_after_cancel_is_a_no_op(pair: ConnectionPair) -> None:
    subscriber = pair.open_stream(pair.client, initial_demand=1)
    pair.client.cancel(subscriber)
    pair.drain(pair.client)
    pair.client.request(subscriber, 10)
    assert not pair.client.has_data_to_send
    assert pair.client.outstanding_demand(subscriber) == 0


def test_request_after_complete_is_a_no_op(pair: ConnectionPair) -> None:
    subscriber = pair.open_stream(pair.client, initial_demand=1)
    pair.server.complete(subscriber)
    pair.send(pair.server)
    pair.client.request(subscriber, 10)
    assert not pair.client.has_data_to_send


def test_ids_are_never_reused(pair: ConnectionPair) -> None:
    first = pair.client.subscribe("a")
    pair.client.cancel(first)
    # The cancel waits for the next events() call: the subscribe it ends is
    # answered first (see test_at_once_paths / the session's dispatch).
    assert pair.send(pair.client) == [Subscribe(publisher="a", subscriber=first)]
    assert pair.server.events() == [Cancel(subscriber=first)]
    second = pair.open_stream(pair.client, initial_demand=1)
    pair.server.complete(second)
    pair.send(pair.server)
    third = pair.client.subscribe("c")
    assert first < second < third


def test_forgotten_cancelled_ids_still_drop_late_messages() -> None:
    # With room to remember one cancelled Id, an older one is forgotten, but a
    # late message for it is still recognised as late (Ids only grow).
    pair = ConnectionPair(ProtocolLimits(max_remembered_ids=1))
    pair.open()
    first = pair.open_stream(pair.client, initial_demand=1)
    second = pair.open_stream(pair.client, initial_demand=1)
    pair.client.cancel(first)
    pair.client.cancel(second)
    assert pair.deliver(pair.client, wire(OnNext(subscriber=first, element=b"x"), OnComplete(subscriber=first))) == []
    assert pair.deliver(pair.client, encode(OnComplete(subscriber=second))) == []


@pytest.mark.parametrize("max_remembered_ids", [65536, 1])
def test_onnext_with_a_negative_subscriber_is_a_protocol_error(max_remembered_ids: int) -> None:
    pair = ConnectionPair(ProtocolLimits(max_remembered_ids=max_remembered_ids))
    pair.open()
    for _ in range(2):  # with room for one, the first cancelled Id is forgotten
        pair.client.cancel(pair.client.subscribe("a"))
    assert_protocol_error(pair, pair.client, msgpack.packb([5, -1, b"x"]))


# ---- request(n <= 0) from the peer -----------------------------------------------


@pytest.mark.parametrize("demand", [0, -1, -(2**63)])
def test_nonpositive_request_ends_only_that_stream(pair: ConnectionPair, demand: int) -> None:
    bad = pair.open_stream(pair.client, initial_demand=1)
    good = pair.open_stream(pair.client, initial_demand=1)
    pair.server.send_elements(bad, [b"dropped"])
    assert pair.deliver(pair.server, encode(Request(subscriber=bad, demand=demand))) == [
        InvalidRequest(subscriber=bad, demand=demand)
    ]
    assert pair.server.state is ConnectionState.OPEN
    assert not pair.server.is_publishing(bad)
    (on_error,) = pair.send(pair.server)
    assert isinstance(on_error, OnError)
    assert on_error.subscriber == bad
    assert "3.9" in on_error.error
    # The other stream and the connection carry on.
    pair.server.send_elements(good, [b"fine"])
    pair.client.request(good, 1)
    assert pair.send(pair.client) == [Request(subscriber=good, demand=1)]
    assert elements_of(pair.send(pair.server), good) == [b"fine"]


def test_nonpositive_request_in_the_middle_of_a_split_element(small_pair: ConnectionPair) -> None:
    # The publisher stops mid-element; the subscriber must take the onError
    # that follows the parts it has (unlike an onComplete there).
    pair = small_pair
    subscriber = pair.open_stream(pair.client, initial_demand=1)
    pair.server.send_elements(subscriber, [b"x" * 5000])
    assert pair.deliver(pair.client, bytes(pair.server.data_to_send(1))) == []  # one part
    assert pair.deliver(pair.server, encode(Request(subscriber=subscriber, demand=0))) == [
        InvalidRequest(subscriber=subscriber, demand=0)
    ]
    (on_error,) = pair.send(pair.server)
    assert isinstance(on_error, OnError)
    assert on_error.subscriber == subscriber
    assert pair.client.state is ConnectionState.OPEN


def test_nonpositive_request_while_terminating_changes_nothing(pair: ConnectionPair) -> None:
    # The stream already ends with its onComplete; request(0) adds nothing to say.
    subscriber = pair.open_stream(pair.client, initial_demand=2)
    pair.server.send_elements(subscriber, [b"1", b"2"])
    pair.server.complete(subscriber)
    assert pair.deliver(pair.server, encode(Request(subscriber=subscriber, demand=0))) == []
    assert pair.send(pair.server) == [
        Elements(subscriber=subscriber, elements=ElementBatch([b"1", b"2"])),
        OnComplete(subscriber=subscriber),
    ]


def test_negative_initial_demand_is_refused_with_onerror(pair: ConnectionPair) -> None:
    assert pair.deliver(pair.server, encode(Subscribe(publisher="ticker", subscriber=5, initial_demand=-1))) == []
    (on_error,) = decode(pair.drain(pair.server))
    assert isinstance(on_error, OnError)
    assert on_error.subscriber == 5
    assert pair.server.state is ConnectionState.OPEN


# ---- protocol errors ---------------------------------------------------------


UNKNOWN_ID_TO_SUBSCRIBER = [
    Subscribed(subscriber=99),
    OnNext(subscriber=99, element=b"x"),
    OnNextPacked(subscriber=99, count=1, messages=b"x"),
    OnNextPart(subscriber=99, element=0, data=b"x"),
    OnNextLastPart(subscriber=99, element=0, data=b"x"),
    OnComplete(subscriber=99),
    OnError(subscriber=99, error="boom"),
]
UNKNOWN_ID_TO_PUBLISHER = [Request(subscriber=99, demand=1), Cancel(subscriber=99)]


@pytest.mark.parametrize(
    "message", UNKNOWN_ID_TO_SUBSCRIBER + UNKNOWN_ID_TO_PUBLISHER, ids=lambda message: type(message).__name__
)
def test_unknown_id_is_a_protocol_error(pair: ConnectionPair, message: Message) -> None:
    pair.open_stream(pair.client, initial_demand=1)
    receiver = pair.client if message in UNKNOWN_ID_TO_SUBSCRIBER else pair.server
    error = assert_protocol_error(pair, receiver, encode(message))
    assert "99" in str(error)


@pytest.mark.parametrize(
    "message",
    [[5, 1, "text"], [5, 1, None], [5, 1, [1]], [5, "1", b"x"], [5, True, b"x"], [5, None, b"x"]],
    ids=["str element", "nil element", "array element", "str subscriber", "bool subscriber", "nil subscriber"],
)
def test_malformed_onnext_is_a_protocol_error(pair: ConnectionPair, message: list[object]) -> None:
    # onNext takes a fast path that does not build a message object: it must
    # check the fields itself.
    assert pair.open_stream(pair.client, initial_demand=5) == 1
    assert_protocol_error(pair, pair.client, msgpack.packb(message, use_bin_type=True))


BEFORE_SUBSCRIBED = {
    "onNext": OnNext(subscriber=1, element=b"x"),
    "onNextPacked": OnNextPacked(subscriber=1, count=0, messages=b""),
    "onNextPart": OnNextPart(subscriber=1, element=0, data=b"x"),
    "onNextLastPart": OnNextLastPart(subscriber=1, element=0, data=b"x"),
    "onComplete": OnComplete(subscriber=1),
}


@pytest.mark.parametrize("message", BEFORE_SUBSCRIBED.values(), ids=BEFORE_SUBSCRIBED.keys())
def test_stream_signals_before_subscribed_are_a_protocol_error(pair: ConnectionPair, message: Message) -> None:
    # Rule 3: a subscribe is answered by subscribed or onError; the rest follows subscribed.
    assert pair.client.subscribe("ticker", 5) == 1
    assert_protocol_error(pair, pair.client, encode(message))


def test_second_subscribed_is_a_protocol_error(pair: ConnectionPair) -> None:
    subscriber = pair.open_stream(pair.client)
    assert_protocol_error(pair, pair.client, encode(Subscribed(subscriber=subscriber)))


def test_subscribe_with_an_id_in_use_is_a_protocol_error(pair: ConnectionPair) -> None:
    subscriber = pair.open_stream(pair.client)
    assert_protocol_error(pair, pair.server, encode(Subscribe(publisher="again", subscriber=subscriber)))


def test_demand_overrun_is_a_protocol_error(pair: ConnectionPair) -> None:
    subscriber = pair.open_stream(pair.client, initial_demand=2)
    elements = [OnNext(subscriber=subscriber, element=b"%d" % i) for i in range(3)]
    assert_protocol_error(pair, pair.client, wire(*elements))


def test_events_before_a_bad_message_come_first(pair: ConnectionPair) -> None:
    subscriber = pair.client.subscribe("ticker", 1)
    pair.client.receive_data(encode(Subscribed(subscriber=subscriber)) + b"\xc1")
    assert pair.client.events() == [Subscribed(subscriber=subscriber)]
    assert pair.client.state is ConnectionState.ERROR
    with pytest.raises(RemoteProtocolError, match="undecodable"):
        pair.client.events()
    assert pair.client.events() == []


@pytest.mark.parametrize("bad", [b"\xc1", encode(OnNext(subscriber=1, element=b"overrun"))], ids=["garbage", "overrun"])
def test_elements_before_a_bad_message_come_first(pair: ConnectionPair, bad: bytes) -> None:
    subscriber = pair.open_stream(pair.client, initial_demand=2)
    assert subscriber == 1
    pair.client.receive_data(wire(OnNext(subscriber=1, element=b"a"), OnNext(subscriber=1, element=b"b")) + bad)
    assert pair.client.events() == [Elements(subscriber=1, elements=ElementBatch([b"a", b"b"]))]
    with pytest.raises(RemoteProtocolError):
        pair.client.events()


def test_after_a_protocol_error_everything_is_ignored(pair: ConnectionPair) -> None:
    subscriber = pair.open_stream(pair.client, initial_demand=1)
    assert_protocol_error(pair, pair.client, b"\xc1")
    pair.client.receive_data(encode(OnNext(subscriber=subscriber, element=b"x")))
    assert pair.client.events() == []
    assert not pair.client.has_data_to_send
    with pytest.raises(LocalProtocolError):
        pair.client.subscribe("ticker")
    with pytest.raises(LocalProtocolError):
        pair.client.send_goodbye()


def test_protocol_error_drops_queued_output_but_says_goodbye(pair: ConnectionPair) -> None:
    subscriber = pair.open_stream(pair.server, initial_demand=3)
    pair.client.send_elements(subscriber, [b"1", b"2"])
    pair.client.request(pair.client.subscribe("ticker"), 1)
    pair.client.receive_data(b"\xc1")
    with pytest.raises(RemoteProtocolError):
        pair.client.events()
    (goodbye,) = decode(pair.drain(pair.client))
    assert isinstance(goodbye, Goodbye)
    assert goodbye.reason.startswith("protocol error: undecodable")


# ---- goodbye ---------------------------------------------------------------------


@pytest.mark.parametrize("leaving", ["client", "server"])
def test_goodbye_exchange(pair: ConnectionPair, leaving: str) -> None:
    leaver = getattr(pair, leaving)
    stayer = pair.peer_of(leaver)
    assert leaver.send_goodbye("done for today") == 0
    assert leaver.state is ConnectionState.GOODBYE_SENT
    assert leaver.goodbye_sent
    (goodbye,) = pair.send(leaver)
    assert goodbye == Goodbye(reason="done for today")
    assert stayer.state is ConnectionState.GOODBYE_RECEIVED
    assert stayer.goodbye_received == goodbye
    stayer.send_goodbye(goodbye.response().reason)
    assert stayer.state is ConnectionState.CLOSED
    assert pair.send(stayer) == [goodbye.response()]
    assert leaver.state is ConnectionState.CLOSED
    assert leaver.goodbye_received == Goodbye(reason="goodbye")


def test_goodbye_response() -> None:
    assert Goodbye(reason="bye").response() == Goodbye(reason="goodbye")


def test_send_goodbye_returns_the_number_of_dropped_elements(small_pair: ConnectionPair) -> None:
    pair = small_pair
    first = pair.open_stream(pair.client, initial_demand=10)
    second = pair.open_stream(pair.client, initial_demand=10, element_size=1)
    pair.server.send_elements(first, [b"x" * 3000, b"1", b"2"])
    pair.server.send_packed(second, b"abcd")
    pair.server.data_to_send(10)  # starts splitting the 3000-byte element
    assert pair.server.send_goodbye() == 1 + 2 + 4
    assert not pair.server.is_publishing(first)
    messages = decode(pair.drain(pair.server), SMALL_LIMITS)
    assert messages == [Goodbye(reason="goodbye")]


def test_control_messages_queued_before_goodbye_still_go_out(pair: ConnectionPair) -> None:
    subscriber = pair.client.subscribe("ticker", 1)
    pair.client.send_goodbye("bye")
    assert decode(pair.drain(pair.client)) == [
        Subscribe(publisher="ticker", subscriber=subscriber, initial_demand=1),
        Goodbye(reason="bye"),
    ]


def test_receiving_goodbye_ends_every_stream(pair: ConnectionPair) -> None:
    subscription = pair.open_stream(pair.client, initial_demand=1)
    publication = pair.open_stream(pair.server, initial_demand=1)
    pair.client.send_elements(publication, [b"x"])
    events = pair.deliver(pair.client, encode(Goodbye(reason="leaving")))
    assert events == [Goodbye(reason="leaving")]
    assert not pair.client.is_publishing(publication)
    assert pair.client.outstanding_demand(subscription) == 0
    assert pair.client.send_goodbye() == 0  # the queued element went with the peer's goodbye


def test_messages_after_the_peers_goodbye_are_ignored(pair: ConnectionPair) -> None:
    subscriber = pair.open_stream(pair.client, initial_demand=1)
    data = wire(Goodbye(reason="bye"), OnNext(subscriber=subscriber, element=b"x")) + b"\xc1"
    assert pair.deliver(pair.client, data) == [Goodbye(reason="bye")]
    pair.client.receive_data(b"\xc1")
    assert pair.client.events() == []


def test_late_messages_after_our_goodbye_are_dropped(pair: ConnectionPair) -> None:
    subscription = pair.open_stream(pair.client, initial_demand=1)
    publication = pair.open_stream(pair.server, initial_demand=1)
    pair.client.send_goodbye()
    data = wire(
        OnNext(subscriber=subscription, element=b"x"),
        Request(subscriber=publication, demand=5),
        Subscribe(publisher="late", subscriber=9),
        Goodbye(reason="goodbye"),
    )
    assert pair.deliver(pair.client, data) == [Goodbye(reason="goodbye")]
    assert pair.client.state is ConnectionState.CLOSED


def test_goodbye_before_the_handshake_completes() -> None:
    pair = ConnectionPair()
    pair.client.send_goodbye("never mind")
    assert decode(pair.drain(pair.client)) == [Hello(), Goodbye(reason="never mind")]
    assert pair.send(pair.server) == [Hello()]
    assert pair.client.state is ConnectionState.GOODBYE_SENT


# ---- local misuse ---------------------------------------------------------------


def test_sending_beyond_demand_is_a_local_error(pair: ConnectionPair) -> None:
    subscriber = pair.open_stream(pair.client, initial_demand=2)
    with pytest.raises(LocalProtocolError):
        pair.server.send_elements(subscriber, [b"1", b"2", b"3"])
    # Nothing was queued, the connection is unaffected.
    assert pair.server.publication_demand(subscriber) == 2
    assert not pair.server.has_data_to_send
    pair.server.send_elements(subscriber, [b"1", b"2"])
    with pytest.raises(LocalProtocolError):
        pair.server.send_elements(subscriber, [b"3"])
    assert elements_of(pair.send(pair.server), subscriber) == [b"1", b"2"]
    assert pair.server.state is ConnectionState.OPEN


def test_send_packed_beyond_demand_is_a_local_error(pair: ConnectionPair) -> None:
    subscriber = pair.open_stream(pair.client, initial_demand=2, element_size=2)
    with pytest.raises(LocalProtocolError):
        pair.server.send_packed(subscriber, b"abcdef")
    assert pair.server.publication_demand(subscriber) == 2


@pytest.mark.parametrize(
    "elements", [[b"abc"], [b"ab", b"abc"], [b""]], ids=["too long", "one too long", "empty"]
)
def test_wrong_element_size_is_a_local_error(pair: ConnectionPair, elements: list[bytes]) -> None:
    subscriber = pair.open_stream(pair.client, initial_demand=5, element_size=2)
    with pytest.raises(LocalProtocolError):
        pair.server.send_elements(subscriber, elements)
    assert pair.server.publication_demand(subscriber) == 5


def test_send_packed_needs_a_multiple_of_the_element_size(pair: ConnectionPair) -> None:
    fixed = pair.open_stream(pair.client, initial_demand=5, element_size=2)
    variable = pair.open_stream(pair.client, initial_demand=5)
    with pytest.raises(LocalProtocolError):
        pair.server.send_packed(fixed, b"abc")
    with pytest.raises(LocalProtocolError):
        pair.server.send_packed(variable, b"ab")


@pytest.mark.parametrize("element_size", [0, 4])
def test_elements_must_be_bytes(pair: ConnectionPair, element_size: int) -> None:
    subscriber = pair.open_stream(pair.client, initial_demand=5, element_size=element_size)
    with pytest.raises(LocalProtocolError):
        pair.server.send_elements(subscriber, ["text"])  # type: ignore[list-item]
    with pytest.raises(LocalProtocolError):
        pair.server.send_elements(subscriber, [b"abcd", 1234])  # type: ignore[list-item]
    assert pair.server.publication_demand(subscriber) == 5


def test_send_packed_needs_a_bytes_like_object(pair: ConnectionPair) -> None:
    subscriber = pair.open_stream(pair.client, initial_demand=5, element_size=2)
    with pytest.raises(LocalProtocolError):
        pair.server.send_packed(subscriber, "ab")  # type: ignore[arg-type]


@pytest.mark.parametrize("element_size", [0, 2])
def test_send_elements_takes_its_own_copy_of_the_list(pair: ConnectionPair, element_size: int) -> None:
    subscriber = pair.open_stream(pair.client, initial_demand=5, element_size=element_size)
    elements = [b"ab", b"cd"]
    pair.server.send_elements(subscriber, elements)
    elements[:] = [b"xx", b"yy"]  # the caller reuses its list before the write
    assert elements_of(pair.send(pair.server), subscriber) == [b"ab", b"cd"]


@pytest.mark.parametrize("buffer_type", [bytearray, memoryview])
def test_send_packed_takes_a_snapshot_of_a_mutable_buffer(pair: ConnectionPair, buffer_type: type) -> None:
    subscriber = pair.open_stream(pair.client, initial_demand=5, element_size=2)
    buffer = bytearray(b"abcd")
    pair.server.send_packed(subscriber, buffer_type(buffer))
    buffer[:] = b"xxxx"  # the caller reuses its buffer before the write
    assert elements_of(pair.send(pair.server), subscriber) == [b"ab", b"cd"]


@pytest.mark.parametrize(
    "call",
    [
        lambda connection, subscriber: connection.send_elements(subscriber, [b"x"]),
        lambda connection, subscriber: connection.complete(subscriber),
        lambda connection, subscriber: connection.fail(subscriber, "boom"),
        lambda connection, subscriber: connection.subscribe("ticker"),
        lambda connection, subscriber: connection.accept(subscriber),
    ],
    ids=["send_elements", "complete", "fail", "subscribe", "accept"],
)
def test_sending_after_goodbye_is_a_local_error(pair: ConnectionPair, call) -> None:  # type: ignore[no-untyped-def]
    subscriber = pair.open_stream(pair.client, initial_demand=5)
    pair.server.send_goodbye()
    with pytest.raises(LocalProtocolError):
        call(pair.server, subscriber)


def test_second_goodbye_is_a_local_error(pair: ConnectionPair) -> None:
    pair.client.send_goodbye()
    with pytest.raises(LocalProtocolError):
        pair.client.send_goodbye()


@pytest.mark.parametrize("n", [0, -1])
def test_nonpositive_request_is_a_local_error(pair: ConnectionPair, n: int) -> None:
    subscriber = pair.open_stream(pair.client)
    with pytest.raises(LocalProtocolError, match="3.9"):
        pair.client.request(subscriber, n)
    assert not pair.client.has_data_to_send


def test_request_for_an_id_never_subscribed_is_a_local_error(pair: ConnectionPair) -> None:
    with pytest.raises(LocalProtocolError):
        pair.client.request(42, 1)


def test_negative_initial_demand_is_a_local_error(pair: ConnectionPair) -> None:
    with pytest.raises(LocalProtocolError):
        pair.client.subscribe("ticker", -1)


def test_publication_life_cycle_misuse_is_a_local_error(pair: ConnectionPair) -> None:
    subscriber = pair.client.subscribe("ticker", 1)
    pair.send(pair.client)
    with pytest.raises(LocalProtocolError):
        pair.server.send_elements(subscriber, [b"x"])  # before accept
    with pytest.raises(LocalProtocolError):
        pair.server.complete(subscriber)  # before accept
    with pytest.raises(LocalProtocolError):
        pair.server.accept(subscriber, element_size=-1)
    pair.server.accept(subscriber)
    with pytest.raises(LocalProtocolError):
        pair.server.accept(subscriber)
    pair.server.complete(subscriber)
    with pytest.raises(LocalProtocolError):
        pair.server.complete(subscriber)
    with pytest.raises(LocalProtocolError):
        pair.server.fail(subscriber, "after complete")
    with pytest.raises(LocalProtocolError):
        pair.server.accept(12345)  # never subscribed
    assert pair.send(pair.server) == [Subscribed(subscriber=subscriber), OnComplete(subscriber=subscriber)]


def test_unbounded_request_is_sent_once(pair: ConnectionPair) -> None:
    subscriber = pair.open_stream(pair.client)
    pair.client.request(subscriber, UNBOUNDED)
    pair.client.request(subscriber, 5)
    assert pair.send(pair.client) == [Request(subscriber=subscriber, demand=UNBOUNDED)]


@pytest.mark.parametrize("opened", [False, True])
@pytest.mark.parametrize("code", [b"\x80", b"\x90", b"\xc0", b"\xa1x"], ids=["map", "array", "nil", "str"])
def test_a_message_code_of_another_type_is_a_protocol_error(pair: ConnectionPair, opened: bool, code: bytes) -> None:
    # An empty map as the code used to escape as TypeError (unhashable, in
    # the at-once lookup); found by the part reader's damage tests.
    connection = pair.client if opened else Connection()
    with pytest.raises(RemoteProtocolError):
        pair.deliver(connection, b"\x92" + code + b"\x01")


# ---- remembered Ids -----------------------------------------------------------


def test_remember_is_a_bounded_fifo_that_evicts_the_oldest() -> None:
    from collections import OrderedDict

    from rstreams.protocol._connection import _remember

    ids: OrderedDict[int, None] = OrderedDict()
    assert _remember(ids, 1, 2) is None
    assert len(ids) <= 2
    assert _remember(ids, 2, 2) is None
    assert len(ids) <= 2
    assert _remember(ids, 3, 2) == 1
    assert list(ids) == [2, 3]
    # Re-adding an Id makes it the newest, so the next eviction takes 3.
    assert _remember(ids, 2, 2) is None
    assert list(ids) == [3, 2]
    assert _remember(ids, 4, 2) == 3
    assert list(ids) == [2, 4]
    assert len(ids) <= 2


def test_the_oldest_cancelled_id_is_the_one_forgotten() -> None:
    pair = ConnectionPair(ProtocolLimits(max_remembered_ids=2))
    pair.send(pair.client)
    pair.send(pair.server)
    first, second, third = (pair.open_stream(pair.client, initial_demand=1) for _ in range(3))
    for subscriber in (first, second, third):
        pair.client.cancel(subscriber)
    pair.send(pair.client)
    # A late terminal for the first is dropped as forgotten (its Id is below
    # every remembered one); the same message once more is dropped too.
    assert pair.deliver(pair.client, wire(OnComplete(subscriber=first), OnComplete(subscriber=first))) == []
    # The third is still remembered as cancelled: its late terminal is dropped
    # and ends the memory of it ...
    assert pair.deliver(pair.client, wire(OnComplete(subscriber=third))) == []
    assert pair.client.state is ConnectionState.OPEN
    # ... so a second terminal for it is one too many. Had the newest been
    # evicted instead, the third would count as forgotten and this would pass.
    error = assert_protocol_error(pair, pair.client, wire(OnComplete(subscriber=third)))
    assert "unknown subscriber" in str(error)
