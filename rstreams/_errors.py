"""The exception hierarchy of the runtime.

Protocol errors (``LocalProtocolError``, ``RemoteProtocolError``,
``HandshakeError``) live with the sans-I/O machine in ``rstreams.protocol``;
this module adds what only a running session can tell: that the session
ended (and who ended it), and that one stream failed while the session
stays up.

::

    RStreamsError
    ├── ProtocolError
    │   ├── LocalProtocolError      this program misused the protocol
    │   └── RemoteProtocolError     the peer broke the protocol
    │       └── HandshakeError      the peer speaks another version
    ├── SessionClosed               the session is gone: .reason, .by_peer
    │   └── SessionBroken           the transport died without goodbye
    └── SubscriptionError           one stream failed; the session stays up
        ├── PublisherError          the peer's publisher sent onError: .message
        └── UnknownPublisher        the peer has no such publisher: .name

    ValueError
    └── InvalidParameter            a subscriber's query parameter is unusable
"""

from __future__ import annotations

from .protocol import HandshakeError, LocalProtocolError, ProtocolError, RemoteProtocolError, RStreamsError

__all__ = [
    "RStreamsError",
    "ProtocolError",
    "LocalProtocolError",
    "RemoteProtocolError",
    "HandshakeError",
    "SessionClosed",
    "SessionBroken",
    "SubscriptionError",
    "PublisherError",
    "UnknownPublisher",
    "InvalidParameter",
    "describe_error",
]


class SessionClosed(RStreamsError):
    """The session ended, so every stream on it ended too.

    Attributes:
        reason: the goodbye reason, or what went wrong.
        by_peer: True if the peer ended the session (its goodbye, or it
            vanished), False if this side did.
    """

    def __init__(self, reason: str, *, by_peer: bool) -> None:
        who = "peer" if by_peer else "local side"
        super().__init__(f"session closed by the {who}: {reason}")
        self.reason = reason
        self.by_peer = by_peer


class SessionBroken(SessionClosed):
    """The connection was lost without a goodbye (the cause is chained)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason, by_peer=True)


class SubscriptionError(RStreamsError):
    """One stream failed; the session and its other streams carry on."""


class PublisherError(SubscriptionError):
    """The peer's publisher ended the stream with onError.

    Attributes:
        message: the error text the publisher sent.
    """

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class UnknownPublisher(PublisherError):
    """The peer has no publisher by that name.

    Attributes:
        name: the publisher name that was asked for.
    """

    def __init__(self, name: str, message: str) -> None:
        super().__init__(message)
        self.name = name


class InvalidParameter(ValueError):
    """A subscriber's query parameter is missing its form or bounds.

    Raised by ``SubscribeRequest.int_param`` / ``float_param``. It is the
    subscriber's mistake, not the publisher's: escaping a publisher, it
    becomes onError and one log line naming the peer, never a traceback.
    """


def describe_error(error: BaseException) -> str:
    """The first thing in ``error``'s chain that says something.

    trio's transport errors often say nothing themselves while their cause
    does (a TLS certificate that failed to verify, a reset).
    """
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if str(current):
            return str(current)
        current = current.__cause__ or current.__context__
    return type(error).__name__
