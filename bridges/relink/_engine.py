"""The packet-level half of a Relink connection: one attached link, packets in and out.

:class:`~bridges.relink.Connection` runs the handshake, then hands every
packet to a :class:`LinkEngine` built on the link it agreed on. The engine
reads and changes the :class:`~bridges.relink.LinkState` (which outlives the
connection), writes packets through a callback and reports events through
another. It knows nothing of bytes or handshake states.

Writing is eager: a message, operation or acknowledgement is written the
moment it is allowed, in the order the channel requires (a channel's
messages in sequence order, each commit or rollback right after the message
it names, the close after everything). A channel holds its writes only while
resuming, until the peer says where to resume from; then it catches up as
the I/O layer pulls (:meth:`LinkEngine.write_resend`), a bounded number of
bytes at a time, and is live again once nothing of it is unsent. One
write loop (``_channel_writer.write_unsent``) serves both, so the fast path of a live
send and a resend follow the same ordering rules; only the channel's
phase (``_state.CHANNEL_TRANSITIONS``) decides which one runs.

Resuming a link (what each side sends first on a resumed connection): our
shutdown again if we had sent it; for each of the peer's channels we know, a
received and a consumed sequence acknowledgement, the answers to its recent
commits, and the closed acknowledgement if it is due; then ``resume``.
Meanwhile each of our channels holds until the peer's received (or consumed)
acknowledgement for it arrives, then resends everything after what the peer
received; channels the peer's ``resume`` did not mention resend everything,
or count as closed if their close was sent. So nothing is lost, and since
the sender resumes exactly after the receiver's last received message, no
message arrives twice (message packets carry no sequence number: both sides
count, and these acknowledgements keep the counts equal).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable

from ._channel_writer import has_unsent, unwritten, write_unsent
from ._errors import LimitExceeded, LocalProtocolError, RemoteProtocolError
from ._events import (
    ChannelCloseAcknowledged,
    ChannelClosed,
    CommitRequested,
    Committed,
    Consumed,
    Event,
    LinkShutdown,
    MessageReceived,
    Ping,
    Pong,
    Received,
    Resumed,
    RollbackRequested,
    ShutdownReceived,
    Uncommitted,
)
from ._link import KEPT_MESSAGE_COST, KEPT_PART_COST, IncomingChannel, LinkState, OutgoingChannel, Role, TransactionOp
from ._packets import (
    ChannelAck,
    ChannelAckType,
    ChannelOp,
    ChannelOpType,
    GeneralPacket,
    GeneralType,
    MessagePacket,
    Packet,
    RelinkLimits,
    SequenceAck,
    SequenceAckType,
    SequenceOp,
    SequenceOpType,
    check_channel_id,
)
from ._sequence import advance, distance
from ._state import ChannelEvent, ChannelPhase

__all__ = ["LinkEngine"]

_ACK_TYPES = {
    ChannelAckType.RECEIVED: SequenceAckType.RECEIVED,
    ChannelAckType.CONSUMED: SequenceAckType.CONSUMED,
    ChannelAckType.COMMITTED: SequenceAckType.COMMITTED,
    ChannelAckType.UNCOMMITTED: SequenceAckType.UNCOMMITTED,
}


class LinkEngine:
    """Channel logic for one link on one connection (see the module docstring)."""

    def __init__(
        self,
        link: LinkState,
        *,
        send_window: int,
        ack_window: int,
        limits: RelinkLimits,
        write: Callable[[Packet], None],
        emit: Callable[[Event], None],
        written_bytes: Callable[[], int],
    ) -> None:
        self.link = link
        self.send_window = send_window
        self.ack_window = ack_window
        self.limits = limits
        self._write = write
        self._emit = emit
        self._written_bytes = written_bytes  # bytes written so far (to bound a pull)
        # Channels CATCHING_UP, in the order they learnt where to resend
        # from: what write_resend pulls from.
        self.catching_up: dict[int, OutgoingChannel] = {}
        config = link.config
        connector = link.role is Role.CONNECTOR
        self.own_id_size = config.connector_id_size if connector else config.listener_id_size
        self.peer_id_size = config.listener_id_size if connector else config.connector_id_size
        self.own_transactions = config.connector_transactions if connector else config.listener_transactions
        self.peer_transactions = config.listener_transactions if connector else config.connector_transactions
        self.peer_resuming = False  # a resumed link: the peer's resume has not arrived
        self.ping_outstanding = False
        self.ended = False  # both peers shut down during this connection

    # ---- starting -----------------------------------------------------------

    def start(self, *, resumed: bool) -> None:
        link = self.link
        if resumed:
            if link.shutdown_sent:
                self._write(GeneralPacket(type=GeneralType.SHUTDOWN))
            for outgoing in link.outgoing.values():
                outgoing.begin_resume()
            for incoming in list(link.incoming.values()):
                self._write_incoming_acks(incoming, resuming=True)
            self._write(GeneralPacket(type=GeneralType.RESUME))
            self.peer_resuming = True
        self._maybe_shutdown()

    # ---- sending ------------------------------------------------------------

    def _check_parts(self, parts: Iterable[bytes]) -> tuple[bytes, ...]:
        result = tuple(parts)
        limits = self.limits
        for part in result:
            if not isinstance(part, bytes):
                raise LocalProtocolError("message parts must be bytes")
        if len(result) > limits.max_parts:
            raise LocalProtocolError(f"a message has at most {limits.max_parts} parts, got {len(result)}")
        sizes = list(map(len, result))
        if sizes and max(sizes) > limits.max_part_size:
            raise LocalProtocolError(f"a message part is at most {limits.max_part_size} bytes")
        if sum(sizes) > limits.max_message_size:
            raise LocalProtocolError(f"a message is at most {limits.max_message_size} bytes")
        return result

    def _sendable(self, channel: int, count: int = 1) -> OutgoingChannel | None:
        if self.link.shutdown_requested:
            raise LocalProtocolError("the link is shutting down: no more messages")
        check_channel_id(channel, self.own_id_size)
        state = self.link.outgoing.get(channel)
        if state is not None:
            if state.closing:
                raise LocalProtocolError(f"channel {channel} is closing; send again after its close is acknowledged")
            if len(state.buffered) + count > self.send_window:
                raise LocalProtocolError(f"channel {channel}'s send window ({self.send_window}) is full")
        elif count > self.send_window:
            raise LocalProtocolError(f"channel {channel}'s send window ({self.send_window}) is full")
        return state

    def _open(self, channel: int) -> OutgoingChannel:
        state = self.link.outgoing.get(channel)
        if state is None:
            state = self.link.outgoing[channel] = OutgoingChannel(channel)
        return state

    def _keep(self, state: OutgoingChannel, message: tuple[bytes, ...]) -> None:
        # Kept until acknowledged consumed, and counted with what it holds
        # in memory (LinkState.kept_memory).
        size = sum(map(len, message))
        overhead = KEPT_MESSAGE_COST + KEPT_PART_COST * len(message)  # (kept_overhead, inline: per message)
        state.buffered.append(message)
        state.size += size
        state.overhead += overhead
        link = self.link
        link.unacknowledged_bytes += size
        link.kept_overhead += overhead

    def _forget(self, state: OutgoingChannel) -> None:
        self.link.unacknowledged_bytes -= state.size
        self.link.kept_overhead -= state.overhead
        del self.link.outgoing[state.id]
        self.catching_up.pop(state.id, None)

    def send_message(self, channel: int, parts: Iterable[bytes]) -> int:
        message = self._check_parts(parts)
        self._sendable(channel)
        state = self._open(channel)
        sequence = state.next_sequence
        self._keep(state, message)
        self._flush(state)
        return sequence

    def send_multicast(self, channels: Iterable[int], parts: Iterable[bytes]) -> tuple[int, ...]:
        targets = tuple(channels)
        if not targets:
            raise LocalProtocolError("a multicast needs at least one channel")
        if len(targets) > self.limits.max_multicast:
            raise LocalProtocolError(f"a multicast names at most {self.limits.max_multicast} channels")
        message = self._check_parts(parts)
        for channel, count in Counter(targets).items():
            self._sendable(channel, count)
        states = [self._open(channel) for channel in targets]
        # One packet for all only when no channel holds back writes: else
        # each channel writes the message in its own order.
        live = all(s.phase is _LIVE and s.sent == len(s.buffered) and not unwritten(s) for s in states)
        sequences = []
        for state in states:
            sequences.append(state.next_sequence)
            self._keep(state, message)
        if live and len(targets) > 1:
            self._write(MessagePacket(channels=targets, parts=message, multicast=True))
            for state in states:
                state.sent += 1
        else:
            for state in {id(s): s for s in states}.values():
                self._flush(state)
        return tuple(sequences)

    def close_channel(self, channel: int) -> None:
        check_channel_id(channel, self.own_id_size)
        state = self.link.outgoing.get(channel)
        if state is None:
            raise LocalProtocolError(f"channel {channel} carries no message: a channel opens with its first message")
        if state.closing:
            raise LocalProtocolError(f"channel {channel} is already closing")
        state.closing = True
        self._flush(state)

    def transaction(self, channel: int, *, commit: bool) -> int:
        if not self.own_transactions:
            raise LocalProtocolError("transactions were not negotiated for our channels")
        check_channel_id(channel, self.own_id_size)
        state = self.link.outgoing.get(channel)
        if state is None or state.closing:
            raise LocalProtocolError(f"channel {channel} is not open")
        sequence = state.last_sequence
        if sequence == state.transaction_target:
            raise LocalProtocolError(f"no message on channel {channel} since its last commit or rollback")
        if commit and state.pending_commits >= self.limits.max_pending_commits:
            raise LocalProtocolError(f"{self.limits.max_pending_commits} commits already await their answer")
        state.transaction_target = sequence
        state.operations.append(TransactionOp(commit=commit, sequence=sequence))
        self._flush(state)
        return sequence

    def send_shutdown(self) -> None:
        link = self.link
        if link.shutdown_requested:
            raise LocalProtocolError("shutdown was already requested")
        link.shutdown_requested = True
        if self.own_id_size:
            for state in list(link.outgoing.values()):
                if not state.closing:
                    state.closing = True
                    self._flush(state)
        self._maybe_shutdown()

    def send_ping(self) -> None:
        if self.ping_outstanding:
            raise LocalProtocolError("a ping is already outstanding")
        self._write(GeneralPacket(type=GeneralType.PING))
        self.ping_outstanding = True

    def _flush(self, state: OutgoingChannel) -> None:
        # Write what the channel may write now: all of it when LIVE (the
        # fast path: just what the call added); when CATCHING_UP, nothing
        # here, the writer pulls it (write_resend); when HOLDING, nothing.
        phase = state.phase
        if phase is _LIVE:
            write_unsent(state, self._write)
        elif phase is _CATCHING_UP and state.id not in self.catching_up:
            if has_unsent(state):
                self.catching_up[state.id] = state
            else:
                state.step(ChannelEvent.CAUGHT_UP)  # the peer has it all: nothing to pull

    def write_resend(self, max_bytes: int) -> int:
        """Write about ``max_bytes`` more of what channels catching up have unsent; bytes written.

        At least one message (or operation, or close) if any is unsent, so
        each pull makes progress; a channel whose last unsent packet is
        written is LIVE again.
        """
        start = self._written_bytes()
        catching_up = self.catching_up
        while catching_up:
            left = max_bytes - (self._written_bytes() - start)
            if left <= 0:
                break
            state = next(iter(catching_up.values()))
            if write_unsent(state, self._write, self._written_bytes, start + max_bytes):
                del catching_up[state.id]
                state.step(ChannelEvent.CAUGHT_UP)
        return self._written_bytes() - start

    def _maybe_shutdown(self) -> None:
        link = self.link
        if not link.shutdown_requested or link.shutdown_sent:
            return
        if not self.own_id_size:
            # The unnamed channel is not closed (Go): it ends when drained.
            state = link.outgoing.get(0)
            if state is not None and not state.buffered and not state.operations and not state.closing:
                self._forget(link.outgoing[0])
        if link.outgoing:
            return
        self._write(GeneralPacket(type=GeneralType.SHUTDOWN))
        link.shutdown_sent = True
        if link.peer_shutdown:
            self._end()

    def _end(self) -> None:
        self.ended = True
        self._emit(LinkShutdown())

    # ---- the receiving side of the peer's channels ----------------------------

    def consume(self, channel: int, *, sequence: int | None, count: int | None) -> None:
        state = self.link.incoming.get(channel)
        if state is None:
            raise LocalProtocolError(f"no message was received on channel {channel!r}")
        if (sequence is None) == (count is None):
            raise LocalProtocolError("give either sequence or count")
        if count is None:
            assert sequence is not None
            count = distance(state.consumed, sequence)
        if type(count) is not int or not 0 <= count <= state.unconsumed:
            raise LocalProtocolError(
                f"cannot consume {count!r} messages on channel {channel}: {state.unconsumed} are unconsumed"
            )
        if not count:
            return
        state.consumed = advance(state.consumed, count)
        if distance(state.consume_sent, state.consumed) >= self.ack_window or state.ready_to_close:
            self._write_incoming_acks(state)

    @property
    def pending_acks(self) -> tuple[int, ...]:
        if self.link.peer_shutdown:
            return ()
        return tuple(state.id for state in self.link.incoming.values() if state.ack_due)

    def flush_acks(self) -> None:
        for state in list(self.link.incoming.values()):
            if state.ack_due:
                self._write_incoming_acks(state)

    def answer_commit(self, channel: int, sequence: int, *, committed: bool) -> None:
        state = self.link.incoming.get(channel)
        if state is None or not state.unanswered or state.unanswered[0] != sequence:
            expected = state.unanswered[0] if state is not None and state.unanswered else None
            raise LocalProtocolError(
                f"no commit of sequence {sequence!r} awaits an answer on channel {channel!r}"
                f" (the next to answer: {expected})"
            )
        state.unanswered.popleft()
        state.answers.append((sequence, committed))
        if not self.link.peer_shutdown:
            self._write(_answer(state.id, sequence, committed))
        if state.ready_to_close:
            self._write_incoming_acks(state)

    def _write_incoming_acks(self, state: IncomingChannel, *, resuming: bool = False) -> None:
        peer_shutdown = self.link.peer_shutdown
        channels = (state.id,)
        if resuming:
            self._write(SequenceAck(type=SequenceAckType.RECEIVED, channels=channels, sequence=state.received))
            state.consume_sent = state.consumed
            self._write(SequenceAck(type=SequenceAckType.CONSUMED, channels=channels, sequence=state.consumed))
            for sequence, committed in state.answers:
                self._write(_answer(state.id, sequence, committed))
        elif peer_shutdown:
            return  # Go stops acknowledging once the peer has shut down
        elif state.ack_due:
            state.consume_sent = state.consumed
            self._write(SequenceAck(type=SequenceAckType.CONSUMED, channels=channels, sequence=state.consumed))
        if state.ready_to_close and not peer_shutdown:
            self._write(ChannelAck(type=ChannelAckType.CLOSED, channels=channels))
            del self.link.incoming[state.id]

    # ---- receiving ------------------------------------------------------------

    def receive(self, packet: Packet) -> None:
        if isinstance(packet, GeneralPacket):
            self._receive_general(packet.type)
        elif isinstance(packet, MessagePacket):
            self._receive_message(packet)
        elif isinstance(packet, (ChannelOp, SequenceOp)):
            if self.link.peer_shutdown:
                raise RemoteProtocolError("channel operation after the peer's shutdown")
            for channel in packet.channels:
                if isinstance(packet, SequenceOp):
                    commit = packet.type is SequenceOpType.COMMIT
                    self._receive_transaction(channel, commit=commit, sequence=packet.sequence)
                elif packet.type is ChannelOpType.CLOSE:
                    self._receive_close(channel)
                else:
                    self._receive_transaction(channel, commit=packet.type is ChannelOpType.COMMIT, sequence=None)
        else:
            for channel in packet.channels:
                self._receive_ack(packet, channel)

    def _receive_general(self, kind: GeneralType) -> None:
        link = self.link
        if kind is GeneralType.PING:
            self._write(GeneralPacket(type=GeneralType.PONG))
            self._emit(Ping())
        elif kind is GeneralType.PONG:
            self.ping_outstanding = False
            self._emit(Pong())
        elif kind is GeneralType.RESUME:
            if not self.peer_resuming:
                return  # Go ignores a resume it does not wait for; so do we
            self.peer_resuming = False
            for state in list(link.outgoing.values()):
                if state.phase is not ChannelPhase.HOLDING:
                    continue
                if state.end_resume():
                    self._forget(state)
                    self._emit(ChannelCloseAcknowledged(channel=state.id))
                else:
                    self._flush(state)
            self._emit(Resumed())
            self._maybe_shutdown()
        elif kind is GeneralType.SHUTDOWN:
            if link.peer_shutdown:
                return
            link.peer_shutdown = True
            for incoming in link.incoming.values():
                if not incoming.closing:
                    incoming.closing = True
                    self._emit(ChannelClosed(channel=incoming.id))
            self._emit(ShutdownReceived())
            if link.shutdown_sent:
                self._end()

    def _receive_message(self, packet: MessagePacket) -> None:
        link = self.link
        if link.peer_shutdown:
            raise RemoteProtocolError("message after the peer's shutdown")
        channels = packet.channels
        # (A unicast message, nearly every one, needs no Counter.)
        counts = ((channels[0], 1),) if len(channels) == 1 else Counter(channels).items()
        for channel, count in counts:
            state = link.incoming.get(channel)
            if state is not None and state.closing:
                raise RemoteProtocolError(f"message on channel {channel} after its close")
            unconsumed = (state.unconsumed if state is not None else 0) + count
            if unconsumed > self.limits.max_unconsumed:
                raise LimitExceeded(
                    f"{unconsumed} unconsumed messages on channel {channel}; the limit is"
                    f" {self.limits.max_unconsumed} (the peer overran its send window)",
                    limit="max_unconsumed",
                    value=unconsumed,
                )
        for channel in packet.channels:
            incoming = link.incoming.get(channel)
            if incoming is None:
                incoming = link.incoming[channel] = IncomingChannel(channel, self.limits.max_pending_commits)
            incoming.received = advance(incoming.received)
            self._emit(MessageReceived(channel=channel, sequence=incoming.received, parts=packet.parts))

    def _receive_close(self, channel: int) -> None:
        state = self.link.incoming.get(channel)
        if state is None or state.closing:
            # Go ignores both: a close repeated after a reconnection, or one
            # for a channel that carried no message (there is nothing to end).
            return
        state.closing = True
        self._emit(ChannelClosed(channel=channel))
        if state.ready_to_close:
            self._write_incoming_acks(state)

    def _receive_transaction(self, channel: int, *, commit: bool, sequence: int | None) -> None:
        what = "commit" if commit else "rollback"
        if not self.peer_transactions:
            raise RemoteProtocolError(f"{what} on channel {channel}, but transactions were not negotiated")
        state = self.link.incoming.get(channel)
        if state is None:
            raise RemoteProtocolError(f"{what} on channel {channel}, which carried no message")
        if sequence is None:
            sequence = advance(state.transaction_target)
        step = distance(state.transaction_target, sequence)
        repeated = commit and (sequence in state.unanswered or any(s == sequence for s, _ in state.answers))
        if state.closing and not repeated:
            raise RemoteProtocolError(f"{what} on channel {channel} after its close")
        if 1 <= step <= distance(state.transaction_target, state.received):
            if commit:
                if len(state.unanswered) >= self.limits.max_pending_commits:
                    raise LimitExceeded(
                        f"more than {self.limits.max_pending_commits} commits await answers on channel {channel}",
                        limit="max_pending_commits",
                        value=len(state.unanswered) + 1,
                    )
                state.unanswered.append(sequence)
                self._emit(CommitRequested(channel=channel, sequence=sequence))
            else:
                self._emit(RollbackRequested(channel=channel, sequence=sequence))
            state.transaction_target = sequence
        elif repeated:
            pass  # repeated after a reconnection: pending, or answered in our resume preamble
        else:
            raise RemoteProtocolError(
                f"{what} of sequence {sequence} on channel {channel} names no new received message"
            )

    def _receive_ack(self, packet: ChannelAck | SequenceAck, channel: int) -> None:
        link = self.link
        state = link.outgoing.get(channel)
        if state is None:
            if self.peer_resuming and self.own_id_size:
                raise RemoteProtocolError(f"the peer claims to know our channel {channel}, which does not exist")
            return  # Go ignores acknowledgements of channels it has forgotten
        if isinstance(packet, ChannelAck):
            if packet.type is ChannelAckType.CLOSED:
                self._receive_closed(state)
                return
            kind = _ACK_TYPES[packet.type]
            sequence = None
        else:
            kind, sequence = packet.type, packet.sequence
        if kind is SequenceAckType.RECEIVED:
            if sequence is None:
                sequence = advance(state.consumed, state.received + 1)
            count = state.on_received(sequence)
            if count:
                self._emit(Received(channel=channel, sequence=sequence, count=count))
            self._flush(state)
        elif kind is SequenceAckType.CONSUMED:
            if sequence is None:
                sequence = advance(state.consumed)
            size, overhead = state.size, state.overhead
            count = state.on_consumed(sequence)
            self.link.unacknowledged_bytes -= size - state.size
            self.link.kept_overhead -= overhead - state.overhead
            if count:
                self._emit(Consumed(channel=channel, sequence=sequence, count=count))
            self._flush(state)
            self._maybe_shutdown()
        else:
            self._receive_answer(state, sequence, committed=kind is SequenceAckType.COMMITTED)

    def _receive_answer(self, state: OutgoingChannel, sequence: int | None, *, committed: bool) -> None:
        if not self.own_transactions:
            raise RemoteProtocolError(f"commit answer on channel {state.id}, but transactions were not negotiated")
        commits = [op for op in state.operations if op.commit]
        if sequence is None:
            head = commits[0] if commits else None  # the channel form answers the oldest commit
        else:
            head = commits[0] if commits and commits[0].sequence == sequence else None
            if head is None and self.peer_resuming and all(op.sequence != sequence for op in commits):
                return  # an answer repeated in the peer's resume preamble, already known
        if head is None:
            raise RemoteProtocolError(f"commit answer of sequence {sequence} on channel {state.id} answers no commit")
        state.operations.remove(head)
        event = Committed if committed else Uncommitted
        self._emit(event(channel=state.id, sequence=head.sequence))
        self._flush(state)  # a close may have waited for this answer
        self._maybe_shutdown()

    def _receive_closed(self, state: OutgoingChannel) -> None:
        if not state.close_sent:
            raise RemoteProtocolError(f"closed acknowledgement of channel {state.id}, which we did not close")
        if state.pending_commits:
            raise RemoteProtocolError(f"channel {state.id} closed with commits unanswered")
        self._forget(state)
        self._emit(ChannelCloseAcknowledged(channel=state.id))
        self._maybe_shutdown()


_LIVE, _CATCHING_UP = ChannelPhase.LIVE, ChannelPhase.CATCHING_UP


def _answer(channel: int, sequence: int, committed: bool) -> SequenceAck:
    kind = SequenceAckType.COMMITTED if committed else SequenceAckType.UNCOMMITTED
    return SequenceAck(type=kind, channels=(channel,), sequence=sequence)
