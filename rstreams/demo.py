"""The demo app: publishers to try rstreams with, and to test peers against.

It ships with the package, so an installed rstreams serves it without a
checkout::

    rstreams demo                                   # TCP 127.0.0.1:9000, WebSocket and the page on 127.0.0.1:8000
    rstreams serve rstreams.demo:app --tcp 127.0.0.1:9000   # the same app, with every serve option
    rstreams sub tcp://127.0.0.1:9000 'range?count=5' --format hex

(In a checkout ``examples.demo:app`` names the same app.)

Publishers (the query parameters are optional; defaults in brackets):

``range?count=N`` [10]
    N elements; element i is i as an 8-byte big-endian unsigned int. The
    stream is announced with elementSize 8, so runs go out as onNextPacked.
``blob?count=N&size=S`` [10, 1024]
    N elements of S bytes; byte j of element i is (i + j) % 256. elementSize
    0; elements above the split threshold (64 KiB) go out in parts.
``ticker?interval=SECONDS`` [1]
    Endless; each element is msgpack ``[seq, unix_time, value]``, where seq
    counts from 0 and value is a random walk (something worth plotting).
``fail?after=N`` [0]
    N elements as in ``range``, then onError.
``echo?source=NAME``
    Subscribes back to the client's publisher NAME on the same connection and
    republishes its elements, passing demand through.
``chat`` and ``sensors`` (topics, see ``rstreams.Topic``)
    Pub/sub hubs. Clients publish into them through ``chat/publish?source=NAME``
    (``examples/chat.py``, ``examples/sensors.py``) and every subscriber reads
    every element at its own pace: ``chat?history=20`` shows the last 20
    messages first; ``sensors?policy=latest`` skips to the newest reading.
    What a topic holds is the app's memory, outside every connection's
    budget, and here peers fill it: so each is bounded in bytes too
    (``capacity_bytes``: ``chat`` 4 MiB, ``sensors`` 1 MiB). A message
    larger than that is refused with onError, the publishing stream ends.

Any other name is answered with onError ``no such publisher: NAME`` by the
router. Invalid parameters (``nan``, ``inf``, out of bounds, missing) are
answered with onError too: the publishers raise ``rstreams.InvalidParameter``
(``SubscribeRequest.int_param`` / ``float_param`` do), which fails the
stream, not the session, and logs one ``bad_input`` line, no traceback.

Policy choices about speed: elements are cut from bytes built ahead of time
and handed over in batches (``send_packed``, ``send_many``), never built
byte by byte or sent one checkpoint per element. And about memory, since a
subscribe costs the peer a few bytes: nothing is built for a stream before
its subscriber asks for something, and what is built is shared by every
stream that can use it (``blob``'s pattern), so memory follows demand, not
the number of subscribes.
"""

from __future__ import annotations

import random
import struct
import time
from collections.abc import Awaitable, Iterator
from contextlib import contextmanager
from functools import lru_cache

import trio

import rstreams

__all__ = [
    "app",
    "chat",
    "sensors",
    "CHAT_CAPACITY_BYTES",
    "SENSORS_CAPACITY_BYTES",
    "RANGE_BLOCK",
    "RANGE_IDLE_RUN",
    "MAX_BLOB_SIZE",
    "BLOB_BATCH_BYTES",
    "BLOB_BATCH_ELEMENTS",
    "MIN_INTERVAL",
    "MAX_INTERVAL",
    "ECHO_PREFETCH",
]

app = rstreams.Router()

#: The most bytes of messages the ``chat`` topic holds: its history is the
#: app's memory, not any connection's, and peers fill it, so it is bounded
#: in bytes as well as in messages (256 messages of 16 KiB; fewer larger ones).
CHAT_CAPACITY_BYTES = 4 * 1024 * 1024
#: The same for ``sensors`` (1024 readings of 1 KiB; a reading is ~40 bytes).
SENSORS_CAPACITY_BYTES = 1024 * 1024

#: A chat room: JSON messages ``{"from", "text"}``. The default ``block``
#: policy means a subscriber that stops reading holds the room back once 256
#: messages (or CHAT_CAPACITY_BYTES) are waiting for it, so nobody misses a
#: message; a chat with many idle readers would subscribe with
#: ``policy=drop`` instead.
chat = rstreams.Topic("chat", capacity=256, capacity_bytes=CHAT_CAPACITY_BYTES)
chat.mount(app)
#: A live sensor feed: msgpack ``{"sensor", "ts", "value"}``. Hot data: a
#: dashboard subscribes with ``policy=latest`` (never holds the sensors back,
#: always shows the newest); a recorder with ``block`` (sees every reading).
sensors = rstreams.Topic("sensors", capacity=1024, capacity_bytes=SENSORS_CAPACITY_BYTES)
sensors.mount(app)

