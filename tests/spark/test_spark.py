"""rstreams as a Spark source and sink, with a real local Spark (``local[2]``).

Every query reads from or writes to an rstreams server on 127.0.0.1 served by
a thread of this process. Queries use the availableNow trigger where they can
(they end by themselves); the others are stopped once a condition is met,
with a deadline. The whole file takes about a minute here, most of it Spark
starting up and its ~0.3 s fixed cost per micro-batch.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgpack
import pytest
import trio

import rstreams

from .conftest import ServerThread, require_spark

require_spark()

pytestmark = pytest.mark.timeout(240)

#: Every query must end (or be stopped) within this many seconds.
QUERY_DEADLINE = 90.0
# availableNow queries keep the default quietPeriod (2 s): a shorter one
# could end a query early on a loaded machine, before the batches a test
# counts on were formed.


def msgpack_row(i: int) -> bytes:
    return msgpack.packb({"n": i, "square": i * i}, use_bin_type=True)


@dataclass
class Served:
    server: ServerThread
    sent: dict[str, int]  # what the publishers sent, by name
    log: rstreams.Topic  # a topic the tests fill themselves
    slow: rstreams.Topic  # a small topic for a slow subscriber


def make_app() -> tuple[rstreams.Router, dict[str, int]]:
    """The test publishers, and a dict where they count what they sent."""
    app = rstreams.Router()
    sent: dict[str, int] = {}

    @app.publisher("numbers")
    async def numbers(sink: rstreams.Sink, request: rstreams.SubscribeRequest) -> None:
        # count elements msgpack {"n": i, "square": i*i}. Replayable by the
        # convention: from=N starts at N and frames each with its sequence.
        count = request.int_param("count", 100, minimum=0)
        if "from" in request.params:
            start = request.int_param("from", 0, minimum=0)
            sent["numbers-from"] = start
            await sink.send_many(rstreams.encode_sequenced(i, msgpack_row(i)) for i in range(start, count))
        else:
            await sink.send_many(msgpack_row(i) for i in range(count))

    @app.publisher("endless")
    async def endless(sink: rstreams.Sink) -> None:
        # As fast as demand allows, forever; counts what it queued.
        i = 0
        sent["endless"] = 0
        while True:
            await sink.wait_demand()
            n = sink.demand
            await sink.send_many([msgpack_row(j) for j in range(i, i + n)])
            i += n
            sent["endless"] = i

    @app.publisher("bad")
    async def bad(sink: rstreams.Sink) -> None:
        for i in range(20):
            await sink.send(b"\xc1 not msgpack" if i == 7 else msgpack_row(i))

    @app.publisher("failing")
    async def failing(sink: rstreams.Sink, request: rstreams.SubscribeRequest) -> None:
        after = request.int_param("after", 10, minimum=0)
        await sink.send_many([msgpack_row(i) for i in range(after)])
        await trio.sleep(0.3)  # let Spark take the good elements in a batch first
        raise RuntimeError(f"sensor unplugged after {after} elements")

    rstreams.Topic("results", capacity=10_000).mount(app)
    return app, sent


@pytest.fixture(scope="module")
def served() -> Iterator[Served]:
    app, sent = make_app()
    log = rstreams.Topic("log", capacity=5_000)
    log.mount(app)
    slow = rstreams.Topic("slow", capacity=50)
    slow.mount(app)
    server = ServerThread(app)
    yield Served(server, sent, log, slow)
    server.close()


def source(spark: Any, url: str, publisher: str, **options: Any) -> Any:
    reader = spark.readStream.format("rstreams").option("url", url).option("publisher", publisher)
    for key, value in options.items():
        if key == "schema":
            reader = reader.schema(value)
        else:
            reader = reader.option(key, str(value))
    return reader.load()


class Batches:
    """A foreachBatch function that keeps every batch's rows by batch id."""

    def __init__(self, fail_on_batch: int | None = None) -> None:
        self.rows: dict[int, list[tuple[Any, ...]]] = {}
        self.replayed: dict[int, list[tuple[Any, ...]]] = {}
        self.fail_on_batch = fail_on_batch

    def __call__(self, frame: Any, batch_id: int) -> None:
        rows = [tuple(row) for row in frame.collect()]
        if batch_id in self.rows:
            self.replayed[batch_id] = rows
        else:
            self.rows[batch_id] = rows
        if batch_id == self.fail_on_batch:
            self.fail_on_batch = None
            raise RuntimeError(f"simulated crash in batch {batch_id}")

    def all_rows(self) -> list[tuple[Any, ...]]:
        return [row for batch_id in sorted(self.rows) for row in self.rows[batch_id]]


