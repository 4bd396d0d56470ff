"""The Relink connection after the handshake: messages, windows, acks, close, shutdown, ping."""

from __future__ import annotations

import pytest
from relink_pair import Pair

from bridges.relink import (
    ChannelAck,
    ChannelAckType,
    ChannelClosed,
    ChannelCloseAcknowledged,
    ChannelOp,
    ChannelOpType,
    Connection,
    ConnectionClosed,
    ConnectionState,
    Consumed,
    GeneralPacket,
    GeneralType,
    LimitExceeded,
    LinkConfig,
    LinkShutdown,
    LocalProtocolError,
    MessagePacket,
    MessageReceived,
    Packet,
    Ping,
    Pong,
    Received,
    RelinkLimits,
    RemoteProtocolError,
    SequenceAck,
    SequenceAckType,
    ShutdownReceived,
    encode_packet,
)
from bridges.relink._link import IncomingChannel, OutgoingChannel
from bridges.relink._sequence import MASK

CONFIG = LinkConfig(connector_id_size=2, listener_id_size=1)


def open_pair(**kwargs: object) -> Pair:
    pair = Pair(kwargs.pop("config", CONFIG), **kwargs)  # type: ignore[arg-type]
    pair.handshake()
    return pair


def messages(events: list[object]) -> list[tuple[int, int, tuple[bytes, ...]]]:
    return [(e.channel, e.sequence, e.parts) for e in events if isinstance(e, MessageReceived)]


def inject(target: Connection, packet: Packet) -> None:
    """Feed ``target`` a packet as its peer would send it."""
    engine = target._engine
    assert engine is not None
    target.receive_data(encode_packet(packet, sender_id_size=engine.peer_id_size, receiver_id_size=engine.own_id_size))


# ---- messages ---------------------------------------------------------------------


def test_messages_both_directions_with_sequences() -> None:
    pair = open_pair()
    assert pair.connector.send_message(0x0102, [b"a", b"", b"ccc"]) == 0
    assert pair.connector.send_message(0x0102, [b"b"]) == 1
    assert pair.connector.send_message(7, []) == 0
    assert pair.listener.send_message(255, [b"back"]) == 0
    connector_events, listener_events = pair.pump()
    assert messages(listener_events) == [(0x0102, 0, (b"a", b"", b"ccc")), (0x0102, 1, (b"b",)), (7, 0, ())]
    assert messages(connector_events) == [(255, 0, (b"back",))]
    assert pair.listener.unconsumed(0x0102) == 2 and pair.connector.unacknowledged(0x0102) == 2
    stats = pair.connector.statistics()
    assert (stats.messages_sent, stats.messages_received) == (3, 1)


def test_consume_and_flush_acks() -> None:
    pair = open_pair(ack_window=4)
    for index in range(6):
        pair.connector.send_message(1, [bytes((index,))])
    pair.pump()
    pair.listener.consume(1, count=3)
    assert pair.listener.pending_acks == (1,) and not pair.listener.has_data_to_send  # batched
    pair.listener.consume(1, sequence=3)  # 4 since the last ack: the window is reached
    assert pair.listener.pending_acks == () and pair.listener.has_data_to_send
    assert pair.to_connector() == [Consumed(channel=1, sequence=3, count=4)]
    pair.listener.consume(1, count=1)
    assert pair.listener.pending_acks == (1,)
    pair.listener.flush_acks()  # the I/O layer's ack timer
    assert pair.to_connector() == [Consumed(channel=1, sequence=4, count=1)]
    assert pair.connector.unacknowledged(1) == 1 and pair.listener.unconsumed(1) == 1


def test_consumed_ack_bytes() -> None:
    pair = open_pair(ack_window=1)
    pair.connector.send_message(0x0102, [b"x"])
    pair.pump()
    pair.listener.consume(0x0102, count=1)
    # A sequence ack names the connector's channel: its 2-byte id space.
    assert pair.listener.data_to_send() == bytes.fromhex("2d 00 02 01 00 00 00 00")


