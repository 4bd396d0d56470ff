"""``rstreams ping URL``: round trips over the rstreams protocol, as ``emp ping`` for EMP."""

from __future__ import annotations

import re
from collections.abc import Iterator
from functools import partial
import pytest
import trio

from rstreams import listener_port, open_stream_session
from rstreams.cli._ping import RoundTrips

from ._support import COMMAND_TIMEOUT, RSTREAMS, ServeProcess, free_port, rstreams

ANSWER = re.compile(r"^answer from (?P<url>\S+): seq=(?P<seq>\d+) time=(?P<ms>\d+\.\d{3}) ms$")
SUMMARY = re.compile(r"^min/avg/max/stddev = (\d+\.\d{3})/(\d+\.\d{3})/(\d+\.\d{3})/(\d+\.\d{3}) ms$")


@pytest.fixture(scope="module")
def demo_urls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[str]]:
    """The demo app on TCP and WebSocket: ``[tcp://..., ws://.../]``."""
    log = tmp_path_factory.mktemp("ping") / "log"
    args = ["serve", "rstreams.demo:app", "--tcp", "127.0.0.1:0", "--ws", "127.0.0.1:0"]
    with ServeProcess.start(args, log, listeners=2) as server:
        yield server.urls


@pytest.mark.parametrize("transport", [0, 1], ids=["tcp", "ws"])
def test_prints_each_round_trip_and_a_summary(demo_urls: list[str], transport: int) -> None:
    url = demo_urls[transport]
    result = rstreams("ping", url, "--count", "3", "--interval", "0")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.decode().splitlines()
    assert lines[0].startswith(f"connected to {url} in ")
    answers = [ANSWER.match(line) for line in lines[1:4]]
    assert all(answers), lines
    assert [(match["url"], int(match["seq"])) for match in answers if match] == [(url, 0), (url, 1), (url, 2)]
    assert lines[4] == f"--- {url}: 3 round trips ---"
    summary = SUMMARY.match(lines[5])
    assert summary, lines[5]
    times = sorted(float(match["ms"]) for match in answers if match)
    low, average, high, _ = (float(value) for value in summary.groups())
    assert (low, high) == (times[0], times[-1])
    assert low <= average <= high
    assert len(lines) == 6 and result.stderr == b""


async def test_a_peer_without_ping_answers_no_such_publisher_which_counts() -> None:
    # A peer that serves no publishers at all (a session without an app, as
    # a client's is) refuses $ping: that refusal is a round trip too.
    async def handler(stream: trio.SocketStream) -> None:
        async with open_stream_session(stream) as session:
            await session.wait_closed()

    with trio.fail_after(COMMAND_TIMEOUT):
        async with trio.open_nursery() as nursery:
            listeners = await nursery.start(partial(trio.serve_tcp, handler, 0, host="127.0.0.1"))
            url = f"tcp://127.0.0.1:{listener_port(listeners[0])}"
            result = await trio.run_process(
                [RSTREAMS, "ping", url, "--count", "2", "--interval", "0"], capture_stdout=True, capture_stderr=True, check=False
            )
            nursery.cancel_scope.cancel()
    assert result.returncode == 0, result.stderr
    assert [ANSWER.match(line) is not None for line in result.stdout.decode().splitlines()[1:3]] == [True, True]


def test_a_refused_connection() -> None:
    result = rstreams("ping", f"tcp://127.0.0.1:{free_port()}", "--count", "1")
    assert result.returncode == 4
    assert result.stderr.startswith(b"rstreams: cannot connect to tcp://127.0.0.1:")
    assert result.stdout == b""


@pytest.mark.parametrize("value", ["0", "-1", "x"])
def test_bad_counts_are_usage_errors(value: str) -> None:
    result = rstreams("ping", "tcp://127.0.0.1:1", "--count", value)
    assert result.returncode == 2


def test_summary_is_min_avg_max_and_population_deviation() -> None:
    trips = RoundTrips()
    for seconds in (0.001, 0.002, 0.003):
        trips.add(seconds)
    assert trips.summary() == "min/avg/max/stddev = 1.000/2.000/3.000/0.816 ms"
