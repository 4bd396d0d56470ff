"""Bond's compat schema (``test/compat/core/schemas/compat.bond``, ``compat_common.bond``
and ``compat2.bond`` in microsoft/bond), declared with ``bridges.epoxy.bond``.

Fields are declared in the ``.bond`` files' order (Bond writes them by
increasing id, whatever that order). Generic structs are instantiated by small factories, as
Bond's code generator does for each ``Generic1<T>`` used.

One rename: ``Compat`` declares fields 13-15 as ``m_enum1``..``m_enum3``,
the names of fields of its base ``BasicTypes``; Python attributes cannot
shadow like C++ members, so they take their ``JsonName`` (``enum1``..``enum3``),
which is also how Bond's JSON file names them.
"""

from __future__ import annotations

import enum
from typing import Any

from bridges.epoxy import bond
from bridges.epoxy.bond import NOTHING, Modifier, field


class EnumType1(enum.IntEnum):
    EnumValue1 = 5
    EnumValue2 = 10
    EnumValue3 = -10


class EnumType2(enum.IntEnum):
    EnumValue1 = 0
    EnumValue2 = 3
    EnumValue3 = -3
    EnumValue4 = -2
    EnumValue5 = -1
    EnumValue6 = 100


class AnotherEnumType(enum.IntEnum):  # unittest.compat.another.EnumType
    EnumValue1 = 6


class Another(bond.Struct):  # unittest.compat.another.Another
    d: float = field(10, bond.DOUBLE)


class BasicTypesUninitialized(bond.Struct):
    m_bool: bool = field(10, bond.BOOL)
    m_int8: int = field(12, bond.INT8)
    m_int16: int = field(23, bond.INT16)
    m_int32: int = field(34, bond.INT32)
    m_int64: int = field(45, bond.INT64)
    m_uint8: int = field(56, bond.UINT8)
    m_uint16: int = field(67, bond.UINT16)
    m_uint32: int = field(78, bond.UINT32)
    m_uint64: int = field(89, bond.UINT64)
    m_double: float = field(99, bond.DOUBLE)
    m_float: float = field(100, bond.FLOAT)
    m_string: str = field(101, bond.STRING)
    m_wstring: str = field(102, bond.WSTRING)


class BasicTypes(Another):
    m_bool: bool = field(0, bond.BOOL, default=True)
    m_str: str = field(2, bond.STRING, default="foo")
    m_wstr: str = field(3, bond.WSTRING, default="bar")
    m_int8: int = field(14, bond.INT8, default=-14)
    m_int16: int | None = field(15, bond.INT16, default=NOTHING)
    m_int32: int = field(16, bond.INT32, default=-16, modifier=Modifier.REQUIRED)
    m_int64: int = field(17, bond.INT64, default=-17)
    m_uint8: int = field(13, bond.UINT8, default=13, modifier=Modifier.REQUIRED_OPTIONAL)
    m_uint16: int = field(11, bond.UINT16, default=11)
    m_uint32: int = field(12, bond.UINT32, default=12)
    m_uint64: int = field(10, bond.UINT64, default=10)
    m_double: float = field(18, bond.DOUBLE, default=18)
    m_float: float = field(20, bond.FLOAT, default=20)
    m_enum1: EnumType1 = field(21, EnumType1, default=EnumType1.EnumValue3)
    m_enum2: AnotherEnumType = field(22, AnotherEnumType, default=AnotherEnumType.EnumValue1)
    m_enum3: AnotherEnumType | None = field(23, AnotherEnumType, default=NOTHING)


U64 = bond.UINT64
STR = bond.STRING


