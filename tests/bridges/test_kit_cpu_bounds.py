"""CPU bounds shared by the bridges: names wire v0 cannot carry, dropped elements."""

from __future__ import annotations

import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st

from bridges.kit import DropAllowance, check_name_fits
from rstreams import UnknownPublisher
from rstreams.protocol import DEFAULT_LIMITS


def test_a_name_longer_than_wire_v0_carries_is_no_such_publisher() -> None:
    check_name_fits("x" * DEFAULT_LIMITS.max_string_size)
    with pytest.raises(UnknownPublisher, match="no such publisher: a name of 600000 bytes"):
        check_name_fits("x" * 600_000)
    with pytest.raises(UnknownPublisher):
        check_name_fits("é" * (DEFAULT_LIMITS.max_string_size // 2 + 1))


@given(st.integers(1, 64), st.lists(st.tuples(st.sampled_from(["drop", "ack", "tick"]), st.integers(1, 8)), max_size=60))
def test_drops_never_pass_the_allowance_between_top_ups(allowance: int, steps: list[tuple[str, int]]) -> None:
    drops, now, since_top_up = DropAllowance(allowance, tick=1.0), 0.0, 0
    for step, count in steps:
        if step == "drop":
            if drops.exhausted:
                continue  # the broker waits here
            drops.drop(count)
            since_top_up += count
            assert since_top_up < allowance + 8
        elif step == "ack":
            drops.acknowledged(now)
            since_top_up = 0
        else:
            now += count / 4
            before = drops.dropped
            drops.tick_passed(now)
            if drops.dropped != before:
                since_top_up = 0
        assert drops.dropped == since_top_up


async def test_a_topic_feed_closed_under_its_publisher_ends_its_iteration() -> None:
    # publish_to_topic ending (its bridge connection cut mid-frame) closes
    # the feed while the topic's publisher may still ask for the next batch:
    # that is the end of the values, not a publisher failure with a
    # traceback (the chaos run found one).
    from bridges.kit._topics import _Batches

    send, receive = trio.open_memory_channel[object](1)
    batches = _Batches(receive)  # type: ignore[arg-type]
    receive.close()
    with trio.fail_after(5):
        with pytest.raises(StopAsyncIteration):
            await batches.__anext__()
    send.close()
