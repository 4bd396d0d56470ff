"""Relink packets: golden bytes for the spec's examples and every packet type, and bad input."""

from __future__ import annotations

import pytest

from bridges.relink import (
    ChannelAck,
    ChannelAckType,
    ChannelOp,
    ChannelOpType,
    GeneralPacket,
    GeneralType,
    LimitExceeded,
    LocalProtocolError,
    MessagePacket,
    Packet,
    PacketDecoder,
    RelinkLimits,
    RemoteProtocolError,
    SequenceAck,
    SequenceAckType,
    SequenceOp,
    SequenceOpType,
    encode_packet,
    packet_size,
)


def h(text: str) -> bytes:
    return bytes.fromhex(text)


def decode_all(data: bytes, sender: int, receiver: int, limits: RelinkLimits | None = None) -> list[Packet]:
    decoder = PacketDecoder(sender_id_size=sender, receiver_id_size=receiver, **({"limits": limits} if limits else {}))
    decoder.feed(data)
    packets = []
    while (packet := decoder.next_packet()) is not None:
        packets.append(packet)
    assert decoder.buffered == 0
    return packets


def roundtrip(packet: Packet, wire: bytes, sender: int, receiver: int) -> None:
    assert encode_packet(packet, sender_id_size=sender, receiver_id_size=receiver) == wire
    assert decode_all(wire, sender, receiver) == [packet]


# ---- the spec's examples ------------------------------------------------------


def test_spec_example_short_small_message_three_parts_one_byte_id() -> None:
    # 2.3.3.3: header, short length 3, channel id, 1 byte padding to the
    # 2-byte boundary; three 16-bit sizes; padding to 8; the parts padded to
    # 8, the empty one taking no bytes at all.
    wire = h(
        "11 03 2a 00  03 00 00 00  05 00 00 00  00 00 00 00"
        " 61 62 63 00 00 00 00 00"
        " 64 65 66 67 68 00 00 00"
    )
    packet = MessagePacket(channels=(0x2A,), parts=(b"abc", b"", b"defgh"))
    roundtrip(packet, wire, sender=1, receiver=0)
    assert packet_size(packet.parts, id_size=1) == len(wire) == 32


def test_spec_example_long_large_multicast_header_four_byte_ids() -> None:
    # Long and large flags (0x20 | 0x40) on a 2-part multicast to two
    # channels with 4-byte ids: padding:2, count:4, ids, long length at 16,
    # padding to 24, then 64-bit sizes, then the data.
    wire = h(
        "73 00 00 00  02 00 00 00"
        " 01 00 00 10  02 00 00 20"
        " 02 00 00 00  00 00 00 00"
        " 01 00 00 00 00 00 00 00"
        " 02 00 00 00 00 00 00 00"
        " 78 00 00 00 00 00 00 00"
        " 79 7a 00 00 00 00 00 00"
    )
    packet = MessagePacket(channels=(0x10000001, 0x20000002), parts=(b"x", b"yz"), multicast=True)
    assert decode_all(wire, 4, 0) == [packet]
    # Our encoder picks the smallest form: short and small.
    assert encode_packet(packet, sender_id_size=4, receiver_id_size=0) == h(
        "13 02 00 00  02 00 00 00  01 00 00 10  02 00 00 20  01 00 02 00 00 00 00 00"
        " 78 00 00 00 00 00 00 00  79 7a 00 00 00 00 00 00"
    )


def test_encoder_writes_long_and_large_when_needed() -> None:
    parts = (b"\x01" * 65536,) + (b"",) * 255
    wire = encode_packet(MessagePacket(channels=(7, 8), parts=parts, multicast=True), sender_id_size=4, receiver_id_size=0)
    assert wire[:24] == h("73 00 00 00 02 00 00 00 07 00 00 00 08 00 00 00 00 01 00 00 00 00 00 00")
    assert wire[24:32] == (65536).to_bytes(8, "little")
    assert wire[32 : 24 + 256 * 8] == bytes(255 * 8)
    assert len(wire) == packet_size(parts, channels=2, id_size=4, multicast=True) == 24 + 256 * 8 + 65536
    assert decode_all(wire, 4, 0, RelinkLimits(max_parts=256)) == [
        MessagePacket(channels=(7, 8), parts=parts, multicast=True)
    ]


