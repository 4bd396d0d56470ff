"""Fixtures for the Spark tests: one local SparkSession and an rstreams server.

Spark is optional (``pip install -e '.[spark]'``). Where it is missing these
tests skip with the reason, except in CI (env ``CI`` set), where a missing
pyspark is a failure: CI installs the extra and must run them.

``spark`` is one ``local[2]`` session for the whole run (starting one costs
about 7 s), with 2 shuffle partitions, quiet logs, and the workers pointed at
this interpreter. ``server`` is a :class:`ServerThread`: trio in a daemon
thread serving the test publishers and topics on 127.0.0.1, because the Spark
calls in the tests block.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

import rstreams

ROOT = Path(__file__).resolve().parents[2]



def require_spark() -> None:
    """Skip the calling test module if pyspark or pyarrow is missing, with the
    reason; in CI (env ``CI`` set) fail instead, since CI must run them.

    Called at the top of each test module (a skip raised while loading a
    conftest is an error in pytest, not a skip)."""
    try:
        import pyarrow  # noqa: F401
        import pyspark  # noqa: F401
    except ImportError as error:
        if os.environ.get("CI"):
            raise RuntimeError(f"CI must run the Spark tests, but {error.name} is not installed: pip install -e '.[spark]'") from error
        pytest.skip(f"pyspark and pyarrow are not installed ({error}): pip install -e '.[spark]'", allow_module_level=True)


LOG4J2 = """\
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n
"""


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from pyspark.sql import SparkSession

    import rstreams.spark

    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    log_config = tmp_path_factory.mktemp("spark") / "log4j2.properties"
    log_config.write_text(LOG4J2)
    session = (
        SparkSession.builder.master("local[2]")
        .appName("rstreams-tests")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile=file:{log_config}")
        .config("spark.sql.streaming.forceDeleteTempCheckpointLocation", "true")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    rstreams.spark.register(session)
    yield session
    session.stop()


class ServerThread:
    """An rstreams server on 127.0.0.1 in a daemon thread running trio.

    ``call(fn, *args)`` runs an async function in the server's trio run and
    returns its result (with a timeout), for tests that publish into or read
    from its topics.
    """

    def __init__(self, app: rstreams.Router) -> None:
        self.app = app
        self.url = ""
        self._token: trio.lowlevel.TrioToken | None = None
        self._ready = threading.Event()
        self._stop: trio.Event | None = None
        self._thread = threading.Thread(target=trio.run, args=(self._main,), daemon=True, name="rstreams-test-server")
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the test server did not start within 10 s")

    async def _main(self) -> None:
        self._token = trio.lowlevel.current_trio_token()
        self._stop = trio.Event()
        async with trio.open_nursery() as nursery:
            listeners = await nursery.start(rstreams.serve_tcp, self.app, "127.0.0.1", 0)
            self.url = f"tcp://127.0.0.1:{rstreams.listener_port(listeners[0])}"
            self._ready.set()
            await self._stop.wait()
            nursery.cancel_scope.cancel()

    def call(self, function: Callable[..., Any], *args: Any, timeout: float = 30.0) -> Any:
        async def bounded() -> Any:
            with trio.fail_after(timeout):
                return await function(*args)

        return trio.from_thread.run(bounded, trio_token=self._token)

    def close(self) -> None:
        if self._stop is not None and self._token is not None:
            trio.from_thread.run_sync(self._stop.set, trio_token=self._token)
        self._thread.join(10)
