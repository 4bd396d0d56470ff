"""Rows/s that Spark reads from a partitioned rstreams topic (issue 21, item 6).

    .venv/bin/python bench/spark_partitions.py                       # 1, 2 and 4 partitions on local[2]
    .venv/bin/python bench/spark_partitions.py --partitions 1 2 --rows 2000000 --master 'local[2]'

For each partition count it starts an rstreams server in its own process
with a topic of that many partitions, filled with ``--rows`` elements of 100
bytes before the query starts (round robin), and runs one Spark query over
it: ``format("rstreams").option("topic", ...)``, ``maxRowsPerBatch`` rows
per micro-batch, the ``noop`` sink, ``availableNow``. The executors read
their ranges from the server themselves; the driver only asks ``$offsets``.

It prints, per case, the rows/s over the whole query and over the batches
after the first (the first pays for starting the Python workers), from
Spark's own progress reports (``numInputRows`` and ``triggerExecution``).
The server's process is separate so that its CPU is not the bench's; on a
2-core machine it competes with Spark's two task slots all the same, which
is the setting the issue's goal names.

``--ceiling`` runs the same queries over a Python data source that makes
the same rows from nothing (no rstreams, no network: one 100-byte value
repeated, with the same per-partition batches and offsets), which is what
Spark's Python data source path can do here at best.

A benchmark, not a test: it asserts nothing about speed. ``--serve`` is the
server side (internal).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from typing import Any

ELEMENT_SIZE = 100


def serve(partitions: int, rows: int) -> None:
    """The server process: a filled topic on 127.0.0.1; prints the port, then waits for stdin to close."""
    import trio

    import rstreams

    async def main() -> None:
        app = rstreams.Router()
        topic = rstreams.Topic("bench", partitions=partitions, capacity=rows)
        topic.mount(app)
        padding = b"x" * (ELEMENT_SIZE - 12)
        for low in range(0, rows, 100_000):
            await topic.publish_many([b"%012d" % i + padding for i in range(low, min(rows, low + 100_000))])
        async with trio.open_nursery() as nursery:
            listeners = await nursery.start(rstreams.serve_tcp, app, "127.0.0.1", 0)
            print(rstreams.listener_port(listeners[0]), flush=True)
            # Until the bench closes our stdin.
            await trio.to_thread.run_sync(sys.stdin.read)
            nursery.cancel_scope.cancel()

    trio.run(main)


def start_server(partitions: int, rows: int) -> tuple[subprocess.Popen[str], str]:
    process = subprocess.Popen(
        [sys.executable, __file__, "--serve", str(partitions), str(rows)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert process.stdout is not None
    port = process.stdout.readline().strip()
    if not port:
        process.kill()
        raise RuntimeError("the bench server did not start")
    return process, f"tcp://127.0.0.1:{port}"


def spark_session(master: str) -> Any:
    from pyspark.sql import SparkSession

    import rstreams.spark

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    session = (
        SparkSession.builder.master(master)
        .appName("rstreams-bench-partitions")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.streaming.forceDeleteTempCheckpointLocation", "true")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    rstreams.spark.register(session)
    return session


def register_ceiling(spark: Any) -> None:
    """A streaming source of ``rows`` made-up rows over ``partitions`` partitions, planned like the topic source."""
    from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
    from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow

    from rstreams.spark._plan import plan_ends, positions, spark_offsets

    class Range(InputPartition):
        def __init__(self, partition: int, start: int, end: int) -> None:
            super().__init__(partition)
            self.partition, self.start, self.end = partition, start, end

    class CeilingReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
        def __init__(self, options: Any) -> None:
            self.partitions_count = int(options["partitions"])
            self.rows = int(options["rows"])
            self.max_rows = int(options["maxRowsPerBatch"])

        def initialOffset(self) -> dict[str, list[int]]:
            return spark_offsets([0] * self.partitions_count)

        def prepareForTriggerAvailableNow(self) -> None:
            pass  # the rows are all there from the start

        def latestOffset(self) -> dict[str, list[int]]:
            raise NotImplementedError  # the planned form below is the one Spark calls

        def partitions(self, start: Any, end: Any) -> list[Range]:
            return [Range(i, a, b) for i, (a, b) in enumerate(zip(positions(start), positions(end))) if b > a]

        def read(self, partition: Range) -> Any:
            from array import array

            import pyarrow as pa

            # As cheap as rows can be: one prebuilt column of 8192 values.
            block = 8192
            offsets = array("i", range(0, ELEMENT_SIZE * (block + 1), ELEMENT_SIZE))
            values = pa.Array.from_buffers(pa.binary(), block, [None, pa.py_buffer(offsets), pa.py_buffer(b"x" * ELEMENT_SIZE * block)])
            for low in range(partition.start, partition.end, block):
                count = min(block, partition.end - low)
                yield pa.RecordBatch.from_arrays(
                    [
                        values.slice(0, count),
                        pa.repeat(pa.scalar(partition.partition, type=pa.int32()), count),
                        pa.Array.from_buffers(pa.int64(), count, [None, pa.py_buffer(array("q", range(low, low + count)))]),
                    ],
                    names=["value", "partition", "offset"],
                )

    def latest(self: CeilingReader, start: Any = None, limit: Any = None) -> dict[str, list[int]]:
        per_partition = self.rows // self.partitions_count
        begin = positions(start) if start is not None else [0] * self.partitions_count
        return spark_offsets(plan_ends(begin, [per_partition] * self.partitions_count, self.max_rows))

    CeilingReader.latestOffset = latest  # type: ignore[method-assign]

    class CeilingSource(DataSource):
        @classmethod
        def name(cls) -> str:
            return "rstreams_ceiling"

        def schema(self) -> str:
            return "value BINARY, partition INT, offset LONG"

        def streamReader(self, schema: Any) -> CeilingReader:
            return CeilingReader(self.options)

    spark.dataSource.register(CeilingSource)


def run_case(spark: Any, url: str, rows: int, max_rows: int, partitions: int = 0) -> dict[str, float]:
    checkpoint = tempfile.mkdtemp(prefix="rstreams-bench-")
    if url:
        reader = spark.readStream.format("rstreams").option("url", url).option("topic", "bench")
    else:
        reader = spark.readStream.format("rstreams_ceiling").option("partitions", str(partitions)).option("rows", str(rows))
    frame = reader.option("maxRowsPerBatch", str(max_rows)).load()
    began = time.monotonic()
    query = frame.writeStream.format("noop").option("checkpointLocation", checkpoint).trigger(availableNow=True).start()
    query.awaitTermination()
    wall = time.monotonic() - began
    progress = [p for p in query.recentProgress if p["numInputRows"] > 0]
    read = sum(p["numInputRows"] for p in progress)
    if read != rows:
        raise RuntimeError(f"the query read {read} rows, the topic held {rows}")
    durations = [p["durationMs"]["triggerExecution"] / 1000 for p in progress]
    steady_rows = sum(p["numInputRows"] for p in progress[1:])
    return {
        "batches": len(progress),
        "wall_rows_per_s": rows / wall,
        "batch_rows_per_s": read / sum(durations),
        "steady_rows_per_s": steady_rows / sum(durations[1:]) if len(progress) > 1 else float("nan"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--serve", nargs=2, type=int, metavar=("PARTITIONS", "ROWS"), help=argparse.SUPPRESS)
    parser.add_argument("--partitions", nargs="+", type=int, default=[1, 2, 4])
    parser.add_argument("--rows", type=int, default=2_000_000, help="elements in the topic (default 2,000,000)")
    parser.add_argument("--max-rows", type=int, default=500_000, help="maxRowsPerBatch (default 500,000)")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--ceiling", action="store_true", help="also run Spark over made-up rows, without rstreams")
    args = parser.parse_args()
    if args.serve:
        serve(*args.serve)
        return
    spark = spark_session(args.master)
    if args.ceiling:
        register_ceiling(spark)
    print(f"{args.rows:,} rows of {ELEMENT_SIZE} bytes, maxRowsPerBatch {args.max_rows:,}, {args.master}, noop sink")
    print(f"{'partitions':>10} {'batches':>8} {'rows/s wall':>12} {'rows/s batches':>15} {'after the 1st':>14}")
    try:
        for partitions in args.partitions:
            server, url = start_server(partitions, args.rows)
            try:
                result = run_case(spark, url, args.rows, args.max_rows)
            finally:
                assert server.stdin is not None
                server.stdin.close()
                server.wait(30)
            print(
                f"{partitions:>10} {result['batches']:>8.0f} {result['wall_rows_per_s']:>12,.0f} "
                f"{result['batch_rows_per_s']:>15,.0f} {result['steady_rows_per_s']:>14,.0f}",
                flush=True,
            )
            if args.ceiling:
                result = run_case(spark, "", args.rows - args.rows % partitions, args.max_rows, partitions)
                print(
                    f"{'(ceiling)':>10} {result['batches']:>8.0f} {result['wall_rows_per_s']:>12,.0f} "
                    f"{result['batch_rows_per_s']:>15,.0f} {result['steady_rows_per_s']:>14,.0f}",
                    flush=True,
                )
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
