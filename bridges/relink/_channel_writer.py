"""The one write loop of our channels: what a channel has unsent, in the order Relink requires.

A channel's messages go in sequence order, each commit or rollback right
after the message it names, and the close after everything, once the
answers to the channel's commits are in (the receiver forgets a closed
channel, answers included, so a close and an answer both lost in a drop
would leave a commit unresolved).

The same loop serves a live send (the fast path: it writes just what the
call added) and a resend being pulled (``LinkEngine.write_resend``): the
second stops at a byte bound and leaves the rest unsent (``sent`` says how
far it got, and each operation whether it was written), to be pulled next
time; the close waits until nothing before it is unsent. Which of the two
runs is the channel's phase's business (``_state.CHANNEL_TRANSITIONS``),
not this loop's.
"""

from __future__ import annotations

from collections.abc import Callable

from rstreams.protocol import prechecked

from ._link import OutgoingChannel, TransactionOp
from ._packets import ChannelOp, ChannelOpType, MessagePacket, Packet, SequenceOp, SequenceOpType
from ._sequence import distance

__all__ = ["has_unsent", "unwritten", "write_unsent"]

# A message of our own channel, built without MessagePacket's checks: its
# parts passed _check_parts (bytes, within max_parts and the sizes) when it
# was sent and its channel check_channel_id, and it is written again only
# from the buffer they went into.
_checked_message = prechecked(MessagePacket)


def write_unsent(
    state: OutgoingChannel,
    write: Callable[[Packet], None],
    written_bytes: Callable[[], int] | None = None,
    until: int = 0,
) -> bool:
    """Write what ``state`` has unsent; True if nothing is left unsent.

    With ``written_bytes`` (the bytes written so far), stop before a
    message once it reaches ``until``; without, write everything.
    """
    buffered = state.buffered
    # (No list built for a channel without transactions: nearly all.)
    operations = unwritten(state) if state.operations else ()
    closing = state.closing and not state.close_sent and not state.pending_commits
    if state.sent >= len(buffered) and not operations and not closing:
        return True
    index, next_op = state.sent, 0
    done = True
    channels = (state.id,)
    while True:
        while next_op < len(operations) and _position(state, operations[next_op]) <= index:
            op = operations[next_op]
            kind = SequenceOpType.COMMIT if op.commit else SequenceOpType.ROLLBACK
            write(SequenceOp(type=kind, channels=channels, sequence=op.sequence))
            op.written = True
            next_op += 1
        if index >= len(buffered):
            break
        if written_bytes is not None and written_bytes() >= until:
            done = False
            break
        write(_checked_message(channels, buffered[index], False))
        index += 1
    state.sent = index
    if operations:
        state.operations = [op for op in state.operations if op.commit or not op.written]
    if closing and done:
        write(ChannelOp(type=ChannelOpType.CLOSE, channels=channels))
        state.close_sent = True
    return done


def has_unsent(state: OutgoingChannel) -> bool:
    """Whether :func:`write_unsent` would write anything now."""
    if state.sent < len(state.buffered) or (state.closing and not state.close_sent and not state.pending_commits):
        return True
    return any(not op.written for op in state.operations)


def unwritten(state: OutgoingChannel) -> list[TransactionOp]:
    """The channel's commits and rollbacks not written yet."""
    return [op for op in state.operations if not op.written]


def _position(state: OutgoingChannel, op: TransactionOp) -> int:
    # 1-based index in the buffer of the message the op names; 0 when that
    # message is no longer buffered (consumed): the op may go at once.
    position = distance(state.consumed, op.sequence)
    return 0 if position > len(state.buffered) else position
