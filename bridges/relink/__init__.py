"""Relink for rstreams: the sans-I/O half (codec, handshake, connection and link state).

* packets and their codec: :func:`encode_packet`, :class:`PacketDecoder`,
  :class:`RelinkLimits` (``specs/relink.md`` section 2);
* the handshake: :class:`LinkConfig`, :class:`HandshakeRequest`,
  :class:`HandshakeReply` and their encoders (section 1);
* the connection state machine :class:`Connection` and the state that
  survives reconnection, :class:`LinkState` (with :class:`LinkRegistry` for a
  listener's links): bytes in, events out, no trio, no sockets.

And the trio side, on the bridge kit:

* :func:`open_relink_link` (connector: connects, and reconnects after a
  drop, resuming the link) and :class:`RelinkServer` / :func:`serve_relink`
  (listener: a handler per link, links kept across connections), both
  handing out a :class:`RelinkLink`: send on a channel within its window,
  receive a channel's messages (consuming them is the peer's demand),
  commit/rollback, close, shut down;
* :class:`RelinkConnection`, one TCP or TLS connection carrying a link.

Decisions on the spec's ambiguities, the mapping onto rstreams and the
command line are in ``docs/bridges/relink.md``.
"""

from ._codec import PacketDecoder, encode_packet, packet_size
from ._config import (
    DEFAULT_ACK_DELAY,
    DEFAULT_ACK_WINDOW,
    DEFAULT_HANDSHAKE_TIMEOUT,
    DEFAULT_PING_INTERVAL,
    DEFAULT_PONG_TIMEOUT,
    DEFAULT_SEND_WINDOW,
    RelinkStatistics,
)
from ._app import DEFAULT_MAX_SUBSCRIPTIONS, SHUTTING_DOWN, TOO_MANY, RelinkAppServer
from ._bridge import BRIDGE
from ._client import RelinkPeer, connect_relink_url
from ._connect import DEFAULT_ENDPOINT, open_relink_link
from ._connection import Connection
from ._errors import (
    HandshakeRejected,
    LimitExceeded,
    LinkLostError,
    LocalProtocolError,
    RelinkError,
    RemoteProtocolError,
    UnsupportedVersionError,
)
from ._events import (
    ChannelClosed,
    ChannelCloseAcknowledged,
    CommitRequested,
    Committed,
    ConnectionClosed,
    Consumed,
    Event,
    HandshakeComplete,
    LinkRefused,
    LinkRequested,
    LinkShutdown,
    MessageReceived,
    Ping,
    Pong,
    Received,
    Resumed,
    RollbackRequested,
    ShutdownReceived,
    Uncommitted,
)
from ._handshake import (
    MAX_LINK_ID,
    HandshakeReply,
    HandshakeRequest,
    LinkConfig,
    decode_reply,
    decode_request,
    decode_version,
    encode_reply,
    encode_request,
    encode_version,
)
from ._link import LinkRegistry, LinkState, Role
from ._packets import (
    DEFAULT_LIMITS,
    PROTOCOL_VERSION,
    ChannelAck,
    ChannelAckType,
    ChannelFormat,
    ChannelOp,
    ChannelOpType,
    GeneralPacket,
    GeneralType,
    MessagePacket,
    Packet,
    RelinkLimits,
    SequenceAck,
    SequenceAckType,
    SequenceOp,
    SequenceOpType,
)
from ._link_errors import RelinkClosed, RelinkConnectionLost, RelinkTimeout
from ._serve import EndpointPolicy, RelinkHandler, RelinkServer, equal_id_sizes, serve_relink
from ._settings import DEFAULT_SETTINGS, RelinkSettings
from ._state import ConnectionState
from ._trio import RelinkConnection
from ._inbound_channel import InboundChannel, InboundItem
from ._trio_link import RelinkLink

__all__ = [
    # packets and codec
    "PROTOCOL_VERSION",
    "GeneralType",
    "ChannelFormat",
    "ChannelOpType",
    "ChannelAckType",
    "SequenceOpType",
    "SequenceAckType",
    "GeneralPacket",
    "ChannelOp",
    "ChannelAck",
    "SequenceOp",
    "SequenceAck",
    "MessagePacket",
    "Packet",
    "RelinkLimits",
    "DEFAULT_LIMITS",
    "encode_packet",
    "packet_size",
    "PacketDecoder",
    # handshake
    "MAX_LINK_ID",
    "LinkConfig",
    "HandshakeRequest",
    "HandshakeReply",
    "encode_version",
    "decode_version",
    "encode_request",
    "decode_request",
    "encode_reply",
    "decode_reply",
    # connection and link
    "Role",
    "Connection",
    "ConnectionState",
    "RelinkStatistics",
    "LinkState",
    "LinkRegistry",
    "DEFAULT_SEND_WINDOW",
    "DEFAULT_ACK_WINDOW",
    "DEFAULT_ACK_DELAY",
    "DEFAULT_PING_INTERVAL",
    "DEFAULT_PONG_TIMEOUT",
    "DEFAULT_HANDSHAKE_TIMEOUT",
    # events
    "LinkRequested",
    "HandshakeComplete",
    "LinkRefused",
    "MessageReceived",
    "Received",
    "Consumed",
    "ChannelClosed",
    "ChannelCloseAcknowledged",
    "CommitRequested",
    "RollbackRequested",
    "Committed",
    "Uncommitted",
    "Ping",
    "Pong",
    "Resumed",
    "ShutdownReceived",
    "LinkShutdown",
    "ConnectionClosed",
    "Event",
    # errors
    "RelinkError",
    "LocalProtocolError",
    "RemoteProtocolError",
    "UnsupportedVersionError",
    "HandshakeRejected",
    "LimitExceeded",
    "LinkLostError",
    # the trio side
    "RelinkSettings",
    "DEFAULT_SETTINGS",
    "RelinkConnection",
    "RelinkLink",
    "InboundChannel",
    "InboundItem",
    "open_relink_link",
    "DEFAULT_ENDPOINT",
    "RelinkServer",
    "RelinkHandler",
    "EndpointPolicy",
    "equal_id_sizes",
    "serve_relink",
    "RelinkConnectionLost",
    "RelinkTimeout",
    "RelinkClosed",
    # the mapping onto rstreams
    "RelinkAppServer",
    "SHUTTING_DOWN",
    "TOO_MANY",
    "DEFAULT_MAX_SUBSCRIPTIONS",
    "RelinkPeer",
    "connect_relink_url",
    "BRIDGE",
]
