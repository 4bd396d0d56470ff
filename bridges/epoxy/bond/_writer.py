"""What Bond's binary writers share: structs, containers, trees, bonded.

The protocol subclasses (``_compact``, ``_fast``) write field headers,
scalars, container headers and whole lists of scalars; this class writes
structs from a schema (:meth:`Writer.write_struct`, omitting optional
fields that hold their default) and from a tree (:meth:`Writer.write_tree_struct`,
writing exactly what the tree holds, in its order).

A :class:`~._schema.Bonded` read from the same protocol is copied as it is;
from another protocol, it is transcoded through a tree, which keeps every
field, known or not, in wire order (what Bond's transcoding does).

Values are checked as they are written: an int out of its type's range, a
``str`` where bytes are expected, a struct of the wrong class are
:class:`~._errors.BondEncodeError` (``_api`` also turns the ``struct.error``
of a bulk ``struct.pack`` into one).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from ._errors import BondEncodeError
from ._schema import (
    OMIT_EMPTY,
    OMIT_EQUAL,
    OMIT_NOTHING,
    OMIT_NULL,
    Bonded,
    Modifier,
    Struct,
    check_struct_value,
)
from ._tree import ListValue, MapValue, StructValue, TreeValue
from ._types import (
    BLOB_KIND,
    BONDED,
    ENUM,
    INT_BOUNDS,
    LIST,
    MAP,
    NULLABLE,
    SCALAR,
    SET,
    STRUCT,
    BondDataType,
    BondType,
    MapType,
    Protocol,
    StructType,
)

__all__ = ["Writer", "check_bool", "check_count", "check_int", "check_ints", "encode_utf8", "encode_utf16"]

_BT = BondDataType
_STOP, _STOP_BASE = 0, 1
_OPTIONAL = Modifier.OPTIONAL


def check_int(wire: int, value: Any) -> int:
    if not isinstance(value, int):
        raise BondEncodeError(f"{_BT(wire).name} value must be an int, got {type(value).__name__}")
    low, high = INT_BOUNDS[wire]
    if not low <= value <= high:
        raise BondEncodeError(f"{value} is out of range for {_BT(wire).name}")
    return value


def check_bool(value: Any) -> int:
    if not isinstance(value, bool):
        raise BondEncodeError(f"bool value must be a bool, got {type(value).__name__}")
    return 1 if value else 0


def check_count(count: int) -> None:
    if count >> 32:
        raise BondEncodeError(f"a container of {count} items does not fit a 32-bit count")


def check_ints(wire: int, values: list[Any]) -> None:
    if values:
        low, high = INT_BOUNDS[wire]
        try:
            if min(values) < low or max(values) > high:
                raise BondEncodeError(f"a value is out of range for {_BT(wire).name}")
        except TypeError:
            raise BondEncodeError(f"{_BT(wire).name} values must be ints") from None
        if not all(isinstance(value, int) for value in values):
            raise BondEncodeError(f"{_BT(wire).name} values must be ints")


def encode_utf8(value: Any) -> bytes:
    if not isinstance(value, str):
        raise BondEncodeError(f"string value must be a str, got {type(value).__name__}")
    try:
        return value.encode("utf-8")
    except UnicodeEncodeError:
        raise BondEncodeError("string value is not encodable as UTF-8 (lone surrogate)") from None


def encode_utf16(value: Any) -> bytes:
    if not isinstance(value, str):
        raise BondEncodeError(f"wstring value must be a str, got {type(value).__name__}")
    return value.encode("utf-16-le", "surrogatepass")


def _utf16_key(value: str) -> bytes:
    # std::set<std::wstring> (UTF-16 on Windows) orders by code unit.
    return value.encode("utf-16-be", "surrogatepass")


class Writer:
    """Base of the protocol writers; see the module docstring."""

    __slots__ = ("out", "depth")
    protocol: Protocol

    def __init__(self) -> None:
        self.out = bytearray()
        self.depth = 0

    # ---- primitives, supplied by the protocols ---------------------------

    def field_begin(self, wire: int, field_id: int) -> None:
        raise NotImplementedError

    def scalar(self, wire: int, value: Any) -> None:
        raise NotImplementedError

    def scalars(self, wire: int, values: list[Any]) -> None:
        raise NotImplementedError

    def list_begin(self, item_wire: int, count: int) -> None:
        raise NotImplementedError

    def map_begin(self, key_wire: int, value_wire: int, count: int) -> None:
        raise NotImplementedError

    def struct_begin(self) -> bytearray | None:
        """Start a struct; Compact v2 diverts output to measure its length."""
        return None

    def struct_end(self, saved: bytearray | None) -> None:
        pass

    def varint(self, value: int) -> None:
        out = self.out
        while value >= 0x80:
            out.append((value & 0x7F) | 0x80)
            value >>= 7
        out.append(value)

    def string(self, wire: int, value: Any) -> None:
        if wire == _BT.BT_STRING:
            raw = encode_utf8(value)
            self.varint(len(raw))
        else:
            raw = encode_utf16(value)
            self.varint(len(raw) // 2)
        self.out += raw

    def enter(self) -> None:
        # Only a cyclic object graph can nest this deep; fail clearly rather
        # than with RecursionError.
        self.depth += 1
        if self.depth > 200:
            raise BondEncodeError("values nest deeper than 200 levels (a cycle?)")

    # ---- with a schema --------------------------------------------------

    def write_struct(self, value: Any, struct_class: type[Struct]) -> None:
        check_struct_value(value, struct_class)
        self.enter()
        saved = self.struct_begin()
        levels = struct_class.__bond_levels__
        last = len(levels) - 1
        for index, level in enumerate(levels):
            for info in level.fields:
                item = getattr(value, info.name)
                if _omitted(info, item, struct_class):
                    continue
                field_type = info.type
                self.field_begin(field_type.wire, info.id)
                try:
                    self.write_value(field_type, item)
                except BondEncodeError as exc:
                    raise _in_field(exc, struct_class, info) from None
            self.out.append(_STOP if index == last else _STOP_BASE)
        self.struct_end(saved)
        self.depth -= 1

    def write_struct_steps(self, value: Any, struct_class: type[Struct], items_per_step: int) -> Iterator[None]:
        """Write as :meth:`write_struct` does, yielding between steps.

        The struct's own lists and sets (not those nested in their items)
        are written ``items_per_step`` items at a time, with a yield after
        each chunk: a response of half a million elements is hundreds of
        milliseconds of writing, which must not be one step of whoever runs
        it. The bytes are those of :meth:`write_struct`: the header is
        written for the whole count, then each chunk's items as
        :meth:`write_items` writes them all (a list's encoding is its
        items' encodings one after the other, even the bulk ones).
        """
        check_struct_value(value, struct_class)
        self.enter()
        saved = self.struct_begin()
        levels = struct_class.__bond_levels__
        last = len(levels) - 1
        for index, level in enumerate(levels):
            for info in level.fields:
                item = getattr(value, info.name)
                if _omitted(info, item, struct_class):
                    continue
                field_type = info.type
                self.field_begin(field_type.wire, info.id)
                try:
                    if field_type.kind in (LIST, SET) and isinstance(item, (list, tuple, set, frozenset)) and len(item) > items_per_step:
                        yield from self._write_items_steps(field_type, item, items_per_step)
                    else:
                        self.write_value(field_type, item)
                except BondEncodeError as exc:
                    raise _in_field(exc, struct_class, info) from None
            self.out.append(_STOP if index == last else _STOP_BASE)
        self.struct_end(saved)
        self.depth -= 1

    def _write_items_steps(self, field_type: BondType, value: Any, items_per_step: int) -> Iterator[None]:
        # write_value's list and set branch, a chunk of items at a time.
        element = field_type.element  # type: ignore[attr-defined]
        if field_type.kind == SET:
            items = _sorted_set(value, element.wire)
        else:
            if not isinstance(value, (list, tuple)):
                raise BondEncodeError(f"{field_type.name} value must be a list, got {type(value).__name__}")
            items = list(value)
        self.enter()
        self.list_begin(element.wire, len(items))
        for start in range(0, len(items), items_per_step):
            self.write_items(element, items[start : start + items_per_step])
            yield
        self.depth -= 1

    def write_value(self, field_type: BondType, value: Any) -> None:
        kind = field_type.kind
        if kind == SCALAR:
            self.scalar(field_type.wire, value)
        elif kind == ENUM:
            self.scalar(_BT.BT_INT32, value if type(value) is int else _as_int(value))
        elif kind == STRUCT:
            self.write_struct(value, field_type.struct_class)  # type: ignore[attr-defined]
        elif kind == BONDED:
            assert isinstance(field_type, StructType)
            self.write_bonded(value, field_type)
        elif kind == MAP:
            assert isinstance(field_type, MapType)
            self.enter()
            if not isinstance(value, dict):
                raise BondEncodeError(f"{field_type.name} value must be a dict, got {type(value).__name__}")
            self.map_begin(field_type.key.wire, field_type.value.wire, len(value))
            key_type, value_type = field_type.key, field_type.value
            for key, item in value.items():
                self.write_value(key_type, key)
                self.write_value(value_type, item)
            self.depth -= 1
        elif kind == BLOB_KIND:
            self.write_blob(value)
        elif kind == NULLABLE:
            element = field_type.element  # type: ignore[attr-defined]
            if value is None:
                self.list_begin(element.wire, 0)
            else:
                self.enter()
                self.list_begin(element.wire, 1)
                self.write_value(element, value)
                self.depth -= 1
        else:
            element = field_type.element  # type: ignore[attr-defined]
            if kind == SET:
                items = _sorted_set(value, element.wire)
            else:
                assert kind == LIST
                if not isinstance(value, (list, tuple)):
                    raise BondEncodeError(f"{field_type.name} value must be a list, got {type(value).__name__}")
                items = list(value)
            self.enter()
            self.list_begin(element.wire, len(items))
            self.write_items(element, items)
            self.depth -= 1

    def write_items(self, item_type: BondType, items: list[Any]) -> None:
        if not items:
            return
        kind = item_type.kind
        if kind == SCALAR:
            self.scalars(item_type.wire, items)
        elif kind == ENUM:
            self.scalars(_BT.BT_INT32, [_as_int(item) for item in items])
        elif kind == STRUCT:
            struct_class = item_type.struct_class  # type: ignore[attr-defined]
            for item in items:
                self.write_struct(item, struct_class)
        elif kind == BLOB_KIND:
            write_blob = self.write_blob
            for item in items:
                write_blob(item)
        else:
            for item in items:
                self.write_value(item_type, item)

    def write_blob(self, value: Any) -> None:
        """One blob as a list of int8: for a blob field and each item of a ``list<blob>`` alike."""
        if not isinstance(value, (bytes, bytearray, memoryview)):
            raise BondEncodeError(f"blob value must be bytes, got {type(value).__name__}")
        raw = bytes(value)
        self.list_begin(_BT.BT_INT8, len(raw))
        self.out += raw

    def write_bonded(self, value: Any, field_type: StructType) -> None:
        if not isinstance(value, Bonded):
            raise BondEncodeError(f"{field_type.name} value must be a Bonded, got {type(value).__name__}")
        if value.data is None:
            self.write_struct(value.value, type(value.value))
        elif value.protocol is self.protocol:
            self.out += value.data
        else:
            from ._api import read_tree

            assert value.protocol is not None
            self.write_tree_struct(read_tree(value.data, value.protocol))

    # ---- from a tree -------------------------------------------------------

    def write_tree_struct(self, value: StructValue) -> None:
        if not isinstance(value, StructValue):
            raise BondEncodeError(f"expected a StructValue, got {type(value).__name__}")
        self.enter()
        saved = self.struct_begin()
        levels = value.levels
        last = len(levels) - 1
        for index, level in enumerate(levels):
            for item in level.fields:
                self.field_begin(item.type, item.id)
                self.write_tree_value(item.type, item.value)
            self.out.append(_STOP if index == last else _STOP_BASE)
        self.struct_end(saved)
        self.depth -= 1

    def write_tree_value(self, wire: int, value: TreeValue) -> None:
        if wire == _BT.BT_STRUCT:
            self.write_tree_struct(value)  # type: ignore[arg-type]
        elif wire == _BT.BT_LIST or wire == _BT.BT_SET:
            if not isinstance(value, ListValue):
                raise BondEncodeError(f"{_BT(wire).name} value must be a ListValue, got {type(value).__name__}")
            self.enter()
            items = value.items
            self.list_begin(value.element_type, len(items))
            if isinstance(items, bytes):
                self.out += items
            elif value.element_type in _SCALAR_TREE_WIRES:
                if items:
                    self.scalars(value.element_type, list(items))
            else:
                for item in items:
                    self.write_tree_value(value.element_type, item)
            self.depth -= 1
        elif wire == _BT.BT_MAP:
            if not isinstance(value, MapValue):
                raise BondEncodeError(f"BT_MAP value must be a MapValue, got {type(value).__name__}")
            self.enter()
            self.map_begin(value.key_type, value.value_type, len(value.items))
            for key, item in value.items:
                self.write_tree_value(value.key_type, key)
                self.write_tree_value(value.value_type, item)
            self.depth -= 1
        elif wire in _SCALAR_TREE_WIRES:
            self.scalar(wire, value)
        else:
            raise BondEncodeError(f"cannot write a value of wire type {wire}")


_SCALAR_TREE_WIRES = frozenset(
    {
        _BT.BT_BOOL,
        _BT.BT_UINT8,
        _BT.BT_UINT16,
        _BT.BT_UINT32,
        _BT.BT_UINT64,
        _BT.BT_FLOAT,
        _BT.BT_DOUBLE,
        _BT.BT_STRING,
        _BT.BT_INT8,
        _BT.BT_INT16,
        _BT.BT_INT32,
        _BT.BT_INT64,
        _BT.BT_WSTRING,
    }
)


def _as_int(value: Any) -> int:
    if not isinstance(value, int):
        raise BondEncodeError(f"enum value must be an int, got {type(value).__name__}")
    return int(value)


def _sorted_set(value: Any, wire: int) -> list[Any]:
    if not isinstance(value, (set, frozenset, list, tuple)):
        raise BondEncodeError(f"set value must be a set, got {type(value).__name__}")
    items: Iterable[Any] = set(value) if isinstance(value, (list, tuple)) else value
    try:
        if wire == _BT.BT_WSTRING:
            return sorted(items, key=_utf16_key)
        return sorted(items)
    except TypeError:
        raise BondEncodeError("set items are not comparable (mixed types?)") from None


def _omitted(info: Any, item: Any, struct_class: type[Struct]) -> bool:
    # Bond's rules for a field left out, stated once for write_struct and
    # write_struct_steps (the two must write the same bytes): an optional
    # field holding its default, nothing or None as its omit mode says.
    omit = info.omit
    if omit == OMIT_NOTHING and item is None:
        if info.modifier is _OPTIONAL:
            return True
        raise BondEncodeError(f"{struct_class.__name__}.{info.name} is required but holds nothing")
    return info.modifier is _OPTIONAL and (
        (omit == OMIT_EQUAL and item == info.default)
        or (omit == OMIT_EMPTY and not item)
        or (omit == OMIT_NULL and item is None)
    )


def _in_field(exc: BondEncodeError, struct_class: type[Struct], info: Any) -> BondEncodeError:
    # The error of a field's value, named after the innermost struct field.
    if str(exc).startswith(f"{struct_class.__name__}."):
        return exc
    return BondEncodeError(f"{struct_class.__name__}.{info.name}: {exc}")
