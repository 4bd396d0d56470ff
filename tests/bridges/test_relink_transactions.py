"""Relink transactions: commit, rollback, their answers, and their fate across a reconnection."""

from __future__ import annotations

import pytest
from relink_pair import Pair

from bridges.relink import (
    ChannelClosed,
    ChannelCloseAcknowledged,
    ChannelOp,
    ChannelOpType,
    CommitRequested,
    Committed,
    Connection,
    Consumed,
    LimitExceeded,
    LinkConfig,
    LocalProtocolError,
    MessageReceived,
    Packet,
    RelinkLimits,
    RemoteProtocolError,
    RollbackRequested,
    SequenceAck,
    SequenceAckType,
    SequenceOp,
    SequenceOpType,
    Uncommitted,
    encode_packet,
)

CONFIG = LinkConfig(connector_id_size=1, listener_id_size=1, connector_transactions=True)


def open_pair(**kwargs: object) -> Pair:
    pair = Pair(kwargs.pop("config", CONFIG), **kwargs)  # type: ignore[arg-type]
    pair.handshake()
    return pair


def inject(target: Connection, packet: Packet) -> None:
    engine = target._engine
    assert engine is not None
    target.receive_data(encode_packet(packet, sender_id_size=engine.peer_id_size, receiver_id_size=engine.own_id_size))


def of(events: list[object], *kinds: type) -> list[object]:
    return [e for e in events if isinstance(e, kinds)]


def test_commit_and_answers() -> None:
    pair = open_pair()
    pair.connector.send_message(1, [b"a"])
    pair.connector.send_message(1, [b"b"])
    assert pair.connector.commit(1) == 1
    _, listener_events = pair.pump()
    assert listener_events[-1] == CommitRequested(channel=1, sequence=1)
    pair.connector.send_message(1, [b"c"])
    assert pair.connector.commit(1) == 2
    pair.to_listener()
    pair.listener.answer_commit(1, 1, committed=True)
    pair.listener.answer_commit(1, 2, committed=False)
    assert pair.to_connector() == [Committed(channel=1, sequence=1), Uncommitted(channel=1, sequence=2)]


def test_commit_packet_bytes() -> None:
    pair = open_pair()
    pair.connector.send_message(1, [b"a"])
    pair.connector.data_to_send()
    pair.connector.commit(1)
    assert pair.connector.data_to_send() == bytes.fromhex("09 00 01 00 00 00 00 00")
    pair.listener.receive_data(bytes.fromhex("11 01 01 00 01 00 00 00 61 00 00 00 00 00 00 00"))
    pair.listener.receive_data(bytes.fromhex("09 00 01 00 00 00 00 00"))
    pair.listener.events()
    pair.listener.answer_commit(1, 0, committed=True)
    assert pair.listener.data_to_send() == bytes.fromhex("4d 00 01 00 00 00 00 00")


def test_rollback_is_not_answered() -> None:
    pair = open_pair()
    pair.connector.send_message(1, [b"a"])
    assert pair.connector.rollback(1) == 0
    _, listener_events = pair.pump()
    assert listener_events[-1] == RollbackRequested(channel=1, sequence=0)
    assert not pair.listener.has_data_to_send
    with pytest.raises(LocalProtocolError, match="since its last"):
        pair.connector.commit(1)


def test_channel_form_ops_target_the_next_message() -> None:
    pair = open_pair()
    for _ in range(3):
        pair.connector.send_message(1, [b"m"])
    pair.to_listener()
    inject(pair.listener, ChannelOp(type=ChannelOpType.COMMIT, channels=(1,)))
    inject(pair.listener, ChannelOp(type=ChannelOpType.ROLLBACK, channels=(1,)))
    assert pair.listener.events() == [CommitRequested(channel=1, sequence=0), RollbackRequested(channel=1, sequence=1)]


