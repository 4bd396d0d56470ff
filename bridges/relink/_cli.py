"""``rstreams relink send|echo``: poke a Relink listener, or be one.

``send`` opens a link (handshake, with reconnection as any connector), sends
one message on one channel, prints the replies that come back on the
listener's channel with the same id (one JSON line per message: an array of
one string per part, ``{"hex": "..."}`` for a part that is not UTF-8), then
shuts the link down. ``echo`` is a listener that sends every message back on
its own channel with the same id, until interrupted.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from functools import partial
from typing import Any

import trio

from rstreams.cli import (
    EXIT_CONNECTION,
    EXIT_FAILURE,
    EXIT_GOODBYE,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    CommandError,
    HelpFormatter,
    add_timeout_argument,
    add_tls_client_arguments,
    parse_address,
    run_command,
    tls_client_context,
)
from rstreams.support import listener_url, serve_listeners, with_tls

from ._connect import DEFAULT_ENDPOINT, open_relink_link
from ._errors import HandshakeRejected, LinkLostError, RelinkError, RemoteProtocolError
from ._events import CommitRequested, MessageReceived
from ._handshake import HandshakeRequest, LinkConfig, check_endpoint_name
from ._link_errors import RelinkClosed, RelinkConnectionLost, RelinkTimeout
from ._serve import RelinkServer
from ._settings import RelinkSettings
from ._trio_link import RelinkLink

# Reached through BRIDGE only (bridges.relink._bridge), so that importing
# bridges.relink never imports the command line.
__all__ = ["add_parser", "add_serve_arguments", "error_status"]

DESCRIPTION = """\
Talk to a Relink listener (send), or be one (echo).

send connects to HOST:PORT, asks for ENDPOINT with channel ids of
--channel-id-size bytes both ways (0: one unnamed channel per direction),
sends one message whose parts are PART... (their bytes as given) on channel --channel,
and prints the first --replies messages that come back on the listener's
channel with the same id, one JSON line each: an array with one string per
part, or {"hex": "..."} for a part that is not UTF-8.

