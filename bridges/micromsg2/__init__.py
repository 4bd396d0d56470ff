"""MicroMsg2 for rstreams.

Sans-I/O: frames and handshakes as values (``_frames``), a bounded codec
(:func:`encode_frame`, :func:`encode_handshake`, :class:`Decoder`),
properties and filters (``_properties``, ``_filters``), the handshake
negotiation (``_handshake``), the ack windows (``_windows``) and the
connection state machine (:class:`Connection`) for ``specs/micromsg2.md``
with the ``ack``, ``batch-ack``, ``json``, ``dotnet`` and ``pubsub``
extensions. No trio, no sockets, no logging.

On trio, on the bridge kit: :class:`MicroMsg2Connection` and its
:class:`MessageStream` (``_trio``), :func:`open_micromsg2_connection`,
:func:`open_micromsg2_stream`, :func:`connect_micromsg2` and
:class:`MicroMsg2Server` (``_connect``), TCP and TLS.

The mapping onto rstreams: :class:`MicroMsg2AppServer`, a broker for an
app (``rstreams serve --micromsg2``, ``_broker``; topic elements carry
properties as ``_envelope`` says), and :class:`MicroMsg2Peer`
(``rstreams.connect("mm2://HOST:PORT")``, ``_client``); :data:`BRIDGE`,
its entry in the bridge registry.

Every decision on what the spec leaves open is in
``docs/bridges/micromsg2.md``.
"""

from ._codec import DEFAULT_LIMITS, MIB, Decoder, Limits, encode_frame, encode_handshake
from ._connection import SERVER_IDENTITY, SPLIT_SIZE, Connection
from ._errors import (
    FilterError,
    FilterTooLargeError,
    MicroMsg2Closed,
    MicroMsg2ConnectionLost,
    MicroMsg2Timeout,
    StreamError,
    FrameTooLargeError,
    LocalProtocolError,
    MalformedTextError,
    MessageTooLargeError,
    MicroMsg2Error,
    PeerError,
    RemoteProtocolError,
    SendRefused,
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
    SendsRefused,
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
from ._settings import DEFAULT_SETTINGS, MicroMsg2Settings, MicroMsg2Statistics
from ._trio import Command, MessageStream, MicroMsg2Connection
from ._connect import MicroMsg2Handler, MicroMsg2Server, connect_micromsg2, open_micromsg2_connection, open_micromsg2_stream
from ._envelope import ENVELOPE_MAGIC, unwrap, wrap
from ._broker import (
    BROKER_SETTINGS,
    BROKER_WINDOW,
    DEFAULT_MAX_SUBSCRIPTIONS,
    PUSH_BATCH,
    UNKNOWN_PUBLISHER,
    MicroMsg2AppServer,
    serve_broker,
)
from ._client import MicroMsg2Peer, connect_mm2_url, stream_error
from ._bridge import BRIDGE

__all__ = [
    # the trio adapter and the mapping
    "BRIDGE",
    "MicroMsg2Peer",
    "connect_mm2_url",
    "stream_error",
    "BROKER_SETTINGS",
    "BROKER_WINDOW",
    "Command",
    "DEFAULT_MAX_SUBSCRIPTIONS",
    "DEFAULT_SETTINGS",
    "ENVELOPE_MAGIC",
    "MessageStream",
    "MicroMsg2AppServer",
    "MicroMsg2Closed",
    "MicroMsg2Connection",
    "MicroMsg2ConnectionLost",
    "MicroMsg2Handler",
    "MicroMsg2Server",
    "MicroMsg2Settings",
    "MicroMsg2Statistics",
    "MicroMsg2Timeout",
    "PUSH_BATCH",
    "StreamError",
    "UNKNOWN_PUBLISHER",
    "connect_micromsg2",
    "open_micromsg2_connection",
    "open_micromsg2_stream",
    "serve_broker",
    "unwrap",
    "wrap",
    # sans-I/O
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
    "FilterTooLargeError",
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
    "SendRefused",
    "StreamFailed",
    "SendsRefused",
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
