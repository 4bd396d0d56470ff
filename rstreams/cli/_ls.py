"""``rstreams ls URL``: list the publishers and topics a server serves.

It reads the reserved publisher ``$publishers`` that every router serves (one
JSON record per route: name, kind, element size) and prints one line per
route as the records arrive. Names starting with ``$`` are the runtime's
own; no app can serve one, so what is listed is what the app registered.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import trio

from .._connect import connect
from .._errors import PublisherError, RStreamsError, SessionClosed, UnknownPublisher
from .._publish import PUBLISHERS_PATH
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
    run_command,
)

__all__ = ["add_parser"]

DESCRIPTION = f"""\
List the publishers and topics of the server at URL, one per line:

  NAME          KIND
  chat          topic                 subscribe to it: rstreams sub URL chat
  chat/publish  topic publishing      publish into it: rstreams pub URL chat
  range         publisher

URL is tcp://HOST:PORT, tls://HOST:PORT, ws://HOST:PORT/, wss://HOST:PORT/
or a bridge's URL (default: $RSTREAMS_URL). The list is what the server's
reserved publisher {PUBLISHERS_PATH} answers, one JSON record per route;
--format jsonl prints those records as they are. A publisher's name takes
a query the list cannot show (range?count=5): the publisher's own
documentation says which.

exit status: 0 listed, 1 the server does not list its publishers, 2 bad
arguments, 3 the server said goodbye, 4 could not connect or the connection
was lost.
"""

EPILOG = """\
examples:
  rstreams ls tcp://127.0.0.1:9000
  rstreams ls ws://127.0.0.1:8000/ --format jsonl
  RSTREAMS_URL=tcp://127.0.0.1:9000 rstreams ls
  rstreams ls emp://127.0.0.1:7000                           # over a bridge too
"""


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "ls",
        help=COMMAND_SUMMARIES["ls"],
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=HelpFormatter,
    )
    parser.add_argument("url", metavar="URL", nargs="?", help=URL_HELP)
    parser.add_argument("--format", choices=("text", "jsonl"), default="text", help="text lines (default), or the JSON records")
    add_ca_argument(parser)
    add_log_level_argument(parser)
    parser.set_defaults(run=run)
    return parser


def _line(record: dict[str, Any], width: int) -> str:
    name, kind = str(record.get("name")), str(record.get("kind", "publisher"))
    return f"{name:<{width}}  {kind}".rstrip()


async def _list(url: str, args: argparse.Namespace) -> int:
    ssl_context = client_ssl(url, args.ca, args.cert, args.key)
    try:
        async with connect(url, ssl_context=ssl_context, token=client_token(args)) as peer:
            # The whole list, then the lines, so that the names line up;
            # --format jsonl prints each record as it comes.
            records: list[dict[str, Any]] = []
            async with peer.subscribe(PUBLISHERS_PATH, codec="json") as listing:
                async for record in listing:
                    if args.format == "jsonl":
                        print(json.dumps(record, ensure_ascii=False), flush=True)
                    else:
                        records.append(record)
            if records:
                width = max(len(str(record.get("name"))) for record in records)
                sys.stdout.write("".join(_line(record, width) + "\n" for record in records))
                sys.stdout.flush()
    except OSError as exc:
        return report(f"cannot connect to {url}: {exc.strerror or exc}", EXIT_CONNECTION)
    except ValueError as exc:
        return report(str(exc), EXIT_USAGE)
    except UnknownPublisher:
        return report(f"the server at {url} does not list its publishers (it serves no {PUBLISHERS_PATH})", EXIT_FAILURE)
    except SessionClosed as exc:
        return session_closed(exc)
    except (PublisherError, RStreamsError) as exc:
        return report(str(exc), EXIT_FAILURE)
    except trio.BrokenResourceError:  # a bridge's connection lost
        return report(f"connection lost: {url}", EXIT_CONNECTION)
    return EXIT_OK


def run(args: argparse.Namespace) -> int:
    configure_logging(args.log_level)
    url = client_url(args.url)
    return run_command(lambda: _list(url, args))
