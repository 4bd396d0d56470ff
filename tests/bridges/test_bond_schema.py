"""The schema API (Struct, field, types), Bonded, and marshalling."""

from __future__ import annotations

import pytest
from bond_test_schema import Base, Color, Derived, Modifiers, Params, Scalars

from bridges.epoxy import bond
from bridges.epoxy.bond import Protocol

V1, V2, FAST = Protocol.COMPACT_V1, Protocol.COMPACT_V2, Protocol.FAST


def test_structs_are_keyword_dataclasses_with_bond_defaults() -> None:
    assert Params() == Params(x=0, y=0, operation=0)
    assert repr(Params(x=1)) == "Params(x=1, y=0, operation=<Operation.Add: 0>)"
    with pytest.raises(TypeError):
        Params(1)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        Params(z=1)
    modifiers = Modifiers()
    assert (modifiers.opt, modifiers.text, modifiers.items, modifiers.maybe, modifiers.nested) == (7, "x", [], None, Base())
    assert Modifiers().items is not Modifiers().items  # fresh mutable defaults
    assert Scalars().e is Color.RED and type(Scalars().d) is float


def test_hierarchy_metadata() -> None:
    assert Derived.__bond_base__ is Base and Base.__bond_base__ is None
    assert [level.struct_class for level in Derived.__bond_levels__] == [Base, Derived]
    assert Derived(a=1, b=2) != Derived(a=1, b=3)


def test_fields_are_written_by_increasing_id_whatever_the_declaration_order() -> None:
    class Shuffled(bond.Struct):
        late: int = bond.field(9, bond.UINT8)
        early: int = bond.field(1, bond.UINT8)

    assert bond.serialize(Shuffled(late=2, early=1)) == bytes.fromhex("23 01 c3 09 02 00")


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"__annotations__": {"x": "int"}, "x": 3}, "must be declared with bond.field"),
        ({"__annotations__": {"x": "int", "y": "int"}, "x": bond.field(1, bond.INT8), "y": bond.field(1, bond.INT8)}, "id twice"),
        ({"__annotations__": {"x": "list[int]"}, "x": bond.field(1, bond.list_of(bond.INT8), default=[1])}, "only default to empty"),
        ({"__annotations__": {"x": "int"}, "x": bond.field(1, bond.INT8, default="a")}, "does not fit int8"),
        ({"__annotations__": {"x": "bool"}, "x": bond.field(1, bond.BOOL, default=1)}, "does not fit bool"),
    ],
)
def test_schema_mistakes_are_caught_at_class_creation(body: dict[str, object], message: str) -> None:
    with pytest.raises(TypeError, match=message):
        type("Bad", (bond.Struct,), body)


def test_a_derived_struct_cannot_hide_a_base_field() -> None:
    with pytest.raises(TypeError, match="hides a field"):
        type("Bad", (Base,), {"__annotations__": {"a": "int"}, "a": bond.field(2, bond.UINT8)})


def test_field_and_type_arguments() -> None:
    with pytest.raises(TypeError):
        bond.field(70000, bond.INT8)
    with pytest.raises(TypeError):
        bond.field(1, int)
    with pytest.raises(TypeError):
        bond.set_of(Base)
    with pytest.raises(TypeError):
        bond.map_of(bond.list_of(bond.INT8), bond.INT8)
    assert bond.map_of(bond.STRING, bond.list_of(Base)).name == "map<string, list<Base>>"
    assert bond.nullable(bond.bonded(Base)).name == "nullable<bonded<Base>>"


def test_classvars_are_not_fields() -> None:
    from typing import ClassVar

    class WithClassVar(bond.Struct):
        kind: ClassVar[str] = "x"
        value: int = bond.field(0, bond.UINT8)

    assert [info.name for info in WithClassVar.__bond_fields__] == ["value"]


class Node(bond.Struct):
    """Self-referential, through a lazy reference."""

    value: int = bond.field(0, bond.INT32)
    next: Node | None = bond.field(1, bond.nullable(lambda: Node))


def test_lazy_self_reference() -> None:
    chain = Node(value=1, next=Node(value=2, next=Node(value=3)))
    for protocol in Protocol:
        assert bond.deserialize(Node, bond.serialize(chain, protocol), protocol) == chain


