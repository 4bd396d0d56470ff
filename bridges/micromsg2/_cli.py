"""``rstreams mm2 sub|send HOST:PORT DESTINATION``: talk to a MicroMsg2 broker.

``sub`` subscribes to one destination (a publisher with its query, or a
topic) and prints each message's payload as ``rstreams sub`` prints
elements (``--format``), or with ``--properties`` one JSON line per message.
``send`` sends one SEND frame per payload into a destination (a topic of
``rstreams serve --micromsg2``) and waits for the broker's acks when acks
were negotiated. Whatever the broker does instead (an ERROR, a close, a
protocol violation) is reported on stderr with a non-zero status.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

import trio

from rstreams.cli import (
    EXIT_CONNECTION,
    EXIT_DECODE,
    EXIT_FAILURE,
    EXIT_GOODBYE,
    EXIT_OK,
    EXIT_USAGE,
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

from ..kit import open_tcp_stream
from ._client import confirm_sends
from ._codec import DEFAULT_LIMITS
from ._connect import open_micromsg2_stream
from ._errors import (
    FilterError,
    MalformedTextError,
    MicroMsg2Closed,
    MicroMsg2ConnectionLost,
    MicroMsg2Error,
    MicroMsg2Timeout,
    PeerError,
    RemoteProtocolError,
    SendRefused,
    StreamError,
)
from ._events import MessageReceived
from ._extensions import MAX_WINDOW, PUBSUB, ExtensionSpec
from ._filters import parse_filter
from ._properties import FilterValue, Properties, UnixTime, decode_properties
from ._settings import MicroMsg2Settings
from ._state import Role

# Reached through BRIDGE only (bridges.micromsg2._bridge), so that importing
# bridges.micromsg2 never imports the command line; not re-exported.
__all__ = ["add_parser", "add_serve_arguments", "error_status", "run"]

#: The batch-ack window ``sub`` and ``send`` suggest by default: the most a
#: client holds unconsumed by default (``max_pending_messages``), what
#: ``rstreams sub mm2://`` suggests for a subscriber with no prefetch. A
#: broker that suggests less wins (``rstreams serve --micromsg2``: 64); the
#: acks follow what is printed, so the window bounds only what is held.
DEFAULT_WINDOW = DEFAULT_LIMITS.max_pending_messages

DESCRIPTION = """\
Talk to a MicroMsg2 broker (rstreams serve --micromsg2): subscribe to a
destination and print its messages (sub), or send messages into one (send).

HOST:PORT is the broker. Both commands suggest batch-ack with a window of
--window messages; sub also requires pubsub. A destination is a publisher
with its query ('range?count=5') or a topic ('chat').
"""

EPILOG = """\
examples:
  rstreams serve rstreams.demo:app --micromsg2 127.0.0.1:7010
  rstreams mm2 sub 127.0.0.1:7010 'range?count=3' --format hex
  rstreams mm2 sub 127.0.0.1:7010 chat --filter 'room=Tlobby;level>=N2' --properties
  rstreams mm2 send 127.0.0.1:7010 chat hello there --property room:Tlobby --property level:N3
  rstreams sub mm2://127.0.0.1:7010 'range?count=3' --prefetch 8

exit status:
  0    sub: the stream completed, or --count messages were printed;
       send: every message was sent (and acknowledged, with acks)
  1    the broker sent an ERROR (for the stream or the connection), or
       broke the protocol
  2    bad arguments (a filter or property that does not parse)
  3    the broker closed the connection first
  4    could not connect, timed out, or the connection was lost
  5    a payload could not be decoded for --format msgpack or json
"""


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "mm2",
        help="subscribe to, or send into, a MicroMsg2 broker",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=HelpFormatter,
    )
    commands = parser.add_subparsers(title="subcommands", metavar="SUBCOMMAND", required=True)
    sub = commands.add_parser("sub", help="subscribe to a destination, print its messages", formatter_class=HelpFormatter)
    _common_arguments(sub)
    sub.add_argument("--filter", metavar="F", help="only messages whose properties match, e.g. 'price>=N10;name<Tab'")
    sub.add_argument("--count", metavar="N", type=_count, help="stop after N messages (then unsubscribe)")
    sub.add_argument("--format", choices=sorted(FORMATS), default="raw", help="how to print each payload (default: raw)")
    sub.add_argument(
        "--properties",
        action="store_true",
        help='print one JSON line per message: {"properties": {...}, "payload": "..."}',
    )
    sub.set_defaults(run=run, action="sub")
    send = commands.add_parser("send", help="send one message per PAYLOAD", formatter_class=HelpFormatter)
    _common_arguments(send)
    send.add_argument("payloads", metavar="PAYLOAD", nargs="+", help="a message body: the argument's bytes, as the shell passed them (UTF-8 text, typically)")
    send.add_argument(
        "--property",
        metavar="key:VALUE",
        action="append",
        default=[],
        help="a property of every message; VALUE is N<number>, D<unix time> or T<url-encoded text> (repeatable)",
    )
    send.set_defaults(run=run, action="send")
    return parser


def add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    """``rstreams serve``'s MicroMsg2 option: ``--micromsg2 HOST:PORT``."""
    parser.add_argument(
        "--micromsg2",
        metavar="HOST:PORT",
        type=parse_address,
        action="append",
        help="also serve over MicroMsg2, as a broker: subscribe to publishers and topics, send into topics"
        " (repeatable; see docs/bridges/micromsg2.md)",
    )


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError("must be at least 0")
    return value