def test_long_flag_alone_and_large_flag_alone() -> None:
    # Long: the 32-bit length right after the id, 2-aligned (1-byte id: 1 pad byte).
    long_wire = h("31 00 05 00 01 00 00 00  01 00 00 00 00 00 00 00  61 00 00 00 00 00 00 00")
    assert decode_all(long_wire, 1, 0) == [MessagePacket(channels=(5,), parts=(b"a",))]
    # Large: 64-bit sizes, 8-aligned.
    large_wire = h("51 01 05 00 00 00 00 00  01 00 00 00 00 00 00 00  61 00 00 00 00 00 00 00")
    assert decode_all(large_wire, 1, 0) == [MessagePacket(channels=(5,), parts=(b"a",))]


# ---- every packet type ------------------------------------------------------


@pytest.mark.parametrize("kind", list(GeneralType))
def test_general_packets_are_eight_bytes(kind: GeneralType) -> None:
    roundtrip(GeneralPacket(type=kind), bytes((kind << 5,)) + bytes(7), 2, 1)


def test_nop_is_eight_zero_bytes() -> None:
    assert encode_packet(GeneralPacket(type=GeneralType.NOP), sender_id_size=8, receiver_id_size=8) == bytes(8)


@pytest.mark.parametrize(
    ("kind", "header"), [(ChannelOpType.COMMIT, 0x01), (ChannelOpType.ROLLBACK, 0x21), (ChannelOpType.CLOSE, 0x41)]
)
def test_channel_ops_use_the_senders_id_size(kind: ChannelOpType, header: int) -> None:
    roundtrip(ChannelOp(type=kind, channels=(0x0102,)), bytes((header, 0)) + h("02 01 00 00 00 00"), 2, 1)


@pytest.mark.parametrize(
    ("kind", "header"),
    [
        (ChannelAckType.RECEIVED, 0x05),
        (ChannelAckType.CONSUMED, 0x25),
        (ChannelAckType.COMMITTED, 0x45),
        (ChannelAckType.UNCOMMITTED, 0x65),
        (ChannelAckType.CLOSED, 0x85),
    ],
)
def test_channel_acks_use_the_receivers_id_size(kind: ChannelAckType, header: int) -> None:
    roundtrip(ChannelAck(type=kind, channels=(9,)), bytes((header, 0)) + h("09 00 00 00 00 00"), 2, 1)


@pytest.mark.parametrize(("kind", "header"), [(SequenceOpType.COMMIT, 0x09), (SequenceOpType.ROLLBACK, 0x29)])
def test_sequence_ops(kind: SequenceOpType, header: int) -> None:
    roundtrip(
        SequenceOp(type=kind, channels=(0x0102,), sequence=0xDEADBEEF),
        bytes((header, 0)) + h("02 01  ef be ad de"),
        2,
        1,
    )


@pytest.mark.parametrize(
    ("kind", "header"),
    [
        (SequenceAckType.RECEIVED, 0x0D),
        (SequenceAckType.CONSUMED, 0x2D),
        (SequenceAckType.COMMITTED, 0x4D),
        (SequenceAckType.UNCOMMITTED, 0x6D),
    ],
)
def test_sequence_acks_align_the_sequence_to_four(kind: SequenceAckType, header: int) -> None:
    # 2 header bytes + a 1-byte id = 3: one padding byte before the sequence.
    roundtrip(SequenceAck(type=kind, channels=(9,), sequence=1), bytes((header, 0)) + h("09 00 01 00 00 00"), 2, 1)


def test_spec_example_sequence_packet_with_eight_byte_id() -> None:
    # 2.3.2: header, 8-byte id, 2 bytes of padding to the 4-byte boundary,
    # the sequence number; 16 bytes in all.
    packet = SequenceAck(type=SequenceAckType.CONSUMED, channels=(0x0807060504030201,), sequence=7)
    roundtrip(packet, h("2d 00 01 02 03 04 05 06 07 08 00 00 07 00 00 00"), 0, 8)


def test_multicast_channel_op() -> None:
    roundtrip(
        ChannelOp(type=ChannelOpType.CLOSE, channels=(1, 2), multicast=True),
        h("43 00 00 00 02 00 00 00  01 00 02 00 00 00 00 00"),
        2,
        1,
    )


def test_multicast_of_one_and_of_none_keep_the_multicast_form() -> None:
    roundtrip(MessagePacket(channels=(3,), parts=(), multicast=True), h("13 00 00 00 01 00 00 00 03 00 00 00 00 00 00 00"), 2, 0)
    roundtrip(MessagePacket(channels=(), parts=(b"z",), multicast=True), h("13 01 00 00 00 00 00 00 01 00 00 00 00 00 00 00 7a 00 00 00 00 00 00 00"), 2, 0)


