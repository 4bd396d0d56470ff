"""``rstreams stats URL``: a server's ``$stats`` as a table that refreshes in place.

The server does the counting (``$stats``, one JSON record per interval);
this command only subscribes and draws. Rates (elements/s, bytes/s) are the
difference between two consecutive records divided by the time between
them, so the first table shows none. On a terminal each table replaces the
previous one (ANSI clear screen); into a pipe or file the tables follow each
other, separated by a blank line, so ``--count 1`` gives one plain snapshot.
"""

from __future__ import annotations

import argparse
import signal
import ssl
import sys
from contextlib import AsyncExitStack
from typing import Any, TextIO

import trio

from .._connect import connect
from .._errors import PublisherError, RStreamsError, SessionBroken, SessionClosed
from .._registry import url_is_secure
from .._url import SCHEMES, url_scheme
from .._stats_publisher import DEFAULT_STATS_INTERVAL, MIN_STATS_INTERVAL, STATS_PUBLISHER
from ._client import add_ca_argument, client_token, stop_at_signal
from ._common import (
    EXIT_CODES_HELP,
    EXIT_CONNECTION,
    EXIT_FAILURE,
    EXIT_GOODBYE,
    EXIT_OK,
    EXIT_USAGE,
    CommandError,
    HelpFormatter,
    add_log_level_argument,
    client_ssl_context,
    configure_logging,
    positive_int,
    run_command,
    warn,
)

__all__ = ["add_parser", "render_table"]

DESCRIPTION = """\
Show a server's statistics as a table that refreshes every --interval seconds:
per transport (sessions, streams, outstanding demand, elements and bytes, with
rates, and the memory held for the peers), the busiest sessions (peer,
transport, age, streams, elements/s, demand, bytes, memory), the topics (lag,
drops) and the bridges.

It reads the server's $stats publisher, which every rstreams server serves
(`rstreams sub URL '$stats' --format json` prints the raw JSON records; `--format jsonl --decode json` each in an envelope).
"""

EPILOG = (
    """\
examples:
  rstreams stats tcp://127.0.0.1:9000
  rstreams stats ws://127.0.0.1:8000/ --interval 5
  rstreams stats tcp://127.0.0.1:9000 --count 1                  # one table, no refresh
  rstreams stats tls://example.org:9443 --ca ca.pem

"""
    + EXIT_CODES_HELP
)

#: Sessions listed, busiest first (the rest are counted in one line).
MAX_SESSIONS_SHOWN = 20
_CLEAR_SCREEN = "\x1b[H\x1b[2J"


def _interval(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, got {text!r}") from None
    if not value >= MIN_STATS_INTERVAL:
        raise argparse.ArgumentTypeError(f"expected seconds >= {MIN_STATS_INTERVAL:g}, got {text}")
    return value


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "stats",
        help="watch a server's statistics",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=HelpFormatter,
    )
    parser.add_argument("url", metavar="URL", help="tcp://HOST:PORT, tls://HOST:PORT, ws://HOST:PORT/ or wss://HOST:PORT/")
    parser.add_argument(
        "--interval",
        metavar="SECONDS",
        type=_interval,
        default=DEFAULT_STATS_INTERVAL,
        help=f"seconds between tables (default: {DEFAULT_STATS_INTERVAL:g})",
    )
    parser.add_argument("--count", metavar="N", type=positive_int, help="stop after N tables")
    add_ca_argument(parser)
    add_log_level_argument(parser)
    parser.set_defaults(run=run)
    return parser


# ---- the table (pure) ---------------------------------------------------------


def _quantity(value: float) -> str:
    # 1234567 -> 1.23M: columns stay narrow and the magnitude is what matters.
    for limit, suffix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= limit:
            return f"{value / limit:.3g}{suffix}"
    return f"{value:.0f}" if float(value).is_integer() else f"{value:.3g}"


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    hours, rest = divmod(seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{seconds:02d}s"
    return f"{seconds}s"


def _columns(header: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(cell) for cell in column) for column in zip(header, *rows)]
    lines = []
    for row in (header, *rows):
        cells = [row[0].ljust(widths[0])] + [cell.rjust(width) for cell, width in zip(row[1:], widths[1:])]
        lines.append("  ".join(cells).rstrip())
    return lines


def _rate(current: dict[str, Any], previous: dict[str, Any] | None, key: str, elapsed: float) -> str:
    if previous is None or elapsed <= 0 or key not in previous:
        return "-"
    return _quantity(max(0, current[key] - previous[key]) / elapsed)


def _memory(counts: dict[str, Any]) -> str:
    # What the sessions hold for their peers now; "-" for a record from a
    # server older than the memory_bytes key.
    return _quantity(counts["memory_bytes"]) if "memory_bytes" in counts else "-"


