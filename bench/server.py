"""Serve the benchmark publishers: ``python bench/server.py PORT``."""

from __future__ import annotations

import sys

import trio

import rstreams

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from _bench_app import app  # noqa: E402


async def main(port: int) -> None:
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(rstreams.serve_tcp, app, "127.0.0.1", port)
        print(rstreams.listener_port(listeners[0]), flush=True)


if __name__ == "__main__":
    trio.run(main, int(sys.argv[1]) if len(sys.argv) > 1 else 0)
