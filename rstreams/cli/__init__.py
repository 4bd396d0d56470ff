"""The ``rstreams`` command line: ``demo``, ``serve``, ``sub``, ``pub``, ``stats``, ``ls`` and ``ping``, and each bridge's own.

Each command lives in its own module (``_demo``, ``_serve``, ``_sub``,
``_pub``, ``_ls``, ``_ping``) with its parser, its help and examples, and a ``run(args) -> exit
status``; what they share (exit codes, addresses, TLS) is in ``_common``,
serving until a signal in ``_serving``, ``sub``'s formats in ``_formats``,
what the client commands share (URL, errors, ``--json``) in ``_client``.
Bridges add their commands (``rstreams emp ...``) and their ``serve``
options (``--emp HOST:PORT``) through the bridge registry
(:mod:`rstreams.support`); what their command-line modules need is exported
here, so that none of them reaches into this package's private modules.

Start-up stays cheap: :func:`main` imports only the module of the command
being run, and loads the bridges only when the command line needs them (their
commands, ``serve``'s options, ``--help``); ``rstreams --version`` imports
neither trio nor any bridge. The other commands appear in the parser as
stubs carrying their one-line summary.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import importlib
from types import ModuleType

from .._version import __version__
from ._common import (
    COMMAND_SUMMARIES,
    EXIT_CODES_HELP,
    EXIT_CONNECTION,
    EXIT_DECODE,
    EXIT_FAILURE,
    EXIT_GOODBYE,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_TIMEOUT,
    EXIT_USAGE,
    DEFAULT_CLIENT_TIMEOUT,
    CommandError,
    HelpFormatter,
    add_log_level_argument,
    add_timeout_argument,
    add_tls_client_arguments,
    client_ssl_context,
    configure_logging,
    parse_address,
    positive_seconds,
    run_command,
    tls_client_context,
    warn,
)
from ._formats import FORMATS, DecodeError

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
    "EXIT_TIMEOUT",
    "EXIT_USAGE",
    "FORMATS",
    "DEFAULT_CLIENT_TIMEOUT",
    "CommandError",
    "DecodeError",
    "HelpFormatter",
    "add_log_level_argument",
    "add_timeout_argument",
    "add_tls_client_arguments",
    "client_ssl_context",
    "configure_logging",
    "parse_address",
    "positive_seconds",
    "run_command",
    "tls_client_context",
    "warn",
]

DESCRIPTION = """\
Reactive Streams over the network, on trio: serve publishers, subscribe to
them, publish standard input into them, list them and ping a server (wire
profile v0 over tcp://, tls://, ws:// and wss://, and every installed
bridge's protocol).
"""

EPILOG = """\
examples:
  rstreams demo                                                  # the demo app on tcp://127.0.0.1:9000 and ws://127.0.0.1:8000/
  rstreams sub tcp://127.0.0.1:9000 'range?count=5' --format hex
  rstreams sub ws://127.0.0.1:8000/ 'range?count=5' --format hex
  rstreams serve rstreams.demo:app --tcp 127.0.0.1:9000          # any app: MODULE:APP
  seq 3 | rstreams pub tcp://127.0.0.1:9000 chat                # stdin lines into the demo's topic chat
  rstreams ls tcp://127.0.0.1:9000                               # its publishers and topics
  rstreams ping tcp://127.0.0.1:9000 --count 3
  seq 10 | rstreams pub --serve numbers --tcp 127.0.0.1:9001
  rstreams sub tcp://127.0.0.1:9001 numbers
  rstreams serve rstreams.demo:app --emp 127.0.0.1:7000
  rstreams sub emp://127.0.0.1:7000 'range?count=3' --format hex    # the same, over EMP
  rstreams stats tcp://127.0.0.1:9000                               # the server's statistics, live

Run `rstreams COMMAND --help` for each command's options and examples.

exit status: serve and pub --serve exit 0 after a clean shutdown (Ctrl-C,
SIGTERM), 1 when they cannot run, 2 on bad arguments; `rstreams sub --help`
lists the statuses of sub, and the client commands (pub, ls, ping) use the
same ones.
"""


#: The runtime's own commands and the modules that implement them.
COMMAND_MODULES = {
    "demo": "._demo",
    "serve": "._serve",
    "sub": "._sub",
    "pub": "._pub",
    "ls": "._ls",
    "ping": "._ping",
    "completion": "._completion",
    "stats": "._stats",
}


def _command_module(name: str) -> ModuleType:
    return importlib.import_module(COMMAND_MODULES[name], __name__)


def build_parser(command: str | None = None, *, bridges: bool = True) -> argparse.ArgumentParser:
    """The argument parser of the ``rstreams`` command and its subcommands.

    Args:
        command: build only this command's parser in full (the others are
            stubs with their summary, enough for ``rstreams --help``; ``""``
            builds none in full); None builds every one.
        bridges: add the bridges' commands (loads every registered bridge).
    """
    parser = argparse.ArgumentParser(
        prog="rstreams",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=HelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"rstreams {__version__}")
    subparsers = parser.add_subparsers(title="commands", metavar="COMMAND")
    for name in COMMAND_MODULES:
        if command is None or command == name:
            _command_module(name).add_parser(subparsers)
        else:
            subparsers.add_parser(name, help=COMMAND_SUMMARIES[name])
    if bridges:
        from .._registry import registered_bridges

        for bridge in registered_bridges():
            if bridge.add_commands is not None:
                bridge.add_commands(subparsers)
    return parser


def _parser_for(arguments: Sequence[str]) -> argparse.ArgumentParser:
    # What the command line needs built: the module of the command named,
    # none for anything else, and the bridges only where they can show (their
    # own commands, the top-level help, an unknown command's error listing
    # every command). The top-level parser has no option that takes a value,
    # so the command is the first argument that is not an option.
    command = next((argument for argument in arguments if not argument.startswith("-")), None)
    options = arguments if command is None else arguments[: arguments.index(command)]
    top_level_only = any(option in ("-h", "--help", "--version") for option in options)
    if command in COMMAND_MODULES and not top_level_only:
        return build_parser(command, bridges=False)
    version_only = "--version" in options and not any(option in ("-h", "--help") for option in options)
    return build_parser("", bridges=not version_only)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``rstreams`` command; returns the exit status."""
    arguments = list(sys.argv[1:] if argv is None else argv)
    parser = _parser_for(arguments)
    args = parser.parse_args(arguments)
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
