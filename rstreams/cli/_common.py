"""What the commands share: help layout, exit codes, addresses, TLS, logging,
and serving until a signal.

A server command (``serve``, ``pub``) runs in three nested lifetimes, so that
stopping is graceful::

    sessions nursery             per-connection sessions live here
        listeners nursery        accept loops; cancelled first on shutdown
    then: Server.aclose()        goodbye to every session, bounded drain
    then: cancel the sessions nursery (a no-op unless something overran)

The connection handlers run in the sessions nursery rather than inside the
accept loops: cancelling the accept loops then stops accepting without
touching the sessions, which get their goodbye from ``Server.aclose``.
"""

from __future__ import annotations

import argparse
import logging
import signal
import ssl
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from functools import partial

import trio

from .._config import DEFAULT_CONFIG, SessionConfig
from .._http import normalize_origin
from .._logs import JsonFormatter
from .._publish import Router
from .._registry import BridgeService
from .._serve import Listener, Server, listener_url

__all__ = [
    "EXIT_OK",
    "EXIT_FAILURE",
    "EXIT_USAGE",
    "EXIT_GOODBYE",
    "EXIT_CONNECTION",
    "EXIT_DECODE",
    "EXIT_INTERRUPTED",
    "EXIT_CODES_HELP",
    "CommandError",
    "HelpFormatter",
    "parse_address",
    "parse_origin",
    "add_log_level_argument",
    "add_server_arguments",
    "server_from_arguments",
    "configure_logging",
    "client_ssl_context",
    "server_ssl_context",
    "serve_until_stopped",
    "run_command",
    "warn",
]

EXIT_OK = 0
EXIT_FAILURE = 1  # sub: the publisher sent onError; serve/pub: could not run
EXIT_USAGE = 2  # bad arguments (argparse's own code)
EXIT_GOODBYE = 3  # sub: the session ended by goodbye (the server left)
EXIT_CONNECTION = 4  # sub: could not connect, or the connection was lost
EXIT_DECODE = 5  # sub: an element is not valid for --format msgpack/json
EXIT_INTERRUPTED = 130  # Ctrl-C (128 + SIGINT), as shells report it

EXIT_CODES_HELP = """\
exit status:
  0    the stream completed, --count elements arrived, or stdout was closed
  1    the publisher failed (onError, including "no such publisher")
  2    bad arguments
  3    the session ended with goodbye (for example the server shut down)
  4    could not connect, or the connection was lost without goodbye
  5    an element could not be decoded for --format msgpack or json
  130  interrupted by Ctrl-C (143 for SIGTERM)
"""

#: How long a graceful shutdown may take before the remaining sessions are
#: closed forcefully: a session's own bounds are a 5 s drain, a 5 s wait for
#: the peer's goodbye and 1 s to close the transport (SessionConfig defaults).
SHUTDOWN_TIMEOUT = 15.0

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
_json_formatter: JsonFormatter | None = None


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


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def _non_negative_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, got {text!r}") from None
    if not value >= 0:  # also refuses nan
        raise argparse.ArgumentTypeError(f"expected seconds >= 0, got {text}")
    return value


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
        "--max-connections",
        metavar="N",
        type=_positive_int,
        help="refuse connections beyond N open sessions (with goodbye \"server busy\")",
    )
    parser.add_argument(
        "--busy-poll",
        metavar="SECONDS",
        type=_non_negative_seconds,
        default=DEFAULT_CONFIG.busy_poll,
        help="how long a session polls its socket for a request-response peer's next subscribe "
        f"before sleeping, while such subscribes come that quickly (plain TCP; default: {DEFAULT_CONFIG.busy_poll:g}; "
        "0: never, to spare the CPU)",
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
    return Server(app, max_connections=args.max_connections, config=SessionConfig(busy_poll=args.busy_poll))


def configure_logging(level: str, log_format: str = "text") -> None:
    """Log to stderr at ``level``, as text lines or (``json``) one JSON object per line."""
    global _json_formatter
    handler = logging.StreamHandler(sys.stderr)
    if log_format == "json":
        _json_formatter = JsonFormatter()
        handler.setFormatter(_json_formatter)
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=getattr(logging, level.upper()), handlers=[handler])


