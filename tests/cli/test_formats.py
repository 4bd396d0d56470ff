"""``rstreams sub``'s formats (``rstreams.cli._formats``), element by element, fuzzed."""

from __future__ import annotations

import json
import math
import time
from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rstreams.cli._formats import DECODERS, FORMATS, DecodeError, JsonLines


def envelope(line: bytes) -> dict[str, Any]:
    value = json.loads(line)
    assert isinstance(value, dict)
    return value


def test_jsonl_envelope_fields_in_order() -> None:
    before = time.time()
    line = JsonLines("range?count=3")(b"hello")
    after = time.time()
    record = envelope(line)
    assert list(record) == ["seq", "name", "size", "value", "t"]
    assert record["seq"] == 0 and record["name"] == "range?count=3" and record["size"] == 5
    assert record["value"] == "hello"
    assert before - 1e-6 <= record["t"] <= after + 1e-6


def test_jsonl_counts_from_zero() -> None:
    lines = JsonLines("x")
    assert [envelope(lines(b"a"))["seq"] for _ in range(3)] == [0, 1, 2]


@pytest.mark.parametrize(
    ("decode", "element", "value"),
    [
        ("text", "grüße\tand a tab\n".encode(), "grüße\tand a tab\n"),
        ("json", b'{"n": 1, "xs": [true, null]}', {"n": 1, "xs": [True, None]}),
        ("msgpack", msgpack.packb([1, 2.5, b"\x00\xff", {"k": "v"}]), [1, 2.5, "00ff", {"k": "v"}]),
        ("msgpack", msgpack.packb({1: 2}), {"1": 2}),
    ],
)
def test_jsonl_value_decoded_as_asked(decode: str, element: bytes, value: Any) -> None:
    record = envelope(JsonLines("x", decode)(element))
    assert record["value"] == value and "hex" not in record
    assert list(record) == ["seq", "name", "size", "value", "t"]


@pytest.mark.parametrize(
    ("decode", "element"),
    [
        ("text", b"\xff\xfe"),  # not UTF-8
        ("text", b"\x00\x00\x00\x00\x00\x00\x00\x01"),  # UTF-8, but binary: range's element 1
        ("json", b"{not json"),
        ("json", b'"\\ud800"'),  # a lone surrogate: no UTF-8 form
        ("json", b"NaN"),  # Python's json reads it; JSON has no NaN
        ("msgpack", b"\xc1"),  # never used
        ("msgpack", msgpack.packb({b"k": 1})),  # a binary map key: no JSON form
        ("msgpack", msgpack.packb(math.inf)),
    ],
)
def test_jsonl_gives_hex_for_what_does_not_decode(decode: str, element: bytes) -> None:
    record = envelope(JsonLines("x", decode)(element))
    assert "value" not in record
    assert bytes.fromhex(record["hex"]) == element
    assert list(record) == ["seq", "name", "size", "hex", "t"]


@settings(max_examples=300, deadline=None)
@given(element=st.binary(max_size=300), decode=st.sampled_from(sorted(DECODERS)), name=st.text(max_size=20))
def test_jsonl_any_element_gives_one_valid_json_line(element: bytes, decode: str, name: str) -> None:
    line = JsonLines(name, decode)(element)
    assert b"\n" not in line
    record = envelope(line)  # strict JSON: no NaN, valid UTF-8
    json.loads(line.decode("utf-8"), parse_constant=lambda constant: pytest.fail(f"non-JSON constant {constant}"))
    assert (record["name"], record["size"], record["seq"]) == (name, len(element), 0)
    assert ("value" in record) != ("hex" in record)
    if "hex" in record:
        assert bytes.fromhex(record["hex"]) == element
    elif decode == "text":
        assert record["value"].encode("utf-8") == element


@settings(max_examples=200, deadline=None)
@given(element=st.binary(max_size=200), format_name=st.sampled_from(sorted(FORMATS)))
def test_every_format_prints_one_line_or_raises_decode_error(element: bytes, format_name: str) -> None:
    try:
        line = FORMATS[format_name](element)
    except DecodeError:
        assert format_name in ("msgpack", "json")
        return
    assert isinstance(line, bytes)
    if format_name != "raw":
        assert b"\n" not in line


@pytest.mark.parametrize(
    ("format_name", "element"),
    [
        ("json", b"[" * 100_000),
        # Valid JSON, deeper than the stack: 5,000 levels were on Python
        # 3.11, but 3.13 reads and prints them (its json recurses in C).
        ("json", b"[" * 100_000 + b"]" * 100_000),
        ("msgpack", b"\x91" * 100_000),
        ("msgpack", b"\x91" * 5_000 + b"\x01"),
    ],
)
def test_deep_nesting_is_a_decode_error_not_a_crash(format_name: str, element: bytes) -> None:
    with pytest.raises(DecodeError):
        FORMATS[format_name](element)
    record = envelope(JsonLines("x", format_name)(element))
    assert bytes.fromhex(record["hex"]) == element


@settings(max_examples=100, deadline=None)
@given(depth=st.integers(min_value=0, max_value=3_000), format_name=st.sampled_from(["json", "msgpack"]))
def test_nesting_of_any_depth_prints_or_is_a_decode_error(depth: int, format_name: str) -> None:
    element = b"[" * depth + b"1" + b"]" * depth if format_name == "json" else b"\x91" * depth + b"\x01"
    try:
        line = FORMATS[format_name](element)
    except DecodeError:
        return
    assert json.loads(line) is not None
