"""ElementBatch: list and packed batches behave as the same immutable sequence."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from rstreams.protocol import ElementBatch

PACKED = bytes(range(12))
AS_LIST = [PACKED[0:3], PACKED[3:6], PACKED[6:9], PACKED[9:12]]


def packed_batch() -> ElementBatch:
    return ElementBatch(packed=PACKED, element_size=3)


def list_batch() -> ElementBatch:
    return ElementBatch(list(AS_LIST))


BATCHES = [packed_batch, list_batch]


def test_list_batch() -> None:
    batch = list_batch()
    assert batch.packed is None
    assert batch.items == AS_LIST
    assert batch.element_size == 0
    assert len(batch) == 4
    assert batch.nbytes == 12


def test_packed_batch() -> None:
    batch = packed_batch()
    assert batch.packed == PACKED
    assert batch.items is None
    assert batch.element_size == 3
    assert len(batch) == 4
    assert batch.nbytes == 12


@pytest.mark.parametrize("make", BATCHES, ids=["packed", "list"])
def test_batches_are_sequences_of_bytes(make) -> None:  # type: ignore[no-untyped-def]
    batch = make()
    assert isinstance(batch, Sequence)
    assert list(batch) == AS_LIST
    assert batch.tolist() == AS_LIST
    assert all(type(element) is bytes for element in batch)
    assert batch[0] == AS_LIST[0]
    assert batch[-1] == AS_LIST[-1]
    assert batch[-4] == AS_LIST[0]
    assert AS_LIST[2] in batch
    assert batch.index(AS_LIST[1]) == 1


@pytest.mark.parametrize("make", BATCHES, ids=["packed", "list"])
@pytest.mark.parametrize("index", [4, -5, 100])
def test_index_out_of_range(make, index: int) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(IndexError):
        make()[index]


@pytest.mark.parametrize("make", BATCHES, ids=["packed", "list"])
@pytest.mark.parametrize(
    "key",
    [
        slice(1, 3),
        slice(None),
        slice(2, None),
        slice(None, -1),
        slice(3, 1),
        slice(0, 100),
        slice(None, None, 2),
        slice(None, None, -1),
    ],
    ids=["1:3", ":", "2:", ":-1", "3:1 empty", "0:100", "::2", "::-1"],
)
def test_slicing_matches_a_list(make, key: slice) -> None:  # type: ignore[no-untyped-def]
    sliced = make()[key]
    assert isinstance(sliced, ElementBatch)
    assert sliced.tolist() == AS_LIST[key]
    assert len(sliced) == len(AS_LIST[key])


def test_contiguous_slice_of_a_packed_batch_stays_packed() -> None:
    sliced = packed_batch()[1:3]
    assert sliced.packed == PACKED[3:9]
    assert sliced.element_size == 3


def test_batches_with_the_same_elements_are_equal() -> None:
    assert packed_batch() == list_batch()
    assert hash(packed_batch()) == hash(list_batch())
    assert packed_batch() != ElementBatch(AS_LIST[:3])
    assert packed_batch() != ElementBatch(packed=PACKED, element_size=4)
    assert ElementBatch() == ElementBatch(packed=b"", element_size=5)


def test_batch_is_not_equal_to_a_plain_list() -> None:
    assert list_batch() != AS_LIST


def test_tolist_returns_a_new_list() -> None:
    items = [b"a", b"b"]
    batch = ElementBatch(items)
    copy = batch.tolist()
    assert copy == items and copy is not items
    copy.append(b"c")
    assert len(batch) == 2


@pytest.mark.parametrize(
    ("packed", "element_size"),
    [(b"abc", 2), (b"abc", 0), (b"abc", -3)],
    ids=["not a multiple", "zero size", "negative size"],
)
def test_packed_length_must_be_a_multiple_of_a_positive_size(packed: bytes, element_size: int) -> None:
    with pytest.raises(ValueError):
        ElementBatch(packed=packed, element_size=element_size)


def test_repr_says_what_kind_of_batch() -> None:
    assert repr(packed_batch()) == "<ElementBatch of 4 (packed, element_size=3)>"
    assert repr(list_batch()) == "<ElementBatch of 4 (list)>"
