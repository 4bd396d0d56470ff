"""Writing to a TCP socket from the task that has the bytes, without waiting.

A session's writer task is the one place that *waits* to write: it sleeps
until something is queued, and blocks while the peer does not read. Handing
it every answer costs a scheduling pass each time (the writer must be woken,
run, and checkpoint), which is most of the cost of a request-response round
trip. When the writer has nothing in hand, the task that just queued a
message (the reader answering a subscribe, a caller sending one) may instead
hand the bytes straight to the kernel: a non-blocking ``write`` either takes
them, takes part of them (the writer then sends the rest, before anything
else), or takes none. Nothing waits, so the reader still never blocks on the
peer, and order is kept because only an idle writer is bypassed.

This is what asyncio's transports do on every ``write``; trio's
``SocketStream`` has no such call (``send_all`` always checkpoints), so it is
done here on the socket's file descriptor. Only plain TCP streams qualify:
TLS and WebSocket frame what they send, and always go through the writer.
A write to a connection the peer has reset fails with ``EPIPE`` exactly as
trio's own ``send`` does (CPython ignores ``SIGPIPE``), and is left to the
writer to report.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import trio

__all__ = ["DirectSend", "direct_sender"]

#: Writes what it can of the bytes at once and returns how many it wrote: 0
#: when the socket's buffer is full, it is closed, or the write failed (the
#: writer then meets the same error in ``send_all`` and reports it).
DirectSend = Callable[[bytes | bytearray | memoryview], int]


def direct_sender(stream: trio.abc.Stream) -> DirectSend | None:
    """A non-blocking writer for ``stream``, or None if it cannot have one."""
    if os.name != "posix" or type(stream) is not trio.SocketStream:
        return None
    socket = stream.socket
    write = os.write

    def send_now(data: bytes | bytearray | memoryview) -> int:
        # Looked up on each call: a closed socket reports -1, and its old
        # number may already belong to another file.
        fd = socket.fileno()
        if fd < 0:
            return 0
        try:
            return write(fd, data)
        except OSError:
            # Full (BlockingIOError), interrupted, or broken: leave it all to
            # the writer, which waits for room or reports the error.
            return 0

    return send_now
