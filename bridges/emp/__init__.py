"""EMP (Extensible Messaging Protocol) for rstreams.

Three layers, each usable alone:

* sans-I/O: messages, a codec (:func:`encode`, :class:`Decoder`) and a
  connection state machine (:class:`Connection`) for ``specs/emp.md`` with
  the request-response and compression extensions (``_events``, ``_codec``,
  ``_state``, ``_connection``, ``_errors``: no trio, no sockets);
* trio: :func:`open_emp_connection`, :func:`open_emp_stream`,
  :func:`serve_emp` / :class:`EmpServer` (TCP, TLS, keepalive pings);
* the mapping onto rstreams: :func:`data_publisher`, :func:`pipe_publisher`,
  :func:`call_publisher`, :class:`ResponseStream`, :func:`serve_requests` (:func:`answer_requests`),
  :class:`EmpAppServer` (``rstreams serve --emp``) and :class:`EmpPeer`
  (``rstreams.connect("emp://HOST:PORT")``, ``rstreams sub emp://...``);
* :data:`BRIDGE`, its entry in the bridge registry.

The trio side is built on the bridge kit (``bridges.kit``).

Decisions on the spec's ambiguities are in ``docs/bridges/emp.md``.
"""

from ._codec import DEFAULT_LIMITS, Decoder, EmpLimits, Framing, decode, encode
from ._connection import SUPPORTED_VERSIONS, Connection
from ._errors import (
    EmpClosed,
    EmpConnectionLost,
    EmpError,
    EmpTimeout,
    ErrorCode,
    ExtensionErrorCode,
    LocalProtocolError,
    PeerError,
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
from ._config import DEFAULT_CONFIG, EmpConfig, EmpRequest, EmpStatistics
from ._trio import EmpConnection, PendingCall
from ._connect import connect_emp, open_emp_connection, open_emp_stream
from ._serve import EmpHandler, EmpServer, serve_emp
from ._mapping import (
    RequestHandler,
    ResponseStream,
    call_publisher,
    data_publisher,
    open_local_session,
    pipe_publisher,
    send_stream,
    serve_requests,
    answer_requests,
)
from ._app import DEFAULT_MAX_RESPONSE_BYTES, EmpAppServer, answer_publisher_request, decode_response
from ._client import FRAMINGS, EmpPeer, connect_emp_url
from ._bridge import BRIDGE

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
    "PeerError",
    "EmpClosed",
    "EmpConnectionLost",
    "EmpTimeout",
    # trio adapter
    "EmpConfig",
    "DEFAULT_CONFIG",
    "EmpConnection",
    "EmpRequest",
    "EmpStatistics",
    "PendingCall",
    "open_emp_connection",
    "open_emp_stream",
    "connect_emp",
    "EmpServer",
    "EmpHandler",
    "serve_emp",
    # the mapping onto rstreams
    "data_publisher",
    "send_stream",
    "pipe_publisher",
    "call_publisher",
    "ResponseStream",
    "RequestHandler",
    "serve_requests",
    "answer_requests",
    "open_local_session",
    "EmpAppServer",
    "DEFAULT_MAX_RESPONSE_BYTES",
    "answer_publisher_request",
    "decode_response",
    "EmpPeer",
    "connect_emp_url",
    "FRAMINGS",
    "BRIDGE",
]
