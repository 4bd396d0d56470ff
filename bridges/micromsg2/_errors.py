"""MicroMsg2 errors, split by fault.

A ``RemoteProtocolError`` means the peer broke the protocol: the connection
has already queued the ERROR frame ``error;message=M`` that tells it why
(``M`` is :attr:`MicroMsg2Error.message`) and moved to ``ERROR``; the I/O
layer flushes that frame and disconnects, as the spec asks. Each limit a
peer can exceed has its own subclass, so the I/O layer and the tests can
tell them apart. A ``LocalProtocolError`` means this program asked for
something MicroMsg2 forbids (a message beyond the ack window, a frame that
cannot be encoded); nothing was queued and the connection is unchanged.

A peer's own ERROR frame is not an exception at this layer but an event
(:class:`~bridges.micromsg2.ConnectionFailed` or
:class:`~bridges.micromsg2.StreamFailed`); :class:`PeerError` is what the
I/O layer raises for it.
"""

from __future__ import annotations

from rstreams.protocol import LocalProtocolError as _RStreamsLocalProtocolError
from rstreams.protocol import RemoteProtocolError as _RStreamsRemoteProtocolError

from ..errors import BridgeError

__all__ = [
    "MicroMsg2Error",
    "LocalProtocolError",
    "RemoteProtocolError",
    "UnsupportedVersionError",
    "UnsupportedExtensionError",
    "FrameTooLargeError",
    "MessageTooLargeError",
    "TooManyPendingMessagesError",
    "WindowExceededError",
    "MalformedTextError",
    "FilterError",
    "FilterTooLargeError",
    "PeerError",
    "SendRefused",
    "MicroMsg2Closed",
    "MicroMsg2ConnectionLost",
    "MicroMsg2Timeout",
    "StreamError",
]


class MicroMsg2Error(BridgeError):
    """A MicroMsg2 error.

    Attributes:
        message: the error text; for a protocol error, what the ERROR frame
            says to the peer.
    """

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r})"


class LocalProtocolError(MicroMsg2Error, _RStreamsLocalProtocolError):
    """This side asked for something MicroMsg2 forbids; the connection is unchanged."""

    def __init__(self, message: str) -> None:
        _RStreamsLocalProtocolError.__init__(self, message)
        self.message = message


class RemoteProtocolError(MicroMsg2Error, _RStreamsRemoteProtocolError):
    """The peer broke MicroMsg2; an ERROR frame is queued and the state is ``ERROR``."""

    def __init__(self, message: str) -> None:
        _RStreamsRemoteProtocolError.__init__(self, message)
        self.message = message


class UnsupportedVersionError(RemoteProtocolError):
    """The peer's handshake named a version whose lower one this side does not speak.

    Attributes:
        peer_version: the ``(major, minor)`` the peer announced.
    """

    def __init__(self, message: str, *, peer_version: tuple[int, int]) -> None:
        super().__init__(message)
        self.peer_version = peer_version


class UnsupportedExtensionError(RemoteProtocolError):
    """The peer requires (or uses) an extension this side does not implement.

    Attributes:
        names: the extension names concerned, in the peer's order.
    """

    def __init__(self, message: str, *, names: tuple[str, ...]) -> None:
        super().__init__(message)
        self.names = names


class FrameTooLargeError(RemoteProtocolError):
    """A frame's payload length is over ``Limits.max_frame_payload``.

    Raised as soon as the length field is read, before the payload is
    buffered, so a peer cannot make us hold more than the limit.
    """


class MessageTooLargeError(RemoteProtocolError):
    """CONTINUED frames add up to more than ``Limits.max_message_size``."""


class TooManyPendingMessagesError(RemoteProtocolError):
    """More than ``Limits.max_pending_messages`` messages received and not consumed."""


class WindowExceededError(RemoteProtocolError):
    """The peer sent a message while the negotiated ack window was full."""


class MalformedTextError(MicroMsg2Error, ValueError):
    """A text field that does not parse: an extension list, a property list,
    a FILTER_VALUE, a command payload or a URL-encoded value.

    The connection turns it into a ``RemoteProtocolError`` when it comes
    from the peer; an application building one gets it directly.
    """


class FilterError(MalformedTextError):
    """A filter that does not parse, or an operator its value's type does not have."""


class FilterTooLargeError(FilterError):
    """A filter longer than ``Limits.max_filter_length`` or with more than
    ``Limits.max_filter_conditions`` conditions.

    Refused before any condition is parsed; from a peer it fails that
    subscription only (its stream ERROR), as any filter that does not parse.
    """


class PeerError(MicroMsg2Error):
    """The peer sent the connection ERROR frame ``error;message=M`` and disconnects.

    Not raised by the sans-I/O machine (which returns
    :class:`~bridges.micromsg2.ConnectionFailed`): it is what the I/O layer
    raises in every waiter once that event arrived.
    """


class MicroMsg2Closed(MicroMsg2Error):
    """The connection ended without an error: MicroMsg2 has no goodbye, so
    closing the transport is its normal end.

    Attributes:
        by_peer: True if the peer closed it, False if this side did.
    """

    def __init__(self, message: str, *, by_peer: bool) -> None:
        super().__init__(message)
        self.by_peer = by_peer


class MicroMsg2ConnectionLost(MicroMsg2Error):
    """The transport failed (reset, TLS error) under the connection."""


class MicroMsg2Timeout(MicroMsg2Error):
    """The peer's side of the handshake did not arrive in time."""


class SendRefused(MicroMsg2Error):
    """The server dropped what we sent to a destination, and said so (*ours*:
    ERROR ``error;destination=D,for=send,message=M``, which ends no stream;
    ``D`` is not a topic, say; ``MicroMsg2Connection.refused``).

    Attributes:
        destination: where the SENDs went.
    """

    def __init__(self, destination: str, message: str) -> None:
        super().__init__(message)
        self.destination = destination


class StreamError(MicroMsg2Error):
    """The server's ERROR ``error;destination=D,message=M``: one stream failed.

    Attributes:
        destination: the stream's destination.
    """

    def __init__(self, destination: str, message: str) -> None:
        super().__init__(message)
        self.destination = destination
