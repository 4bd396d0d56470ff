"""Bond's three binary protocols on small structs whose bytes were worked out by hand.

Each golden vector is annotated field by field from the layouts in Bond's
``compact_binary.h`` and ``fast_binary.h``; ``PROTOCOLS`` lists
Compact v1, Compact v2 and Fast v1 in that order.
"""

from __future__ import annotations

import pytest
from bond_test_schema import (
    CONTAINERS,
    SCALARS,
    Base,
    Color,
    Containers,
    Derived,
    Everything,
    Modifiers,
    Outer,
    Params,
    Scalars,
)

from bridges.epoxy import bond
from bridges.epoxy.bond import Protocol

V1, V2, FAST = Protocol.COMPACT_V1, Protocol.COMPACT_V2, Protocol.FAST
PROTOCOLS = [V1, V2, FAST]


def h(text: str) -> bytes:
    return bytes.fromhex(text)


SCALARS_V1 = h(
    "02 01"  # id 0 bool: type 2 | id 0 << 5; true
    " 2e fe"  # id 1 int8 (14): -2
    " 4f d7 04"  # id 2 int16 (15): zigzag(-300) = 599 = varint d7 04
    " 70 e0 c5 08"  # id 3 int32 (16): zigzag(70000) = 140000
    " 91 ff ff ff ff ff 3f"  # id 4 int64 (17): zigzag(-2**40) = 2**41 - 1
    " a3 c8"  # id 5 uint8 (3): 200
    " c4 06 ac 02"  # id 6 uint16 (4): id > 5 goes in the next byte; 300
    " c5 07 80 80 80 80 08"  # id 7 uint32 (5): 2**31
    " c6 08 ff ff ff ff ff ff ff ff ff 01"  # id 8 uint64 (6): 2**64 - 1, ten bytes
    " c7 09 00 00 c0 3f"  # id 9 float (7): 1.5
    " c8 0a 00 00 00 00 00 00 d0 bf"  # id 10 double (8): -0.25
    " c9 0b 05 c3 a9 74 c3 a9"  # id 11 string (9): 5 UTF-8 bytes "été"
    " d2 0c 02 68 00 e9 00"  # id 12 wstring (18): 2 UTF-16LE code units "hé"
    " f0 2c 01 04"  # id 300 enum as int32: 0xe0 | 16, id as uint16 LE; zigzag(2)
    " 00"  # BT_STOP
)
SCALARS_FAST = h(
    "02 00 00 01"  # type, id as uint16 LE, value
    " 0e 01 00 fe"
    " 0f 02 00 d4 fe"
    " 10 03 00 70 11 01 00"
    " 11 04 00 00 00 00 00 00 ff ff ff"
    " 03 05 00 c8"
    " 04 06 00 2c 01"
    " 05 07 00 00 00 00 80"
    " 06 08 00 ff ff ff ff ff ff ff ff"
    " 07 09 00 00 00 c0 3f"
    " 08 0a 00 00 00 00 00 00 00 d0 bf"
    " 09 0b 00 05 c3 a9 74 c3 a9"
    " 12 0c 00 02 68 00 e9 00"
    " 10 2c 01 02 00 00 00"
    " 00"
)
CONTAINERS_V1 = h(
    "0b 0f 02 02 01"  # id 0 list: item type int16, count 2, zigzag 1 and -1
    " 2c 09 02 01 61 01 62"  # id 1 set<string>: sorted on write, "a" then "b"
    " 4d 03 02 01 07 01"  # id 2 map: key uint8, value bool, 1 pair
    " 6b 10 01 0a"  # id 3 nullable<int32>: a list of one, zigzag(5)
    " 8b 0e 02 00 ff"  # id 4 blob: a list of int8
    " ab 0b 02 05 01 01 05 00"  # id 5 vector<list<uint32>>: [[1], []]
    " cb 06 03 07 00 01 02 03 04 05 06"  # id 6 list<uint8> of 7
    " 00"
)
CONTAINERS_V2 = h(
    "28"  # struct length: the 40 bytes that follow
    " 0b 6f 02 01"  # v2 packs count + 1 = 3 into the type byte's top bits: 0x60 | 0x0f
    " 2c 69 01 61 01 62"
    " 4d 03 02 01 07 01"  # maps are not packed
    " 6b 50 0a"
    " 8b 6e 00 ff"
    " ab 6b 45 01 25"  # nested lists packed too; [] is count 0 + 1 = 1
    " cb 06 03 07 00 01 02 03 04 05 06"  # 7 items do not fit: v1 layout
    " 00"
)
CONTAINERS_FAST = h(
    "0b 00 00 0f 02 01 00 ff ff"
    " 0c 01 00 09 02 01 61 01 62"
    " 0d 02 00 03 02 01 07 01"
    " 0b 03 00 10 01 05 00 00 00"
    " 0b 04 00 0e 02 00 ff"
    " 0b 05 00 0b 02 05 01 01 00 00 00 05 00"
    " 0b 06 00 03 07 00 01 02 03 04 05 06"
    " 00"
)

