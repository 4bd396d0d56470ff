"""The MicroMsg2 broker (``MicroMsg2AppServer``) over real sockets.

Subscribe, complete, stream errors, unsubscribe, several subscriptions on one
connection, the window as demand, topics with filters and properties, and a
3 MiB element both ways. Where the frames matter, the client is a bare
sans-I/O machine over the socket (``micromsg2_raw``): it acks only when the
test says so, and refuses a server that sends past the window.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime, timezone
from functools import partial

import pytest
import trio
import trio.testing
from conftest import add_idle_publisher
from micromsg2_raw import PUBSUB, RawClient

import examples.demo
import rstreams
from bridges.micromsg2 import (
    ENVELOPE_MAGIC,
    Acknowledged,
    Completed,
    Connection,
    ExtensionSpec,
    HandshakeCompleted,
    MessageReceived,
    MicroMsg2AppServer,
    MicroMsg2Connection,
    MicroMsg2Settings,
    Role,
    SendRefused,
    SendsRefused,
    StreamError,
    StreamFailed,
    UnixTime,
    open_micromsg2_connection,
    unwrap,
)
from bridges.micromsg2._client import publish_mm2_url  # (what `rstreams pub mm2://` calls)
from rstreams.support import listener_port

BIG = bytes(range(256)) * (3 * 1024 * 1024 // 256)  # 3 MiB: three CONTINUED frames
CLIENT = MicroMsg2Settings(required=(PUBSUB,), optional=(ExtensionSpec.batch_ack(4),))


def number(n: int) -> bytes:
    return n.to_bytes(8, "big")


@dataclass
class Served:
    port: int
    server: MicroMsg2AppServer
    chat: rstreams.Topic
    counted: list[int]
    gate_open: trio.Event
    gate_cancelled: trio.Event
    idle_asked: trio.MemoryReceiveChannel[str]

    def connection(self) -> MicroMsg2Connection:
        [connection] = self.server.connections
        return connection


@pytest.fixture
async def served(nursery: trio.Nursery) -> AsyncIterator[Served]:
    app = rstreams.Router()
    for path in ("range", "fail"):
        route = examples.demo.app.resolve(path)
        assert route is not None
        app.add(path, route)
    gate_open, gate_cancelled = trio.Event(), trio.Event()

    @app.publisher("gate")
    async def gate(sink: rstreams.Sink, request: rstreams.SubscribeRequest) -> None:
        try:
            await gate_open.wait()
            await sink.send(b"open")
        except trio.Cancelled:
            gate_cancelled.set()
            raise

    @app.publisher("big")
    async def big(sink: rstreams.Sink, request: rstreams.SubscribeRequest) -> None:
        await sink.send(BIG)

    counted: list[int] = []
    idle_asked = add_idle_publisher(app)

    @app.publisher("count")
    async def count(sink: rstreams.Sink, request: rstreams.SubscribeRequest) -> None:
        # Records each element the broker's demand let it send.
        for n in range(1000):
            await sink.send(number(n))
            counted.append(n)

    chat = rstreams.Topic("chat", capacity=64)
    chat.mount(app)
    server = MicroMsg2AppServer(app)
    [listener] = await nursery.start(partial(server.serve_tcp, "127.0.0.1", 0))
    yield Served(listener_port(listener), server, chat, counted, gate_open, gate_cancelled, idle_asked)


async def handshake(served: Served, **options: object) -> RawClient:
    client = await RawClient.connect(served.port, **options)  # type: ignore[arg-type]
    event = await client.next_event()
    assert isinstance(event, HandshakeCompleted)
    assert event.peer_identity == "rstreams"
    return client


async def test_subscribe_sends_the_publisher_s_elements_then_completed(served: Served) -> None:
    with trio.fail_after(10):
        client = await handshake(served, window=8)
        await client.subscribe("range?count=3")
        for n in range(3):
            message = await client.next_event()
            assert isinstance(message, MessageReceived)
            assert (message.sequence, message.destination, message.payload) == (n + 1, "range?count=3", number(n))
            assert message.properties == ()
        await client.ack(3)
        assert await client.next_event() == Completed(destination="range?count=3")


async def test_the_broker_suggests_batch_ack_64_and_pubsub(served: Served) -> None:
    with trio.fail_after(10):
        client = await handshake(served, window=None, pubsub=False)
        # A client that suggests nothing takes the broker's suggestions.
        assert [str(extension) for extension in client.machine.extensions] == ["batch-ack:max-count=64", "pubsub"]
        assert client.machine.window == 64


async def test_an_unknown_publisher_fails_that_stream_only(served: Served) -> None:
    with trio.fail_after(10):
        client = await handshake(served)
        await client.subscribe("nothing-here")
        failed = await client.next_event()
        assert isinstance(failed, StreamFailed)
        assert failed.destination == "nothing-here"
        assert failed.message.startswith("no such publisher:")
        await client.subscribe("range?count=1")  # the connection stays
        assert isinstance(await client.next_event(), MessageReceived)


async def test_a_failing_publisher_is_a_stream_error_after_its_elements(served: Served) -> None:
    with trio.fail_after(10):
        async with open_micromsg2_connection("127.0.0.1", served.port, settings=CLIENT) as mm2:
            stream = await mm2.subscribe("fail?after=2")
            got = [(await stream.receive()).payload, (await stream.receive()).payload]
            assert got == [number(0), number(1)]
            with pytest.raises(StreamError) as caught:
                await stream.receive()
            assert caught.value.destination == "fail?after=2"
            assert "failing after 2" in caught.value.message
            again = await mm2.subscribe("range?count=1")
            assert [message.payload async for message in again] == [number(0)]


async def test_the_window_is_demand(served: Served) -> None:
    # A window of 2: the broker sends two, then nothing until an ack frees
    # room; an ack of one lets exactly one more through. (The raw client's
    # machine would raise WindowExceededError at a third unacknowledged.)
    with trio.fail_after(10):
        client = await handshake(served, window=2)
        await client.subscribe("range?count=5")
        first = [await client.next_event(), await client.next_event()]
        assert [event.sequence for event in first] == [1, 2]  # type: ignore[union-attr]
        server_side = served.connection()
        assert server_side.window == 2
        assert server_side.unacknowledged == 2 and server_side.send_credit == 0
        for sequence in (3, 4, 5):
            await client.ack(1)
            message = await client.next_event()
            assert isinstance(message, MessageReceived) and message.sequence == sequence
            assert server_side.unacknowledged == 2
        await client.ack(2)
        assert await client.next_event() == Completed(destination="range?count=5")


async def test_the_publisher_is_asked_for_a_share_of_the_window_at_a_time(served: Served) -> None:
    # Window 3, no acks yet: the broker asked for one element (to learn its
    # size), then for its share of the window (3, the only subscription),
    # sent the three the window takes and holds the fourth. An ack of 2
    # lets exactly two more through (the raw client refuses a third), and
    # once what it asked for has arrived the broker asks for 3 more: the
    # publisher is never more than the window and one share ahead of the
    # acks.
    with trio.fail_after(10):
        client = await handshake(served, window=3)
        await client.subscribe("count")
        assert [(await client.next_event()).sequence for _ in range(3)] == [1, 2, 3]  # type: ignore[union-attr]
        await trio.testing.wait_all_tasks_blocked()
        assert served.counted == [0, 1, 2, 3]
        await client.ack(2)
        assert [(await client.next_event()).payload for _ in range(2)] == [number(3), number(4)]  # type: ignore[union-attr]
        await trio.testing.wait_all_tasks_blocked()
        assert served.counted == [0, 1, 2, 3, 4, 5, 6]
        assert served.connection().unacknowledged == 3  # and nothing more was sent
        await client.ack(3)
        assert [(await client.next_event()).payload for _ in range(3)] == [number(5), number(6), number(7)]  # type: ignore[union-attr]
        await trio.testing.wait_all_tasks_blocked()
        assert len(served.counted) <= 5 + 3 + 3  # acked + the window + one share


async def test_without_acks_the_broker_pushes_and_tcp_paces_it(served: Served) -> None:
    settings = MicroMsg2Settings(required=(PUBSUB,), accept=frozenset({"pubsub"}))
    with trio.fail_after(10):
        async with open_micromsg2_connection("127.0.0.1", served.port, settings=settings) as mm2:
            assert mm2.window is None
            stream = await mm2.subscribe("range?count=100")
            got = [message.payload async for message in stream]
            assert got == [number(n) for n in range(100)]


async def test_unsubscribe_cancels_that_stream_and_the_others_go_on(served: Served) -> None:
    with trio.fail_after(10):
        async with open_micromsg2_connection("127.0.0.1", served.port, settings=CLIENT) as mm2:
            gate = await mm2.subscribe("gate")
            numbers = await mm2.subscribe("range?count=3")
            gate.unsubscribe()
            await served.gate_cancelled.wait()  # the broker cancelled the upstream
            assert [message.payload async for message in numbers] == [number(n) for n in range(3)]
            # Subscribing to the same destination again is a new stream.
            served.gate_open.set()
            again = await mm2.subscribe("gate")
            assert [message.payload async for message in again] == [b"open"]


async def test_several_subscriptions_share_one_connection(served: Served) -> None:
    with trio.fail_after(10):
        async with open_micromsg2_connection("127.0.0.1", served.port, settings=CLIENT) as mm2:
            streams = {name: await mm2.subscribe(name) for name in ("range?count=7", "range?count=5", "range?count=9")}
            results: dict[str, list[bytes]] = {}

            async def read(name: str) -> None:
                results[name] = [message.payload async for message in streams[name]]

            async with trio.open_nursery() as nursery:
                for name in streams:
                    nursery.start_soon(read, name)
            assert results == {name: [number(n) for n in range(int(name.split("=")[1]))] for name in streams}


async def test_subscriptions_to_idle_publishers_do_not_hold_back_a_live_one(served: Served) -> None:
    # Each subscription's first ask, before its element size is known, used
    # to hold half the connection's budget until its element came: two to a
    # publisher that never sends left no room, and a third subscription on
    # the same connection never got its elements.
    with trio.fail_after(10):
        async with open_micromsg2_connection("127.0.0.1", served.port, settings=CLIENT) as mm2:
            await mm2.subscribe("idle?n=1")
            await mm2.subscribe("idle?n=2")
            # Both idle publishers have been asked: their first asks are out.
            assert sorted([await served.idle_asked.receive(), await served.idle_asked.receive()]) == ["idle?n=1", "idle?n=2"]
            numbers = await mm2.subscribe("range?count=100")
            assert [message.payload async for message in numbers] == [number(n) for n in range(100)]


async def test_topics_filter_by_properties_and_subscribers_see_them(served: Served) -> None:
    with trio.fail_after(10):
        async with open_micromsg2_connection("127.0.0.1", served.port, settings=CLIENT) as reader:
            cheap = await reader.subscribe("chat", "price<N10")
            everything_lobby = await reader.subscribe("chat?policy=block", "room=Tlobby")
            async with open_micromsg2_connection("127.0.0.1", served.port, settings=CLIENT) as writer:
                await writer.send_message("chat", b"one", properties={"price": 5, "room": "lobby"})
                await writer.send_message("chat", b"two", properties={"price": 50, "room": "lobby"})
                await writer.send_message("chat", b"three", properties={"room": "attic"})
                when = UnixTime.from_datetime(datetime(2014, 10, 13, 11, tzinfo=timezone.utc))
                await writer.send_message("chat", b"four", properties={"price": 9, "at": when})
                await writer.wait_acknowledged()
            first = await cheap.receive()
            assert (first.payload, dict(first.properties)) == (b"one", {"price": 5, "room": "lobby"})
            second = await cheap.receive()
            assert (second.payload, dict(second.properties)) == (b"four", {"price": 9, "at": when})
            assert [(await everything_lobby.receive()).payload for _ in range(2)] == [b"one", b"two"]
    # What the topic holds: envelopes for messages with properties.
    assert served.chat.statistics().published == 4


async def test_a_send_without_properties_is_stored_as_sent(served: Served) -> None:
    with trio.fail_after(10):
        async with rstreams.open_local_session(served.server.app) as session:
            async with session.subscribe("chat", prefetch=4) as plain:
                async with open_micromsg2_connection("127.0.0.1", served.port, settings=CLIENT) as writer:
                    await writer.send_message("chat", b"bare")
                    await writer.send_message("chat", ENVELOPE_MAGIC + b"looks like one")
                    await writer.wait_acknowledged()
                assert bytes(await plain.__anext__()) == b"bare"
                stored = bytes(await plain.__anext__())
                assert unwrap(stored) == ((), ENVELOPE_MAGIC + b"looks like one")


async def test_sends_to_something_that_is_not_a_topic_are_refused_by_name(served: Served) -> None:
    # They were dropped after their ack, and the client never knew (rstreams
    # pub mm2://... said "published"): the broker now says so with a stream
    # ERROR for that destination; the connection and its other work go on.
    with trio.fail_after(10):
        async with open_micromsg2_connection("127.0.0.1", served.port, settings=CLIENT) as mm2:
            await mm2.send_message("nothing", b"lost")
            await mm2.send_message("range", b"not a topic either")
            await mm2.send_message("chat", b"kept")
            await mm2.wait_acknowledged()
            for destination in ("nothing", "range"):
                refused = mm2.refused(destination)
                assert isinstance(refused, SendRefused) and refused.destination == destination
                assert "no such publisher" in refused.message
            assert mm2.refused("chat") is None
            stream = await mm2.subscribe("range?count=2")
            assert [(await stream.receive()).payload for _ in range(2)] == [number(0), number(1)]
        assert await publish_mm2_url(f"mm2://127.0.0.1:{served.port}", "chat", _values([b"a", b"b"])) == 2
        with pytest.raises(SendRefused, match="no such publisher"):
            await publish_mm2_url(f"mm2://127.0.0.1:{served.port}", "nothing", _values([b"a", b"b"]))


async def test_sends_read_together_go_into_their_topics_together_with_one_ack(served: Served) -> None:
    # A client that writes many SENDs at once had them published one at a
    # time, each with an ack of its own: a step through the app session and
    # an ack frame per SEND (`rstreams pub mm2://` ran at a quarter of `pub
    # tcp://`). What one read brings now goes in runs, a run per
    # destination, and one ack covers them all; a refused run is named
    # before that ack, and the runs around it are kept.
    with trio.fail_after(10):
        client = await handshake(served, window=64)
        sends = [("chat", b"%d" % n) for n in range(40)]
        sends += [("nothing", b"lost"), ("chat", b"40"), ("chat", b"41")]
        for destination, payload in sends:
            client.machine.send_message(destination, payload)
        await client.flush()  # (one write: the broker reads it in one read)
        acks: list[Acknowledged] = []
        refused: list[SendsRefused] = []
        while sum(ack.count for ack in acks) < len(sends):
            event = await client.next_event()
            if isinstance(event, Acknowledged):
                acks.append(event)
            elif isinstance(event, SendsRefused):
                assert not acks or sum(ack.count for ack in acks) < len(sends)
                refused.append(event)
        assert acks[-1].sequence == len(sends)
        assert len(acks) < len(sends) / 4, acks
        assert [event.destination for event in refused] == ["nothing"]
        async with rstreams.open_local_session(served.server.app) as session:
            async with session.subscribe("chat?history=64", prefetch=64) as chat:
                assert [bytes(await chat.__anext__()) for _ in range(42)] == [b"%d" % n for n in range(42)]


async def _values(values: list[bytes]) -> AsyncIterator[bytes]:
    for value in values:
        yield value


async def test_a_3_mib_element_goes_end_to_end_both_ways(served: Served) -> None:
    with trio.fail_after(20):
        async with open_micromsg2_connection("127.0.0.1", served.port, settings=CLIENT) as mm2:
            stream = await mm2.subscribe("big")
            message = await stream.receive()
            assert message.payload == BIG and message.sequence == 1
            with pytest.raises(trio.EndOfChannel):
                await stream.receive()
            topic = await mm2.subscribe("chat")
            await mm2.send_message("chat", BIG, properties={"size": len(BIG)})
            echoed = await topic.receive()
            assert echoed.payload == BIG and dict(echoed.properties) == {"size": len(BIG)}


async def test_a_client_may_not_exceed_its_subscriptions(nursery: trio.Nursery) -> None:
    app = rstreams.Router()
    route = examples.demo.app.resolve("range")
    assert route is not None
    app.add("range", route)
    server = MicroMsg2AppServer(app, max_subscriptions=1)
    [listener] = await nursery.start(partial(server.serve_tcp, "127.0.0.1", 0))
    with trio.fail_after(10):
        client = await RawClient.connect(listener_port(listener), window=1)
        assert isinstance(await client.next_event(), HandshakeCompleted)
        await client.subscribe("range?count=2")
        await client.subscribe("range?count=3")
        events = [await client.next_event(), await client.next_event()]
        failed = [event for event in events if isinstance(event, StreamFailed)]
        assert failed == [StreamFailed(destination="range?count=3", message="too many subscriptions on one connection (at most 1)")]


async def test_a_misbehaving_client_is_closed_and_nothing_else(served: Served) -> None:
    with trio.fail_after(10):
        async with open_micromsg2_connection("127.0.0.1", served.port, settings=CLIENT) as good:
            gate = await good.subscribe("gate")
            bad = await handshake(served)
            await bad.subscribe("range?count=1000")
            await bad.stream.send_all(b"\x02\x09\x02\x00\x01")  # an EXTENSION frame for index 9
            rest = bytearray()
            while chunk := await bad.stream.receive_some(65536):
                rest.extend(chunk)
            assert b"error;message=" in rest  # its ERROR frame, then the close
            served.gate_open.set()
            assert [message.payload async for message in gate] == [b"open"]


async def test_ack_is_a_window_of_one(served: Served) -> None:
    with trio.fail_after(10):
        stream = await trio.open_tcp_stream("127.0.0.1", served.port)
        machine = Connection(Role.CLIENT, required=[PUBSUB, ExtensionSpec(name="ack")], accept=())
        client = RawClient(stream, machine)
        await client.flush()
        event = await client.next_event()
        assert isinstance(event, HandshakeCompleted) and event.window == 1
        await client.subscribe("range?count=3")
        for n in range(3):
            message = await client.next_event()  # a second unacknowledged one would be refused
            assert isinstance(message, MessageReceived) and message.payload == number(n)
            assert served.connection().send_credit == 0
            await client.ack(1)
        assert await client.next_event() == Completed(destination="range?count=3")


async def test_sends_to_a_name_that_is_no_topic_log_a_few_lines_then_a_count(
    served: Served, caplog: pytest.LogCaptureFixture
) -> None:
    # Each refused run of SENDs was a warning line: a client that kept
    # sending to a name that is not a topic wrote the server's log as fast
    # as it could send. Now the first MAX_PEER_WARNINGS of a connection are
    # logged, and one line at its end counts the rest.
    from bridges.kit import MAX_PEER_WARNINGS

    runs = 20
    with trio.fail_after(20), caplog.at_level(logging.WARNING, logger="rstreams.bridges"):
        client = await handshake(served, window=64)
        for n in range(runs):
            client.machine.send_message("nothing", b"%d" % n)
            await client.flush()
            while not isinstance(await client.next_event(), SendsRefused):
                pass
        await client.aclose()
        while served.server.connections:
            await trio.sleep(0.01)
    lines = [record.getMessage() for record in caplog.records if record.name == "rstreams.bridges" and record.levelno == logging.WARNING]
    dropped = [line for line in lines if "dropped" in line]
    assert len(dropped) == MAX_PEER_WARNINGS, lines
    assert any(f"{runs - MAX_PEER_WARNINGS} more warnings" in line for line in lines), lines
