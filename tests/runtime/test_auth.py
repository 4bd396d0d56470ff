"""Authentication (issue 18, item 10): the bearer token in hello, the
server's authenticate and authorize hooks, over real sockets on 127.0.0.1."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
import trio

import rstreams
from rstreams.protocol import Extension, Goodbye, Hello, OnError, Subscribe, Subscribed

from ._support import RawPeer, fetch_range, range_publisher, standard_app

TOKEN = "s3cret-token-value"
BEARER = int(Extension.BEARER)


class Recorder:
    """An authenticate hook that admits TOKEN and remembers what it saw."""

    def __init__(self) -> None:
        self.seen: list[tuple[str | None, rstreams.PeerInfo]] = []

    async def __call__(self, token: str | None, peer: rstreams.PeerInfo) -> rstreams.Principal | None:
        self.seen.append((token, peer))
        return rstreams.Principal(name="alice") if token == TOKEN else None


def only_range(principal: rstreams.Principal, name: str) -> bool:
    return name == "range"


@asynccontextmanager
async def serving(
    app: rstreams.Router, authenticate: rstreams.Authenticate, authorize: rstreams.Authorize | None = None
) -> AsyncIterator[tuple[rstreams.Server, int]]:
    server = rstreams.Server(app, authenticate=authenticate, authorize=authorize)
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(server.serve_tcp, "127.0.0.1", 0)
        yield server, rstreams.listener_port(listeners[0])
        nursery.cancel_scope.cancel()


async def test_a_client_with_the_token_is_admitted_and_served() -> None:
    hook = Recorder()
    with trio.fail_after(10):
        async with serving(standard_app(), hook) as (server, port):
            async with rstreams.open_session(f"tcp://127.0.0.1:{port}", token=TOKEN) as client:
                await fetch_range(client)
                [session] = server.sessions
                assert session.principal == rstreams.Principal(name="alice")
    [(token, peer)] = hook.seen
    assert token == TOKEN
    assert peer.transport == "tcp" and peer.address.startswith("127.0.0.1:")
    assert peer.certificate is None


async def test_connect_passes_the_token_too() -> None:
    with trio.fail_after(10):
        async with serving(standard_app(), rstreams.static_token(TOKEN)) as (_, port):
            async with rstreams.connect(f"tcp://127.0.0.1:{port}", token=TOKEN) as client:
                assert len(await client.fetch("range?count=3", 10)) == 3


@pytest.mark.parametrize("token", [None, "wrong"])
async def test_a_refused_client_sees_authentication_failed(token: str | None) -> None:
    with trio.fail_after(10):
        async with serving(standard_app(), rstreams.static_token(TOKEN)) as (_, port):
            with pytest.raises(rstreams.SessionClosed, match="authentication failed"):
                async with rstreams.open_session(f"tcp://127.0.0.1:{port}", token=token) as client:
                    await client.fetch("range?count=3", 10)


@pytest.mark.parametrize("token", [None, "wrong"])
async def test_a_refused_peer_gets_hello_and_goodbye_and_nothing_else(token: str | None) -> None:
    resolved: list[str] = []

    async def spy(sink: rstreams.Sink, request: rstreams.SubscribeRequest) -> None:
        resolved.append(request.name)
        await range_publisher(sink, request)

    extensions = (BEARER,) if token is not None else ()
    with trio.fail_after(10):
        async with serving(standard_app(spy=spy), rstreams.static_token(TOKEN)) as (_, port):
            peer = RawPeer(await trio.open_tcp_stream("127.0.0.1", port))
            # Hello and subscribes in one write: none may be answered.
            await peer.send(
                Hello(extensions=extensions, token=token),
                Subscribe(publisher="spy", subscriber=1, initial_demand=5),
                Subscribe(publisher="nonexistent", subscriber=2, initial_demand=5),
            )
            messages = await peer.rest()
    assert [type(m) for m in messages] == [Hello, Goodbye]
    assert messages[1] == Goodbye(reason="authentication failed")
    assert resolved == []


async def test_subscribes_sent_with_the_hello_are_answered_once_admitted() -> None:
    with trio.fail_after(10):
        async with serving(standard_app(), rstreams.static_token(TOKEN)) as (_, port):
            peer = RawPeer(await trio.open_tcp_stream("127.0.0.1", port))
            await peer.send(
                Hello(extensions=(BEARER,), token=TOKEN),
                Subscribe(publisher="range?count=2", subscriber=1, initial_demand=5),
            )
            assert isinstance(await peer.receive(), Hello)
            assert await peer.receive() == Subscribed(subscriber=1, element_size=0)
            await peer.send(Goodbye(reason="bye"))
            await peer.aclose()


async def test_authorize_refuses_a_name_and_the_session_stays() -> None:
    with trio.fail_after(10):
        async with serving(standard_app(), Recorder(), only_range) as (_, port):
            async with rstreams.open_session(f"tcp://127.0.0.1:{port}", token=TOKEN) as client:
                with pytest.raises(rstreams.PublisherError, match="not authorized: blob\\?size=3"):
                    await client.fetch("blob?size=3", 10)
                await fetch_range(client)  # the session is still there
                assert not client.closed


async def test_a_failing_hook_refuses(caplog: pytest.LogCaptureFixture) -> None:
    async def broken(token: str | None, peer: rstreams.PeerInfo) -> rstreams.Principal | None:
        raise RuntimeError("hook bug")

    with trio.fail_after(10):
        async with serving(standard_app(), broken) as (_, port):
            with pytest.raises(rstreams.SessionClosed, match="authentication failed"):
                async with rstreams.open_session(f"tcp://127.0.0.1:{port}", token=TOKEN) as client:
                    await client.fetch("range?count=3", 10)
    assert "the authenticate hook failed" in caplog.text


async def test_the_token_is_never_logged(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="rstreams")
    with trio.fail_after(10):
        async with serving(standard_app(), rstreams.static_token(TOKEN)) as (_, port):
            async with rstreams.open_session(f"tcp://127.0.0.1:{port}", token=TOKEN) as client:
                await fetch_range(client)
                assert TOKEN not in repr(client.config)
            with pytest.raises(rstreams.SessionClosed):
                async with rstreams.open_session(f"tcp://127.0.0.1:{port}", token=TOKEN + "x") as client:
                    await client.fetch("range?count=3", 10)
    assert caplog.records  # debug records were written...
    assert TOKEN not in caplog.text  # ...and none names the token
    assert "refusing" in caplog.text


def test_static_token_refuses_an_empty_token() -> None:
    with pytest.raises(ValueError, match="must not be empty"):
        rstreams.static_token("")


def test_authorize_needs_authenticate() -> None:
    with pytest.raises(ValueError, match="authorize needs authenticate"):
        rstreams.SessionConfig(authorize=only_range)


# ---- the token in the WebSocket upgrade ----------------------------------------


async def open_websocket_with(port: int, subprotocols: list[str], headers: list[tuple[bytes, bytes]]) -> trio.abc.Stream:
    # A client whose upgrade carries the token (as a browser does), not its hello.
    from wsproto import ConnectionType, WSConnection
    from wsproto.events import Request

    from rstreams._websocket import _client_handshake

    stream = await trio.open_tcp_stream("127.0.0.1", port)
    request = Request(host=f"127.0.0.1:{port}", target="/", subprotocols=subprotocols, extra_headers=headers)
    return await _client_handshake(stream, WSConnection(ConnectionType.CLIENT), request, rstreams.SessionConfig())


@asynccontextmanager
async def serving_websocket(authenticate: rstreams.Authenticate) -> AsyncIterator[int]:
    server = rstreams.Server(standard_app(), authenticate=authenticate)
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(server.serve_websocket, "127.0.0.1", 0)
        yield rstreams.listener_port(listeners[0])
        nursery.cancel_scope.cancel()


@pytest.mark.parametrize(
    ("subprotocols", "headers"),
    [
        (["rstreams.v0", f"rstreams.bearer.{TOKEN}"], []),
        (["rstreams.v0"], [(b"Authorization", f"Bearer {TOKEN}".encode())]),
    ],
    ids=["subprotocol", "authorization"],
)
async def test_a_token_in_the_websocket_upgrade_is_accepted(subprotocols: list[str], headers: list[tuple[bytes, bytes]]) -> None:
    hook = Recorder()
    with trio.fail_after(10):
        async with serving_websocket(hook) as port:
            stream = await open_websocket_with(port, subprotocols, headers)
            assert getattr(stream, "subprotocol") == "rstreams.v0"  # never the bearer one
            async with rstreams.open_stream_session(stream) as client:
                await fetch_range(client)
    [(token, peer)] = hook.seen
    assert token == TOKEN and peer.transport == "ws"


@pytest.mark.parametrize(
    ("subprotocols", "headers"),
    [
        (["rstreams.v0", "rstreams.bearer.wrong"], []),
        (["rstreams.v0"], [(b"Authorization", b"Basic czNjcmV0")]),
        (["rstreams.v0"], []),
    ],
    ids=["wrong-subprotocol", "not-bearer", "none"],
)
async def test_a_websocket_upgrade_without_the_token_is_refused(subprotocols: list[str], headers: list[tuple[bytes, bytes]]) -> None:
    with trio.fail_after(10):
        async with serving_websocket(rstreams.static_token(TOKEN)) as port:
            stream = await open_websocket_with(port, subprotocols, headers)
            with pytest.raises(rstreams.SessionClosed, match="authentication failed"):
                async with rstreams.open_stream_session(stream) as client:
                    await client.fetch("range?count=3", 10)


async def test_early_subscribes_cancels_and_requests_wait_for_the_hook_in_order() -> None:
    from rstreams.protocol import Cancel, OnComplete, OnNext, Request

    many = [Subscribe(publisher="range?count=1", subscriber=10 + i, initial_demand=1) for i in range(300)]
    with trio.fail_after(20):
        async with serving(standard_app(), rstreams.static_token(TOKEN)) as (_, port):
            peer = RawPeer(await trio.open_tcp_stream("127.0.0.1", port))
            await peer.send(
                Hello(extensions=(BEARER,), token=TOKEN),
                Subscribe(publisher="range?count=3", subscriber=1, initial_demand=0),
                Cancel(subscriber=1),
                Subscribe(publisher="range?count=2", subscriber=2, initial_demand=1),
                Request(subscriber=2, demand=1),
                *many,
            )
            assert isinstance(await peer.receive(), Hello)
            messages = []
            ended: set[int] = set()
            while len(ended) < 301:
                message = await peer.receive()
                messages.append(message)
                if isinstance(message, (OnComplete, OnError)):
                    ended.add(message.subscriber)
            await peer.send(Goodbye(reason="bye"))
            await peer.aclose()
    assert 1 not in ended  # cancelled before it was answered: never answered
    assert not any(isinstance(m, OnError) for m in messages)
    two = [m for m in messages if getattr(m, "subscriber", None) == 2]
    assert [type(m) for m in two] == [Subscribed, OnNext, OnNext, OnComplete]


async def test_a_failing_authorize_refuses_the_stream_only(caplog: pytest.LogCaptureFixture) -> None:
    def broken(principal: rstreams.Principal, name: str) -> bool:
        if name == "blob":
            raise RuntimeError("authorize bug")
        return True

    with trio.fail_after(10):
        async with serving(standard_app(), Recorder(), broken) as (_, port):
            async with rstreams.open_session(f"tcp://127.0.0.1:{port}", token=TOKEN) as client:
                with pytest.raises(rstreams.PublisherError, match="not authorized: blob"):
                    await client.fetch("blob?size=3", 10)
                await fetch_range(client)
    assert "the authorize hook failed on 'blob'" in caplog.text