#: Elements per precomputed ``range`` block (512 KiB of packed elements).
RANGE_BLOCK = 65536
#: The longest ``range`` sent at once with its subscribed (no task), when the
#: subscribe already asks for all of it.
RANGE_IDLE_RUN = 256
#: The largest ``blob`` element: what a peer with default limits accepts.
MAX_BLOB_SIZE = 32 * 1024 * 1024
#: About how many bytes of ``blob`` elements are handed over per batch, so a
#: large demand of large elements never builds more than this at once.
BLOB_BATCH_BYTES = 1024 * 1024
#: At most this many ``blob`` elements per batch.
BLOB_BATCH_ELEMENTS = 4096
#: How many element sizes of small ``blob`` elements are kept cut (each at
#: most 256 elements of up to 4 KiB: 1 MiB), shared by the streams of a size.
BLOB_CYCLES = 8
#: The shortest ``ticker`` interval, and the longest (a day).
MIN_INTERVAL = 0.001
MAX_INTERVAL = 86400.0
#: How many elements ``echo`` may ask of its source beyond what its own
#: subscriber asked for, so that a batch is ready when demand arrives.
ECHO_PREFETCH = 16

_UNBOUNDED = 2**63 - 1
_MAX_COUNT = 2**64  # range elements are 8-byte unsigned ints

# Elements 0 .. RANGE_BLOCK-1, packed: the only block built number by number.
_RANGE_BLOCK_0 = struct.pack(f">{RANGE_BLOCK}Q", *range(RANGE_BLOCK))


def _range_elements(start: int, count: int) -> bytes:
    # Elements start .. start+count-1, within one block of RANGE_BLOCK (a
    # power of two): their low two bytes are those of block 0 and their high
    # six bytes are the block's index in every element, so copy the slice of
    # block 0 and write each high byte into every 8th position at once.
    offset = start % RANGE_BLOCK
    index = start // RANGE_BLOCK
    if not index:
        return _RANGE_BLOCK_0[offset * 8 : (offset + count) * 8]
    block = bytearray(memoryview(_RANGE_BLOCK_0)[offset * 8 : (offset + count) * 8])
    for position, byte in enumerate(index.to_bytes(6, "big")):
        if byte:
            block[position::8] = bytes((byte,)) * count
    return bytes(block)


async def _send_range(sink: rstreams.Sink, count: int) -> None:
    # Build only what the subscriber has asked for (at most a block), and
    # nothing before it asks: a slow subscriber pins a few bytes of this
    # task's memory, not a 512 KiB block, and one that has asked for nothing
    # yet pins none (thousands of waiting streams cost their tasks only).
    sent = 0
    while sent < count:
        await sink.wait_demand()
        run = min(count - sent, RANGE_BLOCK - sent % RANGE_BLOCK, sink.demand)
        await sink.send_packed(_range_elements(sent, run))
        sent += run


@app.publisher("range", element_size=8)
def range_(sink: rstreams.Sink, request: rstreams.SubscribeRequest) -> Awaitable[None] | None:
    """``count`` elements, element i being i as 8-byte big-endian unsigned.

    A plain ``def``: when the subscribe already asks for every element (a
    short range), they go out at once with subscribed and onComplete, with
    no task; otherwise the stream continues as the ``_send_range`` task.
    """
    count = request.int_param("count", 10, minimum=0, maximum=_MAX_COUNT)
    if count <= min(sink.demand, RANGE_IDLE_RUN):
        sink.send_packed_nowait(_range_elements(0, count))
        return None
    return _send_range(sink, count)


