"""A chat room client for the demo app's ``chat`` topic.

Serve the demo app, then run one client per person::

    rstreams demo                            # or: rstreams serve rstreams.demo:app --tcp 127.0.0.1:9000
    python examples/chat.py alice            # type lines; Ctrl-D leaves
    python examples/chat.py bob tcp://127.0.0.1:9000

Each line typed is published into the topic (the server subscribes back to
this client's ``lines`` publisher, so a line is read from the terminal only
when the room has room for it); every message in the room, the last 20
first, is printed as ``name: text``.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from typing import Any

import trio

import rstreams


async def typed_lines(name: str) -> AsyncIterator[dict[str, Any]]:
    # Lines from stdin, read in a worker thread only as demand asks for them.
    stdin = trio.wrap_file(sys.stdin)
    async for line in stdin:
        text = line.rstrip("\n")
        if text:
            yield {"from": name, "text": text}


async def main(name: str, url: str) -> None:
    async with rstreams.open_session(url, app=rstreams.Router()) as session:
        async with trio.open_nursery() as nursery:

            async def show() -> None:
                async with session.subscribe("chat?history=20", prefetch=16, codec="json") as room:
                    async for message in room:
                        print(f"{message['from']}: {message['text']}", flush=True)

            nursery.start_soon(show)
            await rstreams.publish_to_topic(session, "chat", typed_lines(name), codec="json")
            # Stdin ended: give the room a moment to echo our last lines, then leave.
            await trio.sleep(0.5)
            nursery.cancel_scope.cancel()


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: python examples/chat.py NAME [tcp://HOST:PORT]")
    trio.run(main, sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "tcp://127.0.0.1:9000")
