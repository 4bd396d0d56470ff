"""What a Relink connection tells the I/O layer, as values.

:meth:`~bridges.relink.Connection.events` returns these. They are not
packets: acknowledgements, resumption and retransmission are the machine's
business, and what surfaces is what the I/O layer must act on (deliver a
message, wake a blocked sender, end a stream, answer a commit, fail the
streams of a lost link).

Channel ids are ints (``0`` on a direction whose id size is 0). Sequence
numbers are the implicit 32-bit numbers of messages on one channel: 0 for
the first, wrapping from 2**32 - 1 to 0; a reopened channel starts again at 0.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Union

from ._handshake import HandshakeRequest

__all__ = [
    "LinkRequested",
    "HandshakeComplete",
    "LinkRefused",
    "MessageReceived",
    "Received",
    "Consumed",
    "ChannelClosed",
    "ChannelCloseAcknowledged",
    "CommitRequested",
    "RollbackRequested",
    "Committed",
    "Uncommitted",
    "Ping",
    "Pong",
    "Resumed",
    "ShutdownReceived",
    "LinkShutdown",
    "ConnectionClosed",
    "Event",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class LinkRequested:
    """Listener only: the connector's handshake arrived and matches an endpoint.

    The I/O layer looks ``request.old_epoch`` / ``request.old_link_id`` up in
    its link registry and answers with
    :meth:`~bridges.relink.Connection.accept_link`.
    """

    request: HandshakeRequest


@dataclass(frozen=True, slots=True, kw_only=True)
class HandshakeComplete:
    """The handshake is over; packets flow.

    Attributes:
        resumed: the peers agreed on the old link: its state carries on, and
            nothing is lost or delivered twice.
        epoch: the listener's epoch (microseconds since 1970).
        link_id: the link id, in [1, 2**63).
        lost_outgoing: connector only, on a new link replacing an old one: our
            channels whose unacknowledged messages and open state were lost.
        lost_incoming: likewise, the peer's channels we had state for.
    """

    resumed: bool
    epoch: int
    link_id: int
    lost_outgoing: tuple[int, ...] = ()
    lost_incoming: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class LinkRefused:
    """The old link id was required but the listener does not know it (any more).

    The connection is ``CLOSED``. On the connector, the old link's channels
    are reported lost; on the listener both tuples are empty.
    """

    lost_outgoing: tuple[int, ...] = ()
    lost_incoming: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class MessageReceived:
    """A message arrived on one of the peer's channels.

    Pass it to the application, then call
    :meth:`~bridges.relink.Connection.consume` once it is processed: that is
    what opens the peer's send window.
    """

    channel: int
    sequence: int
    parts: tuple[bytes, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class Received:
    """The peer acknowledged receiving our messages on ``channel`` up to ``sequence``.

    Attributes:
        count: how many messages this acknowledgement newly covers.
    """

    channel: int
    sequence: int
    count: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Consumed:
    """The peer consumed our messages on ``channel`` up to ``sequence``.

    ``count`` messages left the send buffer, so the window grew by that
    much: wake senders waiting for :meth:`~bridges.relink.Connection.can_send`.
    """

    channel: int
    sequence: int
    count: int


@dataclass(frozen=True, slots=True, kw_only=True)
class ChannelClosed:
    """The peer closed its channel (close op, or its shutdown): no more messages follow.

    Every message sent before the close has already been reported. The
    machine sends the closed acknowledgement once all of them are consumed
    and every commit on the channel is answered; then the peer may reopen
    the channel, whose sequence numbers restart at 0.
    """

    channel: int


@dataclass(frozen=True, slots=True, kw_only=True)
class ChannelCloseAcknowledged:
    """The peer acknowledged closing our channel: it is gone and its id free again."""

    channel: int


@dataclass(frozen=True, slots=True, kw_only=True)
class CommitRequested:
    """The peer asks to commit its messages on ``channel`` up to ``sequence``.

    Answer with :meth:`~bridges.relink.Connection.answer_commit`, in order.
    """

    channel: int
    sequence: int


@dataclass(frozen=True, slots=True, kw_only=True)
class RollbackRequested:
    """The peer asks to ignore its uncommitted messages on ``channel`` up to ``sequence``.

    Not answered. A rollback sent just before a reconnection may be lost
    (the spec allows it); the next commit names its range explicitly.
    """

    channel: int
    sequence: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Committed:
    """The peer committed our messages on ``channel`` up to ``sequence``."""

    channel: int
    sequence: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Uncommitted:
    """The peer failed to commit our messages on ``channel`` up to ``sequence``."""

    channel: int
    sequence: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Ping:
    """The peer pinged; the machine has already queued the pong."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Pong:
    """The peer answered a ping (any pong: it proves the peer is alive)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Resumed:
    """The peer finished resuming the old link: every channel is live again.

    Channels the peer did not mention are resumed from scratch (everything
    unacknowledged is sent again), or closed if their close was sent.
    """


@dataclass(frozen=True, slots=True, kw_only=True)
class ShutdownReceived:
    """The peer will open no more channels; its open channels have ended.

    A :class:`ChannelClosed` precedes this for each of the peer's channels
    that was still open.
    """


@dataclass(frozen=True, slots=True, kw_only=True)
class LinkShutdown:
    """Both peers have sent shutdown: the link is over; close the connection and forget it."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ConnectionClosed:
    """The transport ended (end of file). The link state survives for a reconnection."""


Event = Union[
    LinkRequested,
    HandshakeComplete,
    LinkRefused,
    MessageReceived,
    Received,
    Consumed,
    ChannelClosed,
    ChannelCloseAcknowledged,
    CommitRequested,
    RollbackRequested,
    Committed,
    Uncommitted,
    Ping,
    Pong,
    Resumed,
    ShutdownReceived,
    LinkShutdown,
    ConnectionClosed,
]
