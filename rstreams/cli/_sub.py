"""``rstreams sub URL NAME``: print a publisher's elements as they arrive.

Demand is managed here rather than by the subscription's automatic window, so
that ``--count N`` never asks for more than N elements: the window is kept at
``--prefetch`` elements ahead of what was printed, topped up once half of it
was used, and capped at the count.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import ssl
import sys
from collections.abc import Callable
from contextlib import AsyncExitStack
from typing import Any, BinaryIO

import msgpack
import trio

from .._connect import connect
from .._errors import PublisherError, RStreamsError, SessionBroken, SessionClosed
from .._registry import find_scheme, url_is_secure
from .._subscribe import Subscription
from .._url import SCHEMES, url_scheme
from ._common import (
    EXIT_CODES_HELP,
    EXIT_CONNECTION,
    EXIT_DECODE,
    EXIT_FAILURE,
    EXIT_GOODBYE,
    EXIT_OK,
    EXIT_USAGE,
    CommandError,
    HelpFormatter,
    add_log_level_argument,
    client_ssl_context,
    configure_logging,
    run_command,
)
from ._progress import Progress

__all__ = ["add_parser", "FORMATS"]

DESCRIPTION = """\
Subscribe to the publisher NAME at URL and print its elements as they arrive,
one per line.

URL is tcp://HOST:PORT, tls://HOST:PORT, ws://HOST:PORT/ or wss://HOST:PORT/
(a server started with `rstreams serve --ws`), or the URL of any installed
bridge: emp://HOST:PORT (emps:// for TLS, ?framing=author for the author's
framing) reads an app served with `rstreams serve --emp`. NAME is the
publisher name with its query, e.g. 'range?count=5' (quote it for the shell).

formats:
  raw      the element's bytes as they are, then a newline (for text elements;
           binary elements that contain newlines are better read as hex)
  hex      the element as lowercase hex
  msgpack  the element decoded as MessagePack, printed as compact JSON (bytes
           inside it as hex strings; what JSON cannot hold, as Python repr)
  json     the element decoded as JSON, printed as compact JSON
  jsonl    the same as json, by its JSON Lines name (rstreams sub URL '$stats' --format jsonl)

Leaving early (--count reached, Ctrl-C, stdout closed) cancels the stream and
says goodbye.
"""

EPILOG = (
    """\
examples:
  rstreams sub tcp://127.0.0.1:9000 'range?count=5' --format hex
  rstreams sub tcp://127.0.0.1:9000 'ticker?interval=0.5' --format msgpack --count 10
  rstreams sub tcp://127.0.0.1:9000 'blob?count=3&size=16' --format hex
  rstreams sub tcp://127.0.0.1:9000 lines                     # what `rstreams pub lines` reads
  rstreams sub tls://example.org:9443 ticker --ca ca.pem --format msgpack
  rstreams sub ws://127.0.0.1:8000/ 'range?count=5' --format hex
  rstreams sub tcp://127.0.0.1:9000 'range?count=1000000' --format hex | head -3
  rstreams sub emp://127.0.0.1:7000 'range?count=3' --format hex   # over EMP
  rstreams sub tcp://127.0.0.1:9000 'range?count=100000000' --format hex --stats > /dev/null
  rstreams sub tcp://127.0.0.1:9000 '$stats' --format jsonl      # the server's statistics

