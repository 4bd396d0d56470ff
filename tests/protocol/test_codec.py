"""The msgpack codec: golden vectors both ways, field validation and size limits."""

from __future__ import annotations

import msgpack
import pytest

from helpers import SMALL_LIMITS, ConnectionPair, GoldenVector, decode, load_golden_vectors
from rstreams.protocol import (
    UNBOUNDED,
    Connection,
    ElementBatch,
    Elements,
    Event,
    Goodbye,
    Hello,
    LocalProtocolError,
    MessageDecoder,
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
    message_from_wire,
)
from rstreams.protocol._codec import bin_header, int_bytes

GOLDEN_VECTORS = load_golden_vectors()


def pack(obj: object) -> bytes:
    return msgpack.packb(obj, use_bin_type=True)


def decode_one(data: bytes, limits: ProtocolLimits = SMALL_LIMITS) -> list[object]:
    return list(decode(data, limits))


# ---- golden vectors ------------------------------------------------------


def test_golden_vectors_cover_the_profile_examples() -> None:
    # wire-v0.md lists eight examples; losing one from the JSON file must show.
    assert [vector.code for vector in GOLDEN_VECTORS] == [0, 1, 2, 4, 5, 8, 9, 11]


@pytest.mark.parametrize("vector", GOLDEN_VECTORS, ids=str)
def test_encode_golden_vector(vector: GoldenVector) -> None:
    assert encode(vector.message) == vector.wire


@pytest.mark.parametrize("vector", GOLDEN_VECTORS, ids=str)
def test_decode_golden_vector(vector: GoldenVector) -> None:
    assert decode(vector.wire) == [vector.message]


def test_decode_golden_vectors_back_to_back_byte_by_byte() -> None:
    # A byte stream carries messages with nothing in between, cut anywhere.
    decoder = MessageDecoder()
    messages = []
    for byte in b"".join(vector.wire for vector in GOLDEN_VECTORS):
        decoder.feed(bytes([byte]))
        messages.extend(decoder)
    assert messages == [vector.message for vector in GOLDEN_VECTORS]


def _receiver_expecting(message: object) -> tuple[Connection, bytes, list[Event]]:
    """A connection in which ``message`` is valid next.

    Returns the connection, bytes that must follow the message for it to
    produce an event, and the events the connection must produce.
    """
    if isinstance(message, Hello):
        return Connection(), b"", [message]
    pair = ConnectionPair()
    pair.open()
    if isinstance(message, Subscribe):
        return pair.server, b"", [message]
    if isinstance(message, Request):
        assert pair.client.subscribe("ticker") == message.subscriber
        pair.send(pair.client)
        return pair.server, b"", [message]
    if isinstance(message, Subscribed):
        assert pair.client.subscribe("ticker") == message.subscriber
        return pair.client, b"", [message]
    if isinstance(message, OnNext):
        subscriber = pair.open_stream(pair.client, initial_demand=1)
        return pair.client, b"", [Elements(subscriber=subscriber, elements=ElementBatch([message.element]))]
    if isinstance(message, OnNextPacked):
        size = len(message.messages) // message.count
        subscriber = pair.open_stream(pair.client, initial_demand=message.count, element_size=size)
        batch = ElementBatch(packed=message.messages, element_size=size)
        return pair.client, b"", [Elements(subscriber=subscriber, elements=batch)]
    if isinstance(message, OnNextPart):
        subscriber = pair.open_stream(pair.client, initial_demand=1)
        last_part = OnNextLastPart(subscriber=subscriber, element=message.element, data=b"!")
        joined = ElementBatch([message.data + b"!"])
        return pair.client, encode(last_part), [Elements(subscriber=subscriber, elements=joined)]
    if isinstance(message, Goodbye):
        return pair.client, b"", [message]
    raise AssertionError(f"no context for {message!r}")


