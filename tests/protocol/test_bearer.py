"""The bearer extension (PROTOCOL.md section 9), sans-I/O: a token as the
argument of extension id 2 in hello, its bytes, what decoders refuse, and
that the token never shows in a repr."""

from __future__ import annotations

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers import decode
from rstreams.protocol import (
    MAX_TOKEN_SIZE,
    Connection,
    Extension,
    Hello,
    LocalProtocolError,
    MessageDecoder,
    RemoteProtocolError,
    encode,
)

KEEPALIVE = int(Extension.KEEPALIVE)
BEARER = int(Extension.BEARER)


def test_bearer_hello_bytes() -> None:
    hello = Hello(extensions=(KEEPALIVE, BEARER), token="s3cret")
    data = bytes(encode(hello))
    assert data.hex(" ") == "93 00 00 92 01 92 02 a6 73 33 63 72 65 74"
    assert decode(data) == [hello]
    assert decode(data)[0].token == "s3cret"


def test_token_never_in_repr() -> None:
    hello = Hello(extensions=(BEARER,), token="s3cret-value")
    assert "s3cret-value" not in repr(hello)
    assert "s3cret-value" not in str(hello)


def test_connection_announces_bearer_only_with_a_token() -> None:
    with_token = decode(bytes(Connection(extensions=[KEEPALIVE], token="t").data_to_send()))
    assert with_token == [Hello(extensions=(KEEPALIVE, BEARER), token="t")]
    # Listing the id without a token announces nothing: it needs its argument.
    without = decode(bytes(Connection(extensions=[KEEPALIVE, BEARER]).data_to_send()))
    assert without == [Hello(extensions=(KEEPALIVE,))]


def test_token_and_id_go_together() -> None:
    with pytest.raises(LocalProtocolError):
        Hello(extensions=(BEARER,))
    with pytest.raises(LocalProtocolError):
        Hello(extensions=(), token="t")
    with pytest.raises(LocalProtocolError, match="longer than"):
        Hello(extensions=(BEARER,), token="x" * (MAX_TOKEN_SIZE + 1))
    # Lone surrogates (os.fsdecode of bytes that are not UTF-8) do not encode:
    # refused here, typed, instead of by msgpack when the hello is written.
    with pytest.raises(LocalProtocolError, match="UTF-8"):
        Hello(extensions=(BEARER,), token="\udcff")
    with pytest.raises(LocalProtocolError, match="UTF-8"):
        Connection(token="\udcff")
    # The same rule, asked without making a hello (SessionConfig and the
    # command line say it before any hello is made).
    from rstreams.protocol import check_token

    check_token("x" * MAX_TOKEN_SIZE)
    for token in ("x" * (MAX_TOKEN_SIZE + 1), "\udcff", 5):
        with pytest.raises(LocalProtocolError, match="token"):
            check_token(token)


def hello_bytes(extensions: list[object]) -> bytes:
    return bytes(msgpack.packb([0, 0, extensions]))


@pytest.mark.parametrize(
    ("extensions", "match"),
    [
        ([2], "must carry its token"),
        ([[2]], "must be \\[2, token\\]"),
        ([[2, 5]], "must be \\[2, token\\]"),
        ([[2, "a", "b"]], "must be \\[2, token\\]"),
        ([[2, "a"], [2, "b"]], "twice"),
        ([[]], "must start with its id"),
        ([["x", 1]], "extension id"),
        ([[2, "x" * (MAX_TOKEN_SIZE + 1)]], "longer than"),
    ],
)
def test_malformed_bearer_is_a_protocol_error(extensions: list[object], match: str) -> None:
    decoder = MessageDecoder()
    decoder.feed(hello_bytes(extensions))
    with pytest.raises(RemoteProtocolError, match=match):
        list(decoder)


def test_unknown_extensions_with_arguments_are_ignored() -> None:
    assert decode(hello_bytes([1, [77, "x", 3], 9])) == [Hello(extensions=(1, 9))]


@settings(deadline=None, max_examples=300)
@given(
    token=st.text(max_size=200),
    others=st.lists(st.integers(min_value=0, max_value=2**16).filter(lambda i: i != BEARER), max_size=5),
)
def test_bearer_round_trip(token: str, others: list[int]) -> None:
    hello = Hello(extensions=(*others, BEARER), token=token)
    assert decode(bytes(encode(hello))) == [hello]


@settings(deadline=None, max_examples=500)
@given(
    st.lists(
        st.one_of(
            st.integers(min_value=-3, max_value=2**64 - 1),
            st.lists(st.one_of(st.integers(min_value=-1, max_value=5), st.text(max_size=5), st.binary(max_size=3)), max_size=4),
            st.text(max_size=3),
        ),
        max_size=6,
    )
)
def test_fuzzed_hello_extension_lists_decode_or_fail_cleanly(extensions: list[object]) -> None:
    decoder = MessageDecoder()
    decoder.feed(hello_bytes(extensions))
    try:
        messages = list(decoder)
    except RemoteProtocolError:
        return
    [hello] = messages
    assert isinstance(hello, Hello)
    assert (hello.token is not None) == (BEARER in hello.extensions)
    assert decode(bytes(encode(hello))) == [hello]


# ---- TLS where hello was expected ------------------------------------------


@pytest.mark.parametrize(
    ("opening", "reason"),
    [
        ("15030300020228", "this port speaks TLS: use tls://"),  # an alert
        ("160303007a020000760303", "this port speaks TLS: use tls://"),  # ServerHello
        ("16030100f4010000f00303", "the peer speaks TLS where hello was expected: this port is plain, use tcp://"),
    ],
)
def test_tls_bytes_where_hello_was_expected_are_named(opening: str, reason: str) -> None:
    connection = Connection()
    connection.receive_data(bytes.fromhex(opening))
    with pytest.raises(RemoteProtocolError) as info:
        connection.events()
    assert info.value.goodbye_reason == f"protocol error: {reason}"


def test_tls_bytes_after_hello_are_a_plain_protocol_error() -> None:
    connection = Connection()
    connection.receive_data(bytes(encode(Hello())) + bytes.fromhex("15030300020228"))
    assert connection.events() == [Hello()]  # (the error comes on the next call)
    with pytest.raises(RemoteProtocolError) as info:
        connection.events()
    assert "TLS" not in info.value.goodbye_reason
