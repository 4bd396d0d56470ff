"""``rstreams.connect("epoxy://...")``: the same subscribe code as over tcp://, ws:// and emp://.

In the style of ``test_any_url.py`` (which this file does not touch): the
demo app served over TCP and over Epoxy (plain and TLS) at once, read by one
function through each URL.
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator
from functools import partial

import pytest
import trio
import trustme

import examples.demo
import rstreams
import bridges.epoxy._connect
from bridges.epoxy import (
    DEFAULT_PORT,
    DEFAULT_TLS_PORT,
    BRIDGE,
    Elements,
    EpoxyAppServer,
    EpoxyClosed,
    EpoxyConnection,
    EpoxyServer,
    ErrorCode,
    PeerProtocolError,
    ProtocolErrorCode,
    Response,
    bond,
)
from rstreams.support import find_scheme, listener_url, url_is_secure

EXPECTED = [n.to_bytes(8, "big") for n in range(3)]


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture
async def urls(nursery: trio.Nursery, ca: trustme.CA) -> AsyncIterator[dict[str, str]]:
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(server_context)
    tcp_server = rstreams.Server(examples.demo.app)
    epoxy = EpoxyAppServer(examples.demo.app)
    [tcp] = await nursery.start(tcp_server.serve_tcp, "127.0.0.1", 0)
    [plain] = await nursery.start(partial(epoxy.serve_tcp, "127.0.0.1", 0))
    [secure] = await nursery.start(partial(epoxy.serve_tcp, "127.0.0.1", 0, server_context))
    yield {"tcp": listener_url(tcp, "tcp"), "epoxy": listener_url(plain, "epoxy"), "epoxys": listener_url(secure, "epoxys")}
    await epoxy.aclose()


def _client_context(url: str, ca: trustme.CA) -> ssl.SSLContext | None:
    if not url.startswith("epoxys:"):
        return None
    context = ssl.create_default_context()
    ca.configure_trust(context)
    return context


async def read(url: str, name: str, *, prefetch: int = 32, ssl_context: ssl.SSLContext | None = None) -> list[bytes]:
    # The code a user writes once, whatever carries the stream.
    async with rstreams.connect(url, ssl_context=ssl_context) as peer:
        assert isinstance(peer, rstreams.Peer)
        async with peer.subscribe(name, prefetch=prefetch) as elements:
            return [bytes(element) async for element in elements]


SCHEMES = ["tcp", "epoxy", "epoxys"]


@pytest.mark.parametrize("scheme", SCHEMES)
@pytest.mark.parametrize("prefetch", [0, 1, 32])
async def test_the_same_code_reads_range(urls: dict[str, str], ca: trustme.CA, scheme: str, prefetch: int) -> None:
    url = urls[scheme]
    context = _client_context(url, ca)
    with trio.fail_after(10):
        if prefetch:
            assert await read(url, "range?count=3", prefetch=prefetch, ssl_context=context) == EXPECTED
        else:
            async with rstreams.connect(url, ssl_context=context) as peer:
                async with peer.subscribe("range?count=3", prefetch=0) as elements:
                    elements.request(2)
                    got = [bytes(await elements.__anext__()), bytes(await elements.__anext__())]
                    elements.request(1)
                    got += [bytes(element) async for element in elements]
            assert got == EXPECTED


@pytest.mark.parametrize("scheme", SCHEMES)
async def test_fetch(urls: dict[str, str], ca: trustme.CA, scheme: str) -> None:
    with trio.fail_after(10):
        async with rstreams.connect(urls[scheme], ssl_context=_client_context(urls[scheme], ca)) as peer:
            assert await peer.fetch("range?count=5", 3) == EXPECTED
            assert [int.from_bytes(x, "big") for x in await peer.fetch("range?count=4", 10)] == [0, 1, 2, 3]


@pytest.mark.parametrize("scheme", SCHEMES)
async def test_an_unknown_publisher_is_refused_when_entering(urls: dict[str, str], ca: trustme.CA, scheme: str) -> None:
    with trio.fail_after(10):
        with pytest.raises(rstreams.UnknownPublisher) as caught:
            await read(urls[scheme], "nothing-here", ssl_context=_client_context(urls[scheme], ca))
        assert caught.value.name == "nothing-here"
        assert caught.value.message == "no such publisher: nothing-here"


@pytest.mark.parametrize("scheme", SCHEMES)
async def test_a_failing_publisher_is_a_publisher_error(urls: dict[str, str], ca: trustme.CA, scheme: str) -> None:
    with trio.fail_after(10):
        with pytest.raises(rstreams.PublisherError) as caught:
            await read(urls[scheme], "fail?after=2", ssl_context=_client_context(urls[scheme], ca))
        assert not isinstance(caught.value, rstreams.UnknownPublisher)


async def test_several_subscriptions_share_one_connection(urls: dict[str, str]) -> None:
    with trio.fail_after(10):
        async with rstreams.connect(urls["epoxy"]) as peer:
            results: dict[int, list[bytes]] = {}

            async def one(count: int) -> None:
                async with peer.subscribe(f"range?count={count}", prefetch=2) as elements:
                    results[count] = [bytes(element) async for element in elements]

            async with trio.open_nursery() as nursery:
                for count in (1, 5, 9):
                    nursery.start_soon(one, count)
            assert {count: len(elements) for count, elements in results.items()} == {1: 1, 5: 5, 9: 9}


async def test_a_stream_ends_with_the_bridge_s_typed_error(nursery: trio.Nursery) -> None:
    # A server that closes as soon as the request arrives: the open stream
    # ends with Epoxy's own error, not a stringly PublisherError.
    async def leave(connection: EpoxyConnection) -> None:
        await connection.receive_request()

    [listener] = await nursery.start(partial(EpoxyServer(leave).serve_tcp, "127.0.0.1", 0))
    with trio.fail_after(10):
        with pytest.raises(EpoxyClosed) as caught:
            await read(listener_url(listener, "epoxy"), "range?count=3")
        assert caught.value.by_peer


async def test_a_rejection_is_raised_by_connect(nursery: trio.Nursery) -> None:
    server = EpoxyAppServer(examples.demo.app, accept=lambda info: False)
    [listener] = await nursery.start(partial(server.serve_tcp, "127.0.0.1", 0))
    with trio.fail_after(10):
        with pytest.raises(PeerProtocolError) as caught:
            await read(listener_url(listener, "epoxy"), "range?count=3")
        assert caught.value.error_code == ProtocolErrorCode.CONNECTION_REJECTED


async def test_a_request_from_the_server_is_answered_method_not_found(nursery: trio.Nursery) -> None:
    # The connection is symmetric once open: our client serves no service,
    # says so, and drops events, so neither stalls the responses behind them.
    answers: list[Response] = []

    async def ask(connection: EpoxyConnection) -> None:
        await connection.send_event("client.Service", "Tick", Elements())
        answers.append(await connection.call_raw("client.Service", "Method", Elements()))
        await connection.receive_request()  # until the client leaves

    [listener] = await nursery.start(partial(EpoxyServer(ask).serve_tcp, "127.0.0.1", 0))
    with trio.fail_after(10):
        async with rstreams.connect(listener_url(listener, "epoxy")):
            while not answers:
                await trio.sleep(0.01)
    [answer] = answers
    assert answer.conversation_id == 4  # the server's ids are even, from 2: the event had 2
    assert answer.is_error and answer.decode_error().error_code == ErrorCode.METHOD_NOT_FOUND


def test_the_registration() -> None:
    bridge, scheme = find_scheme("epoxy://h", "epoxy")
    assert bridge is BRIDGE and scheme.default_port == DEFAULT_PORT == 25188 and not scheme.secure
    _, secure = find_scheme("epoxys://h", "epoxys")
    assert secure.secure and secure.default_port == DEFAULT_TLS_PORT == 25156
    assert url_is_secure("epoxys://h:1") and not url_is_secure("epoxy://h:1")
    assert bond.Protocol.COMPACT_V1  # the payloads' protocol, for the reader


async def test_epoxy_urls_are_checked() -> None:
    for url in ("epoxy://127.0.0.1:1?x=1", "epoxy://127.0.0.1:1/path", "epoxy://:1", "epoxy://127.0.0.1:port"):
        with pytest.raises(ValueError):
            async with rstreams.connect(url):
                pass  # pragma: no cover
    with pytest.raises(ValueError, match="epoxys"):
        async with rstreams.connect("epoxy://127.0.0.1:1", ssl_context=ssl.create_default_context()):
            pass  # pragma: no cover


@pytest.mark.parametrize(("url", "port", "secure"), [("epoxy://example.invalid", 25188, False), ("epoxys://example.invalid", 25156, True)])
async def test_the_default_ports_are_the_spec_s(monkeypatch: pytest.MonkeyPatch, url: str, port: int, secure: bool) -> None:
    tried: list[tuple[str, int, bool]] = []

    async def fake_open_tcp_stream(host: str, port: int, *, ssl_context: ssl.SSLContext | None = None, server_hostname: str | None = None) -> trio.abc.Stream:
        tried.append((host, port, ssl_context is not None))
        raise ConnectionRefusedError(f"nothing at {host}:{port}")

    monkeypatch.setattr(bridges.epoxy._connect, "open_tcp_stream", fake_open_tcp_stream)
    with pytest.raises(ConnectionRefusedError):
        async with rstreams.connect(url):
            pass  # pragma: no cover
    assert tried == [("example.invalid", port, secure)]