@pytest.mark.parametrize("vector", GOLDEN_VECTORS, ids=str)
def test_connection_receives_golden_vector(vector: GoldenVector) -> None:
    receiver, follow_up, expected = _receiver_expecting(vector.message)
    receiver.receive_data(vector.wire + follow_up)
    assert receiver.events() == expected


def test_packed_golden_vector_arrives_as_packed_batch() -> None:
    (vector,) = [vector for vector in GOLDEN_VECTORS if isinstance(vector.message, OnNextPacked)]
    receiver, _, _ = _receiver_expecting(vector.message)
    receiver.receive_data(vector.wire)
    (event,) = receiver.events()
    assert isinstance(event, Elements)
    assert event.elements.packed == bytes(range(24))
    assert event.elements.element_size == 8
    assert list(event.elements) == [bytes(range(0, 8)), bytes(range(8, 16)), bytes(range(16, 24))]


# ---- encoding ------------------------------------------------------------


def test_encode_writes_defaulted_fields() -> None:
    assert encode(Subscribe(publisher="a", subscriber=1)) == pack([1, "a", 1, 0])
    assert encode(Subscribed(subscriber=1)) == pack([4, 1, 0])


def test_encode_refuses_what_is_not_a_message() -> None:
    with pytest.raises(LocalProtocolError):
        encode(("not", "a", "message"))  # type: ignore[arg-type]


@pytest.mark.parametrize("length", [0, 1, 255, 256, 65535, 65536, 70000])
def test_bin_header_matches_msgpack(length: int) -> None:
    packed = pack(bytes(length))
    assert bin_header(length) + bytes(length) == packed


@pytest.mark.parametrize("value", [0, 1, 127, 128, 255, 65536, 2**32, UNBOUNDED, 2**64 - 1, -1, -32, -33, -(2**63)])
def test_int_bytes_matches_msgpack(value: int) -> None:
    assert int_bytes(value) == pack(value)


# ---- decoding: defaults and validation -----------------------------------


def test_omitted_initial_demand_defaults_to_zero() -> None:
    assert decode(pack([1, "ticker", 1])) == [Subscribe(publisher="ticker", subscriber=1, initial_demand=0)]


def test_omitted_element_size_defaults_to_zero() -> None:
    assert decode(pack([4, 1])) == [Subscribed(subscriber=1, element_size=0)]


def test_connection_accepts_omitted_trailing_defaults(pair: ConnectionPair) -> None:
    assert pair.deliver(pair.server, pack([1, "ticker", 1])) == [Subscribe(publisher="ticker", subscriber=1)]
    subscriber = pair.client.subscribe("ticker", 1)
    assert pair.deliver(pair.client, pack([4, subscriber])) == [Subscribed(subscriber=subscriber)]


def test_request_demand_up_to_the_largest_wire_int_is_accepted() -> None:
    assert decode(pack([2, 1, 2**64 - 1])) == [Request(subscriber=1, demand=2**64 - 1)]


WRONG_FIELD_TYPES = {
    "bool demand": [2, 1, True],
    "bool subscriber": [2, True, 1],
    "float demand": [2, 1, 1.0],
    "nil demand": [2, 1, None],
    "bool version": [0, False, []],
    "bool extension": [0, 0, [True]],
    "extensions not an array": [0, 0, 5],
    "float extension": [0, 0, [1.5]],
    "bin publisher": [1, b"ticker", 1],
    "str subscriber": [1, "ticker", "1"],
    "bool initialDemand": [1, "ticker", 1, True],
    "negative subscriber": [3, -1],
    "subscriber at 2**63": [3, 2**63],
    "negative elementSize": [4, 1, -1],
    "elementSize over max_message_size": [4, 1, 4097],
    "str element": [5, 1, "element"],
    "nil element": [5, 1, None],
    "array element": [5, 1, [1, 2]],
    "bin error": [7, 1, b"error"],
    "negative count": [8, 1, -1, b""],
    "count at 2**63": [8, 1, 2**63, b""],
    "str packed messages": [8, 1, 1, "x"],
    "negative element id": [9, 1, -1, b""],
    "str part data": [10, 1, 0, "ab"],
    "bin reason": [11, b"bye"],
}


