"""``/healthz``, ``/stats`` and ``/metrics`` (``rstreams._endpoints``), scraped
over real sockets: on a WebSocket listener and on ``Server.serve_metrics``."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
import trio

import rstreams

from ._support import standard_app, wait_for
from .test_http import exchange, get, parse_response
from .test_metrics_text import parse_samples

TIMEOUT = 20


@asynccontextmanager
async def listening(server: rstreams.Server, kind: str) -> AsyncIterator[tuple[int, int]]:
    """``(http_port, tcp_port)``: the HTTP listener of ``kind`` (ws or metrics) and a TCP one."""
    async with trio.open_nursery() as nursery:
        if kind == "ws":
            http = await nursery.start(server.serve_websocket, "127.0.0.1", 0)
        else:
            http = await nursery.start(server.serve_metrics, "127.0.0.1", 0)
        tcp = await nursery.start(server.serve_tcp, "127.0.0.1", 0)
        yield rstreams.listener_port(http[0]), rstreams.listener_port(tcp[0])
        nursery.cancel_scope.cancel()


async def scrape(port: int, path: str) -> tuple[int, dict[str, str], bytes]:
    return parse_response(await exchange(port, get(path)))


@pytest.fixture(params=["ws", "metrics"])
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


async def test_healthz_is_200_while_accepting_and_503_once_closing(kind: str) -> None:
    server = rstreams.Server(standard_app())
    with trio.fail_after(TIMEOUT):
        async with listening(server, kind) as (port, _):
            status, headers, body = await scrape(port, "/healthz")
            assert (status, body) == (200, b"ok\n") and headers["content-type"].startswith("text/plain")
            await server.aclose()
            status, _, body = await scrape(port, "/healthz")
            assert (status, body) == (503, b"shutting down\n")


async def test_stats_is_the_servers_snapshot_as_json(kind: str) -> None:
    server = rstreams.Server(standard_app())
    with trio.fail_after(TIMEOUT):
        async with listening(server, kind) as (port, tcp_port):
            async with rstreams.open_session(f"tcp://127.0.0.1:{tcp_port}") as client:
                assert len(await client.fetch("range?count=42", 42)) == 42
                status, headers, body = await scrape(port, "/stats")
    assert status == 200 and headers["content-type"] == "application/json"
    statistics = json.loads(body)
    assert statistics["transports"]["tcp"]["elements_sent"] == 42
    assert statistics["transports"]["tcp"]["sessions"] == 1
    [session] = statistics["sessions"]
    assert session["peer"].startswith("127.0.0.1:") and session["transport"] == "tcp"


async def test_metrics_is_the_prometheus_text_format(kind: str) -> None:
    server = rstreams.Server(standard_app())
    with trio.fail_after(TIMEOUT):
        async with listening(server, kind) as (port, tcp_port):
            async with rstreams.open_session(f"tcp://127.0.0.1:{tcp_port}") as client:
                assert len(await client.fetch("range?count=42", 42)) == 42
                status, headers, body = await scrape(port, "/metrics")
    assert status == 200 and headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    samples = parse_samples(body.decode())
    assert samples[("rstreams_elements_sent_total", 'transport="tcp"')] == 42
    assert samples[("rstreams_sessions", 'transport="tcp"')] == 1
    assert samples[("rstreams_accepting", "")] == 1


async def test_the_metrics_listener_serves_no_files_and_no_websocket() -> None:
    server = rstreams.Server(standard_app())
    with trio.fail_after(TIMEOUT):
        async with listening(server, "metrics") as (port, _):
            assert (await scrape(port, "/"))[0] == 404
            assert (await scrape(port, "/rstreams.js"))[0] == 404
            upgrade = get(
                "/",
                extra="Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                "Sec-WebSocket-Version: 13\r\n",
            )
            assert parse_response(await exchange(port, upgrade))[0] == 404
            with pytest.raises(OSError):
                async with rstreams.open_session(f"ws://127.0.0.1:{port}/"):
                    pass


async def test_the_websocket_listener_still_serves_its_page_and_sessions() -> None:
    server = rstreams.Server(standard_app())
    with trio.fail_after(TIMEOUT):
        async with listening(server, "ws") as (port, _):
            assert (await scrape(port, "/"))[0] == 200
            async with rstreams.open_session(f"ws://127.0.0.1:{port}/") as client:
                assert len(await client.fetch("range?count=3", 3)) == 3


async def test_scrapes_while_a_stream_runs_do_not_stall_it(kind: str) -> None:
    # A long stream runs; scrapes come and go in between reads. The stream
    # keeps moving after each scrape, and each scrape sees it moving.
    server = rstreams.Server(standard_app())
    with trio.fail_after(TIMEOUT):
        async with listening(server, kind) as (port, tcp_port):
            async with rstreams.open_session(f"tcp://127.0.0.1:{tcp_port}") as client:
                async with client.subscribe("range?count=100000000", prefetch=256) as numbers:
                    received = 0
                    seen_by_scrapes: list[int] = []
                    for _ in range(5):
                        before = received
                        async for batch in numbers.batches():
                            received += len(batch)
                            if received >= before + 1000:
                                break
                        _, _, body = await scrape(port, "/metrics" if len(seen_by_scrapes) % 2 else "/stats")
                        if body.startswith(b"{"):
                            sent = json.loads(body)["totals"]["elements_sent"]
                        else:
                            sent = int(parse_samples(body.decode())[("rstreams_elements_sent_total", 'transport="tcp"')])
                        seen_by_scrapes.append(sent)
                    after_scrapes = received
                    async for batch in numbers.batches():
                        received += len(batch)
                        if received >= after_scrapes + 1000:
                            break
    assert received >= after_scrapes + 1000
    # Every scrape saw at least what the client had read by then, and more each time.
    assert seen_by_scrapes == sorted(seen_by_scrapes) and len(set(seen_by_scrapes)) == 5
    assert all(sent >= 1000 * (index + 1) for index, sent in enumerate(seen_by_scrapes))


async def test_a_scrape_reflects_a_closed_session_once_it_ended() -> None:
    server = rstreams.Server(standard_app())
    with trio.fail_after(TIMEOUT):
        async with listening(server, "metrics") as (port, tcp_port):
            async with rstreams.open_session(f"tcp://127.0.0.1:{tcp_port}") as client:
                await client.fetch("range?count=9", 9)
            await wait_for(lambda: not server.statistics()["sessions"])
            samples = parse_samples((await scrape(port, "/metrics"))[2].decode())
    assert samples[("rstreams_sessions", 'transport="tcp"')] == 0
    assert samples[("rstreams_sessions_opened_total", 'transport="tcp"')] == 1
    assert samples[("rstreams_elements_sent_total", 'transport="tcp"')] == 9


class _BrokenSource:
    """A bridge's statistics that fail: our bug, which must cost one answer."""

    def statistics(self) -> dict[str, int]:
        raise RuntimeError("broken statistics")


