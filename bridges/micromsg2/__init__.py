"""MicroMsg2 for rstreams: the sans-I/O half.

Frames and handshakes as values (``_frames``), a bounded codec
(:func:`encode_frame`, :func:`encode_handshake`, :class:`Decoder`),
properties and filters (``_properties``, ``_filters``), the handshake
negotiation (``_handshake``), the ack windows (``_windows``) and the
connection state machine (:class:`Connection`) for ``specs/micromsg2.md``
with the ``ack``, ``batch-ack``, ``json``, ``dotnet`` and ``pubsub``
extensions. No trio, no sockets, no logging.

Every decision on what the spec leaves open is in
``docs/bridges/micromsg2.md``.
"""

from ._codec import DEFAULT_LIMITS, MIB, Decoder, Limits, encode_frame, encode_handshake
from ._connection import SERVER_IDENTITY, SPLIT_SIZE, Connection
from ._errors import (
    FilterError,
    FrameTooLargeError,
    LocalProtocolError,
    MalformedTextError,
    MessageTooLargeError,
    MicroMsg2Error,
    PeerError,
    RemoteProtocolError,
    TooManyPendingMessagesError,
    UnsupportedExtensionError,
    UnsupportedVersionError,
    WindowExceededError,
)
from ._events import (
    Acknowledged,
    Completed,
    ConnectionClosed,
    ConnectionFailed,
    Event,
    HandshakeCompleted,
    MessageReceived,
    StreamFailed,
    Subscribe,
    Unsubscribe,
)
from ._extensions import (
    ACK,
    BATCH_ACK,
    DEFAULT_BATCH_SIZE,
    DOTNET,
    JSON,
    KNOWN_EXTENSIONS,
    MAX_WINDOW,
    PUBSUB,
    ExtensionSpec,
    format_extensions,
    parse_extensions,
)
from ._filters import Condition, Filter, Operator, parse_filter
from ._frames import (
    MAX_SEQUENCE,
    PROTOCOL_VERSION,
    CommandFrame,
    ErrorFrame,
    ExtensionFrame,
    Frame,
    FrameFlags,
    Handshake,
    MessageFrame,
)
from ._handshake import HandshakeOptions
from ._payloads import NamedArguments
from ._properties import (
    FilterValue,
    Properties,
    UnixTime,
    decode_properties,
    decode_value,
    encode_properties,
    encode_value,
    make_properties,
)
from ._state import ConnectionState, Role
from ._text import url_decode, url_encode
from ._windows import next_sequence

__all__ = [
    "ACK",
    "BATCH_ACK",
    "DEFAULT_BATCH_SIZE",
    "DEFAULT_LIMITS",
    "DOTNET",
    "JSON",
    "KNOWN_EXTENSIONS",
    "MAX_SEQUENCE",
    "MAX_WINDOW",
    "MIB",
    "PROTOCOL_VERSION",
    "PUBSUB",
    "SERVER_IDENTITY",
    "SPLIT_SIZE",
    "Acknowledged",
    "CommandFrame",
    "Completed",
    "Condition",
    "Connection",
    "ConnectionClosed",
    "ConnectionFailed",
    "ConnectionState",
    "Decoder",
    "ErrorFrame",
    "Event",
    "ExtensionFrame",
    "ExtensionSpec",
    "Filter",
    "FilterError",
    "FilterValue",
    "Frame",
    "FrameFlags",
    "FrameTooLargeError",
    "Handshake",
    "HandshakeCompleted",
    "HandshakeOptions",
    "Limits",
    "LocalProtocolError",
    "MalformedTextError",
    "MessageFrame",
    "MessageReceived",
    "MessageTooLargeError",
    "MicroMsg2Error",
    "NamedArguments",
    "Operator",
    "PeerError",
    "Properties",
    "RemoteProtocolError",
    "Role",
    "StreamFailed",
    "Subscribe",
    "TooManyPendingMessagesError",
    "UnixTime",
    "Unsubscribe",
    "UnsupportedExtensionError",
    "UnsupportedVersionError",
    "WindowExceededError",
    "decode_properties",
    "decode_value",
    "encode_frame",
    "encode_handshake",
    "encode_properties",
    "encode_value",
    "format_extensions",
    "make_properties",
    "next_sequence",
    "parse_extensions",
    "parse_filter",
    "url_decode",
    "url_encode",
]