echo listens on HOST:PORT (port 0: any) for endpoint --endpoint, accepting
whatever channel id sizes a connector asks for (the listener's at least the
connector's), and sends every message back on its own channel with the same
id. It prints "rstreams: serving relink echo on relink://HOST:PORT/ENDPOINT".
"""

EPILOG = """\
examples:
  rstreams serve rstreams.demo:app --relink 127.0.0.1:7100
  rstreams relink send 127.0.0.1:7100 rstreams 'range?count=3' --replies 3
  rstreams relink send 127.0.0.1:7100 rstreams 'range?count=3' --channel-id-size 2 --channel 513 --replies 3
  rstreams relink echo 127.0.0.1:7200 --endpoint echo
  rstreams relink send 127.0.0.1:7200 echo hello '' world

exit status:
  0    the replies arrived (send); interrupted after serving (echo)
  1    the listener broke the protocol, or refused the handshake
  2    bad arguments
  3    the listener closed the channel or shut the link down before --replies arrived
  4    could not connect or listen, timed out, or the link was lost
"""


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "relink",
        help="send to a Relink listener, or run an echo listener",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=HelpFormatter,
    )
    commands = parser.add_subparsers(title="subcommands", metavar="SUBCOMMAND", required=True)
    send = commands.add_parser("send", help="send one message, print the replies", formatter_class=HelpFormatter)
    send.add_argument("address", metavar="HOST:PORT", type=parse_address, help="the listener")
    send.add_argument("endpoint", metavar="ENDPOINT", type=_endpoint_name, help="the endpoint name (an app server's: rstreams)")
    send.add_argument("parts", metavar="PART", nargs="+", help="the message's parts: each argument's bytes, as the shell passed them (UTF-8 text, typically)")
    send.add_argument("--channel-id-size", type=int, default=0, metavar="N", help="channel id bytes, 0-8 (default: 0)")
    send.add_argument("--channel", type=int, default=0, metavar="ID", help="the channel to send on (default: 0)")
    send.add_argument("--replies", type=int, default=1, metavar="N", help="replies to wait for (default: 1)")
    add_tls_client_arguments(send)
    add_timeout_argument(send)
    send.set_defaults(run=run_send)
    echo = commands.add_parser("echo", help="a listener that echoes every message", formatter_class=HelpFormatter)
    echo.add_argument("address", metavar="HOST:PORT", type=parse_address, help="where to listen (port 0: any)")
    echo.add_argument("--endpoint", type=_endpoint_name, default=DEFAULT_ENDPOINT, help=f"the endpoint name (default: {DEFAULT_ENDPOINT})")
    echo.set_defaults(run=run_echo)
    return parser


def add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    """``rstreams serve``'s Relink options: ``--relink HOST:PORT``, ``--relink-window``, ``--relink-endpoint``."""
    parser.add_argument(
        "--relink",
        metavar="HOST:PORT",
        type=parse_address,
        action="append",
        help="also serve over Relink: a message naming a publisher on a channel subscribes (repeatable; see docs/bridges/relink.md)",
    )
    parser.add_argument(
        "--relink-window",
        metavar="N",
        type=_window,
        default=65536,
        help="Relink: elements per subscription sent and not acknowledged consumed (default: 65536)",
    )
    parser.add_argument(
        "--relink-endpoint",
        metavar="NAME",
        type=_endpoint_name,
        default=DEFAULT_ENDPOINT,
        help="Relink: the endpoint name (default: rstreams)",
    )


def _endpoint_name(text: str) -> str:
    check_endpoint_name(text, argparse.ArgumentTypeError, "an endpoint name")
    return text


def _window(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 1 <= value < 2**31:
        raise argparse.ArgumentTypeError(f"must be from 1 to 2**31 - 1, not {value}")
    return value


def error_status(exc: BaseException) -> tuple[int, str] | None:
    """The exit status and message for a Relink error (None: not one)."""
    if isinstance(exc, HandshakeRejected):
        return EXIT_FAILURE, f"the listener refused the handshake: {exc}"
    if isinstance(exc, RemoteProtocolError):
        return EXIT_FAILURE, f"the peer broke the protocol: {exc}"
    if isinstance(exc, (RelinkConnectionLost, RelinkTimeout, LinkLostError)):
        return EXIT_CONNECTION, str(exc)
    if isinstance(exc, RelinkClosed):
        return EXIT_GOODBYE, str(exc)
    if isinstance(exc, trio.EndOfChannel):
        return EXIT_GOODBYE, "the listener closed the channel"
    if isinstance(exc, RelinkError):
        return EXIT_FAILURE, str(exc)
    if isinstance(exc, OSError):
        return EXIT_CONNECTION, f"cannot connect: {exc.strerror or exc}"
    return None


def _part_json(part: bytes) -> object:
    try:
        return part.decode("utf-8")
    except UnicodeDecodeError:
        return {"hex": part.hex()}


def run_send(args: argparse.Namespace) -> int:
    ssl_context = tls_client_context(args)
    if not 0 <= args.channel_id_size <= 8:
        raise CommandError("--channel-id-size must be from 0 to 8", EXIT_USAGE)
    if not 0 <= args.channel < 1 << (8 * args.channel_id_size):
        raise CommandError(f"--channel {args.channel} does not fit in {args.channel_id_size} bytes", EXIT_USAGE)
    if args.replies < 0:
        raise CommandError("--replies must be >= 0", EXIT_USAGE)
    size = args.channel_id_size
    config = LinkConfig(connector_id_size=size, listener_id_size=size)
    settings = RelinkSettings(handshake_timeout=args.timeout, keepalive_interval=None, shutdown_timeout=1.0)
    host, port = args.address

    async def main() -> int:
        with trio.fail_after(args.timeout):
            async with open_relink_link(
                host or "127.0.0.1", port, endpoint=args.endpoint, config=config, ssl_context=ssl_context, settings=settings
            ) as link:
                replies = link.inbound(args.channel)
                await link.send(args.channel, [os.fsencode(part) for part in args.parts])
                for _ in range(args.replies):
                    parts = await replies.receive()
                    link.flush_acks()  # a listener with a small window waits for them
                    sys.stdout.write(json.dumps([_part_json(part) for part in parts]) + "\n")
                    sys.stdout.flush()
        return EXIT_OK

    return run_command(main, error_status=error_status, too_slow=f"no answer within {args.timeout} s")


def _echo_config(request: HandshakeRequest) -> LinkConfig | None:
    asked = request.config
    return asked if asked.listener_id_size >= asked.connector_id_size else None


async def _echo(link: RelinkLink) -> None:
    async def serve(channel_id: int) -> None:
        inbound = link.inbound(channel_id)
        while True:
            item = await inbound.receive_event()
            if isinstance(item, MessageReceived):
                await link.send(channel_id, item.parts)
            elif isinstance(item, CommitRequested):
                await link.answer_commit(item.channel, item.sequence, committed=True)

    async def serve_until_closed(channel_id: int) -> None:
        try:
            await serve(channel_id)
        except trio.EndOfChannel:
            await link.close_channel(channel_id, wait=False)

    async with trio.open_nursery() as nursery:
        while True:
            try:
                channel = await link.accept_channel()
            except trio.EndOfChannel:
                return
            nursery.start_soon(serve_until_closed, channel.id)


def run_echo(args: argparse.Namespace) -> int:
    host, port = args.address
    server = RelinkServer(_echo, {args.endpoint: _echo_config})

    async def main() -> int:
        try:
            listeners = with_tls(await trio.open_tcp_listeners(port, host=host), None)
        except OSError as exc:
            raise CommandError(f"cannot listen on {host or '*'}:{port}: {exc.strerror or exc}", EXIT_CONNECTION) from None
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async with trio.open_nursery() as nursery:
                await nursery.start(partial(serve_listeners, server.serve_stream, listeners))
                for listener in listeners:
                    print(f"rstreams: serving relink echo on {listener_url(listener, 'relink', '/' + args.endpoint)}", flush=True)
                async for _ in signals:
                    break
                with trio.move_on_after(2):
                    await server.aclose()
                nursery.cancel_scope.cancel()
        return EXIT_INTERRUPTED

    return run_command(main)
