"""The one-step paths for subscribed and onComplete against the general path.

``Connection`` takes the usual subscribed and onComplete (well formed, open
connection, a stream in the state that expects it) in one step, and sends
everything else through ``message_from_wire`` and ``_dispatch``. Fed the
same bytes, a connection with the one-step paths and one without must give
the same events, the same error word for word, the same state afterwards
and the same bytes to send.
"""

from __future__ import annotations

from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers import ConnectionPair
from rstreams.protocol import Connection, OnNextPart, RemoteProtocolError, Subscribe, encode

_pack = msgpack.Packer(use_bin_type=True).pack


def client_with_streams(at_once: bool, state: str = "open") -> tuple[Connection, list[int]]:
    """A client with streams in every state: subscribing (1, 2), active (3,
    4), cancelled (5), active in the middle of a split element (6). With
    ``state="goodbye"`` it has said goodbye since; with ``"handshaking"``
    it has subscribed to 1..6 before the peer's hello arrived."""
    pair = ConnectionPair()
    if state == "handshaking":
        ids = [pair.client.subscribe(f"p{n}", 10) for n in range(6)]
        pair.client.data_to_send(1 << 20)
    else:
        pair.open()
        ids = [pair.client.subscribe(f"p{n}", 10) for n in range(6)]
        pair.send(pair.client)
        for subscriber in ids[2:]:
            pair.server.accept(subscriber, 8 if subscriber == ids[3] else 0)
        pair.send(pair.server)
        pair.client.cancel(ids[4])
        pair.client.receive_data(encode(OnNextPart(subscriber=ids[5], element=0, data=b"half")))
        pair.client.events()
        pair.client.data_to_send(1 << 20)
        if state == "goodbye":
            pair.client.send_goodbye("leaving")
            pair.client.data_to_send(1 << 20)
    if not at_once:
        pair.client._AT_ONCE = {}  # type: ignore[misc]
    return pair.client, ids


# Stream ids 1..6 exist (7 does not), so most fields name a real stream.
subscriber = st.one_of(
    st.integers(min_value=1, max_value=7),
    st.sampled_from([0, 99, -1, 2**63 - 1, 2**63, 2**64 - 1, 6.0, True, "6", b"\x06", None]),
)
size = st.one_of(
    st.sampled_from([0, 8]),
    st.sampled_from([-1, 16 * 2**20, 16 * 2**20 + 1, 2**63, 8.0, False, "8", None]),
)
message = st.one_of(
    st.tuples(st.just(4), subscriber, size),
    st.tuples(st.just(6), subscriber),
    st.tuples(st.sampled_from([4.0, 6.0, True, "4"]), subscriber, size),
    st.tuples(st.sampled_from([4, 6]), subscriber, size, size),
    st.tuples(st.sampled_from([4, 6])),
    st.tuples(st.just(6), subscriber, size),
    st.tuples(st.just(4), subscriber),
)


def _received(connection: Connection, data: bytes) -> list[Any]:
    """What the connection made of ``data``: each events() call's events,
    then the error if one came, word for word."""
    connection.receive_data(data)
    results: list[Any] = []
    for _ in range(20):
        try:
            events = connection.events()
        except RemoteProtocolError as exc:
            results.append(("error", type(exc).__name__, str(exc)))
            break
        if not events:
            break
        results.append(events)
    return results


def outcome(connection: Connection, data: bytes) -> list[Any]:
    """The subscribing side: what it received, its streams' states, its output."""
    results = _received(connection, data)
    subscriptions = {s: (sub.state, sub.element_size) for s, sub in connection._subscriptions.items()}
    return [results, subscriptions, connection.state, bytes(connection.data_to_send(1 << 20))]


@settings(max_examples=500, deadline=None)
@given(messages=st.lists(message, min_size=1, max_size=8), state=st.sampled_from(["open", "goodbye", "handshaking"]))
def test_one_step_and_general_paths_agree(messages: list[tuple[Any, ...]], state: str) -> None:
    data = b"".join(_pack(m) for m in messages)
    fast, _ = client_with_streams(at_once=True, state=state)
    general, _ = client_with_streams(at_once=False, state=state)
    assert outcome(fast, data) == outcome(general, data)


def test_the_usual_answers_take_the_one_step_path() -> None:
    """Not a tautology of the test above: the one-step path is really used
    (a general path only would pass it too)."""
    client, ids = client_with_streams(at_once=True)
    calls = []
    table = dict(client._AT_ONCE)
    client._AT_ONCE = {code: (lambda step: lambda *a: calls.append(step.__name__) or step(*a))(step) for code, step in table.items()}  # type: ignore[misc]
    client.receive_data(_pack((4, ids[0], 0)) + _pack((6, ids[2])))
    events = client.events()
    assert [type(e).__name__ for e in events] == ["Subscribed", "OnComplete"]
    assert calls == ["_answered_at_once", "_completed_at_once"]


