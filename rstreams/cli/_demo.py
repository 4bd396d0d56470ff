"""``rstreams demo``: the demo app over TCP and WebSocket, with its page, in one command.

The first thing a new user runs after ``pip install rstreams``: it needs no
checkout and no MODULE:APP (the app ships as :mod:`rstreams.demo`), and it
ends by printing the page's ``http://`` URL, the one line worth clicking.
It is ``rstreams serve rstreams.demo:app --tcp ... --ws ...`` with defaults,
so it shuts down the same way.
"""

from __future__ import annotations

import argparse
from typing import Any

from ._common import (
    COMMAND_SUMMARIES,
    HelpFormatter,
    add_log_level_argument,
    configure_logging,
    parse_address,
    run_command,
)
from ._serving import serve_until_stopped

__all__ = ["add_parser", "page_url"]

#: The app the command serves, as ``rstreams serve`` would name it.
DEMO_APP = "rstreams.demo:app"
DEFAULT_TCP = "127.0.0.1:9000"
DEFAULT_WS = "127.0.0.1:8000"

DESCRIPTION = f"""\
Serve the demo app ({DEMO_APP}) over TCP and WebSocket, with the demo
page and the browser client on the WebSocket port; no checkout needed.

Once both listen it prints:
  rstreams: serving {DEMO_APP} on tcp://127.0.0.1:9000
  rstreams: serving {DEMO_APP} on ws://127.0.0.1:8000/
  rstreams: open http://127.0.0.1:8000/ in a browser for the demo page

Publishers: range?count=N, blob?count=N&size=S, ticker?interval=SECONDS,
fail?after=N, echo?source=NAME, and the topics chat and sensors (see
`python -c 'import rstreams.demo; help(rstreams.demo)'`).
Ctrl-C or SIGTERM shut it down gracefully, as for `rstreams serve`; for TLS,
other listeners or more options, run `rstreams serve {DEMO_APP} ...`.
"""

EPILOG = f"""\
examples:
  rstreams demo                                  # tcp://127.0.0.1:9000 and ws://127.0.0.1:8000/
  rstreams sub tcp://127.0.0.1:9000 'range?count=5' --format hex     # in another shell
  rstreams sub ws://127.0.0.1:8000/ 'ticker?interval=0.5' --format msgpack --count 5
  rstreams demo --tcp 127.0.0.1:0 --ws 127.0.0.1:0                   # any free ports
  rstreams serve {DEMO_APP} --tcp 127.0.0.1:9443 --tls-cert cert.pem --tls-key key.pem   # tls://
"""


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "demo",
        help=COMMAND_SUMMARIES["demo"],
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=HelpFormatter,
    )
    parser.add_argument(
        "--tcp",
        metavar="HOST:PORT",
        type=parse_address,
        default=parse_address(DEFAULT_TCP),
        help=f"the TCP listener's address (default: {DEFAULT_TCP}; port 0: any free port)",
    )
    parser.add_argument(
        "--ws",
        metavar="HOST:PORT",
        type=parse_address,
        default=parse_address(DEFAULT_WS),
        help=f"the WebSocket listener's address, which also serves the page (default: {DEFAULT_WS})",
    )
    add_log_level_argument(parser)
    parser.set_defaults(run=run)
    return parser


def page_url(websocket_url: str) -> str:
    """The demo page's ``http://`` URL for a ``ws://`` listener URL (``https://`` for ``wss://``)."""
    scheme, separator, rest = websocket_url.partition("://")
    return ("https" if scheme == "wss" else "http") + separator + rest


def _print_page_url(urls: list[str]) -> None:
    for url in urls:
        if url.startswith(("ws://", "wss://")):
            print(f"rstreams: open {page_url(url)} in a browser for the demo page", flush=True)


def run(args: argparse.Namespace) -> int:
    configure_logging(args.log_level)
    # Imported here, not at the top: only this command needs the demo's
    # publishers (and the precomputed blocks they build on import).
    from .._serve import Server
    from ..demo import app

    server = Server(app)

    async def serve() -> int:
        return await serve_until_stopped(
            server,
            [args.tcp],
            None,
            DEMO_APP,
            websocket_addresses=[args.ws],
            on_serving=_print_page_url,
            # A port already taken is the likely failure of a command run
            # with default addresses: say how to pick others.
            listen_hint="choose other addresses with --tcp and --ws (port 0: any free port)",
        )

    return run_command(serve)
