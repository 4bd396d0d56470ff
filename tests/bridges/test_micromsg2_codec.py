"""Golden bytes for every MicroMsg2 frame and handshake, and every malformed frame.

The spec's byte examples are used with the typos fixed as
``design/bridges.md`` says: ``json;dotnet`` is 11 bytes, the batch-ack frame
is ``02 03 02 00 04``, and the .NET type name is 51 bytes.
"""

from __future__ import annotations

import pytest

from bridges.micromsg2 import (
    CommandFrame,
    Decoder,
    ErrorFrame,
    ExtensionFrame,
    ExtensionSpec,
    Frame,
    FrameFlags,
    FrameTooLargeError,
    Handshake,
    Limits,
    LocalProtocolError,
    MessageFrame,
    NamedArguments,
    RemoteProtocolError,
    UnixTime,
    encode_frame,
    encode_handshake,
)
from decimal import Decimal

JSON, DOTNET, BATCH_ACK = ExtensionSpec(name="json"), ExtensionSpec(name="dotnet"), ExtensionSpec(name="batch-ack")


def decode_one(data: bytes, limits: Limits = Limits()) -> Frame:
    decoder = Decoder(limits)
    decoder.feed(data)
    frame = decoder.next_frame()
    assert frame is not None and decoder.buffered == 0
    return frame


def decode_handshake(data: bytes) -> Handshake:
    decoder = Decoder()
    decoder.feed(data)
    handshake = decoder.next_handshake()
    assert isinstance(handshake, Handshake) and decoder.buffered == 0
    return handshake


# The spec's "Complete handshake example", with 11 for the length of json;dotnet.
CLIENT_HELLO = bytes([1, 0, 0, 4]) + b"hulk" + bytes([0, 11]) + b"json;dotnet" + bytes([0, 0])
SERVER_REPLY = bytes([1, 0, 0, 5]) + b"srver" + bytes([0, 0]) + bytes([0, 9]) + b"batch-ack"
CLIENT_FINAL = bytes([1, 0, 0, 4]) + b"hulk" + bytes([0, 11]) + b"json;dotnet" + bytes([0, 9]) + b"batch-ack"
HANDSHAKES = [
    (CLIENT_HELLO, Handshake(identity="hulk", required=(JSON, DOTNET))),
    (SERVER_REPLY, Handshake(identity="srver", optional=(BATCH_ACK,))),
    (CLIENT_FINAL, Handshake(identity="hulk", required=(JSON, DOTNET), optional=(BATCH_ACK,))),
]


@pytest.mark.parametrize(("wire", "handshake"), HANDSHAKES)
def test_the_spec_handshake_examples_golden(wire: bytes, handshake: Handshake) -> None:
    assert encode_handshake(handshake) == wire
    assert decode_handshake(wire) == handshake


def test_handshake_with_properties_and_the_batch_ack_count() -> None:
    handshake = Handshake(identity="c", required=(ExtensionSpec.batch_ack(100), JSON))
    assert len(b"batch-ack:max-count=100;json") == 28
    wire = bytes([1, 0, 0, 1]) + b"c" + bytes([0, 28]) + b"batch-ack:max-count=100;json" + bytes([0, 0])
    assert encode_handshake(handshake) == wire
    assert decode_handshake(wire) == handshake


