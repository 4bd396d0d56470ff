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
``b"".join`` of the pieces at the last part: that join is the one copy of
the payload this side makes. To keep it the only one, the connection's part
reader hands over each piece of payload as a view of the bytes it received
(see ``Connection``, "Large parts"), and the reassembler keeps the view
instead of copying it. A view keeps its whole received buffer alive, other
messages' bytes included, so a view is kept only where that costs little:
a piece of at least ``MIN_VIEW_SIZE`` bytes, of an immutable ``bytes``
buffer (a ``bytearray`` could change under it), while the memory held stays
within twice the payload plus ``VIEW_SLACK``; any other piece is copied. A
peer that pads each read with other messages around a small part therefore
costs copies, not memory.

:attr:`Reassembler.buffered` is that memory: the bytes copied plus the
whole size of every received buffer a kept view holds. The limit is on the
payload (:attr:`Reassembler.size`). A connection bounds the views further
(``add_piece``'s ``room``): under a per-connection memory budget it keeps a
view only where the view holds nothing but payload (see
``Connection._add_piece``).
"""

from __future__ import annotations

from ._errors import RemoteProtocolError

__all__ = ["Reassembler", "MIN_VIEW_SIZE", "VIEW_SLACK"]

#: Pieces smaller than this are copied rather than kept as views: a copy of
#: a few KiB costs less than the bookkeeping, and releases the buffer.
MIN_VIEW_SIZE = 16 * 1024
#: Memory a kept view may hold beyond twice the payload: the received
#: buffers around the first and last pieces (two default 256 KiB reads).
VIEW_SLACK = 512 * 1024


class Reassembler:
    """Joins the parts of one split element at a time, within a size limit.

    Each part is announced (:meth:`start_part`: the checks), then its
    payload arrives in one or more pieces (:meth:`add_piece`), and after the
    last part :meth:`finish` joins them. :meth:`add` does all three for a
    part received whole.
    """

    __slots__ = ("_limit", "_element", "_pieces", "_size", "_held", "_last_buffer")

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._element: int | None = None
        self._pieces: list[bytes | memoryview] = []
        self._size = 0  # payload announced so far (the limit's measure)
        self._held = 0  # memory held for the pieces (see buffered)
        self._last_buffer: object = None  # the received buffer the last kept view holds

    @property
    def in_progress(self) -> bool:
        """True while parts of an element have arrived but not its last part."""
        return self._element is not None

    @property
    def buffered(self) -> int:
        """Bytes of memory held for the element being joined: the pieces
        copied, plus the whole of each received buffer a kept view holds."""
        return self._held

    @property
    def size(self) -> int:
        """Payload bytes of the element so far, the part being received
        included (the measure ``max_element_size`` limits)."""
        return self._size

    def start_part(self, element: int, length: int) -> None:
        """Check one part's header: its element and its payload's length.

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

    def add_piece(self, piece: bytes | memoryview, room: int | None = None) -> None:
        """Keep some payload of the current part: bytes as they are, a view
        of a received buffer as a view if it is worth it, else a copy.

        ``room``: how many bytes beyond the piece itself a view may add to
        :attr:`buffered` (the connection's memory budget has that much left);
        None: no bound but this reassembler's own."""
        if type(piece) is not memoryview:
            self._pieces.append(piece)
            self._held += len(piece)
            return
        length = len(piece)
        buffer = piece.obj
        if length >= MIN_VIEW_SIZE and type(buffer) is bytes:
            if buffer is self._last_buffer:
                self._pieces.append(piece)  # the buffer is held already
                return
            held = self._held + len(buffer)
            if held <= 2 * (self._size) + VIEW_SLACK and (room is None or len(buffer) - length <= room):
                self._pieces.append(piece)
                self._held = held
                self._last_buffer = buffer
                return
        self._pieces.append(bytes(piece))
        self._held += length

    def finish(self) -> bytes:
        """The element, after its last part's payload: the pieces joined."""
        pieces = self._pieces
        self._element = None
        self._pieces = []
        self._size = 0
        self._held = 0
        self._last_buffer = None
        if len(pieces) == 1 and type(pieces[0]) is bytes:
            return pieces[0]
        return b"".join(pieces)

    def add(self, element: int, data: bytes, last: bool) -> bytes | None:
        """Add one part received whole; return the joined element after its
        last part.

        Raises:
            RemoteProtocolError: as :meth:`start_part`.
        """
        self.start_part(element, len(data))
        self.add_piece(data)
        return self.finish() if last else None
