"""What Bond's binary readers share: structs, containers, skipping, trees.

Theory of operation
-------------------
A reader walks a ``memoryview`` with an integer offset (``pos``); nothing
is copied except the values it returns. The protocol subclasses
(``_compact``, ``_fast``) supply the primitives that differ: field headers,
scalars, container headers, the struct length prefix of Compact v2, and
bulk reads of scalar lists (one ``struct.unpack_from`` for a whole list of
fixed-size numbers). This class builds everything else on them, three ways:

* with a schema (:meth:`Reader.read_struct`): fields are matched by id
  within each level of the class hierarchy; unknown fields are skipped;
  missing fields get their defaults; missing ``required`` fields fail; a
  wire type the declared type cannot read from fails;
* without a schema (:meth:`Reader.read_tree_struct`): the tagged wire gives
  a :class:`~._tree.StructValue`;
* skipping (:meth:`Reader.skip`), for unknown fields and to find the extent
  of a ``bonded<T>``.

Hierarchy: the wire holds one segment per level, base-most first, each ended
by ``BT_STOP_BASE`` except the last (``BT_STOP``). Segments beyond the
reader's hierarchy (data of a derived class read as its base) are skipped;
levels the wire lacks (base data read as a derived class) keep defaults.

Safety: every count or length is checked against the bytes that remain
before anything is allocated (each container item takes at least one
byte), and against :class:`~._errors.BondLimits`; nesting is counted
against ``max_depth``. Skipping is held to the same container limit as
decoding, and to a budget of its own for the whole input
(``max_skipped_items``, kept in ``skip_budget``): skipped values make
nothing, so the bytes they are made of were the only bound on the time
spent walking them (seconds for one framelet). Each skipped field is
charged one, and each skipped container its count as soon as its header
is read, before a single item is walked: an input over the budget fails
at once, however long it is. Reads past the end of the buffer raise ``IndexError``
or ``struct.error`` on the hot path; ``_api`` turns them into
``BondDecodeError`` at its single entry point.
"""

from __future__ import annotations

from typing import Any

from ._errors import BondDecodeError, BondLimitError, BondLimits, BondRequiredFieldError
from ._schema import Bonded, Struct
from ._tree import FieldValue, ListValue, MapValue, StructValue, TreeValue
from ._types import (
    BLOB_KIND,
    BONDED,
    ENUM,
    LIST,
    MAP,
    NULLABLE,
    SCALAR,
    SET,
    STRUCT,
    BondDataType,
    BondType,
    EnumType,
    MapType,
    Protocol,
    StructType,
)

__all__ = ["Reader", "SCALAR_WIRES", "VALUE_WIRES", "wire_name"]

