"""Bond's data types: wire type ids, protocols, and schema type descriptors.

A schema names each field's type with a descriptor from this module:
scalars (:data:`INT32`, :data:`STRING`, ...), :data:`BLOB`, and the
constructors :func:`list_of`, :func:`vector_of`, :func:`set_of`,
:func:`map_of`, :func:`nullable`, :func:`bonded`, :func:`enum` and
:func:`struct` (a struct class can also be used directly). A descriptor
knows the wire type id it is written with, which wire types it accepts when
reading (Bond's widening rules: ``int8`` data reads into an ``int32`` field,
``float`` into ``double``), and the implicit default of fields of its type.

Struct references may be lazy (a zero-argument callable returning the class)
so that a struct can refer to itself, as ``bond.comm.Error`` does through
``nullable<bonded<Error>>``.
"""

from __future__ import annotations

import enum as _enum
from collections.abc import Callable
from typing import Any, ClassVar

__all__ = [
    "BondDataType",
    "Protocol",
    "BondType",
    "ScalarType",
    "EnumType",
    "BlobType",
    "ListType",
    "SetType",
    "MapType",
    "NullableType",
    "StructType",
    "BondedType",
    "BOOL",
    "INT8",
    "INT16",
    "INT32",
    "INT64",
    "UINT8",
    "UINT16",
    "UINT32",
    "UINT64",
    "FLOAT",
    "DOUBLE",
    "STRING",
    "WSTRING",
    "BLOB",
    "list_of",
    "vector_of",
    "set_of",
    "map_of",
    "nullable",
    "bonded",
    "enum",
    "struct",
    "as_type",
]


class BondDataType(_enum.IntEnum):
    """Wire type ids, from Bond's ``bond_const.bond``."""

    BT_STOP = 0
    BT_STOP_BASE = 1
    BT_BOOL = 2
    BT_UINT8 = 3
    BT_UINT16 = 4
    BT_UINT32 = 5
    BT_UINT64 = 6
    BT_FLOAT = 7
    BT_DOUBLE = 8
    BT_STRING = 9
    BT_STRUCT = 10
    BT_LIST = 11
    BT_SET = 12
    BT_MAP = 13
    BT_INT8 = 14
    BT_INT16 = 15
    BT_INT32 = 16
    BT_INT64 = 17
    BT_WSTRING = 18
    BT_UNAVAILABLE = 127


class Protocol(_enum.Enum):
    """The three Bond binary protocols implemented here.

    The values are the names the CLI uses (``--protocol compact|compact2|fast``).
    """

    COMPACT_V1 = "compact"
    COMPACT_V2 = "compact2"
    FAST = "fast"

    @property
    def magic(self) -> int:
        """The 16-bit magic of the marshalling header (``ProtocolType`` in Bond)."""
        return 0x464D if self is Protocol.FAST else 0x4243

    @property
    def version(self) -> int:
        """The version written in the marshalling header."""
        return 2 if self is Protocol.COMPACT_V2 else 1


_BT = BondDataType

# Kinds, for the codecs' dispatch (plain ints: compared on every value).
SCALAR, ENUM, BLOB_KIND, LIST, SET, MAP, NULLABLE, STRUCT, BONDED = range(9)

# Range of each integer wire type, for checks on write and on read.
INT_BOUNDS: dict[int, tuple[int, int]] = {
    _BT.BT_INT8: (-(1 << 7), (1 << 7) - 1),
    _BT.BT_INT16: (-(1 << 15), (1 << 15) - 1),
    _BT.BT_INT32: (-(1 << 31), (1 << 31) - 1),
    _BT.BT_INT64: (-(1 << 63), (1 << 63) - 1),
    _BT.BT_UINT8: (0, (1 << 8) - 1),
    _BT.BT_UINT16: (0, (1 << 16) - 1),
    _BT.BT_UINT32: (0, (1 << 32) - 1),
    _BT.BT_UINT64: (0, (1 << 64) - 1),
}

# Which wire types a field of a given declared type reads (Bond's widening).
_ACCEPTS: dict[int, frozenset[int]] = {
    _BT.BT_INT16: frozenset({_BT.BT_INT8, _BT.BT_INT16}),
    _BT.BT_INT32: frozenset({_BT.BT_INT8, _BT.BT_INT16, _BT.BT_INT32}),
    _BT.BT_INT64: frozenset({_BT.BT_INT8, _BT.BT_INT16, _BT.BT_INT32, _BT.BT_INT64}),
    _BT.BT_UINT16: frozenset({_BT.BT_UINT8, _BT.BT_UINT16}),
    _BT.BT_UINT32: frozenset({_BT.BT_UINT8, _BT.BT_UINT16, _BT.BT_UINT32}),
    _BT.BT_UINT64: frozenset({_BT.BT_UINT8, _BT.BT_UINT16, _BT.BT_UINT32, _BT.BT_UINT64}),
    _BT.BT_DOUBLE: frozenset({_BT.BT_FLOAT, _BT.BT_DOUBLE}),
}
# Lists, vectors, nullables and blobs are BT_LIST; sets are BT_SET. A reader
# takes either, as the element layout is the same.
_LIST_WIRES = frozenset({_BT.BT_LIST, _BT.BT_SET})


