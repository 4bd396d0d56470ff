"""The EMP connection state machine, as a table.

Theory of operation
-------------------
EMP has one conversation per connection and no streams, so one machine is
enough. Our ``hello`` is queued when the connection is created; the
connection is ``HANDSHAKING`` until the peer's ``hello`` arrives with a
version we speak, then ``OPEN``. The spec forbids starting any exchange
(ping-pong, data) during the handshake, in both directions.

Termination is one-sided in EMP: whoever sends ``bye`` or ``error`` closes
the connection right after, and whoever receives one must close it too.
There is no closing handshake, so there is no half-closed state: sending or
receiving ``bye``, or end of file, leads to ``CLOSED``; sending or receiving
``error`` leads to ``ERROR``. In both, nothing more is sent and what arrives
is ignored: the I/O layer's only job left is to flush and close.

Each table entry maps (state, event) to the next state. A pair that is
missing is a protocol error: a ``RemoteProtocolError`` (which queues an
EMP ``error`` message and moves to ``ERROR``) when the event came from the
peer, a ``LocalProtocolError`` (nothing changes) when it came from our own
application. A remote violation moves the machine to ``ERROR`` from
``HANDSHAKING`` or ``OPEN`` without a table lookup: it is always allowed.
"""

from __future__ import annotations

from rstreams.protocol import StateEnum

__all__ = ["ConnectionState", "ConnectionEvent", "CONNECTION_TRANSITIONS"]


class ConnectionState(StateEnum):
    HANDSHAKING = "handshaking"  # our hello is queued; the peer's has not arrived
    OPEN = "open"
    CLOSED = "closed"  # bye sent or received, or end of file: a normal end
    ERROR = "error"  # error sent or received, or a protocol violation


class ConnectionEvent(StateEnum):
    RECEIVE_HELLO = "receive hello"
    RECEIVE_BYE = "receive bye"
    RECEIVE_ERROR = "receive error"
    RECEIVE_EXCHANGE = "receive ping, pong or data"
    RECEIVE_EOF = "receive end of file"
    SEND_EXCHANGE = "send ping, pong or data"
    SEND_BYE = "send bye"
    SEND_ERROR = "send error"


_S, _E = ConnectionState, ConnectionEvent
CONNECTION_TRANSITIONS: dict[tuple[ConnectionState, ConnectionEvent], ConnectionState] = {
    (_S.HANDSHAKING, _E.RECEIVE_HELLO): _S.OPEN,
    (_S.HANDSHAKING, _E.RECEIVE_BYE): _S.CLOSED,
    (_S.HANDSHAKING, _E.RECEIVE_ERROR): _S.ERROR,
    (_S.HANDSHAKING, _E.RECEIVE_EOF): _S.CLOSED,
    (_S.HANDSHAKING, _E.SEND_BYE): _S.CLOSED,
    (_S.HANDSHAKING, _E.SEND_ERROR): _S.ERROR,
    (_S.OPEN, _E.RECEIVE_EXCHANGE): _S.OPEN,
    (_S.OPEN, _E.RECEIVE_BYE): _S.CLOSED,
    (_S.OPEN, _E.RECEIVE_ERROR): _S.ERROR,
    (_S.OPEN, _E.RECEIVE_EOF): _S.CLOSED,
    (_S.OPEN, _E.SEND_EXCHANGE): _S.OPEN,
    (_S.OPEN, _E.SEND_BYE): _S.CLOSED,
    (_S.OPEN, _E.SEND_ERROR): _S.ERROR,
}
