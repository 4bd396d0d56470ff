"""Relink errors, split by whose fault they are.

Relink has no error packet: a peer that breaks the protocol is answered by
closing the connection, nothing else. So unlike EMP's errors these carry no
code to send. A ``RemoteProtocolError`` means the peer broke the protocol;
the connection has moved to ``ERROR`` and the I/O layer's only job left is to
close the transport (the link itself may be resumed on a new connection, as
the Go implementation does, because a packet is validated before it changes
the link state). A ``LocalProtocolError`` means this program asked for
something Relink forbids; nothing was queued and nothing changed.
"""

from __future__ import annotations

from rstreams.protocol import LocalProtocolError as _RStreamsLocalProtocolError
from rstreams.protocol import RemoteProtocolError as _RStreamsRemoteProtocolError

from ..errors import BridgeError

__all__ = [
    "RelinkError",
    "LocalProtocolError",
    "RemoteProtocolError",
    "UnsupportedVersionError",
    "HandshakeRejected",
    "LimitExceeded",
    "LinkLostError",
]


class RelinkError(BridgeError):
    """Base class of every error the Relink bridge raises."""


class LocalProtocolError(RelinkError, _RStreamsLocalProtocolError):
    """This side asked for something Relink forbids; the connection is unchanged."""


class RemoteProtocolError(RelinkError, _RStreamsRemoteProtocolError):
    """The peer broke Relink; the connection is in ``ERROR`` and must be closed."""


class UnsupportedVersionError(RemoteProtocolError):
    """The peer's handshake named a protocol version this side cannot speak.

    Attributes:
        peer_version: the version byte the peer sent.
    """

    def __init__(self, message: str, *, peer_version: int) -> None:
        super().__init__(message)
        self.peer_version = peer_version


class HandshakeRejected(RemoteProtocolError):
    """The connector asked for something this listener does not offer.

    An unknown endpoint name, channel id sizes or transaction flags that
    differ from the endpoint's: the spec says to terminate the connection.
    """


class LimitExceeded(RemoteProtocolError):
    """The peer sent more than a configured limit allows (parts, sizes, counts).

    Attributes:
        limit: the name of the :class:`~bridges.relink.RelinkLimits` field.
        value: what the peer sent (or would have made us hold).
    """

    def __init__(self, message: str, *, limit: str, value: int) -> None:
        super().__init__(message)
        self.limit = limit
        self.value = value


class LinkLostError(RelinkError):
    """A link's state was discarded: the listener's epoch changed or it forgot the link.

    Not raised by the sans-I/O core (which reports the loss as an event with
    the channels concerned); the I/O layer raises it into the streams of
    those channels, so their users learn that messages may have been lost.

    Attributes:
        outgoing: ids of our channels whose unacknowledged messages were lost.
        incoming: ids of the peer's channels whose state was lost.
    """

    def __init__(self, message: str, *, outgoing: tuple[int, ...] = (), incoming: tuple[int, ...] = ()) -> None:
        super().__init__(message)
        self.outgoing = outgoing
        self.incoming = incoming
