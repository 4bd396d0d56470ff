"""Joining split elements on the receiving side.

A publisher may send one element as onNextPart ... onNextLastPart so that a
large element does not hold up other streams. Inside one stream the parts of
one element are never interleaved with another element (wire-v0 rule 8), so
one reassembler per stream suffices, and anything else arriving mid-element
is a protocol error. The joined size is bounded by ``max_element_size``: a
peer cannot make us buffer an endless element.

Copies
------
The element handed out is ``bytes`` (what every element is), built by one
``b"".join`` of the pieces at the last part. The connection's part reader
hands over each piece of payload as a view of the bytes it received (see
``Connection``, "Large parts"). A view keeps its whole read alive, other
messages' bytes included, and one read carries the parts of several
streams when a peer interleaves them, so a view would make what a stream
holds more than the payload its connection's memory budget counted. A
piece is therefore kept without a copy only where it holds nothing but
payload: a view of the whole of an immutable ``bytes`` read (kept as that
``bytes``, and a lone one is the element itself, with no join). Any other
piece is copied, a ``bytearray`` always (it could change under a view).
Reads are no smaller than parts (256 KiB each by default on plain TCP;
64 KiB parts over TLS and WebSocket), so in practice a piece is copied,
and a joined element costs two copies of its payload, the piece's and the
join's; :attr:`Reassembler.buffered`, the memory held, is the payload
received so far. ``copy=False`` on plain TCP (below) is the path with no
copy.

Into one buffer
---------------
A subscription opened with ``copy=False`` (the zero-copy opt-in) wants the
element as a read-only ``memoryview`` and no join at all: its reassembler
joins *into one buffer*, a ``bytearray`` sized up front, so that the I/O
layer can receive the parts' payload straight into it (see
``Connection.receive_buffers``) and the element handed out is a view of
it. The wire does not say how large a split element is until its last
part, so the buffer's first size is the size of the stream's previous
element (or of the part, for the first one): a stream of equal elements
allocates each once, at its size. A larger element grows the buffer (to
at least twice its size, one copy of what arrived); a smaller one is
trimmed at the end. The memory the budget must count is then the
buffer, not the payload: :attr:`Reassembler.reserved`.

Its buffers come from the stream's :class:`ElementBuffers`: allocated
without zeroing, and reused once the application has let go of an earlier
element of the same size (see ``_element_buffers``).
"""

from __future__ import annotations

from ._element_buffers import ElementBuffers
from ._errors import RemoteProtocolError

__all__ = ["Reassembler"]