GOLDEN = [
    (SCALARS, V1, SCALARS_V1),
    (SCALARS, V2, bytes([len(SCALARS_V1)]) + SCALARS_V1),  # v2: the same body, after its length (79)
    (SCALARS, FAST, SCALARS_FAST),
    (CONTAINERS, V1, CONTAINERS_V1),
    (CONTAINERS, V2, CONTAINERS_V2),
    (CONTAINERS, FAST, CONTAINERS_FAST),
    # Inheritance: base fields, BT_STOP_BASE, derived fields, BT_STOP.
    (Derived(a=1, b=2), V1, h("23 01  01  23 02  00")),
    (Derived(a=1, b=2), V2, h("06  23 01  01  23 02  00")),  # one length for the whole hierarchy
    (Derived(a=1, b=2), FAST, h("03 01 00 01  01  03 01 00 02  00")),
    # A nested struct: in v2 it has its own length.
    (Outer(inner=Base(a=1)), V1, h("0a 23 01 00 00")),
    (Outer(inner=Base(a=1)), V2, h("06 0a 03 23 01 00 00")),
    (Outer(inner=Base(a=1)), FAST, h("0a 00 00 03 01 00 01 00 00")),
    # The spec's example payload.
    (Params(x=67, y=87, operation=3), V1, h("30 86 01 50 ae 01 70 06 00")),
]


@pytest.mark.parametrize(("value", "protocol", "wire"), GOLDEN)
def test_golden_serialize(value: bond.Struct, protocol: Protocol, wire: bytes) -> None:
    assert bond.serialize(value, protocol) == wire


@pytest.mark.parametrize(("value", "protocol", "wire"), GOLDEN)
def test_golden_deserialize(value: bond.Struct, protocol: Protocol, wire: bytes) -> None:
    assert bond.deserialize(type(value), wire, protocol) == value


def test_scalars_decode_to_python_types() -> None:
    value = bond.deserialize(Scalars, SCALARS_FAST, FAST)
    assert value.e is Color.BLUE
    assert type(value.f) is float and type(value.b) is bool


def test_defaults_are_omitted_and_restored() -> None:
    for protocol, empty in ((V1, h("00")), (V2, h("01 00")), (FAST, h("00"))):
        assert bond.serialize(Params(), protocol) == empty
        assert bond.serialize(Params(x=0, y=0, operation=0), protocol) == empty
        assert bond.deserialize(Params, empty, protocol) == Params()
    # A field equal to a non-zero default is omitted; zero then is not.
    assert bond.serialize(Modifiers(opt=7, req=0, req_opt=0), V1) == h("25 00 45 00 ca 06 00 00")
    assert bond.serialize(Modifiers(opt=0, req=0, req_opt=0), V1) == h("05 00 25 00 45 00 ca 06 00 00")


def test_modifiers_and_nothing() -> None:
    # required and required_optional are always written; a struct field too
    # (structs have no default); "nothing" is omitted until set, then
    # written even when it is 0.
    assert bond.serialize(Modifiers(), FAST) == h("05 01 00 00 00 00 00  05 02 00 00 00 00 00  0a 06 00 00  00")
    assert bond.serialize(Modifiers(maybe=0), FAST) == h(
        "05 01 00 00 00 00 00  05 02 00 00 00 00 00  05 03 00 00 00 00 00  0a 06 00 00  00"
    )
    assert bond.deserialize(Modifiers, h("25 00 00"), V1) == Modifiers()
    assert bond.deserialize(Modifiers, h("25 00 00"), V1).maybe is None


def test_missing_required_field_is_a_clear_error() -> None:
    with pytest.raises(bond.BondRequiredFieldError, match=r"Modifiers\.req \(id 1\)") as caught:
        bond.deserialize(Modifiers, h("45 00 00"), V1)
    assert (caught.value.struct_name, caught.value.field_name, caught.value.field_id) == ("Modifiers", "req", 1)
    # required_optional may be missing.
    assert bond.deserialize(Modifiers, h("25 05 00"), V1).req == 5


