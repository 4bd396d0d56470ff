"""Properties and FILTER_VALUEs: golden text, round trips and bad values."""

from __future__ import annotations

from datetime import datetime, timezone
from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bridges.micromsg2 import (
    MalformedTextError,
    UnixTime,
    decode_properties,
    decode_value,
    encode_properties,
    encode_value,
    make_properties,
)


def test_the_spec_filter_value_examples() -> None:
    assert encode_value(1) == "N1"
    assert decode_value("N1") == 1
    # 2014-10-13 12:00 UTC+1
    moment = datetime(2014, 10, 13, 11, 0, tzinfo=timezone.utc)
    assert encode_value(UnixTime.from_datetime(moment)) == "D1413198000.0"
    assert decode_value("D1413198000.0").to_datetime() == moment  # type: ignore[union-attr]
    assert encode_value('Hello "world"') == "THello%20%22world%22"
    assert decode_value("THello%20%22world%22") == 'Hello "world"'


def test_properties_golden() -> None:
    properties = (("first-name", "jonas"), ("twitter", "jgauffin"), ("age", -42))
    wire = b"first-name:Tjonas;twitter:Tjgauffin;age:N-42"
    assert encode_properties(properties) == wire
    assert decode_properties(wire) == properties
    assert decode_properties(wire + b";") == properties  # a trailing ; as in the spec's example
    assert decode_properties(b"") == ()
    assert make_properties({"a": 1}) == (("a", 1),)


def test_numbers_are_64_bit() -> None:
    assert decode_value("N9223372036854775807") == 2**63 - 1
    assert decode_value("N-9223372036854775808") == -(2**63)
    for bad in (2**63, -(2**63) - 1):
        with pytest.raises(MalformedTextError, match="64 bits"):
            encode_value(bad)


@pytest.mark.parametrize(
    "text", ["", "X1", "N", "N+1", "N1.0", "N 1", "D", "D.5", "D1.", "D1,5", "Dnan", "T%", "Ta;b", "n1"]
)
def test_bad_filter_values(text: str) -> None:
    with pytest.raises(MalformedTextError):
        decode_value(text)


@pytest.mark.parametrize("value", [True, 1.5, b"x", None])
def test_values_of_other_types_are_refused(value: object) -> None:
    with pytest.raises(MalformedTextError, match="not a number, UnixTime or text"):
        encode_value(value)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("field", "reason"),
    [(b"a", "no ':'"), (b"a:N1;a:N2", "twice"), (b"A:N1", "FIELD"), (b"a:N1;;b:N2", "no ':'"), (b"\xff", "ASCII")],
)
def test_bad_property_fields(field: bytes, reason: str) -> None:
    with pytest.raises(MalformedTextError, match=reason):
        decode_properties(field)


def test_a_date_must_be_finite_and_writable() -> None:
    with pytest.raises(MalformedTextError, match="finite"):
        UnixTime(Decimal("NaN"))
    with pytest.raises(MalformedTextError, match="at most 20 digits"):
        UnixTime(Decimal("1." + "0" * 21))
    with pytest.raises(MalformedTextError, match="at most 20 digits"):
        UnixTime(Decimal("1E+20"))
    assert decode_value("D-0.123456789012345") == UnixTime(Decimal("-0.123456789012345"))
    assert encode_value(UnixTime(Decimal("1E-3"))) == "D0.001"


def test_text_that_is_not_unicode_is_refused() -> None:
    with pytest.raises(MalformedTextError, match="not valid Unicode"):
        encode_value("\ud800")


values = st.one_of(
    st.integers(-(2**63), 2**63 - 1),
    st.decimals(min_value=-(10**12), max_value=10**12, places=3).map(UnixTime),
    st.text(max_size=20).filter(lambda text: text.isprintable()),
)


@settings(max_examples=100, deadline=None)
@given(st.dictionaries(st.from_regex(r"[a-z0-9-]{1,8}", fullmatch=True), values, max_size=5))
def test_properties_round_trip(properties: dict[str, object]) -> None:
    checked = make_properties(properties)  # type: ignore[arg-type]
    assert decode_properties(encode_properties(checked)) == checked
