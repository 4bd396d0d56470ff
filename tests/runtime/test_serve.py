"""Servers and clients over real sockets: serve_tcp, open_session, TLS, limits, shutdown."""

from __future__ import annotations

import functools
import logging
import ssl

import pytest
import trio
import trio.testing

import rstreams
from rstreams.support import HANDSHAKE_GRACE
from rstreams.protocol import Goodbye, Hello, OnComplete, Subscribe

from ._support import (
    RawPeer,
    fetch_range,
    standard_app,
    wait_for,
    wait_no_session_tasks,
)


async def test_serve_tcp_and_open_session() -> None:
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            listeners = await nursery.start(rstreams.serve_tcp, standard_app(), "127.0.0.1", 0)
            assert len(listeners) == 1 and isinstance(listeners[0], trio.SocketListener)
            port = rstreams.listener_port(listeners[0])
            assert port > 0
            async with rstreams.open_session(f"tcp://127.0.0.1:{port}") as client:
                await fetch_range(client, 300)
            nursery.cancel_scope.cancel()


async def test_serve_tls_and_open_session(server_ssl_context: ssl.SSLContext, client_ssl_context: ssl.SSLContext) -> None:
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            listeners = await nursery.start(rstreams.serve_tcp, standard_app(), "127.0.0.1", 0, server_ssl_context)
            assert isinstance(listeners[0], trio.SSLListener)
            port = rstreams.listener_port(listeners[0])
            async with rstreams.open_session(f"tls://127.0.0.1:{port}", ssl_context=client_ssl_context) as client:
                await fetch_range(client, 300)
                async with client.subscribe("blob?count=2&size=300000", prefetch=1) as blobs:
                    assert [len(b) async for b in blobs] == [300_000, 300_000]  # type: ignore[arg-type]
            nursery.cancel_scope.cancel()


async def test_tls_with_an_untrusted_certificate(server_ssl_context: ssl.SSLContext) -> None:
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            listeners = await nursery.start(rstreams.serve_tcp, standard_app(), "127.0.0.1", 0, server_ssl_context)
            port = rstreams.listener_port(listeners[0])
            # The default context trusts the system roots, not our test CA.
            async with rstreams.open_session(f"tls://127.0.0.1:{port}") as client:
                with pytest.raises(rstreams.SessionBroken) as info:
                    async with client.subscribe("range"):
                        pass  # pragma: no cover
            assert info.value.by_peer is True
            cause = info.value.__cause__
            assert isinstance(cause, trio.BrokenResourceError)
            assert isinstance(cause.__cause__, ssl.SSLCertVerificationError)
            nursery.cancel_scope.cancel()


async def test_connection_lost_reason_names_the_error(server_ssl_context: ssl.SSLContext) -> None:
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            listeners = await nursery.start(rstreams.serve_tcp, standard_app(), "127.0.0.1", 0, server_ssl_context)
            port = rstreams.listener_port(listeners[0])
            async with rstreams.open_session(f"tls://127.0.0.1:{port}") as client:
                with pytest.raises(rstreams.SessionBroken) as info:
                    async with client.subscribe("range"):
                        pass  # pragma: no cover
            nursery.cancel_scope.cancel()
    assert not info.value.reason.endswith(": "), repr(info.value.reason)
    # The transport error says nothing itself; its cause (the TLS failure) does.
    assert "CERTIFICATE_VERIFY_FAILED" in info.value.reason


async def test_a_full_server_closes_the_oldest_connection_without_hello_for_a_new_one(caplog: pytest.LogCaptureFixture) -> None:
    # Silent sockets held every place until the handshake timeout (10 s):
    # 150 of them kept real clients out of a --max-connections 50 server.
    # Now a new connection on a full server takes the place of the oldest
    # that has not said hello; one that has is never closed for another.
    caplog.set_level(logging.INFO, logger="rstreams")
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            listeners = await nursery.start(
                functools.partial(rstreams.serve_tcp, standard_app(), "127.0.0.1", 0, max_connections=3)
            )
            port = rstreams.listener_port(listeners[0])
            url = f"tcp://127.0.0.1:{port}"
            async with rstreams.open_session(url) as established:
                await fetch_range(established)
                silent = [RawPeer(await trio.open_tcp_stream("127.0.0.1", port)) for _ in range(2)]
                await trio.sleep(HANDSHAKE_GRACE)  # (before it, a connection is never closed for another)
                # Full: one established, two silent. A client comes: the oldest silent one goes.
                async with rstreams.open_session(url) as newcomer:
                    await fetch_range(newcomer)
                    busy = Goodbye(reason="server busy: no handshake yet, closed for a new connection (3 open)")
                    assert (await silent[0].rest())[1:] == [busy]  # (after our hello: why, then the end)
                    # And the next takes the other silent one's place.
                    async with rstreams.open_session(url) as third:
                        await fetch_range(third)
                        assert (await silent[1].rest())[1:] == [busy]
                        # Now every place is held by a peer that said hello: refused.
                        refused = RawPeer(await trio.open_tcp_stream("127.0.0.1", port))
                        answer = await refused.rest()
                        assert answer[1:] == [Goodbye(reason="server busy: 3 connections already open")], answer
                        await fetch_range(established)
            nursery.cancel_scope.cancel()
    closes = [r.getMessage() for r in caplog.records if "no handshake yet" in r.getMessage()]
    assert len(closes) == 2, closes
    assert all(close.startswith("session closed: 127.0.0.1:") and close.endswith(
        ": server busy: no handshake yet, closed for a new connection (3 open)") for close in closes), closes