class Reassembler:
    """Joins the parts of one split element at a time, within a size limit.

    Each part is announced (:meth:`start_part`: the checks), then its
    payload arrives in one or more pieces (:meth:`add_piece`), and after the
    last part :meth:`finish` joins them. :meth:`add` does all three for a
    part received whole.
    """

    __slots__ = (
        "_limit",
        "_element",
        "_pieces",
        "_size",
        "_held",
        "reserved",
        "into_buffer",
        "_buffer",
        "_filled",
        "_expected",
        "_buffers",
    )

    def __init__(self, limit: int, *, into_buffer: bool = False) -> None:
        self._limit = limit
        #: Join into one buffer and hand out a read-only view of it (see
        #: "Into one buffer"), instead of joining pieces into bytes.
        self.into_buffer = into_buffer
        self._buffer: bytearray | None = None
        self._filled = 0  # payload bytes in _buffer
        self._expected = 0  # the previous element's size: the next buffer's first size
        self._buffers = ElementBuffers() if into_buffer else None
        self._element: int | None = None
        self._pieces: list[bytes] = []
        self._size = 0  # payload announced so far (the limit's measure)
        self._held = 0  # payload bytes in _pieces (see buffered)
        #: What the connection's budget counts for this element: the payload
        #: announced, or the buffer it is joined into (which is at least as
        #: large). Kept as parts come, as the connection reads it per part.
        self.reserved = 0

    @property
    def in_progress(self) -> bool:
        """True while parts of an element have arrived but not its last part."""
        return self._element is not None

    @property
    def buffered(self) -> int:
        """Bytes of memory held for the element being joined: the payload
        received so far (joining into one buffer: that buffer)."""
        return self._held if self._buffer is None else len(self._buffer)

    @property
    def filled(self) -> int:
        """Joining into one buffer: how many payload bytes it holds."""
        return self._filled

    def free_space(self) -> memoryview | None:
        """Joining into one buffer: the writable rest of it, where the
        payload still to come goes (its first byte is at :attr:`filled`);
        None otherwise. Bytes received into it count once handed to
        :meth:`add_piece` with ``at`` their offset."""
        buffer = self._buffer
        if buffer is None:
            return None
        return memoryview(buffer)[self._filled :]

    @property
    def size(self) -> int:
        """Payload bytes of the element so far, the part being received
        included (the measure ``max_element_size`` limits)."""
        return self._size

    def start_part(self, element: int, length: int, room: int = 0) -> None:
        """Check one part's header: its element and its payload's length.

        ``room``: joining into one buffer, how many bytes beyond the payload
        announced so far the buffer may be sized to (the connection's budget
        has that much left): it is sized to the guess only within it.

        Raises:
            RemoteProtocolError: a part of another element arrived before the
                last part of the current one, or the element is too large.
        """
        if self._element is None:
            self._element = element
        elif element != self._element:
            raise RemoteProtocolError(
                f"part of split element {element} arrived before the last part of element {self._element}"
            )
        self._size += length
        if self._size > self._limit:
            raise RemoteProtocolError(f"split element larger than the limit of {self._limit} bytes")
        if self.into_buffer:
            buffer = self._buffer
            buffers = self._buffers
            assert buffers is not None
            if buffer is None:
                self._buffer = buffer = buffers.take(self._sized(self._expected, room))
            elif len(buffer) < self._size:
                # Larger than the guess: a new buffer (the old one may be
                # viewed by reads not yet taken), what arrived copied once.
                grown = buffers.take(self._sized(2 * len(buffer), room))
                grown[: self._filled] = memoryview(buffer)[: self._filled]
                self._buffer = buffer = grown
            self.reserved = len(buffer)
        else:
            self.reserved = self._size

    def trim(self) -> None:
        """Joining into one buffer: size it down to the payload announced so
        far, if nothing else views it (then it stays as it is)."""
        buffer = self._buffer
        if buffer is not None and len(buffer) > self._size:
            try:
                del buffer[self._size :]
            except BufferError:
                pass
            self.reserved = len(buffer)

    def _sized(self, guess: int, room: int) -> int:
        # The buffer's size: the payload announced at least, the guess at
        # most, within the limit and the budget's room.
        return max(self._size, min(guess, self._limit, self._size + room))

    def add_piece(self, piece: bytes | memoryview, at: int = -1) -> None:
        """Keep some payload of the current part: bytes as they are, a view
        as the ``bytes`` it views if it is all of them, else a copy (see
        "Copies"): what is held is the payload and nothing more.

        Joining into one buffer, the piece is copied to its place, unless it
        is already there: a view of the buffer received at offset ``at``
        (see :meth:`free_space`), which is where the payload continues."""
        into = self._buffer
        if into is not None:
            filled = self._filled
            if type(piece) is memoryview and piece.obj is into:
                if at == filled:
                    self._filled = filled + len(piece)
                    return
                piece = bytes(piece)  # (elsewhere in the buffer: never copy it onto itself)
            self._filled = filled + len(piece)
            into[filled : self._filled] = piece
            return
        if isinstance(piece, memoryview):
            received = piece.obj
            # (In order and all of it: a contiguous view of as many bytes.)
            if type(received) is bytes and piece.c_contiguous and piece.nbytes == len(received):
                piece = received
            else:
                piece = bytes(piece)
        self._pieces.append(piece)
        self._held += len(piece)

    def finish(self) -> bytes | memoryview:
        """The element, after its last part's payload: the pieces joined
        (bytes), or joining into one buffer, a read-only view of it."""
        buffer = self._buffer
        if buffer is not None:
            size = self._size
            assert self._filled == size, "a split element handed out before all its payload arrived"
            buffers = self._buffers
            assert buffers is not None  # (a buffer comes from them)
            self._expected = size
            self._buffer = None
            self._element = None
            self._size = self._filled = self.reserved = 0
            if len(buffer) > size:
                try:
                    del buffer[size:]
                except BufferError:  # (viewed by a read not yet let go of)
                    # The tail was never written: zero it (same length, so
                    # allowed while viewed), as the view's ``obj`` shows it.
                    buffer[size:] = bytes(len(buffer) - size)
                    buffers.lend(buffer)
                    return memoryview(buffer)[:size].toreadonly()
            buffers.lend(buffer)
            return memoryview(buffer).toreadonly()
        pieces = self._pieces
        self._element = None
        self._pieces = []
        self._size = self._held = self.reserved = 0
        if len(pieces) == 1 and type(pieces[0]) is bytes:
            return pieces[0]
        return b"".join(pieces)

    def add(self, element: int, data: bytes, last: bool) -> bytes | memoryview | None:
        """Add one part received whole; return the joined element after its
        last part.

        Raises:
            RemoteProtocolError: as :meth:`start_part`.
        """
        self.start_part(element, len(data))
        self.add_piece(data)
        return self.finish() if last else None
