"""A subscribe is answered before anything that ends its stream is applied;
and the transition tables decide every path, the one-step ones included.

Issue 18, defect 1: a subscribe followed by a cancel or a request(n <= 0) for
the same Id in one read reached the application as two events of one batch,
but the machine had applied both, so the application's answer (``accept`` or
``fail``) found no publication and raised. ``events()`` now ends its batch
before such a message and applies it on the next call.
"""

from __future__ import annotations

import msgpack
import pytest

from helpers import ConnectionPair, decode
from rstreams.protocol import (
    Cancel,
    ConnectionState,
    InvalidRequest,
    LocalProtocolError,
    OnError,
    RemoteProtocolError,
    Request,
    Subscribe,
    Subscribed,
    encode,
)
from rstreams.protocol import _connection, _state

_pack = msgpack.Packer(use_bin_type=True).pack


def opened() -> ConnectionPair:
    pair = ConnectionPair()
    pair.open()
    return pair


def test_a_cancel_waits_until_the_subscribe_it_ends_is_answered() -> None:
    pair = opened()
    events = pair.deliver(pair.server, encode(Subscribe(publisher="p", subscriber=1)) + encode(Cancel(subscriber=1)))
    assert events == [Subscribe(publisher="p", subscriber=1)]
    pair.server.accept(1)  # the publication is still there to answer
    assert pair.server.events() == [Cancel(subscriber=1)]
    assert not pair.server.is_publishing(1)
    assert decode(pair.drain(pair.server)) == [Subscribed(subscriber=1)]  # and nothing after it


@pytest.mark.parametrize("demand", [0, -1])
def test_a_request_for_nothing_waits_too(demand: int) -> None:
    pair = opened()
    data = encode(Subscribe(publisher="p", subscriber=1)) + _pack([2, 1, demand])
    assert pair.deliver(pair.server, data) == [Subscribe(publisher="p", subscriber=1)]
    pair.server.fail(1, "no such publisher: p")  # refusing works as well as accepting
    assert pair.server.events() == []  # the stream already ended: the request crossed it
    sent = decode(pair.drain(pair.server))
    assert sent == [OnError(subscriber=1, error="no such publisher: p")]


def test_request_for_nothing_after_accept_fails_the_stream() -> None:
    pair = opened()
    data = encode(Subscribe(publisher="p", subscriber=1)) + _pack([2, 1, 0])
    pair.deliver(pair.server, data)
    pair.server.accept(1)
    assert pair.server.events() == [InvalidRequest(subscriber=1, demand=0)]
    sent = decode(pair.drain(pair.server))
    assert sent[0] == Subscribed(subscriber=1)
    assert isinstance(sent[1], OnError) and "3.9" in sent[1].error


def test_more_demand_does_not_wait() -> None:
    pair = opened()
    data = encode(Subscribe(publisher="p", subscriber=1)) + encode(Request(subscriber=1, demand=5))
    assert pair.deliver(pair.server, data) == [Subscribe(publisher="p", subscriber=1), Request(subscriber=1, demand=5)]


def test_messages_about_other_streams_do_not_wait() -> None:
    pair = opened()
    pair.deliver(pair.server, encode(Subscribe(publisher="p", subscriber=1)))
    pair.server.accept(1)
    data = encode(Subscribe(publisher="q", subscriber=2)) + encode(Cancel(subscriber=1))
    assert pair.deliver(pair.server, data) == [Subscribe(publisher="q", subscriber=2), Cancel(subscriber=1)]


def test_a_reused_id_gets_its_own_publication() -> None:
    pair = opened()
    data = (
        encode(Subscribe(publisher="first", subscriber=1))
        + encode(Cancel(subscriber=1))
        + encode(Subscribe(publisher="second", subscriber=1, initial_demand=2))
    )
    assert pair.deliver(pair.server, data) == [Subscribe(publisher="first", subscriber=1)]
    pair.server.accept(1)
    assert pair.server.events() == [Cancel(subscriber=1), Subscribe(publisher="second", subscriber=1, initial_demand=2)]
    pair.server.accept(1, 8)
    assert pair.server.publication_demand(1) == 2


def test_a_held_message_that_breaks_the_protocol_is_still_an_error() -> None:
    pair = opened()
    data = encode(Subscribe(publisher="p", subscriber=1)) + _pack([2, 1, "x"])
    assert pair.deliver(pair.server, data) == [Subscribe(publisher="p", subscriber=1)]
    pair.server.accept(1)
    with pytest.raises(RemoteProtocolError):
        pair.server.events()
    assert pair.server.state is ConnectionState.ERROR


