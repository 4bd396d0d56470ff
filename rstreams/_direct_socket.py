"""Reading and writing a plain TCP socket without trio's per-call overhead.

A session's writer task is the one place that *waits* to write: it sleeps
until something is queued, and blocks while the peer does not read. Handing
it every answer costs a scheduling pass (the writer must be woken, run, and
checkpoint), which is most of the cost of a request-response round trip.
When the writer has nothing in hand, the task that just queued a message
(the reader answering a subscribe, a caller sending one) may instead hand
the bytes straight to the kernel: a non-blocking ``write`` either takes
them, takes part of them (the writer then sends the rest, before anything
else), or takes none. Nothing waits, so the reader still never blocks on the
peer, and order is kept because only an idle writer is bypassed. This is
what asyncio's transports do on every ``write``; trio's ``SocketStream``
has no such call (``send_all`` always checkpoints).

The reader's side follows asyncio too: after a read that did not fill its
buffer the socket is most likely empty, so it waits for readability before
reading, instead of trying a read that finds nothing (a system call and an
exception) as ``SocketStream.receive_some`` does; after a full read it reads
again at once. Either way it behaves as ``receive_some`` does: the same
errors, a checkpoint on every call, nothing read when cancelled.

A read may also *busy-poll*: try the socket, let the other tasks run, try
again, for a short window before sleeping in ``epoll``. The session asks for
it when the peer's next message is due: a ``fetch`` waits for its answer,
the peer's subscribes were just answered and a request-response peer sends
the next as soon as it has the answer, or a stream's elements just arrived
and more are on their way; and it says for how long. On a
machine whose other cores sleep when idle (any VM, most laptops), waking a
sleeping core to deliver the answer costs tens of microseconds on each
side: on loopback that was more than a third of a whole round trip.
Polling keeps this core awake for the answer that is due, the way Linux's
``SO_BUSY_POLL`` and Aeron's back-off idle strategy do. Whether to poll is
the session's choice; here it is bounded to one window per read, and to
one polling read at a time in the whole trio run: while one task polls,
the run loop checks every socket for readiness on each pass without
sleeping, so one poller keeps the core awake for all of them, and more
would only spend the run loop's passes on reads that find nothing (16
sessions each polling their own socket measured 40% slower).

Large elements are written without copying them: ``send_buffers`` takes the
list ``Connection.buffers_to_send`` returns (the bytes around each large
split part, and views of the parts themselves) and writes it with one
gathering ``writev`` per wake-up, as ``send_all`` would write their
concatenation; ``send_buffers_now`` is the same write for a task that
must not wait (see ``send_now``), the rest left to the writer. The other
way, ``receive_into`` reads with one scattering ``readv`` into the buffers
``Connection.receive_buffers`` offers (the rest of a large element of a
``copy=False`` stream, in the buffer it is handed over in).

Another task may read for the reader (``read_for_reader``,
``read_into_for_reader``: a consumer that would otherwise park until the
reader has read and woken it, see ``Session._receive_now``), but only while
the reader waits in ``receive_some`` with nothing read yet
(``reader_idle``): what it reads then comes before anything the reader
reads later, and the reader, woken with nothing left, waits again. A read
the reader has made and not yet returned (it checkpoints first) must be
handled before anything read after it, so that state does not qualify.

Only plain TCP streams qualify: TLS and WebSocket frame what they send and
receive, and always go through trio's streams. A write to a connection the
peer has reset fails with ``EPIPE`` exactly as trio's own ``send`` does
(CPython ignores ``SIGPIPE``), and is left to the writer to report.
"""

from __future__ import annotations

import errno
import os
import select
import time
from collections.abc import Callable
from typing import TypeVar

import trio

__all__ = ["DirectSocket", "direct_socket"]

_Arg = TypeVar("_Arg")
_Result = TypeVar("_Result")
# As trio's SocketStream: these mean the socket was closed under us.
_CLOSED_ERRNOS = frozenset({errno.EBADF, errno.ENOTSOCK})
# Buffers per writev: POSIX guarantees IOV_MAX >= 16; Linux allows 1024.
_MAX_BUFFERS = min(os.sysconf("SC_IOV_MAX"), 1024) if hasattr(os, "sysconf") else 16


def written_through(pending: list[bytearray | memoryview], first: int, sent: int) -> int:
    """A gathering write took ``sent`` bytes of ``pending[first:]``: return
    the index of the first buffer not written whole, after cutting what was
    written off its front (``pending`` is changed in place; empty buffers
    at the front are passed over). The one piece of bookkeeping a partial
    ``writev`` needs, kept apart so that it can be tested alone."""
    while sent:
        length = len(pending[first])
        if sent >= length:
            sent -= length
            first += 1
        else:
            pending[first] = memoryview(pending[first])[sent:]
            sent = 0
    while first < len(pending) and not len(pending[first]):
        first += 1
    return first


class _PollSlot:
    """Whether a read busy-polls in this trio run (one at a time)."""

    __slots__ = ("taken",)

    def __init__(self) -> None:
        self.taken = False