def test_send_window() -> None:
    pair = open_pair(send_window=3, ack_window=1)
    for index in range(3):
        assert pair.connector.can_send(9)
        pair.connector.send_message(9, [b"m"])
    assert pair.connector.window_available(9) == 0 and not pair.connector.can_send(9)
    with pytest.raises(LocalProtocolError, match="window"):
        pair.connector.send_message(9, [b"too many"])
    assert pair.connector.window_available(10) == 3  # per channel
    pair.pump()
    pair.listener.consume(9, count=2)
    assert pair.to_connector() == [Consumed(channel=9, sequence=1, count=2)]
    assert pair.connector.window_available(9) == 2


def test_consume_misuse() -> None:
    pair = open_pair()
    pair.connector.send_message(1, [b"x"])
    pair.pump()
    with pytest.raises(LocalProtocolError):
        pair.listener.consume(1, count=2)
    with pytest.raises(LocalProtocolError):
        pair.listener.consume(1, sequence=1)
    with pytest.raises(LocalProtocolError):
        pair.listener.consume(2, count=1)
    with pytest.raises(LocalProtocolError):
        pair.listener.consume(1)
    pair.listener.consume(1, count=0)  # nothing, harmlessly


def test_multicast() -> None:
    pair = open_pair(ack_window=1)
    pair.connector.send_message(2, [b"first on 2"])
    pair.connector.data_to_send()
    assert pair.connector.send_multicast([1, 2, 2], [b"all"]) == (0, 1, 2)
    # One multicast packet: header, padding, count 3, the three 2-byte ids.
    assert pair.connector.data_to_send()[:14] == bytes.fromhex("13 01 00 00 03 00 00 00 01 00 02 00 02 00")
    fresh = open_pair()
    fresh.connector.send_multicast([1, 2, 2], [b"all"])
    assert messages(fresh.pump()[1]) == [(1, 0, (b"all",)), (2, 0, (b"all",)), (2, 1, (b"all",))]
    with pytest.raises(LocalProtocolError):
        fresh.connector.send_multicast([], [b"none"])
    with pytest.raises(LocalProtocolError, match="window"):
        open_pair(send_window=1).connector.send_multicast([1, 1], [b"twice"])


def test_sequence_numbers_wrap_around() -> None:
    pair = open_pair(ack_window=1)
    outgoing = OutgoingChannel(4)
    outgoing.consumed = MASK - 2  # as if 2**32 - 2 messages were consumed
    incoming = IncomingChannel(4, 64)
    incoming.received = incoming.consumed = incoming.consume_sent = MASK - 2
    assert pair.connector.link is not None and pair.listener.link is not None
    pair.connector.link.outgoing[4] = outgoing
    pair.listener.link.incoming[4] = incoming
    sequences = [pair.connector.send_message(4, [bytes((i,))]) for i in range(5)]
    assert sequences == [MASK - 1, MASK, 0, 1, 2]
    _, listener_events = pair.pump()
    assert [s for _, s, _ in messages(listener_events)] == sequences
    pair.listener.consume(4, sequence=1)  # across the wrap: 4 messages
    assert pair.to_connector() == [Consumed(channel=4, sequence=1, count=4)]
    pair.listener.consume(4, count=1)
    assert pair.to_connector() == [Consumed(channel=4, sequence=2, count=1)]
    assert pair.connector.unacknowledged(4) == 0


def test_acks_out_of_modular_range_are_violations() -> None:
    pair = open_pair()
    pair.connector.send_message(1, [b"a"])
    pair.connector.send_message(1, [b"b"])
    pair.pump()
    inject(pair.connector, SequenceAck(type=SequenceAckType.CONSUMED, channels=(1,), sequence=2))
    with pytest.raises(RemoteProtocolError, match="out of modular range"):
        pair.connector.events()
    assert pair.connector.state is ConnectionState.ERROR
    pair = open_pair()
    pair.connector.send_message(1, [b"a"])
    inject(pair.connector, SequenceAck(type=SequenceAckType.RECEIVED, channels=(1,), sequence=MASK - 3))
    with pytest.raises(RemoteProtocolError, match="out of modular range"):
        pair.connector.events()


