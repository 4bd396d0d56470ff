"""Protocol errors, split by whose fault they are.

The split follows h11: a ``LocalProtocolError`` means *this* program asked the
state machine for something the protocol forbids (a bug in the caller, raised
at once, the connection is unaffected); a ``RemoteProtocolError`` means the
*peer* broke the protocol. Every remote error carries ``goodbye_reason``, the
text the state machine has already queued in a goodbye message, and the
connection is finished afterwards.
"""

from __future__ import annotations

__all__ = [
    "RStreamsError",
    "ProtocolError",
    "LocalProtocolError",
    "RemoteProtocolError",
    "HandshakeError",
]


class RStreamsError(Exception):
    """Base class of every error raised by rstreams."""


class ProtocolError(RStreamsError):
    """A violation of the wire protocol (abstract: raise a subclass).

    Attributes:
        goodbye_reason: what the goodbye message says (or would say) to the
            peer about this error.
    """

    def __init__(self, message: str, *, goodbye_reason: str | None = None) -> None:
        if type(self) is ProtocolError:
            raise TypeError("ProtocolError is abstract: raise LocalProtocolError or RemoteProtocolError")
        super().__init__(message)
        self.message = message
        self.goodbye_reason = goodbye_reason if goodbye_reason is not None else f"protocol error: {message}"


class LocalProtocolError(ProtocolError):
    """This side asked for something the protocol forbids; the connection is unchanged."""


class RemoteProtocolError(ProtocolError):
    """The peer broke the protocol; goodbye has been queued and the connection is done."""


class HandshakeError(RemoteProtocolError):
    """The peer's hello named a protocol version this side does not speak.

    Attributes:
        peer_version: the version the peer announced.
    """

    def __init__(self, message: str, *, peer_version: int, goodbye_reason: str) -> None:
        super().__init__(message, goodbye_reason=goodbye_reason)
        self.peer_version = peer_version
