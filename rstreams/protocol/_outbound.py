"""What goes out next: control first, then data fairly across streams.

The draft leaves scheduling to implementations; these decisions belong to the
protocol rather than to I/O, so they live here, deterministic and testable
without sockets:

1. **Control first.** hello, subscribe, request, cancel, subscribed, and the
   onError that refuses a subscribe are written to a control buffer that is
   always emitted before any data. Demand and cancellation then never wait
   behind bulk data.
2. **Terminal signals are not control.** A stream's onComplete / onError is
   queued *behind* that stream's elements, so the last elements of a stream
   are never overtaken by its end.
3. **Deficit round-robin across streams.** Streams with queued work form a
   ring; each visit emits up to one quantum (``split_threshold`` bytes, at
   least one message) of that stream, then moves on. One busy stream cannot
   starve the others.
4. **Split large elements.** An element larger than ``split_threshold`` goes
   out as onNextPart ... onNextLastPart, one part per visit, so other streams
   interleave between its parts (wire-v0 rule 8). Its parts carry
   ``part_size`` bytes each (the last one the rest; an element no larger
   than that goes in two halves): each part costs both sides a header and
   its bookkeeping, so parts larger than the threshold at which splitting
   starts pay (see ``ProtocolLimits.part_size``). The receiver holds the
   parts of every element begun and not finished, against its memory
   budget: so a new split element begins only while the elements being
   split on the connection add up to at most ``max_splitting`` bytes with
   it (or none is being split); until then that stream waits its turn and
   the others go on. Many streams of large elements therefore cost the
   receiver a bounded amount, however they interleave.
5. **Pack fixed-size elements.** On a stream with ``elementSize > 0``, the
   queued elements are packed buffers, or runs of single sends; whenever
   two or more fit in the quantum they go out as one onNextPacked, a lone
   one as onNext.

Demand is *not* checked here: the connection takes an element's demand when
the element is queued, so whatever sits in a queue is already allowed.

Elements are queued in chunks exactly as the application handed them over
(a list of bytes, or one packed buffer of fixed-size elements), so queueing a
batch costs one append, and writing it costs a few byte appends per element;
single sends of one size join one list (``enqueue_one``), on any stream.

**Gathered parts.** The same schedule can be handed out two ways:
``data_to_send`` copies everything into one bytearray (what TLS and
WebSocket need, and any stream transport takes), and ``buffers_to_send``
returns a list of buffers in which each large split part is a view of the
element itself, between the bytes written around it: a transport with
``sendmsg`` (plain TCP) writes the list without copying the parts. Both go
through the same ``_emit``; the only difference is whether ``_emit_part``
copies a part into the output or notes where its view goes, so the order,
the quanta and the split points are the same either way.
"""

from __future__ import annotations

from collections import deque

from ._codec import bin_header, int_bytes
from ._demand import Demand
from ._messages import MessageType
from ._state import PUBLICATION_TRANSITIONS, PublicationEvent, PublicationState

__all__ = ["Publication", "Outbound", "OutBuffer", "SameSizeElements", "EMPTY_ELEMENT_BYTES"]

#: What an empty element counts in a publication's queued bytes (and so in
#: ``max_queued_bytes`` and the connection's memory budget); any other
#: element counts its length. (The bridges' responses count it the same:
#: ``bridges.kit.collect_elements``.) Without it a publisher of empty elements (the
#: demo's ``blob?size=0``) facing a subscriber with demand that does not
#: read filled the queue without ever reaching a byte bound: the server grew
#: by 65 MB a second. With it a queue holds at most ``max_queued_bytes``
#: elements, as one of 1-byte elements always could.
EMPTY_ELEMENT_BYTES = 1

#: One buffer of a gathered write (see ``Outbound.buffers_to_send``).
OutBuffer = bytearray | memoryview

#: An element as queued by a publisher: bytes, or a memoryview of a bytes
#: object (see ``Connection.send_elements``); both are written as they are.
QueuedElement = bytes | memoryview