@pytest.mark.parametrize("message", WRONG_FIELD_TYPES.values(), ids=WRONG_FIELD_TYPES.keys())
def test_wrong_field_types_are_refused(message: list[object]) -> None:
    with pytest.raises(RemoteProtocolError):
        decode_one(pack(message))


WRONG_FIELD_COUNTS = {
    "empty array": [],
    "hello without extensions": [0, 0],
    "subscribe without subscriber": [1, "ticker"],
    "subscribe with extra field": [1, "ticker", 1, 0, 0],
    "request without demand": [2, 1],
    "request with extra field": [2, 1, 1, 1],
    "cancel without subscriber": [3],
    "subscribed with extra field": [4, 1, 0, 0],
    "onNext without element": [5, 1],
    "onNext with extra field": [5, 1, b"", 0],
    "onComplete with extra field": [6, 1, 0],
    "onError without error": [7, 1],
    "onNextPacked without messages": [8, 1, 0],
    "onNextPart without data": [9, 1, 0],
    "onNextLastPart with extra field": [10, 1, 0, b"", b""],
    "goodbye without reason": [11],
}


@pytest.mark.parametrize("message", WRONG_FIELD_COUNTS.values(), ids=WRONG_FIELD_COUNTS.keys())
def test_wrong_field_counts_are_refused(message: list[object]) -> None:
    with pytest.raises(RemoteProtocolError):
        decode_one(pack(message))


UNKNOWN_CODES = {
    "14 (after the keepalive extension's 12 and 13)": [14, 1],
    "255": [255],
    "negative": [-1, 1],
    "float 5.0": [5.0, 1, b"\x01"],
    "float 0.0": [0.0, 0, []],
    "bool": [True, "ticker", 1],
    "str": ["hello", 0, []],
    "nil": [None],
    "bin": [b"\x05", 1, b""],
}


@pytest.mark.parametrize("message", UNKNOWN_CODES.values(), ids=UNKNOWN_CODES.keys())
def test_unknown_message_codes_are_refused(message: list[object]) -> None:
    with pytest.raises(RemoteProtocolError, match="code"):
        decode_one(pack(message))


NOT_ARRAYS = {"int": 5, "str": "hello", "bin": b"\x93\x00\x00\x90", "nil": None, "bool": True, "empty map": {}}


@pytest.mark.parametrize("obj", NOT_ARRAYS.values(), ids=NOT_ARRAYS.keys())
def test_messages_that_are_not_arrays_are_refused(obj: object) -> None:
    with pytest.raises(RemoteProtocolError):
        decode_one(pack(obj))


def test_message_from_wire_validates_a_decoded_object() -> None:
    assert message_from_wire((2, 1, 5)) == Request(subscriber=1, demand=5)
    with pytest.raises(RemoteProtocolError):
        message_from_wire([2, 1, 5])  # a list is not what the decoder yields


def test_undecodable_bytes_are_refused() -> None:
    with pytest.raises(RemoteProtocolError, match="undecodable"):
        decode_one(b"\xc1")  # the one byte msgpack never uses


def test_invalid_utf8_in_a_str_is_refused() -> None:
    with pytest.raises(RemoteProtocolError):
        decode_one(b"\x92\x0b\xa2\xff\xfe")


@pytest.mark.parametrize("receiver", ["decoder", "connection"])
def test_float_message_code_is_refused_on_both_paths(pair: ConnectionPair, receiver: str) -> None:
    # 5.0 == 5 in Python: the onNext fast path must check the type, not just the value.
    subscriber = pair.open_stream(pair.client, initial_demand=1)
    data = pack([5.0, subscriber, b"\x01"])
    with pytest.raises(RemoteProtocolError):
        if receiver == "decoder":
            decode_one(data)
        else:
            pair.deliver(pair.client, data)


