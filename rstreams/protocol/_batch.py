"""A run of received elements, without one object per element.

An onNextPacked message carries ``count`` fixed-size elements in one byte
string. Slicing it into ``count`` bytes objects up front would cost more than
the whole per-element budget at packed rates, so the batch keeps the packed
buffer and slices on access. Zero-copy consumers read ``packed`` and
``element_size`` directly (``numpy.frombuffer`` and ``memoryview.cast`` work on
it); everyone else iterates and gets ``bytes``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import overload

__all__ = ["ElementBatch", "batch_of_known_size"]


class ElementBatch(Sequence[bytes]):
    """An immutable sequence of received elements.

    Either a list of elements, or ``count`` elements of ``element_size`` bytes
    packed back to back in one buffer.
    """

    __slots__ = ("_items", "_packed", "_element_size", "_count", "_nbytes")

    def __init__(
        self,
        items: list[bytes] | None = None,
        *,
        packed: bytes | None = None,
        element_size: int = 0,
    ) -> None:
        if packed is not None:
            if element_size <= 0 or len(packed) % element_size:
                raise ValueError("packed length must be a multiple of a positive element_size")
            self._items: list[bytes] | None = None
            self._packed: bytes | None = packed
            self._element_size = element_size
            self._count = len(packed) // element_size
        else:
            self._items = items if items is not None else []
            self._packed = None
            self._element_size = 0
            self._count = len(self._items)
        self._nbytes: int | None = None

    @property
    def packed(self) -> bytes | None:
        """The packed buffer, or None when the batch is a list of elements."""
        return self._packed

    @property
    def items(self) -> list[bytes] | None:
        """The list of elements (do not modify), or None for a packed batch."""
        return self._items

    @property
    def element_size(self) -> int:
        """Size of each element of a packed batch (0 for a list batch)."""
        return self._element_size

    @property
    def nbytes(self) -> int:
        """Total size of the elements in bytes."""
        if self._packed is not None:
            return len(self._packed)
        if self._nbytes is not None:
            return self._nbytes
        assert self._items is not None
        return sum(map(len, self._items))

    def __len__(self) -> int:
        return self._count

    @overload
    def __getitem__(self, index: int) -> bytes: ...

    @overload
    def __getitem__(self, index: slice) -> ElementBatch: ...

    def __getitem__(self, index: int | slice) -> bytes | ElementBatch:
        if self._items is not None:
            if isinstance(index, slice):
                return ElementBatch(self._items[index])
            return self._items[index]
        assert self._packed is not None
        size = self._element_size
        if isinstance(index, slice):
            start, stop, step = index.indices(self._count)
            if step == 1:
                return ElementBatch(packed=self._packed[start * size : max(start, stop) * size], element_size=size)
            return ElementBatch([self[i] for i in range(start, stop, step)])
        if index < 0:
            index += self._count
        if not 0 <= index < self._count:
            raise IndexError("ElementBatch index out of range")
        return self._packed[index * size : (index + 1) * size]

    def __iter__(self) -> Iterator[bytes]:
        if self._items is not None:
            return iter(self._items)
        assert self._packed is not None
        packed, size = self._packed, self._element_size
        return (packed[offset : offset + size] for offset in range(0, len(packed), size))

    def tolist(self) -> list[bytes]:
        """The elements as a new list of bytes."""
        if self._items is not None:
            return list(self._items)
        return list(iter(self))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, ElementBatch):
            return self.tolist() == other.tolist()
        return NotImplemented

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __repr__(self) -> str:
        kind = f"packed, element_size={self._element_size}" if self._packed is not None else "list"
        return f"<ElementBatch of {self._count} ({kind})>"


def batch_of_known_size(items: list[bytes], nbytes: int) -> ElementBatch:
    """A list batch whose elements' byte count its maker knows (the
    connection, of elements runs of onNext carried): ``nbytes`` is then
    that count, not measured element by element."""
    batch = ElementBatch(items)
    batch._nbytes = nbytes
    return batch