def test_channel_form_answer_resolves_the_oldest_commit() -> None:
    from bridges.relink import ChannelAck, ChannelAckType

    pair = open_pair()
    pair.connector.send_message(1, [b"m"])
    pair.connector.commit(1)
    inject(pair.connector, ChannelAck(type=ChannelAckType.UNCOMMITTED, channels=(1,)))
    assert pair.connector.events() == [Uncommitted(channel=1, sequence=0)]


def test_answers_must_come_in_order() -> None:
    pair = open_pair()
    pair.connector.send_message(1, [b"a"])
    pair.connector.commit(1)
    pair.connector.send_message(1, [b"b"])
    pair.connector.commit(1)
    pair.pump()
    with pytest.raises(LocalProtocolError, match="the next to answer: 0"):
        pair.listener.answer_commit(1, 1, committed=True)
    inject(pair.connector, SequenceAck(type=SequenceAckType.COMMITTED, channels=(1,), sequence=1))
    with pytest.raises(RemoteProtocolError, match="answers no commit"):
        pair.connector.events()


def test_transactions_must_be_negotiated() -> None:
    pair = open_pair(config=LinkConfig(connector_id_size=1, listener_id_size=1))
    pair.connector.send_message(1, [b"a"])
    with pytest.raises(LocalProtocolError, match="not negotiated"):
        pair.connector.commit(1)
    pair.pump()
    inject(pair.listener, SequenceOp(type=SequenceOpType.COMMIT, channels=(1,), sequence=0))
    with pytest.raises(RemoteProtocolError, match="not negotiated"):
        pair.listener.events()
    # Negotiated for the connector's channels only: not for the listener's.
    pair = open_pair()
    pair.listener.send_message(1, [b"a"])
    with pytest.raises(LocalProtocolError, match="not negotiated"):
        pair.listener.rollback(1)
    with pytest.raises(LocalProtocolError, match="no commit"):
        pair.connector.answer_commit(1, 0, committed=True)


def test_commit_naming_no_received_message_is_a_violation() -> None:
    pair = open_pair()
    pair.connector.send_message(1, [b"a"])
    pair.pump()
    inject(pair.listener, SequenceOp(type=SequenceOpType.COMMIT, channels=(1,), sequence=1))
    with pytest.raises(RemoteProtocolError, match="names no new received message"):
        pair.listener.events()
    pair = open_pair()
    inject(pair.listener, SequenceOp(type=SequenceOpType.COMMIT, channels=(5,), sequence=0))
    with pytest.raises(RemoteProtocolError, match="carried no message"):
        pair.listener.events()


def test_pending_commit_limits() -> None:
    pair = open_pair(limits=RelinkLimits(max_pending_commits=2))
    for _ in range(2):
        pair.connector.send_message(1, [b"m"])
        pair.connector.commit(1)
    pair.connector.send_message(1, [b"m"])
    with pytest.raises(LocalProtocolError, match="await their answer"):
        pair.connector.commit(1)
    pair.pump()
    inject(pair.listener, SequenceOp(type=SequenceOpType.COMMIT, channels=(1,), sequence=2))
    with pytest.raises(LimitExceeded):
        pair.listener.events()


def test_the_close_waits_for_the_answers() -> None:
    pair = open_pair(ack_window=1)
    pair.connector.send_message(1, [b"a"])
    pair.connector.commit(1)
    pair.connector.close_channel(1)
    _, listener_events = pair.pump()
    assert not of(listener_events, ChannelClosed)  # held until the commit is answered
    pair.listener.consume(1, count=1)
    pair.listener.answer_commit(1, 0, committed=True)
    connector_events, listener_events = pair.pump()
    assert listener_events == [ChannelClosed(channel=1)]
    assert connector_events == [
        Consumed(channel=1, sequence=0, count=1),
        Committed(channel=1, sequence=0),
        ChannelCloseAcknowledged(channel=1),
    ]


