"""The raw ceiling: rstreams' wire messages with no runtime in between.

Two halves, neither of which imports rstreams:

* :func:`consume` is the raw consumer: a plain blocking socket and
  ``msgpack.Unpacker``, counting elements. It says hello and subscribes
  with unbounded demand, then reads until onComplete. It reads from the
  raw server below (the ceiling) and from ``rstreams serve`` (what a
  consumer that costs nothing sees of the rstreams server).
* :func:`round_trips` is the raw round-trip client: the same plain socket,
  keeping ``concurrency`` subscribes to ``range?count=1`` in flight and
  sending the next ones as the onCompletes of one read come in (all of them
  in one ``sendall``).
* :func:`serve` is the raw server: a minimal trio server that answers each
  subscribe to ``range`` or ``blob`` (the demo's publishers, same
  parameters) by writing the same wire messages the demo's publishers
  produce: onNext batched 256 per ``send_all`` (16 for elements over
  1 KiB), onNextPacked with up to 16,384 elements per message, elements
  over 64 KiB in 256 KiB parts (two halves up to 256 KiB), one ``send_all``
  each, as rstreams' ``ProtocolLimits`` split them. A short ``range`` (at
  most 16 elements) is answered whole, and the answers to the subscribes of
  one read share one ``send_all``: the round-trip ceiling.

Both ends use Reno, as rstreams' loopback connections do (``_unpaced``).

Run the server with ``python bench/_raw.py PORT``; it prints its port.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from functools import partial
import sys
import time
from urllib.parse import parse_qsl, urlsplit

import msgpack

UNBOUNDED = 2**63 - 1
HELLO, SUBSCRIBE, SUBSCRIBED, ON_NEXT, ON_COMPLETE, ON_ERROR = 0, 1, 4, 5, 6, 7
ON_NEXT_PACKED, ON_NEXT_PART, ON_NEXT_LAST_PART, GOODBYE = 8, 9, 10, 11
SPLIT = 64 * 1024  # elements larger than this are split ...
PART = 256 * 1024  # ... into parts of this, as ProtocolLimits' defaults
PACKED_PER_MESSAGE = 16384
READ_SIZE = 256 * 1024


# ---- the raw consumer -------------------------------------------------------


def consume(host: str, port: int, name: str) -> dict[str, float]:
    """Subscribe to ``name`` with unbounded demand; count until onComplete.

    Returns elements, bytes (element payload) and seconds, timed from the
    subscribe to the onComplete.
    """
    packer = msgpack.Packer(use_bin_type=True)
    with socket.create_connection((host, port)) as sock:
        _unpaced(sock)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        unpacker = msgpack.Unpacker(raw=False, use_list=False, max_buffer_size=64 * 1024 * 1024)
        start = time.perf_counter()
        sock.sendall(packer.pack((HELLO, 0, [])) + packer.pack((SUBSCRIBE, name, 1, UNBOUNDED)))
        elements = nbytes = 0
        recv = sock.recv
        feed = unpacker.feed
        while True:
            data = recv(READ_SIZE)
            if not data:
                raise ConnectionError("the server closed the connection before onComplete")
            feed(data)
            for message in unpacker:
                code = message[0]
                if code == ON_NEXT:
                    elements += 1
                    nbytes += len(message[2])
                elif code == ON_NEXT_PACKED:
                    elements += message[2]
                    nbytes += len(message[3])
                elif code == ON_NEXT_PART:
                    nbytes += len(message[3])
                elif code == ON_NEXT_LAST_PART:
                    elements += 1
                    nbytes += len(message[3])
                elif code == ON_COMPLETE:
                    elapsed = time.perf_counter() - start
                    sock.sendall(packer.pack((GOODBYE, "goodbye")))
                    return {"elements": elements, "bytes": nbytes, "seconds": elapsed}
                elif code in (ON_ERROR, GOODBYE):
                    raise RuntimeError(f"the server refused: {message!r:.200}")


def round_trips(host: str, port: int, total: int, concurrency: int) -> dict[str, float]:
    """``total`` subscribes to ``range?count=1``, ``concurrency`` in flight.

    Returns elements (round trips completed) and seconds, timed from the
    first subscribe to the last onComplete.
    """
    packer = msgpack.Packer(use_bin_type=True)
    with socket.create_connection((host, port)) as sock:
        _unpaced(sock)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        unpacker = msgpack.Unpacker(raw=False, use_list=False)
        next_id = 1

        def subscribes(count: int) -> bytes:
            nonlocal next_id
            first, next_id = next_id, next_id + count
            return b"".join(packer.pack((SUBSCRIBE, "range?count=1", i, 1)) for i in range(first, next_id))

        sock.sendall(packer.pack((HELLO, 0, [])))
        start = time.perf_counter()
        sock.sendall(subscribes(min(concurrency, total)))
        done = 0
        while done < total:
            data = sock.recv(READ_SIZE)
            if not data:
                raise ConnectionError("the server closed the connection during the round trips")
            unpacker.feed(data)
            completed = 0
            for message in unpacker:
                code = message[0]
                if code == ON_COMPLETE:
                    completed += 1
                elif code in (ON_ERROR, GOODBYE):
                    raise RuntimeError(f"the server refused: {message!r:.200}")
            done += completed
            more = min(completed, total - (next_id - 1))
            if more > 0:
                sock.sendall(subscribes(more))
        elapsed = time.perf_counter() - start
        sock.sendall(packer.pack((GOODBYE, "goodbye")))
    return {"elements": done, "bytes": 0, "seconds": elapsed}


# ---- the raw server ---------------------------------------------------------

#: A ``range`` this short is answered whole, in one write with the answers
#: to the other subscribes of the same read.
SHORT_RANGE = 16


_FIRST_BLOCK = b"".join(i.to_bytes(8, "big") for i in range(PACKED_PER_MESSAGE))


def _range_messages(subscriber: int, count: int) -> Iterator[bytes]:
    packer = msgpack.Packer(use_bin_type=True)
    first = _FIRST_BLOCK
    index = 0
    while index < count:
        n = min(PACKED_PER_MESSAGE, count - index)
        if index:
            # The elements index .. index+n-1: same low bytes as block 0
            # (PACKED_PER_MESSAGE is a power of two), high bytes constant.
            block = bytearray(first)
            for position, byte in enumerate((index // PACKED_PER_MESSAGE).to_bytes(8, "big")[:6]):
                if byte:
                    block[position::8] = bytes((byte,)) * PACKED_PER_MESSAGE
            data = bytes(block[: n * 8])
        else:
            data = first[: n * 8]
        yield packer.pack((ON_NEXT_PACKED, subscriber, n, data)) if n > 1 else packer.pack((ON_NEXT, subscriber, data))
        index += n


def _blob_messages(subscriber: int, count: int, size: int) -> Iterator[bytes]:
    packer = msgpack.Packer(use_bin_type=True)
    pattern = bytes(range(256)) * (size // 256 + 2)
    if size > SPLIT:
        for i in range(count):
            element = memoryview(pattern)[i % 256 : i % 256 + size]
            part = PART if size > PART else size - size // 2
            for offset in range(0, size, part):
                last = offset + part >= size
                code = ON_NEXT_LAST_PART if last else ON_NEXT_PART
                yield packer.pack((code, subscriber, i, element[offset : offset + part]))
        return
    distinct = [pattern[offset : offset + size] for offset in range(256)]
    per_send = 16 if size > 1024 else 256
    pack = packer.pack
    for start in range(0, count, per_send):
        yield b"".join(
            [pack((ON_NEXT, subscriber, distinct[i % 256])) for i in range(start, min(count, start + per_send))]
        )


def _answer(packer: msgpack.Packer, subscriber: int, name: str) -> tuple[bool, Iterator[bytes]]:
    """The messages answering one subscribe, and whether they are short."""
    parts = urlsplit(name)
    params = dict(parse_qsl(parts.query))
    count = int(params.get("count", 10))
    if parts.path == "range":
        body = _range_messages(subscriber, count)
        short, size = count <= SHORT_RANGE, 8
    elif parts.path == "blob":
        body = _blob_messages(subscriber, count, int(params.get("size", 1024)))
        short, size = False, 0
    else:
        return True, iter([packer.pack((ON_ERROR, subscriber, f"no such publisher: {name}"))])

    def messages() -> Iterator[bytes]:
        yield packer.pack((SUBSCRIBED, subscriber, size))
        yield from body
        yield packer.pack((ON_COMPLETE, subscriber))

    return short, messages()


def _unpaced(sock: object) -> None:
    """Reno, as rstreams gives its loopback connections (``rstreams/_loopback.py``):
    under a host's BBR, pacing would hold the ceiling below what rstreams gets."""
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, b"reno")  # type: ignore[attr-defined]
    except (AttributeError, OSError):
        pass  # not Linux, or the kernel says no: the host's choice