class BondType:
    """A schema type: how a field or a container item is encoded.

    Attributes:
        wire: the wire type id it is written with.
        accepts: the wire type ids it can be read from.
        kind: the codecs' dispatch code.
    """

    __slots__ = ("wire", "accepts")
    kind: ClassVar[int]

    def __init__(self, wire: BondDataType, accepts: frozenset[int] | None = None) -> None:
        self.wire = wire
        self.accepts = accepts if accepts is not None else frozenset({int(wire)})

    def implicit_default(self) -> Any:
        """The value of a field of this type that declares no default."""
        raise NotImplementedError

    @property
    def omittable(self) -> bool:
        """Whether an optional field of this type may be left out when it holds its default.

        Structs and bonded structs have no default value in Bond, so they are
        always written.
        """
        return True

    def __repr__(self) -> str:
        return self.name

    @property
    def name(self) -> str:
        """The Bond IDL spelling of the type."""
        raise NotImplementedError


class ScalarType(BondType):
    """bool, the integers, float, double, string and wstring."""

    __slots__ = ("_name", "_default")
    kind = SCALAR

    def __init__(self, wire: BondDataType, name: str, default: object) -> None:
        super().__init__(wire, _ACCEPTS.get(wire))
        self._name = name
        self._default = default

    def implicit_default(self) -> Any:
        return self._default

    @property
    def name(self) -> str:
        return self._name


class EnumType(BondType):
    """An enum, carried as an int32; reads give the enum member, or the int for unknown values."""

    __slots__ = ("enum_class", "members")
    kind = ENUM

    def __init__(self, enum_class: type[_enum.IntEnum]) -> None:
        super().__init__(_BT.BT_INT32, _ACCEPTS[_BT.BT_INT32])
        self.enum_class = enum_class
        self.members: dict[int, _enum.IntEnum] = {int(member): member for member in enum_class}

    def implicit_default(self) -> Any:
        return self.members.get(0, 0)

    @property
    def name(self) -> str:
        return self.enum_class.__name__


class BlobType(BondType):
    """``blob``: bytes, on the wire a list of int8."""

    __slots__ = ()
    kind = BLOB_KIND

    def __init__(self) -> None:
        super().__init__(_BT.BT_LIST, _LIST_WIRES)

    def implicit_default(self) -> Any:
        return b""

    @property
    def name(self) -> str:
        return "blob"


class ListType(BondType):
    """``list<T>`` or ``vector<T>`` (the same on the wire): a Python list."""

    __slots__ = ("element", "_spelling")
    kind = LIST

    def __init__(self, element: BondType, spelling: str = "list") -> None:
        super().__init__(_BT.BT_LIST, _LIST_WIRES)
        self.element = element
        self._spelling = spelling

    def implicit_default(self) -> Any:
        return []

    @property
    def name(self) -> str:
        return f"{self._spelling}<{self.element.name}>"


class SetType(BondType):
    """``set<T>``: a Python set, written in sorted order (as Bond's C++ ``std::set``)."""

    __slots__ = ("element",)
    kind = SET

    def __init__(self, element: BondType) -> None:
        super().__init__(_BT.BT_SET, _LIST_WIRES)
        if not isinstance(element, (ScalarType, EnumType)):
            raise TypeError(f"set elements must be scalars or enums, not {element.name}")
        self.element = element

    def implicit_default(self) -> Any:
        return set()

    @property
    def name(self) -> str:
        return f"set<{self.element.name}>"


class MapType(BondType):
    """``map<K, V>``: a Python dict, written in its iteration order."""

    __slots__ = ("key", "value")
    kind = MAP

    def __init__(self, key: BondType, value: BondType) -> None:
        super().__init__(_BT.BT_MAP)
        if not isinstance(key, (ScalarType, EnumType)):
            raise TypeError(f"map keys must be scalars or enums, not {key.name}")
        self.key = key
        self.value = value

    def implicit_default(self) -> Any:
        return {}

    @property
    def name(self) -> str:
        return f"map<{self.key.name}, {self.value.name}>"


