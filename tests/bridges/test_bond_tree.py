"""Schema-less reading: trees, and their JSON form."""

from __future__ import annotations

import json
import math

import pytest
from bond_test_schema import CONTAINERS, SCALARS, Derived

from bridges.epoxy import bond
from bridges.epoxy.bond import BondDataType as BT
from bridges.epoxy.bond import FieldValue, ListValue, MapValue, Protocol, StructValue


@pytest.mark.parametrize("protocol", list(Protocol))
def test_scalars_tree_and_json(protocol: Protocol) -> None:
    tree = bond.read_tree(bond.serialize(SCALARS, protocol), protocol)
    assert [(item.id, item.type) for item in tree.fields][:3] == [(0, BT.BT_BOOL), (1, BT.BT_INT8), (2, BT.BT_INT16)]
    assert bond.to_json(tree) == {
        "0": True,
        "1": -2,
        "2": -300,
        "3": 70000,
        "4": -(2**40),
        "5": 200,
        "6": 300,
        "7": 2**31,
        "8": 2**64 - 1,
        "9": 1.5,
        "10": -0.25,
        "11": "été",
        "12": "hé",  # a wstring is a string
        "300": 2,  # an enum is its int32
    }


@pytest.mark.parametrize("protocol", list(Protocol))
def test_containers_json(protocol: Protocol) -> None:
    tree = bond.read_tree(bond.serialize(CONTAINERS, protocol), protocol)
    assert bond.to_json(tree) == {
        "0": [1, -1],  # list
        "1": ["a", "b"],  # set: an array too
        "2": [[7, True]],  # map: [key, value] pairs
        "3": [5],  # nullable: a list of zero or one
        "4": [0, -1],  # blob: int8 integers, signed
        "5": [[1], []],
        "6": [0, 1, 2, 3, 4, 5, 6],  # list<uint8>: unsigned
    }
    assert tree.get(4) == ListValue(BT.BT_INT8, b"\x00\xff")  # schema-less, a list of int8 is a blob
    assert tree.get(6) == ListValue(BT.BT_UINT8, bytes(range(7)))
    assert tree.get(0) == ListValue(BT.BT_INT16, (1, -1))
    assert tree.get(99) is None


@pytest.mark.parametrize("protocol", list(Protocol))
def test_inheritance_json(protocol: Protocol) -> None:
    tree = bond.read_tree(bond.serialize(Derived(a=1, b=2), protocol), protocol)
    assert tree == StructValue((FieldValue(1, BT.BT_UINT8, 2),), StructValue((FieldValue(1, BT.BT_UINT8, 1),)))
    assert bond.to_json(tree) == {"base": {"1": 1}, "1": 2}
    assert list(bond.to_json(tree)) == ["base", "1"]  # type: ignore[arg-type]  # base first, as on the wire
    assert [level.fields[0].value for level in tree.levels] == [1, 2]


def test_json_of_special_values() -> None:
    tree = StructValue(
        (
            FieldValue(0, BT.BT_DOUBLE, math.nan),
            FieldValue(1, BT.BT_DOUBLE, math.inf),
            FieldValue(2, BT.BT_FLOAT, -math.inf),
            FieldValue(3, BT.BT_MAP, MapValue(BT.BT_STRING, BT.BT_STRUCT, (("k", StructValue()),))),
            FieldValue(3, BT.BT_BOOL, False),  # repeated id: the last one wins in JSON
        )
    )
    as_json = bond.to_json(tree)
    assert as_json == {"0": "NaN", "1": "Infinity", "2": "-Infinity", "3": False}
    json.dumps(as_json, allow_nan=False)  # always valid JSON
    assert tree.get(3) is False


def test_list_value_normalizes_bytes_lists() -> None:
    assert ListValue(BT.BT_INT8, (-1, 0, 127)).items == b"\xff\x00\x7f"
    assert ListValue(BT.BT_UINT8, [255]).items == b"\xff"
    assert ListValue(BT.BT_INT32, [1, 2]).items == (1, 2)
    with pytest.raises(ValueError):
        ListValue(BT.BT_INT8, (200,))
    with pytest.raises(ValueError):
        ListValue(BT.BT_INT32, b"\x01")


@pytest.mark.parametrize("protocol", list(Protocol))
def test_write_tree_round_trip_and_errors(protocol: Protocol) -> None:
    tree = StructValue(
        (
            FieldValue(0, BT.BT_LIST, ListValue(BT.BT_STRUCT, (StructValue(), StructValue(base=StructValue())))),
            FieldValue(1, BT.BT_SET, ListValue(BT.BT_WSTRING, ("x",))),
            FieldValue(500, BT.BT_MAP, MapValue(BT.BT_INT64, BT.BT_LIST, ((-1, ListValue(BT.BT_BOOL, (True,))),))),
        ),
        base=StructValue((FieldValue(7, BT.BT_UINT64, 2**64 - 1),)),
    )
    assert bond.read_tree(bond.write_tree(tree, protocol), protocol) == tree
    for bad in (
        StructValue((FieldValue(0, BT.BT_LIST, 3),)),
        StructValue((FieldValue(0, BT.BT_MAP, ListValue(BT.BT_BOOL)),)),
        StructValue((FieldValue(0, BT.BT_UINT8, 256),)),
        StructValue((FieldValue(0, BT.BT_STRING, 1),)),
        StructValue((FieldValue(0, BT.BT_STOP_BASE, 1),)),
        StructValue((FieldValue(0, BT.BT_STRUCT, 1),)),
    ):
        with pytest.raises(bond.BondEncodeError):
            bond.write_tree(bad, protocol)
