"""``Server.statistics()`` (``rstreams._stats``): what a snapshot says about a
running server, over real TCP and WebSocket sessions on 127.0.0.1."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import trio

import rstreams
from rstreams._stats import COUNT_KEYS

from ._support import from_u32, standard_app, wait_for

TIMEOUT = 20


@asynccontextmanager
async def serving(server: rstreams.Server, *, websocket: bool = False) -> AsyncIterator[str]:
    async with trio.open_nursery() as nursery:
        if websocket:
            listeners = await nursery.start(server.serve_websocket, "127.0.0.1", 0)
            yield f"ws://127.0.0.1:{rstreams.listener_port(listeners[0])}/"
        else:
            listeners = await nursery.start(server.serve_tcp, "127.0.0.1", 0)
            yield f"tcp://127.0.0.1:{rstreams.listener_port(listeners[0])}"
        nursery.cancel_scope.cancel()


def only_session(statistics: dict[str, Any]) -> dict[str, Any]:
    [session] = statistics["sessions"]
    return session  # type: ignore[no-any-return]


async def test_an_idle_server_reports_nothing_open() -> None:
    server = rstreams.Server(standard_app())
    statistics = server.statistics()
    assert statistics["sessions"] == [] and statistics["transports"] == {} and statistics["topics"] == []
    assert statistics["totals"] == dict.fromkeys(COUNT_KEYS, 0)
    assert statistics["server"]["accepting"] is True and statistics["server"]["sessions_opened"] == 0


async def test_sessions_and_streams_per_transport_with_demand_and_elements() -> None:
    server = rstreams.Server(standard_app())
    with trio.fail_after(TIMEOUT):
        async with serving(server) as tcp_url, serving(server, websocket=True) as ws_url:
            async with rstreams.open_session(tcp_url) as tcp, rstreams.open_session(ws_url) as ws:
                assert len(await ws.fetch("range?count=7", 7)) == 7
                async with tcp.subscribe("range?count=1000000", prefetch=0) as numbers:
                    numbers.request(10)
                    for expected in range(4):
                        assert from_u32(await numbers.__anext__()) == expected  # type: ignore[arg-type]
                    await wait_for(lambda: server.statistics()["totals"]["elements_sent"] == 17)
                    statistics = server.statistics()
    transports = statistics["transports"]
    assert set(transports) == {"tcp", "ws"}
    assert transports["tcp"]["sessions"] == transports["ws"]["sessions"] == 1
    assert transports["tcp"]["streams"] == 1 and transports["ws"]["streams"] == 0
    # 10 requested, 10 sent (4 read by the client, 6 on their way or buffered): none outstanding.
    assert transports["tcp"]["elements_sent"] == 10 and transports["ws"]["elements_sent"] == 7
    assert transports["tcp"]["demand_outstanding"] == 0
    assert statistics["totals"]["sessions"] == 2 and statistics["server"]["sessions_opened"] == 2
    by_transport = {session["transport"]: session for session in statistics["sessions"]}
    [stream] = by_transport["tcp"]["open_streams"]
    assert stream["direction"] == "publish" and stream["name"] == "range?count=1000000" and stream["elements"] == 10
    assert by_transport["tcp"]["peer"].startswith("127.0.0.1:") and by_transport["tcp"]["age_seconds"] >= 0
    assert by_transport["tcp"]["bytes_sent"] > 10 * 4 and by_transport["ws"]["bytes_received"] > 0


async def test_outstanding_demand_is_what_the_publisher_may_still_send() -> None:
    started = trio.Event()

    async def waits(sink: rstreams.Sink) -> None:
        started.set()
        await trio.sleep_forever()  # sends nothing: all demand stays outstanding

    server = rstreams.Server(standard_app(waits=waits))
    with trio.fail_after(TIMEOUT):
        async with serving(server) as url, rstreams.open_session(url) as client:
            async with client.subscribe("waits", prefetch=0) as stream:
                stream.request(25)
                await started.wait()
                await wait_for(lambda: server.statistics()["totals"]["demand_outstanding"] == 25)
                stream.request(2**63 - 1 - 25)  # now unbounded
                await wait_for(lambda: server.statistics()["totals"]["unbounded_streams"] == 1)
                assert server.statistics()["totals"]["demand_outstanding"] == 0


async def test_counts_of_closed_sessions_stay_in_the_totals() -> None:
    server = rstreams.Server(standard_app())
    with trio.fail_after(TIMEOUT):
        async with serving(server) as url:
            for _ in range(3):
                async with rstreams.open_session(url) as client:
                    assert len(await client.fetch("range?count=100", 100)) == 100
            await wait_for(lambda: not server.statistics()["sessions"])
            statistics = server.statistics()
    tcp = statistics["transports"]["tcp"]
    assert tcp["sessions"] == 0 and tcp["sessions_opened"] == 3
    assert tcp["elements_sent"] == 300 and tcp["bytes_sent"] > 300 * 4
    assert statistics["totals"]["elements_sent"] == 300


async def test_a_cancelled_stream_keeps_its_elements_counted() -> None:
    server = rstreams.Server(standard_app())
    with trio.fail_after(TIMEOUT):
        async with serving(server) as url, rstreams.open_session(url) as client:
            assert len(await client.fetch("range?count=1000", 5)) == 5  # cancelled after 5
            # The stream ends when the cancel arrives; its elements are folded
            # into the totals as its writer finishes, which may be a moment
            # later: wait for both (bounded by TIMEOUT), never for a time.
            await wait_for(
                lambda: server.statistics()["totals"]["streams"] == 0
                and server.statistics()["totals"]["elements_sent"] >= 5
            )
            sent = server.statistics()["totals"]["elements_sent"]
    assert 5 <= sent <= 1000


async def test_refused_connections_are_counted() -> None:
    server = rstreams.Server(standard_app(), max_connections=1)
    with trio.fail_after(TIMEOUT):
        async with serving(server) as url, rstreams.open_session(url) as first:
            await first.fetch("range?count=1", 1)
            async with rstreams.open_session(url) as second:
                await second.wait_closed()
            assert server.statistics()["server"]["connections_refused"] == 1


async def test_topics_report_lag_and_drops() -> None:
    app = standard_app()
    topic = rstreams.Topic("news", capacity=4)
    topic.mount(app)
    server = rstreams.Server(app)
    with trio.fail_after(TIMEOUT):
        async with serving(server) as url, rstreams.open_session(url) as client:
            async with client.subscribe("news?policy=drop", prefetch=0) as dropping:
                async with client.subscribe("news?policy=block", prefetch=0) as blocking:
                    await wait_for(lambda: server.statistics()["topics"][0]["subscribers"] == 2)
                    for value in range(4):
                        topic.publish_nowait(b"%d" % value)
                    [news] = server.statistics()["topics"]
                    assert news["name"] == "news" and news["published"] == 4 and news["held"] == 4
                    assert news["lag_max"] == 4 and news["lag_total"] == 8 and news["dropped"] == 0
                    # The blocking subscriber catches up; the dropping one, asking
                    # for nothing, falls more than the capacity behind and skips.
                    blocking.request(4)
                    for _ in range(4):
                        await blocking.__anext__()
                    for value in range(4, 10):
                        topic.publish_nowait(b"%d" % value)
                        blocking.request(1)
                        await blocking.__anext__()
                    dropping.request(1)  # it reads again: from the oldest element kept
                    assert await dropping.__anext__() == b"6"
                    await wait_for(lambda: server.statistics()["topics"][0]["dropped"] > 0)
                    [news] = server.statistics()["topics"]
                    assert news["published"] == 10 and news["dropped"] == 6 and news["lag_max"] == 3


async def test_bridge_services_with_statistics_are_summed_per_bridge() -> None:
    class Service:
        def __init__(self, connections: int) -> None:
            self.connections = connections

        def statistics(self) -> dict[str, int]:
            return {"connections": self.connections, "bytes_sent": 10 * self.connections}

    server = rstreams.Server(standard_app())
    server.add_bridge_services("emp", [Service(2), Service(3), object()])
    assert server.statistics()["bridges"] == {"emp": {"connections": 5, "bytes_sent": 50}}


async def test_a_publisher_subscribing_back_lists_that_stream_too() -> None:
    pulled = trio.Event()

    async def pull(sink: rstreams.Sink, request: rstreams.SubscribeRequest) -> None:
        async with request.session.subscribe("range?count=100", prefetch=0) as numbers:
            numbers.request(3)
            await numbers.__anext__()
            pulled.set()
            await trio.sleep_forever()

    server = rstreams.Server(standard_app(pull=pull))
    with trio.fail_after(TIMEOUT):
        async with serving(server) as url, rstreams.open_session(url, app=standard_app()) as client:
            async with client.subscribe("pull"):
                await pulled.wait()
                await wait_for(lambda: len(only_session(server.statistics())["open_streams"]) == 2)
                streams = only_session(server.statistics())["open_streams"]
    [back] = [stream for stream in streams if stream["direction"] == "subscribe"]
    assert back["name"] == "range?count=100" and back["elements"] >= 1
    assert back["elements"] + back["demand_outstanding"] == 3


async def test_memory_held_for_the_peer_and_publications_still_stopping() -> None:
    # What an operator compares with max_connection_memory, per session and
    # in total: an open stream costs its nominal STREAM_MEMORY_COST, and so
    # does a cancelled one whose publisher has not finished yet.
    started, release = trio.Event(), trio.Event()

    async def lingers(sink: rstreams.Sink) -> None:
        started.set()
        try:
            await trio.sleep_forever()
        finally:
            with trio.CancelScope(shield=True):
                await release.wait()  # (its cleanup outlives the cancel)

    server = rstreams.Server(standard_app(lingers=lingers))

    def figures() -> dict[str, Any]:
        statistics = server.statistics()
        session = only_session(statistics)
        # The totals and the transport add up the sessions' figures.
        for key in ("memory_bytes", "publications_stopping"):
            assert statistics["totals"][key] == statistics["transports"]["tcp"][key] == session[key]
        assert session["memory_bytes"] == session["inbound_bytes"] + session["outbound_bytes"]
        return session

    with trio.fail_after(TIMEOUT):
        async with serving(server) as url, rstreams.open_session(url) as client:
            await wait_for(lambda: len(server.statistics()["sessions"]) == 1)
            assert figures()["memory_bytes"] < rstreams.STREAM_MEMORY_COST
            async with client.subscribe("lingers"):
                await started.wait()
                session = figures()
                assert session["memory_bytes"] >= rstreams.STREAM_MEMORY_COST and session["publications_stopping"] == 0
            await wait_for(lambda: figures()["publications_stopping"] == 1)
            session = figures()
            assert session["streams"] == 0 and session["memory_bytes"] >= rstreams.STREAM_MEMORY_COST
            release.set()
            await wait_for(lambda: figures()["publications_stopping"] == 0)
            assert figures()["memory_bytes"] < rstreams.STREAM_MEMORY_COST
