"""Filters: each operator on each type, parsing, and every malformed filter."""

from __future__ import annotations

from decimal import Decimal

import pytest

from bridges.micromsg2 import Condition, Filter, FilterError, Operator, UnixTime, parse_filter

PROPERTIES = {
    "price": 10,
    "at": UnixTime(Decimal("1413198000.5")),
    "name": "Hello world",
}

CASES = [
    # numbers, by value
    ("price=N10", True), ("price=N11", False),
    ("price!=N11", True), ("price!=N10", False),
    ("price<N11", True), ("price<N10", False),
    ("price<=N10", True), ("price<=N9", False),
    ("price>N9", True), ("price>N10", False),
    ("price>=N10", True), ("price>=N11", False),
    ("price>N-5", True),
    # dates, by value (fractions count)
    ("at=D1413198000.5", True), ("at=D1413198000.50", True), ("at=D1413198000", False),
    ("at!=D1413198000", True), ("at!=D1413198000.5", False),
    ("at<D1413198001", True), ("at<D1413198000.5", False),
    ("at<=D1413198000.5", True), ("at<=D1413198000.4", False),
    ("at>D1413198000", True), ("at>D1413198000.5", False),
    ("at>=D1413198000.5", True), ("at>=D1413198000.6", False),
    # text, case-sensitive
    ("name=THello%20world", True), ("name=Thello%20world", False),
    ("name!=Thello%20world", True), ("name!=THello%20world", False),
    ("name<THello", True), ("name<Tworld", False),  # starts with
    ("name>Tworld", True), ("name>THello", False),  # ends with
    ("name~Tbye", True), ("name~To%20w", False),  # does not contain
    ("name&To%20w", True), ("name&Tbye", False),  # contains
    # all must hold
    ("price>=N10;name<THello", True), ("price>=N10;name<Tx", False), ("price>=N10;name<THello;", True),
    # a missing key never matches, not even with !=
    ("colour=Tred", False), ("colour!=Tred", False),
    # another type never matches
    ("price=D10", False), ("price=T10", False), ("at=N1413198000", False), ("name!=N1", False),
]  # fmt: skip


@pytest.mark.parametrize(("text", "expected"), CASES)
def test_each_operator_and_type(text: str, expected: bool) -> None:
    parsed = parse_filter(text)
    assert parsed.matches(PROPERTIES) is expected
    assert parsed.matches(tuple(PROPERTIES.items())) is expected


def test_text_round_trips() -> None:
    for text, _ in CASES:
        assert str(parse_filter(text)) == text.rstrip(";")


def test_parsed_structure() -> None:
    assert parse_filter("a-1<=N-3;b&Tx%3By") == Filter(
        conditions=(
            Condition(key="a-1", operator=Operator.LESS_OR_EQUAL, value=-3),
            Condition(key="b", operator=Operator.CONTAINS, value="x;y"),
        )
    )


def test_a_bool_property_is_not_a_number() -> None:
    assert not parse_filter("flag=N1").matches({"flag": True})


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "at least one condition"),
        (";", "at least one condition"),
        ("a=N1;;b=N2", "not 'key OP VALUE'"),
        ("price", "not 'key OP VALUE'"),
        ("=N1", "not a FIELD"),
        ("Price=N1", "not 'key OP VALUE'"),
        ("price==N1", "not a FILTER_VALUE"),
        ("price=1", "not a FILTER_VALUE"),
        ("price=N1.5", "not a 64-bit number"),
        ("price=N9223372036854775808", "not a 64-bit number"),
        ("price=Nx", "not a 64-bit number"),
        ("at=D", "not a UNIX time"),
        ("at=D1e5", "not a UNIX time"),
        ("name=Ta%2", "bad URL escape"),
        ("name=Ta b", "must be URL encoded"),
        ("name<=Tx", "cannot compare text"),
        ("name>=Tx", "cannot compare text"),
        ("price~N1", "cannot compare a number or date"),
        ("at&D1", "cannot compare a number or date"),
        ("price <N1", "not 'key OP VALUE'"),
    ],
)
def test_malformed_filters(text: str, reason: str) -> None:
    with pytest.raises(FilterError, match=reason):
        parse_filter(text)
