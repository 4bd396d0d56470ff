"""The topic log without I/O: room, eviction and the three cursor policies."""

from __future__ import annotations

import pytest

from rstreams._topic_core import CursorPolicy, RetentionError, TopicLog, decode_sequenced, encode_sequenced


def elements(start: int, stop: int) -> list[bytes]:
    return [str(i).encode() for i in range(start, stop)]


def test_without_blocking_cursors_the_log_is_a_ring_of_the_newest() -> None:
    log = TopicLog(4)
    assert log.append(elements(0, 10)) == 4  # room is capacity per step
    assert log.append(elements(4, 10)) == 4
    assert (log.first_sequence, log.next_sequence, len(log)) == (4, 8, 4)
    assert log.evicted == 4


def test_a_blocking_cursor_paces_publishers_and_loses_nothing() -> None:
    log = TopicLog(3)
    cursor = log.attach(CursorPolicy.BLOCK)
    assert log.append(elements(0, 10)) == 3
    assert log.room() == 0 and log.append(elements(3, 4)) == 0
    first, taken = log.take(cursor, 2)
    assert (first, taken) == (0, elements(0, 2))
    assert log.room() == 2
    assert log.append(elements(3, 10)) == 2
    assert log.take(cursor, 10) == (2, elements(2, 5))
    assert cursor.dropped == 0


def test_the_slowest_blocking_cursor_sets_the_pace() -> None:
    log = TopicLog(4)
    fast = log.attach(CursorPolicy.BLOCK)
    slow = log.attach(CursorPolicy.BLOCK)
    log.append(elements(0, 4))
    log.take(fast, 4)
    assert log.room() == 0
    log.take(slow, 1)
    assert log.room() == 1


def test_drop_cursor_is_overtaken_and_counts_what_it_missed() -> None:
    log = TopicLog(3)
    cursor = log.attach(CursorPolicy.DROP)
    log.append(elements(0, 3))
    log.append(elements(3, 6))  # never held back by a drop cursor
    first, taken = log.take(cursor, 10)
    assert (first, taken) == (3, elements(3, 6))
    assert cursor.dropped == 3


def test_latest_cursor_skips_to_the_newest() -> None:
    log = TopicLog(8)
    cursor = log.attach(CursorPolicy.LATEST)
    log.append(elements(0, 5))
    assert log.take(cursor, 10) == (4, [b"4"])
    assert cursor.dropped == 4
    log.append(elements(5, 6))
    assert log.take(cursor, 10) == (5, [b"5"])


def test_a_start_older_than_what_is_held_is_an_error_not_a_skip() -> None:
    log = TopicLog(2)
    log.append(elements(0, 2))
    log.append(elements(2, 4))
    with pytest.raises(RetentionError, match="sequence 1 is no longer retained"):
        log.attach(CursorPolicy.BLOCK, 1)
    cursor = log.attach(CursorPolicy.BLOCK, 2)
    assert log.take(cursor, 5) == (2, elements(2, 4))
    log.attach(CursorPolicy.BLOCK, 4)  # the next one: fine
    with pytest.raises(RetentionError, match="sequence 5 is ahead of the newest"):
        log.attach(CursorPolicy.BLOCK, 5)


def test_sequenced_framing_round_trips() -> None:
    assert decode_sequenced(encode_sequenced(2**40 + 5, b"x")) == (2**40 + 5, b"x")
    with pytest.raises(ValueError):
        decode_sequenced(b"short")


def test_capacity_must_be_positive() -> None:
    with pytest.raises(ValueError):
        TopicLog(0)
