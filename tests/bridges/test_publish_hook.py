"""``Bridge.publish``: elements into a topic over MicroMsg2 and Epoxy, paced by each protocol.

Called through the registry, as ``rstreams pub`` does, against servers in
this process on 127.0.0.1.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from functools import partial

import pytest
import trio
import trio.testing

import rstreams
from bridges.epoxy import EpoxyAppServer
from bridges.micromsg2 import ExtensionSpec, MicroMsg2Connection, MicroMsg2Server, MicroMsg2Settings
from rstreams.support import PublishFunction, find_scheme, listener_url

BROKERISH = MicroMsg2Settings(optional=(ExtensionSpec.batch_ack(64), ExtensionSpec(name="pubsub")))


def publish_hook(scheme: str) -> PublishFunction:
    bridge, _ = find_scheme(f"{scheme}://127.0.0.1:1", scheme)
    assert bridge.publish is not None
    return bridge.publish


class Counted:
    """``count`` elements, counting how many were pulled."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.pulled = 0

    def __aiter__(self) -> Counted:
        return self

    async def __anext__(self) -> bytes:
        await trio.lowlevel.checkpoint()
        if self.pulled == self.count:
            raise StopAsyncIteration
        self.pulled += 1
        return b"%d" % (self.pulled - 1)


def test_the_bridges_that_cannot_publish_say_so() -> None:
    for scheme in ("emp", "relink"):
        bridge, _ = find_scheme(f"{scheme}://127.0.0.1:1", scheme)
        assert bridge.publish is None


async def test_mm2_sends_no_more_than_the_window_ahead_of_the_acks(nursery: trio.Nursery) -> None:
    received: list[tuple[str, bytes]] = []
    window_full = trio.Event()
    release = trio.Event()

    async def broker(connection: MicroMsg2Connection) -> None:
        while True:
            try:
                message = await connection.receive_send()
            except trio.EndOfChannel:
                return
            received.append((message.destination, message.payload))
            if len(received) == 3:
                window_full.set()
                await release.wait()
                connection.acknowledge(3)
            elif len(received) > 3:
                connection.acknowledge(1)

    [listener] = await nursery.start(partial(MicroMsg2Server(broker, settings=BROKERISH).serve_tcp, "127.0.0.1", 0))
    url = listener_url(listener, "mm2") + "?window=3"
    elements = Counted(10)
    published: list[int] = []

    async def publish() -> None:
        published.append(await publish_hook("mm2")(url, "chat", elements))

    with trio.fail_after(10):
        async with trio.open_nursery() as inner:
            inner.start_soon(publish)
            await window_full.wait()
            await trio.testing.wait_all_tasks_blocked()
            # Three sent and unacknowledged, the fourth pulled and waiting
            # for the window: nothing more is read from the input.
            assert elements.pulled == 4
            assert not published
            release.set()
    assert published == [10]
    assert received == [("chat", b"%d" % n) for n in range(10)]


@pytest.fixture
async def epoxy_app(nursery: trio.Nursery) -> AsyncIterator[tuple[str, rstreams.Router, rstreams.Topic]]:
    app = rstreams.Router()
    notes = rstreams.Topic("notes", capacity=64)
    notes.mount(app)
    server = EpoxyAppServer(app)
    [listener] = await nursery.start(partial(server.serve_tcp, "127.0.0.1", 0))
    yield listener_url(listener, "epoxy"), app, notes
    await server.aclose()


async def test_epoxy_publishes_every_element_into_the_topic_in_order(
    epoxy_app: tuple[str, rstreams.Router, rstreams.Topic],
) -> None:
    url, app, notes = epoxy_app
    with trio.fail_after(10):
        elements = Counted(20)
        assert await publish_hook("epoxy")(url, "notes", elements) == 20
        assert elements.pulled == 20
        # Events have no answer: the server runs those it read before the
        # close on its own tasks, in this process.
        while notes.statistics().published < 20:
            await trio.testing.wait_all_tasks_blocked()
            await trio.sleep(0.01)
        async with rstreams.open_local_session(app) as session:
            async with session.subscribe("notes?history=20&until=now") as stream:
                assert [bytes(element) async for element in stream] == [b"%d" % n for n in range(20)]


async def test_epoxy_refuses_a_topic_name_with_parameters(epoxy_app: tuple[str, rstreams.Router, rstreams.Topic]) -> None:
    url, _, _ = epoxy_app
    with pytest.raises(ValueError, match="not a topic name"):
        await publish_hook("epoxy")(url, "notes?x=1", Counted(1))


async def test_epoxy_into_a_topic_that_holds_it_back_delivers_every_event(nursery: trio.Nursery) -> None:
    # A topic that holds 4 and a subscriber that reads nothing until told:
    # the server takes events only as the topic has room, so the topic
    # holds 4 and the rest of 2 MiB of events wait, in the server's socket
    # and in the client. Once the subscriber reads, every event arrives, in
    # order of count.
    app = rstreams.Router()
    notes = rstreams.Topic("notes", capacity=4)
    notes.mount(app)
    server = EpoxyAppServer(app)
    [listener] = await nursery.start(partial(server.serve_tcp, "127.0.0.1", 0))
    url = listener_url(listener, "epoxy")
    count = 2048
    value = b"x" * 1024
    read: list[bytes] = []
    published: list[int] = []

    class Values(Counted):
        async def __anext__(self) -> bytes:
            await super().__anext__()
            return value

    with trio.fail_after(20):
        async with rstreams.open_local_session(app) as session:
            async with session.subscribe("notes", prefetch=0) as stream:
                # The topic holds back publishers only for a subscriber it
                # has registered; with none it keeps its last 4 and takes
                # everything, so publish must not start before the server
                # side has taken the subscribe (under load it may not have).
                while not notes.statistics().subscribers:
                    await trio.sleep(0.01)

                async def publish() -> None:
                    published.append(await publish_hook("epoxy")(url, "notes", Values(count)))

                async with trio.open_nursery() as inner:
                    inner.start_soon(publish)
                    while notes.statistics().published < 4:
                        await trio.sleep(0.01)
                    await trio.testing.wait_all_tasks_blocked(0.05)
                    # Held back: the topic took what it holds for a
                    # subscriber that reads nothing, and no more. (Whether
                    # publish has returned is the host's: Epoxy events have
                    # no answer, so it counts events written, and loopback
                    # buffers that autotune up to tcp_rmem's maximum, 32 MiB
                    # here, took all 2 MiB in 2 of 30 runs beside two busy
                    # loops.)
                    assert notes.statistics().published == 4
                    stream.request(count)
                    async for element in stream:
                        read.append(bytes(element))
                        if len(read) == count:
                            break
        assert published == [count]
    assert len(read) == count
