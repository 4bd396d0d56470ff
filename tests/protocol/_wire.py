"""What the tests of the connection's fast readers share (the part reader,
the run reader, receiving into buffers): the limits they run under, how a
wire is cut into reads and fed, and how events are compared across paths.
"""

from __future__ import annotations

import msgpack
from hypothesis import strategies as st

from rstreams.protocol import Connection, Elements, Event, ProtocolLimits, RemoteProtocolError

LIMITS = ProtocolLimits(max_message_size=1 << 20, max_element_size=4 << 20, split_threshold=64 * 1024)


def split_into_reads(data: bytes, sizes: list[int]) -> list[bytes]:
    """``data`` cut into reads of ``sizes`` bytes, and one for the rest."""
    reads = []
    position = 0
    for size in sizes:
        if position >= len(data):
            break
        reads.append(data[position : position + size])
        position += size
    if position < len(data):
        reads.append(data[position:])
    return reads


def feed_reads(client: Connection, reads: list[bytes], steps: list[int] | None = None) -> tuple[list[Event], str | None]:
    """Feed the reads one by one, taking the events after each (``steps``:
    the max_events of each call); return them and the text of the protocol
    error that ended the connection, if any."""
    events: list[Event] = []
    limits = iter(steps or [])
    try:
        for data in reads:
            client.receive_data(data)
            while True:
                batch = client.events(next(limits, None))
                if not batch and not client.parse_paused:
                    break
                events += batch
    except RemoteProtocolError as exc:
        return events, str(exc)
    return events, None


def normalized(events: list[Event], *, bytes_only: bool = False) -> list[object]:
    """Events with adjacent Elements of one stream merged: where a run of
    elements is cut into events depends on where calls stop, not on the
    path that read them. Every batch's byte count is its elements', and
    with ``bytes_only`` they are all bytes (not views)."""
    merged: list[object] = []
    for event in events:
        if type(event) is Elements:
            assert not bytes_only or all(type(element) is bytes for element in event.elements)
            assert event.elements.nbytes == sum(map(len, event.elements))
            if merged and type(merged[-1]) is tuple and merged[-1][0] == event.subscriber:
                merged[-1][1].extend(event.elements)
            else:
                merged.append((event.subscriber, list(event.elements)))
        else:
            merged.append(event)
    return merged


def message_starts(wire: bytes) -> list[int]:
    """Where each message of well-formed ``wire`` starts."""
    unpacker = msgpack.Unpacker(max_buffer_size=len(wire) + 1)
    unpacker.feed(wire)
    starts = [0]
    for _ in unpacker:
        starts.append(unpacker.tell())
    return starts[:-1]


def read_sizes(max_size: int) -> st.SearchStrategy[list[int]]:
    """How a peer's bytes are cut into reads: tiny reads (headers cut
    anywhere) mixed with reads larger than a part or a default read."""
    return st.lists(st.one_of(st.integers(1, 40), st.integers(1, 300 * 1024)), max_size=max_size)
