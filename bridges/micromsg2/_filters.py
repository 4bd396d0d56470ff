"""Subscription filters: parsing and evaluation, pure functions of their input.

A filter is conditions ``key OP VALUE`` separated by ``;`` (no spaces; a
trailing ``;`` is accepted), all of which must hold. ``key`` is a property
name (FIELD) and VALUE a FILTER_VALUE (``N5``, ``D1413198000.0``,
``THello``). The operators, by the type of VALUE:

=====  ====================  ===============================
OP     number, date          text (case-sensitive)
=====  ====================  ===============================
``=``  equal                 equal
``!=`` not equal             not equal
``<``  less than             starts with
``<=`` less than or equal    (not for text: a FilterError)
``>``  greater than          ends with
``>=`` greater or equal      (not for text: a FilterError)
``~``  (not for numbers)     does not contain
``&``  (not for numbers)     contains
=====  ====================  ===============================

A message without the key does not match, whatever the operator (so
``!=`` too); nor does one whose value has another type than the
condition's (a number is never compared with a date or a text).
"""

from __future__ import annotations

import enum
import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from decimal import Decimal

from ._errors import FilterError, FilterTooLargeError, MalformedTextError
from ._properties import FilterValue, Properties, UnixTime, decode_value, encode_value
from ._text import is_field

__all__ = ["Operator", "Condition", "Filter", "parse_filter"]


class Operator(enum.Enum):
    """The filtering operators of the spec's table, by their text."""

    EQUAL = "="
    NOT_EQUAL = "!="
    LESS = "<"
    LESS_OR_EQUAL = "<="
    GREATER = ">"
    GREATER_OR_EQUAL = ">="
    NOT_CONTAINS = "~"
    CONTAINS = "&"


_O = Operator
# Two-character operators first, so that `<=` is not read as `<` then `=N5`.
_PARSE_ORDER = (_O.LESS_OR_EQUAL, _O.GREATER_OR_EQUAL, _O.NOT_EQUAL, _O.EQUAL, _O.LESS, _O.GREATER,
                _O.NOT_CONTAINS, _O.CONTAINS)  # fmt: skip
# (Numbers are Python ints compared as they are: comparing two ints is what
# comparing their Decimals was, at a fifth of the cost per condition.)
_ORDERED: dict[Operator, Callable[[Decimal | int, Decimal | int], bool]] = {
    _O.EQUAL: operator.eq,
    _O.NOT_EQUAL: operator.ne,
    _O.LESS: operator.lt,
    _O.LESS_OR_EQUAL: operator.le,
    _O.GREATER: operator.gt,
    _O.GREATER_OR_EQUAL: operator.ge,
}
_TEXT: dict[Operator, Callable[[str, str], bool]] = {
    _O.EQUAL: operator.eq,
    _O.NOT_EQUAL: operator.ne,
    _O.LESS: str.startswith,
    _O.GREATER: str.endswith,
    _O.NOT_CONTAINS: lambda text, part: part not in text,
    _O.CONTAINS: operator.contains,
}


@dataclass(frozen=True, slots=True, kw_only=True)
class Condition:
    """One ``key OP VALUE`` condition.

    Raises:
        FilterError: at construction, for a key that is not a FIELD or an
            operator the value's type does not have.
    """

    key: str
    operator: Operator
    value: FilterValue

    def __post_init__(self) -> None:
        if not is_field(self.key):
            raise FilterError(f"filter key {self.key!r} is not a FIELD")
        try:
            encode_value(self.value)
        except MalformedTextError as exc:
            raise FilterError(exc.message) from None
        table = _TEXT if isinstance(self.value, str) else _ORDERED
        if self.operator not in table:
            kind = "text" if isinstance(self.value, str) else "a number or date"
            raise FilterError(f"operator {self.operator.value!r} cannot compare {kind}")

    def matches(self, properties: Mapping[str, FilterValue]) -> bool:
        """Whether a message with these properties satisfies this condition."""
        if self.key not in properties:
            return False
        actual = properties[self.key]
        if isinstance(self.value, str):
            return isinstance(actual, str) and _TEXT[self.operator](actual, self.value)
        if isinstance(self.value, UnixTime):
            return isinstance(actual, UnixTime) and _ORDERED[self.operator](actual.seconds, self.value.seconds)
        if isinstance(actual, bool) or not isinstance(actual, int) or not isinstance(self.value, int):
            return False
        return _ORDERED[self.operator](actual, self.value)

    def __str__(self) -> str:
        return f"{self.key}{self.operator.value}{encode_value(self.value)}"


@dataclass(frozen=True, slots=True, kw_only=True)
class Filter:
    """Conditions that must all hold; the text form is :func:`str`."""

    conditions: tuple[Condition, ...]

    def __post_init__(self) -> None:
        if not self.conditions:
            raise FilterError("a filter has at least one condition")

    def matches(self, properties: Properties | Mapping[str, FilterValue]) -> bool:
        """Whether a message with these properties passes the filter."""
        table = properties if isinstance(properties, Mapping) else dict(properties)
        return all(condition.matches(table) for condition in self.conditions)

    def __str__(self) -> str:
        return ";".join(str(condition) for condition in self.conditions)


def _parse_condition(text: str) -> Condition:
    end = 0
    while end < len(text) and (text[end].islower() or text[end].isdigit() or text[end] == "-") and text[end].isascii():
        end += 1
    key, rest = text[:end], text[end:]
    for candidate in _PARSE_ORDER:
        if rest.startswith(candidate.value):
            try:
                value = decode_value(rest[len(candidate.value) :])
            except MalformedTextError as exc:
                raise FilterError(f"condition {text!r}: {exc.message}") from None
            return Condition(key=key, operator=candidate, value=value)
    raise FilterError(f"condition {text!r} is not 'key OP VALUE'")


def parse_filter(text: str, *, max_length: int | None = None, max_conditions: int | None = None) -> Filter:
    """Parse a filter's text.

    Args:
        max_length: refuse a text longer than this many characters.
        max_conditions: refuse a filter of more conditions than this.

    Both are checked before any condition is parsed, so refusing a filter
    costs a count of its ``;``, whatever its size (a connection passes its
    ``Limits``: a peer's filter is parsed within them).

    Raises:
        FilterTooLargeError: over ``max_length`` or ``max_conditions``.
        FilterError: an empty filter or a condition that does not parse.
    """
    if max_length is not None and len(text) > max_length:
        raise FilterTooLargeError(f"a filter is at most {max_length} characters; this one has {len(text)}")
    if text.endswith(";"):
        text = text[:-1]
    if not text:
        raise FilterError("a filter has at least one condition")
    if max_conditions is not None:
        count = text.count(";") + 1
        if count > max_conditions:
            raise FilterTooLargeError(f"a filter has at most {max_conditions} conditions; this one has {count}")
    return Filter(conditions=tuple(_parse_condition(item) for item in text.split(";")))