_MAX_CACHED_HEADERS = 64
# Module constants: reading an enum member through its class is slow (see
# _connection.py), and these are read for every publication.
_REQUESTED = PublicationState.REQUESTED
_DONE = PublicationState.DONE
_TERMINAL_WRITTEN = PublicationEvent.TERMINAL_WRITTEN
# Runs of elements up to this size are written with one join (which copies
# each element twice, once into the joined bytes and once into the output):
# cheaper than two appends per element while the copies are small.
_JOINED_ELEMENT_SIZE = 1024
# Split parts at least this large are handed out as views when gathering;
# smaller ones are copied: below it a copy costs less than one more buffer
# in the list (and this bounds a write's list to a few dozen buffers).
_GATHER_MIN_PART = 16 * 1024


class SameSizeElements(list[QueuedElement]):
    """A chunk of queued elements all of one size, as found when they were
    queued (``Connection.send_elements``): a stream of variable-size
    elements most often sends runs of one size, and the scheduler then
    writes them with one join without measuring each element again."""

    __slots__ = ()


class Publication:
    """Outbound state of one stream that the peer subscribed to."""

    __slots__ = (
        "subscriber",
        "publisher",
        "state",
        "demand",
        "element_size",
        "chunks",
        "head",
        "queued_count",
        "queued_bytes",
        "splitting",
        "split_offset",
        "split_id",
        "next_element_id",
        "terminal",
        "scheduled",
        "_id_bytes",
        "_on_next_headers",
    )

    def __init__(self, subscriber: int, publisher: str, demand: int) -> None:
        self.subscriber = subscriber
        self.publisher = publisher
        self.state = _REQUESTED
        self.demand = Demand(demand) if demand > 0 else Demand()
        self.element_size = 0
        # Queued elements in the chunks the application handed over: a list of
        # bytes, or one bytes object packing elements of element_size bytes.
        self.chunks: deque[list[QueuedElement] | bytes] = deque()
        self.head = 0  # index of the next element in chunks[0]
        self.queued_count = 0
        self.queued_bytes = 0
        self.splitting: memoryview | None = None  # the element being split
        self.split_offset = 0
        self.split_id = 0
        self.next_element_id = 0
        self.terminal: bytes | None = None  # onComplete/onError, after the queue
        self.scheduled = False  # in the ready ring
        self._id_bytes = int_bytes(subscriber)
        self._on_next_headers: dict[int, bytes] = {}

    @property
    def has_work(self) -> bool:
        return bool(self.queued_count or self.splitting is not None or self.terminal is not None)

    @property
    def pending_bytes(self) -> int:
        """Bytes queued, including what is left of an element being split."""
        split = len(self.splitting) - self.split_offset if self.splitting is not None else 0
        return self.queued_bytes + split

    def discard(self) -> int:
        """Drop everything queued; return how many elements were dropped."""
        dropped = self.queued_count + (1 if self.splitting is not None else 0)
        self.chunks.clear()
        self.head = self.queued_count = self.queued_bytes = 0
        self.splitting = None
        self.terminal = None
        return dropped

    def on_next_header(self, length: int) -> bytes:
        header = self._on_next_headers.get(length)
        if header is None:
            header = b"\x93\x05" + self._id_bytes + bin_header(length)
            if len(self._on_next_headers) < _MAX_CACHED_HEADERS:
                self._on_next_headers[length] = header
        return header

    # The two control messages every stream sends, laid out as encode() would
    # write Subscribed and OnComplete (a test holds them to it), from the id
    # bytes already at hand: they go out once per subscribe.
    def subscribed_message(self) -> bytes:
        return b"\x93\x04" + self._id_bytes + int_bytes(self.element_size)

    def on_complete_message(self) -> bytes:
        return b"\x92\x06" + self._id_bytes

    def part_header(self, code: int, element_id: int, length: int) -> bytes:
        return b"\x94" + bytes((code,)) + self._id_bytes + int_bytes(element_id) + bin_header(length)

    def packed_header(self, count: int, length: int) -> bytes:
        return b"\x94\x08" + self._id_bytes + int_bytes(count) + bin_header(length)