def server_with_publications(at_once: bool, state: str = "open") -> Connection:
    """A server publishing on streams 1 and 2, with stream 3 finished (its
    Id remembered); with ``state="goodbye"`` it has said goodbye since; with
    ``"handshaking"`` the peer's hello has not arrived."""
    pair = ConnectionPair()
    if state != "handshaking":
        pair.open()
        for subscriber in (1, 2, 3):
            pair.deliver(pair.server, encode(Subscribe(publisher=f"p{subscriber}", subscriber=subscriber, initial_demand=5)))
            pair.server.accept(subscriber)
        pair.server.complete(3)
        pair.server.data_to_send(1 << 20)
        if state == "goodbye":
            pair.server.send_goodbye("leaving")
            pair.server.data_to_send(1 << 20)
    if not at_once:
        pair.server._AT_ONCE = {}  # type: ignore[misc]
    return pair.server


publisher = st.one_of(st.sampled_from(["range?count=1", ""]), st.sampled_from([b"range", 7, None]))
demand = st.one_of(
    st.integers(min_value=-2, max_value=3),
    st.sampled_from([-(2**63), 2**63 - 1, 2**63, 2**64 - 1, 1.0, True, "1", None]),
)
subscribe = st.one_of(
    st.tuples(st.just(1), publisher, subscriber, demand),
    st.tuples(st.just(1), publisher, subscriber),
    st.tuples(st.sampled_from([1.0, True, "1"]), publisher, subscriber, demand),
    st.tuples(st.just(1), publisher, subscriber, demand, demand),
    st.tuples(st.just(1), publisher),
)


@settings(max_examples=800, deadline=None)
@given(messages=st.lists(subscribe, min_size=1, max_size=8), state=st.sampled_from(["open", "goodbye", "handshaking"]))
def test_one_step_and_general_subscribe_agree(messages: list[tuple[Any, ...]], state: str) -> None:
    data = b"".join(_pack(m) for m in messages)
    fast = server_with_publications(at_once=True, state=state)
    general = server_with_publications(at_once=False, state=state)
    assert publisher_outcome(fast, data) == publisher_outcome(general, data)


def publisher_outcome(connection: Connection, data: bytes) -> list[Any]:
    """The publishing side: what it received, its publications (open and
    finished), its output."""
    results = _received(connection, data)
    publications = {
        s: (p.state, p.publisher, p.demand.outstanding) for s, p in connection._publications.items()
    }
    finished = list(connection._finished_publications)
    return [results, publications, finished, connection.state, bytes(connection.data_to_send(1 << 20))]


_SUBSCRIBERS = [0, 1, 3, 4, 6, 7, 2**63 - 1, 2**63, -1, 6.0, True, "6", None]
_SIZES = [0, 8, -1, 2**63, 8.0, False, None]
_DEMANDS = [0, 1, -1, -2, 2**63, 2**64 - 1, 1.0, True, None]
_NAMES = ["range", "", b"range", 7]


def single_messages_to_a_subscriber() -> list[tuple[Any, ...]]:
    messages: list[tuple[Any, ...]] = []
    for code in (4, 6, 4.0, 6.0, True):
        messages.append((code,))
        for subscriber in _SUBSCRIBERS:
            messages.append((code, subscriber))
            for size in _SIZES:
                messages.append((code, subscriber, size))
                messages.append((code, subscriber, size, 0))
    return messages


def single_subscribes() -> list[tuple[Any, ...]]:
    messages: list[tuple[Any, ...]] = []
    for code in (1, 1.0, True):
        for name in _NAMES:
            messages.append((code, name))
            for subscriber in _SUBSCRIBERS:
                messages.append((code, name, subscriber))
                for demand in _DEMANDS:
                    messages.append((code, name, subscriber, demand))
                    messages.append((code, name, subscriber, demand, 0))
    return messages


@pytest.mark.parametrize("state", ["open", "goodbye", "handshaking"])
def test_every_single_answer_takes_either_path_alike(state: str) -> None:
    """Exhaustive over small value sets, so no case rests on luck."""
    for message in single_messages_to_a_subscriber():
        data = _pack(message)
        fast, _ = client_with_streams(at_once=True, state=state)
        general, _ = client_with_streams(at_once=False, state=state)
        assert outcome(fast, data) == outcome(general, data), message


@pytest.mark.parametrize("state", ["open", "goodbye", "handshaking"])
def test_every_single_subscribe_takes_either_path_alike(state: str) -> None:
    for message in single_subscribes():
        data = _pack(message)
        fast = server_with_publications(at_once=True, state=state)
        general = server_with_publications(at_once=False, state=state)
        assert publisher_outcome(fast, data) == publisher_outcome(general, data), message