async def test_a_burst_of_clients_beyond_the_limit_is_refused_with_goodbye_and_nobody_cut() -> None:
    # Real clients say hello at once; in a burst, a newcomer may come before
    # the earlier ones' hellos were read. Within HANDSHAKE_GRACE nobody is
    # closed for it: the newcomers beyond the limit are refused with goodbye
    # "server busy", as they always were, and every other client is served.
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            listeners = await nursery.start(
                functools.partial(rstreams.serve_tcp, standard_app(), "127.0.0.1", 0, max_connections=5)
            )
            port = rstreams.listener_port(listeners[0])
            peers = [RawPeer(await trio.open_tcp_stream("127.0.0.1", port)) for _ in range(8)]
            for peer in peers:
                await peer.send(Hello(), Subscribe(publisher="range?count=1", subscriber=1, initial_demand=1))
            outcomes = []
            for peer in peers:
                messages = [await peer.receive()]
                while not isinstance(messages[-1], (OnComplete, Goodbye)):
                    messages.append(await peer.receive())
                outcomes.append(messages[-1])
            served = [outcome for outcome in outcomes if isinstance(outcome, OnComplete)]
            refused = [outcome for outcome in outcomes if isinstance(outcome, Goodbye)]
            assert len(served) == 5 and len(refused) == 3, outcomes
            assert all(goodbye.reason == "server busy: 5 connections already open" for goodbye in refused), refused
            for peer in peers:
                await peer.aclose()
            nursery.cancel_scope.cancel()


async def test_max_connections_refuses_with_server_busy() -> None:
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            listeners = await nursery.start(
                functools.partial(rstreams.serve_tcp, standard_app(), "127.0.0.1", 0, max_connections=1)
            )
            url = f"tcp://127.0.0.1:{rstreams.listener_port(listeners[0])}"
            async with rstreams.open_session(url) as first:
                await fetch_range(first)  # the first session is up and served
                # A raw client sees hello, then goodbye, then the end.
                peer = RawPeer(await trio.open_tcp_stream("127.0.0.1", rstreams.listener_port(listeners[0])))
                messages = await peer.rest()
                assert messages == [Hello(), Goodbye(reason="server busy: 1 connections already open")]
                # A real client sees its session closed by the peer.
                async with rstreams.open_session(url) as second:
                    with pytest.raises(rstreams.SessionClosed) as info:
                        async with second.subscribe("range"):
                            pass  # pragma: no cover
                    assert info.value.by_peer is True
                    assert info.value.reason.startswith("server busy")
                # The first is still served.
                await fetch_range(first)
            nursery.cancel_scope.cancel()


async def test_max_connections_frees_a_slot_when_a_session_ends() -> None:
    server = rstreams.Server(standard_app(), max_connections=1)
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            listeners = await nursery.start(server.serve_tcp, "127.0.0.1", 0)
            url = f"tcp://127.0.0.1:{rstreams.listener_port(listeners[0])}"
            for _ in range(3):
                async with rstreams.open_session(url) as client:
                    await fetch_range(client)
                await wait_for(lambda: not server.sessions)
            nursery.cancel_scope.cancel()


async def test_max_connections_holds_for_connections_arriving_together() -> None:
    server = rstreams.Server(standard_app(), max_connections=1)
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            peers = []
            for _ in range(2):
                client_stream, server_stream = trio.testing.memory_stream_pair()
                nursery.start_soon(server.serve_stream, server_stream)
                peers.append(RawPeer(client_stream))
            await trio.testing.wait_all_tasks_blocked()
            assert len(server.sessions) <= 1
            nursery.cancel_scope.cancel()


