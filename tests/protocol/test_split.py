"""The Reassembler that joins split elements on the receiving side."""

from __future__ import annotations

import pytest

from rstreams.protocol import RemoteProtocolError
from rstreams.protocol._split import Reassembler


def test_parts_are_joined_at_the_last_part() -> None:
    reassembler = Reassembler(limit=100)
    assert reassembler.add(7, b"ab", last=False) is None
    assert reassembler.in_progress
    assert reassembler.buffered == 2
    assert reassembler.add(7, b"cd", last=False) is None
    assert reassembler.add(7, b"e", last=True) == b"abcde"
    assert not reassembler.in_progress
    assert reassembler.buffered == 0


def test_a_lone_last_part_is_the_element() -> None:
    reassembler = Reassembler(limit=100)
    data = b"whole"
    assert reassembler.add(1, data, last=True) is data
    assert not reassembler.in_progress


def test_empty_parts_are_allowed() -> None:
    reassembler = Reassembler(limit=100)
    assert reassembler.add(1, b"", last=False) is None
    assert reassembler.in_progress
    assert reassembler.add(1, b"", last=True) == b""


def test_elements_follow_each_other() -> None:
    reassembler = Reassembler(limit=100)
    reassembler.add(1, b"a", last=False)
    assert reassembler.add(1, b"b", last=True) == b"ab"
    reassembler.add(2, b"c", last=False)
    assert reassembler.add(2, b"d", last=True) == b"cd"
    # An element Id may come back once its element is complete.
    assert reassembler.add(1, b"e", last=True) == b"e"


@pytest.mark.parametrize("last", [False, True])
def test_part_of_another_element_mid_split_is_refused(last: bool) -> None:
    reassembler = Reassembler(limit=100)
    reassembler.add(1, b"a", last=False)
    with pytest.raises(RemoteProtocolError, match="element 2"):
        reassembler.add(2, b"b", last=last)


def test_joined_size_is_limited() -> None:
    reassembler = Reassembler(limit=10)
    reassembler.add(1, b"x" * 6, last=False)
    with pytest.raises(RemoteProtocolError, match="limit"):
        reassembler.add(1, b"x" * 5, last=False)


def test_single_part_over_the_limit_is_refused() -> None:
    with pytest.raises(RemoteProtocolError):
        Reassembler(limit=10).add(1, b"x" * 11, last=True)


def test_exactly_the_limit_is_accepted() -> None:
    reassembler = Reassembler(limit=10)
    reassembler.add(1, b"x" * 6, last=False)
    assert reassembler.add(1, b"x" * 4, last=True) == b"x" * 10
