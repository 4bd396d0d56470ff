"""Message properties and their typed values (FILTER_VALUEs).

A MESSAGE frame's Properties field is ``key:VALUE`` pairs separated by
``;`` (a trailing ``;`` is accepted, never emitted). Keys are FIELDs and a
key appears once. VALUE is a FILTER_VALUE, a type letter then text:

* ``N`` a number: a signed 64-bit integer in decimal (``N-12``), held as
  ``int``;
* ``D`` a date: UNIX time in seconds, up to 20 digits, then optionally a
  dot and up to 20 digits of fraction (``D1413198000.0``), held as :class:`UnixTime` so that it round-trips
  digit for digit;
* ``T`` text, URL encoded (``THello%20%22world%22``), held as ``str``.

Python's ``bool`` is an ``int`` but not a number here: it is refused.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from decimal import Decimal
from typing import Union

from ._errors import MalformedTextError
from ._text import check_field, url_decode, url_encode

__all__ = [
    "UnixTime",
    "FilterValue",
    "Properties",
    "MIN_NUMBER",
    "MAX_NUMBER",
    "encode_value",
    "decode_value",
    "make_properties",
    "encode_properties",
    "decode_properties",
]

MIN_NUMBER = -(2**63)
MAX_NUMBER = 2**63 - 1
_NUMBER = re.compile(r"-?[0-9]{1,19}\Z")
_DATE = re.compile(r"-?[0-9]{1,20}(\.[0-9]{1,20})?\Z")


@dataclass(frozen=True, slots=True, order=True)
class UnixTime:
    """A ``D`` value: seconds since 1970-01-01 UTC, exactly as written.

    Raises:
        MalformedTextError: at construction, for a value that is not finite.
    """

    seconds: Decimal

    def __post_init__(self) -> None:
        if not isinstance(self.seconds, Decimal) or not self.seconds.is_finite():
            raise MalformedTextError(f"a date must be a finite Decimal, not {self.seconds!r}")
        if not _DATE.match(str(self)):
            raise MalformedTextError(f"a date has at most 20 digits before and after the dot, not {self}")

    @classmethod
    def from_datetime(cls, moment: datetime) -> UnixTime:
        """The UNIX time of an aware ``datetime`` (microsecond precision)."""
        return cls(Decimal(str(moment.timestamp())))

    def to_datetime(self) -> datetime:
        """This time as an aware UTC ``datetime``."""
        return datetime.fromtimestamp(float(self.seconds), tz=timezone.utc)

    def __str__(self) -> str:
        return format(self.seconds, "f")


#: A property value: ``N`` int, ``D`` UnixTime, ``T`` str.
FilterValue = Union[int, UnixTime, str]
#: A message's properties: (key, value) pairs in order, keys unique.
Properties = tuple[tuple[str, FilterValue], ...]


def encode_value(value: FilterValue) -> str:
    """The FILTER_VALUE text of ``value``.

    Raises:
        MalformedTextError: a bool, a number outside 64 bits, or another type.
    """
    if isinstance(value, bool) or not isinstance(value, (int, UnixTime, str)):
        raise MalformedTextError(f"{value!r} is not a number, UnixTime or text")
    if isinstance(value, int):
        if not MIN_NUMBER <= value <= MAX_NUMBER:
            raise MalformedTextError(f"number {value} does not fit in 64 bits")
        return f"N{value}"
    if isinstance(value, UnixTime):
        return f"D{value}"
    return f"T{url_encode(value)}"


def decode_value(text: str) -> FilterValue:
    """Parse a FILTER_VALUE.

    Raises:
        MalformedTextError: an unknown type letter or a malformed value.
    """
    kind, body = text[:1], text[1:]
    if kind == "N":
        if not _NUMBER.match(body) or not MIN_NUMBER <= int(body) <= MAX_NUMBER:
            raise MalformedTextError(f"{text!r} is not a 64-bit number")
        return int(body)
    if kind == "D":
        if not _DATE.match(body):
            raise MalformedTextError(f"{text!r} is not a UNIX time")
        return UnixTime(Decimal(body))
    if kind == "T":
        return url_decode(body)
    raise MalformedTextError(f"{text!r} is not a FILTER_VALUE (N, D or T then the value)")


def make_properties(properties: Mapping[str, FilterValue] | Iterable[tuple[str, FilterValue]]) -> Properties:
    """Properties from a mapping or pairs, checked.

    Raises:
        MalformedTextError: a key that is not a FIELD or is repeated, or a
            value that is not a FILTER_VALUE.
    """
    if not properties:
        return ()  # (most messages: checked for every frame built and read)
    pairs = tuple(properties.items() if isinstance(properties, Mapping) else properties)
    keys = [check_field(key, "property name") for key, _ in pairs]
    if len(set(keys)) != len(keys):
        raise MalformedTextError("a property is given twice")
    for _, value in pairs:
        encode_value(value)
    return pairs


def encode_properties(properties: Properties) -> bytes:
    """The Properties field: ``key:VALUE`` joined by ``;``."""
    return ";".join(f"{key}:{encode_value(value)}" for key, value in properties).encode("ascii")


def decode_properties(field: bytes) -> Properties:
    """Parse a Properties field.

    Raises:
        MalformedTextError: not ASCII, an item without ``:``, a bad key or
            value, or a key given twice.
    """
    try:
        text = field.decode("ascii")
    except UnicodeDecodeError:
        raise MalformedTextError("properties must be ASCII") from None
    if text.endswith(";"):
        text = text[:-1]
    if not text:
        return ()
    pairs: list[tuple[str, FilterValue]] = []
    for item in text.split(";"):
        key, colon, value = item.partition(":")
        if not colon:
            raise MalformedTextError(f"property {item!r} has no ':'")
        pairs.append((key, decode_value(value)))
    return make_properties(pairs)
