"""A closed session is freed at once, by reference counting alone.

With the cycle collector off, a session that has closed (for any reason)
and that nobody refers to any more must be gone: every reference cycle
through it is broken when it closes, so its buffers are not held until the
collector happens to run. Each test holds only a weak reference.
"""

from __future__ import annotations

import gc
import logging
import socket
import struct
import weakref
from collections.abc import Awaitable, Callable, Iterator

import pytest
import trio
import trio.testing

import rstreams
from rstreams.protocol import Goodbye, Hello, Ping, Subscribe, encode

from ._support import RawPeer, fetch_range, standard_app

Scenario = Callable[[RawPeer, trio.abc.Stream], Awaitable[None]]


@pytest.fixture
def no_cycle_collector(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    # pytest's log capture keeps every record, and a record of a failing
    # publisher keeps its traceback, whose frames hold the session: keep
    # the runtime's records away from it (a handler that writes them out,
    # as logging normally does, keeps nothing).
    monkeypatch.setattr(logging.getLogger("rstreams"), "disabled", True)
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


async def failing(sink: rstreams.Sink, request: rstreams.SubscribeRequest) -> None:
    await sink.send(b"x")
    raise RuntimeError("publisher failed")


async def goodbye(peer: RawPeer, raw: trio.abc.Stream) -> None:
    await peer.send(Hello(), Subscribe(publisher="range?count=5", subscriber=1, initial_demand=5))
    await peer.send(Subscribe(publisher="failing", subscriber=2, initial_demand=5), Goodbye(reason="bye"))
    await peer.rest()


async def protocol_error(peer: RawPeer, raw: trio.abc.Stream) -> None:
    await peer.send(Hello(), Subscribe(publisher="range?count=5", subscriber=1, initial_demand=1))
    await peer.send_raw(b"\xc1")
    await peer.rest()


async def protocol_error_after_events(peer: RawPeer, raw: trio.abc.Stream) -> None:
    # Events first, then the error in the same read (the deferred error path).
    await peer.send_raw(encode(Hello()) + encode(Subscribe(publisher="range", subscriber=1)) + b"\xc1")
    await peer.rest()


async def ping_without_keepalive(peer: RawPeer, raw: trio.abc.Stream) -> None:
    await peer.send(Hello(), Ping(nonce=1))
    await peer.rest()


async def end_of_stream(peer: RawPeer, raw: trio.abc.Stream) -> None:
    await peer.send(Hello(), Subscribe(publisher="range?count=100000000", subscriber=1, initial_demand=10**9))
    await peer.receive()
    await peer.aclose()


async def reset(peer: RawPeer, raw: trio.abc.Stream) -> None:
    await peer.send(Hello(), Subscribe(publisher="range?count=100000000", subscriber=1, initial_demand=10**9))
    await peer.receive()
    assert isinstance(raw, trio.SocketStream)
    raw.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    await peer.aclose()


SCENARIOS = {
    "goodbye": goodbye,
    "protocol error": protocol_error,
    "protocol error after events": protocol_error_after_events,
    "ping without keepalive": ping_without_keepalive,
    "end of stream": end_of_stream,
    "reset": reset,
}


async def tcp_pair() -> tuple[trio.SocketStream, trio.SocketStream]:
    [listener] = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listener.socket.getsockname()[1]
    client = await trio.open_tcp_stream("127.0.0.1", port)
    server = await listener.accept()
    await listener.aclose()
    return client, server


async def serve_one(stream: trio.abc.Stream, refs: list[weakref.ref[rstreams.Session]]) -> None:
    app = standard_app(failing=failing)
    async with rstreams.open_stream_session(stream, app=app, config=rstreams.SessionConfig(goodbye_timeout=1)) as session:
        refs.append(weakref.ref(session))
        await session.wait_closed()


@pytest.mark.parametrize("scenario", SCENARIOS.values(), ids=SCENARIOS.keys())
async def test_a_closed_server_session_is_freed_without_the_cycle_collector(
    no_cycle_collector: None, scenario: Scenario
) -> None:
    refs: list[weakref.ref[rstreams.Session]] = []
    with trio.fail_after(30):
        client_stream, server_stream = await tcp_pair()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(serve_one, server_stream, refs)
            await scenario(RawPeer(client_stream), client_stream)
        del server_stream
    [ref] = refs
    assert ref() is None, gc.get_referrers(ref())


@pytest.mark.parametrize("transport", ["memory", "tcp"])
async def test_closed_client_and_server_sessions_are_freed(no_cycle_collector: None, transport: str) -> None:
    refs: list[weakref.ref[rstreams.Session]] = []
    with trio.fail_after(30):
        if transport == "tcp":
            client_stream, server_stream = await tcp_pair()
        else:
            client_stream, server_stream = trio.testing.memory_stream_pair()  # type: ignore[assignment]
        async with trio.open_nursery() as nursery:
            nursery.start_soon(serve_one, server_stream, refs)
            async with rstreams.open_stream_session(client_stream) as client:
                refs.append(weakref.ref(client))
                await fetch_range(client)
                async with client.subscribe("range?count=1000000", prefetch=16) as numbers:
                    async for _ in numbers:
                        break
                del numbers
                assert await client.fetch("range?count=3", 3)
                with pytest.raises(rstreams.PublisherError):
                    await client.fetch("failing", 5)
                # An adaptive window (prefetch None) asks its subscription
                # for the demand outstanding, and the subscription holds it.
                async with client.subscribe("range?count=100", prefetch=None) as adaptive:
                    assert len([_ async for _ in adaptive]) == 100
                del adaptive
                with pytest.raises(rstreams.PublisherError):
                    async with client.subscribe("failing", prefetch=None) as failing_stream:
                        async for _ in failing_stream:
                            pass
                del failing_stream
                with pytest.raises(rstreams.UnknownPublisher):
                    async with client.subscribe("nothing"):
                        pass  # pragma: no cover
            del client
        del client_stream, server_stream
    assert len(refs) == 2
    assert [ref() for ref in refs] == [None, None]