def test_channel_form_acks_acknowledge_the_next_message() -> None:
    pair = open_pair()
    for _ in range(3):
        pair.connector.send_message(1, [b"m"])
    pair.pump()
    inject(pair.connector, ChannelAck(type=ChannelAckType.RECEIVED, channels=(1,)))
    inject(pair.connector, ChannelAck(type=ChannelAckType.CONSUMED, channels=(1,)))
    inject(pair.connector, SequenceAck(type=SequenceAckType.RECEIVED, channels=(1,), sequence=2))
    assert pair.connector.events() == [
        Received(channel=1, sequence=0, count=1),
        Consumed(channel=1, sequence=0, count=1),
        Received(channel=1, sequence=2, count=2),
    ]


def test_acks_of_unknown_channels_are_ignored() -> None:
    pair = open_pair()
    inject(pair.connector, SequenceAck(type=SequenceAckType.CONSUMED, channels=(77,), sequence=0))
    inject(pair.connector, ChannelAck(type=ChannelAckType.CLOSED, channels=(78,)))
    assert pair.connector.events() == []


def test_unconsumed_limit_stops_a_peer_that_overruns_its_window() -> None:
    pair = open_pair(limits=RelinkLimits(max_unconsumed=2))
    pair.connector._engine.send_window = 5  # type: ignore[union-attr]  # a peer with a larger window
    for _ in range(3):
        pair.connector.send_message(1, [b"m"])
    assert len(pair.to_listener()) == 2  # the events before the violation
    with pytest.raises(LimitExceeded, match="unconsumed"):
        pair.listener.events()


def test_send_limits_protect_the_peer() -> None:
    pair = open_pair(limits=RelinkLimits(max_parts=2, max_part_size=4, max_message_size=6))
    for parts in ([b"", b"", b""], [b"12345"], [b"1234", b"123"], ["text"]):
        with pytest.raises(LocalProtocolError):
            pair.connector.send_message(1, parts)  # type: ignore[arg-type]
    with pytest.raises(LocalProtocolError, match="channel id"):
        pair.connector.send_message(2**16, [b""])
    assert pair.connector.link is not None and pair.connector.link.outgoing == {}


def test_sending_before_the_handshake_is_refused() -> None:
    pair = Pair(CONFIG)
    with pytest.raises(LocalProtocolError, match="state"):
        pair.connector.send_message(1, [b"early"])
    with pytest.raises(LocalProtocolError):
        pair.listener.send_ping()
    assert not pair.connector.can_send(1)


# ---- close and reopen ----------------------------------------------------------------


def test_close_waits_for_consumption_then_the_id_is_reused() -> None:
    pair = open_pair(ack_window=100)
    pair.connector.send_message(3, [b"one"])
    pair.connector.send_message(3, [b"two"])
    pair.connector.close_channel(3)
    assert not pair.connector.can_send(3)
    with pytest.raises(LocalProtocolError, match="closing"):
        pair.connector.send_message(3, [b"three"])
    with pytest.raises(LocalProtocolError, match="already closing"):
        pair.connector.close_channel(3)
    _, listener_events = pair.pump()
    assert listener_events[-1] == ChannelClosed(channel=3)
    assert not pair.listener.has_data_to_send  # nothing consumed yet: no closed ack
    pair.listener.consume(3, count=1)
    assert not pair.listener.has_data_to_send
    pair.listener.consume(3, count=1)
    # All consumed: the consumed ack, then the closed ack, at once.
    assert pair.listener.data_to_send()[8:] == bytes.fromhex("85 00 03 00 00 00 00 00")
    inject(pair.connector, SequenceAck(type=SequenceAckType.CONSUMED, channels=(3,), sequence=1))
    inject(pair.connector, ChannelAck(type=ChannelAckType.CLOSED, channels=(3,)))
    assert pair.connector.events() == [Consumed(channel=3, sequence=1, count=2), ChannelCloseAcknowledged(channel=3)]
    assert pair.listener.link is not None and 3 not in pair.listener.link.incoming
    assert pair.connector.send_message(3, [b"reopened"]) == 0
    assert messages(pair.pump()[1]) == [(3, 0, (b"reopened",))]


