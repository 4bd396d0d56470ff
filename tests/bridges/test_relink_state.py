"""The Relink connection state table and link bookkeeping."""

from __future__ import annotations

import itertools
import secrets

import pytest

from bridges.relink import LinkConfig, LinkRegistry, LinkState, LocalProtocolError, Role
from bridges.relink._sequence import MASK, NONE, advance, distance, in_window
from bridges.relink._state import (
    CONNECTION_TRANSITIONS,
    HANDSHAKE_STATES,
    TERMINAL_STATES,
    ConnectionState,
)


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


def test_registry_draws_link_ids_at_random_when_given_a_source() -> None:
    # A link id is all it takes to resume a link: the listener draws them
    # (RelinkServer passes secrets.randbelow), unique among the links held.
    registry = LinkRegistry(123, randbelow=secrets.randbelow)
    ids = []
    for _ in range(200):
        link_id = registry.new_link_id()
        assert 1 <= link_id < 2**63 and link_id not in ids
        registry.add(LinkState(role=Role.LISTENER, config=LinkConfig(), epoch=123, link_id=link_id))
        ids.append(link_id)
    assert all(abs(a - b) > 1 for a, b in itertools.pairwise(ids))
    # A draw that names a link held is drawn again; the range is the whole [1, 2**63).
    draws = iter([4, 4, 2**63 - 2, 0])
    held = LinkRegistry(123, randbelow=lambda n: next(draws))
    held.add(LinkState(role=Role.LISTENER, config=LinkConfig(), epoch=123, link_id=5))
    assert [held.new_link_id(), held.new_link_id()] == [2**63 - 1, 1]
    # A source that is not random, or out of range, is the caller's mistake.
    stuck = LinkRegistry(123, randbelow=lambda n: 4)
    stuck.add(LinkState(role=Role.LISTENER, config=LinkConfig(), epoch=123, link_id=5))
    with pytest.raises(LocalProtocolError, match="not random"):
        stuck.new_link_id()
    with pytest.raises(LocalProtocolError, match="not in"):
        LinkRegistry(123, randbelow=lambda n: n).new_link_id()


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
