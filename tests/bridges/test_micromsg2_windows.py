"""Sequence arithmetic and the two sides of the ack window."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bridges.micromsg2 import next_sequence
from bridges.micromsg2._windows import InboundWindow, OutboundWindow


def test_next_sequence_skips_zero() -> None:
    assert next_sequence(1) == 2
    assert next_sequence(65534) == 65535
    assert next_sequence(65535) == 1


def test_the_spec_wrap_example() -> None:
    # The last ack was 65533; 65534, 65535, 1, 2, 3 were sent; an ack of 3 frees all five.
    window = OutboundWindow(10)
    window.next_sequence = 65534
    assert [window.take_sequence() for _ in range(5)] == [65534, 65535, 1, 2, 3]
    assert window.acknowledge(3) == 5
    assert window.credit == 10


def test_an_ack_frees_what_it_covers_and_no_more() -> None:
    window = OutboundWindow(3)
    assert [window.take_sequence() for _ in range(3)] == [1, 2, 3]
    assert window.credit == 0
    with pytest.raises(ValueError, match="full"):
        window.take_sequence()
    assert window.acknowledge(1) == 1
    assert window.acknowledge(3) == 2
    with pytest.raises(ValueError, match="not awaiting an ack"):
        window.acknowledge(3)


def test_unlimited_without_acks() -> None:
    window = OutboundWindow(None)
    assert window.credit is None
    assert [window.take_sequence() for _ in range(4)] == [1, 2, 3, 4]
    assert window.unacknowledged == 0


def test_the_inbound_window() -> None:
    window = InboundWindow(2, max_pending=5)
    window.received(1)
    assert not window.window_full
    window.received(2)
    assert window.window_full and not window.limit_reached
    assert window.consume(2) == 2
    assert window.expected_sequence == 3
    with pytest.raises(ValueError, match="cannot consume 1 of 0"):
        window.consume(1)
    window = InboundWindow(None, max_pending=1)
    window.received(1)
    assert window.limit_reached and not window.window_full


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 65535), st.integers(1, 300), st.data())
def test_credit_is_conserved(start: int, window_size: int, data: st.DataObject) -> None:
    # Whatever the acks, credit + unacknowledged == window, and a freed count
    # is the number of messages the ack covers.
    window = OutboundWindow(window_size)
    window.next_sequence = start
    sent: list[int] = []
    for _ in range(data.draw(st.integers(1, 5))):
        while window.credit:
            sent.append(window.take_sequence())
        upto = data.draw(st.integers(0, len(sent) - 1))
        assert window.acknowledge(sent[upto]) == upto + 1
        del sent[: upto + 1]
        assert window.credit is not None and window.credit + window.unacknowledged == window_size
