"""CPU per element of receiving 1 MiB split elements in ``Connection`` alone.

    python bench/receive_cost.py [ROOT]

Feeds the same wire bytes (200 elements of 1 MiB in 64 KiB parts) to a
connection subscribed with the default ``bytes`` elements (read as
``receive_data`` of 256 KiB, each copied out of the wire first, as
``os.read`` would) and to one subscribed with ``copy=False`` (read into
the buffers ``receive_buffers`` offers, the kernel's copy done by a slice
assignment), interleaved, 7 rounds each, and prints the medians in µs of
process time per element and the page faults per element. The
application drops what it received every 16 elements. ROOT: the checkout
whose ``rstreams`` to import (default: this one).
"""

from __future__ import annotations

import resource
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, sys.argv[1] if len(sys.argv) > 1 else str(Path(__file__).resolve().parent.parent))

from rstreams.protocol import Connection, Elements, Hello, OnNextLastPart, OnNextPart, Subscribed, encode  # noqa: E402

COUNT, SIZE, PART = 200, 1 << 20, 64 * 1024
ELEMENT = bytes(range(256)) * (SIZE // 256)


def split(index: int) -> bytes:
    parts = [ELEMENT[start : start + PART] for start in range(0, SIZE, PART)]
    return b"".join(
        encode((OnNextLastPart if number == len(parts) - 1 else OnNextPart)(subscriber=1, element=index, data=data))
        for number, data in enumerate(parts)
    )


WIRE = memoryview(encode(Hello()) + encode(Subscribed(subscriber=1)) + b"".join(split(index) for index in range(COUNT)))


def run(copy: bool) -> tuple[float, float]:
    connection = Connection()
    connection.subscribe("blob", 1 << 40, copy=copy)
    connection.data_to_send()
    position = received = 0
    held: list[object] = []
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    start = time.process_time()
    while position < len(WIRE):
        buffers = connection.receive_buffers(1 << 20)
        if buffers:
            filled = 0
            for buffer in buffers:
                take = min(len(buffer), len(WIRE) - position - filled)
                if take <= 0:
                    break
                memoryview(buffer)[:take] = WIRE[position + filled : position + filled + take]
                filled += take
            connection.buffers_received(filled)
            position += filled
        else:
            data = bytes(WIRE[position : position + 256 * 1024])
            position += len(data)
            connection.receive_data(data)
        for event in connection.events():
            if type(event) is Elements:
                held.extend(event.elements)
                received += len(event.elements)
                if len(held) >= 16:
                    held.clear()
    seconds = time.process_time() - start
    assert received == COUNT, received
    return seconds / COUNT * 1e6, (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults) / COUNT


results: dict[bool, list[tuple[float, float]]] = {True: [], False: []}
for _ in range(7):
    for copy in (True, False):
        results[copy].append(run(copy))
for copy in (True, False):
    rows = results[copy]
    print(
        f"{'bytes (default)' if copy else 'copy=False':16} {statistics.median(r[0] for r in rows):6.0f} µs/element"
        f"  {statistics.median(r[1] for r in rows):6.1f} page faults/element"
    )
