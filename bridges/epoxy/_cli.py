"""``rstreams epoxy call|decode``: poke a Bond Epoxy service and read Bond payloads without a schema.

``call`` opens one Epoxy connection (config both ways), sends one request
(or, with ``--event``, one event), prints the response payload as the
schema-less tree in JSON and closes. ``decode`` prints a Bond payload from a
file as the same tree. Whatever goes wrong (a ProtocolError, an error
response, a payload that does not decode, a lost connection) is reported on
stderr with a non-zero status.
"""

from __future__ import annotations

import argparse
import json
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
    EXIT_USAGE,
    CommandError,
    HelpFormatter,
    add_timeout_argument,
    add_tls_client_arguments,
    parse_address,
    run_command,
    tls_client_context,
)

from . import bond
from ._connect import open_epoxy_connection
from ._errors import (
    EpoxyClosed,
    EpoxyConnectionLost,
    EpoxyError,
    EpoxyTimeout,
    ErrorResponse,
    LocalProtocolError,
    PeerProtocolError,
    RemoteProtocolError,
)
from ._settings import DEFAULT_PORT, DEFAULT_TLS_PORT, EpoxySettings

# Reached through BRIDGE only (bridges.epoxy._bridge), so that importing
# bridges.epoxy never imports the command line.
__all__: list[str] = []

#: ``--protocol`` names.
PROTOCOLS = {"compact": bond.Protocol.COMPACT_V1, "compact2": bond.Protocol.COMPACT_V2, "fast": bond.Protocol.FAST}
#: An empty struct, marshalled Compact Binary v1: what ``call`` sends by default.
EMPTY_STRUCT_HEX = "4342010000"

DESCRIPTION = """\
Talk to a Bond Epoxy service, and read Bond payloads without their schema.

call: connect to HOST:PORT (the port defaults to 25188, 25156 with --tls),
send one request to SERVICE METHOD whose PayloadData is --payload-hex (a
marshalled Compact Binary v1 struct: "43 42 01 00" then the struct; default:
an empty struct), and print the response payload as JSON. With --event, send
an event instead (no response comes).

decode: print the Bond struct in FILE ("-": standard input), serialized in
--protocol (compact: Compact Binary v1, compact2: v2, fast: Fast Binary v1),
or with --marshalled preceded by its 4-byte marshalling header, as JSON.

The JSON is the schema-less tree: a struct is an object whose keys are field
ids as strings, with its base struct's fields under "base"; lists and sets
are arrays; maps are arrays of [key, value] pairs; blobs (lists of int8) are
arrays of integers; wstrings are strings. See docs/bridges/epoxy.md.
"""

EPILOG = """\
examples:
  rstreams serve rstreams.demo:app --epoxy 127.0.0.1:25188
  rstreams sub epoxy://127.0.0.1 'range?count=3' --format hex      # the same, as rstreams sees it
  rstreams epoxy call 127.0.0.1:25188 rstreams.Publishers Subscribe \\
      --payload-hex 43420100090d72616e67653f636f756e743d3300      # {"0": "range?count=3"}
  rstreams epoxy call 127.0.0.1:25188 rstreams.Publishers Publish --event --payload-hex \\
      434201000904636861742b0e1d7b2266726f6d223a2022636c69222c202274657874223a20226869227d00
  rstreams epoxy call epoxy.example.com rstreams.Publishers Subscribe --tls --ca ca.pem \\
      --payload-hex 43420100090d72616e67653f636f756e743d3300
  rstreams epoxy decode tests/data/bond-compat/compat.fast.dat --protocol fast
  printf 'CB\\1\\0\\x30\\x86\\x01\\0' | rstreams epoxy decode - --protocol compact --marshalled

exit status:
  0    call: the response arrived (or the event was sent); decode: decoded
  1    the peer sent an error response (ErrorData) or a ProtocolError, or
       broke the protocol
  2    bad arguments (an address, hex that is not hex, a file that cannot be read)
  3    the peer closed the connection instead of answering
  4    could not connect, timed out, or the connection was lost
  5    the payload (the response's, or the file's) does not decode
"""


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "epoxy",
        help="call a Bond Epoxy service, or decode a Bond payload",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=HelpFormatter,
    )
    commands = parser.add_subparsers(title="subcommands", metavar="SUBCOMMAND", required=True)
    call = commands.add_parser(
        "call", help="send one request (or event), print the response", description=DESCRIPTION, epilog=EPILOG,
        formatter_class=HelpFormatter,
    )
    call.add_argument("address", metavar="HOST:PORT", help="the Epoxy server (port default: 25188, 25156 with --tls)")
    call.add_argument("service", metavar="SERVICE", help="the fully qualified service name (rstreams.Publishers)")
    call.add_argument("method", metavar="METHOD", help="the method name (Subscribe)")
    call.add_argument(
        "--payload-hex",
        metavar="HEX",
        default=EMPTY_STRUCT_HEX,
        help=f"the PayloadData: a marshalled Compact Binary v1 struct, in hex (default: an empty struct, {EMPTY_STRUCT_HEX})",
    )
    call.add_argument("--event", action="store_true", help="send an event (one-way) instead of a request")
    add_timeout_argument(call)
    add_tls_client_arguments(call)
    call.set_defaults(run=run_call)
    decode = commands.add_parser(
        "decode", help="print a Bond payload as JSON", description=DESCRIPTION, epilog=EPILOG, formatter_class=HelpFormatter
    )
    decode.add_argument("file", metavar="FILE", help='the payload ("-": standard input)')
    decode.add_argument(
        "--protocol",
        choices=list(PROTOCOLS),
        help="compact (Compact Binary v1), compact2 (v2) or fast (Fast Binary v1); "
        "with --marshalled, the header's protocol (and this, if given, must agree)",
    )
    decode.add_argument("--marshalled", action="store_true", help="FILE starts with Bond's 4-byte marshalling header")
    add_tls_client_arguments(decode, tls_help="no effect: decode reads a file (accepted so that every epoxy command takes it)")
    decode.set_defaults(run=run_decode)
    return parser


