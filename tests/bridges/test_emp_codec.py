"""Byte vectors for the EMP codec, in both framings.

The spec has one byte example (the string ``hello``); bridges.md adds two
(``""`` and ``"été"``). Every other vector is written by hand from the
spec's layout diagrams: size, then header (type, flags with E = 0x80,
2 unused bytes), then extension blocks (size, id, flags with M = 0x80,
2 unused bytes, content), then the body.
"""

from __future__ import annotations

import zlib

import pytest

from bridges.emp import (
    Bye,
    Compression,
    CompressionScheme,
    Data,
    Decoder,
    EmpLimits,
    Error,
    ErrorCode,
    ExtensionErrorCode,
    Framing,
    Hello,
    LocalProtocolError,
    Message,
    Ping,
    Pong,
    RemoteProtocolError,
    RequestResponse,
    UnknownExtension,
    decode,
    encode,
)
from bridges.emp._codec import _encode_string

INCLUDES = Framing.SIZE_INCLUDES_FIELD
EXCLUDES = Framing.SIZE_EXCLUDES_FIELD


def h(text: str) -> bytes:
    return bytes.fromhex(text.replace(" ", "").replace("|", ""))


# (message, bytes with sizes including the size field, bytes excluding it)
VECTORS: list[tuple[str, Message, bytes, bytes]] = [
    ("hello", Hello(version=1), h("0000000c | 00 00 0000 | 01 000000"), h("00000008 | 00 00 0000 | 01 000000")),
    ("bye", Bye(), h("00000008 | 01 00 0000"), h("00000004 | 01 00 0000")),
    ("ping", Ping(), h("00000008 | 02 00 0000"), h("00000004 | 02 00 0000")),
    ("pong", Pong(), h("00000008 | 03 00 0000"), h("00000004 | 03 00 0000")),
    (
        "error",
        Error(code=ErrorCode.PROTOCOL, message="hello"),
        h("00000013 | 04 00 0000 | 03 00 00 00 | 0005 68656c6c6f"),
        h("0000000f | 04 00 0000 | 03 00 00 00 | 0005 68656c6c6f"),
    ),
    (
        "extension error",
        Error(code=ErrorCode.EXTENSION, extension_id=1, extension_code=4, message=""),
        h("0000000e | 04 00 0000 | 04 01 04 00 | 0000"),
        h("0000000a | 04 00 0000 | 04 01 04 00 | 0000"),
    ),
    ("data", Data(body=b"abc"), h("0000000b | 05 00 0000 | 616263"), h("00000007 | 05 00 0000 | 616263")),
    ("empty data", Data(), h("00000008 | 05 00 0000"), h("00000004 | 05 00 0000")),
    (
        "request",
        Data(body=b"q", extensions=(RequestResponse(request_id=1, is_request=True),)),
        h("0000001d | 05 80 0000 | 00000014 00 00 0000 | 80 000000 0000000000000001 | 71"),
        h("00000019 | 05 80 0000 | 00000010 00 00 0000 | 80 000000 0000000000000001 | 71"),
    ),
    (
        "response with identity compression",
        Data(
            body=b"r",
            extensions=(
                RequestResponse(request_id=2**64 - 1, is_request=False),
                Compression(scheme=CompressionScheme.IDENTITY),
            ),
        ),
        h(
            "00000029 | 05 80 0000 | 00000014 00 80 0000 | 00 000000 ffffffffffffffff"
            " | 0000000c 01 00 0000 | 00 000000 | 72"
        ),
        h(
            "00000025 | 05 80 0000 | 00000010 00 80 0000 | 00 000000 ffffffffffffffff"
            " | 00000008 01 00 0000 | 00 000000 | 72"
        ),
    ),
    (
        "unknown extension",
        Ping(extensions=(UnknownExtension(extension_id=200, content=b"xy"),)),
        h("00000012 | 02 80 0000 | 0000000a c8 00 0000 7879"),
        h("0000000e | 02 80 0000 | 00000006 c8 00 0000 7879"),
    ),
]


@pytest.mark.parametrize(("name", "message", "included", "excluded"), VECTORS, ids=[v[0] for v in VECTORS])
def test_vectors_both_framings(name: str, message: Message, included: bytes, excluded: bytes) -> None:
    assert encode(message) == included
    assert encode(message, framing=INCLUDES) == included
    assert encode(message, framing=EXCLUDES) == excluded
    assert decode(included) == message
    assert decode(excluded, framing=EXCLUDES) == message


