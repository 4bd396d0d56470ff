"""A live pipeline: sensors -> rstreams -> Spark -> rstreams -> your browser.

Run from the repository root (after ``pip install -e '.[spark]'``)::

    python examples/pipeline.py

What runs, all in this one process:

1. an rstreams server on 127.0.0.1:9000 (and a WebSocket listener on :9001,
   which also serves the page) with two topics, ``sensors``
   and ``results``, and a ``stats`` publisher;
2. a sensor client that publishes readings (msgpack ``{"sensor", "ts",
   "value"}``) into ``sensors`` over TCP, as fast as the topic lets it up to
   ``--rate`` per sensor per second;
3. a Spark query (``local[2]``): the ``rstreams`` source reads ``sensors``,
   a 1-second watermark and 1-second event-time windows per sensor compute
   count / avg / min / max, and the ``rstreams`` sink publishes each closed
   window into ``results`` (JSON);
4. ``stats``: once a second, JSON with every topic's counters (published,
   room, each subscriber's lag and demand served) and Spark's last progress
   (input and processed rows per second, batch duration), so the demand and
   throughput of each stage can be watched: ``rstreams sub
   tcp://127.0.0.1:9000 stats --format json``, or the page
   ``http://127.0.0.1:9001/pipeline.html``, which charts ``results`` live.

Policy choices: ``sensors`` is read by Spark with the ``block`` policy, so
if Spark falls behind, the topic fills (4096 readings) and then the sensor
client is held back by demand instead of anything growing; a browser that
watches ``sensors`` directly would use ``policy=latest``. Ctrl-C (or
``--duration``) stops the query, then the server.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import rstreams  # noqa: E402

__all__ = ["app", "sensors", "results", "sensor_readings", "run_sensors", "start_query", "spark_progress"]

app = rstreams.Router()
#: Raw readings. 4096 is a few seconds at the default rate: enough to ride
#: out a slow micro-batch, small enough that a stalled Spark stops the sensors.
sensors = rstreams.Topic("sensors", capacity=4096, codec="msgpack")
#: Closed windows, as JSON; the browser reads them with from=earliest.
results = rstreams.Topic("results", capacity=2048)
sensors.mount(app)
results.mount(app)

#: Spark's last progress, set by the driver thread and read by ``stats``.
spark_progress: dict[str, Any] = {}
_progress_lock = threading.Lock()


def _topic_stats(topic: rstreams.Topic) -> dict[str, Any]:
    stats = topic.statistics()
    return {
        "published": stats.published,
        "held": stats.held,
        "room": stats.room,
        "capacity": stats.capacity,
        "publishers": stats.publishers,
        "subscribers": [
            {"policy": s.policy, "lag": s.lag, "delivered": s.delivered, "dropped": s.dropped} for s in stats.subscribers
        ],
    }


@app.publisher("stats", codec="json")
async def stats(sink: rstreams.Sink, request: rstreams.SubscribeRequest) -> None:
    """Every ``interval`` seconds (1): topic counters and Spark's progress."""
    interval = request.float_param("interval", 1.0, minimum=0.1)
    while True:
        await sink.wait_demand()
        with _progress_lock:
            progress = dict(spark_progress)
        await sink.send(
            {"time": time.time(), "topics": {t.name: _topic_stats(t) for t in (sensors, results)}, "spark": progress}
        )
        await trio.sleep(interval)


async def sensor_readings(count: int, rate: float) -> AsyncIterator[dict[str, Any]]:
    """Readings of ``count`` sensors, ``rate`` per sensor per second: a random
    walk around a sine wave, timestamped now (event time for Spark)."""
    walk = random.Random(7)
    values = [20.0 + 5 * i for i in range(count)]
    period = 1.0 / rate
    next_tick = trio.current_time()
    while True:
        now = time.time()
        for i in range(count):
            values[i] += walk.gauss(0.0, 0.3)
            yield {"sensor": f"s{i}", "ts": now, "value": values[i] + 3 * math.sin(now / 5 + i)}
        next_tick += period
        await trio.sleep_until(max(next_tick, trio.current_time()))


async def run_sensors(url: str, count: int = 4, rate: float = 20.0) -> None:
    """Publish readings into ``sensors`` at ``url`` until cancelled."""
    async with rstreams.open_session(url, app=rstreams.Router()) as session:
        await rstreams.publish_to_topic(session, "sensors", sensor_readings(count, rate), codec="msgpack")