def test_id_size_zero_sends_no_id_bytes() -> None:
    roundtrip(MessagePacket(channels=(0,), parts=()), h("11 00 00 00 00 00 00 00"), 0, 0)
    roundtrip(SequenceAck(type=SequenceAckType.CONSUMED, channels=(0,), sequence=5), h("2d 00 00 00 05 00 00 00"), 0, 0)
    # A multicast still names each target: with id size 0, the count says
    # how many times the unnamed channel gets the message.
    roundtrip(
        MessagePacket(channels=(0, 0, 0), parts=(b"q",), multicast=True),
        h("13 01 00 00 03 00 00 00  01 00 00 00 00 00 00 00  71 00 00 00 00 00 00 00"),
        0,
        0,
    )


def test_go_style_stream_of_several_packets_decodes_in_order() -> None:
    # The shapes Go's own receive tests use, with a 2-byte id of the sender.
    wire = (
        h("00 00 00 00 00 00 00 00")  # nop
        + h("20 00 00 00 00 00 00 00")  # ping
        + h("11 01 45 60 01 00 00 00  2a 00 00 00 00 00 00 00")  # short small
        + h("71 00 45 60 02 00 00 00  01 00 00 00 00 00 00 00  02 00 00 00 00 00 00 00")
        + h("34 00 00 00 00 00 00 00  35 23 00 00 00 00 00 00")  # long large
        + h("13 01 00 00 02 00 00 00  45 60 58 58 01 00 00 00  3e 00 00 00 00 00 00 00")
        + h("41 00 58 58 00 00 00 00")  # close
        + h("80 00 00 00 00 00 00 00")  # shutdown
    )
    assert decode_all(wire, 2, 0) == [
        GeneralPacket(type=GeneralType.NOP),
        GeneralPacket(type=GeneralType.PING),
        MessagePacket(channels=(0x6045,), parts=(b"\x2a",)),
        MessagePacket(channels=(0x6045,), parts=(b"\x34", b"\x35\x23")),
        MessagePacket(channels=(0x6045, 0x5858), parts=(b"\x3e",), multicast=True),
        ChannelOp(type=ChannelOpType.CLOSE, channels=(0x5858,)),
        GeneralPacket(type=GeneralType.SHUTDOWN),
    ]


def test_channel_ids_are_little_endian_of_any_size_up_to_eight() -> None:
    for size in range(9):
        channel = (1 << (8 * size)) - 1 if size else 0
        wire = encode_packet(ChannelOp(type=ChannelOpType.CLOSE, channels=(channel,)), sender_id_size=size, receiver_id_size=0)
        assert wire[2 : 2 + size] == b"\xff" * size
        assert decode_all(wire, size, 0) == [ChannelOp(type=ChannelOpType.CLOSE, channels=(channel,))]


def test_encoder_refuses_an_id_too_big_for_its_size() -> None:
    with pytest.raises(LocalProtocolError):
        encode_packet(ChannelOp(type=ChannelOpType.CLOSE, channels=(256,)), sender_id_size=1, receiver_id_size=0)
    with pytest.raises(LocalProtocolError):
        encode_packet(ChannelOp(type=ChannelOpType.CLOSE, channels=(1,)), sender_id_size=0, receiver_id_size=0)


@pytest.mark.parametrize(
    "build",
    [
        lambda: ChannelOp(type=ChannelOpType.CLOSE, channels=(1, 2)),  # unicast of two
        lambda: ChannelOp(type=ChannelOpType.CLOSE, channels=()),
        lambda: SequenceAck(type=SequenceAckType.RECEIVED, channels=(1,), sequence=2**32),
        lambda: MessagePacket(channels=(1,), parts=("text",)),  # type: ignore[arg-type]
        lambda: GeneralPacket(type=5),  # type: ignore[arg-type]
        lambda: ChannelAck(type=ChannelOpType.CLOSE, channels=(1,)),  # type: ignore[arg-type]
    ],
)
def test_malformed_packets_cannot_be_built(build: object) -> None:
    with pytest.raises(LocalProtocolError):
        build()  # type: ignore[operator]


def test_non_zero_padding_is_ignored() -> None:
    wire = h("41 ff 02 01 ff ff ff ff")  # unused length byte and padding set
    assert decode_all(wire, 2, 0) == [ChannelOp(type=ChannelOpType.CLOSE, channels=(0x0102,))]
    assert decode_all(h("20 7f 7f 7f 7f 7f 7f 7f"), 0, 0) == [GeneralPacket(type=GeneralType.PING)]
    # General packets ignore the multicast and format bits too.
    assert decode_all(h("3e 00 00 00 00 00 00 00"), 0, 0) == [GeneralPacket(type=GeneralType.PING)]
    # The unused third message flag.
    assert decode_all(h("91 00 00 00 00 00 00 00"), 0, 0) == [MessagePacket(channels=(0,), parts=())]