def render_table(record: dict[str, Any], previous: dict[str, Any] | None, url: str) -> str:
    """One ``$stats`` record as text; rates against ``previous`` (None: no rates)."""
    elapsed = record["time"] - previous["time"] if previous is not None else 0.0
    server = record["server"]
    state = "accepting" if server["accepting"] else "shutting down"
    lines = [
        f"rstreams stats {url}   up {_duration(server['uptime_seconds'])}   {state}   "
        f"sessions opened {server['sessions_opened']}   refused {server['connections_refused']}",
        "",
    ]
    before = previous["transports"] if previous is not None else {}
    rows = []
    for name, counts in [*record["transports"].items(), ("total", record["totals"])]:
        last = previous["totals"] if name == "total" and previous is not None else before.get(name)
        rows.append(
            [
                name,
                str(counts["sessions"]),
                str(counts["streams"]),
                _quantity(counts["demand_outstanding"]) + ("+inf" * bool(counts["unbounded_streams"])),
                _quantity(counts["elements_sent"]),
                _rate(counts, last, "elements_sent", elapsed),
                _quantity(counts["bytes_received"]),
                _quantity(counts["bytes_sent"]),
                _rate(counts, last, "bytes_sent", elapsed),
                _memory(counts),
            ]
        )
    header = ["TRANSPORT", "SESSIONS", "STREAMS", "DEMAND", "ELEMENTS", "EL/S", "BYTES IN", "BYTES OUT", "OUT B/S", "MEMORY"]
    lines += _columns(header, rows)

    earlier = {(session["peer"], session["transport"]): session for session in (previous or {}).get("sessions", [])}
    sessions = []
    for session in record["sessions"]:
        last = earlier.get((session["peer"], session["transport"]))
        rate = (session["elements_sent"] - last["elements_sent"]) / elapsed if last is not None and elapsed > 0 else 0.0
        sessions.append((rate, session, last))
    sessions.sort(key=lambda entry: (-entry[0], -entry[1]["elements_sent"]))
    if sessions:
        rows = [
            [
                session["peer"],
                session["transport"],
                _duration(session["age_seconds"]),
                str(session["streams"]),
                _quantity(session["elements_sent"]),
                _rate(session, last, "elements_sent", elapsed),
                _quantity(session["demand_outstanding"]) + ("+inf" * bool(session["unbounded_streams"])),
                _quantity(session["bytes_sent"]),
                _memory(session),
            ]
            for _, session, last in sessions[:MAX_SESSIONS_SHOWN]
        ]
        header = ["PEER", "TRANSPORT", "AGE", "STREAMS", "ELEMENTS", "EL/S", "DEMAND", "BYTES OUT", "MEMORY"]
        lines += ["", *_columns(header, rows)]
        if len(sessions) > MAX_SESSIONS_SHOWN:
            lines.append(f"... and {len(sessions) - MAX_SESSIONS_SHOWN} more sessions")
    if record["topics"]:
        rows = [
            [
                topic["name"],
                _quantity(topic["published"]),
                f"{topic['held']}/{topic['capacity']}",
                str(topic["subscribers"]),
                _quantity(topic["lag_max"]),
                _quantity(topic["dropped"]),
            ]
            for topic in record["topics"]
        ]
        lines += ["", *_columns(["TOPIC", "PUBLISHED", "HELD", "SUBSCRIBERS", "LAG MAX", "DROPPED"], rows)]
    if record["bridges"]:
        keys = sorted({key for counts in record["bridges"].values() for key in counts})
        rows = [[name, *(_quantity(counts.get(key, 0)) for key in keys)] for name, counts in record["bridges"].items()]
        lines += ["", *_columns(["BRIDGE", *(key.replace("_", " ").upper() for key in keys)], rows)]
    return "\n".join(lines) + "\n"


# ---- the command ----------------------------------------------------------------


async def _watch(args: argparse.Namespace, ssl_context: ssl.SSLContext | None, out: TextIO) -> int:
    name = f"{STATS_PUBLISHER}?interval={args.interval:g}" + (f"&count={args.count}" if args.count else "")
    clear = out.isatty()
    status = EXIT_OK
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with AsyncExitStack() as stack:
            try:
                peer = await stack.enter_async_context(connect(args.url, ssl_context=ssl_context, token=client_token(args)))
            except OSError as exc:
                warn(f"cannot connect to {args.url}: {exc.strerror or exc}")
                return EXIT_CONNECTION
            async with trio.open_nursery() as nursery:
                stop = stop_at_signal(signals, nursery)
                try:
                    previous: dict[str, Any] | None = None
                    async with peer.subscribe(name, prefetch=1, codec="json") as records:
                        async for record in records:
                            table = render_table(record, previous, args.url)
                            out.write(_CLEAR_SCREEN + table if clear else ("\n" if previous is not None else "") + table)
                            out.flush()
                            previous = record
                except PublisherError as exc:
                    status = _report(f"the server has no statistics: {exc.message}", EXIT_FAILURE)
                except SessionBroken as exc:
                    status = _report(f"connection lost: {exc.reason}", EXIT_CONNECTION)
                except SessionClosed as exc:
                    status = _report(f"the server said goodbye: {exc.reason}", EXIT_GOODBYE)
                except RStreamsError as exc:
                    status = _report(str(exc), EXIT_FAILURE)
                nursery.cancel_scope.cancel()
    return stop.exit_status(status)


def _report(message: str, code: int) -> int:
    warn(message)
    return code


def run(args: argparse.Namespace) -> int:
    configure_logging(args.log_level, args.log_format)
    try:
        secure = url_is_secure(args.url)
    except ValueError as exc:
        raise CommandError(str(exc), EXIT_USAGE) from None
    scheme = url_scheme(args.url)
    if scheme not in SCHEMES:
        # The bridges serve the app's publishers, not the runtime's own: a
        # bridge's peer has no token to show, and $stats names every peer.
        raise CommandError(
            f"stats reads $stats over tcp://, tls://, ws:// or wss://, which {scheme}:// listeners do not carry:"
            " use the same server's tcp:// or ws:// listener, or its --metrics endpoint",
            EXIT_USAGE,
        )
    ssl_context = client_ssl_context(secure, args.ca, ca_hint="--ca is for tls:// and wss:// URLs", cert=args.cert, key=args.key)
    out = sys.stdout

    async def watch() -> int:
        return await _watch(args, ssl_context, out)

    return run_command(watch)