# ---- decoding: limits ----------------------------------------------------

# An onNext whose bin header promises far more than any limit: a peer that
# sends this and then keeps sending must be cut off, not buffered.
ENDLESS_ONNEXT_HEADER = b"\x93\x05\x01\xc6\xff\xff\xff\xff"


def test_decoder_refuses_an_oversized_message_while_incomplete() -> None:
    limit, chunk_size = SMALL_LIMITS.max_message_size, 500
    decoder = MessageDecoder(SMALL_LIMITS)
    decoder.feed(ENDLESS_ONNEXT_HEADER)
    assert list(decoder) == []
    fed = len(ENDLESS_ONNEXT_HEADER)
    with pytest.raises(RemoteProtocolError, match="larger than the limit"):
        while fed < 20 * limit:
            decoder.feed(b"x" * chunk_size)
            fed += chunk_size
            list(decoder)
    # Refused as soon as the limit was passed, long before the message could complete.
    assert limit < fed <= limit + chunk_size + len(ENDLESS_ONNEXT_HEADER)


@pytest.mark.parametrize("with_hello", [True, False], ids=["after hello", "before hello"])
def test_connection_refuses_an_oversized_message_while_incomplete(with_hello: bool) -> None:
    limit, chunk_size = SMALL_LIMITS.max_message_size, 700
    connection = Connection(limits=SMALL_LIMITS)
    connection.receive_data((encode(Hello()) if with_hello else b"") + ENDLESS_ONNEXT_HEADER)
    assert connection.events() == ([Hello()] if with_hello else [])
    fed = len(ENDLESS_ONNEXT_HEADER)
    with pytest.raises(RemoteProtocolError, match="larger than the limit"):
        while fed < 20 * limit:
            connection.receive_data(b"x" * chunk_size)
            fed += chunk_size
            connection.events()
    assert limit < fed <= limit + chunk_size + len(ENDLESS_ONNEXT_HEADER)


def _full_tree(width: int, depth: int) -> bytes:
    """A msgpack array nested ``depth`` deep, ``width`` items at every level."""
    return b"\x00" if depth == 0 else bytes([0x90 | width]) + _full_tree(width, depth - 1) * width


@pytest.mark.parametrize("receiver", ["decoder", "connection"])
def test_oversized_message_of_small_items_is_refused_while_incomplete(receiver: str) -> None:
    # Each array stays within max_array_len and each item is one byte, so only
    # the size of the message as a whole can stop this. 5**9 leaves: ~2.4 MB.
    limit, chunk_size = SMALL_LIMITS.max_message_size, 512
    endless = _full_tree(width=5, depth=9)
    decoder = MessageDecoder(SMALL_LIMITS)
    connection = Connection(limits=SMALL_LIMITS)
    connection.receive_data(encode(Hello()))
    assert connection.events() == [Hello()]
    fed = 0
    with pytest.raises(RemoteProtocolError):
        while fed < 50 * limit:
            chunk = endless[fed : fed + chunk_size]
            fed += chunk_size
            if receiver == "decoder":
                decoder.feed(chunk)
                list(decoder)
            else:
                connection.receive_data(chunk)
                connection.events()
    assert fed <= limit + chunk_size


def test_connection_refuses_an_oversized_message_arriving_at_once() -> None:
    connection = Connection(limits=SMALL_LIMITS)
    connection.receive_data(encode(Hello()) + pack([5, 1, bytes(5 * SMALL_LIMITS.max_message_size)]))
    assert connection.events() == [Hello()]
    with pytest.raises(RemoteProtocolError):
        connection.events()