class Containers(bond.Struct):
    l_bool: list[bool] = field(0, bond.list_of(bond.BOOL))
    l_str: list[str] = field(1, bond.list_of(STR))
    l_int8: list[int] = field(2, bond.list_of(bond.INT8))
    l_int16: list[int] = field(3, bond.list_of(bond.INT16))
    l_int32: list[int] = field(4, bond.list_of(bond.INT32))
    l_int64: list[int] = field(5, bond.list_of(bond.INT64))
    l_uint8: list[int] = field(6, bond.list_of(bond.UINT8))
    l_uint16: list[int] = field(7, bond.list_of(bond.UINT16))
    l_uint32: list[int] = field(8, bond.list_of(bond.UINT32))
    l_uint64: list[int] = field(9, bond.list_of(U64))
    l_double: list[float] = field(10, bond.list_of(bond.DOUBLE))
    l_float: list[float] = field(11, bond.list_of(bond.FLOAT))
    l_enum1: list[EnumType1] = field(12, bond.list_of(EnumType1))
    l_basic: list[BasicTypes] = field(13, bond.list_of(BasicTypes))
    l_another_enum: list[AnotherEnumType] = field(14, bond.list_of(AnotherEnumType))
    l_another_struct: list[Another] = field(15, bond.list_of(Another))

    s_bool: set[bool] = field(20, bond.set_of(bond.BOOL))
    s_str: set[str] = field(21, bond.set_of(STR))
    s_int8: set[int] = field(22, bond.set_of(bond.INT8))
    s_int16: set[int] = field(23, bond.set_of(bond.INT16))
    s_int32: set[int] = field(24, bond.set_of(bond.INT32))
    s_int64: set[int] | None = field(25, bond.set_of(bond.INT64), default=NOTHING)
    s_uint8: set[int] = field(26, bond.set_of(bond.UINT8))
    s_uint16: set[int] = field(27, bond.set_of(bond.UINT16))
    s_uint32: set[int] = field(28, bond.set_of(bond.UINT32))
    s_uint64: set[int] = field(29, bond.set_of(U64))
    s_double: set[float] = field(30, bond.set_of(bond.DOUBLE))
    s_float: set[float] = field(31, bond.set_of(bond.FLOAT))
    s_enum1: set[EnumType1] = field(32, bond.set_of(EnumType1))

    m_bool: dict[str, bool] = field(40, bond.map_of(STR, bond.BOOL))
    m_str: dict[str, str] = field(41, bond.map_of(STR, STR))
    m_int8: dict[str, int] = field(42, bond.map_of(STR, bond.INT8))
    m_int16: dict[str, int] = field(43, bond.map_of(STR, bond.INT16))
    m_int32: dict[str, int] = field(44, bond.map_of(STR, bond.INT32))
    m_int64: dict[str, int] = field(45, bond.map_of(STR, bond.INT64))
    m_uint8: dict[str, int] | None = field(46, bond.map_of(STR, bond.UINT8), default=NOTHING)
    m_uint16: dict[str, int] = field(47, bond.map_of(STR, bond.UINT16))
    m_uint32: dict[str, int] = field(48, bond.map_of(STR, bond.UINT32))
    m_uint64: dict[str, int] = field(49, bond.map_of(STR, U64))
    m_double: dict[str, float] = field(50, bond.map_of(STR, bond.DOUBLE))
    m_float: dict[str, float] = field(51, bond.map_of(STR, bond.FLOAT))
    m_enum1: dict[str, EnumType1] = field(52, bond.map_of(STR, EnumType1))

    n_bool: dict[bool, float] = field(60, bond.map_of(bond.BOOL, bond.DOUBLE))
    n_str: dict[str, float] = field(61, bond.map_of(STR, bond.DOUBLE))
    n_int8: dict[int, float] = field(62, bond.map_of(bond.INT8, bond.DOUBLE))
    n_int16: dict[int, float] = field(63, bond.map_of(bond.INT16, bond.DOUBLE))
    n_int32: dict[int, float] = field(64, bond.map_of(bond.INT32, bond.DOUBLE))
    n_int64: dict[int, float] = field(65, bond.map_of(bond.INT64, bond.DOUBLE))
    n_uint8: dict[int, float] = field(66, bond.map_of(bond.UINT8, bond.DOUBLE))
    n_uint16: dict[int, float] = field(67, bond.map_of(bond.UINT16, bond.DOUBLE))
    n_uint32: dict[int, float] = field(68, bond.map_of(bond.UINT32, bond.DOUBLE))
    n_uint64: dict[int, float] = field(69, bond.map_of(U64, bond.DOUBLE))
    n_double: dict[float, float] = field(70, bond.map_of(bond.DOUBLE, bond.DOUBLE))
    n_float: dict[float, float] = field(71, bond.map_of(bond.FLOAT, bond.DOUBLE))
    n_enum1: dict[EnumType1, float] = field(72, bond.map_of(EnumType1, bond.DOUBLE))
    n_basic: dict[EnumType1, BasicTypes] = field(73, bond.map_of(EnumType1, BasicTypes))

    lv_uint64: list[list[int]] = field(80, bond.list_of(bond.vector_of(U64)))
    vs_uint64: list[set[int]] = field(81, bond.vector_of(bond.set_of(U64)))
    vm_uint64: list[dict[str, set[int]]] | None = field(
        82, bond.vector_of(bond.map_of(STR, bond.set_of(U64))), default=NOTHING
    )
    mml_float: dict[int, dict[int, list[float]]] = field(
        83, bond.map_of(bond.INT8, bond.map_of(bond.UINT8, bond.list_of(bond.FLOAT)))
    )

    m_blob: bytes = field(90, bond.BLOB)
    l_blob: list[bytes] = field(91, bond.list_of(bond.BLOB))
    n_blob: dict[str, bytes] = field(92, bond.map_of(STR, bond.BLOB))