def start_query(spark: Any, url: str, checkpoint: str, *, trigger: str = "1 second") -> Any:
    """The Spark half: windows per sensor from ``sensors`` into ``results``."""
    from pyspark.sql import functions as F

    import rstreams.spark

    rstreams.spark.register(spark)
    readings = (
        spark.readStream.format("rstreams")
        .option("url", url)
        .option("publisher", "sensors")  # block policy: Spark paces the sensors
        .option("format", "msgpack")
        .option("maxRowsPerBatch", 2000)
        .schema("sensor STRING, ts DOUBLE, value DOUBLE")
        .load()
    )
    windows = (
        readings.withColumn("event_time", F.timestamp_seconds("ts"))
        .withWatermark("event_time", "1 second")
        .groupBy(F.window("event_time", "1 second"), "sensor")
        .agg(F.count("*").alias("count"), F.avg("value").alias("avg"), F.min("value").alias("min"), F.max("value").alias("max"))
        .select(
            "sensor",
            F.unix_timestamp(F.col("window.start")).alias("start"),
            F.unix_timestamp(F.col("window.end")).alias("end"),
            "count",
            "avg",
            "min",
            "max",
        )
    )
    return (
        windows.writeStream.format("rstreams")
        .option("url", url)
        .option("topic", "results")
        .option("format", "json")
        .outputMode("append")  # a window is published once, when the watermark closes it
        .option("checkpointLocation", checkpoint)
        .trigger(processingTime=trigger)
        .start()
    )


def record_progress(query: Any) -> dict[str, Any] | None:
    """Copy the interesting part of ``query.lastProgress`` for ``stats``."""
    progress = query.lastProgress
    if not progress:
        return None
    summary = {
        "batch": progress.get("batchId"),
        "inputRows": progress.get("numInputRows"),
        "inputRowsPerSecond": round(progress.get("inputRowsPerSecond") or 0.0, 1),
        "processedRowsPerSecond": round(progress.get("processedRowsPerSecond") or 0.0, 1),
        "batchMs": (progress.get("durationMs") or {}).get("triggerExecution"),
        "watermark": (progress.get("eventTime") or {}).get("watermark"),
    }
    with _progress_lock:
        spark_progress.clear()
        spark_progress.update(summary)
    return summary


class Services:
    """The server and the sensors, in one trio run in a daemon thread."""

    def __init__(self, host: str, port: int, ws_port: int | None, sensor_count: int, rate: float) -> None:
        self.url = ""
        self.ws_url: str | None = None
        self.ws_error: str | None = None
        self._args = (host, port, ws_port, sensor_count, rate)
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._token: trio.lowlevel.TrioToken | None = None
        self._stop: trio.Event | None = None
        self._thread = threading.Thread(target=self._thread_main, daemon=True, name="pipeline-services")
        self._thread.start()
        if not self._ready.wait(15):
            raise RuntimeError("the rstreams server did not start")
        if self._error is not None:
            # trio wraps a failed listener in an ExceptionGroup whose own text
            # ("Exceptions from Trio nursery") says nothing: show the cause.
            cause = self._error
            while isinstance(cause, BaseExceptionGroup) and len(cause.exceptions) == 1:
                cause = cause.exceptions[0]
            raise RuntimeError(f"the rstreams server on {host}:{port} failed: {type(cause).__name__}: {cause}") from self._error

    def _thread_main(self) -> None:
        try:
            trio.run(self._main)
        except BaseException as error:  # noqa: BLE001 - reported to the main thread
            self._error = error
            self._ready.set()

    async def _main(self) -> None:
        host, port, ws_port, sensor_count, rate = self._args
        self._token = trio.lowlevel.current_trio_token()
        self._stop = trio.Event()
        async with trio.open_nursery() as nursery:
            listeners = await nursery.start(rstreams.serve_tcp, app, host, port)
            self.url = f"tcp://{host}:{rstreams.listener_port(listeners[0])}"
            if ws_port is not None:
                # The WebSocket listener also serves rstreams/web/, pipeline.html
                # included. Without it (port taken) the pipeline still runs.
                try:
                    ws_listeners = await nursery.start(rstreams.serve_websocket, app, host, ws_port)
                    ws_port = rstreams.listener_port(ws_listeners[0])
                except OSError as error:  # the page is optional: a taken port does not stop the pipeline
                    self.ws_error = f"{type(error).__name__}: {error}"
                else:
                    self.ws_url = f"http://{host}:{ws_port}/pipeline.html"
            nursery.start_soon(run_sensors, self.url, sensor_count, rate)
            self._ready.set()
            await self._stop.wait()
            nursery.cancel_scope.cancel()

    def topic_stats(self, topic: rstreams.Topic) -> dict[str, Any]:
        """``topic``'s counters, read in the trio thread that owns the topic."""
        return trio.from_thread.run_sync(_topic_stats, topic, trio_token=self._token)  # type: ignore[no-any-return]

    def close(self) -> None:
        if self._token is not None and self._stop is not None:
            try:
                trio.from_thread.run_sync(self._stop.set, trio_token=self._token)
            except trio.RunFinishedError:
                pass
        self._thread.join(10)