_poll_slot: trio.lowlevel.RunVar[_PollSlot] = trio.lowlevel.RunVar("rstreams_poll_slot")


def _this_runs_poll_slot() -> _PollSlot:
    try:
        return _poll_slot.get()
    except LookupError:
        slot = _PollSlot()
        _poll_slot.set(slot)
        return slot


def direct_socket(stream: trio.abc.Stream) -> DirectSocket | None:
    """Direct I/O on ``stream``'s socket, or None if it cannot have it."""
    if os.name != "posix" or type(stream) is not trio.SocketStream:
        return None
    return DirectSocket(stream)


class DirectSocket:
    """Non-blocking writes and lean reads on one ``trio.SocketStream``'s socket.

    The stream still owns the socket (and closes it); this only reads and
    writes its file descriptor, looked up on each call: a closed socket
    reports -1, and its old number may already belong to another file.
    """

    __slots__ = ("_socket", "_read_at_once", "_slot", "_reader_idle")

    def __init__(self, stream: trio.SocketStream) -> None:
        self._socket = stream.socket
        self._read_at_once = True
        self._slot: _PollSlot | None = None  # found on the first poll, inside the run
        # True while a receive_some waits for data with nothing read yet:
        # the one state in which another task may read (see read_for_reader).
        self._reader_idle = False

    def send_now(self, data: bytes | bytearray | memoryview) -> int:
        """Write what the socket takes of ``data`` at once; return how many
        bytes that was: 0 when its buffer is full, it is closed, or the write
        failed (the writer then meets the same error and reports it)."""
        fd = self._socket.fileno()
        if fd < 0:
            return 0
        try:
            return os.write(fd, data)
        except OSError:
            return 0

    def send_buffers_now(self, buffers: list[bytearray | memoryview]) -> int:
        """As :meth:`send_now`, for buffers written in order as if joined
        (a gathering ``writev``, nothing copied): how many bytes the socket
        took at once, 0 when it took none or the write failed (the writer
        then meets the same error and reports it)."""
        if len(buffers) == 1:
            return self.send_now(buffers[0])
        fd = self._socket.fileno()
        if fd < 0:
            return 0
        try:
            return os.writev(fd, buffers if len(buffers) <= _MAX_BUFFERS else buffers[:_MAX_BUFFERS])
        except OSError:
            return 0

    async def send_buffers(self, buffers: list[bytearray | memoryview]) -> bool:
        """As ``trio.SocketStream.send_all`` on the buffers joined, without
        joining them: ``trio.BrokenResourceError`` if the connection broke,
        ``trio.ClosedResourceError`` if the socket was closed. Always
        checkpoints; if cancelled, part of the data may have been written
        (as with ``send_all``, the stream is then unusable).

        Returns whether the socket was full on the way (the write waited
        for room): the writer then waits for room before it collects its
        next write (see ``has_room`` for the other case)."""
        await trio.lowlevel.checkpoint_if_cancelled()
        pending = buffers
        first = 0  # buffers before this index are written
        waited = False
        while first < len(pending):
            fd = self._socket.fileno()
            if fd < 0:
                raise trio.ClosedResourceError("this socket was already closed")
            try:
                sent = os.writev(fd, pending[first : first + _MAX_BUFFERS])
            except BlockingIOError:
                waited = True
                await self._wait_writable()
                continue
            except OSError as exc:
                if exc.errno in _CLOSED_ERRNOS:
                    raise trio.ClosedResourceError("this socket was already closed") from None
                raise trio.BrokenResourceError(f"socket connection broken: {exc}") from exc
            first = written_through(pending, first, sent)
        await trio.lowlevel.cancel_shielded_checkpoint()
        return waited

    def has_room(self) -> bool:
        """Whether the socket would take more now (``POLLOUT``, without
        waiting): one ``poll`` call, no epoll registration and no pass of
        the run loop. True for a closed socket (the next write says why)."""
        fd = self._socket.fileno()
        if fd < 0:
            return True
        poller = select.poll()
        poller.register(fd, select.POLLOUT)
        return bool(poller.poll(0))

    async def receive_into(self, buffers: list[memoryview | bytearray]) -> int:
        """As ``receive_some``, into ``buffers`` (filled in order, by one
        scattering ``readv``) instead of new bytes: how many bytes were
        received, 0 at end of stream. Reading stops at the socket's
        data, so the buffers may be filled only in part. Never polls: it
        is for the rest of a large element, which is already arriving."""
        await trio.lowlevel.checkpoint_if_cancelled()
        if self._read_at_once:
            received = self._read_into(buffers)
            if received is not None:
                await trio.lowlevel.cancel_shielded_checkpoint()
                return received
        while True:
            await self._wait_readable()
            received = self._read_into(buffers)
            if received is not None:
                return received

    def _read_into(self, buffers: list[memoryview | bytearray]) -> int | None:
        if len(buffers) > _MAX_BUFFERS:
            buffers = buffers[:_MAX_BUFFERS]
        received: int | None = self._attempt(os.readv, buffers)
        if received is not None:
            # As _read: a read that filled every buffer suggests more is waiting.
            self._read_at_once = received >= sum(map(len, buffers))
        return received

    async def receive_some(self, max_bytes: int, *, poll_for: float = 0.0) -> bytes:
        """As ``trio.SocketStream.receive_some``: up to ``max_bytes``, b"" at
        end of stream; ``trio.BrokenResourceError`` if the connection broke,
        ``trio.ClosedResourceError`` if the socket was closed. Always
        checkpoints; when cancelled, nothing was read.

        ``poll_for``: data is expected within about this many seconds:
        busy-poll for it that long first (see the module's docstring)."""
        await trio.lowlevel.checkpoint_if_cancelled()
        if self._read_at_once:
            data = self._read(max_bytes)
            if data is not None:
                await trio.lowlevel.cancel_shielded_checkpoint()
                return data
        if poll_for > 0.0:
            data = await self._poll(max_bytes, poll_for)
            if data is not None:
                return data
        while True:
            self._reader_idle = True
            try:
                await self._wait_readable()
            finally:
                self._reader_idle = False
            data = self._read(max_bytes)
            if data is not None:
                return data

    async def _wait_readable(self) -> None:
        # Every wait on the descriptor goes through here (and the writer's
        # through _wait_writable). The session may close the socket while
        # the reader is parked elsewhere (waiting for its answers to be
        # taken, say): a closed socket reports -1, and trio's wait on it
        # would raise ValueError instead of what SocketStream raises. A
        # socket closed *during* the wait is trio's to report: closing it
        # wakes the waiter with ClosedResourceError (notify_closing).
        if self._socket.fileno() < 0:
            raise trio.ClosedResourceError("this socket was already closed")
        await trio.lowlevel.wait_readable(self._socket)

    async def _wait_writable(self) -> None:
        if self._socket.fileno() < 0:
            raise trio.ClosedResourceError("this socket was already closed")
        await trio.lowlevel.wait_writable(self._socket)

    @property
    def reader_idle(self) -> bool:
        """Whether a ``receive_some`` waits for data with nothing read yet:
        the one state in which another task may read (see
        :meth:`read_for_reader`)."""
        return self._reader_idle

    def read_for_reader(self, max_bytes: int) -> bytes | None:
        """Read now, in another task, what a ``receive_some`` that is
        waiting would read next: up to ``max_bytes`` if the socket has
        them, else None. None too when no ``receive_some`` is waiting with
        nothing in hand (a read it has made and not yet returned must be
        handled before anything read after it), and at end of stream or on
        an error, both of which the waiting read then meets itself.

        Order is kept: what this returns was read before anything the
        waiting read will return, and the caller handles it before it
        awaits anything. The waiting read is not disturbed: woken with
        nothing left to read, it waits again.
        """
        if not self._reader_idle:
            return None
        try:
            data = self._read(max_bytes)
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            return None
        # (End of stream stays readable, for the waiting read to meet.)
        return data or None

    def read_into_for_reader(self, buffers: list[memoryview | bytearray]) -> int:
        """As :meth:`read_for_reader`, into ``buffers`` as ``receive_into``
        reads: how many bytes, 0 for none read (whatever the reason)."""
        if not self._reader_idle:
            return 0
        try:
            return self._read_into(buffers) or 0
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            return 0

    async def _poll(self, max_bytes: int, seconds: float) -> bytes | None:
        slot = self._slot
        if slot is None:
            slot = self._slot = _this_runs_poll_slot()
        if slot.taken:
            return None  # another read keeps the run loop awake
        slot.taken = True
        try:
            # Real time, not trio's clock: a test's MockClock stands still
            # while tasks run, and this loop must end whatever the clock.
            deadline = time.perf_counter() + seconds
            while True:
                self._reader_idle = True
                try:
                    await trio.lowlevel.checkpoint()  # the others run; cancellable
                finally:
                    self._reader_idle = False
                data = self._read(max_bytes)
                if data is not None or time.perf_counter() >= deadline:
                    return data
        finally:
            slot.taken = False

    def _read(self, max_bytes: int) -> bytes | None:
        data: bytes | None = self._attempt(os.read, max_bytes)
        if data is not None:
            # A full read suggests more is waiting; a short one, that the
            # socket is now empty.
            self._read_at_once = len(data) >= max_bytes
        return data

    def _attempt(self, read: Callable[[int, _Arg], _Result], arg: _Arg) -> _Result | None:
        """One non-blocking ``read(fd, arg)`` (``os.read`` or ``os.readv``):
        None if nothing was waiting; trio's exceptions for a closed or a
        broken socket."""
        fd = self._socket.fileno()
        if fd < 0:
            raise trio.ClosedResourceError("this socket was already closed")
        try:
            return read(fd, arg)
        except BlockingIOError:
            self._read_at_once = False
            return None
        except OSError as exc:
            if exc.errno in _CLOSED_ERRNOS:
                raise trio.ClosedResourceError("this socket was already closed") from None
            raise trio.BrokenResourceError(f"socket connection broken: {exc}") from exc
