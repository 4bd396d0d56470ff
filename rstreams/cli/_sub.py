"""``rstreams sub URL NAME``: print a publisher's elements as they arrive.

Demand is managed here rather than by the subscription's automatic window, so
that ``--count N`` never asks for more than N elements: the window is kept at
``--prefetch`` elements ahead of what was printed, topped up once half of it
was used, and capped at the count. Without ``--prefetch`` the window adapts
as a subscription's does (:class:`rstreams.protocol.AdaptiveDemand`),
capped at the count in the same way.

Time bounds: ``--timeout`` bounds the whole command, connecting included,
and ``--idle-timeout`` the wait for each element. Either cancels the
subscription; the session then says goodbye within its own bounds, outside
the timeout (a timed-out subscriber leaves as politely as one that got
everything it asked for).
"""

from __future__ import annotations

import argparse
import math
import signal
import ssl
import sys
from collections.abc import Callable
from contextlib import AsyncExitStack
from typing import Any, BinaryIO

import trio

from .._connect import connect
from .._errors import PublisherError, RStreamsError, SessionClosed
from .._registry import find_scheme
from .._subscribe import ADAPTIVE_BYTE_BUDGET, ADAPTIVE_INITIAL, ADAPTIVE_MAXIMUM, Subscription
from .._url import SCHEMES, url_scheme
from ..protocol import AdaptiveDemand
from ._common import (
    COMMAND_SUMMARIES,
    EXIT_CODES_HELP,
    EXIT_CONNECTION,
    EXIT_DECODE,
    EXIT_FAILURE,
    EXIT_OK,
    EXIT_TIMEOUT,
    EXIT_USAGE,
    CommandError,
    HelpFormatter,
    add_log_level_argument,
    configure_logging,
    positive_seconds,
    run_command,
)
from ._client import (
    URL_HELP,
    add_ca_argument,
    client_ssl,
    client_token,
    check_name,
    client_url,
    report,
    session_closed,
    set_json_errors,
    silence_stdout,
    stop_at_signal,
)
from ._formats import DECODERS, FORMATS, DecodeError, JsonLines
from ._progress import Progress

__all__ = ["add_parser"]

DESCRIPTION = """\
Subscribe to the publisher NAME at URL and print its elements as they arrive,
one per line.

URL is tcp://HOST:PORT, tls://HOST:PORT, ws://HOST:PORT/ or wss://HOST:PORT/
(a server started with `rstreams serve --ws`), or the URL of any installed
bridge: emp://HOST:PORT (emps:// for TLS, ?framing=author for the author's
framing) reads an app served with `rstreams serve --emp`. Without URL, the
environment variable RSTREAMS_URL gives it. NAME is the publisher name with
its query, e.g. 'range?count=5' (quote it for the shell).

formats:
  raw      the element's bytes as they are, then a newline (for text elements;
           binary elements that contain newlines are better read as hex)
  hex      the element as lowercase hex
  msgpack  the element decoded as MessagePack, printed as compact JSON (bytes
           inside it as hex strings; what JSON cannot hold, as Python repr)
  json     the element decoded as JSON, printed as compact JSON
  jsonl    for programs: one JSON object per element,
             {"seq": 0, "name": NAME, "size": BYTES, "value": ..., "t": UNIX_TIME}
           seq counts from 0, t is when it was printed; value is the element
           decoded as --decode says (json, msgpack, or text: UTF-8 without
           control characters, the default); an element that does not decode
           has "hex", its bytes as lowercase hex, instead of "value"

Leaving early (--count reached, --timeout or --idle-timeout, Ctrl-C, stdout
closed) cancels the stream and says goodbye.
"""

EPILOG = (
    """\
examples:
  rstreams sub tcp://127.0.0.1:9000 'range?count=5' --format hex
  rstreams sub tcp://127.0.0.1:9000 'ticker?interval=0.5' --format msgpack --count 10
  rstreams sub tcp://127.0.0.1:9000 'blob?count=3&size=16' --format hex
  rstreams sub tcp://127.0.0.1:9000 lines                     # what `rstreams pub --serve lines` reads
  rstreams sub tls://example.org:9443 ticker --ca ca.pem --format msgpack
  rstreams sub ws://127.0.0.1:8000/ 'range?count=5' --format hex
  rstreams sub tcp://127.0.0.1:9000 'range?count=1000000' --format hex | head -3
  rstreams sub emp://127.0.0.1:7000 'range?count=3' --format hex   # over EMP
  rstreams sub tcp://127.0.0.1:9000 'ticker?interval=0.2' --format jsonl --decode msgpack --timeout 5
  rstreams sub tcp://127.0.0.1:9000 lines --idle-timeout 30   # stop once 30 s pass without a line
  RSTREAMS_URL=ws://127.0.0.1:8000/ rstreams sub 'range?count=3' --format jsonl
  rstreams sub tcp://127.0.0.1:9000 'range?count=100000000' --format hex --stats   # a progress line on stderr
  rstreams sub tcp://127.0.0.1:9000 '$stats' --format jsonl --decode json   # the server's statistics
  rstreams sub tcp://127.0.0.1:9000 nope --json               # stderr: {"error": "publisher error: ...", "exit": 1}

"""
    + EXIT_CODES_HELP
)



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