def test_message_of_max_message_size_is_accepted() -> None:
    limits = ProtocolLimits(max_message_size=4096, max_string_size=4096, split_threshold=1024)
    reason = "r" * (4096 - 5)  # fixarray, code, str16 header: 5 bytes
    assert len(pack([11, reason])) == 4096
    assert decode(pack([11, reason]), limits) == [Goodbye(reason=reason)]


@pytest.mark.parametrize(
    "message",
    [[11, "r" * 257], [1, "p" * 257, 1], [7, 1, "e" * 257]],
    ids=["goodbye reason", "publisher", "error"],
)
def test_strings_over_max_string_size_are_refused(message: list[object]) -> None:
    assert SMALL_LIMITS.max_string_size == 256
    with pytest.raises(RemoteProtocolError):
        decode_one(pack(message))


def test_string_of_exactly_max_string_size_is_accepted() -> None:
    assert decode_one(pack([11, "r" * 256])) == [Goodbye(reason="r" * 256)]


def test_connection_refuses_strings_over_max_string_size(small_pair: ConnectionPair) -> None:
    with pytest.raises(RemoteProtocolError):
        small_pair.deliver(small_pair.server, pack([1, "p" * 257, 1]))


@pytest.mark.parametrize(
    ("limits", "count"),
    [
        (ProtocolLimits(max_extensions=64), 65),  # the msgpack array limit trips
        (ProtocolLimits(max_extensions=2), 3),  # under the array limit: the explicit check trips
    ],
    ids=["over array limit", "under array limit"],
)
def test_hello_with_too_many_extensions_is_refused(limits: ProtocolLimits, count: int) -> None:
    data = pack([0, 0, list(range(count))])
    with pytest.raises(RemoteProtocolError):
        decode(data, limits)
    connection = Connection(limits=limits)
    connection.receive_data(data)
    with pytest.raises(RemoteProtocolError):
        connection.events()


def test_hello_with_max_extensions_is_accepted() -> None:
    limits = ProtocolLimits(max_extensions=2)
    # (ids 1 and 3: id 2 is the bearer extension, which must carry its token)
    assert decode(pack([0, 0, [1, 3]]), limits) == [Hello(extensions=(1, 3))]


@pytest.mark.parametrize(
    "obj",
    [
        {"a": 1},
        [5, 1, {"a": 1}],
        [0, 0, [msgpack.ExtType(1, b"x")]],
        [5, 1, msgpack.ExtType(1, b"\x01\x02")],
        msgpack.ExtType(5, b""),
        [7, 1, msgpack.Timestamp(0)],
    ],
    ids=["map", "map field", "ext extension", "ext element", "empty ext", "timestamp"],
)
def test_maps_and_ext_types_are_refused(obj: object) -> None:
    with pytest.raises(RemoteProtocolError):
        decode_one(pack(obj))


def test_deep_nesting_is_refused() -> None:
    with pytest.raises(RemoteProtocolError):
        decode_one(b"\x91" * 5000 + b"\x00")


@pytest.mark.parametrize("subscriber", [1, 127, 128, 2**32, 2**63 - 1])
@pytest.mark.parametrize("demand", [0, 1, 300, 2**63 - 1])
def test_direct_subscribe_and_request_encodings_are_encode_byte_for_byte(subscriber: int, demand: int) -> None:
    from rstreams.protocol._codec import encode_request, encode_subscribe

    for name in ("range?count=1", "", "ü" * 40):
        assert encode_subscribe(name, subscriber, demand) == encode(
            Subscribe(publisher=name, subscriber=subscriber, initial_demand=demand)
        )
    if demand:
        assert encode_request(subscriber, demand) == encode(Request(subscriber=subscriber, demand=demand))


def test_direct_subscribe_encoding_refuses_a_non_str_name() -> None:
    from rstreams.protocol._codec import encode_subscribe

    with pytest.raises(LocalProtocolError, match="publisher must be a str"):
        encode_subscribe(b"range", 1, 1)  # type: ignore[arg-type]
