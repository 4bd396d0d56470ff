"""rstreams: Reactive Streams over the network, on trio.

Publishers are ``async def`` functions fed by demand; subscribers are async
iterators that request as they consume. Both run over TCP, TLS, WebSocket
(and any ``trio.abc.Stream``) with the reactive-streams-io protocol, wire profile v0.
"""

# The names below are imported when first used (PEP 562), not when the
# package is: ``import rstreams`` costs next to nothing, so that the
# ``rstreams`` command starts without trio, WebSocket or any bridge unless the
# command run needs them (``rstreams --version`` needs none). Type checkers
# see the plain imports of the TYPE_CHECKING block; ``__getattr__`` is
# hidden from them so that a misspelt name is still an error.

import importlib as _importlib
import logging as _logging
from typing import TYPE_CHECKING as _TYPE_CHECKING

from ._version import __version__

if _TYPE_CHECKING:
    from ._auth import Authenticate, Authorize, PeerInfo, Principal, static_token
    from ._codecs import Codec, JsonCodec, MsgpackCodec, RawCodec
    from ._config import NAME_MEMORY_ALLOWANCE, STREAM_MEMORY_COST, ConnectionMemoryTooSmall, SessionConfig
    from ._connect import connect, open_local_session, open_session
    from ._errors import (
        HandshakeError,
        HandshakeTimeout,
        InvalidParameter,
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
    from ._timers import PreciseTimers, run, sleep, sleep_until, use_precise_timers
    from ._topic import Topic, TopicPartitionStatistics, TopicStatistics, TopicSubscriberStatistics, publish_to_topic
    from ._topic_offsets import OFFSETS_PUBLISHER, PartitionOffsets, topic_offsets
    from ._topic_core import decode_sequenced, encode_sequenced
    from ._url import BridgeURL, Endpoint, parse_bridge_url, parse_url
    from .protocol import DEFAULT_CONNECTION_MEMORY, ElementBatch, ProtocolLimits

__all__ = [
    "Authenticate",
    "Authorize",
    "PeerInfo",
    "Principal",
    "static_token",
    "InvalidParameter",
    "PreciseTimers",
    "run",
    "sleep",
    "sleep_until",
    "use_precise_timers",
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
    "DEFAULT_CONNECTION_MEMORY",
    "STREAM_MEMORY_COST",
    "NAME_MEMORY_ALLOWANCE",
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
    "HandshakeTimeout",
    "SessionClosed",
    "SessionConfig",
    "ConnectionMemoryTooSmall",
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

#: Where each public name lives (module relative to this package).
_LAZY_NAMES: dict[str, str] = {
    "Authenticate": "._auth",
    "Authorize": "._auth",
    "PeerInfo": "._auth",
    "Principal": "._auth",
    "static_token": "._auth",
    "OFFSETS_PUBLISHER": "._topic_offsets",
    "PartitionOffsets": "._topic_offsets",
    "topic_offsets": "._topic_offsets",
    "ADAPTIVE_BYTE_BUDGET": "._subscribe",
    "ADAPTIVE_INITIAL": "._subscribe",
    "ADAPTIVE_MAXIMUM": "._subscribe",
    "Codec": "._codecs",
    "JsonCodec": "._codecs",
    "MsgpackCodec": "._codecs",
    "RawCodec": "._codecs",
    "SessionConfig": "._config",
    "ConnectionMemoryTooSmall": "._config",
    "connect": "._connect",
    "open_local_session": "._connect",
    "open_session": "._connect",
    "HandshakeError": "._errors",
    "InvalidParameter": "._errors",
    "NotRetained": "._errors",
    "LocalProtocolError": "._errors",
    "ProtocolError": "._errors",
    "PublisherError": "._errors",
    "RemoteProtocolError": "._errors",
    "RStreamsError": "._errors",
    "SessionBroken": "._errors",
    "HandshakeTimeout": "._errors",
    "SessionClosed": "._errors",
    "SubscriptionError": "._errors",
    "UnknownPublisher": "._errors",
    "Peer": "._peer",
    "Route": "._publish",
    "Router": "._publish",
    "Sink": "._publish",
    "SinkStatistics": "._publish",
    "SubscribeRequest": "._publish",
    "publisher_from_async_gen": "._publish",
    "Server": "._serve",
    "listener_port": "._serve",
    "serve_stream": "._serve",
    "serve_tcp": "._serve",
    "serve_websocket": "._serve",
    "UnsupportedScheme": "._registry",
    "Session": "._session",
    "SessionStatistics": "._session",
    "open_stream_session": "._session",
    "Subscription": "._subscribe",
    "SubscriptionStatistics": "._subscribe",
    "PreciseTimers": "._timers",
    "run": "._timers",
    "sleep": "._timers",
    "sleep_until": "._timers",
    "use_precise_timers": "._timers",
    "Topic": "._topic",
    "TopicPartitionStatistics": "._topic",
    "TopicStatistics": "._topic",
    "TopicSubscriberStatistics": "._topic",
    "publish_to_topic": "._topic",
    "decode_sequenced": "._topic_core",
    "encode_sequenced": "._topic_core",
    "BridgeURL": "._url",
    "Endpoint": "._url",
    "parse_bridge_url": "._url",
    "parse_url": "._url",
    "ElementBatch": ".protocol",
    "ProtocolLimits": ".protocol",
    "DEFAULT_CONNECTION_MEMORY": ".protocol",
    "STREAM_MEMORY_COST": "._config",
    "NAME_MEMORY_ALLOWANCE": "._config",
}

if not _TYPE_CHECKING:

    def __getattr__(name: str) -> object:
        module_name = _LAZY_NAMES.get(name)
        if module_name is None:
            # A submodule not imported yet (rstreams.protocol, rstreams.support, ...).
            if not name.startswith("__"):
                try:
                    return _importlib.import_module(f".{name}", __name__)
                except ModuleNotFoundError as exc:
                    if exc.name != f"{__name__}.{name}":
                        raise
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        value = getattr(_importlib.import_module(module_name, __name__), name)
        globals()[name] = value  # later look-ups are plain attribute reads
        return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


# The library convention: log to "rstreams", print nothing unless the
# application configures logging (the CLI's --log-level does).
_logging.getLogger("rstreams").addHandler(_logging.NullHandler())
