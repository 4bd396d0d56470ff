"""Fuzzing the Relink decoder and connection with hypothesis.

Whatever the peer sends, the only exception is the typed
``RemoteProtocolError``; memory stays bounded by the limits (the decoder
never holds more than one packet's worth plus what it was just fed); how the
bytes are split into reads changes nothing; and every packet round-trips.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from relink_pair import EPOCH, NAME, Pair

from bridges.relink import (
    ChannelAck,
    ChannelAckType,
    ChannelOp,
    ChannelOpType,
    Connection,
    ConnectionState,
    GeneralPacket,
    GeneralType,
    LinkConfig,
    MessagePacket,
    Packet,
    PacketDecoder,
    RelinkLimits,
    RemoteProtocolError,
    Role,
    SequenceAck,
    SequenceAckType,
    SequenceOp,
    SequenceOpType,
    encode_packet,
)

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
LIMITS = RelinkLimits(max_parts=8, max_part_size=64, max_message_size=256, max_multicast=4, max_unconsumed=16)
# The largest packet those limits allow: header and multicast (8), 4 ids of
# up to 8 bytes, the long length and alignment (8), 8 large sizes (64), data.
MAX_PACKET = 8 + 4 * 8 + 8 + 8 * 8 + 256 + 8 * 7


@st.composite
def packets(draw: st.DrawFn, sender_id_size: int, receiver_id_size: int) -> Packet:
    kind = draw(st.sampled_from(["general", "op", "ack", "seqop", "seqack", "message"]))
    if kind == "general":
        return GeneralPacket(type=draw(st.sampled_from(list(GeneralType))))
    size = receiver_id_size if kind in ("ack", "seqack") else sender_id_size
    channel = st.integers(0, (1 << (8 * size)) - 1)
    multicast = draw(st.booleans())
    channels = tuple(draw(st.lists(channel, max_size=4))) if multicast else (draw(channel),)
    sequence = st.integers(0, 2**32 - 1)
    if kind == "op":
        return ChannelOp(type=draw(st.sampled_from(list(ChannelOpType))), channels=channels, multicast=multicast)
    if kind == "ack":
        return ChannelAck(type=draw(st.sampled_from(list(ChannelAckType))), channels=channels, multicast=multicast)
    if kind == "seqop":
        kind_op = draw(st.sampled_from(list(SequenceOpType)))
        return SequenceOp(type=kind_op, channels=channels, sequence=draw(sequence), multicast=multicast)
    if kind == "seqack":
        kind_ack = draw(st.sampled_from(list(SequenceAckType)))
        return SequenceAck(type=kind_ack, channels=channels, sequence=draw(sequence), multicast=multicast)
    parts = tuple(draw(st.lists(st.binary(max_size=32), max_size=8)))
    return MessagePacket(channels=channels, parts=parts, multicast=multicast)


id_sizes = st.tuples(st.integers(0, 8), st.integers(0, 8))


@FUZZ
@given(st.data(), id_sizes)
def test_packets_round_trip(data: st.DataObject, sizes: tuple[int, int]) -> None:
    sender, receiver = sizes
    batch = data.draw(st.lists(packets(sender, receiver), min_size=1, max_size=6))
    wire = b"".join(encode_packet(p, sender_id_size=sender, receiver_id_size=receiver) for p in batch)
    assert len(wire) % 8 == 0
    decoder = PacketDecoder(sender_id_size=sender, receiver_id_size=receiver, limits=LIMITS)
    # Any split into reads gives the same packets.
    cuts = sorted(data.draw(st.lists(st.integers(0, len(wire)), max_size=8)))
    decoded = []
    for start, end in zip([0, *cuts], [*cuts, len(wire)]):
        decoder.feed(wire[start:end])
        while (packet := decoder.next_packet()) is not None:
            decoded.append(packet)
    assert decoded == batch
    assert decoder.buffered == 0


@FUZZ
@given(st.binary(max_size=600), id_sizes, st.integers(1, 64))
def test_garbage_only_raises_remote_protocol_error_and_buffering_is_bounded(
    data: bytes, sizes: tuple[int, int], step: int
) -> None:
    decoder = PacketDecoder(sender_id_size=sizes[0], receiver_id_size=sizes[1], limits=LIMITS)
    try:
        for start in range(0, len(data), step):
            decoder.feed(data[start : start + step])
            while decoder.next_packet() is not None:
                pass
            assert decoder.buffered <= MAX_PACKET + step
    except RemoteProtocolError:
        pass


def open_pair(config: LinkConfig) -> Pair:
    pair = Pair(config, limits=LIMITS)
    pair.handshake()
    return pair


@FUZZ
@given(st.binary(max_size=400), st.sampled_from(list(Role)), st.integers(1, 64), st.booleans())
def test_connection_survives_garbage_with_typed_errors(data: bytes, role: Role, step: int, transactions: bool) -> None:
    pair = open_pair(
        LinkConfig(connector_id_size=1, listener_id_size=2, connector_transactions=transactions, listener_transactions=True)
    )
    pair.connector.send_message(1, [b"some", b"state"])
    pair.listener.send_message(2, [b"to", b"ack"])
    pair.pump()
    connection = pair.connector if role is Role.CONNECTOR else pair.listener
    try:
        for start in range(0, len(data), step):
            connection.receive_data(data[start : start + step])
            connection.events()
        connection.receive_data(b"")
        connection.events()
    except RemoteProtocolError:
        assert connection.state is ConnectionState.ERROR
        assert not connection.has_data_to_send


@FUZZ
@given(st.binary(max_size=400), st.integers(1, 64))
def test_listener_handshake_survives_garbage(data: bytes, step: int) -> None:
    listener = Connection(Role.LISTENER, endpoints={NAME: LinkConfig(connector_id_size=1)}, epoch=EPOCH, limits=LIMITS)
    try:
        for start in range(0, len(data), step):
            listener.receive_data(data[start : start + step])
            listener.events()
            if listener.state is ConnectionState.AWAIT_DECISION:
                listener.accept_link(new_link_id=1)
    except RemoteProtocolError:
        assert listener.state is ConnectionState.ERROR


@FUZZ
@given(st.binary(min_size=8, max_size=200), st.integers(1, 32))
def test_connector_handshake_survives_garbage(data: bytes, step: int) -> None:
    connector = Connection(Role.CONNECTOR, config=LinkConfig(), endpoint_name=NAME, limits=LIMITS)
    try:
        for start in range(0, len(data), step):
            connector.receive_data(data[start : start + step])
            connector.events()
    except RemoteProtocolError:
        assert connector.state is ConnectionState.ERROR


@FUZZ
@given(
    st.lists(st.tuples(st.integers(0, 3), st.lists(st.binary(max_size=40), max_size=4)), min_size=1, max_size=12),
    st.lists(st.integers(1, 2000), max_size=10),
)
def test_read_splits_do_not_change_the_events(sends: list[tuple[int, list[bytes]]], cuts: list[int]) -> None:
    config = LinkConfig(connector_id_size=1, listener_id_size=1)
    whole, split = open_pair(config), open_pair(config)
    for channel, parts in sends:
        whole.connector.send_message(channel, parts)
        split.connector.send_message(channel, parts)
    wire = whole.connector.data_to_send()
    assert split.connector.data_to_send() == wire
    whole.listener.receive_data(wire)
    expected = whole.listener.events()
    got = []
    positions = sorted({c % (len(wire) + 1) for c in cuts})
    for start, end in zip([0, *positions], [*positions, len(wire)]):
        if end > start:
            split.listener.receive_data(wire[start:end])
        got += split.listener.events()
    assert got == expected
    assert len(expected) == len(sends)


@FUZZ
@given(st.data(), st.sampled_from(list(Role)), st.booleans())
def test_well_formed_but_hostile_packets_only_raise_remote_protocol_error(
    data: st.DataObject, role: Role, resumed: bool
) -> None:
    # Valid packets with random channels and sequence numbers reach the
    # channel logic (acks out of range, commits of nothing, closes of
    # strangers...): still only the typed error, and the state stays sane.
    config = LinkConfig(connector_id_size=1, listener_id_size=1, connector_transactions=True, listener_transactions=True)
    pair = open_pair(config)
    for side in (pair.connector, pair.listener):
        side.send_message(1, [b"a"])
        side.send_message(1, [b"b"])
        side.commit(1)
    pair.pump()
    if resumed:
        pair = pair.reconnect()
        pair.to_listener()
        pair.to_connector()
        pair.to_listener()
    connection = pair.connector if role is Role.CONNECTOR else pair.listener
    if connection.state is not ConnectionState.OPEN:
        return
    batch = data.draw(st.lists(packets(1, 1), min_size=1, max_size=10))
    engine = connection._engine
    assert engine is not None
    try:
        for packet in batch:
            connection.receive_data(encode_packet(packet, sender_id_size=1, receiver_id_size=1))
            connection.events()
            for state in connection.link.outgoing.values():  # type: ignore[union-attr]
                assert 0 <= state.received <= state.sent <= len(state.buffered)
    except RemoteProtocolError:
        assert connection.state is ConnectionState.ERROR