# ---- the tables decide, on every path ----------------------------------------


def client_with_active_stream() -> tuple[ConnectionPair, int]:
    pair = opened()
    subscriber = pair.open_stream(pair.client, initial_demand=5)
    return pair, subscriber


def test_a_rule_removed_from_the_table_closes_the_one_step_onComplete(monkeypatch: pytest.MonkeyPatch) -> None:
    pair, subscriber = client_with_active_stream()
    key = (_state.SubscriptionState.ACTIVE, _state.SubscriptionEvent.RECEIVE_COMPLETE)
    monkeypatch.delitem(_state.SUBSCRIPTION_TRANSITIONS, key)
    with pytest.raises(RemoteProtocolError, match="onComplete not allowed"):
        pair.deliver(pair.client, _pack([6, subscriber]))


def test_a_rule_removed_from_the_table_closes_the_one_step_subscribed(monkeypatch: pytest.MonkeyPatch) -> None:
    pair = opened()
    subscriber = pair.client.subscribe("p")
    pair.send(pair.client)
    key = (_state.SubscriptionState.SUBSCRIBING, _state.SubscriptionEvent.RECEIVE_SUBSCRIBED)
    monkeypatch.delitem(_state.SUBSCRIPTION_TRANSITIONS, key)
    with pytest.raises(RemoteProtocolError, match="subscribed not allowed"):
        pair.deliver(pair.client, _pack([4, subscriber, 0]))


def test_a_rule_removed_from_the_table_closes_the_onNext_hot_path(monkeypatch: pytest.MonkeyPatch) -> None:
    pair = opened()
    key = (_state.SubscriptionState.ACTIVE, _state.SubscriptionEvent.RECEIVE_ELEMENT)
    monkeypatch.delitem(_state.SUBSCRIPTION_TRANSITIONS, key)
    # The hot path's flags are read off the table when the module is
    # imported; rebuilt here, as a table changed in the source would be.
    monkeypatch.setattr(_connection, "_TAKES_ELEMENTS", _connection.element_flags())
    subscriber = pair.open_stream(pair.client, initial_demand=5)
    with pytest.raises(RemoteProtocolError):
        pair.deliver(pair.client, _pack([5, subscriber, b"x"]))


def test_a_rule_removed_from_the_table_stops_queueing_elements(monkeypatch: pytest.MonkeyPatch) -> None:
    pair, subscriber = client_with_active_stream()
    key = (_state.PublicationState.ACTIVE, _state.PublicationEvent.SEND_ELEMENTS)
    monkeypatch.delitem(_state.PUBLICATION_TRANSITIONS, key)
    with pytest.raises(LocalProtocolError, match="cannot send elements"):
        pair.server.send_elements(subscriber, [b"x"])


def test_a_rule_changed_in_the_table_changes_request_for_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    # Were request(n <= 0) to leave an active stream alone, it would.
    pair, subscriber = client_with_active_stream()
    key = (_state.PublicationState.ACTIVE, _state.PublicationEvent.RECEIVE_INVALID_REQUEST)
    monkeypatch.setitem(_state.PUBLICATION_TRANSITIONS, key, _state.PublicationState.ACTIVE)
    assert pair.deliver(pair.server, _pack([2, subscriber, 0])) == []
    assert pair.server.is_publishing(subscriber)


def test_the_hot_path_flags_are_the_tables() -> None:
    assert _connection._TAKES_ELEMENTS == {state: _state.takes_elements(state) for state in _state.SubscriptionState}
    assert [state for state, takes in _connection._TAKES_ELEMENTS.items() if takes] == [_state.SubscriptionState.ACTIVE]


def test_the_tables_name_every_move_the_machine_makes() -> None:
    # ERROR and the ends of streams are moves of the tables, not assignments.
    assert _state.CONNECTION_TRANSITIONS[ConnectionState.OPEN, _state.ConnectionEvent.PROTOCOL_ERROR] is ConnectionState.ERROR
    for state in set(_state.PublicationState) - {_state.PublicationState.DONE}:
        assert _state.PUBLICATION_TRANSITIONS[state, _state.PublicationEvent.CONNECTION_ENDED] is _state.PublicationState.DONE
    for state in set(_state.SubscriptionState) - {_state.SubscriptionState.DONE}:
        assert _state.SUBSCRIPTION_TRANSITIONS[state, _state.SubscriptionEvent.CONNECTION_ENDED] is _state.SubscriptionState.DONE
