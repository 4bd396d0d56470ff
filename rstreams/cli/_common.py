"""What the commands share: help layout, exit codes, addresses, TLS, logging.

This module is imported whenever the ``rstreams`` command starts (for
``--version`` and ``--help`` too), so it imports the runtime, trio and
``ssl`` only inside the functions that use them: building the parser and
parsing arguments cost no more than argparse. Serving until a signal is
in ``_serving``.
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import re
import sys
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import ssl

    from .._config import SessionConfig

    from .._publish import Router
    from .._serve import Server

__all__ = [
    "EXIT_OK",
    "EXIT_FAILURE",
    "EXIT_USAGE",
    "EXIT_GOODBYE",
    "EXIT_CONNECTION",
    "EXIT_DECODE",
    "EXIT_TIMEOUT",
    "EXIT_INTERRUPTED",
    "EXIT_CODES_HELP",
    "COMMAND_SUMMARIES",
    "DEFAULT_MAX_CONNECTIONS",
    "CommandError",
    "HelpFormatter",
    "parse_address",
    "parse_origin",
    "add_log_level_argument",
    "add_server_arguments",
    "config_for_connection_memory",
    "parse_size",
    "positive_int",
    "positive_seconds",
    "pause_seconds",
    "add_tls_client_arguments",
    "tls_client_context",
    "add_timeout_argument",
    "DEFAULT_CLIENT_TIMEOUT",
    "server_from_arguments",
    "configure_logging",
    "client_ssl_context",
    "server_ssl_context",
    "server_token",
    "token_problem",
    "add_server_token_arguments",
    "SERVER_TOKEN_VARIABLE",
    "run_command",
    "warn",
]

EXIT_OK = 0
EXIT_FAILURE = 1  # sub: the publisher sent onError; serve/pub: could not run
EXIT_USAGE = 2  # bad arguments (argparse's own code)
EXIT_GOODBYE = 3  # sub: the session ended by goodbye (the server left)
EXIT_CONNECTION = 4  # sub: could not connect, or the connection was lost
EXIT_DECODE = 5  # sub: an element is not valid for --format msgpack/json
EXIT_TIMEOUT = 124  # sub: --timeout or --idle-timeout ran out (as timeout(1) reports it)
EXIT_INTERRUPTED = 130  # Ctrl-C (128 + SIGINT), as shells report it

EXIT_CODES_HELP = """\
exit status:
  0    the stream completed, --count elements arrived, or stdout was closed
  1    the publisher failed (onError, including "no such publisher")
  2    bad arguments
  3    the session ended with goodbye (for example the server shut down)
  4    could not connect, or the connection was lost without goodbye
  5    an element could not be decoded for --format msgpack or json
  124  --timeout or --idle-timeout ran out (the elements before it were printed)
  130  interrupted by Ctrl-C (143 for SIGTERM)
"""

#: Each command's line in ``rstreams --help``, here rather than in the
#: command's module so that the top-level help imports none of them.
COMMAND_SUMMARIES = {
    "demo": "serve the demo app over TCP and WebSocket, with its page",
    "serve": "serve an app's publishers",
    "sub": "print a publisher's elements",
    "ls": "list a server's publishers and topics",
    "ping": "measure round trips to a server",
    "completion": "print a bash or zsh completion script",
    "pub": "publish lines of stdin into a server's topic (or serve them: --serve)",
    "stats": "show a server's statistics, refreshed every second",
}

LOG_LEVELS = ("debug", "info", "warning", "error", "critical")
LOG_FORMATS = ("text", "json")


class CommandError(Exception):
    """A failure to report as ``rstreams: MESSAGE`` with an exit status."""

    def __init__(self, message: str, code: int = EXIT_FAILURE) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Keeps the line breaks of descriptions and of the "examples:" epilogs."""

    def __init__(self, prog: str) -> None:
        super().__init__(prog, max_help_position=32)