class NullableType(BondType):
    """``nullable<T>``: None or a value; on the wire a list of zero or one item."""

    __slots__ = ("element",)
    kind = NULLABLE

    def __init__(self, element: BondType) -> None:
        super().__init__(_BT.BT_LIST, _LIST_WIRES)
        self.element = element

    def implicit_default(self) -> Any:
        return None

    @property
    def name(self) -> str:
        return f"nullable<{self.element.name}>"


class StructType(BondType):
    """A nested struct; ``target`` is the class or a callable returning it."""

    __slots__ = ("_target", "_class")
    kind = STRUCT

    def __init__(self, target: type | Callable[[], type]) -> None:
        super().__init__(_BT.BT_STRUCT)
        self._target = target
        self._class: type | None = target if isinstance(target, type) else None

    @property
    def struct_class(self) -> Any:
        """The struct class (resolving a lazy reference on first use)."""
        if self._class is None:
            resolved = self._target()
            if not isinstance(resolved, type) or not hasattr(resolved, "__bond_fields__"):
                raise TypeError(f"lazy struct reference returned {resolved!r}, not a Struct class")
            self._class = resolved
        return self._class

    def implicit_default(self) -> Any:
        return self.struct_class()

    @property
    def omittable(self) -> bool:
        return False

    @property
    def name(self) -> str:
        return self.struct_class.__name__  # type: ignore[no-any-return]


class BondedType(StructType):
    """``bonded<T>``: a struct kept in its serialized form (a :class:`Bonded`)."""

    __slots__ = ()
    kind = BONDED

    def implicit_default(self) -> Any:
        from ._schema import Bonded

        return Bonded(self.struct_class())

    @property
    def name(self) -> str:
        return f"bonded<{self.struct_class.__name__}>"


BOOL = ScalarType(_BT.BT_BOOL, "bool", False)
INT8 = ScalarType(_BT.BT_INT8, "int8", 0)
INT16 = ScalarType(_BT.BT_INT16, "int16", 0)
INT32 = ScalarType(_BT.BT_INT32, "int32", 0)
INT64 = ScalarType(_BT.BT_INT64, "int64", 0)
UINT8 = ScalarType(_BT.BT_UINT8, "uint8", 0)
UINT16 = ScalarType(_BT.BT_UINT16, "uint16", 0)
UINT32 = ScalarType(_BT.BT_UINT32, "uint32", 0)
UINT64 = ScalarType(_BT.BT_UINT64, "uint64", 0)
FLOAT = ScalarType(_BT.BT_FLOAT, "float", 0.0)
DOUBLE = ScalarType(_BT.BT_DOUBLE, "double", 0.0)
STRING = ScalarType(_BT.BT_STRING, "string", "")
WSTRING = ScalarType(_BT.BT_WSTRING, "wstring", "")
BLOB = BlobType()

TypeLike = BondType | type | Callable[[], type]


def as_type(value: TypeLike) -> BondType:
    """A descriptor from a descriptor, a struct class, or a lazy struct reference."""
    if isinstance(value, BondType):
        return value
    if isinstance(value, type):
        if issubclass(value, _enum.IntEnum):
            return EnumType(value)
        if hasattr(value, "__bond_fields__"):
            return StructType(value)
        raise TypeError(f"{value.__name__} is neither a Bond Struct nor an IntEnum")
    if callable(value):
        return StructType(value)
    raise TypeError(f"not a Bond type: {value!r}")


def list_of(element: TypeLike) -> ListType:
    """``list<T>``."""
    return ListType(as_type(element), "list")


def vector_of(element: TypeLike) -> ListType:
    """``vector<T>`` (identical to ``list<T>`` on the wire)."""
    return ListType(as_type(element), "vector")


def set_of(element: TypeLike) -> SetType:
    """``set<T>``; T is a scalar or an enum."""
    return SetType(as_type(element))


def map_of(key: TypeLike, value: TypeLike) -> MapType:
    """``map<K, V>``; K is a scalar or an enum."""
    return MapType(as_type(key), as_type(value))


def nullable(element: TypeLike) -> NullableType:
    """``nullable<T>``."""
    return NullableType(as_type(element))


def bonded(target: type | Callable[[], type]) -> BondedType:
    """``bonded<T>``; ``target`` is a Struct class or a callable returning one."""
    return BondedType(target)


def enum(enum_class: type[_enum.IntEnum]) -> EnumType:
    """An enum type (an ``IntEnum`` class; carried as int32)."""
    return EnumType(enum_class)


def struct(target: type | Callable[[], type]) -> StructType:
    """A nested struct; ``target`` is a Struct class or a callable returning one."""
    return StructType(target)
