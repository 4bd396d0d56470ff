"""A partitioned topic read by Spark (``local[2]``): the executors read the ranges.

The server records every subscription the topic gets: the only ones are
range subscriptions ``events?partition=I&from=A&until=B``, which only
``read()`` on the executors makes; the driver only asks ``$offsets``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgpack
import pytest

import rstreams

from .conftest import ServerThread, require_spark

require_spark()

from rstreams.spark._range import RANGE_PACK  # noqa: E402

pytestmark = pytest.mark.timeout(240)

#: Every query must end (or be stopped) within this many seconds.
QUERY_DEADLINE = 90.0
SCHEMA = "n LONG, partition INT, offset LONG"


@dataclass
class Served:
    server: ServerThread
    topics: dict[str, rstreams.Topic]
    subscriptions: list[str] = field(default_factory=list)  # names the topics were asked for


@pytest.fixture(scope="module")
def served() -> Iterator[Served]:
    app = rstreams.Router()
    topics = {name: rstreams.Topic(name, partitions=2, capacity=10_000) for name in ("events", "again", "input", "output")}
    for topic in topics.values():
        topic.mount(app)
    subscriptions: list[str] = []
    for name in topics:
        route = app.resolve(name)
        assert route is not None

        async def recorded(sink: rstreams.Sink, request: rstreams.SubscribeRequest, route: rstreams.Route = route) -> None:
            subscriptions.append(request.name)
            await route.publisher(sink, request)  # type: ignore[call-arg]

        app.add(name, recorded)
    server = ServerThread(app)
    yield Served(server, topics, subscriptions)
    server.close()


class Batches:
    """A foreachBatch function that keeps every batch's rows by batch id."""

    def __init__(self, fail_on_batch: int | None = None) -> None:
        self.rows: dict[int, list[tuple[Any, ...]]] = {}
        self.fail_on_batch = fail_on_batch

    def __call__(self, frame: Any, batch_id: int) -> None:
        self.rows[batch_id] = [tuple(row) for row in frame.collect()]
        if batch_id == self.fail_on_batch:
            self.fail_on_batch = None
            raise RuntimeError(f"simulated crash in batch {batch_id}")


def topic_source(spark: Any, url: str, topic: str, max_rows: int) -> Any:
    return (
        spark.readStream.format("rstreams")
        .option("url", url)
        .option("topic", topic)
        .option("format", "msgpack")
        .option("maxRowsPerBatch", str(max_rows))
        .schema(SCHEMA)
        .load()
    )


def start(frame: Any, sink: Batches, checkpoint: Path) -> Any:
    return frame.writeStream.foreachBatch(sink).option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start()


def test_a_two_partition_topic_is_read_in_parallel_by_the_executors(spark: Any, served: Served, tmp_path: Path) -> None:
    server = served.server
    server.call(served.topics["events"].publish_many, [msgpack.packb({"n": i}) for i in range(3000)])
    batches = Batches()
    query = start(topic_source(spark, server.url, "events", 1000), batches, tmp_path / "ckpt")
    assert query.awaitTermination(QUERY_DEADLINE), "the availableNow query did not end"
    # Three batches of 1000: 500 from each partition each time.
    assert sorted(batches.rows) == [0, 1, 2]
    assert all(len(rows) == 1000 for rows in batches.rows.values())
    rows = [row for batch_id in sorted(batches.rows) for row in sorted(batches.rows[batch_id], key=lambda r: (r[1], r[2]))]
    assert sorted(n for n, _, _ in rows) == list(range(3000))
    for partition in (0, 1):
        mine = [(n, offset) for n, p, offset in rows if p == partition]
        # Round robin: partition p holds n = p, p+2, ...; offsets count from 0 without gap.
        assert mine == [(2 * offset + partition, offset) for offset in range(1500)]
    # The topic was only ever read by range, one subscription per partition per batch.
    ranges = sorted(name for name in served.subscriptions if name.startswith("events?"))
    expected = sorted(
        f"events?partition={p}&from={a}&until={a + 500}&pack={RANGE_PACK}" for p in (0, 1) for a in (0, 500, 1000)
    )
    assert ranges == expected


def test_exactly_once_across_a_crash_and_restart_from_the_checkpoint(spark: Any, served: Served, tmp_path: Path) -> None:
    server = served.server
    server.call(served.topics["again"].publish_many, [msgpack.packb({"n": i}) for i in range(1200)])
    checkpoint = tmp_path / "ckpt"
    # First run: batch 1 is planned (its ranges logged) but the sink crashes.
    first = Batches(fail_on_batch=1)
    query = start(topic_source(spark, server.url, "again", 400), first, checkpoint)
    with pytest.raises(Exception, match="simulated crash in batch 1"):
        query.awaitTermination(QUERY_DEADLINE)
    assert sorted(first.rows) == [0, 1]
    # Second run: batch 1 is re-planned from the checkpoint and re-read by
    # range, so it holds exactly the same rows; then the rest follows.
    second = Batches()
    query = start(topic_source(spark, server.url, "again", 400), second, checkpoint)
    assert query.awaitTermination(QUERY_DEADLINE), "the restarted query did not end"
    assert sorted(second.rows[1]) == sorted(first.rows[1])
    combined = {**first.rows, **second.rows}  # a batch id written twice counts once
    ns = sorted(n for rows in combined.values() for n, _, _ in rows)
    assert ns == list(range(1200))
    assert sorted(combined) == [0, 1, 2]


async def read_all(url: str, topic: str) -> list[Any]:
    async with rstreams.open_session(url) as session:
        rows = []
        for partition in (0, 1):
            async with session.subscribe(f"{topic}?partition={partition}&from=0&until=now", codec=None) as sub:
                rows += [msgpack.unpackb(rstreams.decode_sequenced(raw)[1]) async for raw in sub]
        return rows


def test_the_sink_writes_each_row_once_even_when_a_batch_is_run_again(spark: Any, served: Served, tmp_path: Path) -> None:
    server = served.server
    server.call(served.topics["input"].publish_many, [b"row-%d" % i for i in range(900)])
    checkpoint = tmp_path / "ckpt"

    def run() -> None:
        frame = (
            spark.readStream.format("rstreams").option("url", server.url).option("topic", "input")
            .option("maxRowsPerBatch", "300").load().selectExpr("value")
        )
        query = (
            frame.writeStream.format("rstreams").option("url", server.url).option("topic", "output")
            .option("format", "msgpack").option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start()
        )
        assert query.awaitTermination(QUERY_DEADLINE), "the sink query did not end"

    run()
    first = server.call(read_all, server.url, "output")
    assert sorted(row["value"] for row in first) == sorted(b"row-%d" % i for i in range(900))
    # Forget that the last batch was committed: the restarted query runs it
    # again, and its tasks publish the same rows under the same producer ids.
    commits = sorted((checkpoint / "commits").iterdir(), key=lambda path: int(path.name) if path.name.isdigit() else -1)
    last = commits[-1]
    assert last.name == "2"
    last.unlink()
    (checkpoint / "commits" / ".2.crc").unlink(missing_ok=True)  # Hadoop's checksum of it
    run()
    again = server.call(read_all, server.url, "output")
    assert sorted(row["value"] for row in again) == sorted(b"row-%d" % i for i in range(900))
    assert served.topics["output"]._ledger.duplicates == 300