def test_the_receiver_waits_for_its_own_answers_before_acknowledging_a_close() -> None:
    pair = open_pair(ack_window=1)
    pair.connector.send_message(1, [b"a"])
    pair.to_listener()
    inject(pair.listener, SequenceOp(type=SequenceOpType.COMMIT, channels=(1,), sequence=0))
    inject(pair.listener, ChannelOp(type=ChannelOpType.CLOSE, channels=(1,)))
    assert pair.listener.events() == [CommitRequested(channel=1, sequence=0), ChannelClosed(channel=1)]
    pair.listener.consume(1, count=1)
    assert pair.listener.data_to_send() == bytes.fromhex("2d 00 01 00 00 00 00 00")  # consumed, not closed
    pair.listener.answer_commit(1, 0, committed=False)
    assert pair.listener.data_to_send() == bytes.fromhex("6d 00 01 00 00 00 00 00 85 00 01 00 00 00 00 00")


def test_answer_and_close_lost_together_resolve_after_resuming() -> None:
    pair = open_pair(ack_window=1)
    pair.connector.send_message(1, [b"a"])
    pair.connector.commit(1)
    pair.connector.close_channel(1)
    pair.to_listener()
    pair.listener.consume(1, count=1)
    pair.listener.answer_commit(1, 0, committed=True)
    pair.to_connector(cut=0)  # the consumed ack and the answer are lost
    second = pair.reconnect()
    connector_events, listener_events = second.handshake()
    assert of(connector_events, Committed, ChannelCloseAcknowledged) == [
        Committed(channel=1, sequence=0),
        ChannelCloseAcknowledged(channel=1),
    ]
    assert listener_events.count(ChannelClosed(channel=1)) == 1


# ---- across a reconnection ---------------------------------------------------------


def test_commit_lost_in_flight_is_sent_again() -> None:
    pair = open_pair()
    pair.connector.send_message(1, [b"a"])
    pair.connector.commit(1)
    pair.to_listener(cut=16)  # the message arrives, the commit does not
    second = pair.reconnect()
    _, listener_events = second.handshake()
    assert of(listener_events, CommitRequested) == [CommitRequested(channel=1, sequence=0)]
    second.listener.answer_commit(1, 0, committed=True)
    assert of(second.pump()[0], Committed) == [Committed(channel=1, sequence=0)]


def test_answer_lost_in_flight_is_repeated_by_the_resume_preamble() -> None:
    pair = open_pair()
    pair.connector.send_message(1, [b"a"])
    pair.connector.commit(1)
    pair.to_listener()
    pair.listener.answer_commit(1, 0, committed=False)
    pair.to_connector(cut=0)  # the answer is lost
    second = pair.reconnect()
    connector_events, listener_events = second.handshake()
    assert of(connector_events, Committed, Uncommitted) == [Uncommitted(channel=1, sequence=0)]
    assert not of(listener_events, CommitRequested, MessageReceived)  # the repeated commit is ignored
    assert second.connector.link is not None and not second.connector.link.outgoing[1].operations


def test_commit_received_but_unanswered_is_answered_once() -> None:
    pair = open_pair()
    pair.connector.send_message(1, [b"a"])
    pair.connector.commit(1)
    pair.to_listener()
    second = pair.reconnect()
    connector_events, listener_events = second.handshake()
    assert not of(listener_events, CommitRequested)  # still pending from before: not asked twice
    second.listener.answer_commit(1, 0, committed=True)
    connector_events, _ = second.pump()
    assert of(connector_events, Committed) == [Committed(channel=1, sequence=0)]


def test_commit_issued_while_resuming_follows_its_messages() -> None:
    pair = open_pair(config=LinkConfig(connector_id_size=1, listener_id_size=1, listener_transactions=True))
    pair.listener.send_message(1, [b"a"])
    pair.pump()
    second = pair.reconnect()
    second.to_listener()
    second.to_connector()
    second.to_listener()  # the listener resumed; channel 1 holds
    second.listener.send_message(1, [b"b"])
    second.listener.commit(1)
    assert b"b" not in bytes(second.listener._outbound)  # held until the connector's preamble
    connector_events, _ = second.pump()
    received = of(connector_events, MessageReceived, CommitRequested)
    assert received == [MessageReceived(channel=1, sequence=1, parts=(b"b",)), CommitRequested(channel=1, sequence=1)]


