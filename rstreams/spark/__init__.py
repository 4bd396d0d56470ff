"""rstreams as a Spark Structured Streaming source and sink (``rstreams[spark]``).

::

    import rstreams.spark
    rstreams.spark.register(spark)

    rows = (spark.readStream.format("rstreams")
            .option("url", "tcp://127.0.0.1:9000")
            .option("publisher", "sensors")
            .load())                                  # value BINARY, offset LONG
    (rows.writeStream.format("rstreams")
         .option("url", "tcp://127.0.0.1:9000")
         .option("topic", "results")
         .option("checkpointLocation", "/tmp/ckpt")
         .start())

Reading a partitioned ``rstreams.Topic`` with ``.option("topic", NAME)``
instead of ``publisher``, the driver only plans per-partition offset ranges
and each executor task reads its range from the server itself
(:class:`TopicStreamReader`); the sink publishes from every task with a
producer id, so the topic keeps each row once across retries.

Importing this module needs pyspark (4.2 or later, for admission control in
Python sources) but no SparkSession. ``docs/spark.md`` has the options, the
delivery guarantees and the back-pressure story.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql.datasource import DataSource
from pyspark.sql.types import StructType

from ._feed import Feed, FeedStatistics
from ._rows import RAW_SCHEMA, TOPIC_RAW_SCHEMA, BadElement, SinkOptions, SourceOptions
from ._sink import RstreamsCommitMessage, RstreamsStreamWriter, foreach_batch_publisher, publish_elements
from ._source import ElementsPartition, RstreamsStreamReader
from ._topic_source import TopicRangePartition, TopicStreamReader

__all__ = [
    "BadElement",
    "ElementsPartition",
    "Feed",
    "FeedStatistics",
    "RAW_SCHEMA",
    "RstreamsCommitMessage",
    "RstreamsDataSource",
    "RstreamsStreamReader",
    "RstreamsStreamWriter",
    "SinkOptions",
    "SourceOptions",
    "TOPIC_RAW_SCHEMA",
    "TopicRangePartition",
    "TopicStreamReader",
    "foreach_batch_publisher",
    "publish_elements",
    "register",
]


class RstreamsDataSource(DataSource):
    """The Python data source named ``rstreams`` (streaming read and write)."""

    @classmethod
    def name(cls) -> str:
        return "rstreams"

    def schema(self) -> str:
        # Spark asks only when the query gave no .schema(...).
        options = SourceOptions.parse(self.options)
        if options.format != "raw":
            raise ValueError(f"format={options.format} decodes into typed columns: give the columns with .schema(...)")
        return options.raw_schema

    def streamReader(self, schema: StructType) -> RstreamsStreamReader | TopicStreamReader:
        options = SourceOptions.parse(self.options)
        fields = [(field.name, field.dataType.typeName()) for field in schema.fields]
        raw_names = [name.split()[0] for name in options.raw_schema.split(", ")]
        if options.format == "raw" and [name for name, _ in fields] != raw_names:
            raise ValueError(f"without a format option the columns are {options.raw_schema}; set format to msgpack or json for others")
        if options.topic is not None:
            return TopicStreamReader(options, fields)
        return RstreamsStreamReader(options, fields)

    def streamWriter(self, schema: StructType, overwrite: bool) -> RstreamsStreamWriter:
        return RstreamsStreamWriter(SinkOptions.parse(self.options))


def register(spark: Any) -> None:
    """Register the ``rstreams`` data source with a SparkSession."""
    spark.dataSource.register(RstreamsDataSource)
