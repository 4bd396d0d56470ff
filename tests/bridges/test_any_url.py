"""One subscribe code, any URL: ``rstreams.connect`` over tcp://, ws://, emp://, relink://, mm2:// and epoxy://.

The demo app is served six ways at once (reactive-streams-io over TCP and
WebSocket, the EMP, Relink and Epoxy bridges, and the MicroMsg2 broker), and
the very same function reads it through each URL: the elements, an empty
stream, empty elements, an unknown publisher, a failing one, and ``fetch``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from functools import partial

import pytest
import trio

import examples.demo
import rstreams
import rstreams.demo
from bridges.emp import EmpAppServer, EmpClosed
from bridges.epoxy import EpoxyAppServer
from bridges.micromsg2 import MicroMsg2AppServer
from bridges.relink import RelinkAppServer
from rstreams.support import listener_url

EXPECTED = [n.to_bytes(8, "big") for n in range(3)]
EVERY_SCHEME = ["tcp", "ws", "emp", "relink", "mm2", "epoxy"]


@pytest.fixture
async def urls(nursery: trio.Nursery) -> AsyncIterator[dict[str, str]]:
    server = rstreams.Server(examples.demo.app)
    emp = EmpAppServer(examples.demo.app)
    [tcp] = await nursery.start(server.serve_tcp, "127.0.0.1", 0)
    [websocket] = await nursery.start(server.serve_websocket, "127.0.0.1", 0)
    [emp_listener] = await nursery.start(partial(emp.serve_tcp, "127.0.0.1", 0))
    [mm2_listener] = await nursery.start(partial(MicroMsg2AppServer(examples.demo.app).serve_tcp, "127.0.0.1", 0))
    relink = RelinkAppServer(examples.demo.app)
    [relink_listener] = await nursery.start(partial(relink.serve_tcp, "127.0.0.1", 0))
    [epoxy_listener] = await nursery.start(partial(EpoxyAppServer(examples.demo.app).serve_tcp, "127.0.0.1", 0))
    yield {
        "tcp": listener_url(tcp, "tcp"),
        "ws": listener_url(websocket, "ws", "/"),
        "emp": listener_url(emp_listener, "emp"),
        "mm2": listener_url(mm2_listener, "mm2"),
        "relink": listener_url(relink_listener, "relink", "/rstreams"),
        "epoxy": listener_url(epoxy_listener, "epoxy"),
    }


async def read(url: str, name: str, *, prefetch: int = 32) -> list[bytes]:
    # The code a user writes once, whatever carries the stream.
    async with rstreams.connect(url) as peer:
        assert isinstance(peer, rstreams.Peer)
        async with peer.subscribe(name, prefetch=prefetch) as elements:
            return [bytes(element) async for element in elements]


@pytest.mark.parametrize("scheme", EVERY_SCHEME)
@pytest.mark.parametrize("prefetch", [0, 1, 32])
async def test_the_same_code_reads_range_over_every_scheme(urls: dict[str, str], scheme: str, prefetch: int) -> None:
    with trio.fail_after(10):
        if prefetch:
            assert await read(urls[scheme], "range?count=3", prefetch=prefetch) == EXPECTED
        else:
            async with rstreams.connect(urls[scheme]) as peer:
                async with peer.subscribe("range?count=3", prefetch=0) as elements:
                    elements.request(2)
                    got = [bytes(await elements.__anext__()), bytes(await elements.__anext__())]
                    elements.request(1)
                    got += [bytes(element) async for element in elements]
            assert got == EXPECTED


@pytest.mark.parametrize("scheme", EVERY_SCHEME)
async def test_fetch_and_codecs_are_the_same_everywhere(urls: dict[str, str], scheme: str) -> None:
    with trio.fail_after(10):
        async with rstreams.connect(urls[scheme]) as peer:
            assert await peer.fetch("range?count=5", 3) == EXPECTED
            assert [int.from_bytes(x, "big") for x in await peer.fetch("range?count=4", 10)] == [0, 1, 2, 3]


@pytest.mark.parametrize("scheme", EVERY_SCHEME)
async def test_an_unknown_publisher_is_refused_when_entering(urls: dict[str, str], scheme: str) -> None:
    with trio.fail_after(10):
        with pytest.raises(rstreams.UnknownPublisher) as caught:
            await read(urls[scheme], "nothing-here")
        assert caught.value.name == "nothing-here"


@pytest.mark.parametrize("scheme", EVERY_SCHEME)
async def test_a_failing_publisher_is_a_publisher_error(urls: dict[str, str], scheme: str) -> None:
    with trio.fail_after(10):
        with pytest.raises(rstreams.PublisherError):
            await read(urls[scheme], "fail?after=2")


@pytest.mark.parametrize("scheme", EVERY_SCHEME)
async def test_an_empty_stream_and_empty_elements_are_the_same_everywhere(urls: dict[str, str], scheme: str) -> None:
    # (Over Relink an empty stream never completed: its channel never opened.)
    with trio.fail_after(10):
        assert await read(urls[scheme], "range?count=0") == []
        assert await read(urls[scheme], "blob?count=3&size=0") == [b"", b"", b""]
        async with rstreams.connect(urls[scheme]) as peer:
            assert await peer.fetch("range?count=0", 1) == []


async def test_a_bridge_stream_ends_with_the_bridge_s_typed_error(nursery: trio.Nursery) -> None:
    # An EMP server that says bye as soon as the request arrives: the open
    # stream ends with EMP's own error, not a stringly PublisherError.
    async def leave(connection: object) -> None:
        from bridges.emp import EmpConnection

        assert isinstance(connection, EmpConnection)
        await connection.receive_request()

    from bridges.emp import EmpServer

    [listener] = await nursery.start(partial(EmpServer(leave).serve_tcp, "127.0.0.1", 0))
    with trio.fail_after(10):
        with pytest.raises(EmpClosed) as caught:
            await read(listener_url(listener, "emp"), "range?count=3")
        assert caught.value.by_peer


async def test_an_unknown_scheme_names_the_known_ones() -> None:
    with pytest.raises(rstreams.UnsupportedScheme) as caught:
        async with rstreams.connect("nope://h:1"):
            pass  # pragma: no cover
    assert isinstance(caught.value, ValueError)
    for scheme in ("tcp", "tls", "ws", "wss", "emp", "emps", "relink", "relinks", "mm2", "mm2s", "epoxy", "epoxys"):
        assert f" {scheme}" in str(caught.value) or f"{scheme}," in str(caught.value)


async def test_emp_urls_are_checked() -> None:
    for url in ("emp://127.0.0.1:1?framing=other", "emp://127.0.0.1:1?nope=1", "emp://127.0.0.1:1/path", "emp://127.0.0.1"):
        with pytest.raises(ValueError):
            async with rstreams.connect(url):
                pass  # pragma: no cover


async def test_mm2_urls_are_checked() -> None:
    for url in ("mm2://127.0.0.1:1?window=0", "mm2://127.0.0.1:1?window=x", "mm2://127.0.0.1:1?nope=1", "mm2://127.0.0.1:1/path", "mm2://127.0.0.1"):
        with pytest.raises(ValueError):
            async with rstreams.connect(url):
                pass  # pragma: no cover


async def test_relink_urls_name_an_endpoint_a_request_can_carry() -> None:
    # (It was tried, and refused by the handshake's own check, after connecting.)
    for url in ("relink://127.0.0.1:1/" + "e" * 256, "relink://127.0.0.1:1/caf\udce9"):
        with pytest.raises(ValueError, match="endpoint_name"):
            async with rstreams.connect(url):
                pass  # pragma: no cover


async def test_a_url_is_a_str() -> None:
    # (An int or None died on a str method, untyped.)
    for url in (5, None, b"tcp://127.0.0.1:1"):
        with pytest.raises(TypeError, match="a URL is a str"):
            async with rstreams.connect(url):  # type: ignore[arg-type]
                pass  # pragma: no cover
    with pytest.raises(ValueError, match="fragment"):
        async with rstreams.connect("tcp://127.0.0.1:1#x"):
            pass  # pragma: no cover


# ---- text with no UTF-8 form (see tests/runtime/test_text_without_utf8.py) ----

UNDECODABLE = b"caf\xe9.txt".decode("utf-8", "surrogateescape")  # as os.fsdecode gives it


async def cannot_open(sink: rstreams.Sink, request: rstreams.SubscribeRequest) -> None:
    raise FileNotFoundError(f"no such file: {UNDECODABLE}")


@pytest.mark.parametrize("scheme", EVERY_SCHEME)
async def test_a_name_without_utf8_is_refused_before_anything_is_sent(urls: dict[str, str], scheme: str) -> None:
    with trio.fail_after(10):
        async with rstreams.connect(urls[scheme]) as peer:
            with pytest.raises(rstreams.LocalProtocolError, match="UTF-8"):
                peer.subscribe(UNDECODABLE)
            assert await peer.fetch("range?count=2", 2) == EXPECTED[:2]


@pytest.mark.parametrize("scheme", ["tcp", "emp", "relink", "mm2", "epoxy"])
async def test_an_error_text_without_utf8_fails_its_stream_only(nursery: trio.Nursery, scheme: str) -> None:
    # The app's onError went through the bridge's in-process session, whose
    # connection died writing it: every stream of that bridge connection with it.
    app = rstreams.Router({"range": rstreams.Route(rstreams.demo.range_, element_size=8), "cannot_open": cannot_open})
    servers = {
        "tcp": lambda: rstreams.Server(app).serve_tcp,
        "emp": lambda: partial(EmpAppServer(app).serve_tcp),
        "relink": lambda: partial(RelinkAppServer(app).serve_tcp),
        "mm2": lambda: partial(MicroMsg2AppServer(app).serve_tcp),
        "epoxy": lambda: partial(EpoxyAppServer(app).serve_tcp),
    }
    [listener] = await nursery.start(servers[scheme](), "127.0.0.1", 0)
    url = listener_url(listener, scheme, "/rstreams" if scheme == "relink" else "")
    with trio.fail_after(10):
        async with rstreams.connect(url) as peer:
            async with peer.subscribe("range?count=100", prefetch=1) as other:
                assert await other.__anext__() == EXPECTED[0]
                with pytest.raises(rstreams.PublisherError) as failed:
                    await peer.fetch("cannot_open", 1)
                assert "no such file: caf\\udce9.txt" in failed.value.message
                assert len([element async for element in other]) == 99
            assert await peer.fetch("range?count=2", 2) == EXPECTED[:2]


async def test_a_relink_url_at_an_emp_port_is_never_a_crash(urls: dict[str, str]) -> None:
    # EMP's hello and error arrive in one read that also reads, to Relink,
    # as a finished handshake (it ignores the version block's padding): the
    # connection ended as its handshake returned, and starting its keepalive
    # raised "Nursery is closed to new arrivals", a traceback out of
    # `rstreams sub relink://` pointed at an EMP port. Then, since EMP
    # answers every reconnect with the same bytes (the same link, resumed),
    # the connector reconnected at once, forever. Three connections broken
    # in a row before any message now end the link with the error.
    from bridges.relink import RelinkSettings, RemoteProtocolError, connect_relink_url

    emp_port = urls["emp"].rsplit(":", 1)[1]
    settings = RelinkSettings(reconnect_delay=0.01, reconnect_max_delay=0.05)
    with trio.fail_after(5), pytest.raises(RemoteProtocolError, match="a Relink listener"):
        async with connect_relink_url(f"relink://127.0.0.1:{emp_port}/rstreams", settings=settings) as peer:
            await peer.fetch("range?count=1", 1)
