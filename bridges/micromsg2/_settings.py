"""Settings of the trio adapter: the kit's timeouts and bounds plus MicroMsg2's own."""

from __future__ import annotations

from dataclasses import dataclass

from ..kit import KiB, LinkSettings, check_count
from ._codec import DEFAULT_LIMITS, Limits
from ._errors import LocalProtocolError
from ._extensions import MAX_WINDOW, ExtensionSpec
from ._handshake import HandshakeOptions

__all__ = ["MicroMsg2Settings", "MicroMsg2Statistics", "DEFAULT_SETTINGS", "SMALLEST_MESSAGE", "DEFAULT_PORT"]

#: The fewest bytes a MESSAGE frame takes (flags, sequence, an empty
#: destination, no properties, a 1-byte length, an empty payload): how many
#: messages one read can carry at most is ``receive_size // SMALLEST_MESSAGE``.
SMALLEST_MESSAGE = 7
#: MicroMsg2 names no port; URLs and commands need one.
DEFAULT_PORT: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class MicroMsg2Settings(LinkSettings):
    """Settings of one MicroMsg2 connection.

    Attributes:
        identity: our handshake identity, ASCII of at most 255 bytes
            (None: ``rstreams`` for a server, empty for a client).
        required: extensions the peer must implement.
        optional: extensions we suggest.
        accept: (client) which of the server's suggestions to take; None for
            every one we implement.
        limits: what the peer may make us hold (frame, message, pending
            messages).
        receive_size: the most bytes read at once. 4 KiB by default, so
            that one read cannot carry a peer that pushes without acks past
            ``limits.max_pending_messages`` (the reader pauses before a read
            could): ``receive_size // 7`` must stay under that limit.
        windowed_receive_size: the most bytes read at once when ``ack`` or
            ``batch-ack`` is in use (64 KiB by default): the window then
            bounds the messages the peer may have us hold, whatever one read
            carries, and reads of a few KiB made a stream of large messages
            cost a read, and a pass of the reader, every 4 KiB.
        keepalive_interval: None, always: MicroMsg2 has no ping.
    """

    identity: str | None = None
    required: tuple[ExtensionSpec, ...] = ()
    optional: tuple[ExtensionSpec, ...] = ()
    accept: frozenset[str] | None = None
    limits: Limits = DEFAULT_LIMITS
    receive_size: int = 4 * KiB
    windowed_receive_size: int = 64 * KiB
    keepalive_interval: float | None = None

    def __post_init__(self) -> None:
        LinkSettings.__post_init__(self)
        if self.keepalive_interval is not None:
            raise ValueError("MicroMsg2 has no ping: keepalive_interval must be None")
        check_count("windowed_receive_size", self.windowed_receive_size)
        if self.windowed_receive_size > self.max_connection_memory:
            # (A read's buffer is the connection's; 10**30 died reading.)
            raise ValueError(
                f"windowed_receive_size ({self.windowed_receive_size} bytes) must fit in max_connection_memory"
            )
        if self.identity is not None and not isinstance(self.identity, str):
            raise TypeError(f"identity must be a str or None, not {type(self.identity).__name__}")
        try:
            # What every connection's handshake would refuse, refused here,
            # once: an identity that is not ASCII of at most 255 bytes, an
            # extension listed twice or not spoken here, a batch-ack count
            # over max_pending_messages (before, each connection failed).
            HandshakeOptions(
                identity=self.identity or "",
                required=self.required,
                optional=self.optional,
                accept=self.accept,
                max_window=min(self.limits.max_pending_messages, MAX_WINDOW),
            )
        except LocalProtocolError as exc:
            raise ValueError(str(exc)) from None
        if self.receive_size // SMALLEST_MESSAGE >= self.limits.max_pending_messages:
            raise ValueError(
                f"receive_size {self.receive_size} could carry more than max_pending_messages"
                f" ({self.limits.max_pending_messages}) messages in one read"
            )


DEFAULT_SETTINGS = MicroMsg2Settings()


@dataclass(frozen=True, slots=True)
class MicroMsg2Statistics:
    """A snapshot of a connection.

    Attributes:
        bytes_received / bytes_sent: transport bytes so far.
        buffered_bytes: messages read and not yet taken by the application.
        window: the negotiated ack window, or None (no acks).
        unacknowledged: our messages the peer has not acknowledged.
        pending_messages: received messages not yet acknowledged by us.
        subscriptions: destinations subscribed on the connection.
        reading: whether the reader is currently allowed to read.
    """

    bytes_received: int
    bytes_sent: int
    buffered_bytes: int
    window: int | None
    unacknowledged: int
    pending_messages: int
    subscriptions: int
    reading: bool
