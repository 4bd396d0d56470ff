"""Epoxy frames and framelets: golden bytes, the incremental decoder, order rules and limits."""

from __future__ import annotations

import pytest
from bond_test_schema import Params

from bridges.epoxy import (
    EpoxyHeaders,
    EpoxyLimits,
    EpoxyMessageType,
    Frame,
    FrameDecoder,
    FrameKind,
    Framelet,
    FrameletType,
    LocalProtocolError,
    ProtocolError,
    ProtocolErrorCode,
    RemoteProtocolError,
    bond,
    config_frame,
    error_frame,
    message_frame,
)

T = FrameletType


def h(text: str) -> bytes:
    return bytes.fromhex(text)


def decode_all(data: bytes, limits: EpoxyLimits = EpoxyLimits()) -> list[Frame]:
    decoder = FrameDecoder(limits=limits)
    decoder.feed(data)
    frames = []
    while (frame := decoder.next_frame()) is not None:
        frames.append(frame)
    return frames


def test_the_golden_frame_of_the_design_notes() -> None:
    wire = h("01 00  43 47  04 00 00 00  62 6f 6e 64")
    frame = Frame(framelets=(Framelet(type=T.EPOXY_CONFIG, content=b"bond"),))
    assert frame.encode() == wire
    assert decode_all(wire) == [frame]
    assert frame.kind is FrameKind.CONFIG


def test_framelet_type_ids_read_as_mnemonics_on_the_wire() -> None:
    assert {t.name: t.to_bytes(2, "little") for t in FrameletType} == {
        "EPOXY_CONFIG": b"CG",
        "EPOXY_HEADERS": b"HR",
        "ERROR_DATA": b"ED",
        "LAYER_DATA": b"LY",
        "PAYLOAD_DATA": b"PD",
        "PROTOCOL_ERROR": b"ER",
    }


def test_config_frame() -> None:
    assert config_frame().encode() == h("01 00  43 47  01 00 00 00  00")


def test_error_frame() -> None:
    frame = error_frame(ProtocolError(error_code=ProtocolErrorCode.LIMIT_EXCEEDED))
    assert frame.encode() == h("01 00  45 52  08 00 00 00  10 00 00 05 00 00 00 00")
    assert frame.kind is FrameKind.ERROR


def test_message_frames() -> None:
    headers = EpoxyHeaders(conversation_id=1, message_type=EpoxyMessageType.EVENT)
    headers_bytes = h("06 00 00 01 00 00 00 00 00 00 00  10 01 00 03 00 00 00  00")
    payload = bond.marshal(Params(x=1))
    assert payload == h("43 42 01 00 30 02 00")
    assert message_frame(headers, payload).encode() == (
        h("02 00  48 52 13 00 00 00") + headers_bytes + h("50 44 07 00 00 00") + payload
    )
    layer = bond.marshal(Params())
    assert message_frame(headers, payload, layer_data=layer, is_error=True).encode() == (
        h("03 00  48 52 13 00 00 00")
        + headers_bytes
        + h("4c 59 05 00 00 00 43 42 01 00 00")  # LayerData "LY"
        + h("45 44 07 00 00 00")  # ErrorData "ED"
        + payload
    )


def test_decoding_byte_by_byte() -> None:
    frames = [
        config_frame(),
        message_frame(EpoxyHeaders(message_type=EpoxyMessageType.REQUEST), b"\x01", layer_data=b"\x02"),
        error_frame(ProtocolError()),
    ]
    wire = b"".join(frame.encode() for frame in frames)
    largest = max(len(framelet.content) for frame in frames for framelet in frame.framelets)
    decoder = FrameDecoder()
    got = []
    for byte in wire:
        decoder.feed(bytes([byte]))
        # Never more than one framelet header or content: each is taken as it completes.
        assert decoder.buffered <= max(6, largest)
        while (frame := decoder.next_frame()) is not None:
            got.append(frame)
    assert got == frames
    assert not decoder.in_frame
    decoder.check_eof()


