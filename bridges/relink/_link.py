"""What outlives a connection: the link state, per channel and direction.

A Relink *link* survives TCP connections: when one drops, the connector
connects again, presents the epoch and link id, and if the listener still
knows the link both carry on where they were. Everything that must survive
lives here, in a :class:`LinkState` the I/O layer keeps (the listener in its
link registry, :class:`LinkRegistry`) and hands to the next
:class:`~bridges.relink.Connection`. A connection owns at most one link at a
time, and a link has one owner: the newest connection that attached it.

Outgoing channels (the flow-control arithmetic)
-----------------------------------------------
``consumed`` is the sequence number of the last message the peer
acknowledged consumed (``NONE`` before any). ``buffered`` holds every later
message, oldest first: the message at index ``i`` has sequence
``consumed + 1 + i``. Of those, the first ``sent`` were written to some
connection and the first ``received`` were acknowledged received. The send
window ``W`` bounds ``len(buffered)``: at most ``W`` messages sent and not
acknowledged consumed, so ``available = W - len(buffered)``. A consumed
acknowledgement drops messages from the front and so opens the window;
nothing else does. These are Go's counters (``messageConsumed``,
``messagesBuffered``, ``messagesSent``, ``messagesReceived``) and its modular
range checks: a received acknowledgement must name a sequence between the
last one received and the last one sent; a consumed one between the last
one consumed and the last one sent.

What a kept message costs
-------------------------
Every message stays in ``buffered`` until the peer acknowledges it
consumed, and a connector that never does makes us keep a whole window
(65,536 messages) per channel. What is kept is counted against the
connection's memory budget (``LinkState.kept_memory``), and it
must count what the message holds in memory, not only its payload: a
one-part message of 8 bytes holds about 98 bytes of Python objects (a
tuple of 48 bytes, a bytes object of 33 + 8, a deque slot of 8; measured
with tracemalloc on CPython 3.11, 64-bit). So each message counts its
payload plus ``KEPT_MESSAGE_COST`` (64: the tuple, the deque slot and
allocator rounding) plus ``KEPT_PART_COST`` (40: a pointer and a bytes
header) per part: 104 + 8 for that message, a little above what it holds,
so that what a peer makes us keep is never more than its budget counts.
(``unacknowledged_bytes`` stays the payload alone; ``kept_overhead`` is
the rest.)

Incoming channels (the acknowledgement batching)
------------------------------------------------
``received`` is the sequence number of the last message that arrived,
``consumed`` the last one the application consumed, ``consume_sent`` the last
one we acknowledged consumed. As in Go, a consumed acknowledgement is sent
as soon as ``consumed - consume_sent`` reaches the ack window (default a
quarter of the send window, 16,384), and otherwise when the I/O layer's
short timer (Go: 100 ms) calls ``flush_acks``. Received acknowledgements are
sent only when resuming a link: they tell the sender where to resend from.
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from bridges.machine import StateTable

from ._errors import LocalProtocolError, RemoteProtocolError
from ._handshake import MAX_LINK_ID, LinkConfig
from ._sequence import NONE, advance, distance
from ._state import CHANNEL_TRANSITIONS, ChannelEvent, ChannelPhase

__all__ = [
    "KEPT_MESSAGE_COST",
    "KEPT_PART_COST",
    "IncomingChannel",
    "LinkRegistry",
    "LinkState",
    "OutgoingChannel",
    "Role",
    "TransactionOp",
    "kept_cost",
    "kept_overhead",
    "kept_total",
]


#: What a kept message counts beyond its payload (module docstring).
KEPT_MESSAGE_COST = 64
#: ... and what each of its parts counts beyond its bytes.
KEPT_PART_COST = 40

#: How a channel of ours writes (``_state``), a step it has no row for
#: being our own bug (LocalProtocolError).
_PHASES = StateTable(CHANNEL_TRANSITIONS, local_error=LocalProtocolError, remote_error=RemoteProtocolError)


def kept_overhead(message: tuple[bytes, ...]) -> int:
    """What keeping ``message`` counts beyond its payload (module docstring)."""
    return KEPT_MESSAGE_COST + KEPT_PART_COST * len(message)


def kept_cost(message: tuple[bytes, ...]) -> int:
    """What keeping ``message`` counts against the budget: payload and overhead."""
    return sum(map(len, message)) + KEPT_MESSAGE_COST + KEPT_PART_COST * len(message)


def kept_total(messages: list[tuple[bytes, ...]]) -> int:
    """``sum(map(kept_cost, messages))``, in fewer steps (a batch of sends)."""
    size = sum(len(part) for message in messages for part in message)
    return size + KEPT_MESSAGE_COST * len(messages) + KEPT_PART_COST * sum(map(len, messages))


class Role(enum.Enum):
    """Which end of the TCP connection: the one that connected, or the one that accepted."""

    CONNECTOR = "connector"
    LISTENER = "listener"


@dataclass(slots=True, kw_only=True)
class TransactionOp:
    """A commit or rollback we issued, until it is written (and, for a commit, answered)."""

    commit: bool
    sequence: int
    written: bool = False


class OutgoingChannel:
    """State of one of our channels (see the module docstring)."""

    __slots__ = (
        "buffered",
        "close_sent",
        "closing",
        "consumed",
        "ever_consumed",
        "id",
        "operations",
        "overhead",
        "phase",
        "received",
        "sent",
        "size",
        "transaction_target",
    )

    def __init__(self, channel: int) -> None:
        self.id = channel
        self.consumed = NONE
        self.buffered: deque[tuple[bytes, ...]] = deque()
        self.size = 0  # bytes of the messages in ``buffered``
        self.overhead = 0  # ... and what they count beyond (kept_overhead)
        self.sent = 0
        self.received = 0
        self.ever_consumed = False
        # How the channel writes (``_state``): LIVE; HOLDING between a resumed
        # handshake and the peer's received acknowledgement (or its resume
        # packet), since we do not know where to resend from; then
        # CATCHING_UP until the writer has pulled everything unsent.
        self.phase = ChannelPhase.LIVE
        self.closing = False
        self.close_sent = False
        self.transaction_target = NONE  # last sequence a commit or rollback named
        self.operations: list[TransactionOp] = []

    @property
    def next_sequence(self) -> int:
        return advance(self.consumed, 1 + len(self.buffered))

    @property
    def last_sequence(self) -> int:
        return advance(self.consumed, len(self.buffered))

    @property
    def resuming(self) -> bool:
        """True while we do not know where to resend from (HOLDING)."""
        return self.phase is ChannelPhase.HOLDING

    def step(self, event: ChannelEvent) -> None:
        """Move to the phase the table (``_state.CHANNEL_TRANSITIONS``) gives."""
        self.phase = _PHASES.after_local(self.phase, event)

    def _resend_from(self, sent: int) -> None:
        # The peer said where its copy ends: everything after it is unsent.
        self.step(ChannelEvent.RESEND_FROM)
        self.sent = sent
        self.close_sent = False

    @property
    def pending_commits(self) -> int:
        return sum(op.commit for op in self.operations)

    def on_received(self, sequence: int) -> int:
        """Apply a received acknowledgement; how many messages it newly covers."""
        received = distance(self.consumed, sequence)
        if not self.received <= received <= self.sent:
            low, high = advance(self.consumed, self.received), advance(self.consumed, self.sent)
            raise RemoteProtocolError(
                f"received acknowledgement of sequence {sequence} out of modular range [{low}, {high}]"
                f" on channel {self.id}"
            )
        newly = received - self.received
        self.received = received
        if self.phase is ChannelPhase.HOLDING:
            # Where to resend from is known now: everything the peer lacks.
            self._resend_from(received)
        return newly

    def on_consumed(self, sequence: int) -> int:
        """Apply a consumed acknowledgement; how many messages left the buffer."""
        count = distance(self.consumed, sequence)
        if count > self.sent:
            raise RemoteProtocolError(
                f"consumed acknowledgement of sequence {sequence} out of modular range"
                f" [{self.consumed}, {advance(self.consumed, self.sent)}] on channel {self.id}"
            )
        popleft = self.buffered.popleft
        size = parts = 0
        for _ in range(count):
            message = popleft()
            size += sum(map(len, message))
            parts += len(message)
        self.size -= size
        self.overhead -= KEPT_MESSAGE_COST * count + KEPT_PART_COST * parts  # (kept_overhead of each)
        self.consumed = sequence
        self.sent -= count
        self.received = max(self.received - count, 0)
        if count:
            self.ever_consumed = True
        if self.received == 0 and self.phase is ChannelPhase.HOLDING:
            # Go's rule: a consumed acknowledgement without a received one
            # means the peer has nothing beyond it; resend the rest.
            self._resend_from(0)
        return count

    def begin_resume(self) -> None:
        self.step(ChannelEvent.BEGIN_RESUME)
        # Commits not answered yet are sent again after the messages they
        # name; the receiver ignores the ones it already has. Rollbacks that
        # were written are not repeated: the spec lets them be missed.
        for op in self.operations:
            if op.commit:
                op.written = False

    def end_resume(self) -> bool:
        """The peer's resume arrived without mentioning this channel: True if it is closed."""
        if self.close_sent:
            return True  # the peer processed the close and forgot the channel
        if self.ever_consumed or self.received:
            raise RemoteProtocolError(f"channel {self.id} with acknowledged messages was not resumed")
        self._resend_from(0)
        return False


