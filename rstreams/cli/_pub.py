"""``rstreams pub``: publish lines into a running server (``pub URL NAME``,
in ``_pub_client``), or serve them as a publisher (``pub --serve NAME``, here)."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from dataclasses import dataclass
from typing import Any

import trio

from .._publish import Router, Sink, SubscribeRequest
from ._common import (
    COMMAND_SUMMARIES,
    DEFAULT_MAX_CONNECTIONS,
    EXIT_USAGE,
    CommandError,
    HelpFormatter,
    add_server_arguments,
    configure_logging,
    run_command,
    server_from_arguments,
    server_ssl_context,
)
from ._client import URL_HELP, add_ca_argument
from ._serving import serve_until_stopped
from ._lines import MAX_LINES_AT_ONCE, LineReader, lines_phrase

__all__ = ["add_parser", "LinePublisher", "LostSubscriber"]

logger = logging.getLogger("rstreams")

#: The choices of ``--format``; ``_pub_client.LINE_FORMATS`` implements them
#: (named here so that building the parser imports no client code).
LINE_FORMATS = ("raw", "jsonl", "msgpack")

STDIN_FD = 0  # read directly: sys.stdin may be None when no stdin was given

DESCRIPTION = """\
Publish the lines of standard input (or of --file F), one element per line,
into the topic or publisher NAME of the server at URL; or, with --serve,
serve them as the publisher NAME for subscribers to come and read.

Into a running server (pub [URL] NAME): URL is tcp://HOST:PORT,
tls://HOST:PORT, ws://HOST:PORT/ or wss://HOST:PORT/ (default:
$RSTREAMS_URL). Elements move only on demand, so pub serves its lines as a
publisher named "stdin" on its own connection and subscribes to a route of
the server that subscribes back to it:
  NAME               a topic: pub subscribes to NAME/publish?source=stdin, and
                     the topic asks for lines only while it has room
  NAME?source=       any publisher that reads the source it is given (the
                     demo's echo): pub fills in "stdin" and prints on stdout
                     what that publisher streams back
Input is read only when the server asks for it. pub exits 0 once the input
ended and the server accepted every line (a topic completes the stream then).
If the connection ends first, or Ctrl-C or SIGTERM stops pub, its message
says how many lines were sent before, and how many of those the topic
confirmed it holds ("N lines sent to chat before it, the first C of them
confirmed"): starting again after line C loses nothing (some lines after C
may be in the topic already). Over tcp:// and ws:// the topic confirms as
it takes lines (NAME/publish?...&confirm=1), over mm2:// the broker's acks
do; Epoxy's events and a NAME?source= publisher confirm nothing.

Over a bridge that can publish into a topic, URL is also mm2://HOST:PORT
(MicroMsg2: one SEND per line, at most the ack window -- ?window=N, default
64 -- sent and not yet in the topic; exits 0 once the broker acked them all)
or epoxy://HOST[:PORT] (Bond Epoxy: one rstreams.Publishers.Publish event
per line, paced by TCP; events have no answer, so exit 0 means all were
written), and mm2s:// or epoxys:// with --ca. There NAME is a topic (no
parameters). emp:// and relink:// cannot publish: a usage error (exit 2).

formats (--format):
  raw      each line as its bytes, without the newline (the default)
  jsonl    each line is a JSON value, sent as compact JSON (blank lines skipped)
  msgpack  each line is a JSON value, sent as MessagePack (blank lines skipped)

Serving (pub --serve NAME --tcp HOST:PORT): each line goes to exactly one
subscriber, read only when a subscriber has demand, through one reader that
every subscriber shares (several subscribers take turns, in the order they
asked). A subscriber that cancels while pub waits for input leaves the next
line to the others; a line already on its way when the cancel arrives is
dropped by that subscriber, as the protocol says of elements in flight. A
subscriber whose connection is cut (lost, timed out, or a goodbye with its
stream open) may not have received the last lines sent to it, and nothing
says which it did: pub logs a warning naming it and how many lines it was
sent, and ends with one more line on stderr,
  rstreams: 1 subscriber was cut off while reading (HOST:PORT, sent N lines): ...