"""
    + EXIT_CODES_HELP
)

DEFAULT_PREFETCH = 32


def _non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {value}")
    return value


def _prefetch(text: str) -> int:
    value = _non_negative_int(text)
    if value == 0:
        raise argparse.ArgumentTypeError("must be at least 1: with 0 nothing would ever be requested")
    return value


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "sub",
        help="print a publisher's elements",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=HelpFormatter,
    )
    parser.add_argument("url", metavar="URL", help="tcp://HOST:PORT, tls://HOST:PORT, ws://HOST:PORT/, wss://HOST:PORT/, or a bridge's URL (emp://HOST:PORT, ...)")
    parser.add_argument("name", metavar="NAME", help="the publisher name, e.g. 'range?count=5'")
    parser.add_argument("--count", metavar="N", type=_non_negative_int, help="stop after N elements (then cancel)")
    parser.add_argument(
        "--prefetch",
        metavar="N",
        type=_prefetch,
        default=DEFAULT_PREFETCH,
        help=f"elements kept requested ahead of printing (default: {DEFAULT_PREFETCH}; at least 1)",
    )
    parser.add_argument("--format", choices=FORMATS, default="raw", help="how to print each element (default: raw)")
    parser.add_argument("--ca", metavar="FILE", help="for tls://, wss:// and the bridges' TLS schemes, trust the CA certificates in FILE (PEM)")
    parser.add_argument(
        "--stats", action="store_true", help="print a progress line on stderr every second: elements, rate, bytes"
    )
    add_log_level_argument(parser)
    parser.set_defaults(run=run)
    return parser


# ---- formats ------------------------------------------------------------


class DecodeError(Exception):
    pass


def _json_default(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).hex()
    if isinstance(value, msgpack.ExtType):
        return {"ext": value.code, "data": value.data.hex()}
    raise TypeError


def _to_json_line(value: Any) -> bytes:
    try:
        text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=_json_default)
    except (TypeError, ValueError):
        text = repr(value)  # map keys JSON cannot hold, for example
    return text.encode("utf-8", "backslashreplace")


def _format_raw(element: bytes) -> bytes:
    return element


def _format_hex(element: bytes) -> bytes:
    return element.hex().encode("ascii")


def _format_msgpack(element: bytes) -> bytes:
    try:
        value = msgpack.unpackb(element, raw=False, strict_map_key=False)
    except Exception as exc:  # msgpack raises several unrelated types
        raise DecodeError(f"not valid MessagePack: {exc}") from None
    return _to_json_line(value)


def _format_json(element: bytes) -> bytes:
    try:
        value = json.loads(element)
    except (ValueError, UnicodeDecodeError) as exc:
        raise DecodeError(f"not valid JSON: {exc}") from None
    return _to_json_line(value)


FORMATS: dict[str, Callable[[bytes], bytes]] = {
    "raw": _format_raw,
    "hex": _format_hex,
    "msgpack": _format_msgpack,
    "json": _format_json,
    "jsonl": _format_json,  # JSON Lines: one compact JSON document per line, as json
}


# ---- the command --------------------------------------------------------


class _Demand:
    """Keeps ``prefetch`` elements requested ahead of printing, capped at ``limit``.

    Top-up rule: once at least half the window has been printed, request
    exactly what was printed (or what is left up to the limit), so requests
    are batched but the window never drops below half.
    """

    def __init__(self, prefetch: int, limit: int | None) -> None:
        self.prefetch = prefetch
        self.limit = limit
        self.requested = 0
        self.printed = 0

    def more(self) -> int:
        target = self.printed + self.prefetch
        if self.limit is not None:
            target = min(target, self.limit)
        deficit = target - self.requested
        if deficit <= 0:
            return 0
        if deficit * 2 >= self.prefetch or target == self.limit or self.requested == 0:
            self.requested = target
            return deficit
        return 0


async def _print_elements(
    subscription: Subscription,
    demand: _Demand,
    format_element: Callable[[bytes], bytes],
    out: BinaryIO,
    progress: Progress | None = None,
) -> None:
    def top_up() -> None:
        n = demand.more()
        if n:
            subscription.request(n)

    top_up()
    if demand.limit == 0:
        return
    async for batch in subscription.batches():
        if demand.limit is not None:
            batch = batch[: demand.limit - demand.printed]
        lines: list[bytes] = []
        for element in batch:
            try:
                lines.append(format_element(element))
            except DecodeError as exc:
                _write_lines(out, lines)  # the good ones before it
                raise DecodeError(f"element {demand.printed + len(lines)} is {exc}") from None
        _write_lines(out, lines)
        demand.printed += len(batch)
        if progress is not None:
            progress.add(len(batch), sum(map(len, batch)))
        if demand.limit is not None and demand.printed >= demand.limit:
            return
        top_up()


def _write_lines(out: BinaryIO, lines: list[bytes]) -> None:
    if lines:
        out.write(b"\n".join(lines) + b"\n")
        out.flush()


async def _subscribe(args: argparse.Namespace, ssl_context: ssl.SSLContext | None, out: BinaryIO) -> int:
    demand = _Demand(args.prefetch, args.count)
    format_element = FORMATS[args.format]
    status = EXIT_OK
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with AsyncExitStack() as stack:
            try:
                peer = await stack.enter_async_context(connect(args.url, ssl_context=ssl_context))
            except OSError as exc:
                # Connecting failed (the session itself reports later failures).
                return _report(f"cannot connect to {args.url}: {exc.strerror or exc}", EXIT_CONNECTION)
            except ValueError as exc:
                # A bridge's URL it cannot use (an unknown option, say).
                return _report(str(exc), EXIT_USAGE)
            except RStreamsError as exc:
                # A bridge's handshake failed (the peer's error, a timeout).
                return _bridge_error(args.url, exc)
            async with trio.open_nursery() as nursery:

                async def on_signal() -> None:
                    nonlocal status
                    signum = await signals.__anext__()
                    status = 128 + signum  # 130 for SIGINT, as shells report it
                    nursery.cancel_scope.cancel()

                nursery.start_soon(on_signal)
                progress = Progress(sys.stderr) if args.stats else None
                try:
                    async with peer.subscribe(args.name, prefetch=0) as subscription:
                        await _print_elements(subscription, demand, format_element, out, progress)
                except PublisherError as exc:
                    status = _report(f"publisher error: {exc.message}", EXIT_FAILURE)
                except SessionClosed as exc:
                    status = _session_closed(exc)
                except DecodeError as exc:
                    status = _report(str(exc), EXIT_DECODE)
                except BrokenPipeError:
                    _silence_stdout()
                except RStreamsError as exc:
                    status = _bridge_error(args.url, exc)
                finally:
                    if progress is not None:
                        progress.finish()  # also after Ctrl-C: the totals of the run
                nursery.cancel_scope.cancel()
    return status


def _bridge_error(url: str, exc: RStreamsError) -> int:
    # A bridge's own error: the bridge says which exit status it means.
    scheme = url_scheme(url)
    if scheme not in SCHEMES:
        bridge, _ = find_scheme(url, scheme)
        if bridge.error_status is not None:
            answer = bridge.error_status(exc)
            if answer is not None:
                return _report(answer[1], answer[0])
    return _report(str(exc), EXIT_FAILURE)


def _session_closed(exc: SessionClosed) -> int:
    if isinstance(exc, SessionBroken):
        return _report(f"connection lost: {_with_cause(exc.reason, exc)}", EXIT_CONNECTION)
    if exc.by_peer:
        return _report(f"the server said goodbye: {exc.reason}", EXIT_GOODBYE)
    return _report(f"session closed: {exc.reason}", EXIT_GOODBYE)


def _with_cause(reason: str, exc: BaseException) -> str:
    # A transport error often says nothing itself (trio.BrokenResourceError())
    # while its cause says what happened (a TLS certificate that failed to
    # verify, a reset): name the innermost cause that has something to say.
    detail = ""
    seen: set[int] = set()
    cause = exc.__cause__
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        detail = str(cause) or detail
        cause = cause.__cause__
    reason = reason.rstrip(": ")
    if detail and detail not in reason:
        reason = f"{reason}: {detail}" if reason else detail
    # "connection lost: connection lost: ..." says it twice.
    return reason.removeprefix("connection lost: ") or "no reason given"


def _report(message: str, code: int) -> int:
    print(f"rstreams: {message}", file=sys.stderr, flush=True)
    return code


def _silence_stdout() -> None:
    # The reader of our stdout went away (``| head``): that is a normal way
    # to stop. Point stdout at /dev/null so the interpreter's final flush
    # does not complain either.
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def run(args: argparse.Namespace) -> int:
    configure_logging(args.log_level, args.log_format)
    try:
        secure = url_is_secure(args.url)
    except ValueError as exc:  # UnsupportedScheme included: it names the known schemes
        raise CommandError(str(exc), EXIT_USAGE) from None
    ssl_context = client_ssl_context(secure, args.ca, ca_hint="--ca is for tls:// and wss:// URLs (and the bridges' TLS schemes, such as emps://)")
    out = sys.stdout.buffer

    async def subscribe() -> int:
        return await _subscribe(args, ssl_context, out)

    return run_command(subscribe)
