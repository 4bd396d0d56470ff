"""The state machines of a connection and of its streams, as tables.

Theory of operation
-------------------
One connection carries two independent sets of streams:

* **subscriptions**: streams *we* opened with subscribe, to the peer's
  publishers. We chose their Ids. Messages about them travel peer -> us as
  subscribed / onNext* / onComplete / onError, and us -> peer as request /
  cancel.
* **publications**: streams the *peer* opened with subscribe, served by our
  publishers. The peer chose their Ids. The directions are mirrored.

The message code says which set an Id belongs to, so both sides may use Id 1
at the same time (wire-v0 rule 2).

Each table maps (state, event) to the next state. A pair that is missing is a
protocol error: a ``RemoteProtocolError`` when the event came from the peer,
a ``LocalProtocolError`` when it came from our own application. A stream that
reaches ``DONE`` is forgotten; its Id is remembered for a while only so that
messages that were already in flight are recognised as late, not unknown.

The connection itself moves through the handshake and the goodbye exchange.
Our hello is queued when the connection is created; the peer's hello must be
its first message (a goodbye is also tolerated first, from a peer that rejects
us). Either side may say goodbye first; the connection is CLOSED once both
have. A protocol error moves it to ERROR from anywhere, and nothing more is
accepted or sent but the goodbye that explains the error.

The tables are the only place that says which move is allowed and where it
leads, for every path through the machine: the general handlers, the
one-step paths that take the usual subscribe / subscribed / onComplete, the
scheduler writing a terminal signal, goodbye and protocol errors ending
every stream. A one-step path looks its move up like any other and leaves
the message to the general path when the table says anything but the usual
answer, so a rule changed here changes every path. The per-element hot path
cannot afford a lookup per element: it reads a flag that each subscription
sets from the table (:func:`takes_elements`) whenever its state changes.
"""

from __future__ import annotations

import enum

__all__ = [
    "StateEnum",
    "ConnectionState",
    "ConnectionEvent",
    "SubscriptionState",
    "SubscriptionEvent",
    "PublicationState",
    "PublicationEvent",
    "CONNECTION_TRANSITIONS",
    "SUBSCRIPTION_TRANSITIONS",
    "PUBLICATION_TRANSITIONS",
    "takes_elements",
]


class StateEnum(enum.Enum):
    """The base of the states and events that key a transition table.

    Members are singletons compared by identity, so hashing by identity is
    consistent, and it keeps Enum's Python-level ``__hash__`` (a hash of the
    name, two calls for a ``(state, event)`` key) off every table lookup:
    every message of every protocol built on a table goes through one.
    """

    __hash__ = object.__hash__


class ConnectionState(StateEnum):
    HANDSHAKING = "handshaking"  # the peer's hello has not arrived yet
    OPEN = "open"
    GOODBYE_SENT = "goodbye sent"  # waiting for the peer's goodbye
    GOODBYE_RECEIVED = "goodbye received"  # we owe the peer our goodbye
    CLOSED = "closed"  # both goodbyes exchanged
    ERROR = "error"  # a protocol error; only our goodbye goes out


class ConnectionEvent(StateEnum):
    RECEIVE_HELLO = "receive hello"
    RECEIVE_GOODBYE = "receive goodbye"
    SEND_GOODBYE = "send goodbye"
    PROTOCOL_ERROR = "protocol error"  # the peer broke the protocol


_C, _CE = ConnectionState, ConnectionEvent
CONNECTION_TRANSITIONS: dict[tuple[ConnectionState, ConnectionEvent], ConnectionState] = {
    (_C.HANDSHAKING, _CE.RECEIVE_HELLO): _C.OPEN,
    (_C.HANDSHAKING, _CE.RECEIVE_GOODBYE): _C.GOODBYE_RECEIVED,
    (_C.HANDSHAKING, _CE.SEND_GOODBYE): _C.GOODBYE_SENT,
    (_C.OPEN, _CE.RECEIVE_GOODBYE): _C.GOODBYE_RECEIVED,
    (_C.OPEN, _CE.SEND_GOODBYE): _C.GOODBYE_SENT,
    (_C.GOODBYE_SENT, _CE.RECEIVE_GOODBYE): _C.CLOSED,
    # A hello after our goodbye is still the peer's handshake: accept it.
    (_C.GOODBYE_SENT, _CE.RECEIVE_HELLO): _C.GOODBYE_SENT,
    (_C.GOODBYE_RECEIVED, _CE.SEND_GOODBYE): _C.CLOSED,
    (_C.ERROR, _CE.SEND_GOODBYE): _C.ERROR,
    # A protocol error ends the connection from wherever the peer is still
    # heard (after its goodbye, or after an error, nothing more is parsed).
    (_C.HANDSHAKING, _CE.PROTOCOL_ERROR): _C.ERROR,
    (_C.OPEN, _CE.PROTOCOL_ERROR): _C.ERROR,
    (_C.GOODBYE_SENT, _CE.PROTOCOL_ERROR): _C.ERROR,
}


class SubscriptionState(StateEnum):
    SUBSCRIBING = "subscribing"  # subscribe sent, no answer yet
    ACTIVE = "active"  # subscribed received
    CANCELLED = "cancelled"  # we sent cancel; late messages are dropped
    DONE = "done"


