"""What the client commands (``sub``, ``pub``, ``ls``, ``ping``) share.

Their URL (the positional one, else ``$RSTREAMS_URL``), their TLS context,
and how a failure becomes an exit status and one line on stderr: either
``rstreams: MESSAGE``, or with ``--json`` one JSON object,
``{"error": MESSAGE, "exit": STATUS}``, for programs that run them. The
choice is made once per command run (:func:`set_json_errors`) and read by
:func:`report`, so the code paths that fail need not carry it around; it is
a context variable, which trio hands to every task of the run.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import AsyncIterator
from contextvars import ContextVar
from typing import TYPE_CHECKING

from ._common import EXIT_CONNECTION, EXIT_GOODBYE, EXIT_USAGE, CommandError, client_ssl_context, token_problem

if TYPE_CHECKING:
    import ssl

    import trio

    from .._errors import SessionClosed

__all__ = [
    "URL_VARIABLE",
    "URL_HELP",
    "CA_HINT",
    "client_url",
    "check_name",
    "client_ssl",
    "report",
    "set_json_errors",
    "session_closed",
    "with_cause",
    "add_ca_argument",
    "client_token",
    "TOKEN_VARIABLE",
    "SignalStop",
    "stop_at_signal",
    "silence_stdout",
]

#: The environment variable that gives a client command its URL when none is given.
URL_VARIABLE = "RSTREAMS_URL"

URL_HELP = (
    "tcp://HOST:PORT, tls://HOST:PORT, ws://HOST:PORT/, wss://HOST:PORT/, or a bridge's URL "
    f"(emp://HOST:PORT, ...); default: ${URL_VARIABLE}"
)

#: The environment variable that gives a client command its token when --token is not given.
TOKEN_VARIABLE = "RSTREAMS_TOKEN"

CA_HINT = "--ca is for tls:// and wss:// URLs (and the bridges' TLS schemes, such as emps://)"

_json_errors: ContextVar[bool] = ContextVar("rstreams_cli_json_errors", default=False)


def set_json_errors(enabled: bool) -> None:
    """Make :func:`report` (and the command's usage errors) write JSON objects."""
    _json_errors.set(enabled)


def report(message: str, code: int) -> int:
    """Say why the command fails on stderr; return ``code`` (its exit status)."""
    if _json_errors.get():
        line = json.dumps({"error": message, "exit": code}, ensure_ascii=False)
    else:
        line = f"rstreams: {message}"
    print(line, file=sys.stderr, flush=True)
    return code


def client_url(url: str | None, name: str | None = None) -> str:
    """The URL given, else ``$RSTREAMS_URL``.

    For the commands that take NAME too (``sub``, ``pub``), URL is optional
    before it: with one positional argument, it is NAME and the URL comes
    from the environment.
    """
    if url is not None:
        return url
    from_environment = os.environ.get(URL_VARIABLE, "").strip()
    if not from_environment:
        if name is None:
            raise CommandError(f"no URL: give one, or set {URL_VARIABLE}", EXIT_USAGE)
        if "://" in name:
            raise CommandError(f"expected URL NAME: {name!r} looks like a URL, and no NAME was given", EXIT_USAGE)
        raise CommandError(f"no URL: give one before NAME, or set {URL_VARIABLE}", EXIT_USAGE)
    return from_environment


def check_name(name: str) -> None:
    """NAME (``sub``, ``pub``) must be one a subscribe can carry: UTF-8 text.

    Raises:
        CommandError: it is not (an argument holding bytes that are not
            UTF-8 arrives with surrogates); exit status 2.
    """
    from ..protocol import LocalProtocolError, check_publisher_name

    try:
        check_publisher_name(name)
    except LocalProtocolError:
        raise CommandError(f"NAME {name!r} is not UTF-8 text", EXIT_USAGE) from None


def client_ssl(url: str, ca: str | None, cert: str | None = None, key: str | None = None) -> ssl.SSLContext | None:
    """The TLS context for ``url`` (None: not a TLS URL); ``ca`` from ``--ca``,
    ``cert`` and ``key`` from ``--cert`` / ``--key`` (mutual TLS)."""
    from .._registry import url_is_secure

    try:
        secure = url_is_secure(url)
    except ValueError as exc:  # UnsupportedScheme included: it names the known schemes
        raise CommandError(str(exc), EXIT_USAGE) from None
    return client_ssl_context(secure, ca, ca_hint=CA_HINT, cert=cert, key=key)


def add_ca_argument(parser: argparse.ArgumentParser) -> None:
    """A client command's credentials: ``--ca``, ``--cert`` / ``--key`` and ``--token``."""
    parser.add_argument("--ca", metavar="FILE", help="for tls://, wss:// and the bridges' TLS schemes, trust the CA certificates in FILE (PEM)")
    parser.add_argument("--cert", metavar="FILE", help="mutual TLS: present this client certificate chain (PEM)")
    parser.add_argument("--key", metavar="FILE", help="the private key of --cert (PEM; default: in the cert file)")
    parser.add_argument(
        "--token",
        metavar="TOKEN",
        type=_token_argument,
        help=f"a bearer token for a server that asks for one (carried in hello, never logged); default: ${TOKEN_VARIABLE}",
    )


def client_token(args: argparse.Namespace) -> str | None:
    """``--token``, else ``$RSTREAMS_TOKEN``, else None.

    Raises:
        CommandError: ``$RSTREAMS_TOKEN`` is not one a hello can carry
            (exit status 2; ``--token`` is checked by the parser).
    """
    token: str | None = getattr(args, "token", None)
    if token is None:
        token = os.environ.get(TOKEN_VARIABLE, "").strip() or None
        if token is not None:
            problem = token_problem(token)
            if problem is not None:
                raise CommandError(f"${TOKEN_VARIABLE}: {problem}", EXIT_USAGE)
    return token


def _token_argument(text: str) -> str:
    problem = token_problem(text)
    if problem is not None:
        raise argparse.ArgumentTypeError(problem)
    return text


def session_closed(exc: SessionClosed, *, progress: str = "") -> int:
    """Report a session that ended under the command: 4 if lost or never
    up (no hello: a failed connect, as every bridge reports it), 3 after
    goodbye. ``progress`` ends the line: how far the command got (``pub``:
    the lines sent, so that a user knows where to start again)."""
    from .._errors import HandshakeTimeout, SessionBroken

    tail = f" ({progress})" if progress else ""
    if isinstance(exc, SessionBroken):
        reason = with_cause(exc.reason, exc)
        if reason.startswith("TLS handshake failed"):
            # (as every bridge says it: never "lost", it never came up)
            return report(f"{reason}{tail}", EXIT_CONNECTION)
        return report(f"connection lost: {reason}{tail}", EXIT_CONNECTION)
    if isinstance(exc, HandshakeTimeout):
        return report(f"cannot connect: the server sent no hello ({exc.reason}){tail}", EXIT_CONNECTION)
    if exc.by_peer:
        return report(f"the server said goodbye: {exc.reason}{tail}", EXIT_GOODBYE)
    return report(f"session closed: {exc.reason}{tail}", EXIT_GOODBYE)


def with_cause(reason: str, exc: BaseException) -> str:
    """``reason``, with the innermost cause of ``exc`` that has something to say.

    A transport error often says nothing itself (``trio.BrokenResourceError()``)
    while its cause says what happened (a TLS certificate that failed to
    verify, a reset).
    """
    detail = ""
    seen: set[int] = set()
    cause = exc.__cause__
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        detail = str(cause) or detail
        cause = cause.__cause__
    reason = reason.rstrip(": ")
    if detail and detail not in reason:
        reason = f"{reason}: {detail}" if reason else detail
    # "connection lost: connection lost: ..." says it twice.
    return reason.removeprefix("connection lost: ") or "no reason given"


class SignalStop:
    """Whether a client command was stopped by a signal, and the status it then exits with.

    Attributes:
        status: 128 + the signal's number (130 for SIGINT, 143 for SIGTERM,
            as shells report a process a signal ended), or None while no
            signal came.
    """

    def __init__(self) -> None:
        self.status: int | None = None

    def exit_status(self, status: int) -> int:
        """What the command exits with: the signal's status if one came,
        else ``status`` (what its work reported)."""
        return status if self.status is None else self.status


def stop_at_signal(signals: AsyncIterator[int], nursery: trio.Nursery) -> SignalStop:
    """Cancel ``nursery`` at the first of ``signals`` (a ``trio.open_signal_receiver``).

    The command's work runs in ``nursery`` and ends there at Ctrl-C or
    SIGTERM like any cancellation (a session says goodbye on its way out);
    the command then exits with the returned :attr:`SignalStop.status`,
    whatever its work reported on the way out.
    """
    stop = SignalStop()

    async def watch() -> None:
        signum = await signals.__anext__()
        stop.status = 128 + signum
        nursery.cancel_scope.cancel()

    nursery.start_soon(watch)
    return stop


def silence_stdout() -> None:
    """Point stdout at /dev/null: its reader went away (``| head``).

    That is a normal way to stop a command that prints; with stdout gone
    the interpreter's final flush does not complain either.
    """
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
