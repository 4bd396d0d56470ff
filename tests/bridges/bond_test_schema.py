"""Small Bond structs shared by the ``test_bond_*`` and ``test_epoxy_*`` tests."""

from __future__ import annotations

import enum

from bridges.epoxy import bond
from bridges.epoxy.bond import NOTHING, Modifier, field


class Color(enum.IntEnum):
    RED = 0
    GREEN = 1
    BLUE = 2


class Scalars(bond.Struct):
    b: bool = field(0, bond.BOOL)
    i8: int = field(1, bond.INT8)
    i16: int = field(2, bond.INT16)
    i32: int = field(3, bond.INT32)
    i64: int = field(4, bond.INT64)
    u8: int = field(5, bond.UINT8)
    u16: int = field(6, bond.UINT16)
    u32: int = field(7, bond.UINT32)
    u64: int = field(8, bond.UINT64)
    f: float = field(9, bond.FLOAT)
    d: float = field(10, bond.DOUBLE)
    s: str = field(11, bond.STRING)
    w: str = field(12, bond.WSTRING)
    e: Color = field(300, Color)  # an id above 0xff: the longest compact field header


SCALARS = Scalars(
    b=True,
    i8=-2,
    i16=-300,
    i32=70000,
    i64=-(2**40),
    u8=200,
    u16=300,
    u32=2**31,
    u64=2**64 - 1,
    f=1.5,
    d=-0.25,
    s="été",
    w="hé",
    e=Color.BLUE,
)


class Containers(bond.Struct):
    l: list[int] = field(0, bond.list_of(bond.INT16))  # noqa: E741
    s: set[str] = field(1, bond.set_of(bond.STRING))
    m: dict[int, bool] = field(2, bond.map_of(bond.UINT8, bond.BOOL))
    n: int | None = field(3, bond.nullable(bond.INT32))
    blob: bytes = field(4, bond.BLOB)
    v: list[list[int]] = field(5, bond.vector_of(bond.list_of(bond.UINT32)))
    many: list[int] = field(6, bond.list_of(bond.UINT8))  # 7 items: no room in a v2 type byte


CONTAINERS = Containers(l=[1, -1], s={"b", "a"}, m={7: True}, n=5, blob=b"\x00\xff", v=[[1], []], many=list(range(7)))


class Base(bond.Struct):
    a: int = field(1, bond.UINT8)


class Derived(Base):
    b: int = field(1, bond.UINT8)  # the same id at another level


class Outer(bond.Struct):
    inner: Base = field(0, Base)


class Operation(enum.IntEnum):
    Add = 0
    Div = 1
    Sub = 2
    Mul = 3


class Params(bond.Struct):
    """The spec's Calc example: ``examples.calc.Params``."""

    x: int = field(1, bond.INT32)
    y: int = field(2, bond.INT32)
    operation: Operation = field(3, Operation, default=Operation.Add)


class Result(bond.Struct):
    """``examples.calc.Result``."""

    z: int = field(1, bond.INT32)


class Modifiers(bond.Struct):
    opt: int = field(0, bond.UINT32, default=7)
    req: int = field(1, bond.UINT32, modifier=Modifier.REQUIRED)
    req_opt: int = field(2, bond.UINT32, modifier=Modifier.REQUIRED_OPTIONAL)
    maybe: int | None = field(3, bond.UINT32, default=NOTHING)
    text: str = field(4, bond.STRING, default="x")
    items: list[int] = field(5, bond.list_of(bond.UINT32))
    nested: Base = field(6, Base)


class Everything(bond.Struct):
    """One field of each kind, for skipping and fuzzing."""

    scalars: Scalars = field(0, Scalars)
    containers: Containers = field(1, Containers)
    derived: Derived = field(2, Derived)
    structs: list[Base] = field(3, bond.list_of(Base))
    maps: dict[str, list[Base]] = field(4, bond.map_of(bond.STRING, bond.list_of(Base)))
    bonded: bond.Bonded[Derived] = field(5, bond.bonded(Derived))
    nested: Outer = field(6, Outer)
    sets: set[float] = field(7, bond.set_of(bond.DOUBLE))
    blobs: list[bytes] = field(8, bond.list_of(bond.BLOB))  # rstreams' Elements: read in one loop
    wide_id: int = field(0xFFFF, bond.INT64)
