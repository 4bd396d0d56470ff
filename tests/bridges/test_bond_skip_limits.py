"""What skipping unknown data may cost the Bond readers, and writing in steps.

Skipped values make nothing, so they had no bound but the input's bytes:
an unknown field of a million empty structs was a million steps of the
reader (seconds, for one Epoxy framelet). Now every skipped container is
held to ``max_container_length`` like a decoded one, and all the values an
input makes the reader skip are charged to ``max_skipped_items``, a
container its whole count as soon as its header is read. Blobs and lists of
fixed-size numbers are jumped over in one step and charged nothing.

``marshal_steps`` writes exactly ``marshal``'s bytes, a chunk of a list's
items per step.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bridges.epoxy import bond
from bridges.epoxy.bond import Protocol
from bridges.epoxy.bond._reader import Reader

V1, V2, FAST = Protocol.COMPACT_V1, Protocol.COMPACT_V2, Protocol.FAST
STRUCT, LIST, MAP, INT32, DOUBLE, INT8 = 10, 11, 13, 16, 8, 14


class Nothing(bond.Struct):
    pass


class Named(bond.Struct):
    name: str = bond.field(0, bond.STRING)


class Blobs(bond.Struct):
    items: list[bytes] = bond.field(0, bond.list_of(bond.BLOB))


class Numbers(bond.Struct):
    values: set[int] = bond.field(0, bond.set_of(bond.INT32))


def varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | 0x80 if value else byte)
        if not value:
            return bytes(out)


def unknown_field(item_wire: int, count: int, items: bytes) -> bytes:
    """Compact v1 of ``Named(name="x")`` plus an unknown field 5: a list."""
    return bond.serialize(Named(name="x"))[:-1] + bytes([5 << 5 | LIST, item_wire]) + varint(count) + items + b"\x00"


def limits(**kwargs: int) -> bond.BondLimits:
    return bond.BondLimits(**kwargs)


def test_skipped_values_are_charged_to_a_budget_per_input() -> None:
    # The unknown field costs one, its list one per item.
    wire = unknown_field(STRUCT, 9, b"\x00" * 9)
    assert bond.deserialize(Named, wire, V1, limits=limits(max_skipped_items=10)).name == "x"
    wire = unknown_field(STRUCT, 10, b"\x00" * 10)
    with pytest.raises(bond.BondLimitError, match="skipping more than 10 values"):
        bond.deserialize(Named, wire, V1, limits=limits(max_skipped_items=10))
    # The fields inside skipped structs count too: 1 + 2 structs + 2 fields.
    wire = unknown_field(STRUCT, 2, b"\x10\x02\x00" * 2)
    assert bond.deserialize(Named, wire, V1, limits=limits(max_skipped_items=5)).name == "x"
    with pytest.raises(bond.BondLimitError, match="skipping more than 4 values"):
        bond.deserialize(Named, wire, V1, limits=limits(max_skipped_items=4))
    # A map: two per pair.
    wire = bond.serialize(Named(name="x"))[:-1] + bytes([5 << 5 | MAP, INT32, INT32, 2, 2, 4, 6, 8]) + b"\x00"
    assert bond.deserialize(Named, wire, V1, limits=limits(max_skipped_items=5)).name == "x"
    with pytest.raises(bond.BondLimitError):
        bond.deserialize(Named, wire, V1, limits=limits(max_skipped_items=4))


def test_a_huge_skipped_list_fails_at_its_header() -> None:
    # A million empty structs: refused before the first is walked (the
    # offset in the message is the header's, not the end's).
    wire = unknown_field(STRUCT, 1_000_000, b"\x00" * 1_000_000)
    with pytest.raises(bond.BondLimitError, match=r"skipping more than 16384 values \(at offset 8\)"):
        bond.deserialize(Named, wire, V1)
    with pytest.raises(bond.BondLimitError, match=r"skipping more than 16384 values"):
        bond.unmarshal(Named, bond.marshal_header() + wire)


def test_skipped_containers_have_the_decoded_ones_length_limit() -> None:
    wire = unknown_field(INT32, 5, b"\x02" * 5)
    assert bond.deserialize(Named, wire, V1, limits=limits(max_container_length=5)).name == "x"
    with pytest.raises(bond.BondLimitError, match="list of 5 items exceeds the limit of 4"):
        bond.deserialize(Named, wire, V1, limits=limits(max_container_length=4))


@pytest.mark.parametrize("item_wire", [INT8, DOUBLE])
def test_blobs_and_fixed_size_lists_are_jumped_over_free(item_wire: int) -> None:
    size = 8 if item_wire == DOUBLE else 1
    wire = unknown_field(item_wire, 1000, bytes(1000 * size))
    assert bond.deserialize(Named, wire, V1, limits=limits(max_skipped_items=1)).name == "x"


def test_fast_binary_jumps_over_every_fixed_size_number() -> None:
    wire = bytearray(bond.serialize(Named(name="x"), FAST))
    wire[-1:] = bytes([LIST]) + (5).to_bytes(2, "little") + bytes([INT32]) + varint(1000) + bytes(4000) + b"\x00"
    assert bond.deserialize(Named, bytes(wire), FAST, limits=limits(max_skipped_items=1)).name == "x"


def test_compact_v2_skips_a_struct_by_its_length() -> None:
    # Its length prefix is jumped: 100,000 bytes that v1 would walk as
    # 100,000 values are charged one.
    wire = bond.serialize(Named(name="x"), V2)
    assert wire[0] == len(wire) - 1
    inner = varint(100_000) + b"\x00" * 100_000
    body = wire[1:-1] + bytes([5 << 5 | STRUCT]) + inner + b"\x00"
    decoded = bond.deserialize(Named, varint(len(body)) + body, V2, limits=limits(max_skipped_items=1))
    assert decoded.name == "x"


# ---- fuzzing: any bytes give a value or a typed error, within the budget ----

FUZZ = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
BUDGET = 64


class _Counting:
    # Counts the values the reader walks while skipping (every skip_value
    # call), through the class attribute, for the duration of one decode.
    def __init__(self) -> None:
        self.walked = 0
        self.original = Reader.skip_value

    def __enter__(self) -> _Counting:
        original = self.original

        def counted(reader: Reader, wire: int) -> None:
            self.walked += 1
            original(reader, wire)

        Reader.skip_value = counted  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc_info: object) -> None:
        Reader.skip_value = self.original  # type: ignore[method-assign]


def decode_within_budget(data: bytes, protocol: Protocol) -> None:
    bounds = limits(max_depth=16, max_container_length=100_000, max_skipped_items=BUDGET)
    attempts: list[Any] = [
        lambda: bond.deserialize(Nothing, data, protocol, limits=bounds),
        lambda: bond.deserialize(Named, data, protocol, limits=bounds),
        lambda: bond.unmarshal(Nothing, data, limits=bounds),
    ]
    for attempt in attempts:
        with _Counting() as counting:
            try:
                attempt()
            except bond.BondDecodeError:
                pass
        assert counting.walked <= BUDGET


@FUZZ
@given(st.binary(max_size=300), st.sampled_from(list(Protocol)))
def test_random_bytes_skip_within_the_budget(data: bytes, protocol: Protocol) -> None:
    decode_within_budget(data, protocol)


@FUZZ
@given(
    st.sampled_from([STRUCT, LIST, MAP, INT32, 9, 7]),
    st.integers(0, 1 << 31),
    st.binary(max_size=300),
    st.sampled_from(list(Protocol)),
)
def test_unknown_containers_skip_within_the_budget(item_wire: int, count: int, items: bytes, protocol: Protocol) -> None:
    # Unknown fields whose headers claim any count, over any bytes.
    wire = unknown_field(item_wire, count, items)
    decode_within_budget(wire, protocol)
    decode_within_budget(bond.marshal_header() + wire, V1)


# ---- writing in steps ----


@pytest.mark.parametrize("protocol", [V1, V2, FAST])
@pytest.mark.parametrize("count", [0, 1, 6, 7, 8, 21, 1000])
def test_marshal_steps_writes_marshal_s_bytes(protocol: Protocol, count: int) -> None:
    for value in (Blobs(items=[bytes(i % 3) for i in range(count)]), Numbers(values=set(range(-count, count)))):
        steps = bond.marshal_steps(value, protocol, items_per_step=7)
        yields = 0
        while True:
            try:
                next(steps)
            except StopIteration as done:
                data = done.value
                break
            yields += 1
        assert data == bond.marshal(value, protocol)
        items = count if isinstance(value, Blobs) else 2 * count
        # One step per chunk of 7 items, for a list longer than one chunk.
        assert yields == (-(-items // 7) if items > 7 else 0)


def test_marshal_steps_raises_encode_errors_and_checks_its_step() -> None:
    with pytest.raises(bond.BondEncodeError, match="Blobs.items: blob value must be bytes"):
        for _ in bond.marshal_steps(Blobs(items=[b"a"] * 10 + ["b"]), items_per_step=4):  # type: ignore[list-item]
            pass
    with pytest.raises(ValueError, match="items_per_step"):
        next(bond.marshal_steps(Blobs(), items_per_step=0))
