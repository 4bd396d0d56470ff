"""What a server logs (``rstreams._logs``): the records an operator reads.

Every test runs a real :class:`rstreams.Server` on 127.0.0.1 and reads the
records of the ``rstreams`` logger with caplog: the event, its fields (peer
address, transport, reason), its level, and what is never there (a
traceback for a peer's mistake, a record per element).
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

import rstreams
from rstreams.protocol import Goodbye, Hello, encode
from rstreams._logs import LOG_LINES_BURST, LOG_LINES_INTERVAL, PEER_TEXT_LOGGED, JsonFormatter, LogThrottle, PeerLogThrottles, peer_address, transport_name

from ._support import standard_app, wait_for

TIMEOUT = 20


@asynccontextmanager
async def tcp_server(server: rstreams.Server) -> AsyncIterator[str]:
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(server.serve_tcp, "127.0.0.1", 0)
        yield f"tcp://127.0.0.1:{rstreams.listener_port(listeners[0])}"
        nursery.cancel_scope.cancel()


def events(caplog: pytest.LogCaptureFixture, name: str) -> list[logging.LogRecord]:
    return [record for record in caplog.records if getattr(record, "event", None) == name]


async def test_session_open_and_close_are_info_with_peer_transport_and_reason(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="rstreams")
    server = rstreams.Server(standard_app())
    with trio.fail_after(TIMEOUT):
        async with tcp_server(server) as url:
            async with rstreams.open_session(url) as client:
                await client.fetch("range?count=3", 3)
                await wait_for(lambda: bool(events(caplog, "session_open")))
                [opened] = events(caplog, "session_open")
            await wait_for(lambda: bool(events(caplog, "session_close")))
    [closed] = events(caplog, "session_close")
    assert opened.levelno == closed.levelno == logging.INFO
    # The peer is the client's end of the connection: 127.0.0.1 and a port.
    assert opened.peer.startswith("127.0.0.1:") and int(opened.peer.split(":")[1]) > 0  # type: ignore[attr-defined]
    assert closed.peer == opened.peer  # type: ignore[attr-defined]
    assert opened.transport == closed.transport == "tcp"  # type: ignore[attr-defined]
    assert closed.reason == "goodbye"  # type: ignore[attr-defined]
    assert opened.peer in opened.getMessage() and "goodbye" in closed.getMessage()  # type: ignore[attr-defined]


async def test_websocket_sessions_name_their_transport(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="rstreams")
    server = rstreams.Server(standard_app())
    with trio.fail_after(TIMEOUT):
        async with trio.open_nursery() as nursery:
            listeners = await nursery.start(server.serve_websocket, "127.0.0.1", 0)
            async with rstreams.open_session(f"ws://127.0.0.1:{rstreams.listener_port(listeners[0])}/") as client:
                await client.fetch("range?count=1", 1)
                await wait_for(lambda: bool(events(caplog, "session_open")))
            nursery.cancel_scope.cancel()
    [opened] = events(caplog, "session_open")
    assert opened.transport == "ws" and opened.peer.startswith("127.0.0.1:")  # type: ignore[attr-defined]


async def test_a_bad_parameter_is_one_line_with_the_peer_and_no_traceback(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="rstreams")
    server = rstreams.Server(standard_app())
    with trio.fail_after(TIMEOUT):
        async with tcp_server(server) as url:
            async with rstreams.open_session(url) as client:
                with pytest.raises(rstreams.PublisherError, match="count='many' is not an integer"):
                    await client.fetch("range?count=many", 1)
    [bad] = events(caplog, "bad_input")
    assert bad.levelno == logging.INFO
    assert bad.peer.startswith("127.0.0.1:") and bad.peer in bad.getMessage()  # type: ignore[attr-defined]
    assert bad.publisher == "range?count=many"  # type: ignore[attr-defined]
    assert "\n" not in bad.getMessage()
    assert not [record for record in caplog.records if record.exc_info]


async def test_a_publisher_bug_still_logs_its_traceback(caplog: pytest.LogCaptureFixture) -> None:
    async def broken(sink: rstreams.Sink) -> None:
        raise ValueError("the publisher's own bug")  # a ValueError, but not a parameter

    server = rstreams.Server(standard_app(broken=broken))
    with trio.fail_after(TIMEOUT):
        async with tcp_server(server) as url:
            async with rstreams.open_session(url) as client:
                with pytest.raises(rstreams.PublisherError):
                    await client.fetch("broken", 1)
    assert not events(caplog, "bad_input")
    assert [record for record in caplog.records if record.exc_info and record.levelno == logging.WARNING]


def test_a_log_throttle_writes_a_burst_then_one_line_an_interval_with_the_count_skipped() -> None:
    now = [0.0]
    throttle = LogThrottle(3, 10.0, clock=lambda: now[0])
    assert [throttle.admit() for _ in range(3)] == [0, 0, 0]
    assert throttle.admit() == 0  # (the first paced line: none skipped yet)
    assert [throttle.admit() for _ in range(5)] == [None] * 5 and throttle.not_logged == 5
    now[0] += 9.9
    assert throttle.admit() is None
    now[0] += 0.1
    assert throttle.admit() == 6 and throttle.not_logged == 0
    assert throttle.admit() is None and throttle.not_logged == 1


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.floats(min_value=0, max_value=30), st.integers(min_value=0, max_value=50)), max_size=40))
def test_a_log_throttle_accounts_for_every_line(steps: list[tuple[float, int]]) -> None:
    # Any pace of failures: every line is written or counted in a later one
    # (or in not_logged, for the session's last word), and at most the burst
    # plus one line an interval reach the log.
    now = [0.0]
    throttle = LogThrottle(LOG_LINES_BURST, LOG_LINES_INTERVAL, clock=lambda: now[0])
    written = reported = asked = 0
    for wait, count in steps:
        now[0] += wait
        for _ in range(count):
            asked += 1
            skipped = throttle.admit()
            if skipped is not None:
                written += 1
                reported += skipped
    assert written + reported + throttle.not_logged == asked
    assert written <= LOG_LINES_BURST + 1 + now[0] / LOG_LINES_INTERVAL


async def test_a_peer_repeating_bad_parameters_cannot_fill_the_log(caplog: pytest.LogCaptureFixture) -> None:
    # 7,700 bad_input lines a second from one connection (some 100 GB a day)
    # before; now the first LOG_LINES_BURST, then one every interval, and
    # the session's close line says how many were not written.
    caplog.set_level(logging.INFO, logger="rstreams")
    server = rstreams.Server(standard_app())
    failures = 200
    with trio.fail_after(TIMEOUT):
        started = trio.current_time()
        async with tcp_server(server) as url:
            async with rstreams.open_session(url) as client:
                for _ in range(failures):
                    with pytest.raises(rstreams.PublisherError):
                        await client.fetch("range?count=many", 1)
            await wait_for(lambda: bool(events(caplog, "session_close")))
        elapsed = trio.current_time() - started
    lines = events(caplog, "bad_input")
    [closed] = events(caplog, "session_close")
    not_logged = [getattr(line, "not_logged", 0) for line in lines]
    final = int(closed.getMessage().split("(")[1].split(" ")[0])
    assert "lines about its host's streams not logged since the last" in closed.getMessage()
    assert len(lines) + sum(not_logged) + final == failures
    assert LOG_LINES_BURST < len(lines) <= LOG_LINES_BURST + 2 + elapsed / LOG_LINES_INTERVAL


async def test_a_protocol_error_is_one_line_with_the_peer(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="rstreams")
    server = rstreams.Server(standard_app())
    with trio.fail_after(TIMEOUT):
        async with tcp_server(server) as url:
            port = int(url.rsplit(":", 1)[1])
            stream = await trio.open_tcp_stream("127.0.0.1", port)
            async with stream:
                await stream.send_all(b"\xc1 not the protocol")
                while await stream.receive_some():  # until the server closes
                    pass
            await wait_for(lambda: bool(events(caplog, "session_close")))
    [bad] = events(caplog, "bad_input")
    assert bad.levelno == logging.INFO and bad.peer.startswith("127.0.0.1:")  # type: ignore[attr-defined]
    assert not bad.exc_info and "\n" not in bad.getMessage()
    [closed] = events(caplog, "session_close")
    assert closed.reason == bad.reason  # type: ignore[attr-defined]


async def test_each_stream_logs_subscribe_cancel_complete_and_error_at_debug_only(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="rstreams")
    server = rstreams.Server(standard_app())
    with trio.fail_after(TIMEOUT):
        async with tcp_server(server) as url:
            async with rstreams.open_session(url) as client:
                await client.fetch("range?count=1000", 1000)  # completes
                await client.fetch("range?count=1000", 1)  # cancelled after the first element
                with pytest.raises(rstreams.UnknownPublisher):
                    await client.fetch("nothing", 1)
                await wait_for(lambda: len(events(caplog, "stream_cancel")) == 1)
    subscribes = events(caplog, "stream_subscribe")
    assert [record.publisher for record in subscribes] == ["range?count=1000", "range?count=1000", "nothing"]  # type: ignore[attr-defined]
    [complete] = events(caplog, "stream_complete")
    [cancel] = events(caplog, "stream_cancel")
    [error] = events(caplog, "stream_error")
    assert complete.stream == subscribes[0].stream and cancel.stream == subscribes[1].stream  # type: ignore[attr-defined]
    assert error.stream == subscribes[2].stream and error.reason == "no such publisher"  # type: ignore[attr-defined]
    for record in (*subscribes, complete, cancel, error):
        assert record.levelno == logging.DEBUG and record.peer.startswith("127.0.0.1:")  # type: ignore[attr-defined]
    # 2001 elements went out: nothing was logged per element.
    assert len(caplog.records) < 20


async def test_connections_beyond_the_limit_are_refused_with_a_record(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="rstreams")
    server = rstreams.Server(standard_app(), max_connections=1)
    with trio.fail_after(TIMEOUT):
        async with tcp_server(server) as url:
            async with rstreams.open_session(url) as first:
                await first.fetch("range?count=1", 1)
                async with rstreams.open_session(url) as second:
                    await second.wait_closed()
    [refused] = events(caplog, "connection_refused")
    assert refused.levelno == logging.INFO and refused.transport == "tcp"  # type: ignore[attr-defined]
    assert refused.reason.startswith("server busy") and refused.peer.startswith("127.0.0.1:")  # type: ignore[attr-defined]


async def test_a_refused_origin_is_logged_with_the_peer_and_the_origin(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="rstreams")
    server = rstreams.Server(standard_app())
    with trio.fail_after(TIMEOUT):
        async with trio.open_nursery() as nursery:
            listeners = await nursery.start(server.serve_websocket, "127.0.0.1", 0)
            stream = await trio.open_tcp_stream("127.0.0.1", rstreams.listener_port(listeners[0]))
            async with stream:
                await stream.send_all(
                    b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                    b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
                    b"Origin: http://elsewhere.example\r\n\r\n"
                )
                answer = b""
                while data := await stream.receive_some():
                    answer += data
            nursery.cancel_scope.cancel()
    assert answer.startswith(b"HTTP/1.1 403")
    [refused] = events(caplog, "origin_refused")
    assert refused.origin == "http://elsewhere.example" and refused.peer.startswith("127.0.0.1:")  # type: ignore[attr-defined]


def test_json_formatter_writes_one_object_per_line_with_the_fields() -> None:
    record = logging.LogRecord("rstreams", logging.INFO, __file__, 1, "session closed: %s", ("x\ny",), None)
    record.__dict__.update(event="session_close", peer="127.0.0.1:5", transport="tcp", reason="goodbye")
    line = JsonFormatter().format(record)
    assert "\n" not in line
    entry = json.loads(line)
    assert entry["message"] == "session closed: x\ny" and entry["level"] == "info" and entry["logger"] == "rstreams"
    assert {key: entry[key] for key in ("event", "peer", "transport", "reason")} == {
        "event": "session_close",
        "peer": "127.0.0.1:5",
        "transport": "tcp",
        "reason": "goodbye",
    }
    assert entry["time"].endswith("Z")
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        record.exc_info = sys.exc_info()
    assert "RuntimeError: boom" in json.loads(JsonFormatter().format(record))["exception"]


async def test_peer_address_and_transport_of_streams_without_a_socket() -> None:
    left, _right = trio.testing.memory_stream_pair()
    assert peer_address(left) == "-" and transport_name(left) == "stream"


async def test_a_peers_long_goodbye_reason_is_quoted_cut(caplog: pytest.LogCaptureFixture) -> None:
    # A goodbye reason is the peer's text, up to 64 KiB: logged whole, a
    # reconnecting peer made 36 MB of log a second.
    caplog.set_level(logging.INFO, logger="rstreams")
    server = rstreams.Server(standard_app())
    with trio.fail_after(TIMEOUT):
        async with tcp_server(server) as url:
            port = int(url.rsplit(":", 1)[1])
            stream = await trio.open_tcp_stream("127.0.0.1", port)
            reason = "x" * 60_000 + "\nforged line"
            await stream.send_all(encode(Hello(version=0)) + encode(Goodbye(reason=reason)))
            await wait_for(lambda: bool(events(caplog, "session_close")))
            await stream.aclose()
    [closed] = events(caplog, "session_close")
    assert len(closed.getMessage()) < 500 and "\n" not in closed.getMessage()
    assert closed.reason.endswith(f"({len(reason) - PEER_TEXT_LOGGED} more characters)")  # type: ignore[attr-defined]


async def test_reconnecting_does_not_buy_a_new_burst_of_lines(caplog: pytest.LogCaptureFixture) -> None:
    # A throttle per connection gave a peer that reconnected for each
    # failure 20 lines (tracebacks, for a failing publisher) every time.
    caplog.set_level(logging.INFO, logger="rstreams")
    server = rstreams.Server(standard_app())
    with trio.fail_after(TIMEOUT):
        started = trio.current_time()
        async with tcp_server(server) as url:
            for _ in range(3):
                async with rstreams.open_session(url) as client:
                    for _ in range(LOG_LINES_BURST):
                        with pytest.raises(rstreams.PublisherError):
                            await client.fetch("range?count=many", 1)
            await wait_for(lambda: len(events(caplog, "session_close")) == 3)
        elapsed = trio.current_time() - started
    lines = events(caplog, "bad_input")
    closes = events(caplog, "session_close")
    said = sum(getattr(line, "not_logged", 0) for line in lines)
    said += sum(int(close.getMessage().split("(")[1].split(" ")[0]) for close in closes if "not logged" in close.getMessage())
    assert len(lines) + said == 3 * LOG_LINES_BURST
    assert len(lines) <= LOG_LINES_BURST + 2 + elapsed / LOG_LINES_INTERVAL


def test_a_servers_throttles_are_per_host_and_bounded() -> None:
    throttles = PeerLogThrottles(hosts=2)
    first = throttles.for_peer("127.0.0.1:1000")
    assert throttles.for_peer("127.0.0.1:2000") is first
    assert throttles.for_peer("[::1]:1000") is throttles.for_peer("[::1]:3000") is not first
    throttles.for_peer("10.0.0.1:1")  # a third host: the least recently used is forgotten
    assert throttles.for_peer("127.0.0.1:1000") is not first
    assert throttles.for_peer("-") is throttles.for_peer("-")
