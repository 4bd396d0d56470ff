"""The transition tables: structural properties the connection relies on."""

from __future__ import annotations

from rstreams.protocol._state import (
    CONNECTION_TRANSITIONS,
    PUBLICATION_TRANSITIONS,
    SUBSCRIPTION_TRANSITIONS,
    ConnectionEvent,
    ConnectionState,
    PublicationEvent,
    PublicationState,
    SubscriptionEvent,
    SubscriptionState,
)


def reachable(transitions: dict, start: object) -> set[object]:  # type: ignore[type-arg]
    seen, frontier = {start}, [start]
    while frontier:
        state = frontier.pop()
        for (source, _), target in transitions.items():
            if source == state and target not in seen:
                seen.add(target)
                frontier.append(target)
    return seen


def test_every_state_is_reachable() -> None:
    # ERROR too: a protocol error is a move of the table like any other.
    assert reachable(CONNECTION_TRANSITIONS, ConnectionState.HANDSHAKING) == set(ConnectionState)
    assert reachable(SUBSCRIPTION_TRANSITIONS, SubscriptionState.SUBSCRIBING) == set(SubscriptionState)
    assert reachable(PUBLICATION_TRANSITIONS, PublicationState.REQUESTED) == set(PublicationState)


def test_done_and_closed_are_final() -> None:
    assert not [key for key in SUBSCRIPTION_TRANSITIONS if key[0] is SubscriptionState.DONE]
    assert not [key for key in PUBLICATION_TRANSITIONS if key[0] is PublicationState.DONE]
    assert not [key for key in CONNECTION_TRANSITIONS if key[0] is ConnectionState.CLOSED]


def test_error_state_only_lets_our_goodbye_out() -> None:
    assert {key: target for key, target in CONNECTION_TRANSITIONS.items() if key[0] is ConnectionState.ERROR} == {
        (ConnectionState.ERROR, ConnectionEvent.SEND_GOODBYE): ConnectionState.ERROR
    }


def test_terminal_signals_are_exclusive() -> None:
    # Rule 1.7 / wire rule 9: once a terminal signal is queued, no elements and
    # no second terminal signal.
    for event in (PublicationEvent.SEND_ELEMENTS, PublicationEvent.SEND_COMPLETE, PublicationEvent.SEND_ERROR):
        assert (PublicationState.TERMINATING, event) not in PUBLICATION_TRANSITIONS
    for event in (SubscriptionEvent.RECEIVE_ELEMENT, SubscriptionEvent.RECEIVE_SUBSCRIBED):
        assert (SubscriptionState.DONE, event) not in SUBSCRIPTION_TRANSITIONS


def test_elements_need_subscribed_first() -> None:
    assert (SubscriptionState.SUBSCRIBING, SubscriptionEvent.RECEIVE_ELEMENT) not in SUBSCRIPTION_TRANSITIONS
    assert (SubscriptionState.SUBSCRIBING, SubscriptionEvent.RECEIVE_COMPLETE) not in SUBSCRIPTION_TRANSITIONS
    assert (PublicationState.REQUESTED, PublicationEvent.SEND_ELEMENTS) not in PUBLICATION_TRANSITIONS


def test_a_cancelled_subscription_tolerates_everything_in_flight() -> None:
    # Rule 2.8: anything the publisher sent before it saw the cancel.
    for event in SubscriptionEvent:
        assert (SubscriptionState.CANCELLED, event) in SUBSCRIPTION_TRANSITIONS
