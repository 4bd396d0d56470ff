"""Public building blocks for code that extends rstreams: bridges above all.

A bridge to another protocol (see ``docs/bridges/README.md``) needs a few
things the runtime already has: a way to feed :class:`~rstreams.Subscription`
objects from its own connection (:class:`FeedPeer`, :class:`StreamFeed`), the
registry through which ``rstreams.connect`` and the command line find it
(:class:`Bridge`, :class:`Scheme`, :class:`BridgeService`), and small helpers
for listeners, TLS, in-process streams and nurseries. They live here, with a
documented contract, so that no bridge reaches into the runtime's private
modules.
"""

from ._accept import serve_listeners
from ._admission import CLOSING_GRACE, HANDSHAKE_GRACE, Admission, Admissions
from ._errors import connection_lost_reason, describe_error
from ._groups import caller_sees_its_own_exception, first_leaf
from ._logs import PEER_TEXT_LOGGED, log_connection_refused, log_session_close, log_session_open, peer_address, peer_text, tcp_socket
from ._loopback import DEFAULT_LOOPBACK_CONGESTION_CONTROL, check_congestion_control, unpace_loopback
from ._memory import DEFAULT_MEMORY_BUFFER, MemoryStream, memory_stream_pair
from ._peer import DEFAULT_PREFETCH, FeedPeer, Peer, StreamFeed
from ._publish import PUBLISHERS_PATH
from ._registry import (
    ENTRY_POINT_GROUP,
    Bridge,
    BridgeService,
    ConfirmedElements,
    PublishFunction,
    ReadyElements,
    ServeContext,
    Scheme,
    UnsupportedScheme,
    find_scheme,
    known_schemes,
    register_bridge,
    registered_bridges,
    report_confirmed,
    take_ready,
    url_is_secure,
)
from ._serve import Listener, listener_address, listener_port, listener_url, speaks_plain, with_tls
from ._url import BridgeURL, parse_bridge_url, url_scheme

__all__ = [
    "Admission",
    "Admissions",
    "HANDSHAKE_GRACE",
    "CLOSING_GRACE",
    "Bridge",
    "BridgeService",
    "PublishFunction",
    "ReadyElements",
    "ConfirmedElements",
    "BridgeURL",
    "DEFAULT_LOOPBACK_CONGESTION_CONTROL",
    "DEFAULT_MEMORY_BUFFER",
    "DEFAULT_PREFETCH",
    "ENTRY_POINT_GROUP",
    "FeedPeer",
    "Listener",
    "MemoryStream",
    "PUBLISHERS_PATH",
    "Peer",
    "Scheme",
    "ServeContext",
    "StreamFeed",
    "UnsupportedScheme",
    "caller_sees_its_own_exception",
    "first_leaf",
    "check_congestion_control",
    "connection_lost_reason",
    "describe_error",
    "find_scheme",
    "known_schemes",
    "listener_address",
    "listener_port",
    "listener_url",
    "log_connection_refused",
    "log_session_close",
    "log_session_open",
    "peer_text",
    "PEER_TEXT_LOGGED",
    "memory_stream_pair",
    "parse_bridge_url",
    "peer_address",
    "register_bridge",
    "registered_bridges",
    "serve_listeners",
    "speaks_plain",
    "take_ready",
    "report_confirmed",
    "tcp_socket",
    "unpace_loopback",
    "url_is_secure",
    "url_scheme",
    "with_tls",
]
