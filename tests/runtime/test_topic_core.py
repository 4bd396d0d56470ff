"""The topic log without I/O: room, eviction and the three cursor policies."""

from __future__ import annotations

import zlib

import hypothesis
import hypothesis.strategies as st
import pytest

from rstreams._topic_core import (
    Cursor,
    CursorPolicy,
    Partitioner,
    ProducerLedger,
    RetentionError,
    TopicLog,
    decode_block,
    decode_sequenced,
    encode_block,
    encode_sequenced,
    split_block,
)


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


def test_the_floor_rises_only_when_the_lowest_blocking_cursor_moves_on_or_leaves() -> None:
    log = TopicLog(4)
    assert log.floor == 0
    a, b = log.attach(CursorPolicy.BLOCK), log.attach(CursorPolicy.BLOCK)
    dropping = log.attach(CursorPolicy.DROP)
    log.append(elements(0, 4))
    assert log.floor == 0 and log.room() == 0
    log.take(a, 2)
    log.take(dropping, 4)
    assert log.floor == 0  # b is still at 0: no room freed
    log.take(b, 1)
    assert log.floor == 1 and log.room() == 1
    log.detach(a)  # at 2, above the floor
    assert log.floor == 1
    log.detach(b)
    assert log.floor == log.next_sequence == 4  # no blocking cursor: room is capacity
    log.detach(b)  # twice: nothing
    assert log.floor == 4


def test_the_next_floor_is_found_near_or_far() -> None:
    log = TopicLog(16)
    log.append(elements(0, 8))
    lowest = log.attach(CursorPolicy.BLOCK, 0)
    far, further = log.attach(CursorPolicy.BLOCK, 6), log.attach(CursorPolicy.BLOCK, 7)
    log.take(lowest, 3)  # to 3, nearer than the others
    assert log.floor == 3
    log.detach(lowest)  # the next is three positions on, past two held
    assert log.floor == 6
    log.take(far, 4)  # to 8, past the other
    assert log.floor == 7
    log.take(further, 1)
    assert log.floor == 8 == log.next_sequence


def brute_floor(log: TopicLog) -> int:
    return min((c.position for c in log.cursors if c.policy is CursorPolicy.BLOCK), default=log.next_sequence)


@hypothesis.settings(max_examples=300)
@hypothesis.given(
    st.lists(
        st.tuples(st.sampled_from(["attach", "take", "detach", "append"]), st.integers(0, 9), st.sampled_from(CursorPolicy)),
        min_size=10,
        max_size=120,
    ),
    st.sampled_from([None, 12]),
)
def test_the_floor_kept_as_cursors_move_is_the_lowest_blocking_position(
    steps: list[tuple[str, int, CursorPolicy]], capacity_bytes: int | None
) -> None:
    log = TopicLog(8, capacity_bytes)
    cursors: list[Cursor] = []
    for step, number, policy in steps:
        if step == "attach":
            cursors.append(log.attach(policy, log.first_sequence + number % (len(log) + 1)))
        elif step == "append":
            log.append(elements(0, number % 4 + 1))
        elif cursors:
            cursor = cursors[number % len(cursors)]
            if step == "take":
                log.take(cursor, number % 4)
            else:
                log.detach(cursor)
                cursors.remove(cursor)
        floor = brute_floor(log)
        assert log.floor == floor
        assert log.room() == max(0, log.capacity - (log.next_sequence - floor))
        assert all(c.dropped == 0 for c in cursors if c.policy is CursorPolicy.BLOCK)


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
    with pytest.raises(RetentionError, match="sequence 1 is no longer retained, 1 behind the oldest held") as caught:
        log.attach(CursorPolicy.BLOCK, 1)
    assert (caught.value.requested, caught.value.oldest, caught.value.behind) == (1, 2, 1)
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
    with pytest.raises(ValueError):
        TopicLog(4, capacity_bytes=0)


