"""``rstreams sub`` against ``rstreams serve examples.demo:app``: output
formats, --count, and an exit status and message for each way a stream ends."""

from __future__ import annotations

import json
import signal

import pytest

from rstreams import ADAPTIVE_INITIAL
from rstreams.cli._sub import _Demand

from ._support import OutputLines, ServeProcess, free_port, rstreams, start, stop


def test_hex_prints_one_element_per_line(demo_server: ServeProcess) -> None:
    result = rstreams("sub", demo_server.url, "range?count=5", "--format", "hex")
    assert result.returncode == 0, result.stderr
    assert result.stdout == b"".join(b"%016x\n" % i for i in range(5))
    assert result.stderr == b""


def test_raw_prints_the_bytes_then_a_newline(demo_server: ServeProcess) -> None:
    result = rstreams("sub", demo_server.url, "blob?count=2&size=3")
    assert result.returncode == 0, result.stderr
    assert result.stdout == b"\x00\x01\x02\n\x01\x02\x03\n"


def test_large_split_elements_arrive_whole(demo_server: ServeProcess) -> None:
    result = rstreams("sub", demo_server.url, "blob?count=2&size=200000", "--format", "hex")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert [bytes.fromhex(line.decode()) for line in lines] == [
        bytes((i + j) % 256 for j in range(200000)) for i in range(2)
    ]


def test_msgpack_prints_ticks_as_json(demo_server: ServeProcess) -> None:
    result = rstreams("sub", demo_server.url, "ticker?interval=0.01", "--format", "msgpack", "--count", "3")
    assert result.returncode == 0, result.stderr
    ticks = [json.loads(line) for line in result.stdout.splitlines()]
    assert [tick[0] for tick in ticks] == [0, 1, 2]
    assert all(isinstance(tick[1], float) and isinstance(tick[2], float) for tick in ticks)


@pytest.mark.parametrize("prefetch", ["1", "3", "32", None])
def test_count_stops_after_n_elements(demo_server: ServeProcess, prefetch: str | None) -> None:
    window = ["--prefetch", prefetch] if prefetch else []  # None: the adaptive window
    result = rstreams("sub", demo_server.url, "range?count=1000000", "--format", "hex", "--count", "7", *window)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [b"%016x" % i for i in range(7)]


@pytest.mark.parametrize("prefetch", ["5000", None])
def test_many_elements(demo_server: ServeProcess, prefetch: str | None) -> None:
    window = ["--prefetch", prefetch] if prefetch else []  # None: the adaptive window
    result = rstreams("sub", demo_server.url, "range?count=200000", "--format", "hex", *window)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 200000 and lines[-1] == b"%016x" % 199999


def test_publisher_error_exits_1_after_the_elements(demo_server: ServeProcess) -> None:
    result = rstreams("sub", demo_server.url, "fail?after=3", "--format", "hex")
    assert result.returncode == 1
    assert result.stdout.splitlines() == [b"%016x" % i for i in range(3)]
    assert result.stderr == b"rstreams: publisher error: fail: failing after 3 elements as asked\n"


def test_unknown_publisher_exits_1(demo_server: ServeProcess) -> None:
    result = rstreams("sub", demo_server.url, "nope")
    assert result.returncode == 1
    assert result.stdout == b""
    assert result.stderr == b"rstreams: publisher error: no such publisher: nope\n"


def test_bad_parameters_exit_1_with_the_reason(demo_server: ServeProcess) -> None:
    result = rstreams("sub", demo_server.url, "range?count=-1")
    assert result.returncode == 1
    assert b"parameter count=-1 is below the minimum 0" in result.stderr


@pytest.mark.parametrize(("name", "fmt"), [("range?count=1", "json"), ("range?count=1", "msgpack")])
def test_undecodable_elements_exit_5(demo_server: ServeProcess, name: str, fmt: str) -> None:
    result = rstreams("sub", demo_server.url, name, "--format", fmt)
    assert result.returncode == 5
    assert result.stderr.startswith(b"rstreams: element 0 is not valid")


def test_connection_refused_exits_4() -> None:
    url = f"tcp://127.0.0.1:{free_port()}"
    result = rstreams("sub", url, "range")
    assert result.returncode == 4
    assert result.stderr.startswith(f"rstreams: cannot connect to {url}".encode())


