"""Quickstart, client side: subscribe and consume with automatic demand."""

import sys

import trio

import rstreams


async def main(url: str) -> None:
    async with rstreams.open_session(url) as session:
        # prefetch: how many elements may be in flight; demand is topped up
        # as the loop consumes. Leaving the block early sends cancel.
        async with session.subscribe("squares?count=5", prefetch=8, codec="json") as squares:
            async for item in squares:
                print(item["n"], "squared is", item["square"])
        try:
            async with session.subscribe("cubes") as cubes:
                pass
        except rstreams.UnknownPublisher as error:
            print("as expected:", error)


if __name__ == "__main__":
    try:
        trio.run(main, sys.argv[1] if len(sys.argv) > 1 else "tcp://127.0.0.1:9000")
    except* KeyboardInterrupt:
        sys.exit(130)  # Ctrl-C: stop quietly, with the status shells expect