class _SharedPattern:
    """The bytes every ``blob`` element is a slice of, shared by all streams.

    Element i of size S is the S bytes at offset i % 256 of a buffer of
    bytes 0..255 repeated. One such buffer serves every stream whose
    elements fit it, so memory does not grow with the number of streams: a
    stream takes it only once it has demand (a peer that subscribes many
    times and asks for nothing costs nothing), and it is dropped when the
    last stream using it ends. The size it serves is rounded up to a power
    of two, so streams of ever larger sizes hold at most a few generations
    of it (all together about twice the largest).
    """

    def __init__(self) -> None:
        self._buffer = b""
        self._users = 0

    @contextmanager
    def at_least(self, size: int) -> Iterator[bytes]:
        if len(self._buffer) < size + 255:
            # size rounded up to a power of two (at least 1 MiB, what small
            # elements need), plus room for the largest offset.
            length = max(BLOB_BATCH_BYTES, 1 << (size - 1).bit_length()) + 256
            self._buffer = bytes(range(256)) * (length // 256)
        self._users += 1
        try:
            yield self._buffer
        finally:
            self._users -= 1
            if not self._users:
                self._buffer = b""

    @property
    def size(self) -> int:
        """Bytes held now (0 while no stream is sending)."""
        return len(self._buffer)


_pattern = _SharedPattern()


@lru_cache(maxsize=BLOB_CYCLES)
def _blob_cycle(size: int, per_batch: int) -> tuple[bytes, ...]:
    # Small elements: the stream repeats every 256 elements, so the distinct
    # ones are cut once per size (shared by every stream of that size, a few
    # sizes kept) and a batch is a slice of a tuple that cycles them.
    with _pattern.at_least(size) as pattern:
        distinct = tuple(pattern[offset : offset + size] for offset in range(256))
    return distinct * (per_batch // 256 + 2)


@app.publisher("blob")
async def blob(sink: rstreams.Sink, request: rstreams.SubscribeRequest) -> None:
    """``count`` elements of ``size`` bytes; byte j of element i is (i + j) % 256."""
    count = request.int_param("count", 10, minimum=0)
    size = request.int_param("size", 1024, minimum=0, maximum=MAX_BLOB_SIZE)
    if not count:
        return
    # Nothing is built before the subscriber asks for something.
    await sink.wait_demand()
    per_batch = max(1, min(BLOB_BATCH_ELEMENTS, BLOB_BATCH_BYTES // max(size, 1)))
    sent = 0
    if per_batch >= 256:
        cycle = _blob_cycle(size, per_batch)
        while sent < count:
            n = min(per_batch, count - sent)
            offset = sent % 256
            await sink.send_many(cycle[offset : offset + n])
            sent += n
        return
    # Large elements: views of the shared pattern, not copies of it: the
    # session writes each straight from the pattern.
    with _pattern.at_least(size) as pattern:
        view = memoryview(pattern)
        while sent < count:
            n = min(per_batch, count - sent)
            batch = [view[i % 256 : i % 256 + size] for i in range(sent, sent + n)]
            await sink.send_many(batch)
            sent += n


@app.publisher("ticker", codec="msgpack")
async def ticker(sink: rstreams.Sink, request: rstreams.SubscribeRequest) -> None:
    """Endless ``[seq, unix_time, value]`` every ``interval`` seconds."""
    interval = request.float_param("interval", 1.0, minimum=MIN_INTERVAL, maximum=MAX_INTERVAL)
    walk = random.Random()
    value = 100.0
    seq = 0
    next_tick = trio.current_time()
    while True:
        # A tick is made only when the subscriber wants one: a subscriber
        # that stops requesting gets no backlog, and when it comes back the
        # ticks resume on the schedule instead of bursting to catch up.
        await sink.wait_demand()
        now = trio.current_time()
        if next_tick < now - interval:
            next_tick = now
        await rstreams.sleep_until(next_tick)
        value += walk.gauss(0.0, 1.0)
        await sink.send([seq, time.time(), value])
        seq += 1
        next_tick += interval


@app.publisher("fail", element_size=8)
async def fail(sink: rstreams.Sink, request: rstreams.SubscribeRequest) -> None:
    """``after`` elements as in ``range``, then onError."""
    after = request.int_param("after", 0, minimum=0, maximum=_MAX_COUNT)
    await _send_range(sink, after)
    raise RuntimeError(f"fail: failing after {after} elements as asked")


@app.publisher("echo")
async def echo(sink: rstreams.Sink, request: rstreams.SubscribeRequest) -> None:
    """Republish the client's publisher ``source``, demand passed through.

    The source is asked for at most what this stream's subscriber asked for
    plus ECHO_PREFETCH. The echo completes or fails when the source does (with
    the source's error text); when the echo subscriber cancels, leaving the
    ``async with`` cancels the source.
    """
    source = request.params.get("source")
    if not source:
        raise rstreams.InvalidParameter("echo needs a source: echo?source=NAME")
    async with request.session.subscribe(source, prefetch=0) as upstream:
        requested = 0  # asked of the source so far
        forwarded = 0  # handed to our subscriber so far

        def top_up() -> None:
            # Allowed from the source: what our subscriber allows in total
            # (forwarded + its outstanding demand) plus the prefetch.
            nonlocal requested
            demand = sink.demand
            allowed = _UNBOUNDED if demand >= _UNBOUNDED else min(forwarded + demand + ECHO_PREFETCH, _UNBOUNDED)
            if allowed > requested:
                upstream.request(allowed - requested)
                requested = allowed

        # After each batch is forwarded, at least ECHO_PREFETCH elements are
        # outstanding at the source, so waiting on it cannot stall for lack of
        # demand; demand that grows meanwhile is passed on with the next batch.
        top_up()
        async for batch in upstream.batches():
            await sink.send_many(batch)
            forwarded += len(batch)
            top_up()