def test_close_of_an_unused_channel_is_refused() -> None:
    pair = open_pair()
    with pytest.raises(LocalProtocolError, match="first message"):
        pair.connector.close_channel(5)


def test_close_for_a_channel_the_receiver_never_saw_is_ignored() -> None:
    pair = open_pair()
    inject(pair.listener, ChannelOp(type=ChannelOpType.CLOSE, channels=(9,)))
    assert pair.listener.events() == [] and not pair.listener.has_data_to_send


def test_message_after_close_is_a_violation() -> None:
    pair = open_pair()
    pair.connector.send_message(3, [b"x"])
    pair.connector.close_channel(3)
    pair.pump()
    inject(pair.listener, MessagePacket(channels=(3,), parts=(b"late",)))
    with pytest.raises(RemoteProtocolError, match="after its close"):
        pair.listener.events()


def test_closed_ack_for_an_open_channel_is_a_violation() -> None:
    pair = open_pair()
    pair.connector.send_message(3, [b"x"])
    inject(pair.connector, ChannelAck(type=ChannelAckType.CLOSED, channels=(3,)))
    with pytest.raises(RemoteProtocolError, match="did not close"):
        pair.connector.events()


# ---- shutdown ----------------------------------------------------------------------


def test_shutdown_both_ways() -> None:
    pair = open_pair(ack_window=1)
    pair.connector.send_message(1, [b"x"])
    pair.listener.send_message(2, [b"y"])
    pair.pump()
    pair.connector.send_shutdown()
    with pytest.raises(LocalProtocolError, match="shutting down"):
        pair.connector.send_message(4, [b"no"])
    with pytest.raises(LocalProtocolError, match="already"):
        pair.connector.send_shutdown()
    _, listener_events = pair.pump()
    assert listener_events == [ChannelClosed(channel=1)]  # the shutdown waits for the closed ack
    pair.listener.consume(1, count=1)
    _, listener_events = pair.pump()
    assert listener_events == [ShutdownReceived()]
    assert pair.connector.link is not None and pair.connector.link.shutdown_sent
    # The listener may still send; its shutdown ends the link.
    pair.listener.send_message(2, [b"z"])
    pair.listener.send_shutdown()
    connector_events, _ = pair.pump()
    assert messages(connector_events) == [(2, 1, (b"z",))]
    assert not any(isinstance(e, ShutdownReceived) for e in connector_events)
    pair.connector.consume(2, count=2)
    connector_events, listener_events = pair.pump()
    assert connector_events[-2:] == [ShutdownReceived(), LinkShutdown()]
    assert pair.connector.state is ConnectionState.CLOSED and pair.connector.link.ended  # type: ignore[union-attr]
    # The listener ends the link when it sends its own shutdown after the peer's.
    assert pair.listener.state is ConnectionState.CLOSED
    assert LinkShutdown() in pair.listener_events
    assert pair.registry.lookup(pair.registry.epoch, 1) is None


