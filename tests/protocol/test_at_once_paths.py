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
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers import ConnectionPair
from rstreams.protocol import Connection, OnNextPart, RemoteProtocolError, encode

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


def outcome(connection: Connection, data: bytes) -> list[Any]:
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