def test_missing_required_field_of_a_missing_level() -> None:
    class RequiredChild(Base):
        c: int = bond.field(0, bond.UINT8, modifier=bond.Modifier.REQUIRED)

    with pytest.raises(bond.BondRequiredFieldError, match="RequiredChild.c"):
        bond.deserialize(RequiredChild, bond.serialize(Base(a=1), FAST), FAST)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_unknown_fields_of_every_type_are_skipped(protocol: Protocol) -> None:
    class OnlyTheLast(bond.Struct):
        wide_id: int = bond.field(0xFFFF, bond.INT64)

    everything = Everything(
        scalars=SCALARS,
        containers=CONTAINERS,
        derived=Derived(a=1, b=2),
        structs=[Base(a=3), Base(a=4)],
        maps={"k": [Base(a=5)], "": []},
        bonded=bond.Bonded(Derived(a=6, b=7)),
        nested=Outer(inner=Base(a=8)),
        sets={1.5, -2.0},
        blobs=[b"", b"ab"],
        wide_id=-9,
    )
    wire = bond.serialize(everything, protocol)
    assert bond.deserialize(OnlyTheLast, wire, protocol) == OnlyTheLast(wide_id=-9)
    assert bond.deserialize(Everything, wire, protocol) == everything


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_derived_data_read_as_its_base_and_base_data_as_derived(protocol: Protocol) -> None:
    # The derived level is skipped; a missing level keeps its defaults.
    assert bond.deserialize(Base, bond.serialize(Derived(a=1, b=2), protocol), protocol) == Base(a=1)
    assert bond.deserialize(Derived, bond.serialize(Base(a=1), protocol), protocol) == Derived(a=1, b=0)


def test_widening_on_read_and_mismatch() -> None:
    class Narrow(bond.Struct):
        value: int = bond.field(0, bond.INT8)
        real: float = bond.field(1, bond.FLOAT)

    class Wide(bond.Struct):
        value: int = bond.field(0, bond.INT64)
        real: float = bond.field(1, bond.DOUBLE)

    class Text(bond.Struct):
        value: str = bond.field(0, bond.STRING)

    for protocol in PROTOCOLS:
        wire = bond.serialize(Narrow(value=-5, real=0.5), protocol)
        assert bond.deserialize(Wide, wire, protocol) == Wide(value=-5, real=0.5)
        with pytest.raises(bond.BondDecodeError, match=r"Text\.value \(id 0\) is a string, found BT_INT8"):
            bond.deserialize(Text, wire, protocol)
        with pytest.raises(bond.BondDecodeError, match="is a int8, found BT_INT64"):
            bond.deserialize(Narrow, bond.serialize(Wide(value=1), protocol), protocol)


def test_unknown_enum_values_are_kept_as_ints() -> None:
    value = bond.deserialize(Params, h("70 0e 00"), V1)  # operation = 7
    assert value.operation == 7 and not isinstance(value.operation, Params.__bond_fields__[2].type.enum_class)  # type: ignore[attr-defined]
    assert bond.serialize(value, V1) == h("70 0e 00")


def test_trailing_bytes_and_deserialize_from() -> None:
    wire = bond.serialize(Params(x=1), V1) + b"rest"
    with pytest.raises(bond.BondDecodeError, match="4 bytes follow the Params"):
        bond.deserialize(Params, wire, V1)
    assert bond.deserialize_from(Params, wire, V1) == (Params(x=1), len(wire) - 4)
    assert bond.deserialize_from(Params, b"xx" + wire, V1, 2) == (Params(x=1), len(wire) - 2)


@pytest.mark.parametrize(("value", "protocol", "wire"), GOLDEN)
def test_every_truncation_is_a_decode_error(value: bond.Struct, protocol: Protocol, wire: bytes) -> None:
    for end in range(len(wire)):
        with pytest.raises(bond.BondDecodeError):
            bond.deserialize(type(value), wire[:end], protocol)
        with pytest.raises(bond.BondDecodeError):
            bond.read_tree(wire[:end], protocol)


def test_inputs_other_than_bytes() -> None:
    assert bond.deserialize(Scalars, bytearray(SCALARS_FAST), FAST) == SCALARS
    assert bond.deserialize(Scalars, memoryview(b"--" + SCALARS_FAST)[2:], FAST) == SCALARS


# ---- malformed input ------------------------------------------------------------


class Empty(bond.Struct):
    """Knows no field: reading into it skips everything."""


