"""Values of the trio adapter: its settings, a received request, a statistics snapshot."""

from __future__ import annotations

from dataclasses import dataclass

from ..kit import LinkSettings
from ._codec import DEFAULT_LIMITS, EmpLimits, Framing
from ._events import CompressionScheme

__all__ = ["EmpConfig", "DEFAULT_CONFIG", "EmpRequest", "EmpStatistics"]


@dataclass(frozen=True, slots=True, kw_only=True)
class EmpConfig(LinkSettings):
    """Settings of one EMP connection: the kit's :class:`~bridges.kit.LinkSettings`
    (timeouts and buffer bounds, with EMP's defaults) plus EMP's own.

    Attributes:
        framing: how sizes are counted; both peers must agree (default: the
            spec text, sizes include the size field).
        limits: what the peer may send (message size, extensions, ...).
        handshake_timeout: seconds to wait for the peer's hello (then
            error 2 and close). Default 10.
        keepalive_interval: seconds between keepalive pings; None: no pings.
            Default 30.
        ping_timeout: seconds a keepalive pong may take (then error 2 and
            close). Default 10.
        max_read_ahead: bytes of message bodies read but not yet taken by
            the application; beyond it the reader stops. Default 1 MiB (at
            least one message is always read).
        receive_size: the most bytes asked of the transport per read. 64 KiB.
        max_write_buffer: bytes of messages queued and not yet written
            beyond which a send waits for the transport. Default 64 KiB; 0:
            every send waits until its message is written.
        close_timeout: seconds to flush the last message and close. Default 1.
    """

    framing: Framing = Framing.SIZE_INCLUDES_FIELD
    limits: EmpLimits = DEFAULT_LIMITS


DEFAULT_CONFIG = EmpConfig()


@dataclass(frozen=True, slots=True)
class EmpRequest:
    """A request received from the peer; answer it with :meth:`EmpConnection.respond`.

    Attributes:
        request_id: the peer's id for it.
        body: the body, decompressed.
        compression: the scheme the request was compressed with (None: no
            compression block); the response uses the same by default.
    """

    request_id: int
    body: bytes
    compression: CompressionScheme | None


@dataclass(frozen=True, slots=True)
class EmpStatistics:
    """A snapshot of a connection.

    Attributes:
        bytes_received / bytes_sent: transport bytes so far.
        buffered_bytes: bodies read and not yet taken by the application.
        pending_calls: our requests with no response yet.
        reading: whether the reader is currently allowed to read.
    """

    bytes_received: int
    bytes_sent: int
    buffered_bytes: int
    pending_calls: int
    reading: bool