def run_available_now(frame: Any, sink: Callable[[Any, int], None], checkpoint: Path) -> Any:
    query = frame.writeStream.foreachBatch(sink).option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start()
    finished = query.awaitTermination(QUERY_DEADLINE)
    if not finished:
        query.stop()
        raise AssertionError(f"availableNow query did not end within {QUERY_DEADLINE} s")
    return query


def test_raw_source_counts_rows_and_bounds_batches(spark: Any, served: Served, tmp_path: Path) -> None:
    server = served.server
    frame = source(spark, server.url, "numbers?count=2500", maxRowsPerBatch=1000, numPartitions=2)
    assert [(f.name, f.dataType.typeName()) for f in frame.schema.fields] == [("value", "binary"), ("offset", "long")]
    batches = Batches()
    run_available_now(frame, batches, tmp_path / "ckpt")
    rows = batches.all_rows()
    assert [offset for _, offset in rows] == list(range(2500))
    assert [bytes(value) for value, _ in rows[:3]] == [msgpack_row(i) for i in range(3)]
    sizes = [len(batches.rows[b]) for b in sorted(batches.rows)]
    assert max(sizes) <= 1000 and sum(sizes) == 2500, sizes


def test_typed_rows_and_a_bad_element_fails_or_is_skipped(spark: Any, served: Served, tmp_path: Path) -> None:
    server = served.server
    schema = "n LONG, square LONG, offset LONG"
    # badElements=skip: the undecodable element 7 is left out, counted nowhere else.
    batches = Batches()
    run_available_now(source(spark, server.url, "bad", format="msgpack", schema=schema, badElements="skip"), batches, tmp_path / "skip")
    assert batches.all_rows() == [(i, i * i, i) for i in range(20) if i != 7]
    # The default, badElements=fail: the query fails and says which element.
    query = (
        source(spark, server.url, "bad", format="msgpack", schema=schema)
        .writeStream.foreachBatch(Batches())
        .option("checkpointLocation", str(tmp_path / "fail"))
        .trigger(availableNow=True)
        .start()
    )
    with pytest.raises(Exception, match="element at offset 7 is not a valid msgpack row"):
        query.awaitTermination(QUERY_DEADLINE)


def test_a_fast_publisher_is_held_to_sparks_pace(spark: Any, served: Served, tmp_path: Path) -> None:
    server, sent = served.server, served.sent
    batches = Batches()
    frame = source(spark, server.url, "endless", format="msgpack", schema="n LONG, square LONG", maxRowsPerBatch=200)
    query = frame.writeStream.foreachBatch(batches).option("checkpointLocation", str(tmp_path / "ckpt")).trigger(processingTime="100 milliseconds").start()
    try:
        deadline = time.monotonic() + QUERY_DEADLINE
        while len(batches.rows) < 4 and time.monotonic() < deadline:
            time.sleep(0.1)
        # Let a few more triggers pass: the publisher must not run ahead.
        time.sleep(1.0)
        processed = sum(len(rows) for rows in batches.rows.values())
        published = sent["endless"]
    finally:
        query.stop()
    assert len(batches.rows) >= 4
    assert all(0 < len(rows) <= 200 for rows in batches.rows.values())
    # Demand is bounded by bufferRows (2 x 200) beyond what Spark committed:
    # the publisher never got further ahead than that.
    assert published <= processed + 400 + 200, (published, processed)
    ns = [row[0] for row in batches.all_rows()]
    assert ns == list(range(len(ns)))


