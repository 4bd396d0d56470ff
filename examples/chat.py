"""A chat room client for the demo app's ``chat`` topic.

Serve the demo app, then run one client per person::

    rstreams demo                            # or: rstreams serve rstreams.demo:app --tcp 127.0.0.1:9000
    python examples/chat.py alice            # type lines; Ctrl-D or Ctrl-C leaves
    python examples/chat.py bob tcp://127.0.0.1:9000

Each line typed is published into the topic (the server subscribes back to
this client's ``lines`` publisher, so a line is read from the terminal only
when the room has room for it); every message in the room, the last 20
first, is printed as ``name: text``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import AsyncIterator
from typing import Any

import trio

import rstreams


async def typed_lines(name: str) -> AsyncIterator[dict[str, Any]]:
    # Lines from stdin, each read in a worker thread only as demand asks for
    # it. A thread blocked in readline cannot be interrupted, so on Ctrl-C
    # it is abandoned (abandon_on_cancel) rather than waited for: leaving
    # does not wait for Enter.
    while True:
        line = await trio.to_thread.run_sync(sys.stdin.readline, abandon_on_cancel=True)
        if not line:
            return  # Ctrl-D
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


def parse_arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Chat in the demo app's chat room: type lines to send them; every message "
        "in the room (the last 20 first) is printed as 'name: text'. Ctrl-D or Ctrl-C leaves.",
        epilog="Serve the room first with `rstreams demo` (or `rstreams serve rstreams.demo:app --tcp 127.0.0.1:9000`).",
    )
    parser.add_argument("name", help="the name your messages are sent under")
    parser.add_argument(
        "url",
        nargs="?",
        default="tcp://127.0.0.1:9000",
        help="the demo app's URL: tcp://HOST:PORT, tls://, ws://HOST:PORT/ or wss:// (default: tcp://127.0.0.1:9000)",
    )
    return parser.parse_args()


if __name__ == "__main__":
    arguments = parse_arguments()
    try:
        trio.run(main, arguments.name, arguments.url)
    except* KeyboardInterrupt:
        sys.exit(130)  # Ctrl-C: leave quietly, with the status shells expect
