"""Lines from a file descriptor, read only when someone asks, each handed out once.

``rstreams pub --serve`` serves standard input to any number of subscribers. Three
rules shape this module:

* **Read on demand.** The descriptor is read only while a caller waits in
  :meth:`LineReader.readline`, so nothing is consumed from stdin before a
  subscriber has asked for an element.
* **One reader.** Every subscriber shares one reader, and a lock hands lines
  out one caller at a time, in arrival order: each line goes to exactly one
  caller and none is read twice.
* **Nothing lost to a cancel.** The read itself runs in the reader's own task
  (:meth:`LineReader.run`), not in the caller's: a subscriber that cancels
  while a read is in flight leaves the data in the buffer for the next one,
  and a caller that got a line it can no longer send gives it back with
  :meth:`LineReader.unread`.

The descriptor is read with ``os.read`` in a worker thread (stdin may be a
terminal, a pipe or a file; none of them can be made non-blocking safely
when shared with the parent shell). The thread is abandoned when the reader is
cancelled at shutdown, so a silent stdin never holds the process up; it never
holds a lock of ``sys.stdin``, which is what makes abandoning it safe.
"""

from __future__ import annotations

import logging
import os
from collections import deque

import trio

__all__ = ["LineReader", "CHUNK_SIZE", "MAX_LINES_AT_ONCE", "MAX_LINE_BYTES", "lines_phrase"]

logger = logging.getLogger("rstreams.cli")

#: Bytes asked of the descriptor per read (a pipe holds 64 KiB).
CHUNK_SIZE = 64 * 1024
#: Lines a publisher hands over in one step at most: the one it waited for
#: and those read already (within demand), queued with one ``send_some``.
MAX_LINES_AT_ONCE = 256
#: A line longer than this is handed out in pieces of this size, so one
#: endless line cannot grow the buffer without bound (elements up to 64 MiB
#: reach a default peer; this stays well below).
MAX_LINE_BYTES = 16 * 1024 * 1024


class LineReader:
    """Lines of a file descriptor, without their trailing newline.

    Run :meth:`run` in a nursery for as long as lines may be asked for.

    Args:
        fd: the descriptor to read (not closed here).
        max_line: longest line handed out whole; longer ones come in pieces.
    """

    def __init__(self, fd: int, *, max_line: int = MAX_LINE_BYTES, chunk_size: int = CHUNK_SIZE) -> None:
        self._fd = fd
        self._max_line = max_line
        self._chunk_size = chunk_size
        self._buffer = bytearray()
        self._scanned = 0  # bytes of _buffer known to hold no newline
        self._returned: deque[bytes] = deque()
        self._eof = False
        self._reading = False
        self._lock = trio.Lock()
        self._wanted = trio.Event()
        self._arrived = trio.Event()
        self.bytes_read = 0

    @property
    def exhausted(self) -> bool:
        """True once the descriptor hit EOF and every line was handed out."""
        return self._eof and not self._buffer and not self._returned

    async def run(self) -> None:
        """Read whenever a caller waits for data, until EOF or cancelled."""
        while not self._eof:
            await self._wanted.wait()
            self._wanted = trio.Event()
            self._reading = True
            try:
                chunk = await trio.to_thread.run_sync(os.read, self._fd, self._chunk_size, abandon_on_cancel=True)
            except OSError as exc:
                logger.warning("reading input failed, treating it as its end: %s", exc)
                chunk = b""
            finally:
                self._reading = False
            if chunk:
                self._buffer += chunk
                self.bytes_read += len(chunk)
            else:
                self._eof = True
            arrived, self._arrived = self._arrived, trio.Event()
            arrived.set()

    async def readline(self) -> bytes | None:
        """The next line without its ``\\n``, or None at the end of input.

        Cancellation: safe; a line is either returned or left for the next
        caller. Always checkpoints.
        """
        async with self._lock:
            while True:
                line = self._take_line()
                if line is not None:
                    return line
                if self._eof:
                    return None
                arrived = self._arrived
                if not self._reading:  # else the read in flight will do
                    self._wanted.set()
                await arrived.wait()

    def readline_nowait(self) -> bytes | None:
        """The next line if one is buffered and no caller is waiting; else
        None (which says nothing of the end of input: :meth:`readline` does)."""
        if self._lock.locked():
            return None
        return self._take_line()

    def readlines_nowait(self, max_count: int) -> list[bytes]:
        """Up to ``max_count`` lines, those buffered now (see :meth:`readline_nowait`)."""
        lines: list[bytes] = []
        while len(lines) < max_count:
            line = self.readline_nowait()
            if line is None:
                break
            lines.append(line)
        return lines

    def unread(self, line: bytes) -> None:
        """Give back a line that could not be delivered; it is handed out next."""
        self._returned.appendleft(line)

    def unread_lines(self, lines: list[bytes]) -> None:
        """Give back lines that could not be delivered; they are handed out next, in order."""
        self._returned.extendleft(reversed(lines))

    def _take_line(self) -> bytes | None:
        if self._returned:
            return self._returned.popleft()
        buffer = self._buffer
        newline = buffer.find(b"\n", self._scanned, self._max_line + 1)
        if newline >= 0:
            line = bytes(buffer[:newline])
            del buffer[: newline + 1]
            self._scanned = 0
            return line
        if len(buffer) > self._max_line or (self._eof and buffer):
            # An overlong line comes out in pieces; the last line may lack
            # its newline.
            line = bytes(buffer[: self._max_line])
            del buffer[: self._max_line]
            self._scanned = 0
            return line
        self._scanned = len(buffer)
        return None


def lines_phrase(count: int) -> str:
    """``1 line``, ``N lines``: how pub's messages count lines."""
    return "1 line" if count == 1 else f"{count} lines"