def test_exactly_once_across_a_crash_and_restart_with_replay(spark: Any, served: Served, tmp_path: Path) -> None:
    server = served.server
    checkpoint = tmp_path / "ckpt"

    def frame() -> Any:
        return source(spark, server.url, "numbers?count=1500", replay="true", format="msgpack", schema="n LONG, offset LONG", maxRowsPerBatch=400)

    # First run: batch 1 is planned (its offsets logged) but the sink
    # crashes, so it is never committed and the driver's buffer is lost.
    first = Batches(fail_on_batch=1)
    query = frame().writeStream.foreachBatch(first).option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start()
    with pytest.raises(Exception, match="simulated crash in batch 1"):
        query.awaitTermination(QUERY_DEADLINE)
    assert sorted(first.rows) == [0, 1]
    # Second run, from the checkpoint: batch 1 is re-read from the publisher
    # (from=400) with exactly the same rows, then the rest follows.
    second = Batches()
    run_available_now(frame(), second, checkpoint)
    assert second.rows[1] == first.rows[1]
    combined = {**first.rows, **second.rows}  # a batch id written twice counts once
    ns = [row[0] for batch_id in sorted(combined) for row in combined[batch_id]]
    assert ns == list(range(1500))
    assert all(n == offset for batch in combined.values() for n, offset in batch)


def test_exactly_once_from_a_topic_across_a_stop_and_restart(spark: Any, served: Served, tmp_path: Path) -> None:
    # A topic is a replaying publisher within what it holds. The first run is
    # stopped wherever it happens to be (maybe mid-batch); the restart must
    # re-read any planned batch identically and go on without gap or repeat.
    server = served.server
    server.call(served.log.publish_many, [msgpack_row(i) for i in range(1200)])
    checkpoint = tmp_path / "ckpt"

    def frame() -> Any:
        return source(spark, server.url, "log", replay="true", format="msgpack", schema="n LONG, offset LONG", maxRowsPerBatch=150)

    first = Batches()
    query = frame().writeStream.foreachBatch(first).option("checkpointLocation", str(checkpoint)).trigger(processingTime="200 milliseconds").start()
    deadline = time.monotonic() + QUERY_DEADLINE
    while len(first.rows) < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    query.stop()
    assert 3 <= len(first.rows) < 8
    second = Batches()
    run_available_now(frame(), second, checkpoint)
    for batch_id in set(first.rows) & set(second.rows):
        assert second.rows[batch_id] == first.rows[batch_id]  # a replayed batch is the same batch
    combined = {**first.rows, **second.rows}
    ns = [row[0] for batch_id in sorted(combined) for row in combined[batch_id]]
    assert ns == list(range(1200))


def test_live_mode_restart_numbers_on_from_the_checkpoint(spark: Any, served: Served, tmp_path: Path) -> None:
    # Without replay the publisher cannot re-send: after a crash the planned
    # batch is filled with what arrives next (the elements that were in the
    # dead driver's buffer are lost), offsets continue and nothing repeats.
    server = served.server
    checkpoint = tmp_path / "ckpt"

    def frame() -> Any:
        return source(spark, server.url, "numbers?count=900", format="msgpack", schema="n LONG, offset LONG", maxRowsPerBatch=300, pollTimeout=10)

    first = Batches(fail_on_batch=1)
    query = frame().writeStream.foreachBatch(first).option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start()
    with pytest.raises(Exception, match="simulated crash"):
        query.awaitTermination(QUERY_DEADLINE)
    second = Batches()
    run_available_now(frame(), second, checkpoint)
    offsets = [row[1] for batch_id in sorted(second.rows) for row in second.rows[batch_id]]
    assert offsets == list(range(300, 300 + len(offsets)))  # continues, no repeats
    assert second.rows[1] == [(i, 300 + i) for i in range(300)]  # a fresh subscription, renumbered


