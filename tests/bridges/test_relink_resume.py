"""Resuming a Relink link after the TCP connection drops: nothing lost, nothing twice.

A drop is simulated by delivering only a prefix of the bytes in flight (cut
anywhere, even mid-packet) and then building a new :class:`Pair` over the
surviving ``LinkState`` and ``LinkRegistry``.
"""

from __future__ import annotations

from collections import defaultdict

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from relink_pair import Pair

from bridges.relink import (
    ChannelClosed,
    ChannelCloseAcknowledged,
    Connection,
    ConnectionState,
    Consumed,
    Event,
    GeneralPacket,
    GeneralType,
    HandshakeComplete,
    LinkConfig,
    MessageReceived,
    Packet,
    RemoteProtocolError,
    Resumed,
    SequenceAck,
    SequenceAckType,
    ShutdownReceived,
    encode_packet,
)

CONFIG = LinkConfig(connector_id_size=1, listener_id_size=1)


def inject(target: Connection, packet: Packet) -> None:
    engine = target._engine
    assert engine is not None
    target.receive_data(encode_packet(packet, sender_id_size=engine.peer_id_size, receiver_id_size=engine.own_id_size))


def received(events: list[Event], channel: int | None = None) -> list[tuple[int, tuple[bytes, ...]]]:
    return [
        (e.sequence, e.parts)
        for e in events
        if isinstance(e, MessageReceived) and (channel is None or e.channel == channel)
    ]