#: After --timeout or --idle-timeout, how long the session may take to say
#: goodbye before it is closed forcefully.
TIMEOUT_GOODBYE_GRACE = 1.0



def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "sub",
        help=COMMAND_SUMMARIES["sub"],
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=HelpFormatter,
    )
    parser.add_argument(
        "url",
        metavar="URL",
        nargs="?",
        help=URL_HELP,
    )
    parser.add_argument("name", metavar="NAME", help="the publisher name, e.g. 'range?count=5'")
    parser.add_argument("--count", metavar="N", type=_non_negative_int, help="stop after N elements (then cancel)")
    parser.add_argument(
        "--prefetch",
        metavar="N",
        type=_prefetch,
        default=None,
        help="elements kept requested ahead of printing (at least 1; default: a window that adapts, "
        f"starting at {ADAPTIVE_INITIAL} and growing while printing keeps up)",
    )
    parser.add_argument("--format", choices=[*FORMATS, "jsonl"], default="raw", help="how to print each element (default: raw)")
    parser.add_argument(
        "--decode",
        choices=DECODERS,
        default=None,
        help="with --format jsonl: what an element's value is decoded as (default: text)",
    )
    parser.add_argument(
        "--timeout",
        metavar="SECONDS",
        type=positive_seconds,
        help="stop after SECONDS in all, connecting included (exit status 124)",
    )
    parser.add_argument(
        "--idle-timeout",
        metavar="SECONDS",
        type=positive_seconds,
        help="stop once SECONDS pass without an element (exit status 124)",
    )
    add_ca_argument(parser)
    parser.add_argument(
        "--stats", action="store_true", help="print a progress line on stderr every second: elements, rate, bytes"
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help='report a failure on stderr as one JSON object, {"error": MESSAGE, "exit": STATUS}, for programs',
    )
    add_log_level_argument(parser)
    parser.set_defaults(run=run)
    return parser


# ---- the command --------------------------------------------------------


class _Demand:
    """Keeps a window of elements requested ahead of printing, capped at ``limit``.

    Top-up rule: once at least half the window has been printed, request
    exactly what was printed (or what is left up to the limit), so requests
    are batched but the window never drops below half. With ``prefetch``
    None the window is an :class:`AdaptiveDemand`: it grows while printing
    keeps up (the subscription ran dry: :meth:`starved`) and shrinks while
    it lags.
    """

    def __init__(self, prefetch: int | None, limit: int | None) -> None:
        self.limit = limit
        self.requested = 0
        self.printed = 0
        #: Set by the printer: the subscription (for the adaptive window's
        #: outstanding demand) and the size of the last element printed.
        self.subscription: Subscription | None = None
        self.last_size = 0
        self._accounted = 0  # printed elements the adaptive window was told of
        self.adaptive = (
            AdaptiveDemand(self._probe, initial=ADAPTIVE_INITIAL, maximum=ADAPTIVE_MAXIMUM, byte_budget=ADAPTIVE_BYTE_BUDGET)
            if prefetch is None
            else None
        )
        self.prefetch = ADAPTIVE_INITIAL if prefetch is None else prefetch

    def _probe(self) -> tuple[int, int]:
        outstanding = self.subscription.statistics().outstanding_demand if self.subscription is not None else 0
        return outstanding, self.last_size

    def starved(self) -> None:
        """Everything requested was printed and more is awaited."""
        if self.adaptive is not None:
            self.adaptive.starved()

    def more(self) -> int:
        if self.adaptive is not None:
            return self._more_adaptive()
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

    def _more_adaptive(self) -> int:
        assert self.adaptive is not None
        if self.requested == 0:
            wanted = self.adaptive.initial
        else:
            wanted = self.adaptive.consumed(self.printed - self._accounted) if self.printed > self._accounted else 0
            self._accounted = self.printed
        target = self.requested + wanted
        if self.limit is not None:
            target = min(target, self.limit)
        deficit = target - self.requested
        if deficit <= 0:
            return 0
        self.requested = target
        return deficit


async def _print_elements(
    subscription: Subscription,
    demand: _Demand,
    format_element: Callable[[bytes], bytes],
    out: BinaryIO,
    on_batch: Callable[[], None],
    progress: Progress | None = None,
) -> None:
    demand.subscription = subscription

    def top_up() -> None:
        n = demand.more()
        if n:
            subscription.request(n)
        if demand.printed and not subscription.statistics().buffered:
            demand.starved()  # the next batch will be waited for

    top_up()
    if demand.limit == 0:
        return
    async for batch in subscription.batches():
        on_batch()
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
        if progress is not None:
            progress.add(len(batch), sum(map(len, batch)))
        if batch:
            demand.last_size = len(batch[-1])
        demand.printed += len(batch)
        if demand.limit is not None and demand.printed >= demand.limit:
            return
        top_up()


