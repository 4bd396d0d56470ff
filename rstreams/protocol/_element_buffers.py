"""Where the buffers of ``copy=False`` elements come from.

A ``copy=False`` stream receives each split element into one ``bytearray``
and hands it out as a read-only view of it (see ``_split``, "Into one
buffer"). This module makes those buffers: without zeroing them, and, for a
stream of elements of one size, by reusing the buffers of earlier elements
that nobody refers to any more.

Without zeros
-------------
``bytearray(n)`` writes n zeros: 45 µs a MiB here, as much as the copy the
buffer saves. :func:`new_buffer` allocates through CPython's
``PyByteArray_FromStringAndSize(NULL, n)`` instead; every byte of an element
is written before it is handed out (its parts cover it). Interpreters without
``ctypes.pythonapi`` get ``bytearray(n)``.

Why reuse
---------
A new buffer per element is fresh memory per element, and fresh memory is
not free. glibc serves a buffer of a megabyte from the top of its heap and,
when a consumer lets a batch of them go, gives that top back to the kernel
(its trim threshold is twice the largest block it has freed); the next
elements take it back a page fault at a time, each page zeroed by the kernel.
On the benchmark machine, a virtual machine whose pages given back cost the
host a fault as well, a plain reader receiving 1 MiB messages into new
buffers while holding the last sixteen spent 131-148 µs of CPU per MiB,
against 80-93 µs into one buffer it reused; and a ``copy=False`` client
reading 1 MiB elements at prefetch 16 spent a fifth of its CPU in page
faults and the heap's trims (``perf``). A stream whose buffers are reused
moves none of that memory.

When a buffer is nobody's
-------------------------
Everything that can reach the bytes of a buffer holds a reference to the
``bytearray``: the element's view and every view, slice or array made from
it (they hold the view's managed buffer, which holds the bytearray), the
view's ``obj``, a ``Py_buffer`` a C extension has not released. So on
CPython a buffer whose reference count is the pool's own is one nobody can
read again, and writing the next element into it cannot be seen. A buffer
the application keeps, in whatever form, is never taken back; a new one is
allocated instead. Interpreters without ``sys.getrefcount`` never reuse.

Bounds
------
The pool remembers the buffers it lent (handed out in an element), at most
:data:`LENT_REMEMBERED` of them, oldest first. Taking a buffer of a size
looks at them in that order: the first one of that size that is nobody's is
reused; one of another size that is nobody's is let go of on the way
(elements changed size); one still referred to is left where it is. A new
buffer joins the pool only when no buffer of its size was free, so the pool
never keeps more buffers of a size than the application held at once, plus
the one being filled: what it keeps that nobody uses is at most what the
consumer itself held, and it goes with the stream (one pool per
reassembler). The scan costs about 60 ns a remembered buffer, against tens
of microseconds to receive an element large enough to be split.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

__all__ = ["LENT_REMEMBERED", "ElementBuffers", "new_buffer"]

#: How many buffers a pool remembers after lending them: enough for a
#: consumer holding a batch of 16 large elements while 16 more are queued
#: (``batches()`` at prefetch 16), twice over. An application holding more
#: gets new buffers as before; only the oldest are forgotten.
LENT_REMEMBERED = 64


def _buffer_allocator() -> Callable[[int], bytearray]:
    """``bytearray(size)`` without the zeros, where CPython's C API allows."""
    try:
        import ctypes

        from_string = ctypes.pythonapi.PyByteArray_FromStringAndSize
    except (ImportError, AttributeError):  # pragma: no cover - not CPython
        return bytearray
    from_string.argtypes = (ctypes.c_void_p, ctypes.c_ssize_t)
    from_string.restype = ctypes.py_object

    def new_buffer(size: int) -> bytearray:
        buffer = from_string(None, size)
        assert type(buffer) is bytearray and len(buffer) == size
        return buffer

    return new_buffer


#: A bytearray of the given size whose contents are not set (see "Without
#: zeros"): only for buffers whose every byte is written before use.
new_buffer = _buffer_allocator()


def _references(buffers: list[bytearray], index: int) -> int:
    # (Always called this way, so that one calibration fits every call: the
    # list's reference, and the call's own.)
    return sys.getrefcount(buffers[index])


#: What _references says of a buffer that only its list refers to; None
#: where the interpreter does not count references (then nothing is reused).
_ALONE: int | None = _references([bytearray(1)], 0) if hasattr(sys, "getrefcount") else None


class ElementBuffers:
    """The buffers one stream's elements are joined into, reused once nobody
    refers to them (see the module's docstring)."""

    __slots__ = ("_lent",)

    def __init__(self) -> None:
        self._lent: list[bytearray] = []  # lent buffers, oldest first

    @property
    def remembered(self) -> int:
        """How many lent buffers the pool remembers (free or not)."""
        return len(self._lent)

    def take(self, size: int) -> bytearray:
        """A buffer of ``size`` bytes whose contents are not set: a lent one
        that nobody refers to any more, else a new one."""
        alone = _ALONE
        if alone is None:  # pragma: no cover - not CPython
            return new_buffer(size)
        lent = self._lent
        index = 0
        while index < len(lent):
            if _references(lent, index) != alone:
                index += 1
                continue
            buffer = lent.pop(index)
            if len(buffer) == size:
                return buffer
            # Nobody's, but of another size: let go of it.
        return new_buffer(size)

    def lend(self, buffer: bytearray) -> None:
        """Remember ``buffer``, handed out in an element, to take it back
        once nobody refers to it; the oldest is forgotten beyond
        :data:`LENT_REMEMBERED`."""
        if _ALONE is None:  # pragma: no cover - not CPython
            return
        lent = self._lent
        lent.append(buffer)
        if len(lent) > LENT_REMEMBERED:
            del lent[0]