class SubscriptionEvent(StateEnum):
    RECEIVE_SUBSCRIBED = "receive subscribed"
    RECEIVE_ELEMENT = "receive element"
    RECEIVE_COMPLETE = "receive onComplete"
    RECEIVE_ERROR = "receive onError"
    SEND_CANCEL = "send cancel"
    CONNECTION_ENDED = "connection ended"  # goodbye either way, or a protocol error


_S, _SE = SubscriptionState, SubscriptionEvent
SUBSCRIPTION_TRANSITIONS: dict[tuple[SubscriptionState, SubscriptionEvent], SubscriptionState] = {
    (_S.SUBSCRIBING, _SE.RECEIVE_SUBSCRIBED): _S.ACTIVE,
    (_S.SUBSCRIBING, _SE.RECEIVE_ERROR): _S.DONE,  # e.g. "no such publisher"
    (_S.SUBSCRIBING, _SE.SEND_CANCEL): _S.CANCELLED,
    (_S.ACTIVE, _SE.RECEIVE_ELEMENT): _S.ACTIVE,
    (_S.ACTIVE, _SE.RECEIVE_COMPLETE): _S.DONE,
    (_S.ACTIVE, _SE.RECEIVE_ERROR): _S.DONE,
    (_S.ACTIVE, _SE.SEND_CANCEL): _S.CANCELLED,
    # Rule 6 / RS 2.8: whatever was in flight when we cancelled is dropped.
    (_S.CANCELLED, _SE.RECEIVE_SUBSCRIBED): _S.CANCELLED,
    (_S.CANCELLED, _SE.RECEIVE_ELEMENT): _S.CANCELLED,
    (_S.CANCELLED, _SE.RECEIVE_COMPLETE): _S.DONE,
    (_S.CANCELLED, _SE.RECEIVE_ERROR): _S.DONE,
    (_S.CANCELLED, _SE.SEND_CANCEL): _S.CANCELLED,
    # Goodbye ends every stream (rule 10).
    (_S.SUBSCRIBING, _SE.CONNECTION_ENDED): _S.DONE,
    (_S.ACTIVE, _SE.CONNECTION_ENDED): _S.DONE,
    (_S.CANCELLED, _SE.CONNECTION_ENDED): _S.DONE,
}


class PublicationState(StateEnum):
    REQUESTED = "requested"  # subscribe received; the application decides
    ACTIVE = "active"  # subscribed sent; elements may be queued
    TERMINATING = "terminating"  # onComplete/onError queued behind elements
    DONE = "done"


class PublicationEvent(StateEnum):
    SEND_SUBSCRIBED = "send subscribed"
    SEND_ELEMENTS = "send elements"
    SEND_COMPLETE = "send onComplete"
    SEND_ERROR = "send onError"
    TERMINAL_WRITTEN = "terminal written"
    RECEIVE_REQUEST = "receive request"
    RECEIVE_CANCEL = "receive cancel"
    RECEIVE_INVALID_REQUEST = "receive request(n <= 0)"
    CONNECTION_ENDED = "connection ended"  # goodbye either way, or a protocol error


_P, _PE = PublicationState, PublicationEvent
PUBLICATION_TRANSITIONS: dict[tuple[PublicationState, PublicationEvent], PublicationState] = {
    (_P.REQUESTED, _PE.SEND_SUBSCRIBED): _P.ACTIVE,
    # A refusal (onError before subscribed) goes out at once: nothing is queued.
    (_P.REQUESTED, _PE.SEND_ERROR): _P.DONE,
    (_P.REQUESTED, _PE.RECEIVE_REQUEST): _P.REQUESTED,
    (_P.REQUESTED, _PE.RECEIVE_CANCEL): _P.DONE,
    (_P.ACTIVE, _PE.SEND_ELEMENTS): _P.ACTIVE,
    (_P.ACTIVE, _PE.SEND_COMPLETE): _P.TERMINATING,
    (_P.ACTIVE, _PE.SEND_ERROR): _P.TERMINATING,
    (_P.ACTIVE, _PE.RECEIVE_REQUEST): _P.ACTIVE,
    (_P.ACTIVE, _PE.RECEIVE_CANCEL): _P.DONE,
    (_P.TERMINATING, _PE.TERMINAL_WRITTEN): _P.DONE,
    (_P.TERMINATING, _PE.RECEIVE_REQUEST): _P.TERMINATING,
    (_P.TERMINATING, _PE.RECEIVE_CANCEL): _P.DONE,
    # Rule 5 / RS 3.9: request(n <= 0) fails the stream with onError, unless
    # its terminal signal is already queued (then it stays as it is).
    (_P.REQUESTED, _PE.RECEIVE_INVALID_REQUEST): _P.DONE,
    (_P.ACTIVE, _PE.RECEIVE_INVALID_REQUEST): _P.DONE,
    (_P.TERMINATING, _PE.RECEIVE_INVALID_REQUEST): _P.TERMINATING,
    # Goodbye ends every stream (rule 10).
    (_P.REQUESTED, _PE.CONNECTION_ENDED): _P.DONE,
    (_P.ACTIVE, _PE.CONNECTION_ENDED): _P.DONE,
    (_P.TERMINATING, _PE.CONNECTION_ENDED): _P.DONE,
}


def takes_elements(state: SubscriptionState) -> bool:
    """Whether a subscription in ``state`` hands a received element to the
    application: the table moves it to ACTIVE on an element (a cancelled
    stream also accepts one, but drops it)."""
    return SUBSCRIPTION_TRANSITIONS.get((state, SubscriptionEvent.RECEIVE_ELEMENT)) is SubscriptionState.ACTIVE
