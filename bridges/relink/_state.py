"""The Relink connection state machine, as a table.

Theory of operation
-------------------
One connection carries one link at a time. The handshake is half-duplex and
differs by role, so each role has its own handshake states; after it both
roles are alike (``OPEN``). Per-channel state belongs to the link
(``_link``), which outlives connections; the first table is only about the
connection. The second (``CHANNEL_TRANSITIONS``, at the end) is how one of
our channels writes: its own short theory of operation is there.

Connector: it sends its version block at once, then waits for the
listener's (``AWAIT_LISTENER_VERSION``); then sends the endpoint, config and
old link identity and waits for the listener's epoch and link id
(``AWAIT_REPLY``). A link id it can use opens the connection; a zero link id
after requiring the old link means the link is lost (``CLOSED``).

Listener: it waits for the connector's version (``AWAIT_CONNECTOR_VERSION``),
answers with its own, waits for the endpoint and config (``AWAIT_REQUEST``),
checks them, and asks the I/O layer whether it knows the old link
(``AWAIT_DECISION``: the ``LinkRequested`` event). ``accept_link`` opens the
connection, or refuses (a zero link id, ``CLOSED``) when the connector
required an old link the I/O layer does not know.

``OPEN`` ends in ``CLOSED`` by end of file, or once both peers have sent
shutdown. End of file during the handshake is ``CLOSED`` too. A protocol
violation by the peer moves any state but the terminal two to ``ERROR``
without a table lookup: it is always allowed. In ``CLOSED`` and ``ERROR``
nothing is sent and received bytes are ignored.

A pair missing from the table is a protocol error: ``RemoteProtocolError``
when the event came from the peer, ``LocalProtocolError`` (nothing changes)
when it came from our own caller.
"""

from __future__ import annotations

from rstreams.protocol import StateEnum

__all__ = [
    "CHANNEL_TRANSITIONS",
    "CONNECTION_TRANSITIONS",
    "ChannelEvent",
    "ChannelPhase",
    "ConnectionEvent",
    "ConnectionState",
    "HANDSHAKE_STATES",
    "TERMINAL_STATES",
]


class ConnectionState(StateEnum):
    AWAIT_LISTENER_VERSION = "await listener version"  # connector; our version is queued
    AWAIT_REPLY = "await reply"  # connector; our request is queued
    AWAIT_CONNECTOR_VERSION = "await connector version"  # listener
    AWAIT_REQUEST = "await request"  # listener; our version is queued
    AWAIT_DECISION = "await decision"  # listener; LinkRequested was reported
    OPEN = "open"
    CLOSED = "closed"  # end of file, link refused, or link shut down
    ERROR = "error"  # the peer broke the protocol


class ConnectionEvent(StateEnum):
    RECEIVE_VERSION = "receive version"
    RECEIVE_REQUEST = "receive request"
    RECEIVE_REPLY = "receive reply"
    RECEIVE_REFUSAL = "receive refusal"
    ACCEPT = "accept link"
    REFUSE = "refuse link"
    RECEIVE_PACKET = "receive packet"
    SEND_PACKET = "send packet"
    LINK_SHUTDOWN = "both peers shut down"
    RECEIVE_EOF = "receive end of file"


_S, _E = ConnectionState, ConnectionEvent
CONNECTION_TRANSITIONS: dict[tuple[ConnectionState, ConnectionEvent], ConnectionState] = {
    (_S.AWAIT_LISTENER_VERSION, _E.RECEIVE_VERSION): _S.AWAIT_REPLY,
    (_S.AWAIT_LISTENER_VERSION, _E.RECEIVE_EOF): _S.CLOSED,
    (_S.AWAIT_REPLY, _E.RECEIVE_REPLY): _S.OPEN,
    (_S.AWAIT_REPLY, _E.RECEIVE_REFUSAL): _S.CLOSED,
    (_S.AWAIT_REPLY, _E.RECEIVE_EOF): _S.CLOSED,
    (_S.AWAIT_CONNECTOR_VERSION, _E.RECEIVE_VERSION): _S.AWAIT_REQUEST,
    (_S.AWAIT_CONNECTOR_VERSION, _E.RECEIVE_EOF): _S.CLOSED,
    (_S.AWAIT_REQUEST, _E.RECEIVE_REQUEST): _S.AWAIT_DECISION,
    (_S.AWAIT_REQUEST, _E.RECEIVE_EOF): _S.CLOSED,
    (_S.AWAIT_DECISION, _E.ACCEPT): _S.OPEN,
    (_S.AWAIT_DECISION, _E.REFUSE): _S.CLOSED,
    (_S.AWAIT_DECISION, _E.RECEIVE_EOF): _S.CLOSED,
    (_S.OPEN, _E.RECEIVE_PACKET): _S.OPEN,
    (_S.OPEN, _E.SEND_PACKET): _S.OPEN,
    (_S.OPEN, _E.LINK_SHUTDOWN): _S.CLOSED,
    (_S.OPEN, _E.RECEIVE_EOF): _S.CLOSED,
}

HANDSHAKE_STATES = frozenset(
    {
        _S.AWAIT_LISTENER_VERSION,
        _S.AWAIT_REPLY,
        _S.AWAIT_CONNECTOR_VERSION,
        _S.AWAIT_REQUEST,
        _S.AWAIT_DECISION,
    }
)
TERMINAL_STATES = frozenset({_S.CLOSED, _S.ERROR})


# ---- how one of our channels writes -------------------------------------------
#
# A channel of ours is LIVE nearly always: a message, commit, rollback or
# close is written the moment it is allowed (the fast path of every send).
# A connection that resumes the link puts every channel in HOLDING: we do
# not know yet where the peer's copy ends, so nothing is written. The
# peer's received (or consumed) acknowledgement, or its resume packet, says
# where (RESEND_FROM): the channel is CATCHING_UP. Then everything unsent
# (the resend, up to a whole window of 65,536 messages, and whatever was
# sent on the channel meanwhile, in order) is written only when the I/O
# layer's writer pulls it (``Connection.queue_resend``), about as many
# bytes at a time as the transport takes, never in one step: encoding a
# window of messages at once took a quarter of a second, during which no
# other connection ran. When a pull writes the channel's last unsent
# message (and what waited for it), the channel is LIVE again (CAUGHT_UP).
# A drop in between starts over from HOLDING on the next connection.


class ChannelPhase(StateEnum):
    LIVE = "live"  # written as soon as allowed
    HOLDING = "holding"  # resumed: waiting to learn where the peer's copy ends
    CATCHING_UP = "catching up"  # resending: written as the writer pulls


class ChannelEvent(StateEnum):
    BEGIN_RESUME = "begin resuming"
    RESEND_FROM = "learn where to resend from"
    CAUGHT_UP = "finish resending"


_P, _C = ChannelPhase, ChannelEvent
CHANNEL_TRANSITIONS: dict[tuple[ChannelPhase, ChannelEvent], ChannelPhase] = {
    (_P.LIVE, _C.BEGIN_RESUME): _P.HOLDING,
    (_P.HOLDING, _C.BEGIN_RESUME): _P.HOLDING,  # dropped again before the peer said where
    (_P.CATCHING_UP, _C.BEGIN_RESUME): _P.HOLDING,  # dropped in the middle of a resend
    (_P.HOLDING, _C.RESEND_FROM): _P.CATCHING_UP,
    (_P.CATCHING_UP, _C.CAUGHT_UP): _P.LIVE,
}
