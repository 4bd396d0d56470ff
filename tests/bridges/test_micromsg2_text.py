"""FIELDs, URL encoding, command payloads and extension lists."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bridges.micromsg2 import (
    ExtensionSpec,
    MalformedTextError,
    NamedArguments,
    format_extensions,
    parse_extensions,
    url_decode,
    url_encode,
)


def test_url_encoding_golden() -> None:
    assert url_encode('Hello "world"') == "Hello%20%22world%22"  # the spec's T example
    assert url_encode("a;b,c=d:e%f+g/h~i.j_k-l") == "a%3Bb%2Cc%3Dd%3Ae%25f%2Bg%2Fh~i.j_k-l"
    assert url_encode("é") == "%C3%A9"
    assert url_decode("Hello%20%25%20mother!") == "Hello % mother!"  # the spec's property example
    assert url_decode("a+b") == "a+b"
    assert url_decode("%c3%a9") == "é"


@pytest.mark.parametrize(
    ("encoded", "reason"),
    [
        ("%", "bad URL escape"),
        ("%4", "bad URL escape"),
        ("%4g", "bad URL escape"),
        ("a b", "must be URL encoded"),
        ("a;b", "must be URL encoded"),
        ("a,b", "must be URL encoded"),
        ("a=b", "must be URL encoded"),
        ("a\x00", "must be URL encoded"),
        ("é", "must be URL encoded"),
        ("%ff", "not UTF-8"),
    ],
)
def test_url_decoding_is_strict(encoded: str, reason: str) -> None:
    with pytest.raises(MalformedTextError, match=reason):
        url_decode(encoded)


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=40))
def test_url_encoding_round_trips(text: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return  # lone surrogates are not text
    assert url_decode(url_encode(text)) == text


def test_command_payloads_golden() -> None:
    command = NamedArguments.of("subscribe", {"destination": "topic/x", "filter": "a=N1"})
    assert command.encode() == b"subscribe;destination=topic%2Fx,filter=a%3DN1"
    assert NamedArguments.decode(command.encode()) == command
    assert command.get("filter") == "a=N1" and command.get("nothing") is None
    assert NamedArguments.of("completed").encode() == b"completed"
    assert NamedArguments.decode(b"completed;") == NamedArguments.of("completed")
    assert NamedArguments.decode(b"error;message=") == NamedArguments.of("error", {"message": ""})


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        (b"", "not a FIELD"),
        (b"Subscribe", "not a FIELD"),
        (b"a;b", "has no '='"),
        (b"a;=1", "not a FIELD"),
        (b"a;b=1,b=2", "given twice"),
        (b"a;b=1,", "has no '='"),
        (b"a;b=%", "bad URL escape"),
        (b"\xff", "ASCII"),
    ],
)
def test_malformed_command_payloads(payload: bytes, reason: str) -> None:
    with pytest.raises(MalformedTextError, match=reason):
        NamedArguments.decode(payload)


def test_extension_lists_golden() -> None:
    assert format_extensions((ExtensionSpec.batch_ack(10), ExtensionSpec(name="json"))) == b"batch-ack:max-count=10;json"
    assert parse_extensions(b"json;xml;protobuf") == tuple(
        ExtensionSpec(name=name) for name in ("json", "xml", "protobuf")
    )
    # the spec's first example (property value URL encoded, trailing ;)
    [first] = parse_extensions(b"extensionname1:propname1=propValue2,propname2=Hello%20%25%20mother!;")
    assert first.properties == (("propname1", "propValue2"), ("propname2", "Hello % mother!"))
    assert parse_extensions(b"") == ()
    assert parse_extensions(b";") == ()


@pytest.mark.parametrize(
    ("field", "window"),
    [
        (b"batch-ack", 10),
        (b"batch-ack;", 10),
        (b"batch-ack:max-count=64", 64),
        (b"batch-ack:count=10", 10),
        (b"batch-ack:max-count:100;", 100),  # the spec's third spelling
        (b"batch-ack:max-count=65535", 65535),
        (b"ack", 1),
    ],
)
def test_the_batch_ack_count_in_every_spelling(field: bytes, window: int) -> None:
    [extension] = parse_extensions(field)
    assert extension.window == window


@pytest.mark.parametrize("count", [b"0", b"65536", b"-1", b"ten", b""])
def test_a_bad_batch_ack_count(count: bytes) -> None:
    [extension] = parse_extensions(b"batch-ack:max-count=" + count)
    with pytest.raises(MalformedTextError, match="batch-ack count"):
        extension.window


def test_only_ack_extensions_have_a_window() -> None:
    with pytest.raises(ValueError, match="sets no ack window"):
        ExtensionSpec(name="json").window
    with pytest.raises(MalformedTextError):
        ExtensionSpec.batch_ack(0)


@pytest.mark.parametrize(
    ("field", "reason"),
    [
        (b"JSON", "not a FIELD"),
        (b"json;;xml", "not a FIELD"),
        (b"x_y", "not a FIELD"),
        (b"json;json", "named twice"),
        (b"a:b=1,b=2", "given twice"),
        (b"a:B=1", "not a FIELD"),
        (b"a:b=%zz", "bad URL escape"),
        (b"\x80", "ASCII"),
    ],
)
def test_malformed_extension_lists(field: bytes, reason: str) -> None:
    with pytest.raises(MalformedTextError, match=reason):
        parse_extensions(field)
