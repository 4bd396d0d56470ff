"""The rstreams wire protocol, sans-I/O.

Bytes in, events out; calls in, bytes out. Nothing in this package imports
trio, socket or logging (a test enforces it), so the same machine serves the
trio runtime, tests that run without sockets, and any other I/O layer.
"""

from ._batch import ElementBatch
from ._codec import MessageDecoder, encode, message_from_wire
from ._connection import DEFAULT_WRITE_SIZE, Connection
from ._demand import AdaptiveDemand, Demand, DemandWindow
from ._errors import HandshakeError, LocalProtocolError, ProtocolError, RemoteProtocolError, RStreamsError
from ._limits import DEFAULT_CONNECTION_MEMORY, DEFAULT_LIMITS, MESSAGE_HEADER_BOUND, ProtocolLimits
from ._messages import (
    MAX_ID,
    PROTOCOL_VERSION,
    UNBOUNDED,
    Cancel,
    Elements,
    Event,
    Extension,
    MAX_TOKEN_SIZE,
    Goodbye,
    Hello,
    InvalidRequest,
    Message,
    MessageType,
    OnComplete,
    OnError,
    OnNext,
    OnNextLastPart,
    OnNextPacked,
    OnNextPart,
    Ping,
    Pong,
    Request,
    Subscribe,
    Subscribed,
    check_publisher_name,
    check_token,
    prechecked,
)
from ._outbound import EMPTY_ELEMENT_BYTES
from ._state import ConnectionState, PublicationState, StateEnum, SubscriptionState
from ._timers import IdleTimer, KeepaliveAction, KeepaliveTimer

__all__ = [
    "Cancel",
    "Connection",
    "ConnectionState",
    "DEFAULT_CONNECTION_MEMORY",
    "MESSAGE_HEADER_BOUND",
    "DEFAULT_LIMITS",
    "DEFAULT_WRITE_SIZE",
    "EMPTY_ELEMENT_BYTES",
    "Demand",
    "AdaptiveDemand",
    "DemandWindow",
    "ElementBatch",
    "Elements",
    "Event",
    "Extension",
    "MAX_TOKEN_SIZE",
    "Goodbye",
    "HandshakeError",
    "Hello",
    "IdleTimer",
    "InvalidRequest",
    "KeepaliveAction",
    "KeepaliveTimer",
    "LocalProtocolError",
    "MAX_ID",
    "Message",
    "MessageDecoder",
    "MessageType",
    "OnComplete",
    "OnError",
    "OnNext",
    "OnNextLastPart",
    "OnNextPacked",
    "OnNextPart",
    "PROTOCOL_VERSION",
    "Ping",
    "Pong",
    "ProtocolError",
    "ProtocolLimits",
    "PublicationState",
    "RStreamsError",
    "RemoteProtocolError",
    "Request",
    "Subscribe",
    "Subscribed",
    "StateEnum",
    "SubscriptionState",
    "UNBOUNDED",
    "encode",
    "message_from_wire",
    "prechecked",
    "check_publisher_name",
    "check_token",
]
