"""Fuzzing the MicroMsg2 decoder and machines with hypothesis.

Whatever the peer sends, the only exception is the typed
``RemoteProtocolError``; parsing always ends; memory stays bounded by the
limits; and every frame we can build decodes to itself.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bridges.micromsg2 import (
    CommandFrame,
    Connection,
    ConnectionState,
    Decoder,
    ErrorFrame,
    ExtensionFrame,
    ExtensionSpec,
    FilterError,
    Frame,
    Handshake,
    Limits,
    LocalProtocolError,
    MalformedTextError,
    MessageFrame,
    NamedArguments,
    RemoteProtocolError,
    Role,
    UnixTime,
    decode_properties,
    encode_frame,
    encode_handshake,
    parse_extensions,
    parse_filter,
)
from tests.bridges.micromsg2_pair import open_pair

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
LIMITS = Limits(max_frame_payload=512, max_message_size=2048, max_pending_messages=8)

fields = st.from_regex(r"[a-z0-9-]{1,6}", fullmatch=True)
values = st.one_of(
    st.integers(-(2**63), 2**63 - 1),
    st.decimals(min_value=0, max_value=10**10, places=2).map(UnixTime),
    st.text(max_size=8).filter(str.isprintable),
)
properties = st.dictionaries(fields, values, max_size=3).map(lambda d: tuple(d.items()))
named = st.builds(
    NamedArguments.of, fields, st.dictionaries(fields, st.text(max_size=8).filter(str.isprintable), max_size=3)
)
frames = st.one_of(
    st.builds(
        MessageFrame,
        sequence=st.integers(1, 65535),
        destination=st.text(max_size=10).filter(lambda t: t.isprintable()),
        properties=properties,
        payload=st.binary(max_size=300),
        continued=st.booleans(),
    ),
    st.builds(CommandFrame, command=named),
    st.builds(ErrorFrame, error=named),
    st.builds(ExtensionFrame, extension_id=st.integers(1, 255), payload=st.binary(max_size=300)),
)
extension_specs = st.lists(
    st.sampled_from([ExtensionSpec(name=n) for n in ("ack", "batch-ack", "json", "dotnet", "pubsub", "xml")]),
    max_size=3,
    unique=True,
).map(tuple)


def mutate(wire: bytes, positions: list[int], values: list[int]) -> bytes:
    data = bytearray(wire)
    for position, value in zip(positions, values):
        if data:
            data[position % len(data)] = value
    return bytes(data)


def drain(decoder: Decoder, handshake: bool = False) -> None:
    for _ in range(10_000):
        try:
            item = decoder.next_handshake() if handshake else decoder.next_frame()
        except RemoteProtocolError:
            return
        if item is None:
            return
        if isinstance(item, MessageFrame):
            # Built without MessageFrame's checks (prechecked): whatever the
            # bytes, what the decoder made must pass them.
            rebuilt = MessageFrame(
                sequence=item.sequence, destination=item.destination, properties=item.properties,
                payload=item.payload, continued=item.continued,
            )  # fmt: skip
            assert rebuilt == item and type(item.continued) is bool
    raise AssertionError("the decoder never stopped")


@FUZZ
@given(st.lists(frames, max_size=5))
def test_every_frame_round_trips(items: list[Frame]) -> None:
    decoder = Decoder()
    decoder.feed(b"".join(encode_frame(frame) for frame in items))
    assert [decoder.next_frame() for _ in items] == items
    assert decoder.buffered == 0


@FUZZ
@given(st.builds(Handshake, identity=st.from_regex(r"[ -~]{0,10}", fullmatch=True), required=extension_specs))
def test_every_handshake_round_trips(handshake: Handshake) -> None:
    decoder = Decoder()
    decoder.feed(encode_handshake(handshake))
    assert decoder.next_handshake() == handshake


@FUZZ
@given(st.binary(max_size=400), st.booleans())
def test_random_bytes_give_frames_or_typed_errors(data: bytes, handshake: bool) -> None:
    decoder = Decoder(LIMITS)
    decoder.feed(data)
    drain(decoder, handshake)
    # bounded: never more than what was fed
    assert decoder.buffered <= len(data)


@FUZZ
@given(st.lists(frames, min_size=1, max_size=4), st.lists(st.integers(0, 10_000), max_size=4),
       st.lists(st.integers(0, 255), max_size=4))  # fmt: skip
def test_mutated_frames_give_frames_or_typed_errors(items: list[Frame], positions: list[int], bytes_: list[int]) -> None:
    decoder = Decoder(LIMITS)
    decoder.feed(mutate(b"".join(encode_frame(frame) for frame in items), positions, bytes_))
    drain(decoder)


def feed_machine(connection: Connection, chunks: list[bytes]) -> None:
    for chunk in chunks:
        connection.receive_data(chunk)
        try:
            connection.events()
        except RemoteProtocolError:
            assert connection.state is ConnectionState.ERROR
            assert connection.data_to_send().startswith(b"\x04")
            return
        if connection.state in (ConnectionState.ERROR, ConnectionState.CLOSED):
            return


@FUZZ
@given(st.lists(st.binary(min_size=1, max_size=60), max_size=6), st.sampled_from([Role.CLIENT, Role.SERVER]))
def test_a_machine_in_the_handshake_survives_any_bytes(chunks: list[bytes], role: Role) -> None:
    connection = Connection(role, optional=[ExtensionSpec(name="pubsub")], limits=LIMITS)
    connection.data_to_send()  # the client's hello
    feed_machine(connection, chunks)


@FUZZ
@given(st.lists(frames, max_size=6), st.lists(st.integers(0, 10_000), max_size=3),
       st.lists(st.integers(0, 255), max_size=3), st.booleans())  # fmt: skip
def test_an_open_machine_survives_any_frames(
    items: list[Frame], positions: list[int], bytes_: list[int], to_server: bool
) -> None:
    pair = open_pair("pubsub;dotnet", "", "", "batch-ack:max-count=4")
    target = pair.server if to_server else pair.client
    wire = mutate(b"".join(encode_frame(frame) for frame in items), positions, bytes_)
    feed_machine(target, [wire[i : i + 37] for i in range(0, len(wire), 37)])


operations = st.lists(
    st.one_of(
        st.tuples(st.just("send"), st.booleans(), st.binary(max_size=20)),
        st.tuples(st.just("ack"), st.booleans(), st.integers(1, 3)),
        st.tuples(st.just("subscribe"), st.sampled_from(["a", "b"]), st.none()),
        st.tuples(st.just("complete"), st.sampled_from(["a", "b"]), st.none()),
        st.tuples(st.just("refuse"), st.sampled_from(["a", "c"]), st.none()),
        st.tuples(st.just("pump"), st.none(), st.none()),
    ),
    max_size=30,
)


@FUZZ
@given(operations)
def test_two_machines_agree_whatever_the_application_does(ops: list[tuple[str, object, object]]) -> None:
    # Local misuse is a LocalProtocolError that changes nothing; the peers
    # never see a protocol error from each other.
    pair = open_pair("pubsub", "", "", "batch-ack:max-count=3")
    for name, first, second in ops:
        try:
            if name == "send":
                (pair.server if first else pair.client).send_message("a", second)  # type: ignore[arg-type]
            elif name == "ack":
                (pair.client if first else pair.server).acknowledge(second)  # type: ignore[arg-type]
            elif name == "subscribe":
                pair.client.subscribe(first)  # type: ignore[arg-type]
            elif name == "complete":
                pair.server.complete(first)  # type: ignore[arg-type]
            elif name == "refuse":
                pair.server.refuse_sends(first, "dropped")  # type: ignore[arg-type]
            else:
                pair.pump()
        except LocalProtocolError:
            pass
        assert pair.server.send_credit is not None and 0 <= pair.server.send_credit <= 3
        assert pair.client.send_credit is not None and 0 <= pair.client.send_credit <= 3
    pair.pump()
    assert pair.client.state is pair.server.state is ConnectionState.OPEN
    assert pair.client.subscriptions == pair.server.subscriptions  # (a refusal ends no stream)
    # everything delivered: what one side has not acked is exactly what the other awaits
    assert pair.server.unacknowledged == pair.client.pending_messages
    assert pair.client.unacknowledged == pair.server.pending_messages


@FUZZ
@given(st.text(alphabet=st.sampled_from("abN DT1-.;:=<>!~&%2F"), max_size=30))
def test_any_filter_text_parses_or_is_a_filter_error(text: str) -> None:
    try:
        parsed = parse_filter(text)
    except FilterError:
        return
    assert parse_filter(str(parsed)) == parsed  # what parses prints back to the same filter
    parsed.matches({"a": 1, "b": "x"})


@FUZZ
@given(st.binary(max_size=40))
def test_any_text_field_parses_or_is_a_typed_error(data: bytes) -> None:
    for parse in (parse_extensions, decode_properties, NamedArguments.decode):
        try:
            parse(data)
        except MalformedTextError:
            pass
