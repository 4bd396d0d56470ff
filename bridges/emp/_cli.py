"""``rstreams emp ping|send|call HOST:PORT``: poke an EMP peer, as grpcurl does for gRPC.

Each subcommand opens one EMP connection (hello both ways), does one thing,
says bye and exits. Whatever the peer does instead (error, bye, a plain
close, a protocol violation) is reported on stderr with a non-zero status.
"""

from __future__ import annotations

import argparse
import os
import ssl
import sys
from typing import Any

import trio

from rstreams.cli import (
    EXIT_CONNECTION,
    EXIT_DECODE,
    EXIT_FAILURE,
    EXIT_GOODBYE,
    EXIT_OK,
    FORMATS,
    CommandError,
    DecodeError,
    HelpFormatter,
    add_timeout_argument,
    add_tls_client_arguments,
    parse_address,
    run_command,
    tls_client_context,
)

from ._client import FRAMINGS
from ._config import DEFAULT_CONFIG, EmpConfig
from ._connect import open_emp_connection
from ._errors import EmpClosed, EmpConnectionLost, EmpError, EmpTimeout, PeerError, RemoteProtocolError
from ._events import CompressionScheme

# Reached through BRIDGE only (bridges.emp._bridge), so that importing
# bridges.emp never imports the command line.
__all__: list[str] = []

DESCRIPTION = """\
Talk to an EMP (Extensible Messaging Protocol) peer: check that it answers
(ping), send it one data message (send), or send it one request and print
the response (call).

HOST:PORT is the peer. --framing picks how envelope and extension block sizes
are counted: "spec" (the spec text: the size includes its own 4-byte field;
the default) or "author" (the author's later drafts and implementation:
excluding it). Both peers must agree.
"""

EPILOG = """\
examples:
  rstreams serve rstreams.demo:app --emp 127.0.0.1:7000
  rstreams emp ping 127.0.0.1:7000
  rstreams emp call 127.0.0.1:7000 'range?count=3' --format msgpack
  rstreams emp call 127.0.0.1:7000 'range?count=3' --gzip --format msgpack
  rstreams emp send 127.0.0.1:7000 'hello there' --framing author
  rstreams emp call emp.example.com:7443 'range?count=3' --tls --ca ca.pem

exit status:
  0    the peer answered (pong, response) or took the data message
  1    the peer sent an error message, or broke the protocol
  2    bad arguments
  3    the peer said bye instead of answering
  4    could not connect, timed out, or the connection closed without bye
  5    the response could not be decoded for --format msgpack or json
"""

def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "emp",
        help="ping, send data to, or call an EMP peer",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=HelpFormatter,
    )
    commands = parser.add_subparsers(title="subcommands", metavar="SUBCOMMAND", required=True)
    ping = commands.add_parser("ping", help="ping the peer, print the round trip", formatter_class=HelpFormatter)
    _common_arguments(ping)
    ping.set_defaults(run=run, action="ping")
    send = commands.add_parser("send", help="send one data message", formatter_class=HelpFormatter)
    _common_arguments(send)
    send.add_argument("data", metavar="DATA", help="the body: the argument's bytes, as the shell passed them (UTF-8 text, typically)")
    send.add_argument("--gzip", action="store_true", help="compress the body (compression extension, gzip)")
    send.set_defaults(run=run, action="send")
    call = commands.add_parser("call", help="send one request, print the response", formatter_class=HelpFormatter)
    _common_arguments(call)
    call.add_argument("body", metavar="BODY", help="the request body: the argument's bytes, as the shell passed them (e.g. 'range?count=3')")
    call.add_argument("--gzip", action="store_true", help="compress the request (compression extension, gzip)")
    call.add_argument(
        "--format",
        choices=sorted(FORMATS),
        default="raw",
        help="how to print the response body: raw bytes, hex, or msgpack/json as JSON (default: raw)",
    )
    call.set_defaults(run=run, action="call")
    return parser


def add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    """``rstreams serve``'s EMP options: ``--emp HOST:PORT`` and ``--emp-framing``."""
    parser.add_argument(
        "--emp",
        metavar="HOST:PORT",
        type=parse_address,
        action="append",
        help="also serve over EMP: a request naming a publisher gets its elements (repeatable; see docs/bridges/emp.md)",
    )
    parser.add_argument(
        "--emp-framing",
        choices=sorted(FRAMINGS),
        default="spec",
        help="EMP sizes include their own field (spec, the default) or exclude it (author)",
    )


def _common_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("address", metavar="HOST:PORT", type=parse_address, help="the EMP peer")
    parser.add_argument("--framing", choices=sorted(FRAMINGS), default="spec", help="size framing (default: spec)")
    add_tls_client_arguments(parser)
    add_timeout_argument(parser)


async def _act(args: argparse.Namespace, config: EmpConfig, ssl_context: ssl.SSLContext | None) -> int:
    host, port = args.address
    compression = CompressionScheme.GZIP if getattr(args, "gzip", False) else None
    async with open_emp_connection(host or "127.0.0.1", port, ssl_context=ssl_context, config=config) as emp:
        if args.action == "ping":
            elapsed = await emp.ping()
            print(f"pong from {host}:{port} in {elapsed * 1000:.1f} ms", flush=True)
        elif args.action == "send":
            await emp.send_data(os.fsencode(args.data), compression=compression)
            # Give a peer that refuses the message the chance to say so.
            with trio.move_on_after(0.2):
                await emp.wait_ended()
            while emp.ended:
                await emp.receive_data()  # past what the peer sent, raises why it ended
        else:
            response = await emp.call(os.fsencode(args.body), compression=compression)
            try:
                line = FORMATS[args.format](response)
            except DecodeError as exc:
                raise CommandError(f"the response is {exc}", EXIT_DECODE) from None
            sys.stdout.buffer.write(line + b"\n")
            sys.stdout.buffer.flush()
    return EXIT_OK


def error_status(exc: BaseException) -> tuple[int, str] | None:
    """The exit status and message for an EMP error (None: not one)."""
    if isinstance(exc, PeerError):
        return EXIT_FAILURE, str(exc)
    if isinstance(exc, RemoteProtocolError):
        return EXIT_FAILURE, f"the peer broke the protocol: {exc.message}"
    if isinstance(exc, (EmpConnectionLost, EmpTimeout)):
        return EXIT_CONNECTION, exc.message
    if isinstance(exc, EmpClosed):
        return EXIT_GOODBYE, "the peer said bye" if exc.by_peer else exc.message
    if isinstance(exc, trio.EndOfChannel):
        return EXIT_GOODBYE, "the peer said bye"
    if isinstance(exc, EmpError):
        return EXIT_FAILURE, exc.message
    if isinstance(exc, OSError):
        return EXIT_CONNECTION, f"cannot connect: {exc.strerror or exc}"
    return None


def run(args: argparse.Namespace) -> int:
    ssl_context = tls_client_context(args)
    config = EmpConfig(
        framing=FRAMINGS[args.framing],
        keepalive_interval=None,
        handshake_timeout=args.timeout,
        limits=DEFAULT_CONFIG.limits,
    )

    async def main() -> int:
        with trio.fail_after(args.timeout):
            return await _act(args, config, ssl_context)

    return run_command(main, error_status=error_status, too_slow=f"no answer within {args.timeout} s")
