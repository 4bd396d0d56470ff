"""The trio side's errors: how a link or one of its connections ended.

The sans-I/O errors (``_errors``) say who broke the protocol; these say what
happened to the transport and the link, for the streams that ran over it.
"""

from __future__ import annotations

from ._errors import RelinkError

__all__ = ["RelinkConnectionLost", "RelinkTimeout", "RelinkClosed"]


class RelinkConnectionLost(RelinkError):
    """The TCP connection dropped (a connector reconnects); or, on a link, it could not be restored in time."""


class RelinkTimeout(RelinkError):
    """The handshake or a pong did not arrive in time (the connection is dropped; a connector reconnects)."""


class RelinkClosed(RelinkError):
    """The link was shut down: by this side (``by_peer`` False) or by both after the peer's shutdown.

    Attributes:
        by_peer: the peer shut the link down first.
    """

    def __init__(self, message: str, *, by_peer: bool = False) -> None:
        super().__init__(message)
        self.by_peer = by_peer
