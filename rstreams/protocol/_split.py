"""Joining split elements on the receiving side.

A publisher may send one element as onNextPart ... onNextLastPart so that a
large element does not hold up other streams. Inside one stream the parts of
one element are never interleaved with another element (wire-v0 rule 8), so
one reassembler per stream suffices, and anything else arriving mid-element
is a protocol error. The joined size is bounded by ``max_element_size``: a
peer cannot make us buffer an endless element.

Into one buffer
---------------
A ``copy=False`` element, and a ``copy=True`` one on a stream of large
elements (see "Kept for the next element"), is joined *into one buffer*, a
``bytearray`` sized up front, so that the I/O layer can receive the parts'
payload straight into it (see ``Connection.receive_buffers``; plain TCP)
and no join of pieces is needed.
The wire does not say how large a split element is until its last part,
so the buffer's first size is the size of the stream's previous element
(or of the part, for the first one), within the room the connection's
budget has left. The memory the budget counts is then the buffer, not the
payload: :attr:`Reassembler.reserved`. What the element handed out is
depends on the subscription:

* ``copy=False`` (the zero-copy opt-in) hands out a read-only
  ``memoryview`` of the buffer. A larger element than the guess grows the
  buffer (to at least twice its size, one copy of what arrived) where the
  budget's room allows, else keeps the rest as pieces (below) and is
  joined into one buffer at the end; a smaller one is trimmed at the end.
  The buffers come from the stream's :class:`ElementBuffers`: allocated
  without zeroing, and reused once the application has let go of an
  earlier element of the same size (see ``_element_buffers``).
* ``copy=True`` (the default) hands out ``bytes``, copied out of the
  buffer, and the stream keeps the buffer (below).

Kept for the next element
-------------------------
With ``copy=True`` nobody but the stream ever sees the buffer, so after an
element it stays, the next element's first guess: a stream of equal
elements receives each into the same memory, which stays mapped and warm,
instead of taking a new megabyte from the allocator per 1 MiB element and
giving it back (1 MiB elements read with ``batches()``, interleaved pairs:
4,600 -> 5,800 MB/s, the client's CPU 213-312 -> 175-205 µs an element).
The kept buffer stays counted in :attr:`Reassembler.reserved`, and so in
the connection's budget, until the stream ends; under budget pressure the
connection lets it go (:meth:`Reassembler.trim`), so that the peer is
never refused for it, and so does a session whose reader would otherwise
stop for a full inbound half (``Connection.give_back_guesses``). Only streams whose last element was at least
:data:`KEEP_BUFFER_FROM` (256 KiB) keep one: a read into the buffer ends
where the element does, and for smaller elements reading on into the next
messages as usual and joining the pieces costs less (elements of 100 KB:
2,100 MB/s into buffers, 2,800 as pieces); a stream's first large element,
of unknown size, joins its pieces too.

Beyond the guess
----------------
A ``copy=True`` element larger than its buffer does not grow it, nor does
a ``copy=False`` one where the budget's room does not allow doubling it:
growing by a copy of what arrived, with the budget leaving little room
beyond the payload announced, would copy a large element in small parts
again and again. What comes beyond the buffer is kept as pieces instead,
and joined with the buffer's bytes at the end (one copy; the ``bytes`` of
``copy=True`` needs one anyway). Pieces are what an element joins without
a buffer, too. The connection's part reader hands over each piece of
payload as a view of the bytes it received (see ``Connection``, "Large parts"). A view keeps
its whole read alive, other messages' bytes included, and one read carries
the parts of several streams when a peer interleaves them, so a view would
make what a stream holds more than the payload its connection's memory
budget counted. A piece is therefore kept without a copy only where it
holds nothing but payload: a view of the whole of an immutable ``bytes``
read (kept as that ``bytes``, and a lone one is the element itself, with
no join). Any other piece is copied, a ``bytearray`` always (it could
change under a view). :attr:`Reassembler.buffered`, the memory held, is
then the payload received so far, beside the buffer.
"""

from __future__ import annotations

from ._element_buffers import ElementBuffers, new_buffer
from ._errors import RemoteProtocolError

