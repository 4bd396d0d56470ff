"""The trio adapter of one TCP (or TLS) connection carrying a Relink link.

Built on the kit's :class:`~bridges.kit.BridgeConnection` (reader, writer,
keepalive after idle, handshake timeout, how it ends). A Relink *link*
outlives its connections, so this class does little of its own: it runs the
sans-I/O :class:`~bridges.relink.Connection`, hands the link's events to the
:class:`~bridges.relink.RelinkLink` it carries, and arms the short timer
that sends batched consumed acknowledgements.

Relink has its own flow control (a sender keeps at most its window of
messages unconsumed per channel, and the machine refuses a peer that sends
more), so the reader reads whether or not anyone waits: reading is what
lets acknowledgements and pongs through. But windows count messages, not
bytes, and a peer may open many channels, so it stops while the link holds
``max_read_ahead`` bytes the application has not taken (8 MiB by default;
each message counts 64 bytes more): past that bound TCP holds the rest, and
one channel's slow reader holds back the others (head-of-line blocking,
only there).

After a resume, what the peer lacks (up to a window per channel) is not
queued in one step: the writer pulls it from the machine
(``Connection.queue_resend``), ``max_write_buffer`` bytes at a time, each
time its queue runs dry, so that encoding a resend takes turns with every
other task (the writer's ``send_all`` between two pulls is a checkpoint)
and is paced by what the transport takes.

How it ends: the peer's end of file or a write that fails is
:class:`RelinkConnectionLost`; a missing handshake or pong is
:class:`RelinkTimeout`; a protocol violation is the machine's
``RemoteProtocolError``; both shutdowns are a normal end. None of these
ends the link, except a shutdown: a connector reconnects, a listener keeps
the link for its connector to come back.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import trio
from trio.lowlevel import enable_ki_protection

from ..kit import BridgeConnection
from ._connection import Connection
from ._errors import HandshakeRejected, LinkLostError
from ._events import (
    ConnectionClosed,
    Event,
    HandshakeComplete,
    LinkRefused,
    LinkRequested,
    LinkShutdown,
    MessageReceived,
    Ping,
    Pong,
)
from ._handshake import VERSION_SIZE, HandshakeRequest
from ._link import Role
from ._link_errors import RelinkClosed, RelinkConnectionLost, RelinkTimeout
from ._settings import RelinkSettings
from ._state import ConnectionState

if TYPE_CHECKING:
    from ._trio_link import RelinkLink

__all__ = ["ConnectionEnded", "LinkDecision", "RelinkConnection"]

#: The listener's decision on a connector's request: called with the
#: connection and the request; it calls ``connection.machine.accept_link``
#: and sets ``connection.handle`` (or leaves it None when it refused).
LinkDecision = Callable[["RelinkConnection", HandshakeRequest], None]
#: Called once, synchronously, when a connection has ended (after its link
#: was detached from it): the listener's count of open connections and its
#: log of a peer's violation.
ConnectionEnded = Callable[["RelinkConnection"], None]


class RelinkConnection(BridgeConnection[Connection, RelinkSettings]):
    """One transport connection of a Relink link (see the module docstring).

    Args:
        stream: the connected transport.
        machine: the sans-I/O connection (a connector's, or a listener's).
        settings: timeouts and windows.
        handle: connector: the link this connection carries.
        decide: listener: how to answer the connector's link request.
        on_end: called with the connection once it has ended, whatever
            ended it (the link, if it carried one, is detached by then).
    """

    def __init__(
        self,
        stream: trio.abc.Stream,
        machine: Connection,
        settings: RelinkSettings,
        *,
        handle: RelinkLink | None = None,
        decide: LinkDecision | None = None,
        on_end: ConnectionEnded | None = None,
    ) -> None:
        super().__init__(stream, machine, settings)
        self.handle = handle
        self.resumed = False
        self._decide = decide
        self._on_end = on_end
        self._ack_timer_armed = False
        machine.resend_chunk = settings.max_write_buffer  # a resend pulled a write at a time

    @property
    def machine(self) -> Connection:
        """The sans-I/O connection (for the link handle; call :meth:`after_call` after using it)."""
        return self._machine

    @property
    def is_open(self) -> bool:
        """True while packets flow (handshake done, not ended)."""
        return self._end is None and self._machine.state is ConnectionState.OPEN

    # ---- the kit's hooks --------------------------------------------------------

    def _dispatch(self, event: Event) -> None:
        # A message (nearly every event) skips the connection's own checks.
        if (type(event) is MessageReceived or not self._handled_here(event)) and self.handle is not None:
            self.handle._on_event(event)

    def _handled_here(self, event: Event) -> bool:
        """Whether ``event`` is the connection's own, handled here; the
        others are the link's."""
        if isinstance(event, LinkRequested):
            assert self._decide is not None, "a connector's machine never asks for a link decision"
            self._decide(self, event.request)
            if self._machine.state is ConnectionState.CLOSED:
                # Refused: the zero link id is queued; the writer flushes it and closes.
                self._finish(LinkLostError("the connector required a link this listener does not know"))
            return True
        if isinstance(event, HandshakeComplete):
            self.resumed = event.resumed
            self._handshake_complete()
            assert self.handle is not None
            self.handle._attach(self, event)
            return True
        if isinstance(event, LinkRefused):
            error = LinkLostError(
                "the listener no longer knows this link",
                outgoing=event.lost_outgoing,
                incoming=event.lost_incoming,
            )
            if self.handle is not None:
                self.handle._lose(error)
            self._finish(error)
            return True
        if isinstance(event, Pong):
            self._pong_received()
            return True
        if isinstance(event, Ping):
            return True  # the machine queued the pong
        if isinstance(event, LinkShutdown):
            if self.handle is not None:
                self.handle._shut_down()
            self._finish(RelinkClosed("the link was shut down by both peers"), normal=True)
            return True
        if isinstance(event, ConnectionClosed):
            self._finish(self._hung_up() if self._awaiting_reply() else self._lost("the peer closed the connection"))
            return True
        return False

    def _wants_more_input(self) -> bool:
        # Relink's windows bound what the peer sends: read (see the module docstring).
        return True

    def _read_paused_by_protocol(self) -> bool:
        # ... unless the application holds max_read_ahead unread: then TCP holds the rest.
        return self.handle is not None and self.handle.reading_paused()

    def _awaiting_reply(self) -> bool:
        # A connector past the listener's version block (so its request went
        # out) and short of the reply.
        return (
            self._machine.role is Role.CONNECTOR
            and not self._handshake_done.is_set()
            and self._bytes_in >= VERSION_SIZE
        )

    def _queue_ping(self) -> None:
        self._machine.send_ping()

    def _hung_up(self) -> BaseException:
        # The listener read our request and closed the connection instead of
        # replying: the spec's way to refuse an endpoint or a config it does
        # not offer. (A reset or a failed write is not that: a connection
        # that broke, RelinkConnectionLost like any other.)
        return HandshakeRejected(
            "the listener closed the connection instead of replying to our handshake:"
            " it does not offer this endpoint with these channel id sizes and transaction flags"
            " (or the connection dropped: the spec's refusal looks the same)"
        )

    def _lost(self, message: str) -> BaseException:
        return RelinkConnectionLost(message)

    def _input_held_for_application(self) -> int:
        # The link's channels hold what the application has not taken; the
        # link outlives this connection, so the connection carrying it
        # counts it (from the moment it attaches).
        return self.handle.held_bytes if self.handle is not None and self._carries_link() else 0

    def _carries_link(self) -> bool:
        return self.handle is not None and self.handle.connection is self

    def _output_kept(self) -> int:
        # Our messages the link keeps until the peer acknowledges them
        # consumed (to resend): ours to hold, counted here while this
        # connection carries the link; acknowledgements free them.
        link = self._machine.link
        return link.kept_memory if link is not None and self._carries_link() else 0

    def _input_frees_budget(self) -> bool:
        return self._output_kept() > 0

    def _closed_locally(self) -> BaseException:
        return RelinkConnectionLost("connection closed by this side")

    def _ping_timed_out(self) -> BaseException:
        return RelinkTimeout(f"no pong within {self.config.ping_timeout} s")

    def _handshake_timed_out(self) -> BaseException:
        return RelinkTimeout(f"no handshake within {self.config.handshake_timeout} s")

    def _on_finish(self, error: BaseException) -> None:
        if self.handle is not None:
            self.handle._detach(self, error)
        if self._on_end is not None:
            self._on_end(self)

    async def _handshake(self) -> None:
        # A listener's prelude may have fed the machine the whole request
        # already: process it before waiting for more bytes that won't come.
        self._process()
        await super()._handshake()

    # ---- for the link handle ---------------------------------------------------------

    def after_call(self, *, prepaid: int = 0) -> None:
        """Take what a call on :attr:`machine` queued; arm the ack timer if acknowledgements wait.

        ``prepaid``: bytes of :attr:`budget` the caller took for the
        messages it had the machine send: given back once what they queued,
        and what the link keeps of them, is counted (the kit's hand-over).
        """
        if self._machine.pending_acks and not self._ack_timer_armed and self._nursery is not None:
            self._ack_timer_armed = True
            self._nursery.start_soon(self._flush_acks_later)
        self._hand_over(prepaid)  # counts what the link keeps of our messages too

    @enable_ki_protection
    async def _flush_acks_later(self) -> None:
        # Go's MessageAckDelay: consumed acknowledgements below the ack window
        # go out this long after the first; one timer for all channels.
        try:
            await trio.sleep(self.config.ack_delay)
        finally:
            self._ack_timer_armed = False
        if self.is_open:
            self._machine.flush_acks()
            self._take_output()

    def wake_reader(self) -> None:
        """The application took held messages: the reader may go on."""
        self._count_machine_input()
        self._wake_reader()

    def _take_output(self) -> int:
        # As the kit's, except that a resend is left for the writer to pull
        # while it has a queue (the machine encodes a piece of it only when
        # nothing else is queued: Connection.data_to_send).
        if self._outgoing and not self._machine.output_size:
            return self._queued
        return super()._take_output()

    def _next_chunk(self) -> bytes:
        # The writer takes its next write; if that empties its queue, the
        # next piece of a resend is pulled now, to be written after this one.
        chunk = super()._next_chunk()
        if not self._outgoing and self._end is None:
            super()._take_output()
        return chunk

    def write_backlog(self) -> int:
        """Bytes queued for the writer and not yet written."""
        return self._queued - self._written

    async def wait_writable(self, *, or_ended: bool = True) -> None:
        """As the kit's, but by default returning once the connection has
        ended (``or_ended``), as this method always did here: a link's
        sender then looks for the next connection."""
        await super().wait_writable(or_ended=or_ended)

    def drop(self, error: BaseException) -> None:
        """End this connection with ``error`` without a word (a newer one took the link over)."""
        self._finish(error)
        self._take_output()

    def __repr__(self) -> str:
        return f"<RelinkConnection {self._machine!r}>"
