"""Property-based tests: hostile input never breaks the machine, and honest traffic arrives exactly.

What a peer sends must only ever produce events or ``RemoteProtocolError``
(never another exception, never a hang, never unbounded buffering); what a
well-behaved publisher sends must arrive complete, in order, and never beyond
the demand.
"""

from __future__ import annotations

import dataclasses
import typing

import msgpack
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers import SMALL_LIMITS, ConnectionPair, decode
from rstreams.protocol import (
    MAX_ID,
    UNBOUNDED,
    Cancel,
    Connection,
    ConnectionState,
    Elements,
    Event,
    Goodbye,
    Hello,
    Message,
    MessageDecoder,
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

FUZZ = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
EVENT_TYPES = typing.get_args(Event)


def pack(obj: object) -> bytes:
    return msgpack.packb(obj, use_bin_type=True)


def in_chunks(data: bytes, chunk_size: int) -> list[bytes]:
    return [data[start : start + chunk_size] for start in range(0, len(data), chunk_size)]


def feed_hostile(connection: Connection, chunks: list[bytes]) -> list[Event]:
    """Feed ``chunks``; only events or a RemoteProtocolError may come out.

    After an error the connection must be in ERROR, have queued exactly one
    goodbye, and ignore everything that follows.
    """
    events: list[Event] = []
    failed = False
    for chunk in chunks:
        connection.receive_data(chunk)
        try:
            new_events = connection.events()
        except RemoteProtocolError:
            assert not failed, "a connection reports its protocol error once"
            failed = True
            assert connection.state is ConnectionState.ERROR
            continue
        assert all(isinstance(event, EVENT_TYPES) for event in new_events), new_events
        if failed:
            assert new_events == []
        events.extend(new_events)
    if failed:
        written = decode(ConnectionPair.drain(connection), connection.limits)
        assert isinstance(written[-1], Goodbye)
        assert sum(isinstance(message, Goodbye) for message in written) == 1
    return events


def connection_with_streams() -> tuple[ConnectionPair, Connection]:
    """A client with streams in every state, so hostile input reaches real code paths.

    Its subscriptions: 1 variable-size, 2 fixed-size (2 bytes), 3 cancelled,
    4 waiting for subscribed. Its publications (the server subscribed):
    1 accepted, 2 not accepted yet.
    """
    pair = ConnectionPair(SMALL_LIMITS)
    pair.open()
    pair.open_stream(pair.client, initial_demand=5)
    pair.open_stream(pair.client, initial_demand=5, element_size=2)
    pair.client.cancel(pair.open_stream(pair.client, initial_demand=5))
    pair.client.subscribe("pending", 5)
    pair.send(pair.client)
    pair.open_stream(pair.server, initial_demand=5)
    pair.server.subscribe("not accepted", 5)
    pair.send(pair.server)
    return pair, pair.client


# ---- random bytes ---------------------------------------------------------------


@FUZZ
@given(data=st.binary(max_size=3000), chunk_size=st.integers(1, 600))
def test_random_bytes_before_hello_only_raise_remote_protocol_error(data: bytes, chunk_size: int) -> None:
    feed_hostile(Connection(limits=SMALL_LIMITS), in_chunks(data, chunk_size))


@FUZZ
@given(data=st.binary(max_size=3000), chunk_size=st.integers(1, 600))
def test_random_bytes_after_hello_only_raise_remote_protocol_error(data: bytes, chunk_size: int) -> None:
    _, connection = connection_with_streams()
    feed_hostile(connection, in_chunks(data, chunk_size))


# ---- bounded buffering ------------------------------------------------------------

LIMIT = SMALL_LIMITS.max_message_size

# Beginnings of a message whose last field is a bin or str longer than any
# limit: valid msgpack that can never complete within the limits.
MESSAGE_OPENINGS = [
    b"\x93\x05\x01",  # onNext(1, ...
    b"\x94\x08\x01\x03",  # onNextPacked(1, 3, ...
    b"\x94\x09\x01\x00",  # onNextPart(1, 0, ...
    b"\x92\x0b",  # goodbye(...
    b"\x93\x07\x01",  # onError(1, ...
    b"\x94\x01",  # subscribe(...
]
LONG_FIELD_HEADERS = {
    "bin16": (0xC5, 2, 2**16 - 1),
    "bin32": (0xC6, 4, 2**32 - 1),
    "str16": (0xDA, 2, 2**16 - 1),
    "str32": (0xDB, 4, 2**32 - 1),
}


@st.composite
def endless_message_prefix(draw: st.DrawFn) -> bytes:
    kind = draw(st.sampled_from(sorted(LONG_FIELD_HEADERS)))
    marker, width, largest = LONG_FIELD_HEADERS[kind]
    declared = draw(st.integers(LIMIT + 1, largest))
    return draw(st.sampled_from(MESSAGE_OPENINGS)) + bytes([marker]) + declared.to_bytes(width, "big")


@FUZZ
@given(
    prefix=endless_message_prefix(),
    with_hello=st.booleans(),
    filler=st.binary(min_size=1, max_size=64),
    chunk_size=st.integers(1, 2048),
)
def test_an_endless_message_is_refused_once_past_the_limit(
    prefix: bytes, with_hello: bool, filler: bytes, chunk_size: int
) -> None:
    connection = Connection(limits=SMALL_LIMITS)
    if with_hello:
        connection.receive_data(encode(Hello()))
        assert connection.events() == [Hello()]
    stream = prefix + filler * (3 * LIMIT // len(filler) + 1)
    fed = 0
    refused = False
    for chunk in in_chunks(stream, chunk_size):
        connection.receive_data(chunk)
        fed += len(chunk)
        try:
            connection.events()
        except RemoteProtocolError:
            refused = True
            break
    assert refused
    # Refused no later than one read after the limit was passed.
    assert fed <= LIMIT + chunk_size + len(prefix)


# ---- random messages ------------------------------------------------------------

wire_ints = st.one_of(st.integers(-2, 12), st.integers(-(2**63), 2**64 - 1))
scalars = st.one_of(
    st.none(),
    st.booleans(),
    wire_ints,
    st.floats(allow_nan=False),
    st.text(max_size=20),
    st.binary(max_size=40),
)
field_values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4), max_leaves=8)
message_codes = st.one_of(
    st.integers(0, 11),  # twice: mostly codes of the profile
    st.integers(0, 11),
    st.integers(-2, 300),
    st.sampled_from([5.0, True, "5", None]),
)
random_arrays = st.builds(lambda code, fields: [code, *fields], message_codes, st.lists(field_values, max_size=5))


