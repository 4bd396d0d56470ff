"""The base of every bridge's errors, importable without trio by sans-I/O modules."""

from __future__ import annotations

from rstreams.protocol import RStreamsError

__all__ = ["BridgeError"]


class BridgeError(RStreamsError):
    """Base class of every error raised by a bridge to another protocol.

    Protocol errors of a bridge also subclass rstreams' own
    ``LocalProtocolError`` / ``RemoteProtocolError``, so code that handles
    "whose fault" does not need to know which protocol is underneath.
    """
