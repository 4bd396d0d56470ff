"""``rstreams ping URL``: measure round trips over the rstreams protocol.

As ``rstreams emp ping`` does for EMP, and ping(1) for ICMP: it connects
once, then measures ``--count`` round trips, each one subscribe answered by
the terminal signal that ends the stream. The name subscribed to is the
reserved ``$ping``, which every router completes at once (subscribed and
onComplete in one write, no task on the server); a server without it
answers with "no such publisher", which is a round trip just the same, so
any rstreams server can be pinged. Over a bridge's URL a round trip is
whatever that protocol needs for one short stream (an EMP call).
"""

from __future__ import annotations

import argparse
import math
import time
from typing import Any

import trio

from .._connect import connect
from .._errors import PublisherError, RStreamsError, SessionClosed, UnknownPublisher
from .._publish import PING_PATH
from ._client import URL_HELP, add_ca_argument, client_ssl, client_token, client_url, report, session_closed
from ._common import (
    COMMAND_SUMMARIES,
    EXIT_CONNECTION,
    EXIT_FAILURE,
    EXIT_OK,
    EXIT_USAGE,
    HelpFormatter,
    add_log_level_argument,
    configure_logging,
    pause_seconds,
    positive_int,
    positive_seconds,
    run_command,
)

__all__ = ["add_parser", "RoundTrips"]

DESCRIPTION = f"""\
Measure round trips to the server at URL over the rstreams protocol: connect
once, then --count times subscribe to the reserved publisher {PING_PATH} and
wait for its answer (it completes at once; a server without it answers "no
such publisher", which counts as well). Prints the connection time, each
round trip, and a summary:

  connected to tcp://127.0.0.1:9000 in 0.8 ms
  answer from tcp://127.0.0.1:9000: seq=0 time=0.21 ms
  ...
  --- tcp://127.0.0.1:9000: 4 round trips ---
  min/avg/max/stddev = 0.12/0.16/0.21/0.03 ms

URL is tcp://HOST:PORT, tls://HOST:PORT, ws://HOST:PORT/, wss://HOST:PORT/
or a bridge's URL (default: $RSTREAMS_URL).

exit status: 0 every round trip answered, 1 the server answered with an
error, 2 bad arguments, 3 the server said goodbye, 4 could not connect,
the connection was lost, or --timeout ran out, 130 Ctrl-C.
"""

EPILOG = """\
examples:
  rstreams ping tcp://127.0.0.1:9000
  rstreams ping ws://127.0.0.1:8000/ --count 10 --interval 0.1
  rstreams ping tls://example.org:9443 --ca ca.pem
  rstreams ping emp://127.0.0.1:7000 --count 3              # over a bridge
"""

#: --interval's default: often enough to watch, seldom enough to be cheap.
DEFAULT_INTERVAL = 0.5


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "ping",
        help=COMMAND_SUMMARIES["ping"],
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=HelpFormatter,
    )
    parser.add_argument("url", metavar="URL", nargs="?", help=URL_HELP)
    parser.add_argument("--count", "-c", metavar="N", type=positive_int, default=4, help="round trips to measure (default: 4)")
    parser.add_argument(
        "--interval",
        "-i",
        metavar="SECONDS",
        type=pause_seconds,
        default=DEFAULT_INTERVAL,
        help=f"pause between round trips (default: {DEFAULT_INTERVAL:g}; 0: back to back)",
    )
    parser.add_argument(
        "--timeout",
        metavar="SECONDS",
        type=positive_seconds,
        default=10.0,
        help="give up on a connection or a round trip after this long (default: 10)",
    )
    add_ca_argument(parser)
    add_log_level_argument(parser)
    parser.set_defaults(run=run)
    return parser


class RoundTrips:
    """The round-trip times measured so far, in seconds, and their summary."""

    def __init__(self) -> None:
        self.times: list[float] = []

    def add(self, seconds: float) -> None:
        self.times.append(seconds)

    def summary(self) -> str:
        """``min/avg/max/stddev = a/b/c/d ms`` (population deviation, as ping(1))."""
        times = self.times
        mean = sum(times) / len(times)
        deviation = math.sqrt(sum((t - mean) ** 2 for t in times) / len(times))
        values = (min(times), mean, max(times), deviation)
        return "min/avg/max/stddev = " + "/".join(f"{value * 1000:.3f}" for value in values) + " ms"


def _milliseconds(seconds: float) -> str:
    return f"{seconds * 1000:.3f} ms"


async def _ping(url: str, args: argparse.Namespace) -> int:
    ssl_context = client_ssl(url, args.ca, args.cert, args.key)
    trips = RoundTrips()
    timed_out = False
    try:
        started = time.perf_counter()
        # --timeout bounds connecting; lifted once connected (the session's
        # nursery lives inside this scope, so it cannot be left early).
        with trio.CancelScope(deadline=trio.current_time() + args.timeout) as connecting:
            async with connect(url, ssl_context=ssl_context, token=client_token(args)) as peer:
                connecting.deadline = math.inf
                print(f"connected to {url} in {_milliseconds(time.perf_counter() - started)}", flush=True)
                for seq in range(args.count):
                    if seq and args.interval:
                        await trio.sleep(args.interval)
                    started = time.perf_counter()
                    with trio.move_on_after(args.timeout) as trip:
                        try:
                            await peer.fetch(PING_PATH, 1)
                        except UnknownPublisher:
                            pass  # a server without $ping: its refusal is the answer
                    if trip.cancelled_caught:
                        timed_out = True
                        break
                    elapsed = time.perf_counter() - started
                    trips.add(elapsed)
                    print(f"answer from {url}: seq={seq} time={_milliseconds(elapsed)}", flush=True)
        if connecting.cancelled_caught:
            return report(f"could not connect to {url} within {args.timeout:g} s", EXIT_CONNECTION)
    except OSError as exc:
        return report(f"cannot connect to {url}: {exc.strerror or exc}", EXIT_CONNECTION)
    except ValueError as exc:
        return report(str(exc), EXIT_USAGE)
    except SessionClosed as exc:
        return session_closed(exc)
    except (PublisherError, RStreamsError) as exc:
        return report(str(exc), EXIT_FAILURE)
    finally:
        if trips.times:
            print(f"--- {url}: {len(trips.times)} round trips ---\n{trips.summary()}", flush=True)
    if timed_out:
        return report(f"no answer from {url} within {args.timeout:g} s", EXIT_CONNECTION)
    return EXIT_OK


def run(args: argparse.Namespace) -> int:
    configure_logging(args.log_level)
    url = client_url(args.url)
    return run_command(lambda: _ping(url, args))