@pytest.mark.parametrize(
    ("text", "wire"),
    [("hello", "00 05 68 65 6c 6c 6f"), ("", "00 00"), ("été", "00 05 c3 a9 74 c3 a9")],
)
def test_strings_from_the_spec_and_design(text: str, wire: str) -> None:
    assert _encode_string(text) == h(wire)
    assert decode(encode(Error(message=text))) == Error(message=text)


def test_flag_bits_are_the_top_bit_and_unused_bits_are_ignored() -> None:
    wire = bytearray(VECTORS[8][2])
    wire[5] |= 0x7F  # header unused bits
    wire[6:8] = b"\xff\xff"
    wire[14] = 0x7F  # block flags without M
    wire[16] |= 0x7F  # R byte unused bits
    assert decode(bytes(wire)) == VECTORS[8][1]


@pytest.mark.parametrize("framing", list(Framing))
def test_gzip_round_trip_and_stacking(framing: Framing) -> None:
    gzip = Compression(scheme=CompressionScheme.GZIP)
    body = b"rstreams " * 1000
    for extensions in [(gzip,), (gzip, gzip), (RequestResponse(request_id=5, is_request=True), gzip)]:
        message = Data(body=body, extensions=extensions)
        wire = encode(message, framing=framing)
        assert len(wire) < len(body)
        assert decode(wire, framing=framing) == message
    # Applied in order, undone in reverse: the outer layer is the last block.
    wire = encode(Data(body=b"x", extensions=(gzip, gzip)))
    inner = zlib.decompress(zlib.decompress(wire[8 + 24 :], 31), 31)
    assert inner == b"x"


def test_gzip_interoperates_with_other_gzip_writers() -> None:
    import gzip as gzip_module

    body = gzip_module.compress(b"payload", mtime=1234)
    wire = h("00000010 | 05 80 0000 | 0000000c 01 00 0000 | 01 000000") + body
    wire = (len(wire)).to_bytes(4, "big") + wire[4:]
    assert decode(wire).body == b"payload"  # type: ignore[union-attr]


def _gzip_data(compressed: bytes) -> bytes:
    wire = h("00000000 | 05 80 0000 | 0000000c 01 00 0000 | 01 000000") + compressed
    return len(wire).to_bytes(4, "big") + wire[4:]


@pytest.mark.parametrize(
    ("compressed", "extension_code"),
    [
        (b"not gzip at all", ExtensionErrorCode.BAD_COMPRESSED_BODY),
        (zlib.compress(b"zlib, not gzip"), ExtensionErrorCode.BAD_COMPRESSED_BODY),
        (encode(Data(body=b"x" * 100, extensions=(Compression(scheme=1),)))[20:-3], ExtensionErrorCode.BAD_COMPRESSED_BODY),
        (encode(Data(body=b"x", extensions=(Compression(scheme=1),)))[20:] + b"junk", ExtensionErrorCode.BAD_COMPRESSED_BODY),
    ],
    ids=["garbage", "zlib", "truncated", "trailing"],
)
def test_bad_gzip_body_is_an_extension_error(compressed: bytes, extension_code: int) -> None:
    with pytest.raises(RemoteProtocolError) as info:
        decode(_gzip_data(compressed))
    assert (info.value.code, info.value.extension_id, info.value.extension_code) == (4, 1, extension_code)


