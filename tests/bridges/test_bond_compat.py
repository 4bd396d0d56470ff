"""Bond's own golden data: one object, serialized by Bond in three protocols and in JSON.

``tests/data/bond-compat/compat.{compact,compact2,fast}.dat`` are the same
``unittest.compat.Compat`` object written by Bond's C++ implementation in
Compact Binary v1, Compact Binary v2 and Fast Binary v1, and
``compat.json.dat`` is (almost) that object in Bond's Simple JSON. We must
read each binary file to its end, find the three equal, write each one back
byte for byte, and agree with the JSON.

The JSON is not quite the same object. Bond's generator
(``cpp/test/compat/core/serialization.cpp``) fills the object from a
seeded random reader (``cpp/inc/bond/protocol/random_protocol.h``) that,
for the JSON test only, shifts every random uint64 right by one bit
(``value >>= 1``, because the C# JSON library it was checked against
cannot hold numbers above the int64 maximum). The same seed gives the same
sequence otherwise, so every random uint64 of the JSON is the binary value
halved. Not every uint64 is random: ``m_defaults`` is an all-default
``Compat`` (only its enums are then randomized), so its uint64 defaults
(``m_uint64 = 10``) are the same in both.
And for every test but JSON, the generator then appends 23 "interesting"
constants to ``l_uint64`` (-1, 0, 1, ..., 9, SCHAR_MAX, SCHAR_MIN,
UCHAR_MAX, SHRT_MIN, SHRT_MAX, USHRT_MAX, INT_MIN, INT_MAX, UINT_MAX,
LLONG_MAX, LLONG_MIN, ULLONG_MAX, each cast to uint64); the JSON's
``l_uint64`` lacks them. :func:`check_json` accounts for both, explicitly.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import pytest
from bond_compat_schema import Compat, Containers

from bridges.epoxy import bond
from bridges.epoxy.bond._schema import Struct
from bridges.epoxy.bond._types import (
    BLOB_KIND,
    BONDED,
    ENUM,
    LIST,
    MAP,
    NULLABLE,
    SCALAR,
    SET,
    STRUCT,
    BondType,
)

DATA = Path(__file__).resolve().parents[1] / "data" / "bond-compat"
FILES = {
    bond.Protocol.COMPACT_V1: "compat.compact.dat",
    bond.Protocol.COMPACT_V2: "compat.compact2.dat",
    bond.Protocol.FAST: "compat.fast.dat",
}
U64 = (1 << 64) - 1
# The constants serialization.cpp appends to l_uint64 (but not for JSON),
# each cast to uint64 as C++ does.
EXTRA_UINT64 = [
    v & U64
    for v in [-1, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9]
    + [127, -128, 255, -32768, 32767, 65535, -(2**31), 2**31 - 1, 2**32 - 1, 2**63 - 1, -(2**63), U64]
]


@pytest.fixture(scope="module")
def raw() -> dict[bond.Protocol, bytes]:
    return {protocol: (DATA / name).read_bytes() for protocol, name in FILES.items()}


@pytest.fixture(scope="module")
def decoded(raw: dict[bond.Protocol, bytes]) -> dict[bond.Protocol, Compat]:
    # deserialize() insists that the struct ends exactly at the end of the file.
    return {protocol: bond.deserialize(Compat, data, protocol) for protocol, data in raw.items()}


def test_the_three_files_decode_to_the_end_and_are_equal(decoded: dict[bond.Protocol, Compat]) -> None:
    compact, compact2, fast = decoded.values()
    assert compact == compact2
    assert compact == fast
    # The equality is not vacuous: the object is full of data.
    assert len(compact.m_containers.l_int16) == 44 + 65536  # random items, then the whole int16 range
    assert compact.m_basicTypes.m_str.startswith("Arabic: ")


def test_the_binary_l_uint64_ends_with_the_23_constants(decoded: dict[bond.Protocol, Compat]) -> None:
    assert decoded[bond.Protocol.FAST].m_containers.l_uint64[-23:] == EXTRA_UINT64


@pytest.mark.parametrize("protocol", list(FILES))
def test_reserializing_gives_the_same_bytes(
    protocol: bond.Protocol, raw: dict[bond.Protocol, bytes], decoded: dict[bond.Protocol, Compat]
) -> None:
    assert bond.serialize(decoded[protocol], protocol) == raw[protocol]


@pytest.mark.parametrize("source", list(FILES))
@pytest.mark.parametrize("target", list(FILES))
def test_any_decoded_copy_serializes_to_any_file(
    source: bond.Protocol, target: bond.Protocol, raw: dict[bond.Protocol, bytes], decoded: dict[bond.Protocol, Compat]
) -> None:
    # The bonded field (m_basicUnintialized) is copied when the protocols
    # match and transcoded otherwise; both give Bond's bytes.
    assert bond.serialize(decoded[source], target) == raw[target]


def test_schemaless_trees_are_equal_and_write_back(raw: dict[bond.Protocol, bytes]) -> None:
    trees = {protocol: bond.read_tree(data, protocol) for protocol, data in raw.items()}
    compact, compact2, fast = trees.values()
    assert compact == compact2 == fast
    assert bond.to_json(compact) == bond.to_json(fast)
    for source, tree in trees.items():
        for target, data in raw.items():
            assert bond.write_tree(tree, target) == data, (source, target)


def test_schemaless_tree_agrees_with_the_schema(raw: dict[bond.Protocol, bytes], decoded: dict[bond.Protocol, Compat]) -> None:
    tree = bond.read_tree(raw[bond.Protocol.FAST], bond.Protocol.FAST)
    obj = decoded[bond.Protocol.FAST]
    as_json = bond.to_json(tree)
    assert isinstance(as_json, dict)
    # Compat : WithBase : BasicTypes : Another, base-most first on the wire.
    another = as_json["base"]["base"]["base"]  # type: ignore[index, call-overload]
    assert another == {"10": obj.d}
    basic = as_json["base"]["base"]  # type: ignore[index, call-overload]
    assert basic["2"] == obj.m_str and basic["3"] == obj.m_wstr
    assert as_json["base"] == {"base": basic}  # type: ignore[index]  # WithBase has no fields
    containers = as_json["1"]  # type: ignore[index]
    # A blob is a list of int8: integers, signed, as in Bond's JSON.
    assert containers["90"] == [b - 256 if b > 127 else b for b in obj.m_containers.m_blob]  # type: ignore[index, call-overload]
    assert containers["2"] == obj.m_containers.l_int8  # type: ignore[index, call-overload]
    # Maps are [key, value] pairs.
    assert containers["41"] == [[k, v] for k, v in obj.m_containers.m_str.items()]  # type: ignore[index, call-overload]


# ---- the JSON file -------------------------------------------------------------


def check_json(field_type: BondType, ours: Any, theirs: Any, path: str) -> None:
    """Assert that a decoded value matches Bond's Simple JSON of it.

    Simple JSON flattens base fields into the object, names fields (with
    ``JsonName`` where given; our attribute names are those), writes nullables
    as ``null`` or ``[value]``, maps as flat ``[k1, v1, k2, v2, ...]``
    arrays, blobs as arrays of int8, sets in order, and omits only fields set
    to ``nothing``.
    """
    kind = field_type.kind
    if kind == SCALAR:
        if field_type.wire == bond.BondDataType.BT_UINT64 and ".m_defaults" not in path:
            ours >>= 1  # random_protocol.h halves random uint64s for the JSON test
        if field_type.wire == bond.BondDataType.BT_FLOAT:
            # A float32 printed as a decimal: compare as float32.
            assert struct.pack("<f", ours) == struct.pack("<f", theirs), path
        else:
            assert type(ours) is type(theirs) or isinstance(ours, float), path
            assert ours == theirs, path
    elif kind == ENUM:
        assert int(ours) == theirs, path
    elif kind == BLOB_KIND:
        assert [b - 256 if b > 127 else b for b in ours] == theirs, path
    elif kind == NULLABLE:
        if ours is None:
            assert theirs is None, path
        else:
            assert isinstance(theirs, list) and len(theirs) == 1, path
            check_json(field_type.element, ours, theirs[0], path + "[0]")  # type: ignore[attr-defined]
    elif kind in (LIST, SET):
        items = sorted(ours) if kind == SET else ours
        if path == "Compat.m_containers.l_uint64":
            assert items[-23:] == EXTRA_UINT64, path
            items = items[:-23]  # appended for the binary tests only
        assert isinstance(theirs, list) and len(items) == len(theirs), path
        for index, (mine, other) in enumerate(zip(items, theirs)):
            check_json(field_type.element, mine, other, f"{path}[{index}]")  # type: ignore[attr-defined]
    elif kind == MAP:
        assert isinstance(theirs, list) and len(theirs) == 2 * len(ours), path
        for index, (key, value) in enumerate(ours.items()):
            check_json(field_type.key, key, theirs[2 * index], f"{path}.key{index}")  # type: ignore[attr-defined]
            check_json(field_type.value, value, theirs[2 * index + 1], f"{path}[{key!r}]")  # type: ignore[attr-defined]
    elif kind == BONDED:
        check_struct_json(ours.value, theirs, path)
    else:
        assert kind == STRUCT
        check_struct_json(ours, theirs, path)


def check_struct_json(obj: Struct, theirs: Any, path: str) -> None:
    assert isinstance(theirs, dict), path
    present = set()
    for level in type(obj).__bond_levels__:
        for info in level.fields:
            value = getattr(obj, info.name)
            if value is None and info.omit == 3:  # = nothing, and nothing: absent from JSON
                assert info.name not in theirs, f"{path}.{info.name}"
                continue
            present.add(info.name)
            check_json(info.type, value, theirs[info.name], f"{path}.{info.name}")
    assert present == set(theirs), path


def test_the_json_file_is_the_same_object_with_halved_uint64s(decoded: dict[bond.Protocol, Compat]) -> None:
    theirs = json.loads((DATA / "compat.json.dat").read_text(encoding="utf-8"))
    check_struct_json(decoded[bond.Protocol.COMPACT_V1], theirs, "Compat")


def test_the_json_check_would_notice_a_difference(decoded: dict[bond.Protocol, Compat]) -> None:
    theirs = json.loads((DATA / "compat.json.dat").read_text(encoding="utf-8"))
    theirs["m_containers"]["l_uint64"][0] += 1
    with pytest.raises(AssertionError, match="l_uint64"):
        check_struct_json(decoded[bond.Protocol.COMPACT_V1], theirs, "Compat")
    theirs = json.loads((DATA / "compat.json.dat").read_text(encoding="utf-8"))
    theirs["m_basicTypes"]["m_uint64"] = decoded[bond.Protocol.FAST].m_basicTypes.m_uint64  # not halved
    with pytest.raises(AssertionError, match="m_uint64"):
        check_struct_json(decoded[bond.Protocol.COMPACT_V1], theirs, "Compat")


def test_containers_schema_covers_the_file(decoded: dict[bond.Protocol, Compat]) -> None:
    # Every field of the file is known to our schema: a tree of the binary
    # has no field id that Containers lacks.
    tree = bond.read_tree(bond.serialize(decoded[bond.Protocol.FAST].m_containers, bond.Protocol.FAST), bond.Protocol.FAST)
    assert {item.id for item in tree.fields} <= {info.id for info in Containers.__bond_fields__}
