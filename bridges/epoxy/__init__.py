"""Bond Epoxy for rstreams.

Layers, each usable alone:

* ``bridges.epoxy.bond``: Bond's Compact Binary v1/v2 and Fast Binary v1
  encodings (no trio, no rstreams);
* sans-I/O: frames and framelets (:class:`Frame`, :class:`FrameDecoder`),
  the Epoxy structs (:class:`EpoxyHeaders`, :class:`ProtocolError`,
  ``bond.comm``'s :class:`Error`), events and the connection state machine
  (:class:`Connection`) for ``specs/bond-epoxy.md`` (``_frames``,
  ``_structs``, ``_events``, ``_state``, ``_connection``, ``_errors``: no
  trio, no sockets, no logging);
* trio, on the bridge kit: :class:`EpoxyConnection`,
  :func:`open_epoxy_connection`, :func:`open_epoxy_stream`,
  :func:`connect_epoxy`, :class:`EpoxyServer`, :func:`serve_epoxy` (TCP,
  TLS, the application's say on each client);
* Python services: :func:`service`, :func:`method`, :func:`event`,
  :func:`serve_services`, :class:`ServiceProxy`;
* the mapping onto rstreams: :func:`event_publisher`, :func:`send_events`,
  :func:`call_publisher`, :class:`EpoxyAppServer` (``rstreams serve
  --epoxy``, the service ``rstreams.Publishers``) and :class:`EpoxyPeer`
  (``rstreams.connect("epoxy://HOST:PORT")``, ``rstreams sub epoxy://...``);
* :data:`BRIDGE`, its entry in the bridge registry.

Decisions on the spec's ambiguities are in ``docs/bridges/epoxy.md``.
"""

from ._connection import Connection
from ._errors import (
    ConversationIdsExhaustedError,
    EpoxyClosed,
    EpoxyConnectionLost,
    EpoxyError,
    EpoxyTimeout,
    ErrorResponse,
    LocalProtocolError,
    PeerProtocolError,
    RemoteProtocolError,
)
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
from ._settings import (
    DEFAULT_PORT,
    DEFAULT_SETTINGS,
    DEFAULT_TLS_PORT,
    AcceptFunction,
    ConnectionInfo,
    EpoxySettings,
    EpoxyStatistics,
    Verdict,
)
from ._trio import EpoxyConnection, Payload, PendingCall, connection_info
from ._connect import connect_epoxy, open_epoxy_connection, open_epoxy_stream
from ._service import (
    DEFAULT_MAX_CONCURRENCY,
    MethodInfo,
    MethodKind,
    ServiceError,
    ServiceInfo,
    ServiceProxy,
    ServiceTable,
    dispatch_event,
    dispatch_events,
    dispatch_request,
    event,
    hold_for_response,
    method,
    serve_services,
    service,
    service_info,
)
from ._serve import EpoxyHandler, EpoxyServer, serve_epoxy
from ._mapping import DEFAULT_MAX_IN_FLIGHT, call_publisher, event_publisher, send_events
from ._app import (
    DEFAULT_MAX_RESPONSE_BYTES,
    MAX_SUBSCRIBE_REQUEST_SIZE,
    PUBLISHERS_SERVICE,
    Elements,
    EpoxyAppServer,
    Publishers,
    PublishEvent,
    SubscribeRequest,
    open_app_session,
)
from ._client import EpoxyPeer, connect_epoxy_url, publish_epoxy_url, subscribe_call
from ._bridge import BRIDGE

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
    "PeerProtocolError",
    "ErrorResponse",
    "EpoxyClosed",
    "EpoxyConnectionLost",
    "EpoxyTimeout",
    # trio adapter
    "EpoxySettings",
    "DEFAULT_SETTINGS",
    "DEFAULT_PORT",
    "DEFAULT_TLS_PORT",
    "ConnectionInfo",
    "AcceptFunction",
    "Verdict",
    "EpoxyStatistics",
    "EpoxyConnection",
    "PendingCall",
    "Payload",
    "connection_info",
    "open_epoxy_stream",
    "open_epoxy_connection",
    "connect_epoxy",
    "EpoxyServer",
    "EpoxyHandler",
    "serve_epoxy",
    # services
    "service",
    "method",
    "event",
    "MethodKind",
    "MethodInfo",
    "ServiceInfo",
    "ServiceError",
    "ServiceTable",
    "ServiceProxy",
    "service_info",
    "serve_services",
    "dispatch_request",
    "dispatch_event",
    "dispatch_events",
    "hold_for_response",
    "DEFAULT_MAX_CONCURRENCY",
    # the mapping onto rstreams
    "event_publisher",
    "send_events",
    "call_publisher",
    "DEFAULT_MAX_IN_FLIGHT",
    "PUBLISHERS_SERVICE",
    "SubscribeRequest",
    "Elements",
    "PublishEvent",
    "Publishers",
    "EpoxyAppServer",
    "DEFAULT_MAX_RESPONSE_BYTES",
    "MAX_SUBSCRIBE_REQUEST_SIZE",
    "open_app_session",
    "EpoxyPeer",
    "connect_epoxy_url",
    "publish_epoxy_url",
    "subscribe_call",
    "BRIDGE",
]
