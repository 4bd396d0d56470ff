"""Fuzzing the Bond readers and writers with hypothesis.

Generated trees and generated structs round-trip through every protocol;
random bytes and mutated payloads only ever raise ``BondDecodeError``.
"""

from __future__ import annotations

from typing import Any

from bond_test_schema import Base, Color, Containers, Derived, Everything, Outer, Scalars
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bridges.epoxy import bond
from bridges.epoxy.bond import BondDataType as BT
from bridges.epoxy.bond import FieldValue, ListValue, MapValue, Protocol, StructValue

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
protocols = st.sampled_from(list(Protocol))


def ints(bits: int, signed: bool) -> st.SearchStrategy[int]:
    return st.integers(-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else st.integers(0, (1 << bits) - 1)


SCALAR_VALUES: dict[BT, st.SearchStrategy[Any]] = {
    BT.BT_BOOL: st.booleans(),
    BT.BT_INT8: ints(8, True),
    BT.BT_INT16: ints(16, True),
    BT.BT_INT32: ints(32, True),
    BT.BT_INT64: ints(64, True),
    BT.BT_UINT8: ints(8, False),
    BT.BT_UINT16: ints(16, False),
    BT.BT_UINT32: ints(32, False),
    BT.BT_UINT64: ints(64, False),
    BT.BT_FLOAT: st.floats(width=32, allow_nan=False),
    BT.BT_DOUBLE: st.floats(allow_nan=False),
    BT.BT_STRING: st.text(max_size=8),
    BT.BT_WSTRING: st.text(st.characters(exclude_categories=()), max_size=8),  # lone surrogates too
}
SCALAR_WIRES = list(SCALAR_VALUES)
CONTAINER_WIRES = [BT.BT_LIST, BT.BT_SET, BT.BT_MAP, BT.BT_STRUCT]


@st.composite
def tree_values(draw: st.DrawFn, wire: BT, depth: int) -> Any:
    if wire in SCALAR_VALUES:
        return draw(SCALAR_VALUES[wire])
    if wire == BT.BT_STRUCT:
        return draw(structs(depth + 1))
    if wire == BT.BT_MAP:
        key = draw(st.sampled_from(SCALAR_WIRES))
        value = draw(value_wires(depth))
        pairs = draw(st.lists(st.tuples(tree_values(key, depth + 1), tree_values(value, depth + 1)), max_size=3))
        return MapValue(key, value, tuple(pairs))
    element = draw(value_wires(depth))
    if element in (BT.BT_INT8, BT.BT_UINT8):
        return ListValue(element, draw(st.binary(max_size=8)))
    return ListValue(element, tuple(draw(st.lists(tree_values(element, depth + 1), max_size=3))))


def value_wires(depth: int) -> st.SearchStrategy[BT]:
    return st.sampled_from(SCALAR_WIRES + (CONTAINER_WIRES if depth < 3 else []))


@st.composite
def structs(draw: st.DrawFn, depth: int = 0) -> StructValue:
    node = None
    for _ in range(draw(st.integers(1, 2 if depth < 2 else 1))):
        fields = []
        for _ in range(draw(st.integers(0, 4))):
            wire = draw(value_wires(depth))
            fields.append(FieldValue(draw(st.integers(0, 0xFFFF)), wire, draw(tree_values(wire, depth))))
        node = StructValue(tuple(fields), node)
    assert node is not None
    return node


@FUZZ
@given(structs(), protocols, protocols)
def test_trees_round_trip_in_every_protocol(tree: StructValue, source: Protocol, target: Protocol) -> None:
    wire = bond.write_tree(tree, source)
    assert bond.read_tree(wire, source) == tree
    assert bond.read_tree(bond.transcode(wire, source, target), target) == tree
    bond.to_json(tree)


floats32 = st.floats(width=32, allow_nan=False)
doubles = st.floats(allow_nan=False)
scalars = st.builds(
    Scalars,
    b=st.booleans(),
    i8=ints(8, True),
    i16=ints(16, True),
    i32=ints(32, True),
    i64=ints(64, True),
    u8=ints(8, False),
    u16=ints(16, False),
    u32=ints(32, False),
    u64=ints(64, False),
    f=floats32,
    d=doubles,
    s=st.text(max_size=8),
    w=st.text(max_size=8),
    e=st.sampled_from(list(Color)) | st.integers(3, 2**31 - 1),
)
containers = st.builds(
    Containers,
    l=st.lists(ints(16, True), max_size=9),
    s=st.sets(st.text(max_size=4), max_size=9),
    m=st.dictionaries(ints(8, False), st.booleans(), max_size=4),
    n=st.none() | ints(32, True),
    blob=st.binary(max_size=9),
    v=st.lists(st.lists(ints(32, False), max_size=8), max_size=8),
    many=st.lists(ints(8, False), max_size=9),
)
bases = st.builds(Base, a=ints(8, False))
deriveds = st.builds(Derived, a=ints(8, False), b=ints(8, False))
everything = st.builds(
    Everything,
    scalars=scalars,
    containers=containers,
    derived=deriveds,
    structs=st.lists(bases, max_size=3),
    maps=st.dictionaries(st.text(max_size=3), st.lists(bases, max_size=2), max_size=2),
    bonded=deriveds.map(bond.Bonded),
    nested=st.builds(Outer, inner=bases),
    sets=st.sets(doubles, max_size=4),
    blobs=st.lists(st.binary(max_size=9), max_size=5),
    wide_id=ints(64, True),
)


@FUZZ
@given(everything, protocols)
def test_structs_round_trip(value: Everything, protocol: Protocol) -> None:
    wire = bond.serialize(value, protocol)
    assert bond.deserialize(Everything, wire, protocol) == value
    assert bond.serialize(bond.deserialize(Everything, wire, protocol), protocol) == wire
    assert bond.write_tree(bond.read_tree(wire, protocol), protocol) == wire
    assert bond.unmarshal(Everything, bond.marshal(value, protocol)) == value


def only_decode_errors(data: bytes, protocol: Protocol) -> None:
    limits = bond.BondLimits(max_depth=16, max_container_length=1000)
    for attempt in (
        lambda: bond.read_tree(data, protocol, limits=limits),
        lambda: bond.deserialize(Everything, data, protocol, limits=limits),
        lambda: bond.deserialize(Base, data, protocol, limits=limits),
        lambda: bond.unmarshal(Everything, data, limits=limits),
    ):
        try:
            attempt()
        except bond.BondDecodeError:
            pass


@FUZZ
@given(st.binary(max_size=200), protocols)
def test_random_bytes_only_raise_decode_errors(data: bytes, protocol: Protocol) -> None:
    only_decode_errors(data, protocol)


@FUZZ
@given(everything, protocols, st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), min_size=1, max_size=4))
def test_mutated_payloads_only_raise_decode_errors(
    value: Everything, protocol: Protocol, mutations: list[tuple[int, int]]
) -> None:
    wire = bytearray(bond.serialize(value, protocol))
    for position, byte in mutations:
        wire[position % len(wire)] = byte
    only_decode_errors(bytes(wire), protocol)
    only_decode_errors(bytes(wire[: mutations[0][0] % len(wire)]), protocol)


@pytest.mark.parametrize("protocol", list(Protocol))
@pytest.mark.parametrize("n", [0, -1, None])
def test_a_nullable_holding_zero_is_written_and_null_is_omitted(protocol: Protocol, n: int | None) -> None:
    # Found by test_structs_round_trip: a nullable's default is null, so a
    # nullable holding 0 (falsy, but not null) must be written.
    value = Containers(n=n)
    wire = bond.serialize(value, protocol)
    assert bond.deserialize(Containers, wire, protocol).n == n
    tree = bond.read_tree(wire, protocol)
    assert isinstance(tree, StructValue)
    assert (3 in {field.id for field in tree.fields}) is (n is not None)