# Set by configure_logging(..., "json"): then warn() writes JSON lines too,
# so that stderr stays one JSON object per line.
_json_formatter: logging.Formatter | None = None


def warn(message: str) -> None:
    """Print ``rstreams: MESSAGE`` on stderr (a JSON object under ``--log-format json``)."""
    if _json_formatter is not None:
        record = logging.LogRecord("rstreams.cli", logging.WARNING, __file__, 0, message, None, None)
        print(_json_formatter.format(record), file=sys.stderr, flush=True)
        return
    print(f"rstreams: {message}", file=sys.stderr, flush=True)


def parse_address(text: str) -> tuple[str | None, int]:
    """``HOST:PORT`` (``[::1]:PORT`` for IPv6, ``:PORT`` for every interface)."""
    host, colon, port_text = text.rpartition(":")
    if not colon:
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {text!r}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    try:
        port = int(port_text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid port in {text!r}") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"port out of range in {text!r}")
    return (host or None), port


def positive_int(text: str) -> int:
    """An argument that must be an int >= 1 (``--count N``, ``--max-connections N``)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


_SIZE_UNITS = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3}
# Digits, then a unit (K, M or G, alone or followed by B or iB), B, or none.
_SIZE = re.compile(r"(?P<number>[0-9]+)(?:(?P<unit>[KMG])(?:i?B)?|B)?", re.IGNORECASE)


def parse_size(text: str) -> int:
    """A size in bytes: ``65536``, or with a binary suffix ``K``, ``M``, ``G``
    (``64M``, ``64MiB`` and ``64MB`` all mean 64 x 1024 x 1024)."""
    matched = _SIZE.fullmatch(text.strip())
    if matched is None:
        raise argparse.ArgumentTypeError(f"expected a size in bytes such as 65536, 64K, 64M or 1G, got {text!r}")
    value = int(matched["number"])
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive size, got {text!r}")
    return value * _SIZE_UNITS[(matched["unit"] or "").upper()]


def _connection_memory(text: str) -> int:
    size = parse_size(text)
    try:
        config_for_connection_memory(size)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return size


def config_for_connection_memory(size: int, **settings: Any) -> SessionConfig:
    """``SessionConfig.for_connection_memory``, its error in the flag's words."""
    from .._config import ConnectionMemoryTooSmall, SessionConfig

    try:
        return SessionConfig.for_connection_memory(size, **settings)
    except ConnectionMemoryTooSmall:
        raise ValueError(f"--max-connection-memory {size} is too small for one split part per half") from None


#: What ``--loopback-congestion-control`` takes to leave loopback connections
#: the host's congestion control (``loopback_congestion_control=None``).
HOST_CONGESTION_CONTROL = "host"


def _congestion_control(text: str) -> str | None:
    from .._loopback import check_congestion_control

    if text == HOST_CONGESTION_CONTROL:
        return None
    try:
        check_congestion_control(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a congestion control's name (reno, cubic, ...) or {HOST_CONGESTION_CONTROL}, got {text!r}"
        ) from None
    return text


def _seconds(text: str, *, positive: bool, finite: bool = True) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, got {text!r}") from None
    if not (0 < value if positive else 0 <= value) or (finite and not value < math.inf):  # also refuses nan
        raise argparse.ArgumentTypeError(f"expected seconds {'>' if positive else '>='} 0, got {text}")
    return value


def positive_seconds(text: str) -> float:
    """A time bound (``--timeout SECONDS``): seconds, more than 0 and finite
    (``0``, ``-1``, ``nan`` and ``inf`` are usage errors, exit status 2)."""
    return _seconds(text, positive=True)


def pause_seconds(text: str) -> float:
    """A pause (``--interval SECONDS``): seconds, 0 or more and finite."""
    return _seconds(text, positive=False)


def _non_negative_seconds(text: str) -> float:
    # (A server's --idle-timeout: inf is accepted as ever, as never.)
    return _seconds(text, positive=False, finite=False)


#: ``--max-connections`` when not given. Each session holds a socket (a file
#: descriptor) and up to its buffers' worth of memory; 1024 serves many more
#: clients than a demo or a small deployment has, while a flood of
#: connections is refused with goodbye long before it exhausts the process's
#: descriptors (often limited to 1024 soft, and raised with ``ulimit -n``:
#: past the limit, accepting backs off, see ``rstreams/_accept.py``).
DEFAULT_MAX_CONNECTIONS = 1024


def add_log_level_argument(parser: argparse.ArgumentParser) -> None:
    """``--log-level`` and ``--log-format``, for ``configure_logging``."""
    parser.add_argument(
        "--log-level",
        choices=LOG_LEVELS,
        default="warning",
        help="what the runtime logs on stderr (default: warning; info: sessions opened and closed, "
        "refusals, peers' bad input; debug: also each stream's subscribe, cancel and end)",
    )
    parser.add_argument(
        "--log-format",
        choices=LOG_FORMATS,
        default="text",
        help="text lines, or json: one JSON object per line with the record's fields "
        "(event, peer, transport, reason, ...) (default: text)",
    )


def add_server_arguments(parser: argparse.ArgumentParser, *, tcp_required: bool = True) -> None:
    """The listener, TLS and logging options of ``serve`` and ``pub``.

    ``tcp_required=False`` is for commands with other kinds of listener
    (``serve --ws``); they check that at least one listener was named.
    """
    from .._config import DEFAULT_CONFIG, DEFAULT_IDLE_TIMEOUT
    from .._loopback import DEFAULT_LOOPBACK_CONGESTION_CONTROL
    from ..protocol import DEFAULT_CONNECTION_MEMORY

    parser.add_argument(
        "--tcp",
        metavar="HOST:PORT",
        type=parse_address,
        action="append",
        required=tcp_required,
        default=None if tcp_required else [],
        help="listen on this address; repeat for several listeners (port 0: any free port)",
    )
    parser.add_argument("--tls-cert", metavar="FILE", help="serve TLS with this certificate chain (PEM)")
    parser.add_argument("--tls-key", metavar="FILE", help="the private key of --tls-cert (PEM; default: in the cert file)")
    parser.add_argument(
        "--tls-client-ca",
        metavar="FILE",
        help="mutual TLS: require every client to present a certificate signed by a CA in FILE (PEM); needs --tls-cert",
    )
    parser.add_argument(
        "--max-connections",
        metavar="N",
        type=positive_int,
        default=DEFAULT_MAX_CONNECTIONS,
        help="refuse connections beyond N open sessions (with goodbye \"server busy\"), once none is left in "
        f"its handshake to close for a newcomer (default: {DEFAULT_MAX_CONNECTIONS})",
    )
    parser.add_argument(
        "--max-connection-memory",
        metavar="SIZE",
        type=_connection_memory,
        default=DEFAULT_CONNECTION_MEMORY,
        help="the memory budget of each connection, every bridge's listeners included, in bytes or with a "
        "K, M or G suffix (powers of 1024): "
        "half for what the peer sent and is held, half for what is queued for it; a peer that sends "
        "more unfinished split elements than its half is closed with goodbye \"protocol error: memory "
        "budget exceeded: ...\"; below 64M the largest element and message accepted shrink to half of it "
        f"(default: {DEFAULT_CONNECTION_MEMORY // 1024**2}M; server memory stays under about "
        "--max-connections x this, plus a constant; docs/PROTOCOL.md section 5)",
    )
    parser.add_argument(
        "--idle-timeout",
        metavar="SECONDS",
        type=_non_negative_seconds,
        default=DEFAULT_IDLE_TIMEOUT,
        help="close a session whose peer sent nothing and that has no stream open for this long, "
        f"with goodbye \"idle timeout\" (default: {DEFAULT_IDLE_TIMEOUT:g}; 0: never); the bridges' "
        "listeners too, with their protocol's error, and also once a message begun stalls that long",
    )
    parser.add_argument(
        "--busy-poll",
        metavar="SECONDS",
        type=pause_seconds,
        default=DEFAULT_CONFIG.busy_poll,
        help="how long a session polls its socket for a request-response peer's next subscribe "
        f"before sleeping, while such subscribes come that quickly (plain TCP; default: {DEFAULT_CONFIG.busy_poll:g}; "
        "0: never, to spare the CPU)",
    )
    parser.add_argument(
        "--no-precise-timers",
        dest="precise_timers",
        action="store_false",
        help="keep trio's own timers, which wake up to a millisecond late: a publisher paced by "
        "trio.sleep then sends a millisecond's elements together, on one wake-up, instead of each on "
        "time on its own (Linux; spares CPU: at 10,000 elements a second, 40-55 instead of 80-85 "
        "microseconds of server CPU an element, measured on a 2-core VM)",
    )
    parser.add_argument(
        "--loopback-congestion-control",
        metavar="NAME",
        type=_congestion_control,
        default=DEFAULT_LOOPBACK_CONGESTION_CONTROL,
        help="the TCP congestion control of connections whose peer is on this machine's loopback, "
        "every bridge's listeners included (Linux; a host that paces, as BBR does, held large elements "
        f"to half speed over loopback; default: {DEFAULT_LOOPBACK_CONGESTION_CONTROL}; host: keep the "
        "host's choice; other addresses always keep it)",
    )
    parser.add_argument(
        "--metrics",
        metavar="HOST:PORT",
        type=parse_address,
        action="append",
        default=[],
        help="serve /healthz, /stats and /metrics (Prometheus) over HTTP on this address "
        "(a --ws listener answers them too); repeatable",
    )
    add_log_level_argument(parser)


def server_from_arguments(app: Router, args: argparse.Namespace) -> Server:
    """The ``Server`` that ``add_server_arguments``' options describe."""
    from .._serve import Server

    config = config_for_connection_memory(
        args.max_connection_memory,
        busy_poll=args.busy_poll,
        precise_timers=args.precise_timers,
        idle_timeout=args.idle_timeout or None,
        loopback_congestion_control=args.loopback_congestion_control,
    )
    token = server_token(args)
    authenticate = None
    if token is not None:
        from .._auth import static_token

        authenticate = static_token(token)
    return Server(app, max_connections=args.max_connections, config=config, authenticate=authenticate)


#: The environment variable that gives ``rstreams serve`` its token when
#: neither ``--token`` nor ``--token-file`` is given.
SERVER_TOKEN_VARIABLE = "RSTREAMS_SERVER_TOKEN"


def add_server_token_arguments(parser: argparse.ArgumentParser) -> None:
    """``--token`` / ``--token-file`` of ``serve`` (the one static token clients must present)."""
    group = parser.add_mutually_exclusive_group()
    group.add_argument(
        "--token",
        dest="server_token",
        metavar="TOKEN",
        help=f"admit only clients that present TOKEN (hello, or the WebSocket upgrade); default: ${SERVER_TOKEN_VARIABLE}. "
        "Others get goodbye \"authentication failed\"",
    )
    group.add_argument(
        "--token-file",
        dest="server_token_file",
        metavar="FILE",
        help="as --token, with the token read from FILE (its first line), out of the process list",
    )


def server_token(args: argparse.Namespace) -> str | None:
    """The token ``serve`` requires: ``--token``, ``--token-file``, ``$RSTREAMS_SERVER_TOKEN``, or None."""
    token: str | None = getattr(args, "server_token", None)
    path: str | None = getattr(args, "server_token_file", None)
    if path is not None:
        try:
            with open(path, encoding="utf-8") as file:
                token = file.readline().strip()
        except OSError as exc:
            raise CommandError(f"cannot read the token file {path!r}: {exc.strerror or exc}", EXIT_USAGE) from None
        except UnicodeDecodeError:
            raise CommandError(f"the token file {path!r} is not UTF-8 text", EXIT_USAGE) from None
        if not token:
            raise CommandError(f"the token file {path!r} is empty", EXIT_USAGE)
        where = f"the token file {path!r}"
    elif token is None and hasattr(args, "server_token"):
        token = os.environ.get(SERVER_TOKEN_VARIABLE, "").strip() or None
        where = f"${SERVER_TOKEN_VARIABLE}"
    else:
        where = "--token"
    if token is not None and not token:
        raise CommandError("--token must not be empty", EXIT_USAGE)
    if token is not None:
        # A token no client's hello can carry would refuse every client.
        problem = token_problem(token)
        if problem is not None:
            raise CommandError(f"{where}: {problem}", EXIT_USAGE)
    return token


def token_problem(token: str) -> str | None:
    """Why a hello cannot carry ``token``, or None: ``rstreams.protocol.Hello``'s
    own rule (UTF-8 text, which an argument or variable holding other bytes
    is not, of at most ``MAX_TOKEN_SIZE`` bytes), said before connecting or
    serving."""
    from ..protocol import LocalProtocolError, check_token

    try:
        check_token(token)
    except LocalProtocolError as exc:
        return str(exc)
    return None


def configure_logging(level: str, log_format: str = "text") -> None:
    """Log to stderr at ``level``, as text lines or (``json``) one JSON object per line."""
    global _json_formatter
    handler = logging.StreamHandler(sys.stderr)
    if log_format == "json":
        from .._logs import JsonFormatter

        _json_formatter = JsonFormatter()
        handler.setFormatter(_json_formatter)
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=getattr(logging, level.upper()), handlers=[handler])


