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

Room grows only when the floor rises: when the lowest blocking cursor
takes or detaches and no other blocking cursor is at its position. Any
other take or detach leaves the floor (and so every publisher) where it
was, which is what lets :mod:`rstreams._topic` wake publishers only then.
The log keeps the floor up to date as cursors move (a count of blocking
cursors per position, and the lowest of them), so :attr:`TopicLog.floor`,
:meth:`~TopicLog.room` and :meth:`~TopicLog.append` cost O(1) however many
cursors read, rather than a walk over all of them per call; finding the next
lowest position when the lowest one empties costs at most the fewer of the
distinct positions and the elements between them.

Retention by bytes (``capacity_bytes``) works the same way in bytes: the
elements held never add up to more, and the bytes from the slowest blocking
cursor to the newest element never exceed it either::

    room in bytes = capacity_bytes - bytes(floor .. next_seq)

A log is told both bounds and keeps whichever is tighter. To know the bytes
between any sequence number and the newest in O(1), the log keeps, for each
element held, the bytes published up to and including it (``_ends``).

A partitioned topic is one log per partition; :class:`Partitioner` decides
which log an element goes to.

This module imports no trio: :mod:`rstreams._topic` does the waiting.
"""

from __future__ import annotations

import enum
import itertools
import sys
import zlib
from array import array
from collections import OrderedDict, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "Cursor",
    "CursorPolicy",
    "Partitioner",
    "ProducerLedger",
    "TopicLog",
    "RetentionError",
    "encode_sequenced",
    "decode_sequenced",
    "encode_block",
    "decode_block",
    "split_block",
    "SEQUENCE_PREFIX",
    "BLOCK_HEADER",
]

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


#: Bytes before a block's offsets: first sequence (8, big-endian) and count (4, big-endian).
BLOCK_HEADER = 12


def encode_block(first: int, elements: Sequence[bytes]) -> bytes:
    """Elements ``first`` .. ``first+len-1`` packed into one wire element.

    The packed replay (``NAME?partition=I&from=N&pack=K``): instead of one
    wire element per element, each carries up to K of them, laid out as an
    Apache Arrow binary column so a reader can wrap it without touching
    each element::

        first sequence   8 bytes, big-endian
        count n          4 bytes, big-endian
        offsets          (n + 1) x int32, little-endian: 0, end of element 0, ...
        data             the elements, back to back

    Raises:
        ValueError: no elements, or more than 2 GiB of them (int32 offsets).
    """
    if not elements:
        raise ValueError("a block holds at least one element")
    offsets = array("i", itertools.accumulate(map(len, elements), initial=0))
    if sys.byteorder == "big":
        offsets.byteswap()
    header = first.to_bytes(SEQUENCE_PREFIX, "big") + len(elements).to_bytes(4, "big")
    return b"".join((header, offsets.tobytes(), *elements))


def decode_block(data: bytes) -> tuple[int, int, memoryview, memoryview]:
    """A block's first sequence, count, offsets bytes and data bytes (views, no copies).

    Raises:
        ValueError: too short, or the offsets do not match the data.
    """
    if len(data) < BLOCK_HEADER + 4:
        raise ValueError(f"a block has at least {BLOCK_HEADER + 4} bytes; got {len(data)}")
    view = memoryview(data)
    first = int.from_bytes(view[:SEQUENCE_PREFIX], "big")
    count = int.from_bytes(view[SEQUENCE_PREFIX:BLOCK_HEADER], "big")
    offsets_end = BLOCK_HEADER + 4 * (count + 1)
    if len(data) < offsets_end:
        raise ValueError(f"a block of {count} elements needs {offsets_end} bytes of header and offsets; got {len(data)}")
    last = int.from_bytes(view[offsets_end - 4 : offsets_end], "little")
    if len(data) - offsets_end != last:
        raise ValueError(f"a block's offsets end at {last}, its data has {len(data) - offsets_end} bytes")
    return first, count, view[BLOCK_HEADER:offsets_end], view[offsets_end:]


def split_block(data: bytes) -> tuple[int, list[bytes]]:
    """A block's first sequence and its elements (for readers without Arrow)."""
    first, count, offsets_bytes, payload = decode_block(data)
    offsets = array("i")
    offsets.frombytes(offsets_bytes)
    if sys.byteorder == "big":
        offsets.byteswap()
    return first, [bytes(payload[offsets[i] : offsets[i + 1]]) for i in range(count)]


