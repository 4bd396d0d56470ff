"""The arithmetic of a topic, without I/O: a bounded log and its cursors.

A topic is a log of elements numbered from 0 (the *sequence number*). It
keeps at most ``capacity`` of the newest ones in memory; each subscriber is a
:class:`Cursor` at the sequence number it will read next. Three policies
decide what a subscriber that falls behind does:

``block`` (the default)
    The subscriber paces the publishers. An element is never evicted while
    a blocking cursor still needs it, so publishers get room only as fast
    as the slowest blocking subscriber reads. Nothing is lost.
``drop``
    The subscriber never holds publishers back. If it falls more than
    ``capacity`` behind, the oldest elements it has not read are evicted
    under it; it resumes at the oldest one kept and the skipped ones are
    counted in ``dropped``.
``latest``
    For hot data (a sensor reading is stale once a newer one exists): when
    the subscriber asks and more than one element is waiting, it skips to
    the newest and counts the skipped ones in ``dropped``.

Room for publishers::

    room = capacity - (next_seq - floor)
    floor = min(position of every blocking cursor), or next_seq if none

With no blocking cursor the log is a ring of the newest ``capacity``
elements (the replay window for ``from=N`` subscribers). Memory is bounded
by ``capacity`` elements whatever the subscribers do; each subscriber adds
at most its own demand on the wire.

This module imports no trio: :mod:`rstreams._topic` does the waiting.
"""

from __future__ import annotations

import enum
import itertools
from collections import deque
from dataclasses import dataclass

__all__ = ["Cursor", "CursorPolicy", "TopicLog", "RetentionError", "encode_sequenced", "decode_sequenced", "SEQUENCE_PREFIX"]

#: Bytes of the sequence-number prefix of a sequenced element.
SEQUENCE_PREFIX = 8


def encode_sequenced(sequence: int, element: bytes) -> bytes:
    """``element`` prefixed with its sequence number (8-byte big-endian).

    The framing of the replay convention (``docs/spark.md``): a publisher
    subscribed as ``NAME?from=N`` sends elements N, N+1, ... each framed so.
    """
    return sequence.to_bytes(SEQUENCE_PREFIX, "big") + element


def decode_sequenced(data: bytes) -> tuple[int, bytes]:
    """Split a sequenced element into its sequence number and payload.

    Raises:
        ValueError: shorter than the 8-byte prefix.
    """
    if len(data) < SEQUENCE_PREFIX:
        raise ValueError(f"a sequenced element has an 8-byte prefix; got {len(data)} bytes")
    return int.from_bytes(data[:SEQUENCE_PREFIX], "big"), bytes(data[SEQUENCE_PREFIX:])


class CursorPolicy(enum.Enum):
    """What a subscriber that falls behind does (see the module docstring)."""

    BLOCK = "block"
    DROP = "drop"
    LATEST = "latest"


class RetentionError(LookupError):
    """A cursor asked for elements the log no longer holds (or never will)."""


@dataclass(eq=False, slots=True)
class Cursor:
    """One subscriber's place in the log.

    Attributes:
        policy: see :class:`CursorPolicy`.
        position: the sequence number this subscriber reads next.
        delivered: elements taken so far.
        dropped: elements skipped (``drop`` and ``latest`` only).
    """

    policy: CursorPolicy
    position: int
    delivered: int = 0
    dropped: int = 0