@FUZZ
@given(messages=st.lists(random_arrays, min_size=1, max_size=20), chunk_size=st.integers(1, 400))
def test_random_message_arrays_only_produce_events_or_remote_errors(
    messages: list[list[object]], chunk_size: int
) -> None:
    _, connection = connection_with_streams()
    feed_hostile(connection, in_chunks(b"".join(map(pack, messages)), chunk_size))


# Valid message objects, for the codec round trip.
ids = st.one_of(st.integers(0, 10), st.integers(0, MAX_ID))
blobs = st.binary(max_size=300)
texts = st.text(max_size=50)
valid_messages = st.one_of(
    st.builds(Hello, version=wire_ints, extensions=st.lists(wire_ints.filter(lambda i: i != 2), max_size=8).map(tuple)),
    # The bearer extension (id 2) carries its token.
    st.builds(
        lambda version, extensions, token: Hello(version=version, extensions=(*extensions, 2), token=token),
        wire_ints,
        st.lists(wire_ints.filter(lambda i: i != 2), max_size=7),
        st.text(max_size=40),
    ),
    st.builds(Subscribe, publisher=texts, subscriber=ids, initial_demand=wire_ints),
    st.builds(Request, subscriber=ids, demand=wire_ints),
    st.builds(Cancel, subscriber=ids),
    st.builds(Subscribed, subscriber=ids, element_size=st.integers(0, LIMIT)),
    st.builds(OnNext, subscriber=ids, element=blobs),
    st.builds(OnComplete, subscriber=ids),
    st.builds(OnError, subscriber=ids, error=texts),
    st.builds(OnNextPacked, subscriber=ids, count=st.integers(0, 100), messages=blobs),
    st.builds(OnNextPart, subscriber=ids, element=ids, data=blobs),
    st.builds(OnNextLastPart, subscriber=ids, element=ids, data=blobs),
    st.builds(Goodbye, reason=texts),
)


@FUZZ
@given(messages=st.lists(valid_messages, max_size=10), chunk_size=st.integers(1, 100))
def test_codec_round_trip(messages: list[Message], chunk_size: int) -> None:
    decoder = MessageDecoder(SMALL_LIMITS)
    decoded = []
    for chunk in in_chunks(b"".join(map(encode, messages)), chunk_size):
        decoder.feed(chunk)
        decoded.extend(decoder)
    assert decoded == messages


