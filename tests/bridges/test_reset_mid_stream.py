"""A peer that resets its connection in the middle of a stream is one log line on every bridge (its session's close).

Each app server (EMP, Relink, the MicroMsg2 broker, Epoxy) serves an endless
``ticker``; a client reads it through a proxy, which resets the server's side
of the connection (RST, ``SO_LINGER`` 0) once elements flow. That is the end
of one client, an everyday event for a server that runs for weeks: at most
one line at info, no traceback, as ``rstreams serve`` does for its own
sessions (``tests/runtime/test_serve.py``). Found by cutting connections at
random offsets: the broker's lost connection reached the log as an error
with six nested exception groups, because the error came out of its
nurseries wrapped in a group that ``except BridgeError`` did not match.

A peer may also vanish without a word (power loss, a partition): every
bridge's connections keep TCP alive, both ends, so that the kernel's probes
find it where the protocol has no ping.
"""

from __future__ import annotations

import logging
import socket
import struct
from collections.abc import Callable
from functools import partial
from typing import Any

import pytest
import trio

import examples.demo
import rstreams
from bridges.emp import EmpAppServer
from bridges.epoxy import EpoxyAppServer
from bridges.micromsg2 import MicroMsg2AppServer
from bridges.relink import RelinkAppServer, RelinkSettings
from rstreams.support import listener_port

# EMP and Epoxy answer a subscription with one response once the stream
# completes (docs/bridges): their peer resets with the connection idle, after
# a finite stream; Relink and MicroMsg2 stream, and reset in an endless one.
SERVERS: dict[str, tuple[Callable[[rstreams.Router], Any], str, str]] = {
    "emp": (EmpAppServer, "emp://127.0.0.1:{port}", "blob?count=8&size=100"),
    # (A Relink link outlives its connection, for the connector to resume
    # it, until link_timeout: short here, so that the link ends too.)
    "relink": (
        partial(RelinkAppServer, settings=RelinkSettings(link_timeout=0.2)),
        "relink://127.0.0.1:{port}/rstreams",
        "ticker?interval=0.001",
    ),
    "mm2": (MicroMsg2AppServer, "mm2://127.0.0.1:{port}", "ticker?interval=0.001"),
    "epoxy": (EpoxyAppServer, "epoxy://127.0.0.1:{port}", "blob?count=8&size=100"),
}


async def _pump(source: trio.SocketStream, sink: trio.SocketStream) -> None:
    try:
        while data := await source.receive_some(65536):
            await sink.send_all(data)
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass


def _reset(stream: trio.SocketStream) -> None:
    stream.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    stream.socket.close()


async def _serve(bridge: str, nursery: trio.Nursery) -> tuple[Any, int, str, str]:
    # The bridge's app server on a free port: the server, its port, its URL
    # pattern and the publisher its tests read.
    make, url, name = SERVERS[bridge]
    server = make(examples.demo.app)
    [listener] = await nursery.start(partial(server.serve_tcp, "127.0.0.1", 0))
    return server, listener_port(listener), url, name


@pytest.mark.parametrize("bridge", sorted(SERVERS))
async def test_a_reset_in_the_middle_of_a_stream_is_one_line(
    bridge: str, nursery: trio.Nursery, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    server, port, url, name = await _serve(bridge, nursery)
    upstreams: list[trio.SocketStream] = []

    async def proxy(client: trio.SocketStream) -> None:
        upstream = await trio.open_tcp_stream("127.0.0.1", port)
        upstreams.append(upstream)
        async with trio.open_nursery() as pumps:
            pumps.start_soon(_pump, client, upstream)
            pumps.start_soon(_pump, upstream, client)

    [front] = await nursery.start(partial(trio.serve_tcp, proxy, 0, host="127.0.0.1"))
    with trio.fail_after(20):
        with trio.CancelScope() as client_scope:
            async with rstreams.connect(url.format(port=listener_port(front))) as peer:
                async with peer.subscribe(name, prefetch=8) as elements:
                    seen = 0
                    async for _ in elements:
                        seen += 1
                        if seen == 5:
                            [upstream] = upstreams
                            _reset(upstream)  # the server's side: a peer that vanished
                            client_scope.cancel()  # (the client is not under test)
        assert client_scope.cancelled_caught
        while server.connections:
            await trio.sleep(0.01)
    records = [record for record in caplog.records if record.name.startswith("rstreams")]
    # The session's two lines, as rstreams serve logs its own: it opened,
    # and one line that says what ended it.
    events = [getattr(record, "event", None) for record in records]
    assert events == ["session_open", "session_close"], [r.getMessage() for r in records]
    for record in records:
        assert record.levelno == logging.INFO and record.exc_info is None, (record.levelname, record.getMessage())
        assert record.peer.startswith("127.0.0.1:") and record.transport == bridge  # type: ignore[attr-defined]
    message = records[1].getMessage()
    assert "group" not in message and "?" not in message, message  # the error itself, and who it was
    assert "Traceback" not in caplog.text


@pytest.mark.parametrize("bridge", sorted(SERVERS))
async def test_every_bridge_s_connections_keep_tcp_alive(bridge: str, nursery: trio.Nursery) -> None:
    # The other way a peer vanishes: without a word (power loss, a
    # partition). MicroMsg2 and Epoxy have no ping, so only the kernel's
    # keepalive probes would ever find it: on, by default, both ends.
    server, port, url, name = await _serve(bridge, nursery)
    with trio.fail_after(20):
        async with rstreams.connect(url.format(port=port)) as peer:
            async with peer.subscribe(name, prefetch=8) as elements:
                async for _ in elements:
                    break
            [connection] = server.connections
            for sock in (connection.stream.socket, _client_socket(peer)):
                assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
                assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE) == 60


def _client_socket(peer: object) -> socket.socket:
    # The client's side: the connection under the peer, whatever its class.
    link = getattr(peer, "link", None)  # (Relink: the link's current connection)
    for connection in (getattr(peer, "connection", None), getattr(peer, "_connection", None), getattr(link, "connection", None)):
        stream = getattr(connection, "stream", None)
        if isinstance(stream, trio.SocketStream):
            return stream.socket
    raise AssertionError(f"no socket found under {peer!r}")


@pytest.mark.parametrize("bridge", sorted(SERVERS))
async def test_a_connection_that_ends_normally_is_its_session_s_two_lines(
    bridge: str, nursery: trio.Nursery, caplog: pytest.LogCaptureFixture
) -> None:
    # What an operator sees of every bridge's clients, as of rstreams serve's
    # own: who came, over what, and why they left. (Bridges logged nothing
    # of a client that came and went normally.)
    caplog.set_level(logging.INFO)
    _, port, url, _ = await _serve(bridge, nursery)
    with trio.fail_after(20):
        async with rstreams.connect(url.format(port=port)) as peer:
            assert len(await peer.fetch("range?count=2", 5)) == 2
        while any(getattr(r, "event", None) == "session_close" for r in caplog.records) is False:
            await trio.sleep(0.01)
    records = [r for r in caplog.records if r.name.startswith("rstreams")]
    assert [getattr(r, "event", None) for r in records] == ["session_open", "session_close"], [r.getMessage() for r in records]
    opened, closed = records
    assert opened.peer == closed.peer and opened.peer.startswith("127.0.0.1:")  # type: ignore[attr-defined]
    assert opened.transport == closed.transport == bridge  # type: ignore[attr-defined]
    assert closed.reason  # type: ignore[attr-defined]
    assert closed.getMessage() == f"session closed: {closed.peer} over {bridge}{' (link 1)' if bridge == 'relink' else ''}: {closed.reason}"  # type: ignore[attr-defined]
