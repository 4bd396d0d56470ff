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
    │   ├── SessionBroken           the transport died without goodbye
    │   └── HandshakeTimeout        the peer never said hello: no session came up
    └── SubscriptionError           one stream failed; the session stays up
        ├── PublisherError          the peer's publisher sent onError: .message
        │   └── NotRetained         a replay asked for elements a topic no longer holds: .behind
        └── UnknownPublisher        the peer has no such publisher: .name

    ValueError
    └── InvalidParameter            a subscriber's query parameter is unusable
"""

from __future__ import annotations

import re

from .protocol import HandshakeError, LocalProtocolError, ProtocolError, RemoteProtocolError, RStreamsError

__all__ = [
    "RStreamsError",
    "ProtocolError",
    "LocalProtocolError",
    "RemoteProtocolError",
    "HandshakeError",
    "SessionClosed",
    "SessionBroken",
    "HandshakeTimeout",
    "SubscriptionError",
    "PublisherError",
    "UnknownPublisher",
    "InvalidParameter",
    "NotRetained",
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


class HandshakeTimeout(SessionClosed):
    """The peer sent no hello within ``handshake_timeout``: the session never
    came up (a failed connect, as the command line reports it), and this
    side closed it."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason, by_peer=False)


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

class NotRetained(PublisherError):
    """A replaying subscription (``TOPIC?from=N``) asked for elements the
    topic no longer holds: it fell ``behind`` elements too far back. Nothing
    was skipped: the subscriber decides (start again from ``oldest``, or fail).

    The topic says so in its onError text (:meth:`message_for`), which the
    session turns back into this type, so it crosses the wire as a plain
    wire-v0 onError.

    Attributes:
        topic: the topic's name.
        partition: the partition asked for.
        requested: the sequence number asked for.
        oldest: the oldest sequence number the partition held then.
        behind: ``oldest - requested``.
    """

    _PATTERN = re.compile(
        r"^not retained: topic (?P<topic>.+?) partition (?P<partition>\d+): sequence (?P<requested>\d+) "
        r"is no longer retained, (?P<behind>\d+) behind the oldest held \((?P<oldest>\d+)\)"
    )

    def __init__(self, message: str, *, topic: str, partition: int, requested: int, oldest: int) -> None:
        super().__init__(message)
        self.topic = topic
        self.partition = partition
        self.requested = requested
        self.oldest = oldest
        self.behind = oldest - requested

    @staticmethod
    def message_for(topic: str, partition: int, requested: int, oldest: int) -> str:
        """The onError text a topic sends (and :meth:`from_message` reads)."""
        return (
            f"not retained: topic {topic} partition {partition}: sequence {requested} is no longer retained, "
            f"{oldest - requested} behind the oldest held ({oldest})"
        )

    @classmethod
    def from_message(cls, message: str) -> NotRetained | None:
        """The error an onError text stands for, or None if it is another one."""
        match = cls._PATTERN.match(message)
        if match is None:
            return None
        return cls(
            message,
            topic=match["topic"],
            partition=int(match["partition"]),
            requested=int(match["requested"]),
            oldest=int(match["oldest"]),
        )


def describe_error(error: BaseException) -> str:
    """The first thing in ``error``'s chain that says something.

    trio's transport errors often say nothing themselves while their cause
    does (a TLS certificate that failed to verify, a reset).
    """
    seen: set[int] = set()
    current: BaseException | None = error
    text = ""
    hint = None
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        hint = hint or _tls_hint(current)
        if not text and str(current):
            text = str(current)
            if hint is not None:
                break
        current = current.__cause__ or current.__context__
    text = text or type(error).__name__
    # What to do comes after what happened, so the text still starts as
    # OpenSSL's does ("[SSL: CERTIFICATE_VERIFY_FAILED] ...").
    return f"{text}; {hint}" if hint is not None and hint not in text else text


def connection_lost_reason(error: BaseException, doing: str = "") -> str:
    """Why a transport ended under us, in words: ``connection lost while
    DOING: ...``, or ``TLS handshake failed: ...`` when the error is one
    that only a TLS handshake raises (the certificate did not verify, the
    peer does not speak TLS, or it answered the handshake with an alert).

    trio's TLS streams handshake on their first read or write, so a bad
    certificate reaches the reader as a broken connection; a user is better
    told that the connection never came up than that it was lost.
    """
    detail = describe_error(error)
    if _failed_tls_handshake(error):
        return f"TLS handshake failed: {detail}"
    return f"connection lost while {doing}: {detail}" if doing else f"connection lost: {detail}"


# OpenSSL's alerts a peer sends to refuse a handshake (our certificate, or
# the lack of one, or what we offered).
_HANDSHAKE_ALERTS = frozenset(
    {
        "SSLV3_ALERT_BAD_CERTIFICATE",
        "SSLV3_ALERT_CERTIFICATE_UNKNOWN",
        "SSLV3_ALERT_HANDSHAKE_FAILURE",
        "TLSV1_ALERT_UNKNOWN_CA",
        "TLSV1_ALERT_PROTOCOL_VERSION",
        "TLSV13_ALERT_CERTIFICATE_REQUIRED",
    }
)


def _failed_tls_handshake(error: BaseException) -> bool:
    import ssl

    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, ssl.SSLCertVerificationError):
            return True
        if isinstance(current, ssl.SSLError):
            reason = getattr(current, "reason", None)
            return reason in _NOT_TLS_REASONS or reason in _HANDSHAKE_ALERTS
        current = current.__cause__ or current.__context__
    return False


# OpenSSL's reasons when a TLS client reads something that is not TLS: the
# port speaks plain rstreams (or HTTP, or anything else).
_NOT_TLS_REASONS = frozenset({"WRONG_VERSION_NUMBER", "RECORD_LAYER_FAILURE", "PACKET_LENGTH_TOO_LONG", "HTTP_REQUEST"})


def _tls_hint(error: BaseException) -> str | None:
    # What to do about a TLS failure, for people at a command line (the
    # library's users read "--ca" as "an ssl_context that trusts the CA").
    import ssl

    if isinstance(error, ssl.SSLCertVerificationError):
        return "certificate not trusted: pass --ca FILE"
    if isinstance(error, ssl.SSLError) and getattr(error, "reason", None) in _NOT_TLS_REASONS:
        return "this port does not speak TLS: use tcp://"
    return None