# ---- the property: commits asked once and answered once, whatever drops -----------------

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from bridges.relink import ConnectionState, Event  # noqa: E402

# A round: send some, maybe commit or roll back, deliver, maybe answer and
# consume, then deliver fully or drop the connection with a cut each way.
tx_round = st.tuples(
    st.integers(0, 3),
    st.sampled_from(["commit", "rollback", None]),
    st.booleans(),
    st.sampled_from([True, False, None]),
    st.integers(0, 3),
    st.none() | st.tuples(st.integers(0, 100), st.integers(0, 100)),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(tx_round, max_size=12))
def test_commits_survive_any_drops(rounds: list[tuple[int, str | None, bool, bool | None, int, object]]) -> None:
    pair = open_pair(ack_window=1)
    issued: list[tuple[str, int]] = []  # ("commit" or "rollback", sequence), in order
    asked: list[int] = []
    rolled_back: list[int] = []
    answered: dict[int, bool] = {}
    outcomes: list[tuple[int, bool]] = []
    unconsumed = 0

    def record(connector_events: list[Event], listener_events: list[Event]) -> None:
        nonlocal unconsumed
        for event in listener_events:
            if isinstance(event, CommitRequested):
                asked.append(event.sequence)
            elif isinstance(event, RollbackRequested):
                rolled_back.append(event.sequence)
            elif isinstance(event, MessageReceived):
                unconsumed += 1
        for event in connector_events:
            if isinstance(event, (Committed, Uncommitted)):
                outcomes.append((event.sequence, isinstance(event, Committed)))

    def exchange(cuts: tuple[int, int] | None = None) -> None:
        if cuts is None:
            record(pair.to_connector(), pair.to_listener())
            return
        listener_events = pair.to_listener(len(pair.connector._outbound) * cuts[0] // 100)
        connector_events = pair.to_connector(len(pair.listener._outbound) * cuts[1] // 100)
        record(connector_events, listener_events)

    for sends, operation, deliver, answer, consume, drop in rounds:
        connector, listener = pair.connector, pair.listener
        for _ in range(sends):
            if connector.can_send(1):
                connector.send_message(1, [b"m"])
        state = connector.link.outgoing.get(1)  # type: ignore[union-attr]
        if operation and state is not None and state.last_sequence != state.transaction_target:
            if operation == "rollback":
                issued.append(("rollback", connector.rollback(1)))
            elif state.pending_commits < connector.limits.max_pending_commits:
                issued.append(("commit", connector.commit(1)))
        if deliver:
            exchange()
        incoming = listener.link.incoming.get(1)  # type: ignore[union-attr]
        if answer is not None and incoming is not None and incoming.unanswered:
            sequence = incoming.unanswered[0]
            listener.answer_commit(1, sequence, committed=answer)
            answered[sequence] = answer
        count = min(consume, unconsumed)
        if count:
            listener.consume(1, count=count)
            unconsumed -= count
        if drop is None:
            exchange()
        else:
            exchange(drop)  # type: ignore[arg-type]
            pair = pair.reconnect()
            record(*pair.handshake())
    for _ in range(10):  # settle: answer and consume everything
        incoming = pair.listener.link.incoming.get(1)  # type: ignore[union-attr]
        while incoming is not None and incoming.unanswered:
            sequence = incoming.unanswered[0]
            pair.listener.answer_commit(1, sequence, committed=True)
            answered[sequence] = True
        if unconsumed:
            pair.listener.consume(1, count=unconsumed)
            unconsumed = 0
        exchange()
    assert pair.connector.state is ConnectionState.OPEN
    commits = [sequence for kind, sequence in issued if kind == "commit"]
    assert asked == commits  # each commit asked exactly once, in order
    assert outcomes == [(sequence, answered[sequence]) for sequence in commits]  # answered once, truly
    assert set(rolled_back) <= {sequence for kind, sequence in issued if kind == "rollback"}
    assert not pair.connector.link.outgoing[1].operations if 1 in pair.connector.link.outgoing else True  # type: ignore[union-attr]
