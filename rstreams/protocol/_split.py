"""Joining split elements on the receiving side.

A publisher may send one element as onNextPart ... onNextLastPart so that a
large element does not hold up other streams. Inside one stream the parts of
one element are never interleaved with another element (wire-v0 rule 8), so
one reassembler per stream suffices, and anything else arriving mid-element
is a protocol error. The joined size is bounded by ``max_element_size``: a
peer cannot make us buffer an endless element.
"""

from __future__ import annotations

from ._errors import RemoteProtocolError

__all__ = ["Reassembler"]


class Reassembler:
    """Joins the parts of one split element at a time, within a size limit."""

    __slots__ = ("_limit", "_element", "_parts", "_size")

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._element: int | None = None
        self._parts: list[bytes] = []
        self._size = 0

    @property
    def in_progress(self) -> bool:
        """True while parts of an element have arrived but not its last part."""
        return self._element is not None

    @property
    def buffered(self) -> int:
        """Bytes held for the element being joined."""
        return self._size

    def add(self, element: int, data: bytes, last: bool) -> bytes | None:
        """Add one part; return the joined element after its last part.

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
        self._size += len(data)
        if self._size > self._limit:
            raise RemoteProtocolError(f"split element larger than the limit of {self._limit} bytes")
        if not last:
            self._parts.append(data)
            return None
        parts = self._parts
        self._element = None
        self._parts = []
        self._size = 0
        if not parts:
            return data
        parts.append(data)
        return b"".join(parts)
