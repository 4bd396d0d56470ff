"""The Relink connection state machine: bytes in, events out; calls in, bytes out.

A :class:`Connection` does no I/O. The I/O layer feeds it received bytes
(``receive_data``, ``b""`` for end of file), takes the events (``events``),
calls it to send, and writes what ``data_to_send`` returns. Timers are the
I/O layer's: the handshake timeout, the idle ping and the pong timeout, and
the delay after which batched consumed acknowledgements go out (``flush_acks``).
The handshake is run here (``_state`` has the table); after it, packets go
to a ``LinkEngine`` on the agreed link. The link (:class:`LinkState`)
outlives the connection: give it to the next one to resume.

Whose fault: local misuse (sending before the handshake, overrunning the
window, consuming what was not received, answering a commit out of order)
raises ``LocalProtocolError`` and changes nothing. A peer's violation moves
the machine to ``ERROR``, then ``RemoteProtocolError`` from :meth:`events`
(after the events before it); Relink has no error packet, so the I/O layer
closes the transport and decides what becomes of the link.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from bridges.machine import ProtocolMachine, StateTable

from ._codec import PacketDecoder, encode_packet
from ._config import DEFAULT_RESEND_CHUNK, DEFAULT_SEND_WINDOW, RelinkStatistics
from ._engine import LinkEngine
from ._errors import LimitExceeded, LocalProtocolError, RemoteProtocolError, UnsupportedVersionError
from ._events import ConnectionClosed, Event, HandshakeComplete, LinkRefused, LinkRequested
from ._handshake import (
    MAX_LINK_ID,
    REPLY_SIZE,
    VERSION_SIZE,
    HandshakeReply,
    HandshakeRequest,
    LinkConfig,
    ReplyOutcome,
    check_request,
    decode_reply,
    decode_request,
    decode_version,
    encode_reply,
    encode_request,
    encode_version,
    judge_reply,
)
from ._link import LinkState, Role
from ._packets import DEFAULT_LIMITS, PROTOCOL_VERSION, MessagePacket, Packet, RelinkLimits
from ._state import CONNECTION_TRANSITIONS, HANDSHAKE_STATES, TERMINAL_STATES, ConnectionEvent, ConnectionState

__all__ = ["Connection"]

#: The connection's state table (``_state``), refusing a step it has no row
#: for with this protocol's errors.
_STATES = StateTable(CONNECTION_TRANSITIONS, local_error=LocalProtocolError, remote_error=RemoteProtocolError)

# Bytes a peer may send beyond the handshake before we reply (the handshake
# is half-duplex, so a well-behaved peer sends none).
_MAX_EARLY_BYTES = 64 * 1024


class Connection(ProtocolMachine[Event, RemoteProtocolError]):
    """A sans-I/O Relink connection, either end.

    The connector's version block is queued at creation: send it first.

    Args:
        role: ``Role.CONNECTOR`` (we connected) or ``Role.LISTENER`` (we accepted).
        config: connector only: id sizes and transactions to ask for.
            Defaults to ``link.config`` when resuming.
        endpoint_name: connector only: the listener endpoint to reach.
        link: connector only: the link of an earlier connection, to resume.
        require_old_link: connector only: with ``link``, fail (``LinkRefused``)
            rather than start a new link if the listener does not know it.
        endpoints: listener only: the endpoints offered, by name, each with
            the config a connector must ask for exactly.
        epoch: listener only: this listener instance's epoch, microseconds
            since 1970 UTC (positive); the same for all its connections.
        send_window: most messages per channel sent and not acknowledged
            consumed. Default 65,536.
        ack_window: consumed messages that trigger an acknowledgement at
            once. Default a quarter of ``send_window``.
        limits: what the peer may send (and what we may, so the peer takes it).
        resend_chunk: bytes of a resend each :meth:`data_to_send` encodes.
    """

    def __init__(
        self,
        role: Role,
        *,
        config: LinkConfig | None = None,
        endpoint_name: str = "",
        link: LinkState | None = None,
        require_old_link: bool = False,
        endpoints: Mapping[str, LinkConfig] | None = None,
        epoch: int | None = None,
        send_window: int = DEFAULT_SEND_WINDOW,
        ack_window: int | None = None,
        limits: RelinkLimits = DEFAULT_LIMITS,
        resend_chunk: int = DEFAULT_RESEND_CHUNK,
    ) -> None:
        if not isinstance(role, Role):
            raise LocalProtocolError(f"role must be a Role, got {role!r}")
        if type(send_window) is not int or not 1 <= send_window < 2**31:
            raise LocalProtocolError(f"send_window must be an int in [1, 2**31), got {send_window!r}")
        ack_window = max(1, send_window // 4) if ack_window is None else ack_window
        if type(ack_window) is not int or ack_window < 1:
            raise LocalProtocolError(f"ack_window must be a positive int, got {ack_window!r}")
        self.role = role
        self.send_window = send_window
        self.ack_window = ack_window
        self.limits = limits
        self.resend_chunk = resend_chunk
        super().__init__(RemoteProtocolError)
        self._inbound = bytearray()
        self._pending: list[Event] = []  # what the handshake and the engine emit, until events() takes it
        self._eof = False
        self._engine: LinkEngine | None = None
        self._decoder: PacketDecoder | None = None
        self._link: LinkState | None = None
        self._old_link: LinkState | None = None
        self._request: HandshakeRequest | None = None
        self._counts = [0, 0, 0, 0, 0, 0]  # bytes in/out, packets in/out, messages in/out
        self.endpoints: dict[str, LinkConfig] = {}
        self.epoch: int | None = None
        if role is Role.CONNECTOR:
            if endpoints is not None or epoch is not None:
                raise LocalProtocolError("endpoints and epoch are the listener's arguments")
            if link is not None:
                if not isinstance(link, LinkState) or link.role is not Role.CONNECTOR:
                    raise LocalProtocolError("link must be a connector's LinkState")
                if link.ended or link.discarded:
                    raise LocalProtocolError("that link has ended; start a new one")
                config = link.config if config is None else config
                if config != link.config:
                    raise LocalProtocolError("a resumed link keeps its config")
            if not isinstance(config, LinkConfig):
                raise LocalProtocolError("the connector needs a LinkConfig")
            self._old_link = link
            old_epoch, old_link_id = (link.epoch, link.link_id) if link is not None else (0, 0)
            self._request = HandshakeRequest(
                endpoint_name=endpoint_name, config=config, require_old_link=require_old_link and link is not None,
                old_epoch=old_epoch, old_link_id=old_link_id,
            )
            self._state = ConnectionState.AWAIT_LISTENER_VERSION
            self._queue_raw(encode_version(PROTOCOL_VERSION))
        else:
            if link is not None or config is not None or require_old_link or endpoint_name:
                raise LocalProtocolError("config, endpoint_name, link and require_old_link are the connector's")
            if not endpoints or not all(isinstance(c, LinkConfig) for c in endpoints.values()):
                raise LocalProtocolError("the listener needs endpoints: a mapping of names to LinkConfig")
            if type(epoch) is not int or not 0 < epoch < 2**63:
                raise LocalProtocolError(f"the listener needs a positive 64-bit epoch, got {epoch!r}")
            self.endpoints = dict(endpoints)
            self.epoch = epoch
            self._state = ConnectionState.AWAIT_CONNECTOR_VERSION

    # ---- state ----------------------------------------------------------------

    @property
    def state(self) -> ConnectionState:
        """Where the connection is: a handshake step, open, closed or failed."""
        if self._link is not None and self._link.owner is not self and self._state not in TERMINAL_STATES:
            self._state = ConnectionState.CLOSED  # a newer connection took the link over
        return self._state

    @property
    def link(self) -> LinkState | None:
        """The link this connection carries, once the handshake agreed on one."""
        return self._link

    @property
    def request(self) -> HandshakeRequest | None:
        """The connector's handshake request (sent, or received by a listener)."""
        return self._request

    @property
    def peer_resuming(self) -> bool:
        """True on a resumed link until the peer's ``resume`` arrives."""
        return self._engine is not None and self._engine.peer_resuming

    @property
    def ping_outstanding(self) -> bool:
        """True from :meth:`send_ping` until a pong arrives."""
        return self._engine is not None and self._engine.ping_outstanding

    @property
    def pending_acks(self) -> tuple[int, ...]:
        """The peer's channels with consumed messages not yet acknowledged.

        When this becomes non-empty, arm a timer (``DEFAULT_ACK_DELAY``) that
        calls :meth:`flush_acks`, unless one is armed already."""
        return self._engine.pending_acks if self._engine is not None else ()

    def _transition(self, event: ConnectionEvent) -> None:
        self._state = _STATES.after_local(self.state, event)

    def _receive_transition(self, event: ConnectionEvent, what: str) -> None:
        self._state = _STATES.after_received(self._state, event, what)

    def _engine_for_send(self) -> LinkEngine:
        self._transition(ConnectionEvent.SEND_PACKET)
        assert self._engine is not None
        return self._engine

    def _check_ended(self) -> None:
        # A call can finish the link: our shutdown goes out after the peer's.
        if self._engine is not None and self._engine.ended and self._state is ConnectionState.OPEN:
            self._transition(ConnectionEvent.LINK_SHUTDOWN)

    # ---- receiving ------------------------------------------------------------

    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        """Add bytes received from the peer; ``b""`` means end of file.

        :meth:`events` parses them. Bytes received after the connection
        closed or failed are ignored.
        """
        if self.state in TERMINAL_STATES or self._eof:
            return
        if not data:
            self._eof = True
            return
        self._counts[0] += len(data)
        if self._decoder is not None:
            self._decoder.feed(data)
        else:
            self._inbound += data

    @property
    def buffered_input_size(self) -> int:
        """Bytes received and not yet parsed (handshake bytes, a partial packet)."""
        return len(self._inbound) + (self._decoder.buffered if self._decoder is not None else 0)

    def fail_memory_budget(self, message: str) -> RemoteProtocolError:
        """The peer passed the memory budget: as for any limit, ``ERROR`` and close; its input is dropped."""
        error = LimitExceeded(message, limit="max_connection_memory", value=self.buffered_input_size)
        if self.state not in TERMINAL_STATES:
            self._fail(error)
        self._inbound, self._decoder = bytearray(), None
        return error

    def events(self) -> list[Event]:
        """Parse what was received; return the events, in order.

        Raises:
            RemoteProtocolError: the peer broke the protocol (raised after the
                events before it have been returned). The state is ``ERROR``.
            UnsupportedVersionError: the listener answered a version we do
                not speak.
            HandshakeRejected: (listener) unknown endpoint, or a config that
                differs from the endpoint's.
            LimitExceeded: the peer exceeded one of ``limits``.
        """
        return self._take_events()

    def _parse(self, events: list[Event]) -> None:
        try:
            self._parse_received()
        finally:
            # What was emitted, the events before a violation included.
            events.extend(self._pending)
            self._pending.clear()  # the engine appends to this very list

    def _fail(self, error: RemoteProtocolError) -> None:
        self._state, self._outbound = ConnectionState.ERROR, bytearray()  # nothing more is sent

    def _parse_received(self) -> None:
        while self.state in HANDSHAKE_STATES and self._handshake_step():
            pass
        if self._state in HANDSHAKE_STATES and len(self._inbound) > _MAX_EARLY_BYTES:
            raise RemoteProtocolError("the peer sent too much before the handshake finished")
        if self._state is ConnectionState.OPEN:
            assert self._decoder is not None and self._engine is not None
            while self.state is ConnectionState.OPEN:
                packet = self._decoder.next_packet()
                if packet is None:
                    break
                self._receive_transition(ConnectionEvent.RECEIVE_PACKET, "packet")
                self._counts[2] += 1
                if isinstance(packet, MessagePacket):
                    self._counts[4] += len(packet.channels)
                self._engine.receive(packet)
                self._check_ended()
        if self._eof and self.state not in TERMINAL_STATES:
            self._receive_transition(ConnectionEvent.RECEIVE_EOF, "end of file")
            self._pending.append(ConnectionClosed())

    def _take(self, size: int) -> bytes | None:
        if len(self._inbound) < size:
            return None
        data = bytes(self._inbound[:size])
        del self._inbound[:size]
        return data

    def _handshake_step(self) -> bool:
        state = self._state
        if state in (ConnectionState.AWAIT_LISTENER_VERSION, ConnectionState.AWAIT_CONNECTOR_VERSION):
            block = self._take(VERSION_SIZE)
            if block is None:
                return False
            version = decode_version(block)
            if state is ConnectionState.AWAIT_LISTENER_VERSION:
                if version != PROTOCOL_VERSION:
                    raise UnsupportedVersionError(
                        f"the listener answered version {version}; we speak {PROTOCOL_VERSION}", peer_version=version
                    )
                assert self._request is not None
                self._queue_raw(encode_request(self._request))
            else:
                # We speak only version 0, which is "the same or lower" than any.
                self._queue_raw(encode_version(PROTOCOL_VERSION))
            self._receive_transition(ConnectionEvent.RECEIVE_VERSION, "version")
            return True
        if state is ConnectionState.AWAIT_REQUEST:
            parsed = decode_request(self._inbound)
            if parsed is None:
                return False
            request, size = parsed
            del self._inbound[:size]
            check_request(self.endpoints, request)
            self._request = request
            self._receive_transition(ConnectionEvent.RECEIVE_REQUEST, "handshake request")
            self._pending.append(LinkRequested(request=request))
            return True
        if state is ConnectionState.AWAIT_REPLY:
            block = self._take(REPLY_SIZE)
            if block is None:
                return False
            self._receive_reply(decode_reply(block))
            return True
        return False  # AWAIT_DECISION: the I/O layer's move

    def _receive_reply(self, reply: HandshakeReply) -> None:
        request, old = self._request, self._old_link
        assert request is not None
        outcome = judge_reply(request, reply)
        if outcome is ReplyOutcome.REFUSED:
            assert old is not None
            lost = old.discard()
            self._receive_transition(ConnectionEvent.RECEIVE_REFUSAL, "refusal")
            self._pending.append(LinkRefused(lost_outgoing=lost[0], lost_incoming=lost[1]))
            return
        self._receive_transition(ConnectionEvent.RECEIVE_REPLY, "reply")
        if outcome is ReplyOutcome.RESUMED:
            assert old is not None
            self._start(old, resumed=True)
            return
        lost = old.discard() if old is not None else ((), ())
        link = LinkState(role=Role.CONNECTOR, config=request.config, epoch=reply.epoch, link_id=reply.link_id)
        self._start(link, resumed=False, lost=lost)

    def _start(
        self, link: LinkState, *, resumed: bool, lost: tuple[tuple[int, ...], tuple[int, ...]] = ((), ())
    ) -> None:
        link.owner = self
        self._link = link
        self._engine = engine = LinkEngine(
            link,
            send_window=self.send_window,
            ack_window=self.ack_window,
            limits=self.limits,
            write=self._queue,
            emit=self._pending.append,
            written_bytes=lambda: self._counts[1],  # bytes queued so far
        )
        self._decoder = PacketDecoder(
            sender_id_size=engine.peer_id_size, receiver_id_size=engine.own_id_size, limits=self.limits
        )
        self._decoder.feed(self._inbound)
        self._inbound = bytearray()
        self._pending.append(
            HandshakeComplete(
                resumed=resumed, epoch=link.epoch, link_id=link.link_id, lost_outgoing=lost[0], lost_incoming=lost[1]
            )
        )
        self._engine.start(resumed=resumed)
        self._check_ended()

    # ---- the listener's decision ----------------------------------------------

    def accept_link(self, known: LinkState | None = None, *, new_link_id: int | None = None) -> LinkState | None:
        """Answer :class:`~bridges.relink.LinkRequested`: resume, start a new link, or refuse.

        Args:
            known: the link the connector named (``request.old_epoch`` is our
                epoch and the registry knows ``request.old_link_id``), to resume
                it; None if the I/O layer does not know it.
            new_link_id: with ``known=None``: the id for a new link, unique
                for this epoch, in [1, 2**63).

        Returns:
            The link now carried (add a new one to the registry), or None when
            the connector required its old link and ``known`` is None: the
            zero link id is queued and the connection is ``CLOSED`` (send the
            reply, then close the transport).

        Raises:
            LocalProtocolError: no decision is awaited, ``known`` is not the
                link the connector named, or ``new_link_id`` is missing or out
                of range.
        """
        if self.state is not ConnectionState.AWAIT_DECISION:
            raise LocalProtocolError(f"no link decision is awaited in state {self._state.name}")
        request, epoch = self._request, self.epoch
        assert request is not None and epoch is not None
        if known is not None:
            if not isinstance(known, LinkState) or known.role is not Role.LISTENER:
                raise LocalProtocolError("known must be a listener's LinkState")
            if (known.epoch, known.link_id) != (request.old_epoch, request.old_link_id) or known.epoch != epoch:
                raise LocalProtocolError("known is not the link the connector named")
            if known.config != request.config or known.ended or known.discarded:
                raise LocalProtocolError("known cannot be resumed (another config, or ended)")
            self._transition(ConnectionEvent.ACCEPT)
            self._queue_raw(encode_reply(HandshakeReply(epoch=epoch, link_id=known.link_id)))
            self._start(known, resumed=True)
            return known
        if request.require_old_link and request.old_link_id:
            self._transition(ConnectionEvent.REFUSE)
            self._queue_raw(encode_reply(HandshakeReply(epoch=epoch, link_id=0)))
            self._pending.append(LinkRefused())
            return None
        if type(new_link_id) is not int or not 1 <= new_link_id <= MAX_LINK_ID:
            raise LocalProtocolError(f"new_link_id must be an int in [1, 2**63), got {new_link_id!r}")
        self._transition(ConnectionEvent.ACCEPT)
        self._queue_raw(encode_reply(HandshakeReply(epoch=epoch, link_id=new_link_id)))
        link = LinkState(role=Role.LISTENER, config=request.config, epoch=epoch, link_id=new_link_id)
        self._start(link, resumed=False)
        return link

    # ---- sending ----------------------------------------------------------------

    def send_message(self, channel: int, parts: Iterable[bytes]) -> int:
        """Queue a message on our ``channel``; its sequence number.

        The message stays in the link until the peer acknowledges consuming
        it, and is sent again after a reconnection if the peer lacks it.

        Raises:
            LocalProtocolError: the connection is not open, the channel is
                closing, its window is full (:meth:`can_send`), the link is
                shutting down, or the message exceeds ``limits``.
        """
        return self._engine_for_send().send_message(channel, parts)

    def send_multicast(self, channels: Iterable[int], parts: Iterable[bytes]) -> tuple[int, ...]:
        """Queue one message on several of our channels; each one's sequence number.

        One multicast packet carries it when every channel is live; a
        channel named twice gets the message twice.

        Raises:
            LocalProtocolError: as :meth:`send_message`, for any channel.
        """
        return self._engine_for_send().send_multicast(channels, parts)

    def close_channel(self, channel: int) -> None:
        """Close our ``channel`` after its queued messages.

        :class:`~bridges.relink.ChannelCloseAcknowledged` follows once the
        peer has consumed everything; then the id may be used again.

        Raises:
            LocalProtocolError: the channel carried no message, or is already closing.
        """
        self._engine_for_send().close_channel(channel)
        self._check_ended()

    def commit(self, channel: int) -> int:
        """Ask the peer to commit our messages on ``channel`` so far; the sequence named.

        Raises:
            LocalProtocolError: transactions were not negotiated for our
                channels, no message was sent since the last commit or
                rollback, or ``limits.max_pending_commits`` await answers.
        """
        return self._engine_for_send().transaction(channel, commit=True)

    def rollback(self, channel: int) -> int:
        """Ask the peer to ignore our uncommitted messages on ``channel``; the sequence named.

        Raises:
            LocalProtocolError: as :meth:`commit`.
        """
        return self._engine_for_send().transaction(channel, commit=False)

    def send_shutdown(self) -> None:
        """Shut the link down gracefully: close our channels, then send shutdown.

        The shutdown packet goes out once every channel of ours is
        acknowledged closed (with id size 0: once the unnamed channel is
        drained). :class:`~bridges.relink.LinkShutdown` follows when both
        peers have sent it.

        Raises:
            LocalProtocolError: the connection is not open, or shutdown was already requested.
        """
        self._engine_for_send().send_shutdown()
        self._check_ended()

    def send_ping(self) -> None:
        """Queue a ping; :attr:`ping_outstanding` stays true until a pong arrives.

        Raises:
            LocalProtocolError: the connection is not open, or a ping is outstanding.
        """
        self._engine_for_send().send_ping()

    def consume(self, channel: int, *, sequence: int | None = None, count: int | None = None) -> None:
        """Record that the application consumed the peer's messages on ``channel``.

        Give ``sequence`` (consumed up to and including it) or ``count``
        (this many more). The acknowledgement is batched (:attr:`pending_acks`).

        Raises:
            LocalProtocolError: more than was received, or not open.
        """
        self._engine_for_send().consume(channel, sequence=sequence, count=count)

    def flush_acks(self) -> None:
        """Send the batched consumed acknowledgements now (the I/O layer's ack timer)."""
        self._engine_for_send().flush_acks()

    def answer_commit(self, channel: int, sequence: int, *, committed: bool) -> None:
        """Answer the oldest :class:`~bridges.relink.CommitRequested` on ``channel``.

        Raises:
            LocalProtocolError: that is not the oldest unanswered commit.
        """
        self._engine_for_send().answer_commit(channel, sequence, committed=committed)
        self._check_ended()

    # ---- queries ----------------------------------------------------------------

    def window_available(self, channel: int) -> int:
        """How many more messages ``channel`` may take now (0 while it closes)."""
        if self._link is None or self._link.shutdown_requested:
            return 0
        state = self._link.outgoing.get(channel)
        if state is None:
            return self.send_window
        return 0 if state.closing else self.send_window - len(state.buffered)

    def can_send(self, channel: int) -> bool:
        """True if :meth:`send_message` on ``channel`` would not be refused for flow control."""
        return self.state is ConnectionState.OPEN and self.window_available(channel) > 0

    def unacknowledged(self, channel: int) -> int:
        """Our messages on ``channel`` not yet acknowledged consumed."""
        return self._link.unacknowledged(channel) if self._link is not None else 0

    def unconsumed(self, channel: int) -> int:
        """The peer's messages on ``channel`` received and not yet consumed."""
        return self._link.unconsumed(channel) if self._link is not None else 0

    def statistics(self) -> RelinkStatistics:
        """Byte, packet and message counts of this connection."""
        # The counters are kept in the order of RelinkStatistics' fields.
        return RelinkStatistics(**dict(zip(RelinkStatistics.__dataclass_fields__, self._counts)))

    # ---- output -------------------------------------------------------------------

    @property
    def resend_pending(self) -> bool:
        """True while a resume's resend is not all queued: :meth:`data_to_send` pulls it."""
        return bool(self._engine is not None and self._engine.catching_up and self.state is ConnectionState.OPEN)

    @property
    def has_data_to_send(self) -> bool:
        """True while bytes wait to be written, or a resend to be pulled."""
        return bool(self._outbound) or self.resend_pending

    @property
    def output_size(self) -> int:
        """Bytes queued (a resend not pulled yet is not: write, then call :meth:`data_to_send` again)."""
        return len(self._outbound)

    def data_to_send(self) -> bytes:
        """The bytes queued for the peer; if none are, the next ``resend_chunk`` bytes of a resend."""
        if not self._outbound and self.resend_pending and self._engine is not None:
            self._engine.write_resend(self.resend_chunk)
        return super().data_to_send()

    def _queue_raw(self, data: bytes) -> None:
        self._outbound += data
        self._counts[1] += len(data)

    def _queue(self, packet: Packet) -> None:
        assert self._engine is not None
        self._queue_raw(
            encode_packet(packet, sender_id_size=self._engine.own_id_size, receiver_id_size=self._engine.peer_id_size)
        )
        self._counts[3] += 1
        if isinstance(packet, MessagePacket):
            self._counts[5] += len(packet.channels)

    def __repr__(self) -> str:
        link = f" link {self._link.link_id}" if self._link is not None else ""
        return f"<relink.Connection {self.role.value} {self._state.name}{link}>"
