"""The partitioned-topic source without Spark: planning, ranges, partitions.

Planning is pure arithmetic; reading a range goes over a real socket to a
served topic, as a Spark task would.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterator

import msgpack
import pytest

import rstreams

from .conftest import ServerThread, require_spark

require_spark()

from rstreams.spark import SourceOptions, TopicRangePartition, TopicStreamReader  # noqa: E402
from rstreams.spark._plan import check_positions, plan_ends, positions, spark_offsets  # noqa: E402
from rstreams.spark._range import range_batches, read_range_blocking  # noqa: E402

pytestmark = pytest.mark.timeout(60)


def test_the_budget_is_shared_fairly_and_never_exceeded() -> None:
    # Both busy: an even split.
    assert plan_ends([0, 100], [5000, 5000], 1000) == [500, 600]
    # A quiet partition leaves its share to the busy one.
    assert plan_ends([0, 0], [100, 5000], 1000) == [100, 900]
    # Less than the budget available: all of it.
    assert plan_ends([10, 20, 30], [12, 20, 35], 1000) == [12, 20, 35]
    # A budget smaller than the number of partitions still moves forward.
    assert sum(plan_ends([0, 0, 0], [9, 9, 9], 2)) == 2
    for start, ends, budget in [([0, 0, 0], [7, 1000, 3], 10), ([5, 5], [6, 5], 1), ([0] * 4, [10**6] * 4, 999)]:
        planned = plan_ends(start, ends, budget)
        taken = [end - begin for begin, end in zip(start, planned)]
        assert all(0 <= t <= e - b for t, b, e in zip(taken, start, ends))
        assert sum(taken) == min(budget, sum(e - b for b, e in zip(start, ends)))


def test_offsets_round_trip_and_a_foreign_checkpoint_is_refused() -> None:
    assert positions(spark_offsets([3, 4])) == [3, 4]
    with pytest.raises(ValueError, match="not a partitioned-topic offset"):
        positions({"offset": 7})  # a single-publisher checkpoint


def test_positions_the_topic_no_longer_holds_fail_saying_how_far_behind() -> None:
    offsets = (rstreams.PartitionOffsets(partition=0, earliest=0, end=10), rstreams.PartitionOffsets(partition=1, earliest=6, end=10))
    check_positions("t", [4, 6], offsets)
    with pytest.raises(RuntimeError, match="partition 1: offset 2 is no longer retained, 4 behind the oldest held"):
        check_positions("t", [4, 2], offsets)
    with pytest.raises(RuntimeError, match="beyond its end"):
        check_positions("t", [11, 6], offsets)
    with pytest.raises(RuntimeError, match="has 2 partitions, the checkpoint has 3"):
        check_positions("t", [0, 6, 0], offsets)


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[ServerThread, rstreams.Topic]]:
    app = rstreams.Router()
    topic = rstreams.Topic("events", partitions=2, capacity=1000)
    topic.mount(app)
    thread = ServerThread(app)
    thread.call(topic.publish_many, [msgpack.packb({"n": i}) for i in range(300)])
    yield thread, topic
    thread.close()


def reader(url: str, **extra: str) -> TopicStreamReader:
    options = SourceOptions.parse({"url": url, "topic": "events", "maxRowsPerBatch": "100", **extra})
    return TopicStreamReader(options, [("value", "binary"), ("partition", "integer"), ("offset", "long")])


def test_the_driver_plans_ranges_that_carry_no_elements(served: tuple[ServerThread, rstreams.Topic]) -> None:
    server, _ = served
    source = reader(server.url)
    start = source.initialOffset()
    assert start == {"offsets": [0, 0]}
    end = source.latestOffset(start, source.getDefaultReadLimit())
    assert end == {"offsets": [50, 50]}
    parts = source.partitions(start, end)
    assert [(p.partition, p.start, p.end) for p in parts] == [(0, 0, 50), (1, 0, 50)]
    # What travels to an executor is the range, not the rows.
    assert len(pickle.dumps(parts[0])) < 300
    # Only partitions with new data get a task.
    assert [(p.partition, p.start, p.end) for p in source.partitions(end, {"offsets": [60, 50]})] == [(0, 50, 60)]


def test_an_executor_reads_its_range_into_arrow(served: tuple[ServerThread, rstreams.Topic]) -> None:
    server, _ = served
    source = pickle.loads(pickle.dumps(reader(server.url)))  # as Spark ships it
    batches = list(source.read(TopicRangePartition(1, 10, 20)))
    rows = [row for batch in batches for row in batch.to_pylist()]
    # Round robin: partition 1 holds elements 1, 3, 5, ...; its sequence 10 is element 21.
    assert [msgpack.unpackb(row["value"])["n"] for row in rows] == list(range(21, 41, 2))
    assert [(row["partition"], row["offset"]) for row in rows] == [(1, offset) for offset in range(10, 20)]


def test_typed_rows_get_the_partition_and_offset_columns(served: tuple[ServerThread, rstreams.Topic]) -> None:
    server, _ = served
    blocks = read_range_blocking(server.url, "events", 0, 0, 3, 10)
    fields = [("n", "long"), ("partition", "integer"), ("offset", "long")]
    batches = list(range_batches(blocks, 0, 0, "msgpack", fields, "fail"))
    assert [tuple(row.values()) for batch in batches for row in batch.to_pylist()] == [(0, 0, 0), (2, 0, 1), (4, 0, 2)]


def test_a_range_the_topic_no_longer_holds_is_a_typed_error() -> None:
    app = rstreams.Router()
    topic = rstreams.Topic("small", capacity=5)
    topic.mount(app)
    server = ServerThread(app)
    try:
        server.call(topic.publish_many, [b"%d" % i for i in range(12)])
        with pytest.raises(rstreams.NotRetained) as caught:
            read_range_blocking(server.url, "small", 0, 3, 9, 10)
        assert (caught.value.behind, caught.value.oldest) == (4, 7)
    finally:
        server.close()


def test_a_source_reads_a_publisher_or_a_topic_not_both(served: tuple[ServerThread, rstreams.Topic]) -> None:
    server, _ = served
    with pytest.raises(ValueError, match='either .option\\("publisher", NAME\\)'):
        SourceOptions.parse({"url": server.url, "topic": "events", "publisher": "events"})
    with pytest.raises(ValueError, match="startingOffsets='soon'"):
        SourceOptions.parse({"url": server.url, "topic": "events", "startingOffsets": "soon"})
    # latest: a new query starts at each partition's end.
    assert reader(server.url, startingOffsets="latest").initialOffset() == {"offsets": [150, 150]}