def test_shutdown_with_id_size_zero_waits_for_the_drain() -> None:
    pair = open_pair(config=LinkConfig(), ack_window=1)
    pair.listener.send_message(0, [b"to the connector"])
    pair.listener.send_shutdown()  # the unnamed channel is not closed, just drained
    pair.connector.send_message(0, [b"only channel"])
    pair.connector.send_shutdown()
    assert pair.connector.link is not None and not pair.connector.link.shutdown_sent
    connector_events, listener_events = pair.pump()
    assert messages(connector_events) == [(0, 0, (b"to the connector",))]
    assert messages(listener_events) == [(0, 0, (b"only channel",))]
    pair.listener.consume(0, count=1)
    connector_events, listener_events = pair.pump()
    # Drained: the connector's shutdown goes out; the listener's still waits.
    assert connector_events == [Consumed(channel=0, sequence=0, count=1)]
    assert listener_events == [ChannelClosed(channel=0), ShutdownReceived()]
    pair.connector.consume(0, count=1)
    connector_events, listener_events = pair.pump()
    assert listener_events == [Consumed(channel=0, sequence=0, count=1), LinkShutdown()]
    assert connector_events == [ChannelClosed(channel=0), ShutdownReceived(), LinkShutdown()]
    assert pair.connector.state is pair.listener.state is ConnectionState.CLOSED


def test_no_acks_after_the_peers_shutdown() -> None:
    pair = open_pair(ack_window=1)
    pair.listener.send_message(1, [b"x"])
    pair.pump()
    inject(pair.connector, GeneralPacket(type=GeneralType.SHUTDOWN))
    assert pair.connector.events() == [ChannelClosed(channel=1), ShutdownReceived()]
    pair.connector.consume(1, count=1)
    assert pair.connector.pending_acks == () and not pair.connector.has_data_to_send


def test_channel_packets_after_the_peers_shutdown_are_violations() -> None:
    pair = open_pair()
    inject(pair.listener, GeneralPacket(type=GeneralType.SHUTDOWN))
    assert pair.listener.events() == [ShutdownReceived()]
    inject(pair.listener, MessagePacket(channels=(1,), parts=()))
    with pytest.raises(RemoteProtocolError, match="after the peer's shutdown"):
        pair.listener.events()


def test_peer_shutdown_ends_open_incoming_channels() -> None:
    pair = open_pair()
    pair.connector.send_message(1, [b"a"])
    pair.connector.send_message(2, [b"b"])
    pair.pump()
    inject(pair.listener, GeneralPacket(type=GeneralType.SHUTDOWN))
    assert pair.listener.events() == [ChannelClosed(channel=1), ChannelClosed(channel=2), ShutdownReceived()]
    inject(pair.listener, GeneralPacket(type=GeneralType.SHUTDOWN))  # repeated: ignored
    assert pair.listener.events() == []


# ---- general packets ----------------------------------------------------------------


def test_ping_pong_and_nop() -> None:
    pair = open_pair()
    pair.connector.send_ping()
    assert pair.connector.ping_outstanding
    with pytest.raises(LocalProtocolError, match="outstanding"):
        pair.connector.send_ping()
    assert pair.to_listener() == [Ping()]
    assert pair.listener.data_to_send() == bytes.fromhex("40 00 00 00 00 00 00 00")
    inject(pair.connector, GeneralPacket(type=GeneralType.NOP))
    inject(pair.connector, GeneralPacket(type=GeneralType.PONG))
    assert pair.connector.events() == [Pong()]
    assert not pair.connector.ping_outstanding


def test_end_of_file_keeps_the_link() -> None:
    pair = open_pair()
    pair.connector.send_message(1, [b"x"])
    pair.listener.receive_data(b"")
    assert pair.listener.events() == [ConnectionClosed()]
    assert pair.listener.state is ConnectionState.CLOSED
    assert pair.registry.lookup(pair.registry.epoch, 1) is pair.listener.link
    with pytest.raises(LocalProtocolError):
        pair.listener.send_message(1, [b"no"])


def test_events_before_a_violation_are_returned_first() -> None:
    pair = open_pair()
    pair.connector.send_message(1, [b"ok"])
    pair.listener.receive_data(pair.connector.data_to_send() + bytes.fromhex("e0 00 00 00 00 00 00 00"))
    assert messages(pair.listener.events()) == [(1, 0, (b"ok",))]
    with pytest.raises(RemoteProtocolError):
        pair.listener.events()
    assert pair.listener.state is ConnectionState.ERROR
    pair.listener.receive_data(b"more")
    assert pair.listener.events() == []
