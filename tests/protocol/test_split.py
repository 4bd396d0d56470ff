"""The Reassembler that joins split elements on the receiving side."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

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


# ---- pieces: whole reads kept, anything else copied --------------------------


def test_a_piece_that_is_a_whole_read_is_kept_without_a_copy() -> None:
    first, second = bytes(range(256)) * 64, b"the rest"
    reassembler = Reassembler(limit=1 << 20)
    reassembler.start_part(1, len(first) + len(second))
    reassembler.add_piece(memoryview(first))
    reassembler.add_piece(memoryview(second))
    assert reassembler.buffered == reassembler.size == len(first) + len(second)
    assert reassembler._pieces[0] is first and reassembler._pieces[1] is second
    assert reassembler.finish() == first + second
    assert reassembler.buffered == 0


def test_a_lone_whole_read_is_the_element_itself() -> None:
    received = bytes(range(256)) * 256
    reassembler = Reassembler(limit=1 << 20)
    reassembler.start_part(1, len(received))
    reassembler.add_piece(memoryview(received))
    assert reassembler.finish() is received


def test_a_piece_of_a_larger_read_is_a_copy() -> None:
    # A view would keep the whole read alive (other messages' bytes with
    # it): copied, so what is held is the payload alone.
    received = bytes(range(256)) * 1024
    reassembler = Reassembler(limit=1 << 20)
    reassembler.start_part(1, 2 * 16384)
    reassembler.add_piece(memoryview(received)[10 : 10 + 16384])
    reassembler.add_piece(memoryview(received)[20_000 : 20_000 + 16384])
    assert reassembler.buffered == reassembler.size == 2 * 16384
    assert all(type(piece) is bytes and len(piece) == 16384 for piece in reassembler._pieces)
    assert reassembler.finish() == received[10 : 10 + 16384] + received[20_000 : 20_000 + 16384]


def test_a_reversed_or_strided_view_of_a_whole_read_is_a_copy_in_its_order() -> None:
    received = bytes(range(200))
    for view in (memoryview(received)[::-1], memoryview(received)[::2]):
        reassembler = Reassembler(limit=1 << 20)
        reassembler.start_part(1, len(view))
        reassembler.add_piece(view)
        assert reassembler.finish() == view.tobytes()


def test_small_pieces_and_mutable_buffers_are_copied() -> None:
    reassembler = Reassembler(limit=1 << 20)
    reassembler.start_part(1, 16383 + 16384)
    reassembler.add_piece(memoryview(bytes(1 << 20))[:16383])
    mutable = bytearray(b"m" * 16384)
    reassembler.add_piece(memoryview(mutable))
    assert reassembler.buffered == reassembler.size == 2 * 16384 - 1
    mutable[:] = bytes(len(mutable))
    assert reassembler.finish() == bytes(16383) + b"m" * 16384


def test_the_memory_held_is_the_payload_whatever_the_reads_around_it() -> None:
    reassembler = Reassembler(limit=1 << 30)
    for _ in range(200):
        # Each read: one piece of a part among 200 KiB of other messages.
        received = bytes(16384 + 200 * 1024)
        reassembler.start_part(1, 16384)
        reassembler.add_piece(memoryview(received)[:16384])
        assert reassembler.buffered == reassembler.size
    assert len(reassembler.finish()) == 200 * 16384


# ---- reserved: what the connection's budget counts ---------------------------


@given(
    into_buffer=st.booleans(),
    elements=st.lists(st.lists(st.integers(0, 3000), min_size=1, max_size=6), min_size=1, max_size=5),
    rooms=st.lists(st.integers(0, 5000), min_size=1, max_size=8),
    trims=st.lists(st.booleans(), min_size=1, max_size=8),
)
def test_reserved_is_the_payload_announced_or_the_buffer(
    into_buffer: bool, elements: list[list[int]], rooms: list[int], trims: list[bool]
) -> None:
    # Kept as an attribute (the connection reads it per part): it must say
    # what the payload and the buffer say, after every step.
    reassembler = Reassembler(limit=1 << 20, into_buffer=into_buffer)

    def expected() -> int:
        buffer = reassembler._buffer
        return reassembler.size if buffer is None or len(buffer) < reassembler.size else len(buffer)

    step = 0
    for number, lengths in enumerate(elements):
        for length in lengths:
            reassembler.start_part(number, length, room=rooms[step % len(rooms)])
            assert reassembler.reserved == expected()
            if trims[step % len(trims)]:
                reassembler.trim()
                assert reassembler.reserved == expected() == reassembler.size
            reassembler.add_piece(bytes(length))
            step += 1
        reassembler.finish()
        assert reassembler.reserved == expected() == 0
