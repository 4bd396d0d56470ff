"""``rstreams serve MODULE:APP``: serve an app's publishers until Ctrl-C."""

from __future__ import annotations

import argparse
import importlib
import math
import os
import sys
from typing import Any

from .._publish import Router
from .._registry import ServeContext, registered_bridges
from ._common import (
    COMMAND_SUMMARIES,
    EXIT_USAGE,
    CommandError,
    HelpFormatter,
    add_server_arguments,
    add_server_token_arguments,
    configure_logging,
    parse_address,
    parse_origin,
    run_command,
    server_from_arguments,
    server_ssl_context,
    warn,
)
from ._serving import serve_until_stopped

__all__ = ["add_parser", "load_app", "static_directory"]

DESCRIPTION = """\
Serve the publishers of an rstreams.Router over TCP (or TLS), WebSocket, or both.

MODULE:APP names the router: APP is an attribute of the module MODULE (dots
reach further: pkg.mod:obj.app). As with uvicorn, --app-dir (default: the
current directory) goes first on sys.path, so apps next to you are found.

Once every listener is up, one line per listener goes to stdout:
  rstreams: serving MODULE:APP on tcp://HOST:PORT
  rstreams: serving MODULE:APP on ws://HOST:PORT/
A --ws listener accepts WebSocket sessions at / (subprotocol rstreams.v0) and
serves the browser client to browsers on the same port: GET / (index.html),
GET /rstreams.js and the other files of the package's rstreams/web. Browser
pages from another origin than the listener's own are refused (HTTP 403)
unless allowed with --allow-origin. With --static-dir DIR the --ws listeners
serve your own pages instead (the files directly in DIR; GET / is
DIR/index.html) at their own origin, so they may connect without
--allow-origin, and import the client from /rstreams.js (the package's,
unless DIR has its own). Nothing outside DIR is served. With --tls-cert every listener uses TLS
(tls://, wss://).
Ctrl-C or SIGTERM stops accepting, says goodbye to every session (queued
elements drain first, within bounds), prints "rstreams: shut down" and exits
with status 0; a second Ctrl-C closes the remaining sessions at once (130).
"""

EPILOG = """\
examples:
  rstreams serve rstreams.demo:app --tcp 127.0.0.1:9000
  rstreams serve rstreams.demo:app --tcp 127.0.0.1:0            # any free port
  rstreams serve myapp:app --tcp 0.0.0.0:9000 --tcp [::]:9000   # two listeners
  rstreams serve myapp:app --app-dir src --tcp 127.0.0.1:9000
  rstreams serve rstreams.demo:app --tcp 127.0.0.1:9443 \\
      --tls-cert server.pem --tls-key server-key.pem           # tls://
  rstreams serve rstreams.demo:app --ws 127.0.0.1:8000          # ws://, and the page at http://127.0.0.1:8000/
  rstreams serve rstreams.demo:app --tcp 127.0.0.1:9000 --ws 127.0.0.1:8000
  rstreams serve rstreams.demo:app --ws 0.0.0.0:8000 --allow-origin http://myhost:8000
  rstreams serve myapp:app --ws 127.0.0.1:8000 --static-dir pages  # your pages at http://127.0.0.1:8000/
  rstreams serve rstreams.demo:app --emp 127.0.0.1:7000         # over EMP (docs/bridges/emp.md)
  rstreams serve rstreams.demo:app --tcp 127.0.0.1:9000 --metrics 127.0.0.1:9100 --log-level info
  rstreams serve rstreams.demo:app --tcp 127.0.0.1:9000 --max-connection-memory 16M  # a smaller budget per session
"""


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "serve",
        help=COMMAND_SUMMARIES["serve"],
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=HelpFormatter,
    )
    parser.add_argument("app", metavar="MODULE:APP", help="the rstreams.Router to serve, e.g. rstreams.demo:app")
    add_server_arguments(parser, tcp_required=False)
    add_server_token_arguments(parser)
    parser.add_argument(
        "--ws",
        metavar="HOST:PORT",
        type=parse_address,
        action="append",
        default=[],
        help="serve WebSocket (and the browser client) on this address; repeatable",
    )
    parser.add_argument(
        "--allow-origin",
        metavar="ORIGIN",
        type=parse_origin,
        action="append",
        default=[],
        help="also accept WebSocket upgrades from browser pages of ORIGIN "
        "(scheme://host:port; * for any); repeatable",
    )
    parser.add_argument(
        "--static-dir",
        metavar="DIR",
        default=None,
        help="serve the files directly in DIR on the --ws listeners instead of the "
        "package's pages (the client's modules, /rstreams.js and its imports, stay served)",
    )
    parser.add_argument(
        "--app-dir",
        metavar="DIR",
        default=".",
        help="put DIR first on sys.path before importing MODULE (default: .)",
    )
    # The bridges' options (--emp HOST:PORT, ...), from the bridge registry.
    for bridge in registered_bridges():
        if bridge.add_serve_arguments is not None:
            bridge.add_serve_arguments(parser)
    parser.set_defaults(run=run)
    return parser


