"""Serving until a signal, for the server commands (``serve``, ``pub``, ``demo``).

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

import signal
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from functools import partial

import trio

from .._registry import BridgeService
from .._serve import Listener, Server, listener_url
from ._common import EXIT_INTERRUPTED, EXIT_OK, CommandError, warn

__all__ = ["SHUTDOWN_TIMEOUT", "serve_until_stopped"]

#: How long a graceful shutdown may take before the remaining sessions are
#: closed forcefully: a session's own bounds are a 5 s drain, a 5 s wait for
#: the peer's goodbye and 1 s to close the transport (SessionConfig defaults).
SHUTDOWN_TIMEOUT = 15.0


def _listener_url(listener: Listener, secure: bool, websocket: bool = False) -> str:
    if websocket:
        return listener_url(listener, "wss" if secure else "ws", "/")
    return listener_url(listener, "tls" if secure else "tcp")


def _format_address(host: str | None, port: int) -> str:
    if host is None:
        return f"*:{port}"
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


async def _listen(
    nursery: trio.Nursery, serve: Callable[..., Awaitable[object]], host: str | None, port: int, hint: str = ""
) -> list[Listener]:
    """Start one listener task; an address that cannot be listened on is a CommandError."""
    try:
        listeners: list[Listener] = await nursery.start(serve)
    except OSError as exc:
        message = f"cannot listen on {_format_address(host, port)}: {exc.strerror or exc}"
        raise CommandError(f"{message}; {hint}" if hint else message) from None
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
    static_dir: str | None = None,
    services: Sequence[BridgeService] = (),
    metrics_addresses: Sequence[tuple[str | None, int]] = (),
    on_serving: Callable[[list[str]], None] | None = None,
    listen_hint: str = "",
) -> int:
    """Serve on every address until SIGINT / SIGTERM (or ``stop``), then shut down.

    ``addresses`` are TCP (TLS with ``ssl_context``) listeners,
    ``websocket_addresses`` WebSocket ones (``wss://`` with ``ssl_context``;
    ``allowed_origins`` and ``static_dir`` as for ``Server.serve_websocket``), all serving the
    same ``server``; ``services`` are the bridges' (``--emp``), whose
    connections are closed together with the sessions on shutdown;
    ``metrics_addresses`` are HTTP listeners of ``/healthz``, ``/stats``
    and ``/metrics`` (``Server.serve_metrics``).
    ``on_serving`` is called with every listener's URL once all listen (after
    their lines are printed), for a command that has more to say then;
    ``listen_hint`` is added to the error for an address that cannot be
    listened on.

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
    urls: list[str] = []
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with trio.open_nursery() as sessions:
            async with trio.open_nursery() as listening:
                for host, port in addresses:
                    serve = partial(server.serve_tcp, host, port, ssl_context, handler_nursery=sessions)
                    for listener in await _listen(listening, serve, host, port, listen_hint):
                        urls.append(_listener_url(listener, ssl_context is not None))
                        print(f"rstreams: serving {label} on {urls[-1]}", flush=True)
                for host, port in websocket_addresses:
                    serve = partial(
                        server.serve_websocket,
                        host,
                        port,
                        ssl_context,
                        allowed_origins=allowed_origins,
                        static_dir=static_dir,
                        handler_nursery=sessions,
                    )
                    for listener in await _listen(listening, serve, host, port, listen_hint):
                        urls.append(_listener_url(listener, ssl_context is not None, websocket=True))
                        print(f"rstreams: serving {label} on {urls[-1]}", flush=True)
                for service in services:
                    try:
                        service_urls: list[str] = await listening.start(partial(service.serve, handler_nursery=sessions))
                    except OSError as exc:
                        raise CommandError(str(exc.strerror or exc)) from None
                    for url in service_urls:
                        urls.append(url)
                        print(f"rstreams: serving {label} on {url}", flush=True)
                for host, port in metrics_addresses:
                    serve = partial(server.serve_metrics, host, port)
                    for listener in await _listen(listening, serve, host, port, listen_hint):
                        print(f"rstreams: metrics on {listener_url(listener, 'http', '/metrics')}", flush=True)
                if on_serving is not None:
                    on_serving(urls)
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
