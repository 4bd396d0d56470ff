"""Topics over real sessions: fan-out, pacing by the slowest, policies, replay."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
import trio

import rstreams


@asynccontextmanager
async def served(*topics: rstreams.Topic) -> AsyncIterator[str]:
    app = rstreams.Router()
    for topic in topics:
        topic.mount(app)
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(rstreams.serve_tcp, app, "127.0.0.1", 0)
        yield f"tcp://127.0.0.1:{rstreams.listener_port(listeners[0])}"
        nursery.cancel_scope.cancel()


async def wait_until(predicate: object, timeout: float = 5.0) -> None:
    with trio.fail_after(timeout):
        while not predicate():  # type: ignore[operator]
            await trio.sleep(0.005)


async def test_every_subscriber_gets_every_element_and_a_client_can_publish() -> None:
    topic = rstreams.Topic("chat", capacity=4, codec="json")
    async with served(topic) as url:
        async with rstreams.open_session(url) as a, rstreams.open_session(url) as b:
            async with a.subscribe("chat", codec="json") as sub_a, b.subscribe("chat", prefetch=2, codec="json") as sub_b:
                async with rstreams.open_session(url, app=rstreams.Router()) as writer:
                    with trio.fail_after(10):
                        async with trio.open_nursery() as nursery:
                            async def read(sub: rstreams.Subscription, out: list[object]) -> None:
                                async for value in sub:
                                    out.append(value)
                                    if len(out) == 20:
                                        return

                            got_a: list[object] = []
                            got_b: list[object] = []
                            nursery.start_soon(read, sub_a, got_a)
                            nursery.start_soon(read, sub_b, got_b)
                            sent = await rstreams.publish_to_topic(writer, "chat", ({"n": i} for i in range(20)), codec="json")
    assert sent == 20
    assert got_a == got_b == [{"n": i} for i in range(20)]


async def test_a_slow_blocking_subscriber_holds_a_publishing_client_back() -> None:
    topic = rstreams.Topic("feed", capacity=8)
    async with served(topic) as url:
        async with rstreams.open_session(url) as reader, rstreams.open_session(url, app=rstreams.Router()) as writer:
            async with reader.subscribe("feed", prefetch=0) as slow:
                await wait_until(lambda: len(topic.statistics().subscribers) == 1)
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(rstreams.publish_to_topic, writer, "feed", (b"%d" % i for i in range(1000)))
                    await wait_until(lambda: topic.statistics().room == 0)
                    await trio.sleep(0.1)
                    stats = topic.statistics()
                    # Nothing moves while the subscriber asks for nothing.
                    assert stats.published == 8 and stats.held == 8
                    slow.request(1000)
                    received = 0
                    with trio.fail_after(10):
                        async for _ in slow:
                            received += 1
                            if received == 1000:
                                break
    assert topic.statistics().published == 1000


async def test_drop_and_latest_subscribers_never_hold_publishers_back() -> None:
    topic = rstreams.Topic("sensor", capacity=4)
    async with served(topic) as url:
        async with rstreams.open_session(url) as session:
            async with session.subscribe("sensor?policy=drop", prefetch=0) as dropping, session.subscribe(
                "sensor?policy=latest", prefetch=0
            ) as latest:
                await wait_until(lambda: len(topic.statistics().subscribers) == 2)
                with trio.fail_after(5):
                    await topic.publish_many([b"%d" % i for i in range(100)])
                dropping.request(4)
                latest.request(1)
                with trio.fail_after(5):
                    assert [await dropping.__anext__() for _ in range(4)] == [b"96", b"97", b"98", b"99"]
                    assert await latest.__anext__() == b"99"
                stats = {s.policy: s for s in topic.statistics().subscribers}
                assert stats["drop"].dropped == 96 and stats["latest"].dropped == 99


async def test_replay_from_a_sequence_number_and_until_now() -> None:
    topic = rstreams.Topic("log", capacity=10)
    await topic.publish_many([b"e%d" % i for i in range(15)])  # 0..4 evicted
    async with served(topic) as url:
        async with rstreams.open_session(url) as session:
            with trio.fail_after(5):
                async with session.subscribe("log?from=7&until=now") as replay:
                    got = [rstreams.decode_sequenced(raw) async for raw in replay]
                assert got == [(i, b"e%d" % i) for i in range(7, 15)]
                async with session.subscribe("log?from=earliest&until=now") as replay:
                    assert len([raw async for raw in replay]) == 10
                async with session.subscribe("log?history=3&until=now") as recent:
                    assert [raw async for raw in recent] == [b"e12", b"e13", b"e14"]
                with pytest.raises(rstreams.PublisherError, match="sequence 2 is no longer retained"):
                    async with session.subscribe("log?from=2") as gone:
                        async for _ in gone:
                            pass


async def test_closing_a_topic_completes_its_subscribers_after_what_it_holds() -> None:
    topic = rstreams.Topic("t", capacity=4)
    async with served(topic) as url:
        async with rstreams.open_session(url) as session:
            async with session.subscribe("t") as sub:
                await wait_until(lambda: len(topic.statistics().subscribers) == 1)
                await topic.publish_many([b"a", b"b"])
                topic.close()
                with trio.fail_after(5):
                    assert [x async for x in sub] == [b"a", b"b"]
    with pytest.raises(trio.ClosedResourceError):
        topic.publish_nowait(b"c")


async def test_bad_parameters_fail_the_stream_only() -> None:
    topic = rstreams.Topic("t")
    async with served(topic) as url:
        async with rstreams.open_session(url) as session:
            with pytest.raises(rstreams.PublisherError, match="policy"):
                async with session.subscribe("t?policy=sometimes") as sub:
                    async for _ in sub:
                        pass
            with pytest.raises(rstreams.PublisherError, match="needs a source"):
                async with session.subscribe("t/publish") as sub:
                    async for _ in sub:
                        pass


async def test_publish_many_waits_for_room_and_cancels_cleanly() -> None:
    topic = rstreams.Topic("t", capacity=4)
    async with served(topic) as url:
        async with rstreams.open_session(url) as session:
            async with session.subscribe("t", prefetch=0) as sub:
                await wait_until(lambda: len(topic.statistics().subscribers) == 1)
                with trio.move_on_after(0.2) as scope:
                    await topic.publish_many(b"%d" % i for i in range(10))
                assert scope.cancelled_caught
                # What was accepted stays; the rest was never published.
                assert topic.statistics().published == 4
                with pytest.raises(trio.WouldBlock):
                    topic.publish_nowait(b"x")
                sub.request(2)
                with trio.fail_after(5):
                    assert [await sub.__anext__() for _ in range(2)] == [b"0", b"1"]
                    assert await topic.wait_room() == 2