def load_app(spec: str, app_dir: str = ".") -> Router:
    """Import ``MODULE:APP`` with ``app_dir`` first on ``sys.path``.

    Raises:
        CommandError: a malformed spec, a missing module or attribute, or an
            object that is not a Router (exit status 2).
    """
    module_name, colon, attribute = spec.partition(":")
    if not colon or not module_name or not attribute:
        raise CommandError(f"expected MODULE:APP, got {spec!r}", EXIT_USAGE)
    directory = os.path.abspath(app_dir)
    if sys.path[:1] != [directory]:
        sys.path.insert(0, directory)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        # Only the module we were asked for (or a parent package) missing is a
        # usage error; a missing import inside the app is the app's bug.
        if exc.name is None or not (module_name == exc.name or module_name.startswith(exc.name + ".")):
            raise
        raise CommandError(f"cannot import module {module_name!r} (looked in {directory} first): {exc}", EXIT_USAGE) from None
    app: object = module
    for part in attribute.split("."):
        try:
            app = getattr(app, part)
        except AttributeError:
            raise CommandError(f"module {module_name!r} has no attribute {attribute!r}", EXIT_USAGE) from None
    if not isinstance(app, Router):
        raise CommandError(f"{spec} is a {type(app).__name__}, not an rstreams.Router", EXIT_USAGE)
    return app


def static_directory(path: str | None, websocket: bool) -> str | None:
    """Check ``--static-dir`` before anything listens.

    Raises:
        CommandError: without a --ws listener, or not a directory (status 2).
    """
    if path is None:
        return None
    if not websocket:
        raise CommandError("--static-dir is for --ws listeners", EXIT_USAGE)
    if not os.path.isdir(path):
        what = "does not exist" if not os.path.exists(path) else "is not a directory"
        raise CommandError(f"--static-dir {path}: {what}", EXIT_USAGE)
    return os.path.abspath(path)


def run(args: argparse.Namespace) -> int:
    configure_logging(args.log_level, args.log_format)
    if args.allow_origin and not args.ws:
        raise CommandError("--allow-origin is for --ws listeners", EXIT_USAGE)
    static_dir = static_directory(args.static_dir, bool(args.ws))
    app = load_app(args.app, args.app_dir)
    ssl_context = server_ssl_context(args.tls_cert, args.tls_key, args.tls_client_ca)
    context = ServeContext(
        app=app,
        ssl_context=ssl_context,
        max_connections=args.max_connections,
        label=args.app,
        max_connection_memory=args.max_connection_memory,
        loopback_congestion_control=args.loopback_congestion_control,
        # (0 and inf: never, as for the sessions.)
        idle_timeout=args.idle_timeout if args.idle_timeout and math.isfinite(args.idle_timeout) else None,
    )
    services_by_bridge = {
        bridge.name: list(bridge.services(context, args)) for bridge in registered_bridges() if bridge.services is not None
    }
    services = [service for bridge_services in services_by_bridge.values() for service in bridge_services]
    if not args.tcp and not args.ws and not services:
        bridges = [f"--{bridge.name} HOST:PORT" for bridge in registered_bridges() if bridge.add_serve_arguments is not None]
        options = ["--tcp HOST:PORT", "--ws HOST:PORT", *bridges]
        options_text = ", ".join(options[:-1]) + " or " + options[-1]
        raise CommandError(f"name at least one listener: {options_text}", EXIT_USAGE)
    server = server_from_arguments(app, args)
    if server.config.authenticate is not None and services and args.tls_client_ca is None:
        # Their protocols carry no credential (docs/bridges/README.md).
        names = ", ".join(name for name, found in services_by_bridge.items() if found)
        warn(f"--token does not cover the bridges' listeners ({names}): their protocols carry no token; "
             "use --tls-client-ca to require client certificates on every listener")
    for name, bridge_services in services_by_bridge.items():
        if bridge_services:
            server.add_bridge_services(name, bridge_services)

    async def serve() -> int:
        return await serve_until_stopped(
            server,
            args.tcp or [],
            ssl_context,
            args.app,
            websocket_addresses=args.ws or [],
            allowed_origins=args.allow_origin or [],
            static_dir=static_dir,
            services=services,
            metrics_addresses=args.metrics,
        )

    return run_command(serve, precise_timers=args.precise_timers)
