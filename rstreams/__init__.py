"""rstreams: Reactive Streams over the network, on trio.

Publishers are ``async def`` functions fed by demand; subscribers are async
iterators that request as they consume. Both run over TCP, TLS, WebSocket
(and any ``trio.abc.Stream``) with the reactive-streams-io protocol, wire profile v0.
"""

import logging as _logging

from ._codecs import Codec, JsonCodec, MsgpackCodec, RawCodec
from ._config import SessionConfig
from ._connect import open_session
from ._errors import (
    HandshakeError,
    LocalProtocolError,
    ProtocolError,
    PublisherError,
    RemoteProtocolError,
    RStreamsError,
    SessionBroken,
    SessionClosed,
    SubscriptionError,
    UnknownPublisher,
)
from ._publish import Route, Router, Sink, SinkStatistics, SubscribeRequest, publisher_from_async_gen
from ._serve import Server, listener_port, serve_stream, serve_tcp, serve_websocket
from ._session import Session, SessionStatistics, open_stream_session
from ._subscribe import Subscription, SubscriptionStatistics
from ._transport import Endpoint, parse_url
from ._version import __version__
from .protocol import ElementBatch, ProtocolLimits

__all__ = [
    "Codec",
    "ElementBatch",
    "Endpoint",
    "HandshakeError",
    "JsonCodec",
    "LocalProtocolError",
    "MsgpackCodec",
    "ProtocolError",
    "ProtocolLimits",
    "PublisherError",
    "RStreamsError",
    "RawCodec",
    "RemoteProtocolError",
    "Route",
    "Router",
    "Session",
    "Server",
    "SessionBroken",
    "SessionClosed",
    "SessionConfig",
    "SessionStatistics",
    "Sink",
    "SinkStatistics",
    "SubscribeRequest",
    "Subscription",
    "SubscriptionError",
    "SubscriptionStatistics",
    "UnknownPublisher",
    "__version__",
    "open_session",
    "listener_port",
    "open_stream_session",
    "parse_url",
    "publisher_from_async_gen",
    "serve_stream",
    "serve_tcp",
    "serve_websocket",
]

# The library convention: log to "rstreams", print nothing unless the
# application configures logging (the CLI's --log-level does).
_logging.getLogger("rstreams").addHandler(_logging.NullHandler())