FRAMES = [
    # The spec's batch-ack example fixed: flags 2, index 3, length 2, sequence 4.
    (ExtensionFrame(extension_id=3, payload=b"\x00\x04"), bytes.fromhex("02 03 02 00 04")),
    # The spec's dotnet example fixed: flags 2, the dotnet index (2 above), length 51.
    (
        ExtensionFrame(extension_id=2, payload=b"OneTrueError.Contracts.Reports, OneTrueError.Client"),
        bytes([2, 2, 51]) + b"OneTrueError.Contracts.Reports, OneTrueError.Client",
    ),
    (
        MessageFrame(sequence=1, destination="topic/x", payload=b"hi"),
        bytes.fromhex("00 0001 07") + b"topic/x" + bytes.fromhex("0000 02") + b"hi",
    ),
    (
        MessageFrame(sequence=65535, destination="q", properties=(("first-name", "jonas"), ("age", 42)), payload=b""),
        bytes.fromhex("00 ffff 01") + b"q" + bytes.fromhex("0019") + b"first-name:Tjonas;age:N42" + b"\x00",
    ),
    (
        MessageFrame(sequence=2, destination="d", properties=(("at", UnixTime(Decimal("1413198000.0"))),)),
        bytes.fromhex("00 0002 01") + b"d" + bytes.fromhex("0010") + b"at:D1413198000.0" + b"\x00",
    ),
    (
        MessageFrame(sequence=3, destination="d", payload=b"x" * 256, continued=True),
        bytes.fromhex("18 0003 01") + b"d" + bytes.fromhex("0000 00000100") + b"x" * 256,
    ),
    (
        CommandFrame(command=NamedArguments.of("subscribe", {"destination": "topic/x", "filter": "price>=N10"})),
        bytes.fromhex("01 35") + b"subscribe;destination=topic%2Fx,filter=price%3E%3DN10",
    ),
    (CommandFrame(command=NamedArguments.of("completed", {"destination": "q"})), b"\x01\x17completed;destination=q"),
    (ErrorFrame(error=NamedArguments.of("error", {"message": "no such publisher"})),
     b"\x04\x23error;message=no%20such%20publisher"),  # fmt: skip
    (ErrorFrame(error=NamedArguments.of("ping")), b"\x04\x04ping"),
    (ExtensionFrame(extension_id=1, payload=b"y" * 300), bytes.fromhex("0a 01 0000012c") + b"y" * 300),
]


@pytest.mark.parametrize(("frame", "wire"), FRAMES)
def test_frames_golden(frame: Frame, wire: bytes) -> None:
    assert encode_frame(frame) == wire
    assert decode_one(wire) == frame


def test_lengths_in_the_golden_frames_are_right() -> None:
    assert len(b"subscribe;destination=topic%2Fx,filter=price%3E%3DN10") == 0x35
    assert len(b"error;message=no%20such%20publisher") == 0x23
    assert len(b"first-name:Tjonas;age:N42") == 0x19
    assert len(b"at:D1413198000.0") == 0x10


def test_large_payload_flag_is_accepted_on_a_small_payload() -> None:
    wire = bytes.fromhex("08 0001 01") + b"d" + bytes.fromhex("0000 00000002") + b"hi"
    assert decode_one(wire) == MessageFrame(sequence=1, destination="d", payload=b"hi")
    assert decode_one(bytes.fromhex("0c 00000005") + b"error") == ErrorFrame(error=NamedArguments.of("error"))


def test_frames_split_anywhere_decode_the_same() -> None:
    wire = b"".join(encode_frame(frame) for frame, _ in FRAMES)
    decoder = Decoder()
    frames = []
    for byte in wire:
        decoder.feed(bytes([byte]))
        while (frame := decoder.next_frame()) is not None:
            frames.append(frame)
    assert frames == [frame for frame, _ in FRAMES]


def test_an_error_frame_where_a_handshake_is_expected() -> None:
    decoder = Decoder()
    decoder.feed(b"\x04\x19error;message=unsupported")
    assert decoder.next_handshake() == ErrorFrame(error=NamedArguments.of("error", {"message": "unsupported"}))


def test_incomplete_input_waits() -> None:
    for frame, wire in FRAMES:
        decoder = Decoder()
        decoder.feed(wire[:-1])
        assert decoder.next_frame() is None, frame
    decoder = Decoder()
    decoder.feed(CLIENT_FINAL[:-1])
    assert decoder.next_handshake() is None


BAD_FRAMES = [
    (b"\x20\x00", "unknown frame flags"),
    (b"\x80\x00", "unknown frame flags"),
    (b"\x03\x00", "more than one frame type"),
    (b"\x06\x00\x00", "more than one frame type"),
    (b"\x11\x00", "CONTINUED is only for MESSAGE"),
    (b"\x12\x01\x00", "CONTINUED is only for MESSAGE"),
    (bytes.fromhex("00 0000 01") + b"d" + bytes.fromhex("0000 00"), "sequence number"),
    (bytes.fromhex("00 0001 01") + b"\xff" + bytes.fromhex("0000 00"), "not UTF-8"),
    (bytes.fromhex("00 0001 01") + b"d" + bytes.fromhex("0003") + b"a:1" + b"\x00", "FILTER_VALUE"),
    (bytes.fromhex("00 0001 01") + b"d" + bytes.fromhex("0003") + b"aN1" + b"\x00", "no ':'"),
    (bytes.fromhex("00 0001 01") + b"d" + bytes.fromhex("0009") + b"a:N1;a:N2" + b"\x00", "twice"),
    (bytes.fromhex("00 0001 01") + b"d" + bytes.fromhex("0004") + b"A:N1" + b"\x00", "FIELD"),
    (bytes.fromhex("00 0001 01") + b"d" + bytes.fromhex("0004") + b"a:T%" + b"\x00", "URL escape"),
    (bytes.fromhex("00 0001 01") + b"d" + bytes.fromhex("0004") + b"a:\xff1" + b"\x00", "ASCII"),
    (b"\x02\x00\x00", "extension id"),
    (b"\x01\x03a;b", "has no '='"),
    (b"\x01\x04Ping", "FIELD"),
    (b"\x01\x01\xe9", "ASCII"),
    (b"\x01\x0ba;x=%zz,y=1", "URL escape"),
    (b"\x01\x07a;x=1,x", "has no '='"),
    (b"\x01\x09a;x=1,x=2", "twice"),
    (b"\x04\x00", "FIELD"),
]