def test_drop_mid_message_connector_to_listener() -> None:
    pair = Pair(CONFIG, ack_window=2)
    pair.handshake()
    for index in range(6):
        pair.connector.send_message(1, [b"message %d" % index, b"x" * index])
    in_flight = len(pair.connector._outbound)
    first = pair.to_listener(cut=in_flight // 2 + 3)  # three messages and a bit arrive
    assert [s for s, _ in received(first)] == [0, 1, 2]
    pair.listener.consume(1, count=2)  # its ack is lost with the connection
    second = pair.reconnect()
    connector_events, listener_events = second.handshake()
    assert connector_events[0] == HandshakeComplete(resumed=True, epoch=pair.registry.epoch, link_id=1)
    assert received(listener_events) == [(i, (b"message %d" % i, b"x" * i)) for i in range(3, 6)]
    assert Consumed(channel=1, sequence=1, count=2) in connector_events  # from the resume preamble
    assert Resumed() in connector_events and Resumed() in listener_events
    second.listener.consume(1, count=4)
    second.listener.flush_acks()
    second.pump()
    assert second.connector.unacknowledged(1) == 0


def test_drop_listener_to_connector_with_nothing_received() -> None:
    pair = Pair(CONFIG)
    pair.handshake()
    pair.listener.send_message(9, [b"a"])
    pair.listener.send_message(9, [b"b"])
    pair.to_connector(cut=0)  # all lost
    second = pair.reconnect()
    connector_events, _ = second.handshake()
    # The connector never saw channel 9, so its preamble does not mention it;
    # the listener resends everything once the connector's resume arrives.
    assert received(connector_events) == [(0, (b"a",)), (1, (b"b",))]


def resumed_listener_awaiting_preamble(pair: Pair) -> Pair:
    """Reconnect and stop where the listener has resumed but the connector's preamble is unsent."""
    second = pair.reconnect()
    second.to_listener()  # version
    second.to_connector()  # version; the connector sends its request
    second.to_listener()  # request: decided, the listener resumes and writes its preamble
    assert second.listener.state is ConnectionState.OPEN and second.listener.peer_resuming
    return second


def test_messages_sent_while_resuming_wait_for_the_peer() -> None:
    pair = Pair(CONFIG)
    pair.handshake()
    pair.listener.send_message(1, [b"before"])
    pair.pump()
    second = resumed_listener_awaiting_preamble(pair)
    second.listener.send_message(1, [b"during resume"])  # channel 1 holds until the peer's ack
    second.listener.send_message(2, [b"new channel"])  # a new channel does not resume: at once
    held = second.listener.data_to_send()
    assert b"new channel" in held and b"during resume" not in held
    second.connector.receive_data(held)
    second.connector_events += second.connector.events()
    connector_events, _ = second.pump()
    assert received(second.connector_events) == [(0, (b"new channel",)), (1, (b"during resume",))]


def test_close_acknowledged_but_ack_lost() -> None:
    pair = Pair(CONFIG, ack_window=1)
    pair.handshake()
    pair.connector.send_message(1, [b"x"])
    pair.connector.close_channel(1)
    pair.to_listener()
    pair.listener.consume(1, count=1)  # consumed and closed acks are queued, then lost
    second = pair.reconnect()
    connector_events, listener_events = second.handshake()
    assert ChannelCloseAcknowledged(channel=1) in connector_events
    assert not any(isinstance(e, (ChannelClosed, MessageReceived)) for e in listener_events)
    assert second.connector.link is not None and second.connector.link.outgoing == {}


def test_close_lost_in_flight_is_sent_again() -> None:
    pair = Pair(CONFIG)
    pair.handshake()
    pair.connector.send_message(1, [b"x"])
    pair.connector.close_channel(1)
    pair.to_listener(cut=16)  # the message, not the close
    second = pair.reconnect()
    _, listener_events = second.handshake()
    assert listener_events.count(ChannelClosed(channel=1)) == 1
    second.listener.consume(1, count=1)
    connector_events, _ = second.pump()
    assert connector_events[-1] == ChannelCloseAcknowledged(channel=1)


def test_close_received_before_the_drop_ends_the_channel_once() -> None:
    pair = Pair(CONFIG)
    pair.handshake()
    pair.connector.send_message(1, [b"x"])
    pair.connector.close_channel(1)
    assert ChannelClosed(channel=1) in pair.to_listener()
    second = pair.reconnect()
    _, listener_events = second.handshake()
    assert ChannelClosed(channel=1) not in listener_events  # the repeated close is ignored
    second.listener.consume(1, count=1)
    connector_events, _ = second.pump()
    assert connector_events[-1] == ChannelCloseAcknowledged(channel=1)


def test_new_connection_sends_shutdown_first_and_no_pong() -> None:
    pair = Pair(CONFIG)
    pair.handshake()
    pair.connector.send_shutdown()
    pair.listener.send_ping()
    pair.to_listener(cut=0)
    pair.to_connector()
    second = pair.reconnect()
    second.to_listener()  # version
    second.to_connector()
    second.to_listener()  # request, decided
    second.to_connector()  # reply: the connector's link is resumed
    data = second.connector.data_to_send()
    shutdown = bytes.fromhex("80 00 00 00 00 00 00 00")
    resume = bytes.fromhex("60 00 00 00 00 00 00 00")
    assert data == shutdown + resume
    second.listener.receive_data(data)
    assert second.listener.events() == [ShutdownReceived(), Resumed()]


def test_peer_claiming_an_unknown_channel_while_resuming_is_a_violation() -> None:
    pair = Pair(CONFIG)
    pair.handshake()
    second = resumed_listener_awaiting_preamble(pair)
    inject(second.listener, SequenceAck(type=SequenceAckType.RECEIVED, channels=(42,), sequence=0))
    with pytest.raises(RemoteProtocolError, match="claims to know"):
        second.listener.events()


def test_a_channel_with_acknowledged_messages_must_be_resumed() -> None:
    pair = Pair(CONFIG, ack_window=1)
    pair.handshake()
    pair.listener.send_message(1, [b"x"])
    pair.listener.send_message(1, [b"y"])
    pair.to_connector()
    pair.connector.consume(1, count=1)
    pair.to_listener()
    second = resumed_listener_awaiting_preamble(pair)
    inject(second.listener, GeneralPacket(type=GeneralType.RESUME))  # a preamble that forgot channel 1
    with pytest.raises(RemoteProtocolError, match="was not resumed"):
        second.listener.events()


def test_unexpected_resume_is_ignored_as_go_does() -> None:
    pair = Pair(CONFIG)
    pair.handshake()
    inject(pair.connector, GeneralPacket(type=GeneralType.RESUME))
    assert pair.connector.events() == []


# ---- the property: any drops, any cuts, both directions -----------------------------------


class World:
    """Two peers exchanging numbered messages on a few channels across reconnections."""

    CHANNELS = (1, 2, 3)

    def __init__(self, ack_window: int, send_window: int) -> None:
        self.pair = Pair(CONFIG, ack_window=ack_window, send_window=send_window)
        self.sent: dict[tuple[str, int], list[bytes]] = defaultdict(list)
        self.got: dict[tuple[str, int], list[tuple[int, bytes]]] = defaultdict(list)
        self.unconsumed: dict[tuple[str, int], int] = defaultdict(int)

    def side(self, name: str) -> Connection:
        return self.pair.connector if name == "c" else self.pair.listener

    def record(self, receiver: str, events: list[Event]) -> None:
        for event in events:
            if isinstance(event, MessageReceived):
                key = ("c" if receiver == "l" else "l", event.channel)
                self.got[key].append((event.sequence, event.parts[0]))
                self.unconsumed[(receiver, event.channel)] += 1

    def exchange(self) -> None:
        self.record("l", self.pair.to_listener())
        self.record("c", self.pair.to_connector())

    def drop(self, percent_to_listener: int, percent_to_connector: int) -> None:
        # Deliver a prefix of what is in flight (cut anywhere, mid-packet
        # too), then lose the connection.
        cut = len(self.pair.connector._outbound) * percent_to_listener // 100
        self.record("l", self.pair.to_listener(cut))
        cut = len(self.pair.listener._outbound) * percent_to_connector // 100
        self.record("c", self.pair.to_connector(cut))
        self.reconnect()

    def send(self, name: str, channel: int, count: int) -> None:
        connection = self.side(name)
        for _ in range(count):
            if connection.state is not ConnectionState.OPEN or not connection.can_send(channel):
                return
            payload = b"%s%d-%d" % (name.encode(), channel, len(self.sent[(name, channel)]))
            connection.send_message(channel, [payload])
            self.sent[(name, channel)].append(payload)

    def consume(self, name: str, channel: int, count: int) -> None:
        count = min(count, self.unconsumed[(name, channel)])
        if count and self.side(name).state is ConnectionState.OPEN:
            self.side(name).consume(channel, count=count)
            self.unconsumed[(name, channel)] -= count

    def reconnect(self) -> None:
        self.pair = self.pair.reconnect()
        connector_events, listener_events = self.pair.handshake()
        self.record("c", connector_events)
        self.record("l", listener_events)

    def settle(self) -> None:
        for _ in range(20):
            for name in ("c", "l"):
                for channel in self.CHANNELS:
                    self.consume(name, channel, 10**6)
                if self.side(name).state is ConnectionState.OPEN:
                    self.side(name).flush_acks()
            self.exchange()
            if not (self.pair.connector.has_data_to_send or self.pair.listener.has_data_to_send):
                if not any(self.unconsumed.values()):
                    break


send = st.tuples(st.just("send"), st.sampled_from("cl"), st.sampled_from(World.CHANNELS), st.integers(1, 6))
step = st.one_of(
    send,
    send,
    st.tuples(st.just("consume"), st.sampled_from("cl"), st.sampled_from(World.CHANNELS), st.integers(1, 6)),
    st.tuples(st.just("exchange"), st.none(), st.none(), st.none()),
    st.tuples(st.just("drop"), st.integers(0, 100), st.integers(0, 100), st.none()),
    st.tuples(st.just("flush"), st.sampled_from("cl"), st.none(), st.none()),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(step, max_size=25), st.integers(1, 5), st.integers(2, 8))
def test_any_drops_deliver_everything_exactly_once_in_order(
    steps: list[tuple[str, object, object, object]], ack_window: int, send_window: int
) -> None:
    world = World(ack_window, send_window)
    world.pair.handshake()
    for action, a, b, c in steps:
        if action == "send":
            world.send(a, b, c)  # type: ignore[arg-type]
        elif action == "consume":
            world.consume(a, b, c)  # type: ignore[arg-type]
        elif action == "exchange":
            world.exchange()
        elif action == "flush":
            if world.side(a).state is ConnectionState.OPEN:  # type: ignore[arg-type]
                world.side(a).flush_acks()  # type: ignore[arg-type]
        else:
            world.drop(a, b)  # type: ignore[arg-type]
    world.settle()
    for key, payloads in world.sent.items():
        assert world.got[key] == list(enumerate(payloads)), key
    assert set(world.got) <= set(world.sent)
    for name in ("c", "l"):
        link = world.side(name).link
        assert link is not None
        assert all(not state.buffered for state in link.outgoing.values())
