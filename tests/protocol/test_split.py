"""The Reassembler that joins split elements on the receiving side."""

from __future__ import annotations

import pytest

from rstreams.protocol import RemoteProtocolError
from rstreams.protocol._split import MIN_VIEW_SIZE, VIEW_SLACK, Reassembler


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


# ---- pieces: views of received buffers, or copies --------------------------


def test_a_large_piece_of_a_received_buffer_is_kept_as_a_view() -> None:
    received = bytes(range(256)) * 1024  # one read of 256 KiB
    reassembler = Reassembler(limit=1 << 20)
    reassembler.start_part(1, 2 * MIN_VIEW_SIZE)
    reassembler.add_piece(memoryview(received)[10 : 10 + MIN_VIEW_SIZE])
    reassembler.add_piece(memoryview(received)[20_000 : 20_000 + MIN_VIEW_SIZE])
    # The whole read is held, once, for both views.
    assert reassembler.buffered == len(received)
    assert reassembler.size == 2 * MIN_VIEW_SIZE
    assert reassembler.finish() == received[10 : 10 + MIN_VIEW_SIZE] + received[20_000 : 20_000 + MIN_VIEW_SIZE]
    assert reassembler.buffered == 0


def test_small_pieces_and_mutable_buffers_are_copied() -> None:
    reassembler = Reassembler(limit=1 << 20)
    reassembler.start_part(1, MIN_VIEW_SIZE - 1 + MIN_VIEW_SIZE)
    reassembler.add_piece(memoryview(bytes(1 << 20))[: MIN_VIEW_SIZE - 1])
    mutable = bytearray(b"m" * MIN_VIEW_SIZE)
    reassembler.add_piece(memoryview(mutable))
    assert reassembler.buffered == reassembler.size == 2 * MIN_VIEW_SIZE - 1
    mutable[:] = bytes(len(mutable))
    assert reassembler.finish() == bytes(MIN_VIEW_SIZE - 1) + b"m" * MIN_VIEW_SIZE


def test_a_view_that_would_hold_too_much_is_a_copy() -> None:
    # A piece of MIN_VIEW_SIZE in a read much larger than twice the payload
    # plus the slack: copied, so the read can go.
    huge_read = bytes(4 * VIEW_SLACK)
    reassembler = Reassembler(limit=1 << 30)
    reassembler.start_part(1, MIN_VIEW_SIZE)
    reassembler.add_piece(memoryview(huge_read)[:MIN_VIEW_SIZE])
    assert reassembler.buffered == MIN_VIEW_SIZE


def test_the_memory_held_stays_within_twice_the_payload_and_the_slack() -> None:
    reassembler = Reassembler(limit=1 << 30)
    for _ in range(200):
        # Each read: one piece of a part among 200 KiB of other messages.
        received = bytes(MIN_VIEW_SIZE + 200 * 1024)
        reassembler.start_part(1, MIN_VIEW_SIZE)
        reassembler.add_piece(memoryview(received)[:MIN_VIEW_SIZE])
        assert reassembler.buffered <= 2 * reassembler.size + VIEW_SLACK
    assert len(reassembler.finish()) == 200 * MIN_VIEW_SIZE