async def test_a_failing_endpoint_answers_500_and_the_listener_stays(kind: str, caplog: pytest.LogCaptureFixture) -> None:
    server = rstreams.Server(standard_app())
    server.add_bridge_services("broken", [_BrokenSource()])  # type: ignore[list-item]
    with trio.fail_after(TIMEOUT):
        async with listening(server, kind) as (port, _):
            for path in ("/stats", "/metrics"):
                status, _, body = await scrape(port, path)
                assert status == 500 and b"internal error" in body
            status, _, body = await scrape(port, "/healthz")
            assert (status, body) == (200, b"ok\n")
    assert any("endpoint failed" in record.getMessage() for record in caplog.records)


async def test_silent_sockets_never_keep_a_health_check_out_of_the_metrics_listener() -> None:
    # Every connection to --metrics is answered in milliseconds; one that
    # sends nothing held a descriptor for the 10 s request-head timeout, as
    # many as the process had. Now the listener keeps METRICS_CONNECTIONS at
    # most (a burst beyond them is closed at once), and closes the oldest
    # past HANDSHAKE_GRACE for a newcomer: a health check gets through.
    from rstreams._http import REQUEST_HEAD_TIMEOUT
    from rstreams._serve import METRICS_CONNECTIONS
    from rstreams.support import HANDSHAKE_GRACE

    server = rstreams.Server(standard_app())
    with trio.fail_after(REQUEST_HEAD_TIMEOUT / 2):  # (what closes them must not be the head timeout)
        async with listening(server, "metrics") as (port, _):
            silent = [await trio.open_tcp_stream("127.0.0.1", port) for _ in range(METRICS_CONNECTIONS + 3)]
            for beyond in silent[METRICS_CONNECTIONS:]:
                assert await beyond.receive_some(1) == b""  # (no place within the grace: closed)
            await trio.sleep(HANDSHAKE_GRACE)
            status, _, body = await scrape(port, "/healthz")
            assert (status, body) == (200, b"ok\n")
            assert await silent[0].receive_some(1) == b""  # (the oldest gave its place to the check)
            for stream in silent:
                await stream.aclose()