def _window(text: str) -> int:
    value = _count(text)
    if not 1 <= value <= MAX_WINDOW:
        raise argparse.ArgumentTypeError(f"must be in [1, {MAX_WINDOW}]")
    return value


def _common_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("address", metavar="HOST:PORT", type=parse_address, help="the MicroMsg2 broker")
    parser.add_argument("destination", metavar="DESTINATION", help="a publisher with its query, or a topic")
    parser.add_argument(
        "--window", metavar="N", type=_window, default=DEFAULT_WINDOW,
        help=f"suggest batch-ack with a window of N messages (default: {DEFAULT_WINDOW})",
    )  # fmt: skip
    add_tls_client_arguments(parser)
    add_timeout_argument(parser, what="give up connecting and handshaking after this long")


def _json_value(value: FilterValue) -> object:
    # Numbers as JSON integers, texts as strings, dates as JSON numbers of
    # seconds (a float: exact to about 15 digits).
    if isinstance(value, UnixTime):
        return float(value.seconds)
    return value


def _properties_line(message: MessageReceived, payload: bytes) -> bytes:
    record = {
        "properties": {key: _json_value(value) for key, value in message.properties},
        "payload": payload.decode("utf-8", "replace"),
    }
    return json.dumps(record, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


async def _connect(args: argparse.Namespace) -> trio.abc.Stream:
    host, port = args.address
    with trio.fail_after(args.timeout):
        return await open_tcp_stream(host or "127.0.0.1", port, ssl_context=tls_client_context(args))


async def _subscribe(args: argparse.Namespace) -> int:
    try:
        filter = None if args.filter is None else parse_filter(args.filter)
    except MalformedTextError as exc:
        raise CommandError(f"--filter: {exc.message}", EXIT_USAGE) from None
    if args.count == 0:
        return EXIT_OK
    settings = MicroMsg2Settings(
        required=(ExtensionSpec(name=PUBSUB),),
        optional=(ExtensionSpec.batch_ack(args.window),),
        handshake_timeout=args.timeout,
    )
    format_payload = FORMATS[args.format]
    stream = await _connect(args)
    printed = 0
    async with open_micromsg2_stream(stream, role=Role.CLIENT, settings=settings) as mm2:
        messages = await mm2.subscribe(args.destination, filter)
        while args.count is None or printed < args.count:
            # All that one read brought, with one ack (never past --count).
            try:
                batch = await messages.receive_batch(args.window if args.count is None else args.count - printed)
            except trio.EndOfChannel:
                break
            lines: list[bytes] = []
            try:
                for message in batch:
                    line = format_payload(message.payload)
                    lines.append((_properties_line(message, line) if args.properties else line) + b"\n")
            except DecodeError as exc:
                raise CommandError(f"message {printed + len(lines)} is {exc}", EXIT_DECODE) from None
            finally:  # what decoded is printed, even before a message that does not
                sys.stdout.buffer.write(b"".join(lines))
                sys.stdout.buffer.flush()
                printed += len(lines)
        else:
            messages.unsubscribe()
    return EXIT_OK


def _parse_properties(items: list[str]) -> Properties:
    try:
        return decode_properties(";".join(items).encode("ascii"))
    except (MalformedTextError, UnicodeEncodeError) as exc:
        message = exc.message if isinstance(exc, MalformedTextError) else "properties must be ASCII"
        raise CommandError(f"--property: {message}", EXIT_USAGE) from None


async def _send(args: argparse.Namespace) -> int:
    properties = _parse_properties(args.property)
    settings = MicroMsg2Settings(optional=(ExtensionSpec.batch_ack(args.window),), handshake_timeout=args.timeout)
    stream = await _connect(args)
    async with open_micromsg2_stream(stream, role=Role.CLIENT, settings=settings) as mm2:
        await mm2.send_messages(args.destination, [(os.fsencode(payload), properties) for payload in args.payloads])
        await confirm_sends(mm2, args.destination)
    return EXIT_OK


def error_status(exc: BaseException) -> tuple[int, str] | None:
    """The exit status and message for a MicroMsg2 error (None: not one)."""
    if isinstance(exc, StreamError):
        return EXIT_FAILURE, f"the broker failed {exc.destination!r}: {exc.message}"
    if isinstance(exc, SendRefused):
        return EXIT_FAILURE, f"the broker dropped what was sent to {exc.destination!r}: {exc.message}"
    if isinstance(exc, PeerError):
        return EXIT_FAILURE, f"the broker sent an error: {exc.message}"
    if isinstance(exc, RemoteProtocolError):
        return EXIT_FAILURE, f"the broker broke the protocol: {exc.message}"
    if isinstance(exc, (MicroMsg2ConnectionLost, MicroMsg2Timeout)):
        return EXIT_CONNECTION, exc.message
    if isinstance(exc, MicroMsg2Closed):
        return EXIT_GOODBYE, exc.message
    if isinstance(exc, FilterError):
        return EXIT_USAGE, exc.message
    if isinstance(exc, MicroMsg2Error):
        return EXIT_FAILURE, exc.message
    if isinstance(exc, OSError):
        return EXIT_CONNECTION, f"cannot connect: {exc.strerror or exc}"
    return None


def run(args: argparse.Namespace) -> int:
    tls_client_context(args)  # argument errors first

    async def main() -> int:
        if args.action == "sub":
            return await _subscribe(args)
        return await _send(args)

    return run_command(main, error_status=error_status, too_slow=f"could not connect within {args.timeout} s")
