"""The trio side's settings: the kit's timeouts, Go's Relink defaults, and reconnection.

:class:`RelinkSettings` is a :class:`~bridges.kit.LinkSettings` with the
Relink customs (ping after 11 s of silence, pong within 7 s, handshake within
10 s: the Go implementation's defaults, from ``_config``) and what only a
link that outlives its TCP connections needs: how a connector reconnects
and how long a listener keeps a link nobody is connected to.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..kit import LinkSettings, MiB
from ._config import (
    DEFAULT_ACK_DELAY,
    DEFAULT_HANDSHAKE_TIMEOUT,
    DEFAULT_PING_INTERVAL,
    DEFAULT_PONG_TIMEOUT,
    DEFAULT_SEND_WINDOW,
)
from ._packets import DEFAULT_LIMITS, RelinkLimits

__all__ = ["RelinkSettings", "DEFAULT_SETTINGS"]


@dataclass(frozen=True, slots=True, kw_only=True)
class RelinkSettings(LinkSettings):
    """Settings of a Relink link and of each TCP connection that carries it.

    Attributes:
        max_read_ahead: bytes received and not yet taken by the application,
            over all of the link's channels (each message counts 64 more),
            beyond which the connection stops reading. Default 8 MiB.
        send_window: most messages per channel sent and not acknowledged
            consumed (the peer's demand). Default 65,536.
        ack_window: consumed messages acknowledged at once; fewer wait
            ``ack_delay``. Default a quarter of ``send_window``.
        ack_delay: seconds a consumed acknowledgement may wait to be batched.
        limits: what the peer may send (and we send).
        reconnect_delay: connector: seconds before the first reconnection
            attempt; doubled after each failed attempt ...
        reconnect_max_delay: ... up to this many seconds (Go: 60).
        reconnect_timeout: connector: seconds without a connection after
            which the link is given up (its streams end with
            :class:`~bridges.relink.RelinkConnectionLost`); None: never.
        link_timeout: listener: seconds a link with no connection is kept
            for its connector to come back; then it is forgotten (a
            connector that comes later gets a new link, and its streams end
            with :class:`~bridges.relink.LinkLostError`).
        shutdown_timeout: seconds a graceful shutdown (every channel closed
            and acknowledged, shutdown both ways) may take before the
            connection is simply closed.
    """

    handshake_timeout: float = DEFAULT_HANDSHAKE_TIMEOUT
    keepalive_interval: float | None = DEFAULT_PING_INTERVAL
    keepalive_when_idle: bool = True
    ping_timeout: float = DEFAULT_PONG_TIMEOUT
    max_read_ahead: int = 8 * MiB
    send_window: int = DEFAULT_SEND_WINDOW
    ack_window: int | None = None
    ack_delay: float = DEFAULT_ACK_DELAY
    limits: RelinkLimits = field(default=DEFAULT_LIMITS)
    reconnect_delay: float = 0.05
    reconnect_max_delay: float = 5.0
    reconnect_timeout: float | None = 60.0
    link_timeout: float = 60.0
    shutdown_timeout: float = 2.0

    def __post_init__(self) -> None:
        super(RelinkSettings, self).__post_init__()
        if type(self.send_window) is not int or not 1 <= self.send_window < 2**31:
            raise ValueError(f"send_window must be an int in [1, 2**31), got {self.send_window!r}")
        if self.ack_window is not None and (type(self.ack_window) is not int or self.ack_window < 1):
            raise ValueError(f"ack_window must be a positive int or None, got {self.ack_window!r}")
        for name in ("ack_delay", "reconnect_delay", "reconnect_max_delay", "link_timeout", "shutdown_timeout"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be positive")
        if self.reconnect_timeout is not None and not self.reconnect_timeout > 0:
            raise ValueError("reconnect_timeout must be positive or None")


DEFAULT_SETTINGS = RelinkSettings()
