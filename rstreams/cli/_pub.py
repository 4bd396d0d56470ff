"""``rstreams pub NAME``: serve the lines of standard input as a publisher."""

from __future__ import annotations

import argparse
from typing import Any

import trio

from .._publish import Router, Sink
from ._common import (
    COMMAND_SUMMARIES,
    EXIT_USAGE,
    CommandError,
    HelpFormatter,
    add_server_arguments,
    configure_logging,
    run_command,
    server_from_arguments,
    server_ssl_context,
)
from ._serving import serve_until_stopped
from ._lines import LineReader

__all__ = ["add_parser", "LinePublisher"]

STDIN_FD = 0  # read directly: sys.stdin may be None when no stdin was given

DESCRIPTION = """\
Serve the lines of standard input as the publisher NAME.

Each element is one line as raw bytes, without its trailing newline. Input
is read only when a subscriber has demand, through one reader that every
subscriber shares: each line goes to exactly one subscriber (several
subscribers take turns, in the order they asked). A subscriber that cancels
while pub waits for input leaves the next line to the others; a line already
on its way when the cancel arrives is dropped by that subscriber, as the
protocol says of elements in flight. The query of a subscriber's NAME is
ignored.

At the end of input, every open subscription completes, and so does any
later one. pub notices the end of input only when a subscriber asks for a
line; once it has, and no subscription remains open, it says goodbye to
every session and exits with status 0. Ctrl-C or SIGTERM shut it down as
for `rstreams serve`.

Once listening it prints, per listener:
  rstreams: serving stdin as NAME on tcp://HOST:PORT
(tls://HOST:PORT with --tls-cert). Subscribers use those URLs; for ws://
and wss:// serve an app with `rstreams serve MODULE:APP --ws HOST:PORT`.
"""

EPILOG = """\
examples:
  tail -f app.log | rstreams pub logs --tcp 127.0.0.1:9000
  rstreams sub tcp://127.0.0.1:9000 logs                      # in another shell

  seq 1000 | rstreams pub numbers --tcp 127.0.0.1:0
  rstreams pub chat --tcp 127.0.0.1:9000                      # type lines; Ctrl-D ends
  rstreams pub events --tcp 127.0.0.1:9443 --tls-cert cert.pem --tls-key key.pem
"""


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "pub",
        help=COMMAND_SUMMARIES["pub"],
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=HelpFormatter,
    )
    parser.add_argument("name", metavar="NAME", help="the publisher path subscribers ask for (no '?')")
    add_server_arguments(parser)
    parser.set_defaults(run=run)
    return parser


class LinePublisher:
    """A publisher handing out the lines of a :class:`LineReader`.

    Attributes:
        finished: set once the input is exhausted and no subscription is
            open any more.
        active: subscriptions open right now.
    """

    def __init__(self, lines: LineReader) -> None:
        self.lines = lines
        self.active = 0
        self.finished = trio.Event()

    def router(self, name: str) -> Router:
        """A router serving this publisher at ``name``."""
        app = Router()
        app.add(name, self.publish)
        return app

    async def publish(self, sink: Sink) -> None:
        self.active += 1
        try:
            while not self.lines.exhausted:
                await sink.wait_demand()  # read nothing for a subscriber that asked for nothing
                line = await self.lines.readline()
                if line is None:
                    return
                try:
                    await sink.send(line)  # atomic: queued, or Cancelled and not queued
                except BaseException:
                    self.lines.unread(line)
                    raise
        finally:
            self.active -= 1
            if not self.active and self.lines.exhausted:
                self.finished.set()


def run(args: argparse.Namespace) -> int:
    configure_logging(args.log_level, args.log_format)
    lines = LineReader(STDIN_FD)
    publisher = LinePublisher(lines)
    if not args.name:
        raise CommandError("the publisher name must not be empty", EXIT_USAGE)
    try:
        app = publisher.router(args.name)
    except ValueError as exc:
        raise CommandError(f"bad publisher name {args.name!r}: {exc}", EXIT_USAGE) from None
    ssl_context = server_ssl_context(args.tls_cert, args.tls_key)
    server = server_from_arguments(app, args)

    async def serve() -> int:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(lines.run)
            status = await serve_until_stopped(
                server,
                args.tcp,
                ssl_context,
                f"stdin as {args.name}",
                stop=publisher.finished,
                metrics_addresses=args.metrics,
            )
            nursery.cancel_scope.cancel()
        return status

    return run_command(serve)
