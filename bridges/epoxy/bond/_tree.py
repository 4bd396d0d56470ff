"""Schema-less Bond values, and their JSON form.

Compact Binary and Fast Binary are tagged: every field carries its id and
wire type, every container its item types. So any payload can be read
without a schema into a tree (like ``protoc --decode_raw``):

* a struct is a :class:`StructValue`: its own fields, in wire order, and its
  base struct (``base``), which came first on the wire;
* a list or a set is a :class:`ListValue` (the enclosing field or container
  says which: ``BT_LIST`` or ``BT_SET``); a map is a :class:`MapValue`;
* scalars are Python ``bool``, ``int``, ``float`` and ``str`` (for both
  ``BT_STRING`` and ``BT_WSTRING``).

A list of ``BT_INT8`` is what both a ``blob`` and a ``list<int8>`` look like
on the wire. Schema-less, it is read as a blob: its items are ``bytes``. So
is a list of ``BT_UINT8`` (same layout). Items of every other list are a
tuple. The JSON form does not depend on that choice: those items are written
as integers, signed for ``BT_INT8`` (as Bond's Simple JSON writes blobs) and
unsigned for ``BT_UINT8``.

JSON (:func:`to_json`): a struct is an object whose keys are field ids as
strings, with its base struct's fields under ``"base"`` (first); lists and
sets are arrays; maps are arrays of ``[key, value]`` pairs; floats that JSON
cannot represent are the strings ``"NaN"``, ``"Infinity"``, ``"-Infinity"``.
A field id repeated within one struct level keeps its last value in JSON, as
Bond's readers keep the last value they read.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Union

from ._types import BondDataType

__all__ = ["FieldValue", "StructValue", "ListValue", "MapValue", "TreeValue", "to_json"]

_BT = BondDataType
_BYTE_TYPES = (_BT.BT_INT8, _BT.BT_UINT8)

TreeValue = Union[bool, int, float, str, "ListValue", "MapValue", "StructValue"]


@dataclass(frozen=True, slots=True)
class FieldValue:
    """One field on the wire: its id, its wire type and its value."""

    id: int
    type: BondDataType
    value: TreeValue


@dataclass(frozen=True, slots=True)
class StructValue:
    """A struct read without a schema.

    Attributes:
        fields: the fields of the most derived level, in wire order.
        base: the base struct's part, or None.
    """

    fields: tuple[FieldValue, ...] = ()
    base: StructValue | None = None

    def get(self, field_id: int) -> TreeValue | None:
        """The value of field ``field_id`` at this level (the last one if repeated), or None."""
        found: TreeValue | None = None
        for item in self.fields:
            if item.id == field_id:
                found = item.value
        return found

    @property
    def levels(self) -> list[StructValue]:
        """This struct's levels, base-most first (wire order)."""
        levels: list[StructValue] = []
        node: StructValue | None = self
        while node is not None:
            levels.append(node)
            node = node.base
        levels.reverse()
        return levels


@dataclass(frozen=True, slots=True)
class ListValue:
    """A list, set, vector, nullable or blob read without a schema.

    ``items`` is ``bytes`` when ``element_type`` is ``BT_INT8`` or
    ``BT_UINT8`` (a tuple of ints in range is converted), a tuple otherwise.
    """

    element_type: BondDataType
    items: tuple[TreeValue, ...] | bytes = ()

    def __post_init__(self) -> None:
        if self.element_type in _BYTE_TYPES:
            if not isinstance(self.items, bytes):
                signed = self.element_type == _BT.BT_INT8
                values = [int(item) for item in self.items]  # type: ignore[arg-type]
                low, high = (-128, 127) if signed else (0, 255)
                if any(not low <= value <= high for value in values):
                    raise ValueError(f"items out of range for {self.element_type.name}")
                object.__setattr__(self, "items", bytes(value & 0xFF for value in values))
        elif isinstance(self.items, bytes):
            raise ValueError(f"bytes items need BT_INT8 or BT_UINT8 elements, not {self.element_type.name}")
        elif not isinstance(self.items, tuple):
            object.__setattr__(self, "items", tuple(self.items))


@dataclass(frozen=True, slots=True)
class MapValue:
    """A map read without a schema: its key and value types and its pairs, in wire order."""

    key_type: BondDataType
    value_type: BondDataType
    items: tuple[tuple[TreeValue, TreeValue], ...] = ()


JsonValue = Union[None, bool, int, float, str, list["JsonValue"], dict[str, "JsonValue"]]


def to_json(value: TreeValue) -> JsonValue:
    """The JSON form of a tree (see the module docstring), for ``json.dumps``."""
    if isinstance(value, StructValue):
        result: dict[str, JsonValue] = {}
        if value.base is not None:
            result["base"] = to_json(value.base)
        for item in value.fields:
            result[str(item.id)] = to_json(item.value)
        return result
    if isinstance(value, ListValue):
        items = value.items
        if isinstance(items, bytes):
            if value.element_type == _BT.BT_INT8:
                return [byte - 256 if byte > 127 else byte for byte in items]
            return list(items)
        return [to_json(item) for item in items]
    if isinstance(value, MapValue):
        return [[to_json(key), to_json(item)] for key, item in value.items]
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    return value
