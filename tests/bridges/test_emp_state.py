"""The EMP connection table."""

from __future__ import annotations

from bridges.emp._state import CONNECTION_TRANSITIONS, ConnectionEvent, ConnectionState


def test_closed_and_error_are_terminal() -> None:
    for (state, _event), _next_state in CONNECTION_TRANSITIONS.items():
        assert state not in (ConnectionState.CLOSED, ConnectionState.ERROR)


def test_no_exchange_during_the_handshake() -> None:
    assert (ConnectionState.HANDSHAKING, ConnectionEvent.SEND_EXCHANGE) not in CONNECTION_TRANSITIONS
    assert (ConnectionState.HANDSHAKING, ConnectionEvent.RECEIVE_EXCHANGE) not in CONNECTION_TRANSITIONS
    assert (ConnectionState.OPEN, ConnectionEvent.RECEIVE_HELLO) not in CONNECTION_TRANSITIONS


def test_every_state_is_reachable() -> None:
    reachable = {ConnectionState.HANDSHAKING} | set(CONNECTION_TRANSITIONS.values())
    assert reachable == set(ConnectionState)


def test_bye_closes_and_error_fails_from_both_live_states() -> None:
    for state in (ConnectionState.HANDSHAKING, ConnectionState.OPEN):
        for event in (ConnectionEvent.SEND_BYE, ConnectionEvent.RECEIVE_BYE, ConnectionEvent.RECEIVE_EOF):
            assert CONNECTION_TRANSITIONS[state, event] is ConnectionState.CLOSED
        for event in (ConnectionEvent.SEND_ERROR, ConnectionEvent.RECEIVE_ERROR):
            assert CONNECTION_TRANSITIONS[state, event] is ConnectionState.ERROR