def server_ssl_context(cert: str | None, key: str | None) -> ssl.SSLContext | None:
    """The TLS context for ``--tls-cert`` / ``--tls-key`` (None: plain TCP)."""
    if cert is None:
        if key is not None:
            raise CommandError("--tls-key needs --tls-cert", EXIT_USAGE)
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        context.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as exc:
        raise CommandError(f"cannot load the TLS certificate {cert!r}: {exc}", EXIT_USAGE) from None
    return context


def client_ssl_context(secure: bool, ca: str | None, *, ca_hint: str) -> ssl.SSLContext | None:
    """A client's TLS context: None without TLS, else verifying against ``ca`` (default: system roots).

    Raises:
        CommandError: ``ca`` given without TLS (``ca_hint`` says so), or a CA
            file that cannot be loaded (exit status 2).
    """
    if not secure:
        if ca is not None:
            raise CommandError(ca_hint, EXIT_USAGE)
        return None
    try:
        return ssl.create_default_context(cafile=ca)
    except (OSError, ssl.SSLError) as exc:
        raise CommandError(f"cannot load the CA file {ca!r}: {exc}", EXIT_USAGE) from None


def parse_origin(text: str) -> str:
    """An ``--allow-origin`` value: ``scheme://host[:port]``, or ``*`` for any."""
    if text != "*" and normalize_origin(text) is None:
        raise argparse.ArgumentTypeError(f"expected an origin such as http://localhost:8000, got {text!r}")
    return text


def _listener_url(listener: Listener, secure: bool, websocket: bool = False) -> str:
    if websocket:
        return listener_url(listener, "wss" if secure else "ws", "/")
    return listener_url(listener, "tls" if secure else "tcp")


def _format_address(host: str | None, port: int) -> str:
    if host is None:
        return f"*:{port}"
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


async def _listen(nursery: trio.Nursery, serve: Callable[..., Awaitable[object]], host: str | None, port: int) -> list[Listener]:
    """Start one listener task; an address that cannot be listened on is a CommandError."""
    try:
        listeners: list[Listener] = await nursery.start(serve)
    except OSError as exc:
        raise CommandError(f"cannot listen on {_format_address(host, port)}: {exc.strerror or exc}") from None
    return listeners


async def _first_signal(signals: AsyncIterator[int]) -> int:
    return int(await signals.__anext__())