# ---- a well-behaved publisher -------------------------------------------------------


@dataclasses.dataclass
class StreamModel:
    """What the test knows about one stream from the client to the server's publisher."""

    element_size: int
    requested: int
    sent: list[bytes] = dataclasses.field(default_factory=list)
    received: list[bytes] = dataclasses.field(default_factory=list)
    cancelled: bool = False
    complete_sent: bool = False
    complete_received: bool = False


def make_element(sequence: int, size: int) -> bytes:
    """An element whose content says which one it is (so order errors show)."""
    pattern = sequence.to_bytes(4, "big")
    return (pattern * (size // 4 + 1))[:size]


VARIABLE_SIZES = st.sampled_from([0, 1, 7, 100, 1023, 1024, 1025, 2500])
ACTIONS = ["request", "publish", "publish", "complete", "cancel", "deliver", "deliver", "deliver requests"]
SPLIT_LIMITS = ProtocolLimits(split_threshold=1024)


def record(events: list[Event], streams: dict[int, StreamModel]) -> None:
    for event in events:
        if isinstance(event, Elements):
            model = streams[event.subscriber]
            assert not model.cancelled, "elements after cancel are dropped by the machine"
            assert not model.complete_received
            model.received.extend(event.elements)
            assert len(model.received) <= model.requested, "more elements than requested (rule 1.1)"
            assert model.received == model.sent[: len(model.received)], "elements lost, changed or reordered"
        else:
            assert isinstance(event, OnComplete), event
            model = streams[event.subscriber]
            assert model.complete_sent and not model.cancelled
            assert model.received == model.sent
            model.complete_received = True


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_well_behaved_publisher_delivers_exactly_what_was_requested(data: st.DataObject) -> None:
    pair = ConnectionPair(SPLIT_LIMITS)
    pair.open()
    client, server = pair.client, pair.server
    streams: dict[int, StreamModel] = {}
    for _ in range(data.draw(st.integers(1, 3), label="streams")):
        element_size = data.draw(st.sampled_from([0, 0, 8, 1500]), label="element_size")
        initial = data.draw(st.integers(0, 20), label="initial demand")
        subscriber = pair.open_stream(client, initial_demand=initial, element_size=element_size)
        streams[subscriber] = StreamModel(element_size=element_size, requested=initial)
    sequence = 0

    for _ in range(data.draw(st.integers(1, 40), label="steps")):
        action = data.draw(st.sampled_from(ACTIONS), label="action")
        subscriber = data.draw(st.sampled_from(sorted(streams)), label="stream")
        model = streams[subscriber]
        if action == "request" and not model.cancelled and not model.complete_received:
            n = data.draw(st.integers(1, 20), label="n")
            client.request(subscriber, n)
            model.requested += n
        elif action == "publish" and server.is_publishing(subscriber):
            count = data.draw(st.integers(0, min(8, server.publication_demand(subscriber))), label="count")
            elements = []
            for _ in range(count):
                sequence += 1
                size = model.element_size or data.draw(VARIABLE_SIZES, label="size")
                elements.append(make_element(sequence, size))
            if model.element_size and data.draw(st.booleans(), label="packed"):
                server.send_packed(subscriber, b"".join(elements))
            else:
                server.send_elements(subscriber, elements)
            model.sent.extend(elements)
        elif action == "complete" and server.is_publishing(subscriber):
            server.complete(subscriber)
            model.complete_sent = True
        elif action == "cancel":
            client.cancel(subscriber)
            model.cancelled = True
        elif action == "deliver":
            written = bytes(server.data_to_send(data.draw(st.integers(1, 70_000), label="max_bytes")))
            cut = data.draw(st.integers(0, len(written)), label="cut")
            for piece in (written[:cut], written[cut:]):
                client.receive_data(piece)
                record(client.events(), streams)
        elif action == "deliver requests":
            events = pair.send(client)
            assert all(isinstance(event, (Request, Cancel)) for event in events), events
        if not (model.cancelled or model.complete_received or model.requested >= UNBOUNDED):
            assert client.outstanding_demand(subscriber) == model.requested - len(model.received)

    # Let everything in flight arrive.
    pair.send(client)
    record(pair.send(server), streams)
    assert pair.drain(server) == b""
    for model in streams.values():
        assert model.received == model.sent[: len(model.received)]
        if not model.cancelled:
            assert model.received == model.sent
            assert model.complete_received == model.complete_sent
    assert client.state is server.state is ConnectionState.OPEN
