"""Exposing an rstreams app over EMP: a request names a publisher, the response holds its elements.

The contract (``docs/bridges/emp.md`` has a byte-level example):

* request body: a publisher name in UTF-8, query included (``range?count=5``);
* response body: a msgpack map with exactly one key, ``{"elements": [bin,
  ...]}`` once the stream completed, or ``{"error": "text"}`` if it failed,
  the name is not UTF-8, or the elements exceed ``max_response_bytes``;
* a response is gzip-compressed when its request was;
* several requests may be in flight on one connection (up to
  ``max_concurrency`` are handled at once); responses may come in any order,
  each with its request's id;
* plain ``data`` messages (no request-response block) mean nothing here and
  are read and dropped, so they cannot stall the requests behind them.

Each EMP connection gets its own in-process rstreams session to the app
(:func:`~bridges.emp.open_local_session`), so subscribing goes through the
same router, demand and codecs as a TCP subscriber's.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Sequence
from functools import partial

import msgpack
import trio

from rstreams import Router, Session, Server, SubscriptionError

from ._errors import EmpError
from ._mapping import open_local_session, serve_requests
from ._serve import EmpServer
from ._codec import Framing
from ._config import DEFAULT_CONFIG, EmpConfig
from ._trio import EmpConnection

__all__ = ["EmpAppServer", "DEFAULT_MAX_RESPONSE_BYTES", "answer_publisher_request", "serve_app_with_emp"]

logger = logging.getLogger("rstreams.emp")

#: The most element bytes one response may carry; a larger stream is
#: cancelled and answered ``{"error": ...}``. Well under the 16 MiB message
#: limit of a peer with default limits.
DEFAULT_MAX_RESPONSE_BYTES = 4 * 1024 * 1024
#: Demand per subscription while collecting a response.
PREFETCH = 64


def _pack(value: dict[str, object]) -> bytes:
    packed: bytes = msgpack.packb(value, use_bin_type=True)
    return packed


async def answer_publisher_request(session: Session, body: bytes, *, max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES) -> bytes:
    """The response body for a request ``body`` naming a publisher on ``session``."""
    try:
        name = body.decode("utf-8")
    except UnicodeDecodeError:
        return _pack({"error": "the request body is not a UTF-8 publisher name"})
    elements: list[bytes] = []
    size = 0
    try:
        async with session.subscribe(name, prefetch=PREFETCH) as subscription:
            async for element in subscription:
                size += len(element)
                if size > max_response_bytes:
                    return _pack({"error": f"the stream exceeds {max_response_bytes} bytes"})
                elements.append(bytes(element))
    except SubscriptionError as exc:
        return _pack({"error": str(exc)})
    return _pack({"elements": elements})


class EmpAppServer(EmpServer):
    """An :class:`EmpServer` answering requests with an app's publishers.

    Args:
        app: the router whose publishers are served.
        max_concurrency: requests handled at once per connection.
        max_response_bytes: the most element bytes per response.
    """

    def __init__(
        self,
        app: Router,
        *,
        config: EmpConfig = DEFAULT_CONFIG,
        max_connections: int | None = None,
        max_concurrency: int = 16,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
    ) -> None:
        super().__init__(self._serve_connection, config=config, max_connections=max_connections)
        self.app = app
        self.max_concurrency = max_concurrency
        self.max_response_bytes = max_response_bytes

    async def _serve_connection(self, connection: EmpConnection) -> None:
        async with open_local_session(self.app) as session:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_drop_data, connection)
                answer = partial(answer_publisher_request, session, max_response_bytes=self.max_response_bytes)
                try:
                    await serve_requests(connection, answer, max_concurrency=self.max_concurrency)
                except EmpError as exc:
                    # The peer's error, a violation (already answered with
                    # error), a lost connection: the end of one client.
                    logger.info("EMP connection ended: %s", exc)
                finally:
                    nursery.cancel_scope.cancel()


async def _drop_data(connection: EmpConnection) -> None:
    try:
        async for _ in connection:
            pass
    except EmpError:
        pass


class _ServerAndEmp(Server):
    # serve_until_stopped closes "the server" once a signal came: closing this
    # one says goodbye on the rstreams sessions and bye on the EMP connections
    # at the same time.
    def __init__(self, server: Server, emp: EmpAppServer) -> None:
        super().__init__(server.app, config=server.config, max_connections=server.max_connections)
        self.emp = emp

    async def aclose(self, reason: str = "server shutting down") -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(partial(Server.aclose, self, reason))
            nursery.start_soon(self.emp.aclose)


def _emp_url(listener: trio.SocketListener | trio.SSLListener[trio.SocketStream], secure: bool) -> str:
    transport = listener.transport_listener if isinstance(listener, trio.SSLListener) else listener
    assert isinstance(transport, trio.SocketListener)
    host, port = transport.socket.getsockname()[:2]
    host = f"[{host}]" if ":" in host else host
    return f"{'emps' if secure else 'emp'}://{host}:{port}"


async def serve_app_with_emp(
    server: Server,
    tcp_addresses: list[tuple[str | None, int]],
    emp_addresses: list[tuple[str | None, int]],
    ssl_context: ssl.SSLContext | None,
    label: str,
    *,
    framing: str = "spec",
    websocket_addresses: Sequence[tuple[str | None, int]] = (),
    allowed_origins: Sequence[str] = (),
) -> int:
    """``rstreams serve --emp``: the app over EMP, next to its TCP and WebSocket listeners (if any).

    Prints ``rstreams: serving LABEL on emp://HOST:PORT`` (``emps://`` with
    TLS) per EMP listener, then serves like ``rstreams serve`` until a signal;
    the shutdown says bye on every EMP connection too. ``framing``:
    ``"spec"`` (sizes include their own field) or ``"author"`` (exclude it).
    """
    # Imported here: rstreams.cli imports bridges.emp (for ``rstreams emp``).
    from rstreams.cli._common import CommandError, serve_until_stopped

    config = EmpConfig(framing=Framing.SIZE_EXCLUDES_FIELD if framing == "author" else Framing.SIZE_INCLUDES_FIELD)
    emp = EmpAppServer(server.app, config=config, max_connections=server.max_connections)
    combined = _ServerAndEmp(server, emp)
    async with trio.open_nursery() as connections:
        async with trio.open_nursery() as listening:
            for host, port in emp_addresses:
                try:
                    listeners = await listening.start(partial(emp.serve_tcp, host, port, ssl_context, handler_nursery=connections))
                except OSError as exc:
                    raise CommandError(f"cannot listen on {host or '*'}:{port} for EMP: {exc.strerror or exc}") from None
                for listener in listeners:
                    print(f"rstreams: serving {label} on {_emp_url(listener, ssl_context is not None)}", flush=True)
            status = await serve_until_stopped(
                combined,
                tcp_addresses,
                ssl_context,
                label,
                websocket_addresses=websocket_addresses,
                allowed_origins=allowed_origins,
            )
            listening.cancel_scope.cancel()
        connections.cancel_scope.cancel()
    return status