def server_ssl_context(cert: str | None, key: str | None, client_ca: str | None = None) -> ssl.SSLContext | None:
    """The TLS context for ``--tls-cert`` / ``--tls-key`` (None: plain TCP),
    requiring client certificates signed by ``client_ca`` (``--tls-client-ca``) if given."""
    if cert is None:
        if key is not None:
            raise CommandError("--tls-key needs --tls-cert", EXIT_USAGE)
        if client_ca is not None:
            raise CommandError("--tls-client-ca needs --tls-cert (mutual TLS is TLS first)", EXIT_USAGE)
        return None
    import ssl

    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        context.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as exc:
        raise CommandError(f"cannot load the TLS certificate {cert!r}: {exc}", EXIT_USAGE) from None
    if client_ca is not None:
        try:
            context.load_verify_locations(cafile=client_ca)
        except (OSError, ssl.SSLError) as exc:
            raise CommandError(f"cannot load the client CA file {client_ca!r}: {exc}", EXIT_USAGE) from None
        context.verify_mode = ssl.CERT_REQUIRED
    return context


def client_ssl_context(
    secure: bool, ca: str | None, *, ca_hint: str, cert: str | None = None, key: str | None = None
) -> ssl.SSLContext | None:
    """A client's TLS context: None without TLS, else verifying against ``ca``
    (default: system roots), presenting ``cert`` / ``key`` (mutual TLS) if given.

    Raises:
        CommandError: ``ca`` or ``cert`` given without TLS (``ca_hint`` says
            so), ``key`` without ``cert``, or a file that cannot be loaded
            (exit status 2).
    """
    if key is not None and cert is None:
        raise CommandError("--key needs --cert", EXIT_USAGE)
    if not secure:
        if ca is not None:
            raise CommandError(ca_hint, EXIT_USAGE)
        if cert is not None:
            raise CommandError(ca_hint.replace("--ca", "--cert", 1), EXIT_USAGE)
        return None
    import ssl

    try:
        context = ssl.create_default_context(cafile=ca)
    except (OSError, ssl.SSLError) as exc:
        raise CommandError(f"cannot load the CA file {ca!r}: {exc}", EXIT_USAGE) from None
    if cert is not None:
        try:
            context.load_cert_chain(cert, key)
        except (OSError, ssl.SSLError) as exc:
            raise CommandError(f"cannot load the client certificate {cert!r}: {exc}", EXIT_USAGE) from None
    return context