async def serve_until_stopped(
    server: Server,
    addresses: list[tuple[str | None, int]],
    ssl_context: ssl.SSLContext | None,
    label: str,
    *,
    stop: trio.Event | None = None,
    websocket_addresses: Sequence[tuple[str | None, int]] = (),
    allowed_origins: Sequence[str] = (),
    services: Sequence[BridgeService] = (),
    metrics_addresses: Sequence[tuple[str | None, int]] = (),
) -> int:
    """Serve on every address until SIGINT / SIGTERM (or ``stop``), then shut down.

    ``addresses`` are TCP (TLS with ``ssl_context``) listeners,
    ``websocket_addresses`` WebSocket ones (``wss://`` with ``ssl_context``;
    ``allowed_origins`` as for ``Server.serve_websocket``), all serving the
    same ``server``; ``services`` are the bridges' (``--emp``), whose
    connections are closed together with the sessions on shutdown;
    ``metrics_addresses`` are HTTP listeners of ``/healthz``, ``/stats``
    and ``/metrics`` (``Server.serve_metrics``).

    Prints ``rstreams: serving LABEL on URL`` on stdout per listener once all
    listen (then ``rstreams: metrics on http://HOST:PORT/metrics`` per metrics
    listener), and ``rstreams: shut down`` at the end. A second signal during the
    shutdown closes the remaining sessions at once.

    Returns:
        EXIT_OK after a graceful shutdown, EXIT_INTERRUPTED after a forced one.

    Raises:
        CommandError: an address cannot be listened on.
    """
    forced: list[bool] = []
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with trio.open_nursery() as sessions:
            async with trio.open_nursery() as listening:
                for host, port in addresses:
                    serve = partial(server.serve_tcp, host, port, ssl_context, handler_nursery=sessions)
                    for listener in await _listen(listening, serve, host, port):
                        print(f"rstreams: serving {label} on {_listener_url(listener, ssl_context is not None)}", flush=True)
                for host, port in websocket_addresses:
                    serve = partial(
                        server.serve_websocket,
                        host,
                        port,
                        ssl_context,
                        allowed_origins=allowed_origins,
                        handler_nursery=sessions,
                    )
                    for listener in await _listen(listening, serve, host, port):
                        url = _listener_url(listener, ssl_context is not None, websocket=True)
                        print(f"rstreams: serving {label} on {url}", flush=True)
                for service in services:
                    try:
                        urls: list[str] = await listening.start(partial(service.serve, handler_nursery=sessions))
                    except OSError as exc:
                        raise CommandError(str(exc.strerror or exc)) from None
                    for url in urls:
                        print(f"rstreams: serving {label} on {url}", flush=True)
                for host, port in metrics_addresses:
                    serve = partial(server.serve_metrics, host, port)
                    for listener in await _listen(listening, serve, host, port):
                        print(f"rstreams: metrics on {listener_url(listener, 'http', '/metrics')}", flush=True)
                await _wait_for_stop(signals, stop)
                listening.cancel_scope.cancel()
            # Not accepting any more: say goodbye to every session. A second
            # signal, or the overall bound, turns it into a forced close.
            with trio.move_on_after(SHUTDOWN_TIMEOUT) as bound:
                async with trio.open_nursery() as closing:
                    closing.start_soon(_cancel_on_signal, signals, closing.cancel_scope, forced)
                    async with trio.open_nursery() as goodbyes:
                        goodbyes.start_soon(server.aclose)
                        for service in services:
                            goodbyes.start_soon(service.aclose)
                    closing.cancel_scope.cancel()
            if bound.cancelled_caught:
                forced.append(True)
            sessions.cancel_scope.cancel()
    print("rstreams: shut down" + (" (forced)" if forced else ""), flush=True)
    return EXIT_INTERRUPTED if forced else EXIT_OK


async def _wait_for_stop(signals: AsyncIterator[int], stop: trio.Event | None) -> None:
    async with trio.open_nursery() as nursery:

        async def on_signal() -> None:
            signum = await _first_signal(signals)
            warn(f"{signal.Signals(signum).name}: shutting down (again to force)")
            nursery.cancel_scope.cancel()

        async def on_stop() -> None:
            assert stop is not None
            await stop.wait()
            nursery.cancel_scope.cancel()

        nursery.start_soon(on_signal)
        if stop is not None:
            nursery.start_soon(on_stop)


async def _cancel_on_signal(signals: AsyncIterator[int], scope: trio.CancelScope, forced: list[bool]) -> None:
    signum = await _first_signal(signals)
    warn(f"{signal.Signals(signum).name}: closing the remaining sessions now")
    forced.append(True)
    scope.cancel()


def _sole_error(error: BaseException) -> BaseException:
    # Nurseries wrap what escapes them in groups; a command reports the one
    # error inside when there is exactly one.
    while isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
        error = error.exceptions[0]
    return error


def run_command(function: Callable[[], Awaitable[int]]) -> int:
    """Run a command under trio; report a CommandError as ``rstreams: ...``."""
    try:
        return trio.run(function)
    except BaseException as exc:  # noqa: BLE001 - sorted out just below
        error = _sole_error(exc)
        if isinstance(error, CommandError):
            warn(error.message)
            return error.code
        if isinstance(error, KeyboardInterrupt):
            # Only before the signal handlers are in place (while starting).
            return EXIT_INTERRUPTED
        raise
