"""An in-process byte stream pair, bounded like a socket.

What a bridge uses to run an app's publishers through a real session in the
same process (:func:`rstreams.open_local_session`), with no socket: the
session, its demand and its codecs work exactly as over TCP. trio's own
``memory_stream_pair`` lives in ``trio.testing`` and buffers without bound;
this one makes ``send_all`` wait while ``max_buffer`` bytes are unread, so a
reader that stops reading stops the writer, as a full TCP window would.
"""

from __future__ import annotations

import operator

import trio

__all__ = ["MemoryStream", "memory_stream_pair", "DEFAULT_MEMORY_BUFFER"]

#: Bytes a memory stream holds unread before ``send_all`` waits.
DEFAULT_MEMORY_BUFFER = 256 * 1024


class _Pipe:
    # One direction: bytes written by one end, read by the other.
    __slots__ = ("buffer", "max_buffer", "writer_closed", "reader_closed", "lot")

    def __init__(self, max_buffer: int) -> None:
        self.buffer = bytearray()
        self.max_buffer = max_buffer
        self.writer_closed = False
        self.reader_closed = False
        self.lot = trio.lowlevel.ParkingLot()


class MemoryStream(trio.abc.Stream):
    """One end of a :func:`memory_stream_pair`."""

    def __init__(self, outgoing: _Pipe, incoming: _Pipe) -> None:
        self._outgoing = outgoing
        self._incoming = incoming
        self._closed = False
        self._send_busy = False
        self._receive_busy = False

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        """Append ``data`` for the other end; waits while its buffer is full.

        Raises:
            trio.BrokenResourceError: the other end was closed.
            trio.ClosedResourceError: this end was closed.
            trio.BusyResourceError: another task is sending.
        """
        if self._send_busy:
            raise trio.BusyResourceError("another task is already sending on this stream")
        self._send_busy = True
        try:
            await trio.lowlevel.checkpoint_if_cancelled()
            pipe = self._outgoing
            view = memoryview(data)
            while True:
                self._check_send(pipe)
                room = pipe.max_buffer - len(pipe.buffer)
                if room > 0:
                    taken = view[:room]
                    pipe.buffer += taken
                    view = view[len(taken) :]
                    pipe.lot.unpark_all()
                if not view:
                    break
                await pipe.lot.park()
            await trio.lowlevel.cancel_shielded_checkpoint()
        finally:
            self._send_busy = False

    def _check_send(self, pipe: _Pipe) -> None:
        if self._closed:
            raise trio.ClosedResourceError("this end of the stream was closed")
        if pipe.reader_closed:
            raise trio.BrokenResourceError("the other end of the stream was closed")

    async def wait_send_all_might_not_block(self) -> None:
        if self._send_busy:
            raise trio.BusyResourceError("another task is already sending on this stream")
        self._send_busy = True
        try:
            await trio.lowlevel.checkpoint_if_cancelled()
            pipe = self._outgoing
            while len(pipe.buffer) >= pipe.max_buffer and not (self._closed or pipe.reader_closed):
                await pipe.lot.park()
            self._check_send(pipe)
            await trio.lowlevel.cancel_shielded_checkpoint()
        finally:
            self._send_busy = False

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        """Up to ``max_bytes`` bytes (all available by default); ``b""`` once the other end closed.

        Raises:
            trio.ClosedResourceError: this end was closed.
            trio.BusyResourceError: another task is receiving.
        """
        if max_bytes is not None:
            max_bytes = operator.index(max_bytes)
            if max_bytes < 1:
                raise ValueError("max_bytes must be >= 1")
        if self._receive_busy:
            raise trio.BusyResourceError("another task is already receiving on this stream")
        self._receive_busy = True
        try:
            await trio.lowlevel.checkpoint_if_cancelled()
            pipe = self._incoming
            while not pipe.buffer and not pipe.writer_closed:
                if self._closed:
                    raise trio.ClosedResourceError("this end of the stream was closed")
                await pipe.lot.park()
            if self._closed:
                raise trio.ClosedResourceError("this end of the stream was closed")
            count = len(pipe.buffer) if max_bytes is None else min(max_bytes, len(pipe.buffer))
            data = bytes(pipe.buffer[:count])
            del pipe.buffer[:count]
            pipe.lot.unpark_all()
            await trio.lowlevel.cancel_shielded_checkpoint()
            return data
        finally:
            self._receive_busy = False

    async def aclose(self) -> None:
        """Close this end: the other end reads EOF after what is buffered, and can no longer send."""
        self._close()
        await trio.lowlevel.checkpoint()

    def _close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._outgoing.writer_closed = True
        self._incoming.reader_closed = True
        self._incoming.buffer.clear()
        self._outgoing.lot.unpark_all()
        self._incoming.lot.unpark_all()


def memory_stream_pair(max_buffer: int = DEFAULT_MEMORY_BUFFER) -> tuple[MemoryStream, MemoryStream]:
    """Two connected in-process streams; each direction holds at most ``max_buffer`` unread bytes."""
    if max_buffer <= 0:
        raise ValueError("max_buffer must be positive")
    forward, backward = _Pipe(max_buffer), _Pipe(max_buffer)
    return MemoryStream(forward, backward), MemoryStream(backward, forward)