def test_a_lazy_reference_must_give_a_struct() -> None:
    class Broken(bond.Struct):
        other: object = bond.field(0, bond.struct(lambda: int))

    with pytest.raises(TypeError, match="not a Struct class"):
        Broken()


# ---- Bonded ------------------------------------------------------------------------------


class Holder(bond.Struct):
    payload: bond.Bonded[Base] = bond.field(0, bond.bonded(Base))


def test_bonded_keeps_derived_fields_through_a_base_schema() -> None:
    holder = Holder(payload=bond.Bonded(Derived(a=1, b=2)))
    for protocol in Protocol:
        wire = bond.serialize(holder, protocol)
        decoded = bond.deserialize(Holder, wire, protocol)
        assert decoded.payload.protocol is protocol
        assert decoded.payload.value == Base(a=1)  # the declared class
        assert decoded.payload.deserialize(Derived) == Derived(a=1, b=2)  # the real one
        assert bond.serialize(decoded, protocol) == wire  # copied as is
        for other in Protocol:  # transcoded: nothing lost
            assert bond.deserialize(Holder, bond.serialize(decoded, other), other).payload.deserialize(Derived) == Derived(a=1, b=2)


def test_bonded_equality_and_repr() -> None:
    made = bond.Bonded(Base(a=1))
    decoded = bond.deserialize(Holder, bond.serialize(Holder(payload=made), FAST), FAST).payload
    assert decoded == made and made == decoded
    assert decoded != bond.Bonded(Base(a=2))
    compact = bond.Bonded.from_data(Base, b"\x23\x01\x00", V1)
    assert compact == bond.Bonded.from_data(Base, b"\x03\x01\x00\x01\x00", FAST)  # same value, other bytes
    assert compact != bond.Bonded.from_data(Base, b"\x00", FAST)
    assert "Bonded(Base(a=1))" == repr(made)
    assert "3 bytes" in repr(bond.Bonded.from_data(Base, b"\x23\x01\x00", V1))
    assert Holder().payload == bond.Bonded(Base())
    with pytest.raises(TypeError):
        bond.Bonded(3)  # type: ignore[type-var]


def test_bonded_of_bad_bytes_fails_when_read() -> None:
    bonded = bond.Bonded.from_data(Base, b"\x23", V1)
    with pytest.raises(bond.BondDecodeError):
        bonded.value


# ---- marshalling -----------------------------------------------------------------------


def test_marshal_headers() -> None:
    assert bond.marshal_header(V1) == bytes.fromhex("43 42 01 00")  # "CB", version 1
    assert bond.marshal_header(V2) == bytes.fromhex("43 42 02 00")
    assert bond.marshal_header(FAST) == bytes.fromhex("4d 46 01 00")  # "MF"
    value = Params(x=67, y=87, operation=3)
    assert bond.marshal(value) == bytes.fromhex("43 42 01 00 30 86 01 50 ae 01 70 06 00")
    for protocol in Protocol:
        wire = bond.marshal(value, protocol)
        assert bond.read_marshal_header(wire) is protocol
        assert bond.unmarshal(Params, wire) == value
        assert bond.unmarshal_tree(wire) == (protocol, bond.read_tree(wire[4:], protocol))


@pytest.mark.parametrize(
    ("wire", "message"),
    [
        (b"", "no 4-byte header"),
        (b"CB\x01", "no 4-byte header"),
        (bytes.fromhex("43 42 03 00 00"), "magic 0x4243, version 3"),
        (bytes.fromhex("53 50 01 00 00"), "magic 0x5053"),  # Simple Binary: not supported
        (bytes.fromhex("43 42 01 00 00 00"), "1 bytes follow"),
    ],
)
def test_unmarshal_errors(wire: bytes, message: str) -> None:
    with pytest.raises(bond.BondDecodeError, match=message):
        bond.unmarshal(Params, wire)


def test_marshal_tree_and_transcode() -> None:
    wire = bond.serialize(Derived(a=1, b=2), FAST)
    tree = bond.read_tree(wire, FAST)
    assert bond.marshal_tree(tree, V2) == bond.marshal(Derived(a=1, b=2), V2)
    assert bond.transcode(wire, FAST, V1) == bond.serialize(Derived(a=1, b=2), V1)
