"""The Relink connection state table and link bookkeeping."""

from __future__ import annotations

import pytest

from bridges.relink import LinkConfig, LinkRegistry, LinkState, LocalProtocolError, Role
from bridges.relink._sequence import MASK, NONE, advance, distance, in_window
from bridges.relink._state import CONNECTION_TRANSITIONS, HANDSHAKE_STATES, TERMINAL_STATES, ConnectionState


def test_terminal_states_have_no_way_out() -> None:
    assert not [key for key in CONNECTION_TRANSITIONS if key[0] in TERMINAL_STATES]


def test_every_handshake_state_can_end_by_end_of_file_and_leads_somewhere() -> None:
    for state in HANDSHAKE_STATES:
        assert any(key[0] is state and key[1].name == "RECEIVE_EOF" for key in CONNECTION_TRANSITIONS), state
        assert any(key[0] is state and value is not ConnectionState.CLOSED for key, value in CONNECTION_TRANSITIONS.items())


def test_sequence_arithmetic_wraps() -> None:
    assert advance(MASK) == 0 and advance(0, -1) == MASK == NONE
    assert distance(MASK - 1, 2) == 4 and distance(2, MASK - 1) == 2**32 - 4
    assert in_window(NONE, 0, 1, 1) and not in_window(5, 4, 0, 10)


def test_registry() -> None:
    registry = LinkRegistry(123)
    first, second = registry.new_link_id(), registry.new_link_id()
    assert (first, second) == (1, 2)
    link = LinkState(role=Role.LISTENER, config=LinkConfig(), epoch=123, link_id=first)
    registry.add(link)
    assert registry.lookup(123, first) is link and len(registry) == 1
    assert registry.lookup(124, first) is None and registry.lookup(123, second) is None
    link.shutdown_sent = link.peer_shutdown = True
    assert link.ended and registry.lookup(123, first) is None
    registry.remove(first)
    assert len(registry) == 0
    with pytest.raises(LocalProtocolError):
        registry.add(LinkState(role=Role.LISTENER, config=LinkConfig(), epoch=5, link_id=1))
    with pytest.raises(ValueError):
        LinkRegistry(0)
    with pytest.raises(LocalProtocolError):
        LinkState(role=Role.LISTENER, config=LinkConfig(), epoch=5, link_id=0)
