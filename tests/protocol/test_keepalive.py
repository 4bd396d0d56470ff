"""The keepalive extension (PROTOCOL.md section 8), sans-I/O: negotiation in
hello, ping and pong on the wire, and the timers that decide when to ping
and when a peer is dead."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers import ConnectionPair, decode, load_golden_vectors
from rstreams.protocol import (
    Connection,
    ConnectionState,
    Extension,
    Goodbye,
    Hello,
    IdleTimer,
    KeepaliveAction,
    KeepaliveTimer,
    LocalProtocolError,
    MessageDecoder,
    Ping,
    Pong,
    RemoteProtocolError,
    Subscribe,
    encode,
)

KEEPALIVE = int(Extension.KEEPALIVE)
VECTORS = Path(__file__).parent.parent / "data" / "keepalive-vectors.json"


def pair_with(client_extensions: tuple[int, ...], server_extensions: tuple[int, ...]) -> ConnectionPair:
    pair = ConnectionPair()
    pair.client = Connection(extensions=client_extensions)
    pair.server = Connection(extensions=server_extensions)
    assert pair.send(pair.client) == [Hello(extensions=client_extensions)]
    assert pair.send(pair.server) == [Hello(extensions=server_extensions)]
    return pair


def assert_protocol_error(pair: ConnectionPair, receiver: Connection, data: bytes, match: str) -> None:
    receiver.receive_data(data)
    with pytest.raises(RemoteProtocolError, match=match) as error:
        receiver.events()
    assert receiver.state is ConnectionState.ERROR
    (goodbye,) = [message for message in decode(pair.drain(receiver)) if isinstance(message, Goodbye)]
    assert goodbye.reason == error.value.goodbye_reason
    assert goodbye.reason.startswith("protocol error:")


# ---- the bytes -------------------------------------------------------------


def test_keepalive_vectors_encode_and_decode() -> None:
    vectors = load_golden_vectors(VECTORS)
    assert [vector.code for vector in vectors] == [0, 12, 13]
    for vector in vectors:
        assert encode(vector.message) == vector.wire
        decoder = MessageDecoder()
        decoder.feed(vector.wire)
        assert list(decoder) == [vector.message]


def test_the_vectors_file_names_the_extension_id() -> None:
    document = json.loads(VECTORS.read_text(encoding="utf-8"))
    assert document["extension"] == {"name": "keepalive", "id": KEEPALIVE}
    assert KEEPALIVE == 1


def test_ping_response_is_the_pong_with_its_nonce() -> None:
    assert Ping(nonce=9).response() == Pong(nonce=9)
    with pytest.raises(LocalProtocolError):
        Ping(nonce=-1)
    with pytest.raises(LocalProtocolError):
        Pong(nonce=2**63)


# ---- negotiation -------------------------------------------------------------


@pytest.mark.parametrize(
    ("client", "server", "agreed"),
    [
        ((KEEPALIVE,), (KEEPALIVE,), True),
        ((KEEPALIVE,), (), False),
        ((), (KEEPALIVE,), False),
        ((), (), False),
        ((7, KEEPALIVE, 40), (KEEPALIVE, 99), True),  # unknown ids around it are ignored
    ],
)
def test_keepalive_is_agreed_only_when_both_hellos_list_it(
    client: tuple[int, ...], server: tuple[int, ...], agreed: bool
) -> None:
    pair = pair_with(client, server)
    assert pair.client.keepalive is agreed
    assert pair.server.keepalive is agreed


def test_nothing_is_agreed_before_the_peers_hello() -> None:
    connection = Connection(extensions=(KEEPALIVE,))
    assert not connection.keepalive
    with pytest.raises(LocalProtocolError, match="keepalive extension"):
        connection.send_ping()


def test_the_extension_member_is_announced_as_a_plain_int() -> None:
    connection = Connection(extensions=(Extension.KEEPALIVE,))
    assert connection.data_to_send() == bytes.fromhex("93 00 00 91 01")


# ---- ping and pong -----------------------------------------------------------


def test_ping_is_answered_with_pong_and_the_pong_is_an_event() -> None:
    pair = pair_with((KEEPALIVE,), (KEEPALIVE,))
    nonce = pair.client.send_ping()
    assert pair.client.ping_in_flight == nonce
    wire = pair.drain(pair.client)
    assert wire == bytes.fromhex("92 0c") + bytes([nonce])
    assert pair.deliver(pair.server, wire) == [Ping(nonce=nonce)]
    answer = pair.drain(pair.server)
    assert answer == bytes.fromhex("92 0d") + bytes([nonce])
    assert pair.deliver(pair.client, answer) == [Pong(nonce=nonce)]
    assert pair.client.ping_in_flight is None
    # Both directions at once, with new nonces each time.
    first, second = pair.client.send_ping(), pair.server.send_ping()
    assert pair.send(pair.client) == [Ping(nonce=first)]
    assert pair.send(pair.server) == [Ping(nonce=second), Pong(nonce=first)]
    assert pair.send(pair.client) == [Pong(nonce=second)]
    assert first != nonce


def test_one_ping_in_flight_at_a_time() -> None:
    pair = pair_with((KEEPALIVE,), (KEEPALIVE,))
    pair.client.send_ping()
    with pytest.raises(LocalProtocolError, match="still waiting"):
        pair.client.send_ping()


def test_pong_goes_out_ahead_of_queued_elements() -> None:
    pair = pair_with((KEEPALIVE,), (KEEPALIVE,))
    subscriber = pair.client.subscribe("blob", 2)
    assert [type(event) for event in pair.send(pair.client)] == [Subscribe]
    pair.server.accept(subscriber)
    pair.drain(pair.server)  # the subscribed
    pair.server.send_elements(subscriber, [b"x" * 1000, b"y" * 1000])
    pair.client.send_ping()
    pair.server.receive_data(pair.drain(pair.client))
    pair.server.events()
    messages = decode(pair.drain(pair.server))
    assert messages[0] == Pong(nonce=1)


@pytest.mark.parametrize("message", [Ping(nonce=1), Pong(nonce=1)], ids=["ping", "pong"])
@pytest.mark.parametrize(("client", "server"), [((), ()), ((KEEPALIVE,), ()), ((), (KEEPALIVE,))])
def test_ping_or_pong_without_the_extension_is_a_protocol_error(
    message: Ping | Pong, client: tuple[int, ...], server: tuple[int, ...]
) -> None:
    pair = pair_with(client, server)
    assert_protocol_error(pair, pair.server, encode(message), "without the keepalive extension")


def test_pong_for_no_ping_is_a_protocol_error() -> None:
    pair = pair_with((KEEPALIVE,), (KEEPALIVE,))
    assert_protocol_error(pair, pair.client, encode(Pong(nonce=1)), "answers no ping")


def test_pong_with_the_wrong_nonce_is_a_protocol_error() -> None:
    pair = pair_with((KEEPALIVE,), (KEEPALIVE,))
    nonce = pair.client.send_ping()
    pair.drain(pair.client)
    assert_protocol_error(pair, pair.client, encode(Pong(nonce=nonce + 1)), "answers no ping")


def test_ping_before_hello_is_a_protocol_error() -> None:
    connection = Connection(extensions=(KEEPALIVE,))
    pair = ConnectionPair()
    pair.server = connection
    assert_protocol_error(pair, connection, encode(Ping(nonce=1)), "expected hello")


def test_ping_after_our_goodbye_is_dropped_unanswered() -> None:
    pair = pair_with((KEEPALIVE,), (KEEPALIVE,))
    pair.client.send_goodbye("bye")
    pair.drain(pair.client)
    assert pair.deliver(pair.client, encode(Ping(nonce=3))) == []
    assert not pair.client.has_data_to_send
    with pytest.raises(LocalProtocolError):
        pair.client.send_ping()


@settings(deadline=None, max_examples=200)
@given(
    nonces=st.lists(st.integers(0, 2**63 - 1), max_size=20),
    cuts=st.lists(st.integers(0, 64), max_size=10),
)
def test_pings_in_any_read_split_are_each_answered_once(nonces: list[int], cuts: list[int]) -> None:
    pair = pair_with((KEEPALIVE,), (KEEPALIVE,))
    wire = b"".join(encode(Ping(nonce=nonce)) for nonce in nonces)
    events = []
    start = 0
    for cut in sorted(cuts) + [len(wire)]:
        pair.server.receive_data(wire[start : max(start, cut)])
        events += pair.server.events()
        start = max(start, cut)
    assert events == [Ping(nonce=nonce) for nonce in nonces]
    assert decode(pair.drain(pair.server)) == [Pong(nonce=nonce) for nonce in nonces]


# ---- the timers ----------------------------------------------------------------


def test_keepalive_timer_pings_after_the_interval_and_waits_for_the_pong() -> None:
    timer = KeepaliveTimer(interval=30, timeout=10, now=100)
    assert timer.deadline == 130
    assert timer.poll(129.9) is KeepaliveAction.NOTHING
    assert timer.poll(130) is KeepaliveAction.PING
    assert timer.waiting_for_pong
    assert timer.deadline == 140
    assert timer.poll(139) is KeepaliveAction.NOTHING
    timer.pong_received(139)
    assert not timer.waiting_for_pong
    assert timer.deadline == 169
    assert timer.poll(169) is KeepaliveAction.PING


def test_keepalive_timer_declares_the_peer_dead_when_the_pong_is_late() -> None:
    timer = KeepaliveTimer(interval=30, timeout=10, now=0)
    assert timer.poll(31) is KeepaliveAction.PING  # late wake-ups count from the real send
    assert timer.deadline == 41
    assert timer.poll(40.9) is KeepaliveAction.NOTHING
    assert timer.poll(41) is KeepaliveAction.DEAD
    assert timer.poll(50) is KeepaliveAction.DEAD


@pytest.mark.parametrize(("interval", "timeout"), [(0, 1), (1, 0), (-1, 1), (float("nan"), 1)])
def test_keepalive_timer_refuses_non_positive_times(interval: float, timeout: float) -> None:
    with pytest.raises(ValueError):
        KeepaliveTimer(interval=interval, timeout=timeout, now=0)


def test_idle_timer() -> None:
    timer = IdleTimer(timeout=300, now=10)
    assert timer.deadline == 310
    assert not timer.expired(309)
    timer.heard(100)
    assert not timer.expired(399)
    assert timer.expired(400)
    timer.busy(500)
    assert timer.deadline == 800
    timer.heard(450)  # an earlier time never moves the deadline back
    assert timer.deadline == 800
    with pytest.raises(ValueError):
        IdleTimer(timeout=0, now=0)


@settings(deadline=None, max_examples=200)
@given(
    steps=st.lists(
        st.tuples(st.sampled_from(["poll", "pong"]), st.floats(0, 100, allow_nan=False)),
        max_size=30,
    )
)
def test_keepalive_timer_never_pings_twice_without_a_pong_nor_dies_early(steps: list[tuple[str, float]]) -> None:
    interval, timeout = 5.0, 3.0
    timer = KeepaliveTimer(interval=interval, timeout=timeout, now=0)
    now = 0.0
    ping_at: float | None = None
    for what, delay in steps:
        now += delay
        if what == "pong":
            if ping_at is not None:
                timer.pong_received(now)
                ping_at = None
            continue
        action = timer.poll(now)
        if action is KeepaliveAction.PING:
            assert ping_at is None
            ping_at = now
        elif action is KeepaliveAction.DEAD:
            assert ping_at is not None and now - ping_at >= timeout
            return
        else:
            assert ping_at is None or now - ping_at < timeout