async def _serve_one(stream) -> None:  # type: ignore[no-untyped-def]
    import trio

    _unpaced(stream.socket)
    packer = msgpack.Packer(use_bin_type=True)
    unpacker = msgpack.Unpacker(raw=False, use_list=False)
    try:
        await stream.send_all(packer.pack((HELLO, 0, [])))
        while True:
            data = await stream.receive_some(READ_SIZE)
            if not data:
                return
            unpacker.feed(data)
            joined: list[bytes] = []  # short answers, written together
            for message in unpacker:
                if message[0] == GOODBYE:
                    return
                if message[0] != SUBSCRIBE:
                    continue
                short, messages = _answer(packer, message[2], message[1])
                if short:
                    joined.extend(messages)
                    continue
                if joined:
                    await stream.send_all(b"".join(joined))
                    joined = []
                for chunk in messages:
                    await stream.send_all(chunk)
            if joined:
                await stream.send_all(b"".join(joined))
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass
    finally:
        await trio.aclose_forcefully(stream)


async def serve(port: int) -> None:
    import trio

    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(partial(trio.serve_tcp, _serve_one, port, host="127.0.0.1"))
        print(listeners[0].socket.getsockname()[1], flush=True)


if __name__ == "__main__":
    import trio

    trio.run(serve, int(sys.argv[1]) if len(sys.argv) > 1 else 0)