def test_gzip_bomb_is_refused_without_inflating_it() -> None:
    compressor = zlib.compressobj(9, zlib.DEFLATED, 31)
    bomb = compressor.compress(bytes(50 * 1024 * 1024)) + compressor.flush()
    assert len(bomb) < 100_000
    limits = EmpLimits(max_body_size=1024 * 1024)
    with pytest.raises(RemoteProtocolError) as info:
        decode(_gzip_data(bomb), limits=limits)
    assert info.value.extension_code == ExtensionErrorCode.BODY_TOO_LARGE
    # Exactly at the limit is fine.
    compressor = zlib.compressobj(9, zlib.DEFLATED, 31)
    exact_body = compressor.compress(bytes(1024 * 1024)) + compressor.flush()
    assert decode(_gzip_data(exact_body), limits=limits).body == bytes(1024 * 1024)  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("wire", "code", "extension_code"),
    [
        (h("00000007 | 05 00 00"), 3, 0),  # too small for a header
        (h("00000008 | 06 00 0000"), 3, 0),  # unknown type
        (h("00000008 | 80 00 0000"), 3, 0),  # application type: unsupported
        (h("00000009 | 01 00 0000 | 00"), 3, 0),  # bye with a body
        (h("0000000b | 00 00 0000 | 01 0000"), 3, 0),  # short hello
        (h("0000000d | 00 00 0000 | 01 000000 00"), 3, 0),  # long hello
        (h("0000000e | 04 00 0000 | 03 00 00 00 | 0001"), 3, 0),  # string overruns
        (h("0000000f | 04 00 0000 | 03 00 00 00 | 0000 41"), 3, 0),  # bytes after the string
        (h("0000000f | 04 00 0000 | 03 00 00 00 | 0001 ff"), 3, 0),  # invalid UTF-8
        (h("0000000d | 04 00 0000 | 03 00 00"), 3, 0),  # short error
        (h("00000008 | 05 80 0000"), 3, 0),  # E bit, no block
        (h("00000010 | 05 80 0000 | 00000007 01 00 0000"), 3, 0),  # block too small
        (h("00000010 | 05 80 0000 | 00000009 01 00 0000"), 3, 0),  # block overruns
        (h("00000010 | 05 80 0000 | 00000008 07 80 0000"), 3, 0),  # M bit, no block
        (h("00000010 | 05 80 0000 | 00000008 01 00 0000"), 4, ExtensionErrorCode.MALFORMED_BLOCK),
        (h("00000014 | 05 80 0000 | 0000000c 01 00 0000 | 07 000000"), 4, ExtensionErrorCode.UNSUPPORTED_SCHEME),
        (
            h("0000001c | 05 80 0000 | 00000014 00 00 0000 | 80 000000 0000000000000000"),
            4,
            ExtensionErrorCode.RESERVED_REQUEST_ID,
        ),
        # A response with id 0 matches no pending request: a protocol error.
        (h("0000001c | 05 80 0000 | 00000014 00 00 0000 | 00 000000 0000000000000000"), 3, 0),
        (
            h("00000030 | 05 80 0000 | 00000014 00 80 0000 | 80 000000 0000000000000001")
            + h("00000014 00 00 0000 | 80 000000 0000000000000002"),
            4,
            ExtensionErrorCode.DUPLICATE_BLOCK,
        ),
    ],
)
def test_malformed_messages(wire: bytes, code: int, extension_code: int) -> None:
    with pytest.raises(RemoteProtocolError) as info:
        decode(wire)
    assert info.value.code == code
    assert info.value.extension_code == extension_code


def test_size_below_minimum_in_excluding_framing() -> None:
    with pytest.raises(RemoteProtocolError):
        decode(h("00000003 | 05 00 00"), framing=EXCLUDES)


def test_limits_are_checked_before_the_message_arrives() -> None:
    decoder = Decoder(limits=EmpLimits(max_message_size=100))
    decoder.feed(h("00000065 05 00"))
    with pytest.raises(RemoteProtocolError, match="exceeds the limit"):
        decoder.next_message()


@pytest.mark.parametrize(
    ("limits", "message"),
    [
        (EmpLimits(max_extensions=1), Data(extensions=(Compression(scheme=0), Compression(scheme=0)))),
        (EmpLimits(max_string_size=3), Error(message="four")),
        (EmpLimits(max_body_size=3), Data(body=b"four")),
    ],
)
def test_limits(limits: EmpLimits, message: Message) -> None:
    decode(encode(message))
    with pytest.raises(RemoteProtocolError):
        decode(encode(message), limits=limits)


def test_streaming_decoder_accepts_any_split() -> None:
    wire = b"".join(encode(message) for _, message, _, _ in VECTORS)
    for step in (1, 3, 7, len(wire)):
        decoder = Decoder()
        got = []
        for start in range(0, len(wire), step):
            decoder.feed(wire[start : start + step])
            while (message := decoder.next_message()) is not None:
                got.append(message)
        assert got == [message for _, message, _, _ in VECTORS]
        assert decoder.buffered == 0
        decoder.check_eof()


def test_eof_in_the_middle_of_a_message() -> None:
    decoder = Decoder()
    decoder.feed(encode(Ping())[:5])
    assert decoder.next_message() is None
    with pytest.raises(RemoteProtocolError, match="middle"):
        decoder.check_eof()


def test_decode_wants_exactly_one_message() -> None:
    with pytest.raises(RemoteProtocolError):
        decode(encode(Ping())[:-1])
    with pytest.raises(RemoteProtocolError):
        decode(encode(Ping()) + b"\x00")


def test_limits_validation() -> None:
    with pytest.raises(ValueError):
        EmpLimits(max_message_size=7)
    with pytest.raises(ValueError):
        EmpLimits(max_extensions=-1)


def test_encoder_refuses_what_does_not_fit() -> None:
    class Huge(bytes):
        def __len__(self) -> int:
            return 2**32

    with pytest.raises(LocalProtocolError):
        encode(Ping(extensions=(UnknownExtension(extension_id=9, content=Huge()),)))
