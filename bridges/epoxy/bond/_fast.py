"""Fast Binary, version 1 (Bond's ``fast_binary.h``).

Layout::

    field header   type byte, then the id as uint16 little-endian
                   (BT_STOP and BT_STOP_BASE are the type byte alone)
    bool, int8, uint8            one byte
    other integers, enums        fixed width, little-endian (enums: int32)
    float, double                IEEE 754 little-endian
    string / wstring             varint count of UTF-8 bytes / UTF-16LE code units, then them
    list, set, nullable, blob    item type byte, varint count, items
    map                          key type byte, value type byte, varint count, pairs
    struct                       fields, BT_STOP_BASE after each base level, BT_STOP

Every number has a fixed width, so a list of numbers is one
``struct.unpack_from`` (or ``struct.pack``) call.
"""

from __future__ import annotations

import struct
from typing import Any

from ._errors import BondDecodeError, BondEncodeError
from ._reader import Reader
from ._types import BondDataType, Protocol
from ._writer import Writer, check_bool, check_count, check_int, check_ints

__all__ = ["FastReader", "FastWriter"]

_BT = BondDataType
# struct format code and size of each fixed-width wire type.
_FIXED: dict[int, tuple[str, int]] = {
    _BT.BT_BOOL: ("?", 1),
    _BT.BT_INT8: ("b", 1),
    _BT.BT_UINT8: ("B", 1),
    _BT.BT_INT16: ("h", 2),
    _BT.BT_UINT16: ("H", 2),
    _BT.BT_INT32: ("i", 4),
    _BT.BT_UINT32: ("I", 4),
    _BT.BT_INT64: ("q", 8),
    _BT.BT_UINT64: ("Q", 8),
    _BT.BT_FLOAT: ("f", 4),
    _BT.BT_DOUBLE: ("d", 8),
}
_STRUCTS = {wire: struct.Struct("<" + code) for wire, (code, _) in _FIXED.items()}
_STRINGS = (_BT.BT_STRING, _BT.BT_WSTRING)
_REALS = (_BT.BT_FLOAT, _BT.BT_DOUBLE)


class FastReader(Reader):
    """Reads Fast Binary v1."""

    jumped_wires = frozenset(_FIXED)  # every number is fixed-size in Fast

    __slots__ = ()
    protocol = Protocol.FAST

    def field_header(self) -> tuple[int, int]:
        data = self.data
        pos = self.pos
        wire = data[pos]
        if wire <= 1:
            self.pos = pos + 1
            return wire, 0
        self.pos = pos + 3
        return wire, data[pos + 1] | data[pos + 2] << 8

    def scalar(self, wire: int) -> Any:
        packer = _STRUCTS.get(wire)
        if packer is not None:
            pos = self.pos
            self.pos = pos + packer.size
            value = packer.unpack_from(self.data, pos)[0]
            if wire == _BT.BT_BOOL:
                # Any nonzero byte is true (C++ reads the byte into a bool);
                # unpack's "?" does the same.
                return bool(value)
            return value
        if wire == _BT.BT_STRING:
            return self.string()
        if wire == _BT.BT_WSTRING:
            return self.wstring()
        raise BondDecodeError(f"wire type {wire} is not a scalar")

    def scalars(self, wire: int, count: int) -> list[Any]:
        fixed = _FIXED.get(wire)
        if fixed is None:
            return [self.scalar(wire) for _ in range(count)]
        code, size = fixed
        pos = self.pos
        if count * size > self.end - pos:
            raise BondDecodeError(f"{count} {_BT(wire).name} items at offset {pos} overrun the input")
        self.pos = pos + count * size
        if wire == _BT.BT_UINT8:
            return list(self.data[pos : pos + count])
        return list(struct.unpack_from(f"<{count}{code}", self.data, pos))

    def skip_scalars(self, wire: int, count: int) -> None:
        fixed = _FIXED.get(wire)
        if fixed is None:
            if wire not in _STRINGS:
                raise BondDecodeError(f"wire type {wire} is not a scalar")
            for _ in range(count):
                self.skip_string(wire)
            return
        if count * fixed[1] > self.end - self.pos:
            raise BondDecodeError(f"{count} {_BT(wire).name} items at offset {self.pos} overrun the input")
        self.pos += count * fixed[1]

    def list_header(self) -> tuple[int, int]:
        wire = self.data[self.pos]
        self.pos += 1
        return wire, self.varint(32)

    def map_header(self) -> tuple[int, int, int]:
        pos = self.pos
        key_wire, value_wire = self.data[pos], self.data[pos + 1]
        self.pos = pos + 2
        return key_wire, value_wire, self.varint(32)


class FastWriter(Writer):
    """Writes Fast Binary v1."""

    __slots__ = ()
    protocol = Protocol.FAST

    def field_begin(self, wire: int, field_id: int) -> None:
        out = self.out
        out.append(wire)
        out.append(field_id & 0xFF)
        out.append(field_id >> 8)

    def scalar(self, wire: int, value: Any) -> None:
        packer = _STRUCTS.get(wire)
        if packer is not None:
            if wire == _BT.BT_BOOL:
                check_bool(value)
            elif wire not in _REALS:
                check_int(wire, value)
            self.out += packer.pack(value)
        elif wire in _STRINGS:
            self.string(wire, value)
        else:
            raise BondEncodeError(f"wire type {wire} is not a scalar")

    def scalars(self, wire: int, values: list[Any]) -> None:
        fixed = _FIXED.get(wire)
        if fixed is None:
            for value in values:
                self.scalar(wire, value)
            return
        if wire == _BT.BT_BOOL:
            for value in values:
                check_bool(value)
        elif wire not in _REALS:
            check_ints(wire, values)
        self.out += struct.pack(f"<{len(values)}{fixed[0]}", *values)

    def list_begin(self, item_wire: int, count: int) -> None:
        check_count(count)
        self.out.append(item_wire)
        self.varint(count)

    def map_begin(self, key_wire: int, value_wire: int, count: int) -> None:
        check_count(count)
        self.out.append(key_wire)
        self.out.append(value_wire)
        self.varint(count)
