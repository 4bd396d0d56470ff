"""The WebSocket comparison: trio-websocket, one WebSocket message per element.

What a user gets who puts each protocol message in its own WebSocket message
with trio-websocket, the obvious way to do it on trio: the server answers a
subscribe to ``blob?count=N&size=S`` with hello, subscribed, then one onNext
per ``send_message``, then onComplete; the consumer counts them with
``get_message``. The rstreams row of the same case reads the rstreams server
over ``ws://`` with the rstreams client.

Run the server with ``python bench/_ws.py PORT``; it prints its port.
"""

from __future__ import annotations

import sys
import time
from urllib.parse import parse_qsl, urlsplit

import msgpack
import trio
from trio_websocket import ConnectionClosed, open_websocket_url, serve_websocket

UNBOUNDED = 2**63 - 1
MAX_MESSAGE = 16 * 1024 * 1024


async def _handler(request) -> None:  # type: ignore[no-untyped-def]
    ws = await request.accept()
    packer = msgpack.Packer(use_bin_type=True)
    unpacker = msgpack.Unpacker(raw=False, use_list=False)
    try:
        subscribe = None
        while subscribe is None:
            unpacker.feed(await ws.get_message())
            for message in unpacker:
                if message[0] == 1:
                    subscribe = message
        name, subscriber = subscribe[1], subscribe[2]
        params = dict(parse_qsl(urlsplit(name).query))
        count, size = int(params.get("count", 10)), int(params.get("size", 8))
        pattern = bytes(range(256)) * (size // 256 + 2)
        distinct = [pattern[offset : offset + size] for offset in range(256)]
        await ws.send_message(packer.pack((0, 0, [])))
        await ws.send_message(packer.pack((4, subscriber, 0)))
        pack = packer.pack
        for i in range(count):
            await ws.send_message(pack((5, subscriber, distinct[i % 256])))
        await ws.send_message(packer.pack((6, subscriber)))
        with trio.move_on_after(5):
            while True:
                await ws.get_message()
    except ConnectionClosed:
        pass


async def serve(port: int) -> None:
    async with trio.open_nursery() as nursery:
        server = await nursery.start(serve_websocket, _handler, "127.0.0.1", port, None)
        print(server.port, flush=True)


async def consume(url: str, name: str) -> dict[str, float]:
    """Subscribe with unbounded demand; count elements until onComplete."""
    packer = msgpack.Packer(use_bin_type=True)
    async with open_websocket_url(url, max_message_size=MAX_MESSAGE) as ws:
        unpacker = msgpack.Unpacker(raw=False, use_list=False, max_buffer_size=MAX_MESSAGE)
        start = time.perf_counter()
        await ws.send_message(packer.pack((0, 0, [])) + packer.pack((1, name, 1, UNBOUNDED)))
        elements = nbytes = 0
        while True:
            unpacker.feed(await ws.get_message())
            for message in unpacker:
                if message[0] == 5:
                    elements += 1
                    nbytes += len(message[2])
                elif message[0] == 6:
                    elapsed = time.perf_counter() - start
                    await ws.send_message(packer.pack((11, "goodbye")))
                    return {"elements": elements, "bytes": nbytes, "seconds": elapsed}
                elif message[0] in (7, 11):
                    raise RuntimeError(f"refused: {message!r:.200}")


if __name__ == "__main__":
    trio.run(serve, int(sys.argv[1]) if len(sys.argv) > 1 else 0)