# ---- bad input ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("wire", "match"),
    [
        ("a0 00 00 00 00 00 00 00", "unknown general packet type 5"),
        ("e0 00 00 00 00 00 00 00", "unknown general packet type 7"),
        ("15 00 00 00 00 00 00 00", "unknown channel packet format 5"),
        ("19 00 00 00 00 00 00 00", "unknown channel packet format 6"),
        ("1d 00 00 00 00 00 00 00", "unknown channel packet format 7"),
        ("61 00 00 00 00 00 00 00", "unknown channel op packet type 3"),
        ("a5 00 00 00 00 00 00 00", "unknown channel ack packet type 5"),
        ("49 00 00 00 00 00 00 00", "unknown sequence op packet type 2"),
        ("8d 00 00 00 00 00 00 00", "unknown sequence ack packet type 4"),
    ],
)
def test_unknown_enumeration_values_end_the_connection(wire: str, match: str) -> None:
    with pytest.raises(RemoteProtocolError, match=match):
        decode_all(h(wire), 0, 0)


def test_unknown_values_are_refused_from_the_header_alone() -> None:
    decoder = PacketDecoder(sender_id_size=8, receiver_id_size=8)
    decoder.feed(h("a0 00"))
    with pytest.raises(RemoteProtocolError):
        decoder.next_packet()


def test_a_short_packet_waits_for_the_rest() -> None:
    wire = encode_packet(MessagePacket(channels=(1,), parts=(b"hello", b"world")), sender_id_size=2, receiver_id_size=0)
    decoder = PacketDecoder(sender_id_size=2, receiver_id_size=0)
    for index, byte in enumerate(wire[:-1]):
        decoder.feed(bytes((byte,)))
        assert decoder.next_packet() is None, index
    decoder.feed(wire[-1:])
    assert decoder.next_packet() == MessagePacket(channels=(1,), parts=(b"hello", b"world"))


def test_a_misaligned_stream_is_noticed() -> None:
    # A sequence ack cut short by 4 bytes: the next packet's header lands in
    # the middle of the previous one and reads as an unknown value.
    good = encode_packet(
        SequenceAck(type=SequenceAckType.UNCOMMITTED, channels=(0,), sequence=0xE0E0E0E0),
        sender_id_size=0,
        receiver_id_size=0,
    )
    with pytest.raises(RemoteProtocolError, match="unknown general packet type 7"):
        decode_all(good[:4] + good, 0, 0)


LIMITS = RelinkLimits(max_parts=4, max_part_size=100, max_message_size=150, max_multicast=3)


@pytest.mark.parametrize(
    ("wire", "limit", "value"),
    [
        ("11 05 00 00 00 00 00 00", "max_parts", 5),
        ("31 00 00 00 00 01 00 00", "max_parts", 2**24),
        ("11 01 65 00 00 00 00 00", "max_part_size", 101),
        ("51 01 00 00 00 00 00 00 ff ff ff ff ff ff ff ff", "max_part_size", 2**64 - 1),
        ("11 02 64 00 64 00 00 00", "max_message_size", 200),
        ("13 00 00 00 04 00 00 00", "max_multicast", 4),
        ("43 00 00 00 ff ff ff ff", "max_multicast", 2**32 - 1),
    ],
)
def test_limits_are_checked_before_the_data_arrives(wire: str, limit: str, value: int) -> None:
    decoder = PacketDecoder(sender_id_size=0, receiver_id_size=0, limits=LIMITS)
    decoder.feed(h(wire))  # only the header: the data never comes
    with pytest.raises(LimitExceeded) as caught:
        decoder.next_packet()
    assert (caught.value.limit, caught.value.value) == (limit, value)


def test_limits_are_inclusive() -> None:
    parts = (b"a" * 100, b"b" * 50, b"", b"")
    wire = encode_packet(MessagePacket(channels=(0,), parts=parts), sender_id_size=0, receiver_id_size=0)
    assert decode_all(wire, 0, 0, LIMITS) == [MessagePacket(channels=(0,), parts=parts)]


def test_decoder_buffer_is_compacted() -> None:
    decoder = PacketDecoder(sender_id_size=0, receiver_id_size=0)
    ping = encode_packet(GeneralPacket(type=GeneralType.PING), sender_id_size=0, receiver_id_size=0)
    for _ in range(20_000):
        decoder.feed(ping)
        assert decoder.next_packet() == GeneralPacket(type=GeneralType.PING)
    assert len(decoder._buffer) < 70_000
