"""Warnings about what one peer sent, a bounded number of lines per connection.

What a bridge drops without being able to refuse it to its sender (an
Epoxy event: it has no response; a value for a name that is not a topic)
is only logged. One line per dropped input let one client write the
server's log as fast as it could send: 186,000 bad Epoxy ``Publish`` events
in 5 s were 16.7 MB of log. So, per connection, the first
:data:`MAX_PEER_WARNINGS` are logged in full and the rest only counted;
when the connection ends, one more line says how many were not logged. And
each of the peer's texts in a line (a name can be as long as a frame, and
hold newlines) goes through ``rstreams.support.peer_text``: its first
:data:`MAX_LOGGED_TEXT` characters, control characters escaped.

A :class:`PeerWarnings` is one connection's count. A bridge whose code for
one connection is spread over objects that are not handed the connection
(Epoxy's services) sets it in a context variable (:func:`set_peer_warnings`)
for :func:`warn_about_peer`; outside one, every warning is logged.
"""

from __future__ import annotations

import logging
from contextvars import ContextVar

from rstreams.support import peer_text

__all__ = ["MAX_LOGGED_TEXT", "MAX_PEER_WARNINGS", "PeerWarnings", "set_peer_warnings", "warn_about_peer"]

#: Warnings about one connection's input logged in full; the rest are counted.
MAX_PEER_WARNINGS = 5
#: The most characters of one of the peer's texts (a name, an error) in a log line.
MAX_LOGGED_TEXT = 200


class PeerWarnings:
    """The warnings about one connection's input: how many were logged, how many only counted."""

    __slots__ = ("logger", "logged", "unlogged")

    def __init__(self, logger: logging.Logger) -> None:
        self.logger = logger
        self.logged = 0
        self.unlogged = 0

    def warn(self, message: str, *args: object) -> None:
        """Log ``message % args`` as a warning, unless :data:`MAX_PEER_WARNINGS` were logged already."""
        if self.logged >= MAX_PEER_WARNINGS:
            self.unlogged += 1
            return
        self.logged += 1
        self.logger.warning(message, *map(_shown, args))

    def summarize(self, peer: str) -> None:
        """Log how many warnings were counted and not logged, if any (once, at the connection's end)."""
        if self.unlogged:
            self.logger.warning(
                "%s: %d more warnings like the %d above were not logged (at most %d per connection)",
                peer,
                self.unlogged,
                self.logged,
                MAX_PEER_WARNINGS,
            )


_current: ContextVar[PeerWarnings | None] = ContextVar("_current_peer_warnings", default=None)


def warn_about_peer(logger: logging.Logger, message: str, *args: object) -> None:
    """Log a warning about what the peer sent: counted against its connection
    where one was set (:func:`set_peer_warnings`), else on ``logger``."""
    warnings = _current.get()
    if warnings is None:
        logger.warning(message, *map(_shown, args))
    else:
        warnings.warn(message, *args)


def _shown(argument: object) -> object:
    # The peer's names may be as long as a framelet and hold newlines: each
    # text goes into the line as the runtime quotes a peer's text
    # (rstreams' peer_text: cut, control characters escaped).
    if isinstance(argument, (int, float)):
        return argument
    return peer_text(argument if isinstance(argument, str) else str(argument), MAX_LOGGED_TEXT)


def set_peer_warnings(warnings: PeerWarnings) -> None:
    """Count the warnings of this task (and of the tasks it starts after) in ``warnings``."""
    _current.set(warnings)
