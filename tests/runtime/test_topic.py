"""Topics over real sessions: fan-out, pacing by the slowest, policies, replay."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
import contextlib
import json
import logging
import socket
import struct

import hypothesis
import hypothesis.strategies
import pytest
import trio

import rstreams
from rstreams._topic_client import confirmation_count
from rstreams._topic_core import split_block


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


async def read_partition(session: rstreams.Session, name: str) -> list[tuple[int, bytes]]:
    async with session.subscribe(name) as replay:
        return [rstreams.decode_sequenced(raw) async for raw in replay]


async def test_a_partitioned_topic_routes_by_key_and_each_partition_replays_its_range() -> None:
    topic = rstreams.Topic("readings", partitions=2, key=lambda reading: reading["sensor"], codec="json")
    readings = [{"sensor": sensor, "n": i} for i, sensor in enumerate(["a", "b", "c", "d"] * 25)]
    async with served(topic) as url:
        async with rstreams.open_session(url, app=rstreams.Router()) as writer, rstreams.open_session(url) as reader:
            with trio.fail_after(10):
                # From a client: the topic routes what it receives by the key too.
                await rstreams.publish_to_topic(writer, "readings", readings[:50], codec="json")
                await topic.publish_many(readings[50:])
                partitions = [await read_partition(reader, f"readings?partition={p}&from=0&until=now") for p in (0, 1)]
                middle = await read_partition(reader, "readings?partition=1&from=3&until=6")
    decoded = [[(sequence, rstreams.JsonCodec().decode(raw)) for sequence, raw in partition] for partition in partitions]
    for partition, got in enumerate(decoded):
        # Numbered from 0 in each partition, every reading of a sensor in one, in order.
        assert [sequence for sequence, _ in got] == list(range(len(got)))
        expected = [r for r in readings if topic._partitioner.partition_of(r["sensor"]) == partition]
        assert [reading for _, reading in got] == expected
    assert len(decoded[0]) + len(decoded[1]) == 100 and decoded[0] and decoded[1]
    assert middle == partitions[1][3:6]
    stats = topic.statistics()
    assert [p.next_sequence for p in stats.partitions] == [len(decoded[0]), len(decoded[1])]
    assert stats.published == 100


async def test_until_waits_for_elements_not_yet_published() -> None:
    topic = rstreams.Topic("rr", partitions=2)
    async with served(topic) as url:
        async with rstreams.open_session(url) as session:
            with trio.fail_after(10):
                async with trio.open_nursery() as nursery:
                    got: list[list[tuple[int, bytes]]] = []

                    async def read() -> None:
                        got.append(await read_partition(session, "rr?partition=1&from=0&until=3"))

                    nursery.start_soon(read)
                    await wait_until(lambda: len(topic.statistics().subscribers) == 1)
                    # Round robin: partition 1 gets elements 1, 3, 5, ...
                    for i in range(8):
                        await topic.publish(b"e%d" % i)
    assert got == [[(0, b"e1"), (1, b"e3"), (2, b"e5")]]


async def test_a_partitioned_topic_needs_a_partition_and_a_sane_range() -> None:
    topic = rstreams.Topic("p", partitions=3)
    async with served(topic) as url:
        async with rstreams.open_session(url) as session:
            with trio.fail_after(5):
                with pytest.raises(rstreams.PublisherError, match=r"has 3 partitions: subscribe p\?partition=I"):
                    await read_partition(session, "p?from=0")
                with pytest.raises(rstreams.PublisherError, match="above the maximum 2"):
                    await read_partition(session, "p?partition=3&from=0")
                with pytest.raises(rstreams.PublisherError, match="until=1 is below the minimum 2"):
                    await read_partition(session, "p?partition=0&from=2&until=1")


async def test_asking_for_evicted_elements_is_a_typed_error_saying_how_far_behind() -> None:
    topic = rstreams.Topic("bounded", partitions=2, capacity=100, capacity_bytes=40)
    await topic.publish_many([b"%010d" % i for i in range(20)])  # 10 bytes each: 10 per partition
    stats = topic.statistics()
    # 40 bytes per partition: the 4 newest of each are held.
    assert [(p.first_sequence, p.next_sequence, p.held_bytes) for p in stats.partitions] == [(6, 10, 40), (6, 10, 40)]
    async with served(topic) as url:
        async with rstreams.open_session(url) as session:
            with trio.fail_after(5):
                with pytest.raises(rstreams.NotRetained) as caught:
                    await read_partition(session, "bounded?partition=1&from=2")
                assert await read_partition(session, "bounded?partition=1&from=6&until=now") == [
                    (6, b"0000000013"), (7, b"0000000015"), (8, b"0000000017"), (9, b"0000000019")
                ]
    error = caught.value
    assert (error.topic, error.partition, error.requested, error.oldest, error.behind) == ("bounded", 1, 2, 6, 4)
    assert "4 behind the oldest held (6)" in str(error)


async def test_the_offsets_query_answers_every_partitions_end_without_elements() -> None:
    events = rstreams.Topic("events", partitions=3, capacity=4)
    other = rstreams.Topic("other")
    await events.publish_many([b"x%d" % i for i in range(20)])  # 7, 7, 6; the 4 newest of each held
    async with served(events, other) as url:
        async with rstreams.open_session(url) as session:
            with trio.fail_after(5):
                offsets = await rstreams.topic_offsets(session, "events")
                assert offsets == (
                    rstreams.PartitionOffsets(partition=0, earliest=3, end=7),
                    rstreams.PartitionOffsets(partition=1, earliest=3, end=7),
                    rstreams.PartitionOffsets(partition=2, earliest=2, end=6),
                )
                async with session.subscribe("$offsets") as every:
                    answers = [json.loads(raw) async for raw in every]
                assert [answer["topic"] for answer in answers] == ["events", "other"]
                assert answers[1]["partitions"] == [{"partition": 0, "earliest": 0, "end": 0}]
                with pytest.raises(rstreams.PublisherError, match="no such topic: nothing"):
                    await rstreams.topic_offsets(session, "nothing")


def test_names_starting_with_a_dollar_are_reserved() -> None:
    app = rstreams.Router()
    with pytest.raises(ValueError, match="reserved"):
        app.add("$offsets", lambda sink: None)
    with pytest.raises(ValueError, match="reserved"):
        rstreams.Topic("$mine")
    rstreams.Topic("t").mount(app)
    assert "$offsets" in app.paths
    # Copying a router's routes keeps the runtime's own.
    copy = rstreams.Router({path: route for path in app.paths if (route := app.resolve(path)) is not None})
    assert copy.resolve("$offsets") is app.resolve("$offsets")


async def test_a_packed_replay_sends_blocks_of_elements_and_demand_counts_blocks() -> None:
    topic = rstreams.Topic("packed", capacity=100)
    await topic.publish_many([b"e%d" % i for i in range(25)])
    async with served(topic) as url:
        async with rstreams.open_session(url) as session:
            with trio.fail_after(5):
                async with session.subscribe("packed?from=3&until=20&pack=8", prefetch=0) as blocks:
                    blocks.request(2)  # two blocks: 16 elements
                    first = [split_block(bytes(await blocks.__anext__())) for _ in range(2)]
                    assert first == [(3, [b"e%d" % i for i in range(3, 11)]), (11, [b"e%d" % i for i in range(11, 19)])]
                    blocks.request(5)
                    assert [split_block(bytes(raw)) async for raw in blocks] == [(19, [b"e19"])]
                with pytest.raises(rstreams.PublisherError, match="pack needs from"):
                    async with session.subscribe("packed?pack=8") as unsequenced:
                        async for _ in unsequenced:
                            pass


async def test_a_retried_producer_publishes_each_element_once() -> None:
    topic = rstreams.Topic("once", partitions=2, capacity=1000)
    async with served(topic) as url:
        async with rstreams.open_session(url, app=rstreams.Router({"gappy": serve_gappy})) as writer:
            with trio.fail_after(10):
                # The first attempt dies after 60 of its 100 elements...
                await rstreams.publish_to_topic(writer, "once", (b"r%d" % i for i in range(60)), producer="batch-7-task-0")
                # ...the retry sends all 100 again: only the last 40 are new.
                await rstreams.publish_to_topic(writer, "once", (b"r%d" % i for i in range(100)), producer="batch-7-task-0")
                # Another producer is another story.
                await rstreams.publish_to_topic(writer, "once", [b"other"], producer="batch-7-task-1")
                # A producer whose numbers skip ahead lost elements: an error, not a hole.
                with pytest.raises(rstreams.PublisherError, match="element 5 arrived, 1 was expected"):
                    async with writer.subscribe("once/publish?source=gappy&producer=p", prefetch=1) as done:
                        async for _ in done:
                            pass
        async with rstreams.open_session(url) as reader:
            with trio.fail_after(10):
                held = [await read_partition(reader, f"once?partition={p}&from=0&until=now") for p in (0, 1)]
    payloads = sorted(payload for partition in held for _, payload in partition)
    assert b"g5" not in payloads  # never past a gap (g0 may or may not be in, by how the batch came)
    assert [p for p in payloads if not p.startswith(b"g")] == sorted([b"r%d" % i for i in range(100)] + [b"other"])
    assert topic._ledger.duplicates == 60


async def serve_gappy(sink: rstreams.Sink) -> None:
    await sink.send_many([rstreams.encode_sequenced(0, b"g0"), rstreams.encode_sequenced(5, b"g5")])


async def test_a_producer_publishes_into_a_topic_bounded_by_bytes_in_chunks_that_fit() -> None:
    topic = rstreams.Topic("tight", capacity=100, capacity_bytes=50)
    async with served(topic) as url:
        async with rstreams.open_session(url, app=rstreams.Router()) as writer, rstreams.open_session(url) as reader:
            with trio.fail_after(10):
                # 12 elements of 10 bytes: more than the 50 bytes held at once.
                await rstreams.publish_to_topic(writer, "tight", (b"%010d" % i for i in range(12)), producer="p")
                await rstreams.publish_to_topic(writer, "tight", (b"%010d" % i for i in range(12)), producer="p")
                held = await read_partition(reader, "tight?from=earliest&until=now")
    assert held == [(i, b"%010d" % i) for i in range(7, 12)]
    assert topic.statistics().published == 12 and topic._ledger.duplicates == 12


async def test_a_source_of_batches_publishes_each_batch_as_it_comes() -> None:
    # batches=True: what a bridge that read many values at once hands over
    # (a read of many MicroMsg2 SENDs), a list at a time.
    topic = rstreams.Topic("bursts", capacity=64)
    numbers = [b"%d" % n for n in range(12)]

    async def bursts() -> AsyncIterator[list[bytes]]:
        for start, end in ((0, 3), (3, 3), (3, 10), (10, 12)):  # (an empty list is no batch)
            yield numbers[start:end]

    async with served(topic) as url:
        async with rstreams.open_session(url) as reader, rstreams.open_session(url, app=rstreams.Router()) as writer:
            async with reader.subscribe("bursts", prefetch=64) as subscription:
                await wait_until(lambda: len(topic.statistics().subscribers) == 1)
                with trio.fail_after(10):
                    assert await rstreams.publish_to_topic(writer, "bursts", bursts(), batches=True) == 12
                    assert [bytes(await subscription.__anext__()) for _ in range(12)] == numbers
            with pytest.raises(ValueError, match="async iterable"):
                await rstreams.publish_to_topic(writer, "bursts", [[b"x"]], batches=True)


async def test_an_async_source_has_a_value_after_a_wait_sent_at_once() -> None:
    # publish_to_topic(async iterable) sent each value in a step of its own
    # (about 11,000 a second from a generator that never waits). It now
    # goes through Sink.send, whose runs write what a source has ready
    # together; a value after a wait is still sent at once, not held for
    # the next one: here the source waits until the subscriber saw it.
    topic = rstreams.Topic("live", capacity=64)
    seen = trio.Event()

    async def source() -> AsyncIterator[bytes]:
        for n in range(50):
            yield b"%d" % n  # a run: no wait between them
        yield b"last before the wait"
        await seen.wait()  # held here until the value before was delivered
        yield b"after"

    async with served(topic) as url:
        async with rstreams.open_session(url) as reader, rstreams.open_session(url, app=rstreams.Router()) as writer:
            async with reader.subscribe("live", prefetch=64) as subscription:
                await wait_until(lambda: len(topic.statistics().subscribers) == 1)
                with trio.fail_after(10):
                    async with trio.open_nursery() as nursery:
                        nursery.start_soon(rstreams.publish_to_topic, writer, "live", source())
                        got = [bytes(await subscription.__anext__()) for _ in range(51)]
                        seen.set()
                        got.append(bytes(await subscription.__anext__()))
    assert got == [b"%d" % n for n in range(50)] + [b"last before the wait", b"after"]


async def test_an_async_source_that_never_waits_is_written_in_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    # The other half of the test above: values with no wait between them
    # go as Sink.send's runs, a schedule point per SEND_RUN_LENGTH of them,
    # not one per value (as a send_many of one each was). The clock is
    # stood in for, so that the runs are decided the same way anywhere.
    from rstreams._publish import SEND_RUN_LENGTH

    from .test_publish import FakeClock, StepCounter

    monkeypatch.setattr("rstreams._publish.perf_counter", FakeClock(1e-7))
    count = 3000
    topic = rstreams.Topic("runs", capacity=4096)
    counter = StepCounter("publisher probe")  # the task that runs publish_to_topic's source "probe"

    async def source() -> AsyncIterator[bytes]:
        for n in range(count):
            yield b"%d" % n

    async with served(topic) as url:
        async with rstreams.open_session(url, app=rstreams.Router()) as writer:
            trio.lowlevel.add_instrument(counter)
            try:
                with trio.fail_after(10):
                    assert await rstreams.publish_to_topic(writer, "runs", source(), source="probe") == count
            finally:
                trio.lowlevel.remove_instrument(counter)
    assert topic.statistics().published == count
    assert 1 <= counter.steps <= count // SEND_RUN_LENGTH + 20, counter.steps


async def test_a_publishing_client_that_asks_for_confirmations_gets_the_count_the_topic_holds() -> None:
    # confirm=1: the stream back to the client carries, as its demand
    # allows, how many of its elements the topic holds; counts only grow,
    # each is at most what the topic held when it came, and the last is all.
    topic = rstreams.Topic("feed", capacity=16)
    counts: list[int] = []
    held_then: list[int] = []

    async def lines(sink: rstreams.Sink) -> None:
        for start in range(0, 100, 10):
            await sink.send_many([b"%d" % i for i in range(start, start + 10)])

    async with served(topic) as url:
        async with rstreams.open_session(url) as reader, rstreams.open_session(url, app=rstreams.Router({"lines": lines})) as writer:
            async with reader.subscribe("feed", prefetch=1000) as everything:
                with trio.fail_after(10):
                    async with writer.subscribe("feed/publish?source=lines&confirm=1", prefetch=1000) as confirmations:
                        async for element in confirmations:
                            counts.append(int(element))
                            held_then.append(topic.statistics().published)
                    received = []
                    async for element in everything:
                        received.append(element)
                        if len(received) == 100:
                            break
    assert received == [b"%d" % i for i in range(100)]
    assert counts and counts == sorted(set(counts)) and counts[-1] == 100
    assert all(count <= held for count, held in zip(counts, held_then))


async def test_confirmations_wait_for_demand_and_never_hold_the_publishing_back() -> None:
    # A client that asks for confirmations and gives them no demand gets
    # none, and its elements still all go in: the stream's end confirms
    # them all, as without confirm=1 (whose stream carries no elements).
    topic = rstreams.Topic("feed", capacity=1000)

    async def lines(sink: rstreams.Sink) -> None:
        await sink.send_many([b"%d" % i for i in range(300)])

    async with served(topic) as url:
        async with rstreams.open_session(url, app=rstreams.Router({"lines": lines})) as writer:
            with trio.fail_after(10):
                async with writer.subscribe("feed/publish?source=lines&confirm=1", prefetch=0) as silent:
                    assert [element async for element in silent] == []
            assert topic.statistics().published == 300
            with trio.fail_after(10):
                async with writer.subscribe("feed/publish?source=lines", prefetch=1000) as plain:
                    assert [element async for element in plain] == []
            assert topic.statistics().published == 600


async def test_a_bad_confirm_parameter_fails_the_stream_only() -> None:
    topic = rstreams.Topic("feed")
    async with served(topic) as url:
        async with rstreams.open_session(url, app=rstreams.Router({"lines": lambda sink: None})) as writer:
            with trio.fail_after(10), pytest.raises(rstreams.PublisherError, match="parameter confirm='yes'"):
                async with writer.subscribe("feed/publish?source=lines&confirm=yes", prefetch=1) as done:
                    async for _ in done:
                        pass
            with trio.fail_after(10):
                # The session lives on: the next publishing goes in.
                assert await rstreams.publish_to_topic(writer, "feed", [b"after"]) == 1
    assert topic.statistics().published == 1


@pytest.mark.parametrize("reset", [False, True], ids=["closed", "reset"])
async def test_a_publishing_client_that_goes_away_is_no_publisher_failure(caplog: pytest.LogCaptureFixture, reset: bool) -> None:
    # The publish route reads from the client's own session; when that
    # session ends (the client closes, or its connection is reset) the
    # route learns it from its upstream. That is the session's end, logged
    # once as such, not a publisher failure with a traceback (it was one,
    # found by cutting `rstreams pub` connections at random).
    topic = rstreams.Topic("feed")

    async def endless(sink: rstreams.Sink) -> None:
        number = 0
        while True:
            await sink.send(b"%d" % number)
            number += 1

    async with served(topic) as url:
        port = int(url.rsplit(":", 1)[1])
        with caplog.at_level(logging.DEBUG, logger="rstreams"), trio.fail_after(10):
            stream = await trio.open_tcp_stream("127.0.0.1", port)
            async with trio.open_nursery() as nursery:

                async def publish() -> None:
                    with contextlib.suppress(rstreams.SessionClosed):
                        async with rstreams.open_stream_session(stream, app=rstreams.Router({"endless": endless})) as writer:
                            async with writer.subscribe("feed/publish?source=endless&confirm=1") as confirmations:
                                async for _ in confirmations:
                                    pass

                nursery.start_soon(publish)
                await wait_until(lambda: topic.statistics().published >= 2000)
                if reset:
                    stream.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                nursery.cancel_scope.cancel()
            await wait_until(lambda: topic.statistics().publishers == 0)
    assert not [record for record in caplog.records if record.levelno >= logging.WARNING], caplog.text
    assert "Traceback" not in caplog.text


async def test_publish_to_topic_reports_what_the_topic_confirmed_as_it_goes() -> None:
    # on_confirmed: counts of the values the topic holds, growing, never
    # ahead of the topic, a few a second however many batches go in.
    topic = rstreams.Topic("feed", capacity=1000)
    confirmed: list[tuple[int, int]] = []

    async def slowly() -> AsyncIterator[bytes]:
        for number in range(40):
            yield b"%d" % number
            await trio.sleep(0.01)

    async with served(topic) as url:
        async with rstreams.open_session(url, app=rstreams.Router()) as writer:
            with trio.fail_after(10):
                sent = await rstreams.publish_to_topic(
                    writer, "feed", slowly(), on_confirmed=lambda count: confirmed.append((count, topic.statistics().published))
                )
    assert sent == 40 and topic.statistics().published == 40
    counts = [count for count, _ in confirmed]
    assert counts and counts == sorted(counts) and counts[-1] <= 40
    assert all(count <= held for count, held in confirmed)
    assert len(counts) < 40  # (paced: not one per value)


async def test_what_is_not_a_confirmation_is_passed_over() -> None:
    # A server that answers confirm=1 with anything but a short count (a
    # digit string too long for int(), text) is not believed, and nothing
    # breaks: the stream's end still ends the call.
    async def not_a_topic(sink: rstreams.Sink, request: rstreams.SubscribeRequest) -> None:
        async with request.session.subscribe(request.params["source"], prefetch=1000) as upstream:
            async for _ in upstream:
                pass
        for element in (b"9" * 5000, b"twelve", b"", b"-3", b"7"):
            await sink.send(element)

    app = rstreams.Router({"odd/publish": not_a_topic})
    confirmed: list[int] = []
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(rstreams.serve_tcp, app, "127.0.0.1", 0)
        url = f"tcp://127.0.0.1:{rstreams.listener_port(listeners[0])}"
        async with rstreams.open_session(url, app=rstreams.Router()) as writer:
            with trio.fail_after(10):
                sent = await rstreams.publish_to_topic(writer, "odd", [b"a", b"b"], on_confirmed=confirmed.append)
        nursery.cancel_scope.cancel()
    assert sent == 2
    assert set(confirmed) <= {7}  # (only the count, if it was asked for in time)


@hypothesis.given(hypothesis.strategies.binary(max_size=64) | hypothesis.strategies.binary(min_size=4000, max_size=6000))
def test_a_confirmation_is_a_short_count_or_nothing_whatever_the_bytes(element: bytes) -> None:
    count = confirmation_count(element)
    assert count is None or (element.isdigit() and count == int(element) and count < 10**20)


@hypothesis.given(hypothesis.strategies.integers(min_value=0, max_value=10**20 - 1))
def test_every_count_reads_back(count: int) -> None:
    assert confirmation_count(b"%d" % count) == count
