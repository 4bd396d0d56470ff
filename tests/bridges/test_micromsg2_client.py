"""``mm2://`` as an :class:`rstreams.Peer`: the window from the first demand, early exits, refusals."""

from __future__ import annotations

import sys
from functools import partial

import pytest
import trio

import examples.demo
import rstreams
from bridges.micromsg2 import (
    ExtensionSpec,
    MicroMsg2AppServer,
    MicroMsg2Connection,
    MicroMsg2Server,
    MicroMsg2Settings,
    PeerError,
    Subscribe,
    Unsubscribe,
)
from rstreams.support import listener_url

BROKERISH = MicroMsg2Settings(optional=(ExtensionSpec.batch_ack(64), ExtensionSpec(name="pubsub")))


GENEROUS = MicroMsg2Settings(optional=(ExtensionSpec.batch_ack(1024), ExtensionSpec(name="pubsub")))


async def complete_recording_window(windows: list[int | None], connection: MicroMsg2Connection) -> None:
    # A broker that notes the window each connection negotiated, then
    # completes the one subscription at once.
    windows.append(connection.window)
    command = await connection.receive_command()
    assert isinstance(command, Subscribe)
    await connection.complete(command.destination)


async def serve(nursery: trio.Nursery, server: MicroMsg2Server) -> str:
    [listener] = await nursery.start(partial(server.serve_tcp, "127.0.0.1", 0))
    return listener_url(listener, "mm2")


async def test_the_window_is_the_first_subscriber_s_demand(nursery: trio.Nursery) -> None:
    windows: list[int | None] = []
    record = partial(complete_recording_window, windows)

    url = await serve(nursery, MicroMsg2Server(record, settings=BROKERISH))
    with trio.fail_after(10):
        async with rstreams.connect(url) as peer:
            async with peer.subscribe("x", prefetch=5) as stream:
                assert [element async for element in stream] == []
        async with rstreams.connect(url + "?window=3") as peer:
            async with peer.subscribe("x", prefetch=5) as stream:
                assert [element async for element in stream] == []
    assert windows == [5, 3]


async def test_an_adaptive_subscriber_gets_the_largest_window_not_its_first_demand(nursery: trio.Nursery) -> None:
    # With no prefetch the demand starts at 16 and grows while the consumer
    # keeps up: a window fixed at 16 would hold it at 16 for the whole
    # connection, so it asks for the largest window (1024) instead, and
    # the broker's smaller suggestion (64) still wins.
    windows: list[int | None] = []
    record = partial(complete_recording_window, windows)

    for settings in (GENEROUS, BROKERISH):
        url = await serve(nursery, MicroMsg2Server(record, settings=settings))
        with trio.fail_after(10):
            async with rstreams.connect(url) as peer:
                async with peer.subscribe("x") as stream:
                    assert [element async for element in stream] == []
    assert windows == [1024, 64]


async def test_demand_by_hand_that_adapts_gets_the_largest_window_too(nursery: trio.Nursery) -> None:
    # `rstreams sub` asks by hand (prefetch=0, to stop at --count) with an
    # adaptive window of its own, which starts at 16: the window was fixed
    # at 16, and `sub mm2://` ran at a third of the rate the API's default
    # subscription gets. Subscription.adaptive says so; the CLI sets it
    # without --prefetch, and not with it.
    windows: list[int | None] = []
    record = partial(complete_recording_window, windows)

    url = await serve(nursery, MicroMsg2Server(record, settings=GENEROUS))
    with trio.fail_after(30):
        async with rstreams.connect(url) as peer:
            subscription = peer.subscribe("x", prefetch=0)
            subscription.adaptive = True
            async with subscription:
                subscription.request(16)
                assert [element async for element in subscription] == []
        for options in ([], ["--prefetch", "16"]):
            result = await trio.run_process(
                [sys.executable, "-m", "rstreams", "sub", url, "x", *options], capture_stdout=True, capture_stderr=True
            )
            assert result.returncode == 0, result.stderr
    assert windows == [1024, 1024, 16]


async def test_leaving_early_unsubscribes(nursery: trio.Nursery) -> None:
    commands: list[object] = []
    done = trio.Event()

    async def stream_forever(connection: MicroMsg2Connection) -> None:
        command = await connection.receive_command()
        assert isinstance(command, Subscribe)
        commands.append(command)
        async with trio.open_nursery() as inner:

            async def send() -> None:
                n = 0
                while True:
                    await connection.send_message(command.destination, str(n).encode())
                    n += 1

            inner.start_soon(send)
            commands.append(await connection.receive_command())
            inner.cancel_scope.cancel()
        done.set()

    url = await serve(nursery, MicroMsg2Server(stream_forever, settings=BROKERISH))
    with trio.fail_after(10):
        async with rstreams.connect(url) as peer:
            async with peer.subscribe("numbers", prefetch=4) as stream:
                got = [bytes(await stream.__anext__()) for _ in range(3)]
            await done.wait()
    assert got == [b"0", b"1", b"2"]
    assert commands == [Subscribe(destination="numbers"), Unsubscribe(destination="numbers")]


async def test_a_peer_that_never_subscribes_just_closes(nursery: trio.Nursery) -> None:
    url = await serve(nursery, MicroMsg2AppServer(examples.demo.app))
    with trio.fail_after(10):
        async with rstreams.connect(url):
            pass


async def test_a_refused_handshake_fails_the_first_subscription(nursery: trio.Nursery) -> None:
    held = trio.Event()

    async def hold(connection: MicroMsg2Connection) -> None:
        await held.wait()

    server = MicroMsg2Server(hold, settings=BROKERISH, max_connections=1)
    url = await serve(nursery, server)
    with trio.fail_after(10):
        # The first peer's connection takes the server's only slot (its
        # handshake done once it asks for an element, which never comes);
        # the second peer's handshake is refused, and its first subscription
        # says so. (A first connection still in its handshake would give
        # its slot to the second: a full server makes room from those.)
        async with rstreams.connect(url) as first:
            async with trio.open_nursery() as waiting:
                waiting.start_soon(partial(first.fetch, "x", 1))  # (answered never: hold)
                while not server.connections:  # (its handshake done: in the handler)
                    await trio.sleep(0.01)
                async with rstreams.connect(url) as second:
                    with pytest.raises(PeerError) as caught:
                        await second.fetch("x", 1)
                    assert caught.value.message == "server busy"
                waiting.cancel_scope.cancel()
            held.set()


async def test_an_unreachable_broker_fails_connect(nursery: trio.Nursery) -> None:
    listener = trio.socket.socket()
    await listener.bind(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    listener.close()  # nothing listens there now
    with trio.fail_after(10):
        with pytest.raises(OSError):
            async with rstreams.connect(f"mm2://127.0.0.1:{port}"):
                pass  # pragma: no cover