class WithBase(BasicTypes):
    pass


def generic1(name: str, element: Any) -> type[bond.Struct]:
    """``Generic1<T>``: ``1: T m_T; 2: list<T> m_listT;``."""
    return type(
        name,
        (bond.Struct,),
        {
            "__annotations__": {"m_T": "Any", "m_listT": "list[Any]"},
            "m_T": field(1, element),
            "m_listT": field(2, bond.list_of(element)),
        },
    )


Generic1_int32 = generic1("Generic1_int32", bond.INT32)
Generic1_wstring = generic1("Generic1_wstring", bond.WSTRING)


def generic2(name: str, element: Any, t_generic1: type[bond.Struct]) -> type[bond.Struct]:
    """``Generic2<T> : Generic1<T>`` (and ``Generic4<T>``, which has the same fields)."""
    return type(
        name,
        (t_generic1,),
        {
            "__annotations__": {
                "m_generic1": "Any",
                "m_mapT": "dict[bool, Any]",
                "m_nullableT": "Any",
                "m_generic1_T": "Any",
                "m_generic1_wstring": "Any",
            },
            "m_generic1": field(1, Generic1_int32),
            "m_mapT": field(2, bond.map_of(bond.BOOL, element)),
            "m_nullableT": field(3, bond.nullable(element)),
            "m_generic1_T": field(4, t_generic1),
            "m_generic1_wstring": field(5, Generic1_wstring),
        },
    )


Generic1_float = generic1("Generic1_float", bond.FLOAT)
Generic1_bool = generic1("Generic1_bool", bond.BOOL)
Generic1_WithBase = generic1("Generic1_WithBase", WithBase)
Generic1_Another = generic1("Generic1_Another", Another)
Generic1_AnotherEnum = generic1("Generic1_AnotherEnum", AnotherEnumType)
Generic2_float = generic2("Generic2_float", bond.FLOAT, Generic1_float)
Generic4_WithBase = generic2("Generic4_WithBase", WithBase, Generic1_WithBase)
Generic4_Another = generic2("Generic4_Another", Another, Generic1_Another)
Generic2_AnotherEnum = generic2("Generic2_AnotherEnum", AnotherEnumType, Generic1_AnotherEnum)


class Compat(WithBase):
    m_basicTypes: BasicTypes = field(0, BasicTypes)
    m_containers: Containers = field(1, Containers)
    m_withBase: WithBase = field(2, WithBase)
    m_nullable_string: str | None = field(4, bond.nullable(STR))
    m_nullable_uint64: int | None = field(5, bond.nullable(U64))
    m_generic2: Any = field(6, Generic2_float)
    m_generic1: Any = field(7, Generic1_bool)
    m_generic0: Any = field(8, Generic4_WithBase)
    m_generic_another_struct: Any = field(9, Generic4_Another)
    m_generic_another_enum: Any = field(10, Generic2_AnotherEnum)
    m_defaults: Compat | None = field(11, bond.nullable(lambda: Compat))
    m_basicUnintialized: bond.Bonded[BasicTypesUninitialized] = field(12, bond.bonded(BasicTypesUninitialized))
    enum1: EnumType2 = field(13, EnumType2, default=EnumType2.EnumValue1)  # m_enum1, JsonName("enum1")
    enum2: EnumType2 = field(14, EnumType2, default=EnumType2.EnumValue2)  # m_enum2, JsonName("enum2")
    enum3: EnumType2 = field(15, EnumType2, default=EnumType2.EnumValue3)  # m_enum3, JsonName("enum3")
    m_enum4: EnumType2 = field(16, EnumType2, default=EnumType2.EnumValue4)
    m_enum5: EnumType2 = field(17, EnumType2, default=EnumType2.EnumValue5)
    m_enum6: EnumType2 = field(18, EnumType2, default=EnumType2.EnumValue6)
    m_nullable: BasicTypes | None = field(8191, bond.nullable(BasicTypes))
