"""A tour of rstreams: the demo app served over TCP, and a client using it.

Run from the repository root::

    python examples/tour.py

It starts the demo app (``rstreams.demo:app``, also ``examples.demo:app``)
on a free port of 127.0.0.1 (what ``rstreams demo --tcp 127.0.0.1:0`` does
for TCP), connects a
client, and walks through every demo publisher, printing what it sees.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import rstreams  # noqa: E402
from examples.demo import app  # noqa: E402

# The client's own publisher: the server's ``echo`` subscribes back to it.
client_app = rstreams.Router()


@client_app.publisher("greetings")
async def greetings(sink: rstreams.Sink) -> None:
    for word in (b"hello", b"from", b"the", b"client"):
        await sink.send(word)


async def tour(url: str) -> None:
    async with rstreams.open_session(url, app=client_app) as session:
        print("range?count=5      ", end="")
        async with session.subscribe("range?count=5") as numbers:
            print([int.from_bytes(raw, "big") async for raw in numbers], f"(elementSize {numbers.element_size})")

        async with session.subscribe("blob?count=3&size=200000") as blobs:
            sizes = [(len(blob), blob[:4].hex()) async for blob in blobs]
        print("blob?count=3&size=200000", sizes, "(over 64 KiB: split into parts on the wire, joined again here)")

        print("ticker?interval=0.2:")
        async with session.subscribe("ticker?interval=0.2", prefetch=4, codec="msgpack") as ticks:
            async for seq, unix_time, value in ticks:
                print(f"  #{seq} at {unix_time:.2f}: {value:+.3f}")
                if seq == 4:
                    break  # leaving the block cancels the stream

        try:
            async with session.subscribe("fail?after=2") as failing:
                async for raw in failing:
                    print("fail?after=2       element", int.from_bytes(raw, "big"))
        except rstreams.PublisherError as error:
            print("fail?after=2       then onError:", error.message)

        async with session.subscribe("echo?source=greetings") as echoed:
            print("echo?source=greetings", [word.decode() async for word in echoed])

        try:
            async with session.subscribe("nothing-here"):
                pass
        except rstreams.UnknownPublisher as error:
            print("nothing-here       ", error)
        print("statistics:", session.statistics())


async def main() -> None:
    server = rstreams.Server(app)
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(server.serve_tcp, "127.0.0.1", 0)
        url = f"tcp://127.0.0.1:{rstreams.listener_port(listeners[0])}"
        print(f"serving rstreams.demo:app on {url}\n")
        await tour(url)
        await server.aclose()
        nursery.cancel_scope.cancel()
    print("\nNext: . .venv/bin/activate, then rstreams demo (and, in another shell, rstreams sub --help)")


if __name__ == "__main__":
    try:
        trio.run(main)
        sys.stdout.flush()  # here, where a reader that went away can still be handled
    except* KeyboardInterrupt:
        sys.exit(130)  # Ctrl-C: stop quietly, with the status shells expect
    except* BrokenPipeError:
        # The reader of our output left (``tour.py | head``): a normal way to
        # stop reading. Point stdout at /dev/null so that the interpreter's
        # last flush has nowhere to fail, and exit as head's pipelines do.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
