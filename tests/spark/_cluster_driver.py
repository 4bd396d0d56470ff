"""The Spark driver of test_cluster.py, in its own process (internal).

    python _cluster_driver.py MASTER URL ROWS MAX_ROWS CHECKPOINT LOG4J2

Runs one ``availableNow`` query over the topic ``events`` at URL on MASTER
with the ``noop`` sink, and prints one JSON line: the rows Spark counted,
the batches, the seconds, and the driver's resident memory (this Python
process and its JVM, from /proc) when the first batch ended and at most
afterwards. A process of its own because a Python process holds one
SparkContext, and the other Spark tests hold a ``local[2]`` one.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time


def rss(pid: int) -> int:
    """Resident bytes of ``pid`` (0 once it is gone)."""
    try:
        for line in open(f"/proc/{pid}/status"):
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def children(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = open(f"/proc/{entry}/stat").read()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry))
    return found


def main(master: str, url: str, rows: int, max_rows: int, checkpoint: str, log4j2: str) -> None:
    from pyspark.sql import SparkSession

    import rstreams.spark

    session = (
        SparkSession.builder.master(master)
        .appName("rstreams-cluster-test")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.memory", "1g")
        .config("spark.executor.memory", "1g")
        .config("spark.executor.cores", "1")
        .config("spark.cores.max", "2")
        .config("spark.pyspark.python", sys.executable)
        .config("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile=file:{log4j2}")
        .config("spark.executor.extraJavaOptions", f"-Dlog4j2.configurationFile=file:{log4j2}")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    rstreams.spark.register(session)
    jvm = [pid for pid in children(os.getpid()) if b"java" in open(f"/proc/{pid}/cmdline", "rb").read()]
    samples: list[tuple[int, int]] = []  # (python, jvm) bytes
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(0.1):
            samples.append((rss(os.getpid()), sum(rss(pid) for pid in jvm)))

    frame = (
        session.readStream.format("rstreams").option("url", url).option("topic", "events")
        .option("maxRowsPerBatch", str(max_rows)).load()
    )
    began = time.monotonic()
    query = frame.writeStream.format("noop").option("checkpointLocation", checkpoint).trigger(availableNow=True).start()
    # The baseline: once the first batch has ended (Python workers, JIT and
    # buffers warmed up); then sample until the query ends.
    while not query.recentProgress and query.isActive:
        time.sleep(0.05)
    baseline = (rss(os.getpid()), sum(rss(pid) for pid in jvm))
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    query.awaitTermination()
    seconds = time.monotonic() - began
    stop.set()
    sampler.join()
    samples.append((rss(os.getpid()), sum(rss(pid) for pid in jvm)))
    progress = [p for p in query.recentProgress if p["numInputRows"] > 0]
    print(json.dumps({
        "rows": sum(p["numInputRows"] for p in progress),
        "batches": len(progress),
        "first_batch_rows": progress[0]["numInputRows"] if progress else 0,
        "seconds": seconds,
        "batch_seconds": sum(p["durationMs"]["triggerExecution"] for p in progress) / 1000,
        "python_rss": [baseline[0], max(s[0] for s in samples)],
        "jvm_rss": [baseline[1], max(s[1] for s in samples)],
        "jvm_pids": jvm,
    }), flush=True)
    session.stop()


if __name__ == "__main__":
    master, url, rows, max_rows, checkpoint, log4j2 = sys.argv[1:]
    main(master, url, int(rows), int(max_rows), checkpoint, log4j2)