def _spark_session() -> Any:
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    log_config = Path(tempfile.mkdtemp(prefix="rstreams-pipeline-")) / "log4j2.properties"
    log_config.write_text("rootLogger.level = error\nrootLogger.appenderRef.stderr.ref = console\n"
                          "appender.console.type = Console\nappender.console.name = console\n"
                          "appender.console.target = SYSTEM_ERR\nappender.console.layout.type = PatternLayout\n"
                          "appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n\n"
                          # Stopping the query interrupts a batch; Spark logs that
                          # as errors with stack traces. They are expected here.
                          "logger.v2.name = org.apache.spark.sql.execution.datasources.v2\n"
                          "logger.v2.level = off\nlogger.utils.name = org.apache.spark.util.Utils\n"
                          "logger.utils.level = off\n")
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("rstreams-pipeline")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile=file:{log_config}")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def main() -> int:
    parser = argparse.ArgumentParser(description="sensors -> rstreams -> Spark -> rstreams -> browser")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9000, help="rstreams TCP port (0: any free port)")
    parser.add_argument("--ws-port", type=int, default=9001, help="WebSocket + page port, if available")
    parser.add_argument("--sensors", type=int, default=4)
    parser.add_argument("--rate", type=float, default=20.0, help="readings per sensor per second")
    parser.add_argument("--duration", type=float, default=0.0, help="stop after this many seconds (0: run until Ctrl-C)")
    parser.add_argument("--windows", type=int, default=0, help="stop once this many windows are published (0: never)")
    args = parser.parse_args()

    try:
        services = Services(args.host, args.port, args.ws_port, args.sensors, args.rate)
    except RuntimeError as error:  # typically the port is taken (another pipeline still running)
        print(f"pipeline: {error}; --port 0 picks a free port", file=sys.stderr)
        return 1
    print(f"pipeline: rstreams on {services.url}", flush=True)
    if services.ws_url:
        print(f"pipeline: open {services.ws_url}", flush=True)
    else:
        if services.ws_error:
            print(f"pipeline: the WebSocket listener did not start ({services.ws_error})", flush=True)
        print("pipeline: no WebSocket listener in this rstreams; watch with "
              f"`rstreams sub {services.url} stats --format json`", flush=True)
    # Measured on 2 shared cores (docs/spark.md): the JVM and a local session
    # take 7-12 s, the first micro-batch of a fresh JVM 8-15 s more, and a
    # window is published once the watermark passes it (2 s of event time).
    print("pipeline: starting Spark: the session takes 7-12 s and the first results "
          "20-30 s (a JVM starting; later batches take well under a second)...", flush=True)
    launched = time.monotonic()
    try:
        spark = _spark_session()
    except KeyboardInterrupt:
        services.close()
        return 130
    print(f"pipeline: Spark session up in {time.monotonic() - launched:.1f} s; starting the query", flush=True)
    checkpoint = tempfile.mkdtemp(prefix="rstreams-pipeline-ckpt-")
    query = start_query(spark, services.url, checkpoint)
    started = time.monotonic()
    last_batch = None
    try:
        while query.isActive and (not args.duration or time.monotonic() - started < args.duration):
            if args.windows and services.topic_stats(results)["published"] >= args.windows:
                break
            time.sleep(1.0)
            summary = record_progress(query)
            if summary and summary["batch"] != last_batch:
                if last_batch is None:
                    print(f"pipeline: first batch {time.monotonic() - launched:.1f} s after starting Spark", flush=True)
                last_batch = summary["batch"]
                sensor_stats = services.topic_stats(sensors)
                print(
                    f"pipeline: batch {summary['batch']}: {summary['inputRows']} rows in "
                    f"{summary['batchMs']} ms ({summary['processedRowsPerSecond']} rows/s); "
                    f"sensors published {sensor_stats['published']}, room {sensor_stats['room']}; "
                    f"results published {services.topic_stats(results)['published']}",
                    flush=True,
                )
        if query.exception():
            print(f"pipeline: the query failed: {query.exception()}", file=sys.stderr)
            return 1
    except KeyboardInterrupt:
        pass
    finally:
        query.stop()
        spark.stop()
    published = services.topic_stats(results)["published"]
    services.close()
    print(f"pipeline: done; {published} windows published", flush=True)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except* KeyboardInterrupt:
        sys.exit(130)  # Ctrl-C while starting or stopping: no traceback
