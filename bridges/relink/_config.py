"""Defaults the I/O layer needs, and a connection's counters.

The timing constants are the Go implementation's defaults; the sans-I/O
machine uses none of them itself (it has no clock) but the I/O layer arms
its timers with them.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "DEFAULT_SEND_WINDOW",
    "DEFAULT_ACK_WINDOW",
    "DEFAULT_ACK_DELAY",
    "DEFAULT_PING_INTERVAL",
    "DEFAULT_PONG_TIMEOUT",
    "DEFAULT_HANDSHAKE_TIMEOUT",
    "DEFAULT_RESEND_CHUNK",
    "RelinkStatistics",
]

#: At most this many messages per channel sent and not acknowledged consumed (Go's default).
DEFAULT_SEND_WINDOW = 65536
#: Acknowledge consumed messages once this many accumulate (Go: a quarter of the window).
DEFAULT_ACK_WINDOW = DEFAULT_SEND_WINDOW // 4
#: Seconds: otherwise acknowledge them this long after the first (Go: 100 ms, minus up to 10 % jitter).
DEFAULT_ACK_DELAY = 0.1
#: Seconds without a received packet before the I/O layer pings (Go's default).
DEFAULT_PING_INTERVAL = 11.0
#: Seconds a ping may go unanswered before the I/O layer drops the connection (Go's default).
DEFAULT_PONG_TIMEOUT = 7.0
#: Seconds the whole handshake may take (Go's default).
DEFAULT_HANDSHAKE_TIMEOUT = 10.0
#: About how many bytes of a resume's resend one ``data_to_send`` encodes
#: (the kit's default ``max_write_buffer``: about what one write takes).
#: A whole window at once (65,536 messages) took a quarter of a second.
DEFAULT_RESEND_CHUNK = 64 * 1024


@dataclass(frozen=True, slots=True, kw_only=True)
class RelinkStatistics:
    """Counters of one connection (not of the link)."""

    bytes_received: int
    bytes_sent: int
    packets_received: int
    packets_sent: int
    messages_received: int
    messages_sent: int