_BT = BondDataType
STOP, STOP_BASE = 0, 1
_BYTE_WIRES = frozenset({_BT.BT_INT8, _BT.BT_UINT8})
# Lists of these are skipped in one jump in every protocol (fixed sizes in
# each); a protocol with more fixed-size wires (Fast) adds them.
_FIXED_SIZE_WIRES = frozenset({_BT.BT_BOOL, _BT.BT_INT8, _BT.BT_UINT8, _BT.BT_FLOAT, _BT.BT_DOUBLE})
#: Wire types that are read by ``Reader.scalar``.
SCALAR_WIRES = frozenset(
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
#: Every wire type a value can have.
VALUE_WIRES = SCALAR_WIRES | {_BT.BT_STRUCT, _BT.BT_LIST, _BT.BT_SET, _BT.BT_MAP}


def wire_name(wire: int) -> str:
    try:
        return BondDataType(wire).name
    except ValueError:
        return f"wire type {wire}"


class Reader:
    """Base of the protocol readers; see the module docstring."""

    __slots__ = ("data", "pos", "end", "limits", "depth", "skip_budget")
    protocol: Protocol
    #: Wire types whose lists ``skip_scalars`` jumps over in one step: not
    #: charged to the skip budget, whatever their count.
    jumped_wires: frozenset[int] = _FIXED_SIZE_WIRES

    def __init__(self, data: memoryview, pos: int, limits: BondLimits) -> None:
        self.data = data
        self.pos = pos
        self.end = len(data)
        self.limits = limits
        self.depth = 0
        self.skip_budget = limits.max_skipped_items  # what may still be skipped

    # ---- primitives, supplied by the protocols ---------------------------

    def field_header(self) -> tuple[int, int]:
        """(wire type, field id); (BT_STOP or BT_STOP_BASE, 0) at a level's end."""
        raise NotImplementedError

    def scalar(self, wire: int) -> Any:
        """One scalar of a wire type in ``SCALAR_WIRES``."""
        raise NotImplementedError

    def scalars(self, wire: int, count: int) -> list[Any]:
        """``count`` scalars of one wire type (``count`` already checked)."""
        raise NotImplementedError

    def list_header(self) -> tuple[int, int]:
        """(item wire type, count) of a list or set; count not yet checked."""
        raise NotImplementedError

    def map_header(self) -> tuple[int, int, int]:
        """(key wire type, value wire type, count); count not yet checked."""
        raise NotImplementedError

    def struct_begin(self) -> int:
        """Start a struct; return where it must end (Compact v2), or -1."""
        return -1

    def skip_scalars(self, wire: int, count: int) -> None:
        """Skip ``count`` scalars of one wire type."""
        raise NotImplementedError

    # ---- shared helpers -----------------------------------------------

    def varint(self, bits: int = 64) -> int:
        """An unsigned LEB128 varint of at most ``bits`` bits."""
        data = self.data
        pos = self.pos
        byte = data[pos]
        if byte < 0x80:
            self.pos = pos + 1
            return byte
        value = byte & 0x7F
        shift = 7
        while True:
            pos += 1
            byte = data[pos]
            value |= (byte & 0x7F) << shift
            if byte < 0x80:
                break
            shift += 7
            if shift > 63:
                raise BondDecodeError(f"varint longer than 10 bytes at offset {self.pos}")
        if value >> bits:
            raise BondDecodeError(f"varint {value} at offset {self.pos} does not fit {bits} bits")
        self.pos = pos + 1
        return value

    def string(self) -> str:
        count = self.varint(32)
        pos = self.pos
        if count > self.end - pos:
            raise BondDecodeError(f"string of {count} bytes at offset {pos}, {self.end - pos} left")
        self.pos = pos + count
        try:
            return str(self.data[pos : pos + count], "utf-8")
        except UnicodeDecodeError as exc:
            raise BondDecodeError(f"string at offset {pos} is not UTF-8: {exc.reason}") from None

    def wstring(self) -> str:
        count = self.varint(32)
        pos = self.pos
        if 2 * count > self.end - pos:
            raise BondDecodeError(f"wstring of {count} code units at offset {pos}, {self.end - pos} bytes left")
        self.pos = pos + 2 * count
        # Lone surrogates are valid UTF-16 code units for Bond (C# strings
        # allow them): keep them, so that the value writes back unchanged.
        return str(self.data[pos : pos + 2 * count], "utf-16-le", "surrogatepass")

    def skip_string(self, wire: int) -> None:
        # Skipped strings are not decoded (nor checked as UTF-8), as in Bond.
        count = self.varint(32)
        size = count if wire == _BT.BT_STRING else 2 * count
        if size > self.end - self.pos:
            raise BondDecodeError(f"{wire_name(wire)} of {size} bytes at offset {self.pos}, {self.end - self.pos} left")
        self.pos += size

    def check_count(self, count: int, what: str, *, items: bool = True) -> None:
        # ``items``: the count makes Python objects (not blob bytes, not skipped data).
        if items and count > self.limits.max_container_length:
            raise BondLimitError(f"{what} of {count} items exceeds the limit of {self.limits.max_container_length}")
        if count > self.end - self.pos:
            raise BondDecodeError(f"{what} of {count} items at offset {self.pos}, {self.end - self.pos} bytes left")

    def enter(self) -> None:
        self.depth += 1
        if self.depth > self.limits.max_depth:
            raise BondLimitError(f"nesting deeper than {self.limits.max_depth}")

    def blob(self, count: int) -> bytes:
        pos = self.pos
        self.pos = pos + count
        return bytes(self.data[pos : pos + count])

    def read_blob(self) -> bytes:
        """One blob, its list header included: a list of int8 or uint8, as bytes.

        The one place the rules of a blob on the wire live, for a blob field
        and for each item of a ``list<blob>`` (read in one loop: an
        rstreams ``Elements`` response is a list of many blobs).
        """
        item_wire, count = self.list_header()
        self.check_count(count, "blob", items=False)
        if count and item_wire not in _BYTE_WIRES:
            raise BondDecodeError(f"blob of {wire_name(item_wire)} items")
        pos = self.pos
        self.pos = pos + count
        return bytes(self.data[pos : pos + count])

    def struct_end(self, end: int) -> None:
        if end >= 0 and self.pos != end:
            raise BondDecodeError(f"struct ends at offset {self.pos}, its length prefix says {end}")

    # ---- with a schema --------------------------------------------------

    def read_struct(self, struct_class: type[Struct]) -> Any:
        self.enter()
        end = self.struct_begin()
        levels = struct_class.__bond_levels__
        last = len(levels) - 1
        values: dict[str, Any] = {}
        index = 0
        while True:
            level = levels[index] if index <= last else None
            by_id = level.by_id if level is not None else {}
            while True:
                wire, field_id = self.field_header()
                if wire <= STOP_BASE:
                    break
                info = by_id.get(field_id)
                if info is None:
                    self.skip(wire)
                    continue
                field_type = info.type
                if wire not in field_type.accepts:
                    raise BondDecodeError(
                        f"{level.struct_class.__name__}.{info.name} (id {field_id}) is a {field_type.name},"  # type: ignore[union-attr]
                        f" found {wire_name(wire)} on the wire"
                    )
                values[info.name] = self.read_value(field_type, wire)
            if wire == STOP:
                for missing in levels[index:]:
                    for info in missing.required:
                        if info.name not in values:
                            raise BondRequiredFieldError(missing.struct_class.__name__, info.name, info.id)
                break
            index += 1
        self.struct_end(end)
        self.depth -= 1
        return struct_class(**values)

    def read_value(self, field_type: BondType, wire: int) -> Any:
        # ``wire`` has been checked against ``field_type.accepts``.
        kind = field_type.kind
        if kind == SCALAR:
            return self.scalar(wire)
        if kind == ENUM:
            value = self.scalar(wire)
            return field_type.members.get(value, value)  # type: ignore[attr-defined]
        if kind == STRUCT:
            return self.read_struct(field_type.struct_class)  # type: ignore[attr-defined]
        if kind == BONDED:
            assert isinstance(field_type, StructType)
            start = self.pos
            self.skip(_BT.BT_STRUCT)
            return Bonded.from_data(
                field_type.struct_class, self.blob_between(start), self.protocol, limits=self.limits
            )
        if kind == MAP:
            return self.read_map(field_type)  # type: ignore[arg-type]
        self.enter()
        if kind == BLOB_KIND:
            result: Any = self.read_blob()
            self.depth -= 1
            return result
        item_wire, count = self.list_header()
        self.check_count(count, field_type.name)
        if kind == NULLABLE:
            if count > 1:
                raise BondDecodeError(f"{field_type.name} holding {count} values")
            result = self.read_items(field_type.element, item_wire, count)[0] if count else None  # type: ignore[attr-defined]
        elif kind == SET:
            result = set(self.read_items(field_type.element, item_wire, count))  # type: ignore[attr-defined]
        else:
            assert kind == LIST
            result = self.read_items(field_type.element, item_wire, count)  # type: ignore[attr-defined]
        self.depth -= 1
        return result

    def blob_between(self, start: int) -> bytes:
        return bytes(self.data[start : self.pos])

    def read_items(self, item_type: BondType, wire: int, count: int) -> list[Any]:
        if not count:
            return []
        if wire not in item_type.accepts:
            raise BondDecodeError(f"{item_type.name} items found as {wire_name(wire)} on the wire")
        kind = item_type.kind
        if kind == SCALAR:
            return self.scalars(wire, count)
        if kind == ENUM:
            assert isinstance(item_type, EnumType)
            members = item_type.members
            return [members.get(value, value) for value in self.scalars(wire, count)]
        if kind == STRUCT:
            struct_class = item_type.struct_class  # type: ignore[attr-defined]
            return [self.read_struct(struct_class) for _ in range(count)]
        if kind == BLOB_KIND:
            # As read_value reads each: one level deeper, the same rules.
            self.enter()
            read_blob = self.read_blob
            blobs = [read_blob() for _ in range(count)]
            self.depth -= 1
            return blobs
        return [self.read_value(item_type, wire) for _ in range(count)]

    def read_map(self, map_type: MapType) -> dict[Any, Any]:
        self.enter()
        key_wire, value_wire, count = self.map_header()
        self.check_count(count, map_type.name)
        result: dict[Any, Any] = {}
        if count:
            key_type, value_type = map_type.key, map_type.value
            if key_wire not in key_type.accepts or value_wire not in value_type.accepts:
                raise BondDecodeError(
                    f"{map_type.name} found as map<{wire_name(key_wire)}, {wire_name(value_wire)}> on the wire"
                )
            for _ in range(count):
                key = self.read_value(key_type, key_wire)
                result[key] = self.read_value(value_type, value_wire)
        self.depth -= 1
        return result

    # ---- skipping -----------------------------------------------------------

    def skip(self, wire: int) -> None:
        """Skip one value (an unknown field, a ``bonded<T>``): charged one."""
        self.charge_skipped(1)
        self.skip_value(wire)

    def charge_skipped(self, count: int) -> None:
        budget = self.skip_budget - count
        if budget < 0:
            raise BondLimitError(
                f"skipping more than {self.limits.max_skipped_items} values (at offset {self.pos})"
            )
        self.skip_budget = budget

    def skip_value(self, wire: int) -> None:
        # The value's own cost is charged by the caller; its contents here.
        if wire in SCALAR_WIRES:
            self.skip_scalars(wire, 1)
        elif wire == _BT.BT_STRUCT:
            self.skip_struct()
        elif wire == _BT.BT_LIST or wire == _BT.BT_SET:
            self.enter()
            item_wire, count = self.list_header()
            if item_wire in _BYTE_WIRES:
                # A blob (or any list of bytes): jumped over whole, as read_blob copies it.
                self.check_count(count, "list", items=False)
                self.skip_scalars(item_wire, count)
            else:
                self.check_count(count, "list")
                self.skip_items(item_wire, count)
            self.depth -= 1
        elif wire == _BT.BT_MAP:
            self.enter()
            key_wire, value_wire, count = self.map_header()
            self.check_count(count, "map")
            if count:
                self.charge_skipped(2 * count)
                skip_value = self.skip_value
                for _ in range(count):
                    skip_value(key_wire)
                    skip_value(value_wire)
            self.depth -= 1
        else:
            raise BondDecodeError(f"invalid {wire_name(wire)} at offset {self.pos}")

    def skip_items(self, wire: int, count: int) -> None:
        if not count:
            return
        if wire in self.jumped_wires:
            self.skip_scalars(wire, count)  # one jump, whatever the count
            return
        self.charge_skipped(count)
        if wire in SCALAR_WIRES:
            self.skip_scalars(wire, count)
        else:
            skip_value = self.skip_value
            for _ in range(count):
                skip_value(wire)

    def skip_struct(self) -> None:
        self.enter()
        end = self.struct_begin()
        if end >= 0:
            # Compact v2's length prefix: one jump (the bytes are checked by
            # whoever reads past them; a jump past the end fails there).
            self.pos = end
        else:
            skip = self.skip
            while True:
                wire, _ = self.field_header()
                if wire == STOP:
                    break
                if wire != STOP_BASE:
                    skip(wire)
        self.depth -= 1

    # ---- without a schema -------------------------------------------------

    def read_tree_struct(self) -> StructValue:
        self.enter()
        end = self.struct_begin()
        node: StructValue | None = None
        fields: list[FieldValue] = []
        while True:
            wire, field_id = self.field_header()
            if wire <= STOP_BASE:
                node = StructValue(tuple(fields), node)
                if wire == STOP:
                    break
                fields = []
                continue
            if wire not in VALUE_WIRES:
                raise BondDecodeError(f"field {field_id} has an invalid {wire_name(wire)}")
            fields.append(FieldValue(field_id, BondDataType(wire), self.read_tree_value(wire)))
        self.struct_end(end)
        self.depth -= 1
        return node

    def read_tree_value(self, wire: int) -> TreeValue:
        if wire in SCALAR_WIRES:
            return self.scalar(wire)  # type: ignore[no-any-return]
        if wire == _BT.BT_STRUCT:
            return self.read_tree_struct()
        if wire == _BT.BT_LIST or wire == _BT.BT_SET:
            self.enter()
            item_wire, count = self.list_header()
            self.check_count(count, "list", items=item_wire not in _BYTE_WIRES)
            if item_wire not in VALUE_WIRES:
                raise BondDecodeError(f"list of {wire_name(item_wire)} items")
            items: tuple[TreeValue, ...] | bytes
            if item_wire in _BYTE_WIRES:
                items = self.blob(count)
            elif item_wire in SCALAR_WIRES:
                items = tuple(self.scalars(item_wire, count)) if count else ()
            else:
                items = tuple(self.read_tree_value(item_wire) for _ in range(count))
            self.depth -= 1
            return ListValue(BondDataType(item_wire), items)
        if wire == _BT.BT_MAP:
            self.enter()
            key_wire, value_wire, count = self.map_header()
            self.check_count(count, "map")
            if key_wire not in VALUE_WIRES or value_wire not in VALUE_WIRES:
                raise BondDecodeError(f"map of {wire_name(key_wire)} to {wire_name(value_wire)}")
            pairs = tuple((self.read_tree_value(key_wire), self.read_tree_value(value_wire)) for _ in range(count))
            self.depth -= 1
            return MapValue(BondDataType(key_wire), BondDataType(value_wire), pairs)
        raise BondDecodeError(f"invalid {wire_name(wire)} at offset {self.pos}")