__all__ = ["KEEP_BUFFER_FROM", "Reassembler"]

#: copy=True: a stream whose last element was at least this large receives
#: the next one into a buffer it keeps (see "Kept for the next element");
#: smaller elements join their pieces, which costs them less.
KEEP_BUFFER_FROM = 256 * 1024


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
        "_size",
        "reserved",
        "_buffer",
        "_filled",
        "_expected",
        "_buffers",
        "_pieces",
        "_held",
        "_keep_from",
    )

    def __init__(self, limit: int, *, copy: bool = True, keep_buffer_from: int | None = None) -> None:
        self._limit = limit
        # copy=True: from what size of the last element the next one is
        # joined into a buffer the stream keeps (KEEP_BUFFER_FROM).
        self._keep_from = KEEP_BUFFER_FROM if keep_buffer_from is None else keep_buffer_from
        self._element: int | None = None
        self._size = 0  # payload announced so far (the limit's measure)
        self._buffer: bytearray | None = None
        self._filled = 0  # payload bytes in _buffer
        self._expected = 0  # the previous element's size: the next buffer's first size
        # copy=False: where the buffers handed out as views come from (and
        # go back to). None for copy=True, which hands out bytes, a copy of
        # the buffer, and keeps the buffer: the one test of the mode.
        self._buffers = None if copy else ElementBuffers()
        # The payload beyond the buffer (all of it, without one), as bytes
        # (see "Beyond the guess"), and how many bytes that is.
        self._pieces: list[bytes] = []
        self._held = 0
        #: What the connection's budget counts: the buffer, and the payload
        #: announced beyond it; between elements, the buffer kept for the
        #: next one (copy=True). Kept as parts come, as the connection reads
        #: it per part.
        self.reserved = 0

    @property
    def in_progress(self) -> bool:
        """True while parts of an element have arrived but not its last part."""
        return self._element is not None

    @property
    def buffered(self) -> int:
        """Bytes of memory held: the buffer, and the payload received
        beyond it."""
        buffer = self._buffer
        return (0 if buffer is None else len(buffer)) + self._held

    @property
    def filled(self) -> int:
        """How many payload bytes the buffer holds."""
        return self._filled

    def free_space(self) -> memoryview | None:
        """The writable rest of the buffer, where the payload still to come
        goes (its first byte is at :attr:`filled`); None when it has none
        left. Bytes received into it count once handed to :meth:`add_piece`
        with ``at`` their offset."""
        buffer = self._buffer
        if buffer is None or self._filled >= len(buffer):
            return None
        return memoryview(buffer)[self._filled :]

    @property
    def size(self) -> int:
        """Payload bytes of the element so far, the part being received
        included (the measure ``max_element_size`` limits)."""
        return self._size

    def start_part(self, element: int, length: int, room: int = 0) -> None:
        """Check one part's header: its element and its payload's length.

        ``room``: how many bytes beyond the payload announced so far the
        buffer may be sized to (the connection's budget has that much left):
        it is sized to the guess only within it.

        Raises:
            RemoteProtocolError: a part of another element arrived before the
                last part of the current one, or the element is too large.
        """
        starting = self._element is None
        if starting:
            self._element = element
        elif element != self._element:
            raise RemoteProtocolError(
                f"part of split element {element} arrived before the last part of element {self._element}"
            )
        self._size += length
        if self._size > self._limit:
            raise RemoteProtocolError(f"split element larger than the limit of {self._limit} bytes")
        buffer = self._buffer
        if starting:
            if self._buffers is None and self._expected < self._keep_from:
                # (Smaller elements join their pieces: see "Kept for the
                # next element".)
                self._buffer = buffer = None
            else:
                # The guess; a buffer kept from the last element serves if
                # it is as large, and is replaced, not copied, if not
                # (nothing is in it yet).
                wanted = self._sized(self._expected, room)
                if buffer is None or len(buffer) < wanted:
                    self._buffer = buffer = self._new_buffer(wanted)
        if buffer is None:
            self.reserved = self._size
            return
        if len(buffer) < self._size and self._buffers is not None and not self._pieces:
            # Larger than the guess: a new buffer (the old one may be
            # viewed by reads not yet taken), what arrived copied once; at
            # least twice as large (or the limit), so that an element is
            # copied this way a few times at most. Where the budget's room
            # does not allow that, what comes beyond the buffer is kept as
            # pieces instead (see "Beyond the guess").
            size = self._sized(2 * len(buffer), room)
            if size >= min(2 * len(buffer), self._limit):
                grown = self._new_buffer(size)
                grown[: self._filled] = memoryview(buffer)[: self._filled]
                self._buffer = buffer = grown
        # (Otherwise what goes beyond the buffer arrives as pieces.)
        self.reserved = max(len(buffer), self._size)

    def _new_buffer(self, size: int) -> bytearray:
        buffers = self._buffers
        return new_buffer(size) if buffers is None else buffers.take(size)

    def trim(self) -> None:
        """Size the buffer down to the payload announced so far, if nothing
        else views it (then it stays as it is); a buffer kept between
        elements is let go of. What the budget counts follows."""
        buffer = self._buffer
        if buffer is None:
            return
        if self._element is None:
            self._buffer = None
            self.reserved = 0
        elif len(buffer) > self._size:
            try:
                del buffer[self._size :]
            except BufferError:
                pass
            self.reserved = max(len(buffer), self._size)

    def _sized(self, guess: int, room: int) -> int:
        # The buffer's size: the payload announced at least, the guess at
        # most, within the limit and the budget's room.
        return max(self._size, min(guess, self._limit, self._size + room))

    def add_piece(self, piece: bytes | memoryview, at: int = -1) -> None:
        """Keep some payload of the current part: copied to its place in the
        buffer, unless it is already there (a view of the buffer received
        at offset ``at``, see :meth:`free_space`, which is where the payload
        continues). Payload beyond the buffer is kept as bytes (see
        "Beyond the guess")."""
        into = self._buffer
        filled = self._filled
        if into is not None and not self._pieces:
            if type(piece) is memoryview and piece.obj is into:
                if at == filled:
                    self._filled = filled + len(piece)
                    return
                piece = bytes(piece)  # (elsewhere in the buffer: never copy it onto itself)
            space = len(into) - filled
            if len(piece) <= space:
                self._filled = filled + len(piece)
                into[filled : self._filled] = piece
                return
            if space:
                into[filled:] = piece[:space]
                self._filled = len(into)
                piece = piece[space:]
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
        """The element, after its last part's payload: bytes (copy=True), or
        a read-only view of the buffer (copy=False)."""
        buffer = self._buffer
        size = self._size
        filled = self._filled
        assert filled + self._held == size, "a split element handed out before all its payload arrived"
        self._expected = size
        self._element = None
        self._size = self._filled = 0
        buffers = self._buffers
        if buffers is None:  # copy=True
            pieces = self._pieces
            self._pieces = []
            self._held = 0
            if buffer is None:
                self.reserved = 0
                if len(pieces) == 1 and type(pieces[0]) is bytes:
                    return pieces[0]
                return b"".join(pieces)
            # The buffer stays, the next element's first guess, counted as
            # one (see "Kept for the next element").
            self.reserved = len(buffer)
            if not pieces:
                return bytes(memoryview(buffer)[:size])
            return b"".join([memoryview(buffer)[:filled], *pieces])
        assert buffer is not None, "a copy=False element finished before its first part"
        self._buffer = None
        self.reserved = 0
        pieces = self._pieces
        if pieces:
            # Beyond the guess: one buffer of the element's size at last.
            joined = buffers.take(size)
            joined[:filled] = memoryview(buffer)[:filled]
            position = filled
            for piece in pieces:
                joined[position : position + len(piece)] = piece
                position += len(piece)
            self._pieces = []
            self._held = 0
            buffer = joined
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

    def add(self, element: int, data: bytes, last: bool) -> bytes | memoryview | None:
        """Add one part received whole; return the joined element after its
        last part.

        Raises:
            RemoteProtocolError: as :meth:`start_part`.
        """
        self.start_part(element, len(data))
        self.add_piece(data)
        return self.finish() if last else None