def test_retention_by_bytes_evicts_the_oldest_beyond_the_bound() -> None:
    log = TopicLog(100, capacity_bytes=10)
    assert log.append([b"aaaa", b"bbbb", b"cc"]) == 3  # 10 bytes: all held
    assert log.append([b"ddd"]) == 1  # 13 bytes: "aaaa" goes
    assert (log.first_sequence, log.next_sequence, log.held_bytes) == (1, 4, 9)
    assert log.evicted == 1 and log.evicted_bytes == 4
    cursor = log.attach(CursorPolicy.DROP, 1)
    assert log.take(cursor, 10) == (1, [b"bbbb", b"cc", b"ddd"])


def test_a_blocking_cursor_holds_publishers_back_by_bytes_too() -> None:
    log = TopicLog(100, capacity_bytes=10)
    cursor = log.attach(CursorPolicy.BLOCK)
    assert log.append([b"12345", b"1234", b"12"]) == 2  # the third would exceed 10 bytes
    assert log.room_bytes() == 1 and log.append([b"12"]) == 0
    assert log.take(cursor, 1) == (0, [b"12345"])
    assert log.room_bytes() == 6
    assert log.append([b"12", b"1234"]) == 2
    assert (log.first_sequence, log.held_bytes) == (1, 10)
    assert cursor.dropped == 0


def test_an_element_larger_than_the_byte_bound_is_refused() -> None:
    log = TopicLog(4, capacity_bytes=3)
    with pytest.raises(ValueError, match="larger than capacity_bytes=3"):
        log.append([b"1234"])
    assert log.next_sequence == 0


def test_round_robin_spreads_elements_in_order() -> None:
    partitioner = Partitioner(3)
    assert partitioner.split(elements(0, 4)) == [[b"0", b"3"], [b"1"], [b"2"]]
    # The next chunk goes on where the last one stopped.
    assert partitioner.split(elements(4, 7)) == [[b"6"], [b"4"], [b"5"]]


def test_a_key_sends_equal_keys_to_one_partition_stably() -> None:
    partitioner = Partitioner(4, key=lambda value: value["sensor"])
    values = [{"sensor": name, "n": i} for i, name in enumerate(["a", "b", "a", "c", "b", "a"])]
    routed = partitioner.split([str(v["n"]).encode() for v in values], values)
    expected = [[str(v["n"]).encode() for v in values if zlib.crc32(v["sensor"].encode()) % 4 == p] for p in range(4)]
    assert routed == expected
    # CRC-32, not hash(): the same in every process.
    assert Partitioner(4).partition_of("a") == 0xE8B7BE43 % 4
    assert Partitioner(4).partition_of(7) == 3
    with pytest.raises(TypeError, match="int, str or bytes"):
        Partitioner(2).partition_of(1.5)


def test_a_block_is_an_arrow_binary_column_with_its_first_sequence() -> None:
    data = encode_block(2**33, [b"ab", b"", b"cde"])
    first, count, offsets, payload = decode_block(data)
    assert (first, count, bytes(payload)) == (2**33, 3, b"abcde")
    assert bytes(offsets) == b"".join(i.to_bytes(4, "little") for i in (0, 2, 2, 5))
    assert split_block(data) == (2**33, [b"ab", b"", b"cde"])
    with pytest.raises(ValueError, match="offsets end at 5"):
        decode_block(data + b"x")
    with pytest.raises(ValueError):
        encode_block(0, [])


def test_the_producer_ledger_drops_repeats_and_forgets_the_least_recent() -> None:
    ledger = ProducerLedger(2)
    framed = [encode_sequenced(i, b"%d" % i) for i in range(5)]
    assert ledger.fresh("a", framed[:3]) == [b"0", b"1", b"2"]
    ledger.advance("a", 3)
    assert ledger.fresh("a", framed) == [b"3", b"4"] and ledger.duplicates == 3
    with pytest.raises(ValueError, match="element 4 arrived, 3 was expected"):
        ledger.fresh("a", framed[4:])
    ledger.advance("b", 1)
    ledger.advance("c", 1)  # a third producer: "a" is forgotten
    assert len(ledger) == 2 and ledger.expected("a") == 0 and ledger.expected("c") == 1
