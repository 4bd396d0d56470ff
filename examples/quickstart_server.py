"""Quickstart, server side: serve one publisher over TCP."""

import sys

import trio

import rstreams

app = rstreams.Router()


@app.publisher("squares", codec="json")
async def squares(sink: rstreams.Sink, request: rstreams.SubscribeRequest) -> None:
    # One task per subscriber. sink.send() waits until the subscriber has
    # requested more, so a slow client slows this loop down instead of
    # filling memory. Returning completes the stream; raising sends onError;
    # a cancel from the client arrives here as trio.Cancelled.
    count = request.int_param("count", 10, minimum=0)
    for n in range(count):
        await sink.send({"n": n, "square": n * n})


async def main(port: int) -> None:
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(rstreams.serve_tcp, app, "127.0.0.1", port)
        print(f"serving on tcp://127.0.0.1:{rstreams.listener_port(listeners[0])}", flush=True)


if __name__ == "__main__":
    try:
        trio.run(main, int(sys.argv[1]) if len(sys.argv) > 1 else 9000)
    except* KeyboardInterrupt:
        sys.exit(130)  # Ctrl-C: stop quietly, with the status shells expect