def _write_lines(out: BinaryIO, lines: list[bytes]) -> None:
    if lines:
        out.write(b"\n".join(lines) + b"\n")
        out.flush()


async def _subscribe(
    args: argparse.Namespace, url: str, ssl_context: ssl.SSLContext | None, token: str | None, out: BinaryIO
) -> int:
    demand = _Demand(args.prefetch, args.count)
    format_element: Callable[[bytes], bytes]
    if args.format == "jsonl":
        format_element = JsonLines(args.name, args.decode or "text")
    else:
        format_element = FORMATS[args.format]
    status = EXIT_OK
    deadline = trio.current_time() + args.timeout if args.timeout else math.inf
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        # --timeout while connecting; lifted once connected, when the
        # subscription's own scope takes the same deadline over, so that
        # the session's goodbye afterwards is not cut short by it. After a
        # timeout the goodbye gets TIMEOUT_GOODBYE_GRACE, then the session
        # is closed forcefully: a server that never answers does not hold
        # the command for the session's own goodbye bound (seconds).
        connected = False
        with trio.CancelScope(deadline=deadline) as bound:
            async with AsyncExitStack() as stack:
                try:
                    peer = await stack.enter_async_context(connect(url, ssl_context=ssl_context, token=token))
                except OSError as exc:
                    # Connecting failed (the session itself reports later failures).
                    return report(f"cannot connect to {url}: {exc.strerror or exc}", EXIT_CONNECTION)
                except ValueError as exc:
                    # A bridge's URL it cannot use (an unknown option, say).
                    return report(str(exc), EXIT_USAGE)
                except RStreamsError as exc:
                    # A bridge's handshake failed (the peer's error, a timeout).
                    return _bridge_error(url, exc)
                connected = True
                bound.deadline = math.inf
                async with trio.open_nursery() as nursery:
                    stop = stop_at_signal(signals, nursery)
                    idle = trio.CancelScope()

                    def restart_idle_timeout() -> None:
                        if args.idle_timeout:
                            idle.deadline = trio.current_time() + args.idle_timeout

                    restart_idle_timeout()
                    progress = Progress(sys.stderr) if args.stats else None
                    with trio.CancelScope(deadline=deadline) as overall, idle:
                        try:
                            async with peer.subscribe(args.name, prefetch=0) as subscription:
                                # (Demand by hand, to stop at --count, but adaptive
                                # without --prefetch: a bridge sizes its window so.)
                                subscription.adaptive = demand.adaptive is not None
                                await _print_elements(subscription, demand, format_element, out, restart_idle_timeout, progress)
                        except PublisherError as exc:
                            status = report(f"publisher error: {exc.message}", EXIT_FAILURE)
                        except SessionClosed as exc:
                            status = session_closed(exc)
                        except DecodeError as exc:
                            status = report(str(exc), EXIT_DECODE)
                        except BrokenPipeError:
                            silence_stdout()
                        except RStreamsError as exc:
                            status = _bridge_error(url, exc)
                        finally:
                            if progress is not None:
                                progress.finish()  # also after Ctrl-C or a timeout: the totals of the run
                    if overall.cancelled_caught:
                        status = report(f"--timeout: {args.timeout:g} s passed, after {demand.printed} elements", EXIT_TIMEOUT)
                    elif idle.cancelled_caught:
                        status = report(
                            f"--idle-timeout: no element for {args.idle_timeout:g} s, after {demand.printed} elements", EXIT_TIMEOUT
                        )
                    if status == EXIT_TIMEOUT:
                        bound.deadline = trio.current_time() + TIMEOUT_GOODBYE_GRACE
                    nursery.cancel_scope.cancel()
                status = stop.exit_status(status)
        if bound.cancelled_caught and not connected:
            return report(f"--timeout: {args.timeout:g} s passed while connecting to {url}", EXIT_TIMEOUT)
    return status


def _bridge_error(url: str, exc: RStreamsError) -> int:
    # A bridge's own error: the bridge says which exit status it means.
    scheme = url_scheme(url)
    if scheme not in SCHEMES:
        bridge, _ = find_scheme(url, scheme)
        if bridge.error_status is not None:
            answer = bridge.error_status(exc)
            if answer is not None:
                return report(answer[1], answer[0])
    return report(str(exc), EXIT_FAILURE)


def run(args: argparse.Namespace) -> int:
    configure_logging(args.log_level, args.log_format)
    set_json_errors(args.json)
    try:
        if args.decode is not None and args.format != "jsonl":
            raise CommandError("--decode is for --format jsonl (the other formats decode as they are named)", EXIT_USAGE)
        url = client_url(args.url, args.name)
        check_name(args.name)
        ssl_context = client_ssl(url, args.ca, args.cert, args.key)
        token = client_token(args)
    except CommandError as exc:
        return report(exc.message, exc.code)
    out = sys.stdout.buffer

    async def subscribe() -> int:
        return await _subscribe(args, url, ssl_context, token, out)

    return run_command(subscribe)
