"""Bond Epoxy for rstreams: the sans-I/O half.

* ``bridges.epoxy.bond``: Bond's Compact Binary v1/v2 and Fast Binary v1
  encodings, usable on their own;
* frames and framelets (:class:`Frame`, :class:`FrameDecoder`), the Epoxy
  structs (:class:`EpoxyHeaders`, :class:`ProtocolError`, ``bond.comm``'s
  :class:`Error`), events and the connection state machine
  (:class:`Connection`) for ``specs/bond-epoxy.md``: no trio, no sockets,
  no logging.

Decisions on the spec's ambiguities are in ``docs/bridges/epoxy.md``.
"""

from ._connection import Connection
from ._errors import ConversationIdsExhaustedError, EpoxyError, LocalProtocolError, RemoteProtocolError
from ._events import (
    MAX_CONVERSATION_ID,
    ConfigReceived,
    ConnectionClosed,
    EpoxyEvent,
    Event,
    ProtocolErrorReceived,
    Request,
    Response,
)
from ._frames import (
    DEFAULT_LIMITS,
    EpoxyLimits,
    Frame,
    FrameDecoder,
    FrameKind,
    Framelet,
    FrameletType,
    config_frame,
    error_frame,
    message_frame,
)
from ._state import ConnectionState, Role
from ._structs import (
    EpoxyConfig,
    EpoxyHeaders,
    EpoxyMessageType,
    Error,
    ErrorCode,
    ProtocolError,
    ProtocolErrorCode,
)

__all__ = [
    # structs
    "EpoxyConfig",
    "EpoxyHeaders",
    "EpoxyMessageType",
    "ProtocolError",
    "ProtocolErrorCode",
    "Error",
    "ErrorCode",
    # frames
    "FrameletType",
    "FrameKind",
    "Framelet",
    "Frame",
    "FrameDecoder",
    "EpoxyLimits",
    "DEFAULT_LIMITS",
    "config_frame",
    "message_frame",
    "error_frame",
    # events
    "MAX_CONVERSATION_ID",
    "ConfigReceived",
    "Request",
    "Response",
    "Event",
    "ProtocolErrorReceived",
    "ConnectionClosed",
    "EpoxyEvent",
    # connection
    "Connection",
    "ConnectionState",
    "Role",
    # errors
    "EpoxyError",
    "LocalProtocolError",
    "RemoteProtocolError",
    "ConversationIdsExhaustedError",
]
