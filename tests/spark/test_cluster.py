"""A Spark standalone cluster reads a partitioned topic: the executors connect themselves.

A master and two workers (one core, 1 GiB each) are started from the pyspark
installation with ``spark-class``, bound to 127.0.0.1; the test waits until
the master's JSON reports both alive. An rstreams server in its own process
serves a 2-partition topic filled with ``ROWS`` elements of 100 bytes. A
driver in its own process runs one ``availableNow`` query on
``spark://127.0.0.1:PORT`` with the ``noop`` sink. Then:

* Spark counted every row once;
* the server's statistics count the sessions, and every session that
  subscribed a range came from a process under a worker (an executor's
  Python worker), none from the driver, which only asks ``$offsets``;
* the driver's resident memory (its Python process and its JVM) grew by
  less than ``DRIVER_GROWTH`` after the first batch, while the rest of the
  gigabyte passed.

Every process is killed in teardown, even on failure.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .conftest import LOG4J2, require_spark

require_spark()

pytestmark = pytest.mark.timeout(300)

HERE = Path(__file__).resolve().parent
#: 10 million rows of 100 bytes: about 25 s of query on this 2-core machine.
ROWS = 10_000_000
MAX_ROWS = 1_000_000
#: The driver may grow by this much after its first batch, whatever ROWS is
#: (the data is 1 GB; through the driver it would show).
DRIVER_GROWTH = 200 * 1024 * 1024
#: Seconds for the cluster to come up, and for the query.
CLUSTER_DEADLINE = 60.0
QUERY_DEADLINE = 180.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def require_java() -> None:
    """Skip outside CI without Java, or without /proc (who owns a socket is read there); fail in CI."""
    if not Path("/proc/net/tcp").exists():
        if os.environ.get("CI"):
            raise RuntimeError("the cluster test reads /proc to tell executors from the driver: Linux only")
        pytest.skip("no /proc/net/tcp: the cluster test tells executors from the driver by /proc (Linux)")
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        if os.environ.get("CI"):
            raise RuntimeError("CI must run the cluster test, but Java is not installed")
        pytest.skip("Java is not installed: a Spark standalone cluster needs it")


def stop(process: subprocess.Popen[Any]) -> None:
    """Kill the process and its whole group (spark-class execs java; executors are its children)."""
    if process.poll() is None:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    process.wait(30)


class Cluster:
    def __init__(self, base: Path) -> None:
        from pyspark.find_spark_home import _find_spark_home

        spark_class = str(Path(_find_spark_home()) / "bin" / "spark-class")
        self.port, self.webui = free_port(), free_port()
        self.master_url = f"spark://127.0.0.1:{self.port}"
        (base / "log4j2.properties").write_text(LOG4J2)
        self.log4j2 = base / "log4j2.properties"
        env = {
            **os.environ,
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_WORKER_DIR": str(base / "work"),
            "SPARK_LOG_DIR": str(base / "logs"),
            "PYSPARK_PYTHON": sys.executable,
            "SPARK_DAEMON_JAVA_OPTS": f"-Dlog4j2.configurationFile=file:{self.log4j2}",
        }
        self.logs = base
        self.processes: list[subprocess.Popen[Any]] = []

        def launch(name: str, *args: str) -> None:
            log = open(base / f"{name}.log", "w")
            self.processes.append(
                subprocess.Popen([spark_class, *args], env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
            )

        launch("master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(self.port), "--webui-port", str(self.webui))
        for i in (1, 2):
            launch(
                f"worker{i}", "org.apache.spark.deploy.worker.Worker", self.master_url, "--host", "127.0.0.1",
                "--cores", "1", "--memory", "1g", "--webui-port", str(free_port()), "--work-dir", str(base / f"work{i}"),
            )

    def wait_alive(self, workers: int) -> None:
        deadline = time.monotonic() + CLUSTER_DEADLINE
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.webui}/json/", timeout=5) as response:
                    state = json.load(response)
                if sum(1 for w in state.get("workers", []) if w.get("state") == "ALIVE") >= workers:
                    return
            except (OSError, ValueError):
                # Not up yet, or up and answering with a page rather than
                # the JSON (seen once in CI: an HTML page at /json/ while
                # the master started): ask again until the deadline.
                pass
            if time.monotonic() > deadline or any(p.poll() is not None for p in self.processes):
                raise RuntimeError(f"the cluster did not report {workers} alive workers; logs in {self.logs}")
            time.sleep(0.5)

    @property
    def worker_pids(self) -> list[int]:
        return [p.pid for p in self.processes[1:]]

    def close(self) -> None:
        for process in self.processes:
            stop(process)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    require_java()
    cluster = Cluster(tmp_path)
    try:
        cluster.wait_alive(2)
        yield cluster
    finally:
        cluster.close()


@pytest.fixture
def server() -> Iterator[tuple[subprocess.Popen[str], str]]:
    process = subprocess.Popen(
        [sys.executable, str(HERE / "_cluster_server.py"), str(ROWS)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, start_new_session=True,
    )
    try:
        assert process.stdout is not None
        port = process.stdout.readline().strip()
        assert port, "the rstreams server did not start"
        yield process, f"tcp://127.0.0.1:{port}"
    finally:
        stop(process)


def test_the_executors_of_a_standalone_cluster_read_the_topic_themselves(
    cluster: Cluster, server: tuple[subprocess.Popen[str], str], tmp_path: Path
) -> None:
    process, url = server
    driver = subprocess.Popen(
        [sys.executable, str(HERE / "_cluster_driver.py"), cluster.master_url, url, str(ROWS), str(MAX_ROWS),
         str(tmp_path / "ckpt"), str(cluster.log4j2)],
        stdout=subprocess.PIPE, stderr=open(tmp_path / "driver.log", "w"), text=True, start_new_session=True,
        env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable},
    )
    try:
        out, _ = driver.communicate(timeout=QUERY_DEADLINE)
    finally:
        stop(driver)
    assert driver.returncode == 0, f"the driver failed; see {tmp_path / 'driver.log'}"
    result = json.loads(out.strip().splitlines()[-1])
    print(f"\n{ROWS:,} rows on {cluster.master_url}: {result}")
    # Every row once.
    assert result["rows"] == ROWS
    assert result["batches"] == ROWS // MAX_ROWS
    # Who connected: ask the server for its record.
    assert process.stdin is not None and process.stdout is not None
    process.stdin.write("\n")
    process.stdin.flush()
    record = json.loads(process.stdout.readline())
    peers = record["peers"]
    statistics = record["statistics"]
    assert statistics["server"]["sessions_opened"] == len(peers)
    owners = {peer["pid"] for peer in peers}
    assert None not in owners, f"a peer's socket had no owner: {peers}"
    # The driver is its Python process, its JVM, and the Python workers the
    # JVM starts to plan (latestOffset runs there); the executors are under a worker.
    drivers = {driver.pid, *result["jvm_pids"]}
    from_executors = [peer for peer in peers if set(peer["ancestors"]) & set(cluster.worker_pids)]
    from_driver = [peer for peer in peers if {peer["pid"], *peer["ancestors"]} & drivers]
    assert len(from_executors) + len(from_driver) == len(peers), f"sessions from outside the cluster and the driver: {peers}"
    executors = {peer["pid"] for peer in from_executors}
    # Each batch reads its two ranges over executor sessions; the driver only plans.
    ranges = [name for name in record["subscriptions"] if name.startswith("events?partition=")]
    assert len(ranges) == 2 * result["batches"]
    assert len(from_executors) >= 1 and from_driver, (from_executors, from_driver)
    assert not any(name == "events" for name in record["subscriptions"])
    print(f"sessions: {len(from_executors)} from {len(executors)} executor processes, {len(from_driver)} from the driver")
    # The driver's memory stayed flat after the first batch.
    python_growth = result["python_rss"][1] - result["python_rss"][0]
    jvm_growth = result["jvm_rss"][1] - result["jvm_rss"][0]
    assert python_growth < DRIVER_GROWTH, result
    assert jvm_growth < DRIVER_GROWTH, result
