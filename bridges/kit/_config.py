"""The settings every bridge connection shares: timeouts and buffer bounds."""

from __future__ import annotations

import math
from dataclasses import dataclass

from rstreams.protocol import DEFAULT_CONNECTION_MEMORY
from rstreams.support import DEFAULT_LOOPBACK_CONGESTION_CONTROL, check_congestion_control

__all__ = ["LinkSettings", "KiB", "MiB", "check_count"]

KiB = 1024
MiB = 1024 * KiB


def check_count(name: str, value: object) -> None:
    """A bound that counts things (connections, subscriptions, calls in
    flight, a window): an ``int`` of at least 1. A float such as 1.5 or
    nan, which a ``<= 0`` test lets through, is refused as well.

    Raises:
        ValueError: it is not one.
    """
    if type(value) is not int or value < 1:
        raise ValueError(f"{name} must be positive (an int), got {value!r}")


@dataclass(frozen=True, slots=True, kw_only=True)
class LinkSettings:
    """Timeouts and buffer bounds of one bridge connection.

    A bridge's own settings class subclasses this one, adds its protocol's
    options (framing, limits) and may change the defaults to its protocol's
    customs (Relink pings after 11 s idle, EMP every 30 s).

    Attributes:
        handshake_timeout: seconds to wait for the peer's side of the
            handshake; then the protocol's timeout error and close.
        keepalive_interval: seconds between keepalive pings (with
            ``keepalive_when_idle``: seconds of silence from the peer before
            one); None: no pings.
        keepalive_when_idle: ping only after ``keepalive_interval`` seconds
            in which nothing arrived, rather than on a fixed beat.
        ping_timeout: seconds a pong may take; then the protocol's timeout
            error and close.
        max_read_ahead: bytes read but not yet taken by the application;
            beyond it the reader stops (at least one message is always read).
        receive_size: the most bytes asked of the transport per read.
        max_write_buffer: bytes queued and not yet written beyond which a
            send waits for the transport (0: every send waits until its
            message is written).
        close_timeout: seconds to flush the last words and close.
        max_connection_memory: the one memory budget of the connection
            (:class:`~bridges.kit.MemoryBudget`), in bytes: everything the
            connection holds counts against it (the peer's unparsed and
            reassembled input, items read ahead, responses being built,
            bytes queued for writing). Reading stops while it is
            exhausted; a peer whose input alone fills it is closed with the
            protocol's error, "memory budget exceeded". Default
            ``rstreams.protocol.DEFAULT_CONNECTION_MEMORY`` (64 MiB), the
            same as every rstreams connection's.
        loopback_congestion_control: the TCP congestion control of a
            connection whose peer is on this machine's loopback, as
            ``rstreams.SessionConfig``'s (default ``"reno"``, which does not
            pace; None keeps the host's choice).
        tcp_keepalive: seconds (an int, 1 to 32767) a TCP connection may
            be silent before the kernel probes its peer (``SO_KEEPALIVE``:
            then a probe every 10 s, and 6 unanswered reset it), so that a
            peer that vanished without a word (power loss, a partition) is
            found within about two minutes, also over protocols with no
            ping (MicroMsg2, Epoxy) (see ``bridges.kit._keepalive``);
            None leaves the host's default (off).
        idle_timeout: seconds of silence from the peer after which the
            connection is closed with the protocol's error (``idle
            timeout: ...``), while either it holds nothing open (the
            bridge says when: no subscription, request or call pending)
            or a message of the peer's is begun and stalled; None (the
            default) never. Not counted while this side holds the peer
            back (its read-ahead or budget is full). ``rstreams serve``
            gives its ``--idle-timeout`` to every bridge's listeners, as to
            its own sessions: a peer that goes quiet holds no connection
            slot for ever, also over protocols with no ping.
    """

    handshake_timeout: float = 10.0
    keepalive_interval: float | None = 30.0
    keepalive_when_idle: bool = False
    ping_timeout: float = 10.0
    max_read_ahead: int = 1 * MiB
    receive_size: int = 64 * KiB
    max_write_buffer: int = 64 * KiB
    close_timeout: float = 1.0
    max_connection_memory: int = DEFAULT_CONNECTION_MEMORY
    loopback_congestion_control: str | None = DEFAULT_LOOPBACK_CONGESTION_CONTROL
    tcp_keepalive: int | None = 60
    idle_timeout: float | None = None

    def __post_init__(self) -> None:
        for name in ("handshake_timeout", "ping_timeout", "close_timeout"):
            # Finite: each bounds a wait on the peer (infinity would let a
            # silent peer hold its connection for ever).
            if not 0 < getattr(self, name) < math.inf:  # also refuses nan
                raise ValueError(f"{name} must be positive and finite, got {getattr(self, name)!r}")
        if self.keepalive_interval is not None and not 0 < self.keepalive_interval < math.inf:
            raise ValueError("keepalive_interval must be positive and finite, or None")
        if self.idle_timeout is not None and not 0 < self.idle_timeout < math.inf:
            raise ValueError(f"idle_timeout must be positive and finite, or None, got {self.idle_timeout!r}")
        check_count("receive_size", self.receive_size)
        for name in ("max_read_ahead", "max_write_buffer"):
            if type(getattr(self, name)) is not int or getattr(self, name) < 0:
                raise ValueError(f"{name} must be an int >= 0, got {getattr(self, name)!r}")
        if type(self.max_connection_memory) is not int or self.max_connection_memory <= 0:
            raise ValueError(f"max_connection_memory must be a positive int, got {self.max_connection_memory!r}")
        if self.receive_size > self.max_connection_memory:
            # (A read's buffer is the connection's; 10**30 died in os.read.)
            raise ValueError(
                f"receive_size ({self.receive_size} bytes) must fit in max_connection_memory"
                f" ({self.max_connection_memory} bytes)"
            )
        check_congestion_control(self.loopback_congestion_control)
        keepalive = self.tcp_keepalive
        if keepalive is not None and (type(keepalive) is not int or not 1 <= keepalive <= 32767):
            raise ValueError(f"tcp_keepalive must be an int of seconds from 1 to 32767, or None, got {keepalive!r}")
