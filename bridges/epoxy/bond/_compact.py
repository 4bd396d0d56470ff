"""Compact Binary, versions 1 and 2 (Bond's ``compact_binary.h``).

Layout::

    field header   id <= 5:      one byte, id << 5 | type
                   id <= 0xff:   0xc0 | type, then the id byte
                   otherwise:    0xe0 | type, then the id as uint16 little-endian
    bool, int8, uint8            one byte (int8 two's complement)
    uint16/32/64                 unsigned LEB128 varint
    int16/32/64, enums           ZigZag, then varint
    float, double                IEEE 754 little-endian, 4 or 8 bytes
    string / wstring             varint count of UTF-8 bytes / UTF-16LE code units, then them
    list, set, nullable, blob    item type byte, varint count, items
    map                          key type byte, value type byte, varint count, pairs
    struct                       fields, BT_STOP_BASE (0x01) after each base level, BT_STOP (0x00)

Version 2 differs in exactly two ways. A struct (not each base level: the
whole hierarchy) is preceded by the varint length of what follows it, up to
and including its ``BT_STOP``. And a list or set of fewer than 7 items packs
``count + 1`` into the top three bits of its item type byte and omits the
count (maps are unchanged).
"""

from __future__ import annotations

import struct
from typing import Any

from ._errors import BondDecodeError, BondEncodeError, BondLimits
from ._reader import Reader
from ._types import BondDataType, Protocol
from ._writer import Writer, check_bool, check_count, check_int, check_ints

__all__ = ["CompactReader", "CompactWriter"]

_BT = BondDataType
_FLOAT = struct.Struct("<f")
_DOUBLE = struct.Struct("<d")
_UNSIGNED_BITS: dict[int, int] = {_BT.BT_UINT16: 16, _BT.BT_UINT32: 32, _BT.BT_UINT64: 64}
_SIGNED_BITS: dict[int, int] = {_BT.BT_INT16: 16, _BT.BT_INT32: 32, _BT.BT_INT64: 64}


class CompactReader(Reader):
    """Reads Compact Binary v1 or v2."""

    __slots__ = ("v2",)

    def __init__(self, data: memoryview, pos: int, limits: BondLimits, *, v2: bool) -> None:
        super().__init__(data, pos, limits)
        self.v2 = v2

    @property
    def protocol(self) -> Protocol:  # type: ignore[override]
        return Protocol.COMPACT_V2 if self.v2 else Protocol.COMPACT_V1

    def field_header(self) -> tuple[int, int]:
        data = self.data
        pos = self.pos
        raw = data[pos]
        tag = raw >> 5
        if tag < 6:
            self.pos = pos + 1
            return raw & 0x1F, tag
        if tag == 6:
            self.pos = pos + 2
            return raw & 0x1F, data[pos + 1]
        self.pos = pos + 3
        return raw & 0x1F, data[pos + 1] | data[pos + 2] << 8

    def scalar(self, wire: int) -> Any:
        if wire == _BT.BT_INT32 or wire == _BT.BT_INT64 or wire == _BT.BT_INT16:
            value = self.varint(_SIGNED_BITS[wire])
            return (value >> 1) ^ -(value & 1)
        if wire == _BT.BT_STRING:
            return self.string()
        if wire == _BT.BT_UINT32 or wire == _BT.BT_UINT64 or wire == _BT.BT_UINT16:
            return self.varint(_UNSIGNED_BITS[wire])
        pos = self.pos
        if wire == _BT.BT_BOOL:
            self.pos = pos + 1
            return self.data[pos] != 0
        if wire == _BT.BT_UINT8:
            self.pos = pos + 1
            return self.data[pos]
        if wire == _BT.BT_INT8:
            self.pos = pos + 1
            byte = self.data[pos]
            return byte - 256 if byte > 127 else byte
        if wire == _BT.BT_DOUBLE:
            self.pos = pos + 8
            return _DOUBLE.unpack_from(self.data, pos)[0]
        if wire == _BT.BT_FLOAT:
            self.pos = pos + 4
            return _FLOAT.unpack_from(self.data, pos)[0]
        if wire == _BT.BT_WSTRING:
            return self.wstring()
        raise BondDecodeError(f"wire type {wire} is not a scalar")

    def scalars(self, wire: int, count: int) -> list[Any]:
        pos = self.pos
        data = self.data
        if wire in _SIGNED_BITS or wire in _UNSIGNED_BITS:
            return self._varints(count, _SIGNED_BITS.get(wire, 0) or _UNSIGNED_BITS[wire], wire in _SIGNED_BITS)
        if wire == _BT.BT_BOOL:
            self.pos = pos + count
            return [byte != 0 for byte in data[pos : pos + count]]
        if wire == _BT.BT_UINT8:
            self.pos = pos + count
            return list(data[pos : pos + count])
        if wire == _BT.BT_INT8:
            self.pos = pos + count
            return list(struct.unpack_from(f"<{count}b", data, pos))
        if wire == _BT.BT_FLOAT or wire == _BT.BT_DOUBLE:
            size = 4 if wire == _BT.BT_FLOAT else 8
            if count * size > self.end - pos:
                raise BondDecodeError(f"{count} {_BT(wire).name} items at offset {pos} overrun the input")
            self.pos = pos + count * size
            return list(struct.unpack_from(f"<{count}{'f' if size == 4 else 'd'}", data, pos))
        return [self.scalar(wire) for _ in range(count)]

    def _varints(self, count: int, bits: int, signed: bool) -> list[int]:
        # The varint loop of ``Reader.varint``, inlined: lists of 65536
        # int16 are common enough (Bond's own compat data has them).
        data = self.data
        pos = self.pos
        limit = 1 << bits
        result: list[int] = []
        append = result.append
        for _ in range(count):
            byte = data[pos]
            pos += 1
            if byte < 0x80:
                value = byte
            else:
                value = byte & 0x7F
                shift = 7
                while True:
                    byte = data[pos]
                    pos += 1
                    value |= (byte & 0x7F) << shift
                    if byte < 0x80:
                        break
                    shift += 7
                    if shift > 63:
                        raise BondDecodeError(f"varint longer than 10 bytes before offset {pos}")
            if value >= limit:
                raise BondDecodeError(f"varint {value} before offset {pos} does not fit {bits} bits")
            append((value >> 1) ^ -(value & 1) if signed else value)
        self.pos = pos
        return result

    def skip_scalars(self, wire: int, count: int) -> None:
        if wire == _BT.BT_BOOL or wire == _BT.BT_UINT8 or wire == _BT.BT_INT8:
            size = 1
        elif wire == _BT.BT_FLOAT:
            size = 4
        elif wire == _BT.BT_DOUBLE:
            size = 8
        elif wire == _BT.BT_STRING or wire == _BT.BT_WSTRING:
            for _ in range(count):
                self.skip_string(wire)
            return
        else:  # varints, whatever their declared width
            for _ in range(count):
                self.varint(64)
            return
        if count * size > self.end - self.pos:
            raise BondDecodeError(f"{count} {_BT(wire).name} items at offset {self.pos} overrun the input")
        self.pos += count * size

    def list_header(self) -> tuple[int, int]:
        raw = self.data[self.pos]
        self.pos += 1
        if self.v2 and raw >> 5:
            return raw & 0x1F, (raw >> 5) - 1
        return raw & 0x1F, self.varint(32)

    def map_header(self) -> tuple[int, int, int]:
        pos = self.pos
        key_wire, value_wire = self.data[pos], self.data[pos + 1]
        self.pos = pos + 2
        return key_wire, value_wire, self.varint(32)

    def struct_begin(self) -> int:
        if not self.v2:
            return -1
        length = self.varint(32)
        if length > self.end - self.pos:
            raise BondDecodeError(f"struct of {length} bytes at offset {self.pos}, {self.end - self.pos} left")
        return self.pos + length


