"""The ``rstreams`` command line: ``serve``, ``sub``, ``pub`` and ``stats``, and each bridge's own.

Each command lives in its own module (``_serve``, ``_sub``, ``_pub``) with
its parser, its help and examples, and a ``run(args) -> exit status``; what
they share (exit codes, listeners, TLS, graceful shutdown) is in ``_common``.
Bridges add their commands (``rstreams emp ...``) and their ``serve``
options (``--emp HOST:PORT``) through the bridge registry
(:mod:`rstreams.support`); what their command-line modules need is exported
here, so that none of them reaches into this package's private modules.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from .._registry import registered_bridges
from .._version import __version__
from . import _pub, _serve, _stats, _sub
from ._common import (
    EXIT_CODES_HELP,
    EXIT_CONNECTION,
    EXIT_DECODE,
    EXIT_FAILURE,
    EXIT_GOODBYE,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    CommandError,
    HelpFormatter,
    add_log_level_argument,
    client_ssl_context,
    configure_logging,
    parse_address,
    run_command,
    warn,
)
from ._sub import FORMATS, DecodeError

__all__ = [
    "main",
    "build_parser",
    "EXIT_CODES_HELP",
    "EXIT_CONNECTION",
    "EXIT_DECODE",
    "EXIT_FAILURE",
    "EXIT_GOODBYE",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_USAGE",
    "FORMATS",
    "CommandError",
    "DecodeError",
    "HelpFormatter",
    "add_log_level_argument",
    "client_ssl_context",
    "configure_logging",
    "parse_address",
    "run_command",
    "warn",
]

DESCRIPTION = """\
Reactive Streams over the network, on trio: serve publishers, subscribe to
them, and publish standard input (wire profile v0 over tcp:// and tls://,
WebSocket, and every installed bridge's protocol).
"""

EPILOG = """\
examples:
  rstreams serve examples.demo:app --tcp 127.0.0.1:9000
  rstreams sub tcp://127.0.0.1:9000 'range?count=5' --format hex
  seq 10 | rstreams pub numbers --tcp 127.0.0.1:9001
  rstreams sub tcp://127.0.0.1:9001 numbers
  rstreams serve examples.demo:app --emp 127.0.0.1:7000
  rstreams sub emp://127.0.0.1:7000 'range?count=3' --format hex    # the same, over EMP
  rstreams stats tcp://127.0.0.1:9000                               # the server's statistics, live

Run `rstreams COMMAND --help` for each command's options and examples.

exit status: serve and pub exit 0 after a clean shutdown (Ctrl-C, SIGTERM),
1 when they cannot run, 2 on bad arguments; `rstreams sub --help` lists
the statuses of sub.
"""


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``rstreams`` command and its subcommands."""
    parser = argparse.ArgumentParser(
        prog="rstreams",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=HelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"rstreams {__version__}")
    subparsers = parser.add_subparsers(title="commands", metavar="COMMAND")
    _serve.add_parser(subparsers)
    _sub.add_parser(subparsers)
    _pub.add_parser(subparsers)
    _stats.add_parser(subparsers)
    for bridge in registered_bridges():
        if bridge.add_commands is not None:
            bridge.add_commands(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``rstreams`` command; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    run = getattr(args, "run", None)
    if run is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    try:
        status: int = run(args)
    except CommandError as exc:
        warn(exc.message)
        return exc.code
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    return status
