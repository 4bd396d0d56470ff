"""The MicroMsg2 connection state machine, as a table.

Theory of operation
-------------------
The handshake is three messages: the client's hello, the server's reply,
the client's final list. The client sends its hello when the connection is
created and waits for the reply (``AWAITING_REPLY``); on the reply it sends
the final list and is ``OPEN``. The server waits for the hello
(``AWAITING_HELLO``), answers it and waits for the final list
(``AWAITING_FINAL``), then is ``OPEN``. Only ``OPEN`` carries frames.

MicroMsg2 has no goodbye: a connection ends by an ERROR frame
(``error;message=M``) followed by a disconnect, or by a plain close.
Sending or receiving that ERROR leads to ``ERROR``; end of file, or our
own close, to ``CLOSED``. In both nothing more is sent and what arrives is
ignored; the I/O layer flushes and closes. A per-stream ERROR (with a
destination) is an ordinary frame and does not change the state.

Each entry maps (state, event) to the next state. A missing pair is a
protocol error: ``RemoteProtocolError`` (which queues an ERROR frame and
moves to ``ERROR``) for a received event, ``LocalProtocolError`` (nothing
changes) for one of ours.
"""

from __future__ import annotations

import enum

from rstreams.protocol import StateEnum

__all__ = ["Role", "ConnectionState", "ConnectionEvent", "CONNECTION_TRANSITIONS"]


class Role(enum.Enum):
    """Who connected: the client sends SEND frames, the server MESSAGE frames."""

    CLIENT = "client"
    SERVER = "server"


class ConnectionState(StateEnum):
    AWAITING_HELLO = "awaiting hello"  # server: nothing received yet
    AWAITING_REPLY = "awaiting reply"  # client: hello sent
    AWAITING_FINAL = "awaiting final"  # server: reply sent
    OPEN = "open"
    CLOSED = "closed"  # end of file or closed locally
    ERROR = "error"  # a connection ERROR frame sent or received


class ConnectionEvent(StateEnum):
    RECEIVE_HANDSHAKE = "receive a handshake"
    RECEIVE_FRAME = "receive a frame"
    RECEIVE_ERROR = "receive a connection error"
    RECEIVE_EOF = "receive end of file"
    SEND_FRAME = "send a frame"
    SEND_ERROR = "send a connection error"
    CLOSE = "close"


_S, _E = ConnectionState, ConnectionEvent
_HANDSHAKING = (_S.AWAITING_HELLO, _S.AWAITING_REPLY, _S.AWAITING_FINAL)
CONNECTION_TRANSITIONS: dict[tuple[ConnectionState, ConnectionEvent], ConnectionState] = {
    (_S.AWAITING_HELLO, _E.RECEIVE_HANDSHAKE): _S.AWAITING_FINAL,
    (_S.AWAITING_FINAL, _E.RECEIVE_HANDSHAKE): _S.OPEN,
    (_S.AWAITING_REPLY, _E.RECEIVE_HANDSHAKE): _S.OPEN,
    (_S.OPEN, _E.RECEIVE_FRAME): _S.OPEN,
    (_S.OPEN, _E.SEND_FRAME): _S.OPEN,
    **{(state, _E.RECEIVE_ERROR): _S.ERROR for state in (*_HANDSHAKING, _S.OPEN)},
    **{(state, _E.SEND_ERROR): _S.ERROR for state in (*_HANDSHAKING, _S.OPEN)},
    **{(state, _E.RECEIVE_EOF): _S.CLOSED for state in (*_HANDSHAKING, _S.OPEN)},
    **{(state, _E.CLOSE): _S.CLOSED for state in (*_HANDSHAKING, _S.OPEN)},
}
