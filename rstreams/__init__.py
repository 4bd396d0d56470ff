"""rstreams: Reactive Streams over the network, on trio."""

from ._version import __version__
from .protocol import (
    HandshakeError,
    LocalProtocolError,
    ProtocolError,
    ProtocolLimits,
    RemoteProtocolError,
    RStreamsError,
)

__all__ = [
    "HandshakeError",
    "LocalProtocolError",
    "ProtocolError",
    "ProtocolLimits",
    "RStreamsError",
    "RemoteProtocolError",
    "__version__",
]
