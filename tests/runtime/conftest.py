"""Fixtures: one session test suite over every transport.

``connect`` is parametrised over ``memory`` (``trio.testing`` memory streams),
``tcp``, ``tls``, ``ws`` and ``wss`` (a real listener on 127.0.0.1, port 0,
through :class:`rstreams.Server`: ``serve_tcp`` or ``serve_websocket``, with
trustme certificates for TLS). It gives a factory of
``(client_session, server_session)`` pairs, so a test written once runs five
times::

    async def test_x(connect):
        async with connect(server_app=app) as (client, server):
            ...

A test limits the transports with ``@pytest.mark.parametrize("transport", [...])``.

``harness`` (memory or TCP) is a running :class:`rstreams.Server` that raw,
misbehaving peers and well-behaved clients can both connect to.
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
import trio
import trio.testing
import trustme

import rstreams
import rstreams.testing

from ._support import RawPeer, new_session, standard_app

TRANSPORTS = ["memory", "tcp", "tls", "ws", "wss"]


@pytest.fixture(scope="session")
def tls_ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture(scope="session")
def server_ssl_context(tls_ca: trustme.CA) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    tls_ca.issue_cert("127.0.0.1").configure_cert(context)
    return context


@pytest.fixture(scope="session")
def client_ssl_context(tls_ca: trustme.CA) -> ssl.SSLContext:
    context = ssl.create_default_context()
    tls_ca.configure_trust(context)
    return context


@pytest.fixture(params=TRANSPORTS)
def transport(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def connect(transport: str, server_ssl_context: ssl.SSLContext, client_ssl_context: ssl.SSLContext):  # type: ignore[no-untyped-def]
    """A factory of connected ``(client, server)`` sessions over ``transport``."""

    @asynccontextmanager
    async def connect(
        server_app: rstreams.Router | None = None,
        client_app: rstreams.Router | None = None,
        *,
        config: rstreams.SessionConfig = rstreams.SessionConfig(),
        server_config: rstreams.SessionConfig | None = None,
    ) -> AsyncIterator[tuple[rstreams.Session, rstreams.Session]]:
        server_config = server_config or config
        if transport == "memory":
            client_stream, server_stream = trio.testing.memory_stream_pair()
            async with rstreams.open_stream_session(server_stream, app=server_app, config=server_config) as server:
                async with rstreams.open_stream_session(client_stream, app=client_app, config=config) as client:
                    yield client, server
            return
        tls = transport in ("tls", "wss")
        server_obj = rstreams.Server(server_app or rstreams.Router(), config=server_config)
        serve = server_obj.serve_websocket if transport in ("ws", "wss") else server_obj.serve_tcp
        async with trio.open_nursery() as nursery:
            listeners = await nursery.start(serve, "127.0.0.1", 0, server_ssl_context if tls else None)
            url = f"{transport}://127.0.0.1:{rstreams.listener_port(listeners[0])}"
            async with rstreams.open_session(
                url, app=client_app, ssl_context=client_ssl_context if tls else None, config=config
            ) as client:
                server = await new_session(server_obj)
                yield client, server
            nursery.cancel_scope.cancel()

    return connect


class Harness:
    """A running server, and ways to connect to it: raw peers and real clients."""

    def __init__(self, transport: str, server: rstreams.Server, nursery: trio.Nursery, port: int | None) -> None:
        self.transport = transport
        self.server = server
        self._nursery = nursery
        self._port = port

    async def _open_stream(self) -> trio.abc.Stream:
        if self.transport == "tcp":
            assert self._port is not None
            return await trio.open_tcp_stream("127.0.0.1", self._port)
        client_stream, server_stream = trio.testing.memory_stream_pair()
        self._nursery.start_soon(self.server.serve_stream, server_stream)
        return client_stream

    async def open_raw(self) -> tuple[RawPeer, rstreams.Session]:
        """A raw peer and the server session serving it (before any hello is sent)."""
        known = self.server.sessions
        peer = RawPeer(await self._open_stream())
        return peer, await new_session(self.server, known)

    @asynccontextmanager
    async def open_client(
        self, app: rstreams.Router | None = None, config: rstreams.SessionConfig = rstreams.SessionConfig()
    ) -> AsyncIterator[rstreams.Session]:
        async with rstreams.open_stream_session(await self._open_stream(), app=app, config=config) as session:
            yield session


@pytest.fixture(params=["memory", "tcp"])
async def harness(request: pytest.FixtureRequest) -> AsyncIterator[Harness]:
    """A server with ``standard_app()`` over memory or TCP.

    Tests add routes with ``harness.server.app.add(...)`` (or replace the
    app); a module may set ``HARNESS_CONFIG`` for the server's sessions.
    """
    config = getattr(request.module, "HARNESS_CONFIG", None) or rstreams.SessionConfig()
    server = rstreams.Server(standard_app(), config=config)
    async with trio.open_nursery() as nursery:
        port = None
        if request.param == "tcp":
            listeners = await nursery.start(server.serve_tcp, "127.0.0.1", 0)
            port = rstreams.listener_port(listeners[0])
        yield Harness(str(request.param), server, nursery, port)
        nursery.cancel_scope.cancel()


@pytest.fixture(params=["memory", "tcp"])
def raw_publisher_peer(request: pytest.FixtureRequest):  # type: ignore[no-untyped-def]
    """A factory of ``(client_session, raw_peer)``: a real client facing a hand-driven server.

    On exit the session closes and the raw peer answers its goodbye.
    """
    transport = str(request.param)

    @asynccontextmanager
    async def open_pair(
        app: rstreams.Router | None = None, config: rstreams.SessionConfig = rstreams.SessionConfig()
    ) -> AsyncIterator[tuple[rstreams.Session, RawPeer]]:
        if transport == "memory":
            client_stream, peer_stream = trio.testing.memory_stream_pair()
        else:
            [listener] = await trio.open_tcp_listeners(0, host="127.0.0.1")
            port = listener.socket.getsockname()[1]
            client_stream = await trio.open_tcp_stream("127.0.0.1", port)
            peer_stream = await listener.accept()
            await listener.aclose()
        peer = RawPeer(peer_stream)
        async with rstreams.open_stream_session(client_stream, app=app, config=config) as session:
            try:
                yield session, peer
            finally:
                with trio.CancelScope(shield=True), trio.move_on_after(5):
                    async with trio.open_nursery() as nursery:
                        nursery.start_soon(peer.answer_goodbye)
                        await session.aclose()
        await peer.aclose()

    return open_pair