#: How long a bridge's client command waits for its peer by default (``--timeout``).
DEFAULT_CLIENT_TIMEOUT = 10.0


def add_tls_client_arguments(parser: argparse.ArgumentParser, *, tls_help: str = "connect with TLS") -> None:
    """A bridge client command's ``--tls`` and ``--ca FILE`` (its address is
    ``HOST:PORT``, not a URL whose scheme says TLS); read back with
    :func:`tls_client_context`."""
    parser.add_argument("--tls", action="store_true", help=tls_help)
    parser.add_argument("--ca", metavar="FILE", help="with --tls: trust this CA (PEM) instead of the system's")


def tls_client_context(args: argparse.Namespace) -> ssl.SSLContext | None:
    """The TLS context ``--tls`` and ``--ca`` ask for (None without ``--tls``).

    Raises:
        CommandError: ``--ca`` without ``--tls``, or a CA file that cannot
            be loaded (exit status 2).
    """
    return client_ssl_context(args.tls, args.ca, ca_hint="--ca needs --tls")


def add_timeout_argument(parser: argparse.ArgumentParser, *, what: str = "give up after this long") -> None:
    """A bridge client command's ``--timeout SECONDS`` (default
    :data:`DEFAULT_CLIENT_TIMEOUT`), a finite number of seconds above 0;
    ``what`` says what it bounds."""
    parser.add_argument(
        "--timeout",
        metavar="SECONDS",
        type=positive_seconds,
        default=DEFAULT_CLIENT_TIMEOUT,
        help=f"{what} (default: {DEFAULT_CLIENT_TIMEOUT:g})",
    )