class CursorPolicy(enum.Enum):
    """What a subscriber that falls behind does (see the module docstring)."""

    BLOCK = "block"
    DROP = "drop"
    LATEST = "latest"


class RetentionError(LookupError):
    """A cursor asked for elements the log no longer holds (or never will).

    Attributes:
        requested: the sequence number asked for.
        oldest: the oldest sequence number held.
        next_sequence: the sequence number the next element will get.
    """

    def __init__(self, message: str, *, requested: int, oldest: int, next_sequence: int) -> None:
        super().__init__(message)
        self.requested = requested
        self.oldest = oldest
        self.next_sequence = next_sequence

    @property
    def behind(self) -> int:
        """How many elements older than the oldest held were asked for (0: ahead instead)."""
        return max(0, self.oldest - self.requested)


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
        capacity_bytes: at most this many bytes of elements are held
            (> 0), or None for no bound in bytes.
    """

    def __init__(self, capacity: int, capacity_bytes: int | None = None) -> None:
        if type(capacity) is not int or capacity <= 0:
            raise ValueError(f"capacity must be a positive int, got {capacity!r}")
        if capacity_bytes is not None and (type(capacity_bytes) is not int or capacity_bytes <= 0):
            raise ValueError(f"capacity_bytes must be a positive int or None, got {capacity_bytes!r}")
        self.capacity = capacity
        self.capacity_bytes = capacity_bytes
        self._elements: deque[bytes] = deque()
        # _ends[i]: bytes published up to and including _elements[i].
        self._ends: deque[int] = deque()
        self._first = 0  # sequence number of _elements[0]
        self._cursors: set[Cursor] = set()
        # The blocking cursors by position (how many at each), and the lowest
        # such position (None: no blocking cursor): the floor, kept as they move.
        self._blocking: dict[int, int] = {}
        self._lowest: int | None = None
        self.published = 0
        self.evicted = 0
        self.published_bytes = 0
        self.evicted_bytes = 0

    @property
    def first_sequence(self) -> int:
        """The oldest sequence number still held (== next_sequence when empty)."""
        return self._first

    @property
    def next_sequence(self) -> int:
        """The sequence number the next published element gets."""
        return self._first + len(self._elements)

    @property
    def floor(self) -> int:
        """The lowest position of a blocking cursor, or next_sequence if none.

        Room is counted from it (see the module docstring); it rises only
        when a take or a detach frees room.
        """
        return self.next_sequence if self._lowest is None else self._lowest

    @property
    def held_bytes(self) -> int:
        """Bytes of the elements held."""
        return self.published_bytes - self.evicted_bytes

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
            raise RetentionError(
                f"sequence {start} is no longer retained, {self._first - start} behind the oldest held ({self._first})",
                requested=start,
                oldest=self._first,
                next_sequence=self.next_sequence,
            )
        if start > self.next_sequence:
            # Most likely a checkpoint from another life of this topic (the
            # server restarted and numbers from 0 again): waiting for that
            # number would silently skip everything until then.
            raise RetentionError(
                f"sequence {start} is ahead of the newest ({self.next_sequence - 1})",
                requested=start,
                oldest=self._first,
                next_sequence=self.next_sequence,
            )
        cursor = Cursor(policy, start)
        self._cursors.add(cursor)
        if policy is CursorPolicy.BLOCK:
            self._hold(start)
        return cursor

    def detach(self, cursor: Cursor) -> None:
        """Forget ``cursor``; the publishers it held back get room (if it set the floor)."""
        if cursor in self._cursors:
            self._cursors.remove(cursor)
            if cursor.policy is CursorPolicy.BLOCK:
                self._release(cursor.position)

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
        if cursor.policy is CursorPolicy.BLOCK and cursor in self._cursors:
            # Held at the new position before released at the old, so that
            # finding the next lowest stops at most ``count`` along.
            self._hold(cursor.position)
            self._release(first)
        return first, taken

    # ---- publishing -------------------------------------------------------

    def _hold(self, position: int) -> None:
        # A blocking cursor is now at ``position``.
        self._blocking[position] = self._blocking.get(position, 0) + 1
        if self._lowest is None or position < self._lowest:
            self._lowest = position

    def _release(self, position: int) -> None:
        # A blocking cursor left ``position``; the floor rises if it was the
        # last one at the lowest.
        remaining = self._blocking[position] - 1
        if remaining:
            self._blocking[position] = remaining
            return
        del self._blocking[position]
        if position != self._lowest:
            return
        blocking = self._blocking
        if not blocking:
            self._lowest = None
            return
        # The next lowest is the nearest position held above this one. Look
        # at most as many positions ahead as there are positions held, then
        # take the least of them: at most twice the fewer of the positions
        # held and the distance to the next, never a walk over every cursor
        # (a thousand readers at one position are one entry).
        for candidate in range(position + 1, position + 1 + len(blocking)):
            if candidate in blocking:
                self._lowest = candidate
                return
        self._lowest = min(blocking)

    def _bytes_before(self, sequence: int) -> int:
        # Bytes published before element ``sequence`` (first <= sequence <= next).
        if sequence <= self._first:
            return self.evicted_bytes
        return self._ends[sequence - self._first - 1]

    def room(self) -> int:
        """How many elements may be published now without losing any a blocking subscriber needs.

        Counted in elements; with ``capacity_bytes`` an element may still be
        refused by :meth:`append` for want of room in bytes (:meth:`room_bytes`).
        """
        return max(0, self.capacity - (self.next_sequence - self.floor))

    def fits(self, elements: Sequence[bytes]) -> bool:
        """Whether :meth:`append` would take all of ``elements`` now."""
        if len(elements) > self.room():
            return False
        room_bytes = self.room_bytes()
        return room_bytes is None or sum(map(len, elements)) <= room_bytes

    def room_bytes(self) -> int | None:
        """Bytes that may be published now (None: no bound in bytes)."""
        if self.capacity_bytes is None:
            return None
        return max(0, self.capacity_bytes - (self.published_bytes - self._bytes_before(self.floor)))

    def append(self, elements: Sequence[bytes]) -> int:
        """Append as many of ``elements`` as :meth:`room` allows; return how many.

        Elements beyond ``capacity`` (or ``capacity_bytes``) that no
        blocking cursor needs are evicted, oldest first.

        Raises:
            ValueError: an element is larger than ``capacity_bytes``: it
                could never be held.
        """
        floor = self.floor
        count = min(len(elements), self.capacity - (self.next_sequence - floor))
        if count <= 0:
            return 0
        accepted = elements[:count] if count < len(elements) else elements
        ends = list(itertools.accumulate((len(element) for element in accepted), initial=self.published_bytes))[1:]
        if self.capacity_bytes is not None:
            limit = self._bytes_before(floor) + self.capacity_bytes
            if ends[-1] > limit:
                count = _count_within(ends, limit)
                if count == 0:
                    size = len(accepted[0])
                    if size > self.capacity_bytes:
                        raise ValueError(f"an element of {size} bytes is larger than capacity_bytes={self.capacity_bytes}")
                    return 0
                accepted, ends = accepted[:count], ends[:count]
        self._elements.extend(accepted)
        self._ends.extend(ends)
        self.published += count
        self.published_bytes = ends[-1]
        self._evict()
        return count

    def _evict(self) -> None:
        # The room rules keep everything from the floor on within both
        # bounds, so this never evicts an element a blocking cursor needs.
        elements, ends = self._elements, self._ends
        excess = len(elements) - self.capacity
        if excess > 0:
            for _ in range(excess):
                elements.popleft()
                self.evicted_bytes = ends.popleft()
            self._first += excess
            self.evicted += excess
        if self.capacity_bytes is not None:
            while self.published_bytes - self.evicted_bytes > self.capacity_bytes:
                elements.popleft()
                self.evicted_bytes = ends.popleft()
                self._first += 1
                self.evicted += 1


def _count_within(ends: list[int], limit: int) -> int:
    # How many leading entries of the ascending ``ends`` are <= limit.
    low, high = 0, len(ends)
    while low < high:
        middle = (low + high) // 2
        if ends[middle] <= limit:
            low = middle + 1
        else:
            high = middle
    return low


class Partitioner:
    """Which partition of a topic each element goes to.

    Args:
        partitions: how many (> 0).
        key: a function of the published value whose result picks the
            partition: an int by its value modulo ``partitions``, a str or
            bytes by its CRC-32 (stable across processes and runs, unlike
            ``hash``). None: round robin, element by element.

    Elements with the same key always go to the same partition, in the
    order they were published.
    """

    def __init__(self, partitions: int, key: Callable[[Any], Any] | None = None) -> None:
        if type(partitions) is not int or partitions <= 0:
            raise ValueError(f"partitions must be a positive int, got {partitions!r}")
        if key is not None and not callable(key):
            raise TypeError(f"key must be a function of the published value, or None; got {key!r}")
        self.partitions = partitions
        self.key = key
        self._next = 0  # round robin: the partition of the next element

    def partition_of(self, key: Any) -> int:
        """The partition for one key (see the class docstring).

        Raises:
            TypeError: the key is not an int, str or bytes.
        """
        if isinstance(key, int):
            return key % self.partitions
        if isinstance(key, str):
            key = key.encode()
        if isinstance(key, (bytes, bytearray, memoryview)):
            return zlib.crc32(key) % self.partitions
        raise TypeError(f"a partition key is an int, str or bytes; the key function returned {type(key).__name__}")

    def next_partition(self, value: Any) -> int:
        """The partition one value would go to now; round robin moves on
        only at :meth:`advance` (once the element was accepted)."""
        if self.key is not None:
            return self.partition_of(self.key(value))
        return self._next

    def advance(self) -> None:
        """One element went where :meth:`next_partition` said."""
        if self.key is None:
            self._next = (self._next + 1) % self.partitions

    def advance_by(self, count: int) -> None:
        """``count`` elements went where a ``split(..., advance=False)`` said."""
        if self.key is None:
            self._next = (self._next + count) % self.partitions

    def split(
        self, elements: Sequence[bytes], values: Sequence[Any] | None = None, *, advance: bool = True
    ) -> list[list[bytes]]:
        """``elements`` as one list per partition, each in publishing order.

        ``values`` are what the key function is applied to (default: the
        elements themselves); ignored for round robin. With ``advance``
        false round robin stays where it is (for a split that may be
        retried; :meth:`advance_by` once it is used).
        """
        count = self.partitions
        if count == 1:
            return [list(elements)]
        if self.key is None:
            # Element i goes to (start + i) % count: a slice per partition.
            start = self._next
            if advance:
                self._next = (start + len(elements)) % count
            return [list(elements[(partition - start) % count :: count]) for partition in range(count)]
        key = self.key
        routed: list[list[bytes]] = [[] for _ in range(count)]
        for element, value in zip(elements, elements if values is None else values, strict=True):
            routed[self.partition_of(key(value))].append(element)
        return routed


class ProducerLedger:
    """Which elements of each idempotent producer a topic already holds.

    A producer (a Spark task, say) numbers its elements from 0 and sends
    them with its producer id; a retry of the same work under the same id
    sends the same numbers again. The ledger keeps, per producer id, the
    next sequence number it expects: older ones are duplicates and are
    dropped, the expected one is new, anything beyond is a gap (elements
    lost on the way), which is an error rather than a silent hole.

    The topic advances the ledger only once the elements are in the log, in
    the same synchronous step, so a publisher cancelled halfway never has
    elements marked that the log does not hold.

    Args:
        capacity: producer ids remembered (> 0); the least recently used is
            forgotten first. A producer forgotten and then retried would be
            taken as new: the window of exactly-once is this many producers.
    """

    def __init__(self, capacity: int) -> None:
        if type(capacity) is not int or capacity <= 0:
            raise ValueError(f"capacity must be a positive int, got {capacity!r}")
        self.capacity = capacity
        self._next: OrderedDict[str, int] = OrderedDict()
        self.duplicates = 0

    def __len__(self) -> int:
        return len(self._next)

    def expected(self, producer: str) -> int:
        """The sequence number the ledger expects next from ``producer``."""
        return self._next.get(producer, 0)

    def fresh(self, producer: str, sequenced: Sequence[bytes]) -> list[bytes]:
        """The payloads of ``sequenced`` elements (replay framing) not held yet, in order.

        Does not change the ledger: call :meth:`advance` once they are held.

        Raises:
            ValueError: an element is not framed, or a sequence number skips
                ahead of the next expected one.
        """
        expected = self.expected(producer)
        payloads: list[bytes] = []
        for raw in sequenced:
            sequence, payload = decode_sequenced(raw)
            if sequence < expected:
                self.duplicates += 1
                continue
            if sequence != expected:
                raise ValueError(f"producer {producer}: element {sequence} arrived, {expected} was expected next")
            payloads.append(payload)
            expected += 1
        return payloads

    def advance(self, producer: str, count: int) -> None:
        """``count`` more elements of ``producer`` are held."""
        self._next[producer] = self._next.get(producer, 0) + count
        self._next.move_to_end(producer)
        while len(self._next) > self.capacity:
            self._next.popitem(last=False)