@pytest.mark.parametrize(("wire", "reason"), BAD_FRAMES)
def test_malformed_frames_are_typed_errors(wire: bytes, reason: str) -> None:
    decoder = Decoder()
    decoder.feed(wire)
    with pytest.raises(RemoteProtocolError, match=reason):
        decoder.next_frame()


BAD_HANDSHAKES = [
    (bytes([1, 0, 0, 1]) + b"\xff" + bytes(4), "identity is not ASCII"),
    (bytes([1, 0, 0, 0, 0, 5]) + b"JSON;" + bytes(2), "FIELD"),
    (bytes([1, 0, 0, 0, 0, 9]) + b"json;json" + bytes(2), "named twice"),
    (bytes([1, 0, 0, 0, 0, 5]) + b"json;" + bytes([0, 4]) + b"json", "listed twice"),
    (bytes([1, 0, 0, 0, 0, 2]) + b";;" + bytes(2), "FIELD"),
    (bytes([1, 0, 0, 0, 0, 6]) + b"a:b=%g" + bytes(2), "URL escape"),
    (bytes([1, 0, 0, 0, 0, 1]) + b"\xe9" + bytes(2), "ASCII"),
]


@pytest.mark.parametrize(("wire", "reason"), BAD_HANDSHAKES)
def test_malformed_handshakes_are_typed_errors(wire: bytes, reason: str) -> None:
    decoder = Decoder()
    decoder.feed(wire)
    with pytest.raises(RemoteProtocolError, match=reason):
        decoder.next_handshake()


def test_a_payload_over_the_limit_is_refused_before_it_is_buffered() -> None:
    decoder = Decoder(Limits(max_frame_payload=100))
    decoder.feed(bytes.fromhex("0a 01 ffffffff"))  # 4 GiB announced, nothing sent
    with pytest.raises(FrameTooLargeError, match="4294967295 bytes is over the limit of 100"):
        decoder.next_frame()
    decoder = Decoder(Limits(max_frame_payload=100))
    decoder.feed(bytes.fromhex("08 0001 01") + b"d" + bytes.fromhex("0000 00000065"))
    with pytest.raises(FrameTooLargeError):
        decoder.next_frame()
    assert decode_one(bytes.fromhex("01 64") + b"a" * 100, Limits(max_frame_payload=100)) == CommandFrame(
        command=NamedArguments(name="a" * 100)
    )


@pytest.mark.parametrize(
    "build",
    [
        lambda: MessageFrame(sequence=0, destination="d"),
        lambda: MessageFrame(sequence=65536, destination="d"),
        lambda: MessageFrame(sequence=1, destination="d" * 256),
        lambda: MessageFrame(sequence=1, destination="d", properties=(("Bad", 1),)),
        lambda: MessageFrame(sequence=1, destination="d", properties=(("b", True),)),  # type: ignore[arg-type]
        lambda: MessageFrame(sequence=1, destination="d", properties=(("b", 2**63),)),
        lambda: ExtensionFrame(extension_id=0),
        lambda: ExtensionFrame(extension_id=256),
        lambda: Handshake(identity="é"),
        lambda: Handshake(identity="x" * 256),
        lambda: Handshake(major=256),
        lambda: Handshake(required=(JSON,), optional=(JSON,)),
    ],
)
def test_invalid_frames_cannot_be_built(build: object) -> None:
    with pytest.raises(LocalProtocolError):
        build()  # type: ignore[operator]


def test_flags_values() -> None:
    assert [int(flag) for flag in FrameFlags] == [1, 2, 4, 8, 16]