def test_lost_connection_exits_4(fresh_demo_server: ServeProcess) -> None:
    subscriber = start("sub", fresh_demo_server.url, "ticker?interval=0.01", "--format", "msgpack")
    try:
        OutputLines(subscriber.stdout).readlines(2)  # type: ignore[arg-type]
        fresh_demo_server.process.kill()  # no goodbye
        assert subscriber.wait(timeout=10) == 4
        assert subscriber.stderr is not None
        assert subscriber.stderr.read().startswith(b"rstreams: connection lost: ")
    finally:
        stop(subscriber)
        subscriber.stdout.close()  # type: ignore[union-attr]
        subscriber.stderr.close()  # type: ignore[union-attr]


def test_ctrl_c_leaves_with_goodbye(demo_server: ServeProcess) -> None:
    subscriber = start("sub", demo_server.url, "ticker?interval=0.01", "--format", "msgpack")
    try:
        OutputLines(subscriber.stdout).readlines(2)  # type: ignore[arg-type]
        assert stop(subscriber, signal.SIGINT) == 130
        assert subscriber.stderr.read() == b""  # type: ignore[union-attr]
    finally:
        stop(subscriber)
        subscriber.stdout.close()  # type: ignore[union-attr]
        subscriber.stderr.close()  # type: ignore[union-attr]
    # The server is unharmed.
    assert rstreams("sub", demo_server.url, "range?count=1", "--format", "hex").returncode == 0


def test_closed_stdout_is_a_quiet_end(demo_server: ServeProcess) -> None:
    subscriber = start("sub", demo_server.url, "range?count=100000000", "--format", "hex")
    try:
        output = OutputLines(subscriber.stdout)  # type: ignore[arg-type]
        assert output.readline() == b"0000000000000000"
        subscriber.stdout.close()  # type: ignore[union-attr]  # like `| head -1`
        assert subscriber.wait(timeout=10) == 0
        assert subscriber.stderr.read() == b""  # type: ignore[union-attr]
    finally:
        stop(subscriber)
        subscriber.stderr.close()  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--prefetch", "0"], b"must be at least 1"),
        (["--count", "-1"], b"--count"),
        (["--format", "xml"], b"--format"),
    ],
)
def test_bad_options_are_usage_errors(demo_server: ServeProcess, args: list[str], message: bytes) -> None:
    result = rstreams("sub", demo_server.url, "range", *args)
    assert result.returncode == 2
    assert message in result.stderr


@pytest.mark.parametrize("url", ["http://127.0.0.1:1", "tcp://127.0.0.1", "tcp://127.0.0.1:1/path"])
def test_bad_urls_are_usage_errors(url: str) -> None:
    result = rstreams("sub", url, "range")
    assert result.returncode == 2
    assert result.stderr.startswith(b"rstreams: ")
    assert b"Traceback" not in result.stderr


def test_ca_is_for_tls_only(demo_server: ServeProcess) -> None:
    result = rstreams("sub", demo_server.url, "range", "--ca", "ca.pem")
    assert result.returncode == 2
    assert b"--ca is for tls://" in result.stderr


def test_the_adaptive_window_never_asks_past_the_count() -> None:
    demand = _Demand(None, 7)
    assert demand.more() == 7  # the first window, 16, capped at the count
    demand.printed = 7
    demand.starved()
    assert demand.more() == 0


def test_the_adaptive_window_grows_while_printing_keeps_up() -> None:
    demand = _Demand(None, None)
    requested = demand.more()
    assert requested == ADAPTIVE_INITIAL
    for _ in range(40):
        # Print everything requested, then wait: starved each time.
        demand.printed = requested
        demand.starved()
        requested += demand.more()
    assert requested - demand.printed > 1000
    fixed = _Demand(32, None)
    assert fixed.more() == 32
    fixed.printed = 32
    fixed.starved()  # a fixed window ignores it
    assert fixed.more() == 32


@pytest.mark.timeout(60)
def test_a_server_that_never_says_hello_is_a_failed_connect() -> None:
    # Exit 4, as every bridge's URL reports the same silence, not 3 ("the
    # server's goodbye": it said nothing). A listener that never accepts:
    # the kernel's backlog completes the connection, and nothing comes back
    # until the session's handshake_timeout (10 s).
    import socket

    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
        result = rstreams("sub", f"tcp://127.0.0.1:{port}", "range?count=1")
    assert result.returncode == 4, result.stderr
    assert result.stderr == b"rstreams: cannot connect: the server sent no hello (handshake timeout: no hello within 10 s)\n"