def add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    """``rstreams serve``'s Epoxy option: ``--epoxy HOST:PORT``."""
    parser.add_argument(
        "--epoxy",
        metavar="HOST:PORT",
        type=parse_address,
        action="append",
        help="also serve over Bond Epoxy, as the service rstreams.Publishers (repeatable; "
        "epoxys:// with --tls-cert; the spec's ports are 25188 and 25156; see docs/bridges/epoxy.md)",
    )


def _address(text: str, tls: bool) -> tuple[str, int]:
    # HOST:PORT as rstreams serve takes it, or a host alone (the spec's port).
    if text.startswith("[") and "]:" not in text:
        return text.strip("[]"), DEFAULT_TLS_PORT if tls else DEFAULT_PORT
    if not text.startswith("[") and text.count(":") != 1:
        return text, DEFAULT_TLS_PORT if tls else DEFAULT_PORT  # a name, or IPv6 without a port
    try:
        host, port = parse_address(text)
    except argparse.ArgumentTypeError as exc:
        raise CommandError(str(exc), EXIT_USAGE) from None
    return host or "127.0.0.1", port


def _hex(text: str) -> bytes:
    try:
        data = bytes.fromhex(text)
    except ValueError:
        raise CommandError(f"--payload-hex is not hex: {text!r}", EXIT_USAGE) from None
    if not data:
        raise CommandError("--payload-hex is empty: a PayloadData framelet cannot be", EXIT_USAGE)
    return data


def _print_json(tree: bond.StructValue) -> None:
    line = json.dumps(bond.to_json(tree), separators=(",", ":"))
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def error_status(exc: BaseException) -> tuple[int, str] | None:
    """The exit status and message for an Epoxy error (None: not one)."""
    if isinstance(exc, ErrorResponse):
        return EXIT_FAILURE, f"the peer answered with an {exc.message}"
    if isinstance(exc, PeerProtocolError):
        return EXIT_FAILURE, exc.message
    if isinstance(exc, RemoteProtocolError):
        return EXIT_FAILURE, f"the peer broke the protocol: {exc.message}"
    if isinstance(exc, (EpoxyConnectionLost, EpoxyTimeout)):
        return EXIT_CONNECTION, exc.message
    if isinstance(exc, EpoxyClosed):
        return EXIT_GOODBYE, exc.message
    if isinstance(exc, trio.EndOfChannel):
        return EXIT_GOODBYE, "the peer closed the connection"
    if isinstance(exc, EpoxyError):
        return EXIT_FAILURE, exc.message
    if isinstance(exc, OSError):
        return EXIT_CONNECTION, f"cannot connect: {exc.strerror or exc}"
    return None


async def _call(args: argparse.Namespace, payload: bytes, ssl_context: ssl.SSLContext | None) -> int:
    host, port = _address(args.address, ssl_context is not None)
    settings = EpoxySettings(handshake_timeout=args.timeout)
    async with open_epoxy_connection(host, port, ssl_context=ssl_context, settings=settings) as epoxy:
        try:
            if args.event:
                await epoxy.send_event(args.service, args.method, payload)
                return EXIT_OK
            response = await epoxy.call_raw(args.service, args.method, payload)
        except LocalProtocolError as exc:
            raise CommandError(exc.message, EXIT_USAGE) from None
    if response.is_error:
        try:
            error = response.decode_error()
        except bond.BondDecodeError as exc:
            raise CommandError(f"the peer answered with an error response that does not decode: {exc}", EXIT_DECODE) from None
        raise ErrorResponse(error)
    try:
        _, tree = bond.unmarshal_tree(response.payload)
    except bond.BondDecodeError as exc:
        raise CommandError(f"the response payload does not decode: {exc}", EXIT_DECODE) from None
    _print_json(tree)
    return EXIT_OK


def run_call(args: argparse.Namespace) -> int:
    ssl_context = tls_client_context(args)
    payload = _hex(args.payload_hex)

    async def main() -> int:
        with trio.fail_after(args.timeout):
            return await _call(args, payload, ssl_context)

    return run_command(main, error_status=error_status, too_slow=f"no answer within {args.timeout} s")


def run_decode(args: argparse.Namespace) -> int:
    if args.ca is not None and not args.tls:
        raise CommandError("--ca needs --tls", EXIT_USAGE)
    try:
        if args.file == "-":
            data = sys.stdin.buffer.read()
        else:
            with open(args.file, "rb") as file:
                data = file.read()
    except OSError as exc:
        raise CommandError(f"cannot read {args.file!r}: {exc.strerror or exc}", EXIT_USAGE) from None
    try:
        if args.marshalled:
            protocol, tree = bond.unmarshal_tree(data)
            if args.protocol is not None and PROTOCOLS[args.protocol] is not protocol:
                names = {value: name for name, value in PROTOCOLS.items()}
                raise CommandError(
                    f"the marshalling header says {names[protocol]}, not {args.protocol}", EXIT_DECODE
                )
        else:
            if args.protocol is None:
                raise CommandError("--protocol is required without --marshalled", EXIT_USAGE)
            tree = bond.read_tree(data, PROTOCOLS[args.protocol])
    except bond.BondDecodeError as exc:
        raise CommandError(f"{args.file} does not decode: {exc}", EXIT_DECODE) from None
    _print_json(tree)
    return EXIT_OK