@pytest.mark.parametrize(
    ("wire", "code", "message"),
    [
        (h("00 00"), "PROTOCOL_VIOLATED", "frame of 0 framelets"),
        (h("ff ff"), "PROTOCOL_VIOLATED", "frame of 65535 framelets"),
        (h("11 00"), "LIMIT_EXCEEDED", "17 framelets exceeds the limit of 16"),
        (h("01 00 41 41"), "PROTOCOL_VIOLATED", "unknown framelet type 0x4141"),  # as soon as the type arrives
        (h("01 00 50 44"), "PROTOCOL_VIOLATED", "cannot start with PAYLOAD_DATA"),
        (h("02 00 43 47"), "PROTOCOL_VIOLATED", "starting with EPOXY_CONFIG cannot have 2 framelets"),
        (h("02 00 45 52"), "PROTOCOL_VIOLATED", "starting with PROTOCOL_ERROR cannot have 2"),
        (h("01 00 48 52"), "PROTOCOL_VIOLATED", "starting with EPOXY_HEADERS cannot have 1"),
        (h("04 00 48 52"), "PROTOCOL_VIOLATED", "starting with EPOXY_HEADERS cannot have 4"),
        (h("02 00 48 52 01 00 00 00 00 4c 59"), "PROTOCOL_VIOLATED", "LAYER_DATA cannot be framelet 2 of a 2"),
        (h("03 00 48 52 01 00 00 00 00 50 44"), "PROTOCOL_VIOLATED", "PAYLOAD_DATA cannot be framelet 2 of a 3"),
        (h("02 00 48 52 01 00 00 00 00 48 52"), "PROTOCOL_VIOLATED", "EPOXY_HEADERS cannot be framelet 2"),
        (h("01 00 43 47 00 00 00 00"), "PROTOCOL_VIOLATED", "empty EPOXY_CONFIG framelet"),
        (h("01 00 43 47 01 00 00 02"), "LIMIT_EXCEEDED", "framelet of 33554433 bytes"),  # before any content
    ],
)
def test_decoder_violations(wire: bytes, code: str, message: str) -> None:
    decoder = FrameDecoder()
    decoder.feed(wire)
    with pytest.raises(RemoteProtocolError, match=message) as caught:
        decoder.next_frame()
    assert caught.value.error_code == ProtocolErrorCode[code]


def test_frame_size_limit_counts_every_framelet() -> None:
    limits = EpoxyLimits(max_frame_size=2048)
    small = message_frame(EpoxyHeaders(message_type=EpoxyMessageType.REQUEST), b"x" * 1900)
    assert decode_all(small.encode(), limits) == [small]
    big = message_frame(EpoxyHeaders(message_type=EpoxyMessageType.REQUEST), b"x" * 1900, layer_data=b"y" * 200)
    with pytest.raises(RemoteProtocolError, match="exceeds the limit of 2048") as caught:
        decode_all(big.encode(), limits)
    assert caught.value.error_code == ProtocolErrorCode.LIMIT_EXCEEDED


def test_eof_in_the_middle_of_a_frame() -> None:
    decoder = FrameDecoder()
    decoder.feed(config_frame().encode()[:-1])
    assert decoder.next_frame() is None and decoder.in_frame
    with pytest.raises(RemoteProtocolError, match="middle of a frame"):
        decoder.check_eof()


def test_eof_in_a_frame_says_how_far_the_frame_got() -> None:
    # Cut anywhere: the message says how far the frame got (it said "0
    # bytes buffered" for a frame cut between framelets, or after a
    # framelet's header).
    frame = config_frame().encode()
    count = int.from_bytes(frame[:2], "little")
    for cut in range(1, len(frame)):
        decoder = FrameDecoder()
        decoder.feed(frame[:cut])
        assert decoder.next_frame() is None and decoder.in_frame
        expected = "byte of its framelet count" if cut < 2 else f"of its {count} framelets, then"
        with pytest.raises(RemoteProtocolError, match=f"middle of a frame \\(after .*{expected}"):
            decoder.check_eof()



def test_limits_respect_the_spec_minimums() -> None:
    with pytest.raises(ValueError):
        EpoxyLimits(max_framelets=3)
    with pytest.raises(ValueError):
        EpoxyLimits(max_framelet_size=511)
    with pytest.raises(ValueError):
        EpoxyLimits(max_frame_size=2047)
    EpoxyLimits(max_framelets=4, max_framelet_size=512, max_frame_size=2048)


def test_frames_and_framelets_refuse_what_cannot_be_sent() -> None:
    with pytest.raises(LocalProtocolError):
        Framelet(type=T.PAYLOAD_DATA, content=b"")
    with pytest.raises(LocalProtocolError):
        Framelet(type=0x4141, content=b"x")  # type: ignore[arg-type]
    with pytest.raises(LocalProtocolError):
        Frame(framelets=())
    with pytest.raises(LocalProtocolError, match="do not make a valid frame"):
        Frame(framelets=(Framelet(type=T.PAYLOAD_DATA, content=b"x"),)).kind
    frame = Frame(framelets=(Framelet(type=T.EPOXY_HEADERS, content=b"\x00"), Framelet(type=T.PAYLOAD_DATA, content=b"p")))
    assert frame.kind is FrameKind.MESSAGE
    assert frame.get(T.PAYLOAD_DATA) == b"p" and frame.get(T.LAYER_DATA) is None
