"""EMP (Extensible Messaging Protocol) for rstreams: the sans-I/O layer.

A codec (:func:`encode`, :class:`Decoder`) and a connection state machine
(:class:`Connection`) for ``specs/emp.md``, with the request-response and
compression extensions. No I/O happens here; the trio adapter is built on
top. Decisions on the spec's ambiguities are in ``docs/bridges/emp.md``.
"""

from ._codec import DEFAULT_LIMITS, Decoder, EmpLimits, Framing, decode, encode
from ._connection import SUPPORTED_VERSIONS, Connection
from ._errors import (
    EmpError,
    ErrorCode,
    ExtensionErrorCode,
    LocalProtocolError,
    RemoteProtocolError,
    UnsupportedVersionError,
)
from ._events import (
    MAX_REQUEST_ID,
    PROTOCOL_VERSION,
    Bye,
    Compression,
    CompressionScheme,
    ConnectionClosed,
    Data,
    Error,
    Event,
    Extension,
    ExtensionId,
    Hello,
    Message,
    MessageType,
    Ping,
    Pong,
    RequestResponse,
    UnknownExtension,
)
from ._state import ConnectionState

__all__ = [
    # messages and events
    "PROTOCOL_VERSION",
    "MAX_REQUEST_ID",
    "MessageType",
    "ExtensionId",
    "CompressionScheme",
    "RequestResponse",
    "Compression",
    "UnknownExtension",
    "Extension",
    "Hello",
    "Bye",
    "Ping",
    "Pong",
    "Error",
    "Data",
    "Message",
    "ConnectionClosed",
    "Event",
    # codec
    "Framing",
    "EmpLimits",
    "DEFAULT_LIMITS",
    "encode",
    "decode",
    "Decoder",
    # connection
    "Connection",
    "ConnectionState",
    "SUPPORTED_VERSIONS",
    # errors
    "ErrorCode",
    "ExtensionErrorCode",
    "EmpError",
    "LocalProtocolError",
    "RemoteProtocolError",
    "UnsupportedVersionError",
]