(the exit status stays 0: every line was sent). The
query of a subscriber's NAME is ignored. At the end of input, every open
subscription completes, and so does any later one. pub notices the end of
input only when a subscriber asks for a line; once it has, and no
subscription remains open, it says goodbye to every session and exits with
status 0. Ctrl-C or SIGTERM shut it down as for `rstreams serve`. Once
listening it prints, per listener:
  rstreams: serving stdin as NAME on tcp://HOST:PORT
(tls://HOST:PORT with --tls-cert).

exit status: 0 done (or a clean shutdown of --serve), 1 the server's
publisher failed or refused (no such topic), 2 bad arguments, 3 the server
said goodbye, 4 could not connect or the connection was lost, 5 a line is
not JSON for --format jsonl/msgpack, 130 Ctrl-C.
"""

EPILOG = """\
examples:
  rstreams demo                                               # serves the topics chat and sensors, and echo
  seq 5 | rstreams pub tcp://127.0.0.1:9000 chat              # five lines into the topic chat
  rstreams sub tcp://127.0.0.1:9000 'chat?history=5'          # read them back
  printf 'hello\\nworld\\n' | rstreams pub ws://127.0.0.1:8000/ 'echo?source='   # prints them back
  rstreams pub tcp://127.0.0.1:9000 chat --file notes.txt
  echo '{"from": "ann", "text": "hi"}' | rstreams pub mm2://127.0.0.1:7010 chat --format jsonl
  rstreams pub epoxy://127.0.0.1:25188 chat --file chat.jsonl --format jsonl
  echo '{"t": 21.5}' | rstreams pub tcp://127.0.0.1:9000 chat --format msgpack

  tail -f app.log | rstreams pub --serve logs --tcp 127.0.0.1:9001
  rstreams sub tcp://127.0.0.1:9001 logs                      # in another shell
  rstreams pub --serve chat --tcp 127.0.0.1:9001              # type lines; Ctrl-D ends
  rstreams pub --serve events --tcp 127.0.0.1:9443 --tls-cert cert.pem --tls-key key.pem
"""


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "pub",
        help=COMMAND_SUMMARIES["pub"],
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=HelpFormatter,
    )
    parser.add_argument("url", metavar="URL", nargs="?", help=f"the server to publish into: {URL_HELP} (not with --serve)")
    parser.add_argument(
        "name",
        metavar="NAME",
        help="the topic (or NAME?source= publisher) to publish into; with --serve, the publisher path subscribers ask for (no '?')",
    )
    parser.add_argument("--serve", action="store_true", help="serve the lines as the publisher NAME instead (needs --tcp)")
    parser.add_argument("--file", metavar="FILE", help="read the lines from FILE instead of standard input")
    parser.add_argument("--format", choices=LINE_FORMATS, default="raw", help="how a line becomes an element (default: raw)")
    add_ca_argument(parser)
    add_server_arguments(parser, tcp_required=False)
    parser.set_defaults(run=run)
    return parser


@dataclass(frozen=True)
class LostSubscriber:
    """A subscriber whose session was cut while lines were on their way to it.

    Attributes:
        peer: its address.
        lines: the lines sent to it; the last of them may not have arrived
            (nothing in the protocol says which did).
        reason: why its session ended.
    """

    peer: str
    lines: int
    reason: str


class LinePublisher:
    """A publisher handing out the lines of a :class:`LineReader`.

    Attributes:
        finished: set once the input is exhausted and no subscription is
            open any more.
        active: subscriptions open right now.
        lost: the subscribers whose sessions were cut (a lost connection, a
            keepalive timeout, a protocol error, a goodbye) while their
            stream was open with lines sent: each line goes to one
            subscriber only, so the last lines sent to one of them may be
            gone for everyone. A subscriber that cancels, or whose stream
            completes, is not one of them.
    """

    def __init__(self, lines: LineReader) -> None:
        self.lines = lines
        self.active = 0
        self.finished = trio.Event()
        self.lost: list[LostSubscriber] = []

    def router(self, name: str) -> Router:
        """A router serving this publisher at ``name``."""
        app = Router()
        app.add(name, self.publish)
        return app

    async def publish(self, sink: Sink, request: SubscribeRequest) -> None:
        self.active += 1
        try:
            while not self.lines.exhausted:
                await sink.wait_demand()  # read nothing for a subscriber that asked for nothing
                line = await self.lines.readline()
                if line is None:
                    return
                # With it, the lines read already, as far as this
                # subscriber's demand goes: one step for all of them.
                lines = [line, *self.lines.readlines_nowait(min(sink.demand, MAX_LINES_AT_ONCE) - 1)]
                try:
                    # Queued as demand and the queue's bound allow; the rest
                    # (or all, if cancelled first) goes back for the next caller.
                    taken = await sink.send_some(lines)
                except BaseException:
                    self.lines.unread_lines(lines)
                    raise
                self.lines.unread_lines(lines[taken:])
        except BaseException:
            self._note_if_cut(sink, request)
            raise
        finally:
            self.active -= 1
            if not self.active and self.lines.exhausted:
                self.finished.set()

    def _note_if_cut(self, sink: Sink, request: SubscribeRequest) -> None:
        # The stream ended early: by the subscriber's cancel (what was in
        # flight is dropped by its choice, as the protocol has it), by our
        # own shutdown (what was queued is written first), or by its
        # session being cut, which is the one to tell of.
        session = request.session
        kind = getattr(session, "close_kind", None)
        if sink.cancelled or kind is None or kind == "local":
            return
        sent = sink.statistics().elements_sent
        if not sent:
            return
        peer = str(getattr(session, "peer_address", "-"))
        reason = str(getattr(session, "close_reason", None) or kind)
        self.lost.append(LostSubscriber(peer, sent, reason))
        logger.warning(
            "subscriber %s was cut off (%s) with %s sent to it: the last of them may not have arrived",
            peer,
            reason,
            lines_phrase(sent),
            extra={"event": "lines_may_be_lost", "peer": peer, "lines": sent, "reason": reason},
        )


def lost_summary(lost: list[LostSubscriber]) -> str:
    """The line ``pub --serve`` ends with when subscribers were cut off."""
    shown = "; ".join(f"{each.peer}, sent {lines_phrase(each.lines)}" for each in lost[:5]) + ("; ..." if len(lost) > 5 else "")
    if len(lost) == 1:
        return f"1 subscriber was cut off while reading ({shown}): the last lines sent to it may not have arrived"
    return f"{len(lost)} subscribers were cut off while reading ({shown}): the last lines sent to each may not have arrived"



def run(args: argparse.Namespace) -> int:
    configure_logging(args.log_level, args.log_format)
    if not args.serve:
        if args.tcp:
            raise CommandError("--tcp is for serving the lines: rstreams pub --serve NAME --tcp HOST:PORT", EXIT_USAGE)
        given_max = None if args.max_connections == DEFAULT_MAX_CONNECTIONS else args.max_connections
        for option, value in (("--tls-cert", args.tls_cert), ("--tls-key", args.tls_key), ("--max-connections", given_max)):
            if value is not None:
                raise CommandError(f"{option} is for --serve", EXIT_USAGE)
        from ._pub_client import run_client

        return run_client(args)
    if args.url is not None:
        raise CommandError("--serve takes NAME alone (it serves; publishing into URL is pub URL NAME)", EXIT_USAGE)
    if not args.tcp:
        raise CommandError("--serve needs at least one --tcp HOST:PORT", EXIT_USAGE)
    if args.format != "raw" or args.ca is not None:
        raise CommandError("--format and --ca are for publishing into a server (pub URL NAME)", EXIT_USAGE)
    return _serve(args)


def _serve(args: argparse.Namespace) -> int:
    fd = STDIN_FD
    if args.file is not None:
        try:
            fd = os.open(args.file, os.O_RDONLY)
        except OSError as exc:
            raise CommandError(f"cannot read {args.file!r}: {exc.strerror}", EXIT_USAGE) from None
    lines = LineReader(fd)
    publisher = LinePublisher(lines)
    if not args.name:
        raise CommandError("the publisher name must not be empty", EXIT_USAGE)
    try:
        app = publisher.router(args.name)
    except ValueError as exc:
        raise CommandError(f"bad publisher name {args.name!r}: {exc}", EXIT_USAGE) from None
    ssl_context = server_ssl_context(args.tls_cert, args.tls_key, args.tls_client_ca)
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
        if publisher.lost:
            print(f"rstreams: {lost_summary(publisher.lost)}", file=sys.stderr, flush=True)
        return status

    return run_command(serve, precise_timers=args.precise_timers)
