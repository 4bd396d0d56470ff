"""A Relink link as trio sees it: channels to send on and to receive from, across reconnections.

Theory of operation
-------------------
A :class:`RelinkLink` is the application's handle on one link. It outlives
the TCP connections that carry it: at any time it has at most one open
:class:`~bridges.relink.RelinkConnection` (``_connection``), and while it
has none, calls that need the wire wait for the next one (a connector
reconnects by itself; a listener waits for its connector to come back).
What must survive a drop is in the sans-I/O :class:`LinkState`; what the
application holds is here:

* **Receiving.** Each of the peer's channels is an :class:`InboundChannel`:
  the messages (and, where negotiated, commit and rollback requests) read
  for it, in order. Taking a message *consumes* it: that is the peer's
  demand, acknowledged in batches (``ack_window`` at once, otherwise after
  ``ack_delay``), so the peer never has more than its window of messages
  unconsumed. Consumptions made while no connection is open are counted
  and reported on the next one. The peer's close ends the channel once its
  messages are taken (``trio.EndOfChannel``).
* **Sending.** Each of our channels has a :class:`~bridges.kit.SendWindow`
  of ``send_window`` messages: :meth:`RelinkLink.send` takes room, waits for
  an open connection and a writer that keeps up, then hands the message to
  the machine in one synchronous step. Once handed over, the link resends it
  after a drop until the peer has it: nothing is lost or delivered twice.
  A consumed acknowledgement gives the room back.
* **Ending.** A lost link (the listener's epoch changed, or it forgot the
  link) ends the channels it concerned with :class:`LinkLostError`; giving
  up on reconnecting ends everything with :class:`RelinkConnectionLost`;
  :meth:`RelinkLink.aclose` is the graceful shutdown (close every channel
  after its messages, shutdown both ways), bounded by ``shutdown_timeout``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

import trio

from ..kit import SendWindow, copy_error
from ._errors import LinkLostError, LocalProtocolError
from ._events import (
    ChannelClosed,
    ChannelCloseAcknowledged,
    CommitRequested,
    Committed,
    Consumed,
    Event,
    HandshakeComplete,
    MessageReceived,
    RollbackRequested,
    ShutdownReceived,
    Uncommitted,
)
from ._inbound_channel import InboundChannel
from ._link import LinkState, Role, kept_cost, kept_total
from ._link_errors import RelinkClosed, RelinkConnectionLost
from ._settings import RelinkSettings

if TYPE_CHECKING:
    from ._trio import RelinkConnection

__all__ = ["RelinkLink"]

#: The events that are items of an inbound channel (a tuple: isinstance
#: with one is faster than with a union, once a message).
_CHANNEL_ITEMS = (MessageReceived, CommitRequested, RollbackRequested)


class RelinkLink:
    """The application's handle on a Relink link (see the module docstring).

    Created by :func:`~bridges.relink.open_relink_link` (connector) or given
    to a :func:`~bridges.relink.serve_relink` handler (listener).

    Attributes:
        role: which end of the link this is.
        settings: windows and timeouts.
    """

    def __init__(self, role: Role, settings: RelinkSettings, *, accept_channels: bool) -> None:
        self.role = role
        self.settings = settings
        self.state: LinkState | None = None
        self._accept_channels = accept_channels
        self._connection: RelinkConnection | None = None
        self._lot = trio.lowlevel.ParkingLot()  # woken on any change worth rechecking
        self._inbound: dict[int, InboundChannel] = {}
        self._accepted: deque[InboundChannel] = deque()
        self._windows: dict[int, SendWindow] = {}
        self._close_waiters: dict[int, trio.Event] = {}
        self._commits: dict[tuple[int, int], list[bool | None]] = {}
        self._pending_consumes: dict[int, int] = {}
        self._error: BaseException | None = None
        self._peer_shutdown = False
        self._discarding = False
        self._ended = trio.Event()
        self._held = 0  # bytes held in inbound channels, against max_read_ahead
        self.connections = 0

    # ---- state -------------------------------------------------------------------

    @property
    def connected(self) -> bool:
        """True while a connection carries the link."""
        return self._connection is not None

    @property
    def connection(self) -> RelinkConnection | None:
        """The connection carrying the link now, if any."""
        return self._connection

    @property
    def ended(self) -> bool:
        """True once the link is over (shut down, lost, or given up)."""
        return self._error is not None

    @property
    def end_reason(self) -> BaseException | None:
        """Why the link ended (None while it lives)."""
        return self._error

    @property
    def peer_shutdown(self) -> bool:
        """True once the peer said it will open no more channels."""
        return self._peer_shutdown

    async def wait_ended(self) -> None:
        """Wait until the link is over."""
        await self._ended.wait()

    async def wait_peer_shutdown(self) -> None:
        """Wait until the peer sent its shutdown (or the link ended: then raise why). Always checkpoints."""
        await trio.lowlevel.checkpoint()
        while not self._peer_shutdown:
            if self._error is not None:
                raise copy_error(self._error)
            await self._lot.park()

    async def wait_connected(self) -> None:
        """Wait until a connection carries the link (raises if the link ended). Always checkpoints."""
        await trio.lowlevel.checkpoint()
        await self._open_connection()

    async def wait_disconnected(self) -> None:
        """Wait until no connection carries the link (or it ended). Always checkpoints."""
        await trio.lowlevel.checkpoint()
        while self._connection is not None and self._error is None:
            await self._lot.park()

    # ---- receiving ----------------------------------------------------------------

    def inbound(self, channel: int) -> InboundChannel:
        """The peer's ``channel``: the one holding its messages now, or a new one to receive them."""
        found = self._inbound.get(channel)
        if found is None:
            found = self._inbound[channel] = InboundChannel(self, channel)
            if self._error is not None:
                found._finish(copy_error(self._error))
        return found

    def forget_inbound(self, inbound: InboundChannel) -> None:
        """Drop ``inbound`` from the link's channels if it is still there and holds nothing.

        For a channel claimed with :meth:`inbound` that the peer never used:
        the next :meth:`inbound` of that id starts afresh.
        """
        if self._inbound.get(inbound.id) is inbound and not len(inbound):
            del self._inbound[inbound.id]

    async def accept_channel(self) -> InboundChannel:
        """Wait for a channel the peer opened (by sending on it) that nobody asked for.

        Raises:
            trio.EndOfChannel: the peer shut the link down (it opens no more).
            LinkLostError, RelinkConnectionLost, RelinkClosed: the link ended.

        Cancellation: nothing is taken. Always checkpoints.
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        while not self._accepted:
            if self._error is not None:
                raise copy_error(self._error)
            if self._peer_shutdown:
                raise trio.EndOfChannel
            await self._lot.park()
        channel = self._accepted.popleft()
        await trio.lowlevel.cancel_shielded_checkpoint()
        return channel

    def _consume(self, channel: int, count: int) -> None:
        connection = self._connection
        state = self.state
        if state is None or channel not in state.incoming:
            return  # the channel's state went with a lost link
        if connection is not None and connection.is_open:
            connection.machine.consume(channel, count=count)
            connection.after_call()
        else:
            self._pending_consumes[channel] = self._pending_consumes.get(channel, 0) + count

    def flush_acks(self) -> None:
        """Send the batched consumed acknowledgements now (if a connection is open)."""
        connection = self._connection
        if connection is not None and connection.is_open and connection.machine.pending_acks:
            connection.machine.flush_acks()
            connection.after_call()

    # ---- sending --------------------------------------------------------------------

    def _window(self, channel: int) -> SendWindow:
        window = self._windows.get(channel)
        if window is None:
            window = self._windows[channel] = SendWindow(self.settings.send_window)
            if self._error is not None:
                window.close(self._error)
        return window

    async def _open_connection(self) -> RelinkConnection:
        # The open connection carrying the link, once there is one.
        while True:
            if self._error is not None:
                raise copy_error(self._error)
            connection = self._connection
            if connection is not None and connection.is_open:
                return connection
            await self._lot.park()

    async def _sendable(self, channel: int, size: int) -> tuple[RelinkConnection, int]:
        # An open connection whose writer keeps up, with room in its memory
        # budget for ``size`` more bytes kept until acknowledged (taken: the
        # caller hands them over with after_call(prepaid=...) once the link
        # counts the message), and that can take a message on ``channel`` now (the
        # channel is not closing). Returns the connection and what was taken.
        while True:
            connection = await self._open_connection()
            if connection.write_backlog() > connection.config.max_write_buffer:
                # Ended meanwhile: not this sender's error, the next connection carries the link.
                await connection.wait_writable(or_ended=True)
                continue
            taken = connection.response_limit(size)
            try:
                await connection.budget.take(taken)
            except Exception:
                if connection.ended:
                    continue  # dropped meanwhile: wait for the next one
                raise
            machine = connection.machine
            link = machine.link
            if connection.write_backlog() <= connection.config.max_write_buffer and machine.can_send(channel):
                if link is None or not link.shutdown_requested:
                    return connection, taken
            connection.budget.give_back(taken)
            if link is not None and link.shutdown_requested:
                raise LocalProtocolError("the link is shutting down: no new messages")
            if connection.write_backlog() <= connection.config.max_write_buffer:
                await self._lot.park()  # our close is not acknowledged yet

    async def send(self, channel: int, parts: Iterable[bytes]) -> int:
        """Send a message on our ``channel`` (opening it if needed); its sequence number.

        Waits for room in the channel's window (the peer's consumption), for
        a connection (a drop in between is waited out), and for the writer
        to keep up. A channel whose close is not yet acknowledged is waited
        for; then the message reopens it.

        Raises:
            LocalProtocolError: the message exceeds the limits, or the link is shutting down.
            LinkLostError, RelinkConnectionLost, RelinkClosed: the link ended.

        Cancellation: either the message was handed over (and will arrive)
        or nothing happened. Always checkpoints.
        """
        message = tuple(map(bytes, parts))
        await trio.lowlevel.checkpoint_if_cancelled()
        window = self._window(channel)
        await window.acquire()
        taken = 0
        try:
            connection, taken = await self._sendable(channel, kept_cost(message))
            sequence = connection.machine.send_message(channel, message)
        except BaseException:
            if self._windows.get(channel) is window and window.in_flight:
                window.release()
            if taken:
                connection.budget.give_back(taken)
            raise
        connection.after_call(prepaid=taken)  # the link's count of what it keeps takes over
        return sequence

    async def wait_window(self, channel: int, *, keep: int = 0) -> int:
        """Wait until ``channel``'s window takes a message; how many it takes now (taking none).

        For a sender to wait on before it takes memory for its messages: a
        channel whose peer stops consuming then holds none. ``keep``: room
        left out, for the stream's last message (``SendWindow.wait_room``).
        Raises as :meth:`send` once the link ended. Cancellation: nothing happens.
        """
        window = self._window(channel)
        await window.wait_room(keep)
        return window.available - keep

    async def send_batch(self, channel: int, messages: Sequence[Iterable[bytes]]) -> int:
        """Send the first messages of ``messages`` that the window takes now; how many (at least one).

        The batch form of :meth:`send` for high rates: it waits as
        :meth:`send` does for room for one message, then hands over as many
        as the window has room for, in order, in one step. Loop until all
        are sent.

        Raises:
            LocalProtocolError: a message exceeds the limits (the ones
                before it were handed over), or the link is shutting down.
            and as :meth:`send`.

        Cancellation: either the messages counted were handed over, or
        nothing happened. Always checkpoints.
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        if not messages:
            await trio.lowlevel.cancel_shielded_checkpoint()
            return 0
        window = self._window(channel)
        count = await window.acquire_up_to(len(messages))
        sent = taken = 0
        try:
            batch = [tuple(map(bytes, message)) for message in messages[:count]]
            connection, taken = await self._sendable(channel, kept_total(batch))
            machine = connection.machine
            for message in batch:
                machine.send_message(channel, message)
                sent += 1
        except BaseException:
            if self._windows.get(channel) is window:
                window.release(min(count - sent, window.in_flight))
            if sent:
                connection.after_call(prepaid=taken)
            elif taken:
                connection.budget.give_back(taken)
            raise
        connection.after_call(prepaid=taken)  # the link's count of what it keeps takes over
        return count

    async def close_channel(self, channel: int, *, wait: bool = True) -> None:
        """Close our ``channel`` after its messages; with ``wait``, until the peer acknowledged it.

        A channel that carries nothing (never sent on, or closed already) is
        left as it is. After the acknowledgement the id is free again.

        Raises:
            LinkLostError, RelinkConnectionLost, RelinkClosed: the link ended first.

        Cancellation: the close may have been queued (it will happen).
        Always checkpoints.
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        connection = await self._open_connection()
        link = connection.machine.link
        assert link is not None
        state = link.outgoing.get(channel)
        if state is None:
            await trio.lowlevel.cancel_shielded_checkpoint()
            return
        waiter = self._close_waiters.get(channel)
        if waiter is None:
            waiter = self._close_waiters[channel] = trio.Event()
        if not state.closing:
            connection.machine.close_channel(channel)
            connection.after_call()
        if not wait:
            await trio.lowlevel.cancel_shielded_checkpoint()
            return
        await waiter.wait()
        if self._error is not None and channel in self._close_waiters:
            raise copy_error(self._error)

    async def commit(self, channel: int) -> bool:
        """Ask the peer to commit our messages on ``channel`` so far; True if it committed.

        Raises:
            LocalProtocolError: transactions were not negotiated for our
                channels, or nothing was sent since the last commit or rollback.
            LinkLostError and the link's other ends.

        Cancellation: the commit may have been sent (its answer is dropped).
        Always checkpoints.
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        connection = await self._open_connection()
        sequence = connection.machine.commit(channel)
        connection.after_call()
        slot: list[bool | None] = [None]
        self._commits[channel, sequence] = slot
        try:
            while slot[0] is None:
                if self._error is not None:
                    raise copy_error(self._error)
                await self._lot.park()
        finally:
            self._commits.pop((channel, sequence), None)
        return slot[0]

    async def rollback(self, channel: int) -> None:
        """Ask the peer to ignore our uncommitted messages on ``channel`` (not answered).

        Raises:
            LocalProtocolError: as :meth:`commit`.

        Cancellation: either it was queued or nothing happened. Always checkpoints.
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        connection = await self._open_connection()
        connection.machine.rollback(channel)
        connection.after_call()
        await trio.lowlevel.cancel_shielded_checkpoint()

    async def answer_commit(self, channel: int, sequence: int, *, committed: bool) -> None:
        """Answer the peer's oldest unanswered :class:`CommitRequested` on ``channel``.

        Raises:
            LocalProtocolError: that is not the oldest unanswered commit.

        Cancellation: either the answer was queued or nothing happened. Always checkpoints.
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        connection = await self._open_connection()
        connection.machine.answer_commit(channel, sequence, committed=committed)
        connection.after_call()
        await trio.lowlevel.cancel_shielded_checkpoint()

    # ---- ending -------------------------------------------------------------------------

    def discard_inbound(self) -> None:
        """Consume whatever the peer sends from now on (nobody will read it)."""
        self._discarding = True
        for channel in list(self._inbound.values()):
            channel.discard()
        for channel in self._accepted:
            channel.discard()

    async def aclose(self) -> None:
        """Shut the link down gracefully; then it is over.

        Every channel of ours is closed after its messages, inbound messages
        are discarded, and the shutdown packet goes out once the peer has
        consumed everything; the link is over once both peers have sent
        shutdown, or after ``shutdown_timeout``. Idempotent. Always checkpoints.
        """
        await trio.lowlevel.checkpoint()
        if self._error is None:
            self.discard_inbound()
            with trio.move_on_after(self.settings.shutdown_timeout):
                while self._error is None:
                    connection = self._connection
                    if connection is not None and connection.is_open:
                        link = connection.machine.link
                        if link is not None and not link.shutdown_requested:
                            connection.machine.send_shutdown()
                            connection.after_call()
                    await self._lot.park()
            self._fail(RelinkClosed("the link was shut down by this side"))
        connection = self._connection
        if connection is not None:
            await connection.aclose()

    # ---- from the connection ------------------------------------------------------------

    @property
    def held_bytes(self) -> int:
        """Bytes received and held for the application (each message counting 64 more)."""
        return self._held

    def _hold(self, size: int) -> None:
        self._held += size

    def _release(self, size: int) -> None:
        self._held -= size
        connection = self._connection
        if connection is not None and size:
            connection.wake_reader()

    def reading_paused(self) -> bool:
        """True while what is held reaches ``max_read_ahead``: the connection stops reading."""
        return self._held >= self.settings.max_read_ahead

    def _wake(self) -> None:
        self._lot.unpark_all()

    def _attach(self, connection: RelinkConnection, event: HandshakeComplete) -> None:
        previous = self._connection
        if previous is not None and previous is not connection:
            previous.drop(RelinkConnectionLost("a newer connection took the link over"))
        if event.lost_outgoing or event.lost_incoming:
            self._lose_channels(
                LinkLostError(
                    "the listener started a new link: the old link's state was discarded",
                    outgoing=event.lost_outgoing,
                    incoming=event.lost_incoming,
                ),
                event.lost_outgoing,
                event.lost_incoming,
            )
        self.state = connection.machine.link
        self._connection = connection
        self.connections += 1
        pending, self._pending_consumes = self._pending_consumes, {}
        for channel, count in pending.items():
            self._consume(channel, count)
        connection.after_call()
        self._wake()

    def _detach(self, connection: RelinkConnection, error: BaseException) -> None:
        if self._connection is connection:
            self._connection = None
            self._wake()

    def _lose_channels(self, error: LinkLostError, outgoing: Iterable[int], incoming: Iterable[int]) -> None:
        for channel in incoming:
            self._pending_consumes.pop(channel, None)
            inbound = self._inbound.pop(channel, None)
            if inbound is not None:
                inbound._finish(copy_error(error))
        for channel in outgoing:
            window = self._windows.pop(channel, None)
            if window is not None:
                window.close(error)
            waiter = self._close_waiters.get(channel)
            if waiter is not None:
                waiter.set()
            for key in [key for key in self._commits if key[0] == channel]:
                self._commits.pop(key)
        self._wake()

    def _lose(self, error: LinkLostError) -> None:
        # The connector required its old link and the listener refused it.
        self._fail(error)

    def _shut_down(self) -> None:
        self._fail(RelinkClosed("the link was shut down", by_peer=self._peer_shutdown))

    def _fail(self, error: BaseException) -> None:
        # The link is over: every channel and waiter ends with ``error``.
        if self._error is not None:
            return
        self._error = error
        for inbound in self._inbound.values():
            inbound._finish(copy_error(error))
        for inbound in self._accepted:
            inbound._finish(copy_error(error))
        for window in self._windows.values():
            window.close(error)
        for waiter in self._close_waiters.values():
            waiter.set()
        self._ended.set()
        self._wake()

    def _on_event(self, event: Event) -> None:
        if isinstance(event, _CHANNEL_ITEMS):
            inbound = self._inbound.get(event.channel)
            if inbound is None:
                inbound = self._inbound[event.channel] = InboundChannel(self, event.channel)
                if self._discarding:
                    inbound._discarding = True
                elif self._accept_channels and not self._peer_shutdown:
                    self._accepted.append(inbound)
                    self._wake()
            inbound._put(event)
        elif isinstance(event, Consumed):
            window = self._windows.get(event.channel)
            if window is not None:
                window.release(min(event.count, window.in_flight))
            self._wake()
        elif isinstance(event, ChannelClosed):
            inbound = self._inbound.pop(event.channel, None)
            if inbound is not None:
                inbound._finish(trio.EndOfChannel())
        elif isinstance(event, ChannelCloseAcknowledged):
            waiter = self._close_waiters.pop(event.channel, None)
            if waiter is not None:
                waiter.set()
            window = self._windows.get(event.channel)
            if window is not None and not window.in_flight:
                del self._windows[event.channel]  # ids come and go: keep only live windows
            self._wake()
        elif isinstance(event, Committed | Uncommitted):
            slot = self._commits.get((event.channel, event.sequence))
            if slot is not None:
                slot[0] = isinstance(event, Committed)
                self._wake()
        elif isinstance(event, ShutdownReceived):
            self._peer_shutdown = True
            self._wake()
        # Received, Resumed: the machine's business.

    def __repr__(self) -> str:
        state = f" link {self.state.link_id}" if self.state is not None else ""
        return f"<RelinkLink {self.role.value}{state} {'connected' if self.connected else 'disconnected'}>"

