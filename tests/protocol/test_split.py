"""The Reassembler that joins split elements on the receiving side."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rstreams.protocol import RemoteProtocolError
from helpers import count_new_buffers
from rstreams.protocol._split import Reassembler


def test_parts_are_joined_at_the_last_part() -> None:
    reassembler = Reassembler(limit=100)
    assert reassembler.add(7, b"ab", last=False) is None
    assert reassembler.in_progress
    assert reassembler.buffered == 2
    assert reassembler.add(7, b"cd", last=False) is None
    assert reassembler.add(7, b"e", last=True) == b"abcde"
    assert not reassembler.in_progress
    assert reassembler.buffered == reassembler.reserved == 0


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


# ---- copy=True: kept for the next element ------------------------------------


def test_the_buffer_is_kept_and_serves_the_next_element_of_its_size() -> None:
    first, second = bytes(range(256)) * 64, bytes(reversed(range(256))) * 64
    reassembler = Reassembler(limit=1 << 20, keep_buffer_from=len(first))
    for element in (first, second):
        # (room: the budget lets the buffer be sized to the guess)
        reassembler.start_part(1, len(element) // 2, room=1 << 20)
        buffer = reassembler._buffer
        reassembler.add_piece(memoryview(element)[: len(element) // 2])
        reassembler.start_part(1, len(element) // 2, room=1 << 20)
        reassembler.add_piece(memoryview(element)[len(element) // 2 :])
        got = reassembler.finish()
        assert type(got) is bytes and got == element
    # The second element went into a buffer sized to the first one (which
    # joined its pieces, the stream's first), and the buffer stays.
    assert reassembler._buffer is buffer is not None and len(buffer) == len(first)
    assert reassembler.reserved == len(first)


def test_smaller_elements_join_their_pieces_and_keep_nothing() -> None:
    reassembler = Reassembler(limit=1 << 20, keep_buffer_from=1000)
    for _ in range(3):
        assert reassembler.add(1, b"a" * 600, last=False) is None
        assert reassembler.add(1, b"b" * 399, last=True) == b"a" * 600 + b"b" * 399
        assert reassembler._buffer is None and reassembler.reserved == 0
    # At the threshold, the next element has a buffer, which stays.
    reassembler.add(1, b"c" * 1000, last=True)
    assert reassembler.add(1, b"d" * 1000, last=True) == b"d" * 1000
    assert reassembler._buffer is not None and reassembler.reserved == 1000


def test_a_kept_buffer_is_let_go_of_when_the_budget_needs_it() -> None:
    reassembler = Reassembler(limit=1 << 20, keep_buffer_from=0)
    reassembler.add(1, b"x" * 1000, last=True)
    assert reassembler.reserved == reassembler.buffered == 1000
    reassembler.trim()  # (what the connection does under budget pressure)
    assert reassembler.reserved == reassembler.buffered == 0 and reassembler._buffer is None
    assert reassembler.add(2, b"y" * 10, last=True) == b"y" * 10


def test_elements_copied_out_are_not_changed_by_the_next_one() -> None:
    reassembler = Reassembler(limit=1 << 20, keep_buffer_from=0)
    first = reassembler.add(1, b"a" * 500, last=True)
    second = reassembler.add(2, b"b" * 500, last=True)
    assert first == b"a" * 500 and second == b"b" * 500


# ---- beyond the guess: whole reads kept, anything else copied ----------------


def beyond_the_buffer(size: int) -> Reassembler:
    """A reassembler in the middle of an element whose buffer (a guess of
    one byte, full) it has outgrown by ``size`` bytes of payload."""
    reassembler = Reassembler(limit=1 << 30, keep_buffer_from=0)
    reassembler.start_part(1, 1)
    reassembler.add_piece(b"<")
    reassembler.start_part(1, size)
    return reassembler


def test_payload_beyond_the_buffer_is_held_as_it_comes_not_regrown() -> None:
    # The buffer is not grown with a copy of what it holds (the budget may
    # leave no room for a larger guess, and growing by little at a time
    # would copy the element again and again): what comes beyond it is kept.
    reassembler = beyond_the_buffer(3 * 1000)
    for _ in range(3):
        reassembler.add_piece(b"x" * 1000)
    assert reassembler.buffered == reassembler.size == reassembler.reserved == 3001
    assert reassembler.finish() == b"<" + b"x" * 3000


def test_a_piece_that_is_a_whole_read_is_kept_without_a_copy() -> None:
    first, second = bytes(range(256)) * 64, b"the rest"
    reassembler = beyond_the_buffer(len(first) + len(second))
    reassembler.add_piece(memoryview(first))
    reassembler.add_piece(memoryview(second))
    assert reassembler.buffered == reassembler.size == 1 + len(first) + len(second)
    assert reassembler._pieces[0] is first and reassembler._pieces[1] is second
    assert reassembler.finish() == b"<" + first + second


def test_a_piece_of_a_larger_read_is_a_copy() -> None:
    # A view would keep the whole read alive (other messages' bytes with
    # it): copied, so what is held is the payload alone.
    received = bytes(range(256)) * 1024
    reassembler = beyond_the_buffer(2 * 16384)
    reassembler.add_piece(memoryview(received)[10 : 10 + 16384])
    reassembler.add_piece(memoryview(received)[20_000 : 20_000 + 16384])
    assert reassembler.buffered == reassembler.size == 1 + 2 * 16384
    assert all(type(piece) is bytes and len(piece) == 16384 for piece in reassembler._pieces)
    assert reassembler.finish() == b"<" + received[10 : 10 + 16384] + received[20_000 : 20_000 + 16384]


def test_a_reversed_or_strided_view_of_a_whole_read_is_a_copy_in_its_order() -> None:
    received = bytes(range(200))
    for view in (memoryview(received)[::-1], memoryview(received)[::2]):
        reassembler = beyond_the_buffer(len(view))
        reassembler.add_piece(view)
        assert reassembler.finish() == b"<" + view.tobytes()


def test_small_pieces_and_mutable_buffers_are_copied() -> None:
    reassembler = beyond_the_buffer(16383 + 16384)
    reassembler.add_piece(memoryview(bytes(1 << 20))[:16383])
    mutable = bytearray(b"m" * 16384)
    reassembler.add_piece(memoryview(mutable))
    assert reassembler.buffered == reassembler.size == 2 * 16384
    mutable[:] = bytes(len(mutable))
    assert reassembler.finish() == b"<" + bytes(16383) + b"m" * 16384


def test_a_piece_that_overflows_the_buffer_fills_it_and_keeps_the_rest() -> None:
    reassembler = Reassembler(limit=1 << 20, keep_buffer_from=0)
    reassembler.add(1, b"a" * 100, last=True)  # (a kept buffer of 100 bytes)
    reassembler.start_part(2, 80)
    reassembler.add_piece(b"b" * 80)
    reassembler.start_part(2, 170)
    reassembler.add_piece(b"c" * 170)
    assert reassembler.filled == 100 and reassembler.buffered == 250
    assert reassembler.finish() == b"b" * 80 + b"c" * 170


def test_the_memory_held_is_the_payload_whatever_the_reads_around_it() -> None:
    reassembler = beyond_the_buffer(0)
    for _ in range(200):
        # Each read: one piece of a part among 200 KiB of other messages.
        received = bytes(16384 + 200 * 1024)
        reassembler.start_part(1, 16384)
        reassembler.add_piece(memoryview(received)[:16384])
        assert reassembler.buffered == reassembler.size
    assert len(reassembler.finish()) == 1 + 200 * 16384


# ---- reserved: what the connection's budget counts ---------------------------


@given(
    copy=st.booleans(),
    keep_from=st.sampled_from([0, 2000]),
    elements=st.lists(st.lists(st.integers(0, 3000), min_size=1, max_size=6), min_size=1, max_size=5),
    rooms=st.lists(st.integers(0, 5000), min_size=1, max_size=8),
    trims=st.lists(st.booleans(), min_size=1, max_size=8),
)
def test_reserved_is_the_payload_announced_or_the_buffer(
    copy: bool, keep_from: int, elements: list[list[int]], rooms: list[int], trims: list[bool]
) -> None:
    # Kept as an attribute (the connection reads it per part): it must say
    # what the payload and the buffer say, after every step; and between
    # elements, the buffer kept (copy=True) or nothing.
    reassembler = Reassembler(limit=1 << 20, copy=copy, keep_buffer_from=keep_from)

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
        kept = reassembler._buffer
        assert reassembler.reserved == reassembler.buffered == (len(kept) if kept is not None else 0)
        assert copy or kept is None


# ---- growing by copies: a few times at most ----------------------------------


@pytest.mark.parametrize("copy", [False, True])
def test_an_element_in_many_small_parts_without_room_is_not_copied_again_and_again(
    copy: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # With no room in the budget beyond the payload announced, a buffer
    # regrown for every part would copy the element once a part (quadratic
    # in its parts); the payload beyond the buffer is kept as pieces and
    # joined once at the end.
    made = count_new_buffers(monkeypatch)
    reassembler = Reassembler(limit=1 << 20, copy=copy, keep_buffer_from=0)
    parts = [bytes([index % 251]) * 100 for index in range(1000)]
    for part in parts:
        reassembler.start_part(1, len(part), room=0)
        reassembler.add_piece(part)
        assert reassembler.reserved == reassembler.size  # (nothing guessed)
    element = reassembler.finish()
    assert bytes(element) == b"".join(parts)
    assert type(element) is (bytes if copy else memoryview)
    assert made[0] <= 3  # (the first, a regrowth while room allowed, the join)