async def test_server_aclose_says_goodbye_to_every_session() -> None:
    server = rstreams.Server(standard_app())
    errors: list[rstreams.SessionClosed] = []

    async def client_task(url: str, subscribed: trio.Event) -> None:
        async with rstreams.open_session(url) as client:
            async with client.subscribe("range?count=1000000", prefetch=4) as numbers:
                subscribed.set()
                try:
                    async for _ in numbers:
                        pass
                except rstreams.SessionClosed as exc:
                    errors.append(exc)

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            listeners = await nursery.start(server.serve_tcp, "127.0.0.1", 0)
            url = f"tcp://127.0.0.1:{rstreams.listener_port(listeners[0])}"
            async with trio.open_nursery() as clients:
                for _ in range(3):
                    subscribed = trio.Event()
                    clients.start_soon(client_task, url, subscribed)
                    await subscribed.wait()
                assert len(server.sessions) == 3
                sessions = server.sessions
                await server.aclose()
                assert all(session.closed for session in sessions)
            assert [(e.reason, e.by_peer, type(e)) for e in errors] == [
                ("server shutting down", True, rstreams.SessionClosed)
            ] * 3
            # New connections are refused politely.
            peer = RawPeer(await trio.open_tcp_stream("127.0.0.1", rstreams.listener_port(listeners[0])))
            assert await peer.rest() == [Hello(), Goodbye(reason="server shutting down")]
            await wait_no_session_tasks()
            nursery.cancel_scope.cancel()


async def test_handler_nursery_keeps_sessions_after_the_listener_stops() -> None:
    with trio.fail_after(10):
        async with trio.open_nursery() as handlers:
            listening = trio.CancelScope()

            async def listen(task_status: trio.TaskStatus[list[trio.SocketListener]]) -> None:
                with listening:
                    await rstreams.serve_tcp(
                        standard_app(), "127.0.0.1", 0, handler_nursery=handlers, task_status=task_status
                    )

            listeners = await handlers.start(listen)
            port = rstreams.listener_port(listeners[0])
            async with rstreams.open_session(f"tcp://127.0.0.1:{port}") as client:
                await fetch_range(client)
                listening.cancel()
                await trio.testing.wait_all_tasks_blocked()
                await fetch_range(client)  # still served
                with pytest.raises(OSError):
                    await trio.open_tcp_stream("127.0.0.1", port)
            handlers.cancel_scope.cancel()


async def test_serve_stream_function_returns_when_the_session_ends() -> None:
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            client_stream, server_stream = trio.testing.memory_stream_pair()
            done = trio.Event()

            async def serve() -> None:
                await rstreams.serve_stream(standard_app(), server_stream)
                done.set()

            nursery.start_soon(serve)
            async with rstreams.open_stream_session(client_stream) as client:
                await fetch_range(client)
                assert not done.is_set()
            await done.wait()


def test_server_arguments() -> None:
    with pytest.raises(ValueError):
        rstreams.Server(standard_app(), max_connections=0)
    server = rstreams.Server(standard_app(), max_connections=3)
    assert server.sessions == frozenset()
    assert server.max_connections == 3


# ---- a peer that resets the connection ------------------------------------------


@pytest.mark.parametrize("when", ["idle", "streaming", "websocket streaming"])
async def test_a_peer_resetting_the_connection_is_at_most_one_log_line(caplog, when: str) -> None:
    import logging
    import socket
    import struct

    from rstreams.protocol import Subscribe, encode

    from ._support import new_session

    caplog.set_level(logging.INFO)
    server = rstreams.Server(standard_app())
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            websocket = when.startswith("websocket")
            serve = server.serve_websocket if websocket else server.serve_tcp
            listeners = await nursery.start(serve, "127.0.0.1", 0)
            port = rstreams.listener_port(listeners[0])
            stream = await trio.open_tcp_stream("127.0.0.1", port)
            hello = encode(Hello())
            if when != "idle":
                hello += encode(Subscribe(publisher="range?count=100000000", subscriber=1, initial_demand=10**9))
            if websocket:
                from wsproto import WSConnection
                from wsproto.connection import ConnectionType
                from wsproto.events import AcceptConnection, BytesMessage, Request

                client = WSConnection(ConnectionType.CLIENT)
                await stream.send_all(client.send(Request(host="127.0.0.1", target="/", subprotocols=["rstreams.v0"])))
                accepted = False
                while not accepted:
                    client.receive_data(await stream.receive_some(65536))
                    accepted = any(isinstance(event, AcceptConnection) for event in client.events())
                hello = client.send(BytesMessage(data=hello))
            await stream.send_all(hello)
            session = await new_session(server)
            await stream.receive_some(65536)  # served: something came back
            stream.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            stream.socket.close()  # a reset (RST), not a FIN
            await session.wait_closed()
            nursery.cancel_scope.cancel()
    assert session.close_reason is not None  # (a reset, or end of stream: the kernel decides)
    # The session's opening is logged at info too: the reset is one line more.
    records = [
        record
        for record in caplog.records
        if record.name.startswith("rstreams") and not record.getMessage().startswith("session open:")
    ]
    assert len(records) <= 1, [record.getMessage() for record in records]
    assert all(record.exc_info is None for record in records)
    assert "Traceback" not in caplog.text