def test_a_publisher_failing_mid_stream_fails_the_query_after_its_elements(spark: Any, served: Served, tmp_path: Path) -> None:
    server = served.server
    batches = Batches()
    frame = source(spark, server.url, "failing?after=250", format="msgpack", schema="n LONG", quietPeriod=5)
    query = frame.writeStream.foreachBatch(batches).option("checkpointLocation", str(tmp_path / "ckpt")).trigger(processingTime="200 milliseconds").start()
    with pytest.raises(Exception, match="sensor unplugged after 250 elements"):
        query.awaitTermination(QUERY_DEADLINE)
    assert batches.all_rows() == [(i,) for i in range(250)]


async def read_topic(url: str, name: str) -> list[Any]:
    async with rstreams.open_session(url) as session:
        async with session.subscribe(f"{name}?from=earliest&until=now", codec=None) as sub:
            return [msgpack.unpackb(rstreams.decode_sequenced(raw)[1]) async for raw in sub]


def test_the_sink_publishes_rows_into_a_topic_tagged_for_deduplication(spark: Any, served: Served, tmp_path: Path) -> None:
    server = served.server
    frame = source(spark, server.url, "numbers?count=700", format="msgpack", schema="n LONG, square LONG", maxRowsPerBatch=300)
    query = (
        frame.writeStream.format("rstreams")
        .option("url", server.url)
        .option("topic", "results")
        .option("format", "msgpack")
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(QUERY_DEADLINE)
    rows = server.call(read_topic, server.url, "results")
    assert sorted(row["n"] for row in rows) == list(range(700))
    tags = {(row["_batch"], row["_partition"], row["_row"]) for row in rows}
    assert len(tags) == 700
    assert {row["_batch"] for row in rows} == {0, 1, 2}


def test_a_slow_topic_subscriber_holds_the_sink_back(spark: Any, served: Served, tmp_path: Path) -> None:
    from rstreams.spark import Feed

    server = served.server

    async def statistics() -> rstreams.TopicStatistics:
        return served.slow.statistics()

    # A blocking subscriber that takes 10 elements and then asks for nothing
    # until we release them: the topic (capacity 50) fills, and then the
    # Spark task writing into it gets no more demand.
    reader = Feed(server.url, "slow", start=0, capacity=10, sequenced=False)
    try:
        deadline = time.monotonic() + 10
        while not server.call(statistics).subscribers and time.monotonic() < deadline:
            time.sleep(0.05)
        frame = source(spark, server.url, "numbers?count=300", format="msgpack", schema="n LONG")
        query = (
            frame.writeStream.format("rstreams").option("url", server.url).option("topic", "slow").option("format", "msgpack")
            .option("checkpointLocation", str(tmp_path / "ckpt")).trigger(availableNow=True).start()
        )
        time.sleep(4)
        stats = server.call(statistics)
        assert stats.published <= 60 and query.isActive, stats
        deadline = time.monotonic() + QUERY_DEADLINE
        while reader.next_offset < 300 and time.monotonic() < deadline:
            reader.release(reader.next_offset)  # now read at full speed
            time.sleep(0.02)
        assert query.awaitTermination(QUERY_DEADLINE)
        held_from = reader.base
        rows = [msgpack.unpackb(raw) for raw in reader.slice(held_from, 300)]
    finally:
        reader.close()
    assert reader.next_offset == 300 and server.call(statistics).published == 300
    # Batches are written one after the other, each by one task: in order.
    assert [row["n"] for row in rows] == list(range(held_from, 300))


def test_the_foreach_batch_helper_publishes_update_mode_output(spark: Any, served: Served, tmp_path: Path) -> None:
    import rstreams.spark

    server = served.server
    before = len(server.call(read_topic, server.url, "results"))
    counts = (
        source(spark, server.url, "numbers?count=600", format="msgpack", schema="n LONG, square LONG", maxRowsPerBatch=300)
        .selectExpr("n % 3 AS bucket")
        .groupBy("bucket")
        .count()
    )
    query = (
        counts.writeStream.outputMode("update")
        .foreachBatch(rstreams.spark.foreach_batch_publisher(server.url, "results", format="msgpack"))
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(QUERY_DEADLINE)
    rows = server.call(read_topic, server.url, "results")[before:]
    final = {row["bucket"]: row["count"] for row in sorted(rows, key=lambda r: r["_batch"])}
    assert final == {0: 200, 1: 200, 2: 200}