@pytest.mark.parametrize(
    ("protocol", "wire", "message"),
    [
        (V1, h("c9 0b 7f 61 00"), "string of 127 bytes"),
        (V1, h("d2 0c 05 61 00 00"), "wstring of 5 code units"),
        (V1, h("0b 0f ff ff ff ff 0f 00"), "of 4294967295 items"),  # count checked before anything is allocated
        (V1, h("0b 0f 80 80 80 80 10 00"), "does not fit 32 bits"),
        (V1, h("c6 08 ff ff ff ff ff ff ff ff ff ff 01 00"), "longer than 10 bytes"),
        (V1, h("c6 08 ff ff ff ff ff ff ff ff ff 02 00"), "does not fit 64 bits"),
        (V1, h("0b 13 01 00 00"), "wire type 19"),
        (V1, h("13 00"), "wire type 19"),
        (V2, h("05 02 01 00"), "struct of 5 bytes"),
        (V2, h("02 02 01 00 00"), "struct ends at offset 4, its length prefix says 3"),
        (FAST, h("0b 00 00 10 03 00 00 00 00"), "3 BT_INT32 items"),
        (FAST, h("08 00 00 00 00"), "truncated"),
    ],
)
def test_malformed_wire(protocol: Protocol, wire: bytes, message: str) -> None:
    with pytest.raises(bond.BondDecodeError, match=message):
        bond.read_tree(wire, protocol)
    with pytest.raises(bond.BondDecodeError):
        bond.deserialize(Empty, wire, protocol)


@pytest.mark.parametrize(
    ("wire", "message"),
    [
        (h("8b 10 01 02 00"), "blob of BT_INT32"),
        (h("6b 10 02 02 04 00"), "holding 2 values"),
        (h("0b 09 01 00 00"), r"int16 items found as BT_STRING"),
        (h("4d 09 02 01 00 01 00"), r"map<uint8, bool> found as map<BT_STRING, BT_BOOL>"),
    ],
)
def test_wire_that_does_not_fit_the_schema(wire: bytes, message: str) -> None:
    assert bond.read_tree(wire, V1) is not None  # fine without a schema
    with pytest.raises(bond.BondDecodeError, match=message):
        bond.deserialize(Containers, wire, V1)


def test_limits() -> None:
    deep = h("0b" + "0b 01" * 10 + "0b 00" + "00")  # id 0: a list of a list of ... 12 levels
    limits = bond.BondLimits(max_depth=8)
    with pytest.raises(bond.BondLimitError, match="deeper than 8"):
        bond.read_tree(deep, V1, limits=limits)
    assert bond.read_tree(deep, V1) is not None
    with pytest.raises(bond.BondLimitError, match="exceeds the limit of 2"):
        bond.deserialize(Containers, CONTAINERS_V1, V1, limits=bond.BondLimits(max_container_length=2))
    with pytest.raises(bond.BondLimitError, match="input of 9 bytes"):
        bond.deserialize(Params, bond.serialize(Params(x=67, y=87, operation=3)), limits=bond.BondLimits(max_size=8))
    with pytest.raises(ValueError):
        bond.BondLimits(max_depth=0)


def test_a_deep_struct_nesting_is_a_limit_error_not_a_recursion_error() -> None:
    wire = h("0a" * 5000 + "00" * 5001)  # field 0 of type struct, 5000 deep
    with pytest.raises(bond.BondLimitError):
        bond.read_tree(wire, V1)
    with pytest.raises(bond.BondLimitError):
        bond.deserialize(Outer, wire, V1)


# ---- encoding errors ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (Scalars(i8=128), "128 is out of range for BT_INT8"),
        (Scalars(u64=-1), "out of range for BT_UINT64"),
        (Scalars(i32="1"), "must be an int"),
        (Scalars(b=1), "bool value must be a bool"),
        (Scalars(s="\ud800"), "not encodable as UTF-8"),
        (Scalars(f=1e300), "Scalars"),
        (Containers(l=[1, 2**20]), "out of range for BT_INT16"),
        (Containers(s={"a", 1}), "not comparable|must be a str"),
        (Containers(blob="text"), "blob value must be bytes"),
        (Containers(m=[1]), "must be a dict"),
        (Outer(inner=Params()), "expected a Base, got Params"),
    ],
)
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_encode_errors(value: bond.Struct, message: str, protocol: Protocol) -> None:
    with pytest.raises(bond.BondEncodeError, match=message):
        bond.serialize(value, protocol)


def test_lone_surrogates_are_fine_in_a_wstring() -> None:
    for protocol in PROTOCOLS:
        wire = bond.serialize(Scalars(w="a\udc00"), protocol)
        assert bond.deserialize(Scalars, wire, protocol).w == "a\udc00"


