"""rstreams: Reactive Streams over the network, on trio.

Publishers are ``async def`` functions fed by demand; subscribers are async
iterators that request as they consume. Both run over TCP, TLS, WebSocket
(and any ``trio.abc.Stream``) with the reactive-streams-io protocol, wire profile v0.
"""

import logging as _logging

from ._codecs import Codec, JsonCodec, MsgpackCodec, RawCodec
from ._config import SessionConfig
from ._connect import connect, open_local_session, open_session
from ._errors import (
    HandshakeError,
    LocalProtocolError,
    NotRetained,
    ProtocolError,
    PublisherError,
    RemoteProtocolError,
    RStreamsError,
    SessionBroken,
    SessionClosed,
    SubscriptionError,
    UnknownPublisher,
)
from ._peer import Peer
from ._publish import Route, Router, Sink, SinkStatistics, SubscribeRequest, publisher_from_async_gen
from ._serve import Server, listener_port, serve_stream, serve_tcp, serve_websocket
from ._registry import UnsupportedScheme
from ._session import Session, SessionStatistics, open_stream_session
from ._subscribe import ADAPTIVE_BYTE_BUDGET, ADAPTIVE_INITIAL, ADAPTIVE_MAXIMUM, Subscription, SubscriptionStatistics
from ._topic import Topic, TopicPartitionStatistics, TopicStatistics, TopicSubscriberStatistics, publish_to_topic
from ._topic_offsets import OFFSETS_PUBLISHER, PartitionOffsets, topic_offsets
from ._topic_core import decode_sequenced, encode_sequenced
from ._url import BridgeURL, Endpoint, parse_bridge_url, parse_url
from ._version import __version__
from .protocol import ElementBatch, ProtocolLimits

__all__ = [
    "ADAPTIVE_BYTE_BUDGET",
    "ADAPTIVE_INITIAL",
    "ADAPTIVE_MAXIMUM",
    "Codec",
    "ElementBatch",
    "Endpoint",
    "HandshakeError",
    "JsonCodec",
    "LocalProtocolError",
    "MsgpackCodec",
    "NotRetained",
    "OFFSETS_PUBLISHER",
    "PartitionOffsets",
    "ProtocolError",
    "ProtocolLimits",
    "PublisherError",
    "RStreamsError",
    "RawCodec",
    "RemoteProtocolError",
    "Peer",
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
    "Topic",
    "TopicPartitionStatistics",
    "TopicStatistics",
    "TopicSubscriberStatistics",
    "UnknownPublisher",
    "UnsupportedScheme",
    "BridgeURL",
    "parse_bridge_url",
    "__version__",
    "connect",
    "open_local_session",
    "open_session",
    "listener_port",
    "open_stream_session",
    "parse_url",
    "publish_to_topic",
    "topic_offsets",
    "decode_sequenced",
    "encode_sequenced",
    "publisher_from_async_gen",
    "serve_stream",
    "serve_tcp",
    "serve_websocket",
]

# The library convention: log to "rstreams", print nothing unless the
# application configures logging (the CLI's --log-level does).
_logging.getLogger("rstreams").addHandler(_logging.NullHandler())
