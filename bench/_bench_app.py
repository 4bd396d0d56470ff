"""The publishers the benchmarks subscribe to, served by ``server.py``.

Each one builds its elements ahead of time, so the numbers measure rstreams
(codec, scheduler, session, transport) and not element construction.
"""

from __future__ import annotations

import struct

import rstreams

app = rstreams.Router()

_BLOCK = 65536
_NUMBERS = [i.to_bytes(8, "big") for i in range(_BLOCK)]
_PACKED = struct.pack(f">{_BLOCK}Q", *range(_BLOCK))


@app.publisher("numbers")
async def numbers(sink: rstreams.Sink, request: rstreams.SubscribeRequest) -> None:
    """8-byte elements, one onNext each (elementSize 0)."""
    remaining = request.int_param("count", 1_000_000, minimum=0)
    while remaining:
        count = min(remaining, _BLOCK)
        await sink.send_many(_NUMBERS if count == _BLOCK else _NUMBERS[:count])
        remaining -= count


@app.publisher("packed", element_size=8)
async def packed(sink: rstreams.Sink, request: rstreams.SubscribeRequest) -> None:
    """8-byte elements announced with elementSize 8, so they go out packed."""
    remaining = request.int_param("count", 1_000_000, minimum=0)
    while remaining:
        count = min(remaining, _BLOCK)
        await sink.send_packed(_PACKED if count == _BLOCK else _PACKED[: count * 8])
        remaining -= count


@app.publisher("blob")
async def blob(sink: rstreams.Sink, request: rstreams.SubscribeRequest) -> None:
    """``count`` elements of ``size`` bytes (split when large)."""
    remaining = request.int_param("count", 1000, minimum=0)
    element = bytes(request.int_param("size", 1024, minimum=0, maximum=64 * 1024 * 1024))
    batch = [element] * max(1, min(4096, (1 << 20) // max(1, len(element))))
    while remaining:
        count = min(remaining, len(batch))
        await sink.send_many(batch[:count])
        remaining -= count


@app.publisher("one")
async def one(sink: rstreams.Sink) -> None:
    """A single 8-byte element: the subscribe round-trip benchmark."""
    sink.send_nowait(b"\x00" * 8) if sink.demand else await sink.send(b"\x00" * 8)
