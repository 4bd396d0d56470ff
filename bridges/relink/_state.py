"""The Relink connection state machine, as a table.

Theory of operation
-------------------
One connection carries one link at a time. The handshake is half-duplex and
differs by role, so each role has its own handshake states; after it both
roles are alike (``OPEN``). Per-channel state is not here: it belongs to the
link (``_link``), which outlives connections; this table is only about the
connection.

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

__all__ = ["ConnectionState", "ConnectionEvent", "CONNECTION_TRANSITIONS", "HANDSHAKE_STATES", "TERMINAL_STATES"]


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
