"""The buffers of ``copy=False`` elements: reused only once nobody refers to them.

A buffer lent in an element comes back for the next element of its size
once the application has let go of every view of it; never while anything
can still read it (a view, a slice, a cast, the view's ``obj``, a list
holding it); and the pool keeps no more than the application held at once.
"""

from __future__ import annotations

import gc
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rstreams.protocol._element_buffers import LENT_REMEMBERED, ElementBuffers


def handed_out(pool: ElementBuffers, size: int, fill: int) -> memoryview:
    """What the reassembler does with one element: take a buffer, write
    every byte of it, lend it, hand out a read-only view."""
    buffer = pool.take(size)
    buffer[:] = bytes([fill]) * size
    pool.lend(buffer)
    return memoryview(buffer).toreadonly()


def test_a_buffer_nobody_refers_to_is_taken_back_for_the_next_element_of_its_size() -> None:
    pool = ElementBuffers()
    view = handed_out(pool, 1000, 1)
    first = view.obj
    del view
    # (The test's own name for it is one more reference: let go of it too,
    # remembering only its identity.)
    first_id = id(first)
    del first
    assert id(pool.take(1000)) == first_id
    assert pool.remembered == 0


KEEPERS: dict[str, Callable[[memoryview], object]] = {
    "the view": lambda view: view,
    "a slice of it": lambda view: view[10:20],
    "a cast of it": lambda view: view.cast("B", (len(view),)),
    "its obj": lambda view: view.obj,
    "a list holding it": lambda view: [view],
    "a view of a view": lambda view: memoryview(view),
}


@pytest.mark.parametrize("keep", KEEPERS.values(), ids=KEEPERS.keys())
def test_a_buffer_the_application_still_refers_to_is_never_taken_back(keep: Callable[[memoryview], object]) -> None:
    pool = ElementBuffers()
    kept = keep(handed_out(pool, 1000, 1))
    gc.collect()
    again = handed_out(pool, 1000, 2)
    assert again.obj is not _buffer_of(kept)
    assert bytes(_bytes_of(kept))[:10] == b"\x01" * 10
    assert pool.remembered == 2


def _buffer_of(kept: object) -> object:
    if isinstance(kept, list):
        kept = kept[0]
    return kept.obj if isinstance(kept, memoryview) else kept


def _bytes_of(kept: object) -> bytes:
    if isinstance(kept, list):
        kept = kept[0]
    return bytes(kept)  # type: ignore[call-overload]


def test_a_free_buffer_of_another_size_is_let_go_of() -> None:
    pool = ElementBuffers()
    handed_out(pool, 1000, 1)  # (dropped at once)
    assert pool.remembered == 1
    buffer = pool.take(2000)
    assert len(buffer) == 2000
    assert pool.remembered == 0  # (the 1000-byte one is gone, not kept)


def test_the_pool_remembers_a_bounded_number_of_lent_buffers() -> None:
    pool = ElementBuffers()
    held = [handed_out(pool, 100, index % 256) for index in range(LENT_REMEMBERED + 10)]
    assert pool.remembered == LENT_REMEMBERED
    # Every one of them still reads as written: nothing was taken back.
    assert all(bytes(view) == bytes([index % 256]) * 100 for index, view in enumerate(held))


def assert_unchanged(held: list[tuple[memoryview, bytes]]) -> None:
    for view, expected in held:
        assert bytes(view) == expected


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.tuples(st.just("element"), st.sampled_from([64, 65, 128])),
            st.tuples(st.just("drop"), st.integers(min_value=0, max_value=40)),
        ),
        max_size=80,
    )
)
def test_no_element_the_application_holds_is_ever_written_over(steps: list[tuple[str, int]]) -> None:
    # Elements of a few sizes, handed out and let go of in any order: what
    # the application still holds reads as it was written, and with one
    # size the pool keeps no more buffers than the application held at once.
    pool = ElementBuffers()
    held: list[tuple[memoryview, bytes]] = []
    peak_by_size: dict[int, int] = {}
    sizes_seen: set[int] = set()
    for number, (step, value) in enumerate(steps):
        if step == "element":
            fill = number % 251
            held.append((handed_out(pool, value, fill), bytes([fill]) * value))
            sizes_seen.add(value)
            count = sum(1 for view, _ in held if len(view) == value)
            peak_by_size[value] = max(peak_by_size.get(value, 0), count)
        elif held:
            del held[value % len(held)]
        # (In a function of its own: a loop variable here would hold a view.)
        assert_unchanged(held)
        if len(sizes_seen) == 1:
            assert pool.remembered <= max(peak_by_size.values())
        assert pool.remembered <= LENT_REMEMBERED