class TopicLog:
    """A bounded log of byte elements and the cursors reading it.

    Args:
        capacity: at most this many elements are held (> 0).
    """

    def __init__(self, capacity: int) -> None:
        if type(capacity) is not int or capacity <= 0:
            raise ValueError(f"capacity must be a positive int, got {capacity!r}")
        self.capacity = capacity
        self._elements: deque[bytes] = deque()
        self._first = 0  # sequence number of _elements[0]
        self._cursors: set[Cursor] = set()
        self.published = 0
        self.evicted = 0

    @property
    def first_sequence(self) -> int:
        """The oldest sequence number still held (== next_sequence when empty)."""
        return self._first

    @property
    def next_sequence(self) -> int:
        """The sequence number the next published element gets."""
        return self._first + len(self._elements)

    @property
    def cursors(self) -> frozenset[Cursor]:
        return frozenset(self._cursors)

    def __len__(self) -> int:
        return len(self._elements)

    # ---- cursors ---------------------------------------------------------

    def attach(self, policy: CursorPolicy, start: int | None = None) -> Cursor:
        """A new cursor at ``start`` (default: the next element published).

        Raises:
            RetentionError: ``start`` is older than the oldest element held,
                or beyond the next one to be published; a replaying
                subscriber must learn that it missed elements rather than
                silently skip them.
        """
        if start is None:
            start = self.next_sequence
        if start < self._first:
            raise RetentionError(f"sequence {start} is no longer retained (the oldest held is {self._first})")
        if start > self.next_sequence:
            # Most likely a checkpoint from another life of this topic (the
            # server restarted and numbers from 0 again): waiting for that
            # number would silently skip everything until then.
            raise RetentionError(f"sequence {start} is ahead of the newest ({self.next_sequence - 1})")
        cursor = Cursor(policy, start)
        self._cursors.add(cursor)
        return cursor

    def detach(self, cursor: Cursor) -> None:
        """Forget ``cursor``; the publishers it held back get room."""
        self._cursors.discard(cursor)

    def available(self, cursor: Cursor) -> int:
        """Elements ``cursor`` could take now (before any skipping)."""
        return max(0, self.next_sequence - max(cursor.position, self._first))

    def take(self, cursor: Cursor, limit: int) -> tuple[int, list[bytes]]:
        """Up to ``limit`` elements for ``cursor``, and the sequence number of the first.

        Applies the cursor's policy: a ``drop`` cursor overtaken by eviction
        skips to the oldest element held, a ``latest`` cursor skips to the
        newest. Returns an empty list when nothing is waiting.
        """
        if limit <= 0:
            return cursor.position, []
        if cursor.position < self._first:
            # Only non-blocking cursors can be overtaken (eviction waits for
            # blocking ones), so this is the drop policy doing its job.
            cursor.dropped += self._first - cursor.position
            cursor.position = self._first
        waiting = self.next_sequence - cursor.position
        if waiting <= 0:
            return cursor.position, []
        if cursor.policy is CursorPolicy.LATEST and waiting > 1:
            cursor.dropped += waiting - 1
            cursor.position = self.next_sequence - 1
            waiting = 1
        count = min(limit, waiting)
        index = cursor.position - self._first
        first = cursor.position
        # One walk from the nearer end: indexing a deque in the middle costs
        # O(n) per element, which would make a large take quadratic.
        if index <= len(self._elements) // 2:
            taken = list(itertools.islice(self._elements, index, index + count))
        else:
            from_end = len(self._elements) - index
            taken = list(itertools.islice(reversed(self._elements), from_end - count, from_end))[::-1]
        cursor.position += count
        cursor.delivered += count
        return first, taken

    # ---- publishing -------------------------------------------------------

    def _floor(self) -> int:
        floor = self.next_sequence
        for cursor in self._cursors:
            if cursor.policy is CursorPolicy.BLOCK and cursor.position < floor:
                floor = cursor.position
        return floor

    def room(self) -> int:
        """How many elements may be published now without losing any a blocking subscriber needs."""
        return max(0, self.capacity - (self.next_sequence - self._floor()))

    def append(self, elements: list[bytes]) -> int:
        """Append as many of ``elements`` as :meth:`room` allows; return how many.

        Elements beyond ``capacity`` that no blocking cursor needs are
        evicted, oldest first.
        """
        count = min(len(elements), self.room())
        if count <= 0:
            return 0
        self._elements.extend(elements[:count] if count < len(elements) else elements)
        self.published += count
        excess = len(self._elements) - self.capacity
        if excess > 0:
            for _ in range(excess):
                self._elements.popleft()
            self._first += excess
            self.evicted += excess
        return count