class Outbound:
    """The outgoing side of a connection: control buffer plus the data ring."""

    def __init__(self, split_threshold: int, max_splitting: int | None = None, part_size: int | None = None) -> None:
        self.split_threshold = split_threshold
        # The payload of a part (see 4.); the threshold's own size by default.
        self.part_size = split_threshold if part_size is None else part_size
        # Sizes of the elements being split, all streams together (see 4.).
        self.max_splitting = max_splitting
        self.splitting_bytes = 0
        self.control = bytearray()
        self.ready: deque[Publication] = deque()
        # Ids whose terminal message was written since the last call.
        self.finished: list[Publication] = []
        # While buffers_to_send runs: where each gathered part goes (its
        # offset in the output bytearray, its view), what they count against
        # max_bytes together, and the share of its size a view counts
        # (max_bytes / max_gathered, as a numerator and a denominator).
        self._gathered: list[tuple[int, memoryview]] | None = None
        self._gathered_bytes = 0
        self._gather_share = (1, 1)
        # Bytes of elements queued on every publication together, and not yet
        # written (pending_bytes summed): the connection's memory budget
        # reads it, so it is kept up to date here, per enqueue and per
        # publication visited by a write, never summed over publications.
        self.data_bytes = 0

    def unschedule(self, publication: Publication) -> None:
        if publication.scheduled:
            publication.scheduled = False
            self.ready.remove(publication)

    def schedule(self, publication: Publication) -> None:
        if not publication.scheduled:
            publication.scheduled = True
            self.ready.append(publication)

    def enqueue(self, publication: Publication, chunk: list[QueuedElement] | bytes, count: int, nbytes: int) -> None:
        publication.chunks.append(chunk)
        publication.queued_count += count
        publication.queued_bytes += nbytes
        self.data_bytes += nbytes
        self.schedule(publication)

    def enqueue_one(self, publication: Publication, element: QueuedElement, nbytes: int) -> None:
        """As :meth:`enqueue`, for one element: it joins the publication's
        last chunk when that holds elements of its size, so that a loop of
        single sends queues one chunk, which the scheduler writes with one
        join (packed, on a fixed-size stream), instead of a chunk per
        element. (The chunks are the connection's own lists; the scheduler
        reads a chunk's length afresh on each visit, so one may grow while
        it is queued.)"""
        chunks = publication.chunks
        last = chunks[-1] if chunks else None
        if type(last) is not SameSizeElements or len(last[-1]) != nbytes:
            self.enqueue(publication, SameSizeElements((element,)), 1, nbytes or EMPTY_ELEMENT_BYTES)
            return
        # (enqueue's counting, written out: this runs for every send of a run)
        last.append(element)
        publication.queued_count += 1
        counted = nbytes or EMPTY_ELEMENT_BYTES
        publication.queued_bytes += counted
        self.data_bytes += counted
        self.schedule(publication)

    def drop(self, publication: Publication) -> int:
        """Discard what a publication has queued; return the elements dropped."""
        self.data_bytes -= publication.pending_bytes
        if publication.splitting is not None:
            self.splitting_bytes -= len(publication.splitting)
        return publication.discard()

    def _may_split(self, size: int) -> bool:
        """Whether an element of ``size`` bytes may begin to go out in parts now."""
        limit = self.max_splitting
        return limit is None or not self.splitting_bytes or self.splitting_bytes + size <= limit

    @property
    def has_data(self) -> bool:
        return bool(self.control or self.ready)

    def buffers_to_send(self, max_bytes: int, max_gathered: int | None = None) -> list[OutBuffer]:
        """As ``data_to_send``, as a list of buffers: large split parts are
        views of their elements (bytes, so they cannot change meanwhile).

        ``max_gathered`` (default ``max_bytes``): about how many bytes of
        such views one call hands out. A view costs no memory beyond its
        element, which was counted while queued, so a write may carry more
        of them than it copies: each counts against ``max_bytes`` for its
        share, ``max_bytes / max_gathered`` of its size. The schedule is the
        same; only where one call ends and the next begins moves."""
        gathered: list[tuple[int, memoryview]] = []
        self._gathered = gathered
        self._gathered_bytes = 0
        if max_gathered is not None and max_gathered > max_bytes > 0:
            self._gather_share = (max_bytes, max_gathered)
        try:
            out = self.data_to_send(max_bytes)
        finally:
            self._gathered = None
            self._gathered_bytes = 0
            self._gather_share = (1, 1)
        if not gathered:
            return [out] if out else []
        buffers: list[OutBuffer] = []
        view = memoryview(out)
        start = 0
        for offset, part in gathered:
            if offset > start:
                buffers.append(view[start:offset])
            buffers.append(part)
            start = offset
        if start < len(out):
            buffers.append(view[start:])
        return buffers

    def data_to_send(self, max_bytes: int) -> bytearray:
        out = self.control
        self.control = bytearray()
        ready = self.ready
        quantum = self.split_threshold
        # Gathered parts are not in out but count as written.
        while ready and len(out) + self._gathered_bytes < max_bytes:
            publication = ready.popleft()
            # One quantum per visit, but never far past max_bytes: _emit
            # writes at least one message and stops once over its limit.
            room = max_bytes - len(out) - self._gathered_bytes
            pending = publication.pending_bytes
            self._emit(publication, out, len(out) + (quantum if quantum < room else room))
            self.data_bytes -= pending - publication.pending_bytes
            if publication.state is not _DONE and publication.has_work:
                ready.append(publication)
            else:
                publication.scheduled = False
        return out

    def _emit(self, pub: Publication, out: bytearray, limit: int) -> None:
        threshold = self.split_threshold
        while len(out) < limit:
            if pub.splitting is not None:
                # A gathered part is written, but not into out: the limit
                # moves instead, which keeps every check below as it was.
                limit -= self._emit_part(pub, out)
                continue
            if not pub.queued_count:
                if pub.terminal is not None:
                    out += pub.terminal
                    pub.terminal = None
                    pub.state = PUBLICATION_TRANSITIONS[pub.state, _TERMINAL_WRITTEN]
                    self.finished.append(pub)
                return
            chunk = pub.chunks[0]
            head = pub.head
            size = pub.element_size
            waiting = False  # an element that may not begin to split yet
            if size or isinstance(chunk, bytes):
                # A fixed-size stream: emit as many elements as fit in one
                # message. Its chunk is packed (bytes), or a run of single
                # sends (SameSizeElements, see enqueue_one), joined here.
                packed = isinstance(chunk, bytes)
                available = (len(chunk) // size if packed else len(chunk)) - head
                fit = (limit - len(out)) // size  # at least one goes, even if none fits
                count = available if available <= fit else fit if fit > 1 else 1
                if size > threshold:
                    # Too large to go whole: split it like any large element.
                    if not self._may_split(size):
                        return  # (its turn comes again; see 4.)
                    count = 1
                    if isinstance(chunk, bytes):
                        self._start_split(pub, memoryview(chunk)[head * size : (head + 1) * size])
                    else:
                        self._start_split(pub, memoryview(chunk[head]))
                elif count == 1:
                    header = pub._on_next_headers.get(size)
                    out += header if header is not None else pub.on_next_header(size)
                    if isinstance(chunk, bytes):
                        out += memoryview(chunk)[head * size : (head + 1) * size]
                    else:
                        out += chunk[head]
                else:
                    # A view, not a slice (or one join): the bytes are copied
                    # once, into out.
                    if isinstance(chunk, bytes):
                        data: bytes | memoryview = memoryview(chunk)[head * size : (head + count) * size]
                    else:
                        data = b"".join(chunk[head : head + count])
                    out += pub.packed_header(count, len(data))
                    out += data
                taken, nbytes = count, count * size
                head += count
                exhausted = (head * size if packed else head) >= len(chunk)
            else:
                # A list chunk (variable-size elements): onNext each, or split.
                end = len(chunk)
                nbytes = 0
                start = head
                headers = pub._on_next_headers
                joined = False
                length = len(chunk[head])
                if length <= _JOINED_ELEMENT_SIZE:
                    # Small elements, most often all of one size: as many as
                    # the loop below would take, written by one C-speed join
                    # (header + e1 + header + e2 ...) instead of two appends
                    # each; a run of mixed sizes falls through to the loop.
                    header = pub.on_next_header(length)
                    step = len(header) + length
                    count = min(end - head, max(1, -(-(limit - len(out)) // step)))
                    run = chunk[head : head + count]
                    if (
                        count == 1
                        or type(chunk) is SameSizeElements
                        or max(map(len, run)) == min(map(len, run)) == length
                    ):
                        gathered = self._gathered
                        if gathered is not None and count * step >= _GATHER_MIN_PART:
                            # Handed out as a buffer of its own, like a large
                            # part: not copied a second time, into out (whose
                            # growth to a write's size page-faulted).
                            run.insert(0, b"")  # (so that a header leads each element)
                            gathered.append((len(out), memoryview(header.join(run))))
                            self._gathered_bytes += count * step
                            limit -= count * step
                        else:
                            out += header
                            out += header.join(run)
                        head += count
                        nbytes = count * (length or EMPTY_ELEMENT_BYTES)
                        joined = True
                while not joined and head < end:
                    queued = chunk[head]
                    length = len(queued)
                    if length > threshold:
                        if head != start:
                            pass
                        elif self._may_split(length):
                            # Start splitting this element; it leaves the
                            # queue now and goes out part by part.
                            self._start_split(pub, memoryview(queued))
                            head += 1
                            nbytes += length
                        else:
                            waiting = True  # (its turn comes again; see 4.)
                        break
                    cached = headers.get(length)
                    out += cached if cached is not None else pub.on_next_header(length)
                    out += queued
                    nbytes += length or EMPTY_ELEMENT_BYTES
                    head += 1
                    if len(out) >= limit:
                        break
                taken = head - start
                exhausted = head >= end
            pub.queued_count -= taken
            pub.queued_bytes -= nbytes
            if exhausted:
                pub.chunks.popleft()
                pub.head = 0
            else:
                pub.head = head
                if waiting:
                    return

    def _start_split(self, pub: Publication, element: memoryview) -> None:
        self.splitting_bytes += len(element)
        pub.splitting = element
        pub.split_offset = 0
        pub.split_id = pub.next_element_id
        pub.next_element_id += 1

    def _emit_part(self, pub: Publication, out: bytearray) -> int:
        # Returns what the part gathered rather than copied into out counts
        # against the write's size (see buffers_to_send), else 0.
        element = pub.splitting
        assert element is not None
        offset = pub.split_offset
        size = len(element)
        # Parts of part_size, the last one the rest; an element no larger
        # than that goes in two halves, since a split element has at least
        # one onNextPart before its onNextLastPart (the draft's wording).
        part = self.part_size
        end = offset + (part if size > part else size - size // 2)
        if end >= size:
            code = MessageType.ON_NEXT_LAST_PART
            end = size
            pub.splitting = None
            self.splitting_bytes -= size
        else:
            code = MessageType.ON_NEXT_PART
            pub.split_offset = end
        out += pub.part_header(code, pub.split_id, end - offset)
        gathered = self._gathered
        if gathered is not None and end - offset >= _GATHER_MIN_PART:
            gathered.append((len(out), element[offset:end]))
            share, whole = self._gather_share
            counted = -(-(end - offset) * share // whole)  # (rounded up: never 0)
            self._gathered_bytes += counted
            return counted
        out += element[offset:end]
        return 0
