"""The Epoxy connection state machine, as a table.

Theory of operation
-------------------
Epoxy opens with a two-frame handshake. A client queues its Config frame
when it is created and waits for the server's (``CLIENT_AWAITING_CONFIG``).
A server waits for the client's (``SERVER_AWAITING_CONFIG``), then lets its
application decide (``SERVER_DECIDING``): accepting sends the server's
Config frame, rejecting sends an Error frame. After the handshake both
sides are ``OPEN`` and symmetric: either may send requests, responses and
events. Nothing but a Config frame (or an Error frame) may cross the wire
before the handshake is over, in either direction.

Closing is per direction, as TCP's half-close: "when one endpoint has
finished sending all its messages, it gracefully closes its side", then
waits for the other to do the same. Closing our side (``close()``) leads to
``LOCAL_CLOSED``, where we still receive; the peer's end of file leads to
``REMOTE_CLOSED``, where we may still send (the responses the peer awaits);
both lead to ``CLOSED``. Giving up during the handshake closes at once.

An Error frame, sent or received, is final: ``ERROR``, where nothing more
is sent and what arrives is ignored. The I/O layer's only job left in
``CLOSED`` and ``ERROR`` is to flush and close.

Each entry maps (state, input) to the next state. A missing pair is a
protocol error: a ``RemoteProtocolError`` (the connection queues a
``PROTOCOL_VIOLATED`` Error frame and moves to ``ERROR``) when the input
came from the peer, a ``LocalProtocolError`` (nothing changes) when it came
from our application. A violation detected in what the peer sent moves any
state that still listens to ``ERROR`` without a table lookup.
"""

from __future__ import annotations

import enum

from rstreams.protocol import StateEnum

__all__ = ["Role", "ConnectionState", "StateInput", "TRANSITIONS", "LISTENING_STATES", "HANDSHAKE_STATES"]


class Role(enum.Enum):
    """Which end of the transport connection this is."""

    CLIENT = "client"  # connected; sends the first Config frame; odd conversation ids
    SERVER = "server"  # accepted; answers the client's Config frame; even conversation ids


class ConnectionState(StateEnum):
    CLIENT_AWAITING_CONFIG = "client awaiting the server's config"
    SERVER_AWAITING_CONFIG = "server awaiting the client's config"
    SERVER_DECIDING = "server deciding to accept or reject"
    OPEN = "open"
    LOCAL_CLOSED = "our side closed"  # we still receive
    REMOTE_CLOSED = "peer's side closed"  # we may still send
    CLOSED = "closed"
    ERROR = "error"  # an Error frame was sent or received


class StateInput(StateEnum):
    RECEIVE_CONFIG = "receive a Config frame"
    RECEIVE_MESSAGE = "receive a Message frame"
    RECEIVE_PROTOCOL_ERROR = "receive an Error frame"
    RECEIVE_EOF = "receive end of file"
    SEND_ACCEPT = "accept the connection"
    SEND_MESSAGE = "send a message"
    SEND_PROTOCOL_ERROR = "send an Error frame"
    SEND_CLOSE = "close our side"


_S, _I = ConnectionState, StateInput
TRANSITIONS: dict[tuple[ConnectionState, StateInput], ConnectionState] = {
    (_S.CLIENT_AWAITING_CONFIG, _I.RECEIVE_CONFIG): _S.OPEN,
    (_S.CLIENT_AWAITING_CONFIG, _I.RECEIVE_PROTOCOL_ERROR): _S.ERROR,
    (_S.CLIENT_AWAITING_CONFIG, _I.RECEIVE_EOF): _S.CLOSED,
    (_S.CLIENT_AWAITING_CONFIG, _I.SEND_PROTOCOL_ERROR): _S.ERROR,
    (_S.CLIENT_AWAITING_CONFIG, _I.SEND_CLOSE): _S.CLOSED,
    (_S.SERVER_AWAITING_CONFIG, _I.RECEIVE_CONFIG): _S.SERVER_DECIDING,
    (_S.SERVER_AWAITING_CONFIG, _I.RECEIVE_PROTOCOL_ERROR): _S.ERROR,
    (_S.SERVER_AWAITING_CONFIG, _I.RECEIVE_EOF): _S.CLOSED,
    (_S.SERVER_AWAITING_CONFIG, _I.SEND_PROTOCOL_ERROR): _S.ERROR,
    (_S.SERVER_AWAITING_CONFIG, _I.SEND_CLOSE): _S.CLOSED,
    (_S.SERVER_DECIDING, _I.SEND_ACCEPT): _S.OPEN,
    (_S.SERVER_DECIDING, _I.SEND_PROTOCOL_ERROR): _S.ERROR,
    (_S.SERVER_DECIDING, _I.SEND_CLOSE): _S.CLOSED,
    (_S.SERVER_DECIDING, _I.RECEIVE_PROTOCOL_ERROR): _S.ERROR,
    (_S.SERVER_DECIDING, _I.RECEIVE_EOF): _S.CLOSED,
    (_S.OPEN, _I.RECEIVE_MESSAGE): _S.OPEN,
    (_S.OPEN, _I.RECEIVE_PROTOCOL_ERROR): _S.ERROR,
    (_S.OPEN, _I.RECEIVE_EOF): _S.REMOTE_CLOSED,
    (_S.OPEN, _I.SEND_MESSAGE): _S.OPEN,
    (_S.OPEN, _I.SEND_PROTOCOL_ERROR): _S.ERROR,
    (_S.OPEN, _I.SEND_CLOSE): _S.LOCAL_CLOSED,
    (_S.LOCAL_CLOSED, _I.RECEIVE_MESSAGE): _S.LOCAL_CLOSED,
    (_S.LOCAL_CLOSED, _I.RECEIVE_PROTOCOL_ERROR): _S.ERROR,
    (_S.LOCAL_CLOSED, _I.RECEIVE_EOF): _S.CLOSED,
    (_S.REMOTE_CLOSED, _I.SEND_MESSAGE): _S.REMOTE_CLOSED,
    (_S.REMOTE_CLOSED, _I.SEND_PROTOCOL_ERROR): _S.ERROR,
    (_S.REMOTE_CLOSED, _I.SEND_CLOSE): _S.CLOSED,
}

#: States in which received bytes are parsed (else ignored).
LISTENING_STATES = frozenset(
    {_S.CLIENT_AWAITING_CONFIG, _S.SERVER_AWAITING_CONFIG, _S.SERVER_DECIDING, _S.OPEN, _S.LOCAL_CLOSED}
)
#: States of the handshake (a handshake timeout applies).
HANDSHAKE_STATES = frozenset({_S.CLIENT_AWAITING_CONFIG, _S.SERVER_AWAITING_CONFIG, _S.SERVER_DECIDING})