class CompactWriter(Writer):
    """Writes Compact Binary v1 or v2."""

    __slots__ = ("v2",)

    def __init__(self, *, v2: bool) -> None:
        super().__init__()
        self.v2 = v2

    @property
    def protocol(self) -> Protocol:  # type: ignore[override]
        return Protocol.COMPACT_V2 if self.v2 else Protocol.COMPACT_V1

    def field_begin(self, wire: int, field_id: int) -> None:
        out = self.out
        if field_id <= 5:
            out.append(wire | field_id << 5)
        elif field_id <= 0xFF:
            out.append(wire | 0xC0)
            out.append(field_id)
        else:
            out.append(wire | 0xE0)
            out.append(field_id & 0xFF)
            out.append(field_id >> 8)

    def scalar(self, wire: int, value: Any) -> None:
        if wire in _SIGNED_BITS:
            value = check_int(wire, value)
            self.varint(value << 1 if value >= 0 else ((-value) << 1) - 1)
        elif wire in _UNSIGNED_BITS:
            self.varint(check_int(wire, value))
        elif wire == _BT.BT_STRING or wire == _BT.BT_WSTRING:
            self.string(wire, value)
        elif wire == _BT.BT_BOOL:
            self.out.append(check_bool(value))
        elif wire == _BT.BT_UINT8 or wire == _BT.BT_INT8:
            self.out.append(check_int(wire, value) & 0xFF)
        elif wire == _BT.BT_DOUBLE:
            self.out += _DOUBLE.pack(value)
        elif wire == _BT.BT_FLOAT:
            self.out += _FLOAT.pack(value)
        else:
            raise BondEncodeError(f"wire type {wire} is not a scalar")

    def scalars(self, wire: int, values: list[Any]) -> None:
        if wire in _SIGNED_BITS or wire in _UNSIGNED_BITS:
            check_ints(wire, values)
            out = self.out
            append = out.append
            signed = wire in _SIGNED_BITS
            for value in values:
                if signed:
                    value = value << 1 if value >= 0 else ((-value) << 1) - 1
                while value >= 0x80:
                    append((value & 0x7F) | 0x80)
                    value >>= 7
                append(value)
        elif wire == _BT.BT_FLOAT:
            self.out += struct.pack(f"<{len(values)}f", *values)
        elif wire == _BT.BT_DOUBLE:
            self.out += struct.pack(f"<{len(values)}d", *values)
        elif wire == _BT.BT_INT8:
            self.out += struct.pack(f"<{len(values)}b", *values)
        elif wire == _BT.BT_UINT8:
            self.out += struct.pack(f"<{len(values)}B", *values)
        else:
            for value in values:
                self.scalar(wire, value)

    def list_begin(self, item_wire: int, count: int) -> None:
        check_count(count)
        if self.v2 and count < 7:
            self.out.append(item_wire | (count + 1) << 5)
        else:
            self.out.append(item_wire)
            self.varint(count)

    def map_begin(self, key_wire: int, value_wire: int, count: int) -> None:
        check_count(count)
        self.out.append(key_wire)
        self.out.append(value_wire)
        self.varint(count)

    def struct_begin(self) -> bytearray | None:
        if not self.v2:
            return None
        saved = self.out
        self.out = bytearray()
        return saved

    def struct_end(self, saved: bytearray | None) -> None:
        if saved is None:
            return
        body = self.out
        self.out = saved
        self.varint(len(body))
        saved += body