class IncomingChannel:
    """State of one of the peer's channels (see the module docstring)."""

    __slots__ = (
        "answers",
        "closing",
        "consume_sent",
        "consumed",
        "id",
        "received",
        "transaction_target",
        "unanswered",
    )

    def __init__(self, channel: int, max_answers: int) -> None:
        self.id = channel
        self.received = NONE
        self.consumed = NONE
        self.consume_sent = NONE
        self.closing = False
        self.transaction_target = NONE
        self.unanswered: deque[int] = deque()
        # The last answers we gave, repeated after a reconnection: the peer
        # has at most max_pending_commits unanswered, so these cover them.
        self.answers: deque[tuple[int, bool]] = deque(maxlen=max_answers)

    @property
    def unconsumed(self) -> int:
        return distance(self.consumed, self.received)

    @property
    def ack_due(self) -> bool:
        return self.consumed != self.consume_sent

    @property
    def ready_to_close(self) -> bool:
        return self.closing and self.consumed == self.received and not self.unanswered


class LinkState:
    """Everything about one link that must survive a reconnection.

    Created by the connection when a handshake starts a new link; passed to
    a later connection (``Connection(..., link=state)`` on the connector,
    ``accept_link(state)`` on the listener) to resume it. The I/O layer
    must not use a link from two connections at once: attaching it to a
    new connection detaches it from the old one, whose methods then raise.

    Attributes:
        role: which end this side is.
        config: id sizes and transactions; a resumed link keeps them.
        epoch: the listener's epoch when the link was made.
        link_id: the listener-assigned id, in [1, 2**63).
    """

    def __init__(self, *, role: Role, config: LinkConfig, epoch: int, link_id: int) -> None:
        if not 1 <= link_id <= MAX_LINK_ID:
            raise LocalProtocolError(f"link id must be in [1, 2**63), got {link_id!r}")
        self.role = role
        self.config = config
        self.epoch = epoch
        self.link_id = link_id
        self.outgoing: dict[int, OutgoingChannel] = {}
        self.incoming: dict[int, IncomingChannel] = {}
        self.shutdown_requested = False
        self.shutdown_sent = False
        self.peer_shutdown = False
        self.discarded = False
        self.owner: object | None = None
        # Bytes of our messages kept until the peer acknowledges them
        # consumed (to resend after a reconnection): every channel's
        # ``size``; and what they count beyond (every channel's
        # ``overhead``: module docstring, kept_overhead).
        self.unacknowledged_bytes = 0
        self.kept_overhead = 0

    @property
    def ended(self) -> bool:
        """Both peers sent shutdown: the link is over and must not be resumed."""
        return self.shutdown_sent and self.peer_shutdown

    def discard(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """Mark the link as given up (the listener did not know it): its channels, (ours, the peer's)."""
        self.discarded = True
        self.owner = None
        return self.outgoing_channels, self.incoming_channels

    @property
    def kept_memory(self) -> int:
        """What our messages kept until acknowledged count against the budget (payload and overhead)."""
        return self.unacknowledged_bytes + self.kept_overhead

    @property
    def outgoing_channels(self) -> tuple[int, ...]:
        """Ids of our channels that have state (open, unacknowledged or closing)."""
        return tuple(sorted(self.outgoing))

    @property
    def incoming_channels(self) -> tuple[int, ...]:
        """Ids of the peer's channels we have state for."""
        return tuple(sorted(self.incoming))

    def unacknowledged(self, channel: int) -> int:
        """Messages on our ``channel`` not yet acknowledged consumed."""
        state = self.outgoing.get(channel)
        return len(state.buffered) if state is not None else 0

    def unconsumed(self, channel: int) -> int:
        """Messages received on the peer's ``channel`` and not yet consumed."""
        state = self.incoming.get(channel)
        return state.unconsumed if state is not None else 0

    def __repr__(self) -> str:
        return (
            f"<relink.LinkState {self.role.value} epoch={self.epoch} link={self.link_id}:"
            f" {len(self.outgoing)} outgoing, {len(self.incoming)} incoming channels>"
        )


#: Draws of a random link id before giving up: a random source collides
#: with a live link once in 2**63 / links held; this many in a row means
#: the source is not random (a test's, or a broken one), not bad luck.
_MAX_DRAWS = 16


class LinkRegistry:
    """A listener's links by id, and the source of new link ids (pure bookkeeping).

    A link id is all a connector shows to resume a link (the epoch is no
    secret: every handshake reply carries it, and the spec makes it a
    timestamp), and Relink has no authentication: whoever names a live
    link's id takes it over, and its connection is dropped. A listener that
    faces connectors it does not trust draws ids at random from the whole
    range [1, 2**63) (``randbelow=secrets.randbelow``, as
    :class:`~bridges.relink.RelinkServer` does): who was not told a link's
    id cannot name it, short of one chance in 2**63 per guess. Without a
    ``randbelow``, ids are handed out in order from 1, as Go does:
    predictable (a connector that got id 7 knows id 6 is live), which is
    fine for tests and byte-exact examples and nothing else
    (``docs/bridges/relink.md``, Handshake item 7).

    Args:
        epoch: this listener instance's epoch, microseconds since 1970 UTC
            (the I/O layer reads the clock once at start-up). Positive.
        randbelow: ``randbelow(n)``, a random int in [0, n), to draw new
            link ids with (:func:`secrets.randbelow`: the operating
            system's); None: in order from 1.
    """

    def __init__(self, epoch: int, *, randbelow: Callable[[int], int] | None = None) -> None:
        if type(epoch) is not int or not 0 < epoch < 2**63:
            raise ValueError(f"epoch must be a positive signed 64-bit int, got {epoch!r}")
        self.epoch = epoch
        self._links: dict[int, LinkState] = {}
        self._randbelow = randbelow
        self._last_link_id = 0

    def new_link_id(self) -> int:
        """A link id that no link in the registry has.

        In order: never handed out by this registry before. Drawn at
        random: unique among the links held now (remembering every id ever
        drawn would take memory growing with every link), so a connector
        still holding the id of a forgotten link resumes a newer one only
        if two draws collide: one chance in 2**63 per link held.
        """
        if self._randbelow is None:
            if self._last_link_id >= MAX_LINK_ID:
                raise LocalProtocolError("link ids are exhausted")
            self._last_link_id += 1
            return self._last_link_id
        for _ in range(_MAX_DRAWS):
            drawn = self._randbelow(MAX_LINK_ID)
            if type(drawn) is not int or not 0 <= drawn < MAX_LINK_ID:
                raise LocalProtocolError(f"randbelow({MAX_LINK_ID}) returned {drawn!r}, not in [0, {MAX_LINK_ID})")
            link_id = 1 + drawn
            if link_id not in self._links:
                return link_id
        raise LocalProtocolError(f"{_MAX_DRAWS} link ids drawn in a row were taken: randbelow is not random")

    def lookup(self, epoch: int, link_id: int) -> LinkState | None:
        """The live link a connector names, or None (other epoch, unknown or ended)."""
        if epoch != self.epoch:
            return None
        link = self._links.get(link_id)
        return None if link is None or link.ended or link.discarded else link

    def add(self, link: LinkState) -> None:
        if link.epoch != self.epoch:
            raise LocalProtocolError("the link belongs to another epoch")
        self._links[link.link_id] = link

    def remove(self, link_id: int) -> None:
        self._links.pop(link_id, None)

    def __len__(self) -> int:
        return len(self._links)