def test_skipped_strings_are_not_decoded() -> None:
    class Nothing(bond.Struct):
        pass

    bad_utf8 = h("c9 0b 02 c3 28 00")  # field 11: the bytes c3 28 are not UTF-8
    assert bond.deserialize(Nothing, bad_utf8, V1) == Nothing()
    with pytest.raises(bond.BondDecodeError, match="not UTF-8"):
        bond.deserialize(Scalars, bad_utf8, V1)
    with pytest.raises(bond.BondDecodeError, match="string at offset 3 is not UTF-8"):
        bond.read_tree(bad_utf8, V1)
    with pytest.raises(bond.BondDecodeError, match="BT_WSTRING of 4 bytes"):
        bond.deserialize(Nothing, h("d2 0c 02 61 00"), V1)


def test_the_container_limit_spares_blobs_and_holds_skipped_data() -> None:
    class Nothing(bond.Struct):
        pass

    limits = bond.BondLimits(max_container_length=4)
    wire = bond.serialize(Containers(blob=bytes(100), l=[1] * 4), V1)
    assert bond.deserialize(Nothing, wire, V1, limits=limits) == Nothing()  # a skipped blob: no limit
    wire = bond.serialize(Containers(blob=bytes(100), l=[1] * 5), V1)
    with pytest.raises(bond.BondLimitError, match="list of 5 items exceeds the limit of 4"):
        bond.deserialize(Nothing, wire, V1, limits=limits)  # skipped, as long as decoded
    with pytest.raises(bond.BondLimitError, match="list<int16> of 5 items"):
        bond.deserialize(Containers, wire, V1, limits=limits)
    wire = bond.serialize(Containers(blob=bytes(100)), V1)
    assert bond.deserialize(Containers, wire, V1, limits=limits).blob == bytes(100)
    assert bond.read_tree(wire, V1, limits=limits).get(4) == bond.ListValue(bond.BondDataType.BT_INT8, bytes(100))


class Blobs(bond.Struct):
    items: list[bytes] = bond.field(0, bond.list_of(bond.BLOB))
    maybe: bytes | None = bond.field(1, bond.nullable(bond.BLOB))


@pytest.mark.parametrize("protocol", [V1, V2, FAST])
def test_a_list_of_blobs_round_trips(protocol: Protocol) -> None:
    # Each item of a list<blob> is read and written in one loop (rstreams'
    # Elements response): what goes in comes out, empty and large items too.
    value = Blobs(items=[b"", b"a", bytes(range(256)) * 2, bytearray(b"xy"), memoryview(b"z")], maybe=b"m")
    back = bond.deserialize(Blobs, bond.serialize(value, protocol), protocol)
    assert back.items == [b"", b"a", bytes(range(256)) * 2, b"xy", b"z"]
    assert all(type(item) is bytes for item in back.items) and back.maybe == b"m"
    with pytest.raises(bond.BondEncodeError, match="blob value must be bytes, got str"):
        bond.serialize(Blobs(items=[b"a", "b"]), protocol)  # type: ignore[list-item]


@pytest.mark.parametrize(
    ("wire", "error", "message"),
    [
        # list<blob> of 2: "a", then a blob of int32 items.
        (h("0b 0b 02 0e 01 61 10 01 02 00"), bond.BondDecodeError, "blob of BT_INT32"),
        # list<blob> of 2: "a", then a blob of 5 bytes with 2 left.
        (h("0b 0b 02 0e 01 61 0e 05 62 00"), bond.BondDecodeError, "blob of 5 items at offset 8, 2 bytes left"),
        # list<blob> of 3 whose third item is cut off.
        (h("0b 0b 03 0e 01 61 0e 00"), bond.BondDecodeError, "truncated"),
    ],
)
def test_a_list_of_blobs_is_checked_item_by_item(wire: bytes, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        bond.deserialize(Blobs, wire, V1)


def test_a_list_of_blobs_counts_its_items_one_level_deeper() -> None:
    wire = bond.serialize(Blobs(items=[b"a"]), V1)
    assert bond.deserialize(Blobs, wire, V1, limits=bond.BondLimits(max_depth=3)).items == [b"a"]
    with pytest.raises(bond.BondLimitError, match="deeper than 2"):
        bond.deserialize(Blobs, wire, V1, limits=bond.BondLimits(max_depth=2))
    # An empty list has no item level.
    assert bond.deserialize(Blobs, bond.serialize(Blobs(items=[]), V1), V1, limits=bond.BondLimits(max_depth=2)).items == []