def parse_origin(text: str) -> str:
    """An ``--allow-origin`` value: ``scheme://host[:port]``, or ``*`` for any."""
    from .._http import normalize_origin

    if text != "*" and normalize_origin(text) is None:
        raise argparse.ArgumentTypeError(f"expected an origin such as http://localhost:8000, got {text!r}")
    return text


def _sole_error(error: BaseException) -> BaseException:
    # Nurseries wrap what escapes them in groups; a command reports the one
    # error inside when there is exactly one.
    while isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
        error = error.exceptions[0]
    return error


def run_command(
    function: Callable[[], Awaitable[int]],
    *,
    precise_timers: bool = True,
    error_status: Callable[[BaseException], tuple[int, str] | None] | None = None,
    too_slow: str | None = None,
) -> int:
    """Run a command under trio, with timers that wake to the microsecond
    (:func:`rstreams.run`: a publisher of ``rstreams serve`` paced by
    ``trio.sleep_until`` sends on time) unless ``precise_timers`` is False
    (a server's ``--no-precise-timers``); report a CommandError as
    ``rstreams: ...``.

    A client command also names how its other failures end it, so that no
    command writes out the same translation:

    Args:
        error_status: the exit status and message for an error that ended
            the command (a bridge's ``error_status``; None: not one of its
            errors, which then propagates).
        too_slow: the message for a ``trio.TooSlowError`` (the command's
            ``--timeout`` passed), which exits with ``EXIT_CONNECTION``.
    """
    import trio

    from .._timers import run

    try:
        return run(function) if precise_timers else trio.run(function)
    except BaseException as exc:  # noqa: BLE001 - sorted out just below
        error = _sole_error(exc)
        if isinstance(error, CommandError):
            warn(error.message)
            return error.code
        if isinstance(error, KeyboardInterrupt):
            # Only before the signal handlers are in place (while starting).
            return EXIT_INTERRUPTED
        status: tuple[int, str] | None = None
        if too_slow is not None and isinstance(error, trio.TooSlowError):
            status = EXIT_CONNECTION, too_slow
        elif error_status is not None and isinstance(error, Exception):
            status = error_status(error)
        if status is None:
            raise
        warn(status[1])
        return status[0]
