"""``$stats`` (``rstreams._stats_publisher``): the server's statistics as a
stream of JSON records, under a name no app can take."""

from __future__ import annotations

import pytest
import trio

import rstreams
import rstreams.testing

from ._support import standard_app
from .test_stats import serving

TIMEOUT = 20


@pytest.mark.parametrize("path", ["$stats", "$anything", "$"])
def test_no_app_can_register_a_dollar_name(path: str) -> None:
    app = rstreams.Router()
    with pytest.raises(ValueError, match=r"reserved for the runtime"):
        app.add(path, standard_app().resolve("range").publisher)  # type: ignore[union-attr]
    with pytest.raises(ValueError, match=r"reserved for the runtime"):
        rstreams.Router({path: standard_app().resolve("range")})  # type: ignore[dict-item]
    assert app.paths == []


async def test_stats_streams_json_records_of_the_whole_server() -> None:
    server = rstreams.Server(standard_app())
    with trio.fail_after(TIMEOUT):
        async with serving(server) as url, rstreams.open_session(url) as other, rstreams.open_session(url) as client:
            await other.fetch("range?count=12", 12)
            async with client.subscribe("$stats?interval=0.01&count=3", codec="json") as stats:
                records = [record async for record in stats]
    assert len(records) == 3  # then it completed
    for record in records:
        assert set(record) >= {"time", "server", "totals", "transports", "sessions", "topics", "bridges"}
        assert record["transports"]["tcp"]["sessions"] == 2 and record["transports"]["tcp"]["elements_sent"] >= 12
    assert records[0]["time"] <= records[1]["time"] <= records[2]["time"]
    # The $stats stream itself is one of the streams it reports.
    names = [stream["name"] for session in records[-1]["sessions"] for stream in session["open_streams"]]
    assert names == ["$stats?interval=0.01&count=3"]


async def test_the_first_record_comes_at_once_then_one_per_interval_as_demanded() -> None:
    server = rstreams.Server(standard_app())
    with trio.fail_after(TIMEOUT):
        async with serving(server) as url, rstreams.open_session(url) as client:
            # A long interval: only the first record can arrive within the test.
            async with client.subscribe("$stats?interval=3600", codec="json", prefetch=1) as stats:
                first = await stats.__anext__()
    assert first["server"]["sessions_opened"] == 1


async def test_a_bad_interval_is_the_subscribers_error() -> None:
    server = rstreams.Server(standard_app())
    with trio.fail_after(TIMEOUT):
        async with serving(server) as url, rstreams.open_session(url) as client:
            with pytest.raises(rstreams.PublisherError, match="interval"):
                await client.fetch("$stats?interval=0", 1)
            with pytest.raises(rstreams.UnknownPublisher):
                await client.fetch("$nothing", 1)


async def test_stats_follows_an_app_replaced_while_serving() -> None:
    server = rstreams.Server(rstreams.Router())
    with trio.fail_after(TIMEOUT):
        async with serving(server) as url, rstreams.open_session(url) as client:
            with pytest.raises(rstreams.UnknownPublisher):
                await client.fetch("range?count=1", 1)
            server.app = standard_app()
            assert len(await client.fetch("range?count=2", 2)) == 2
            assert len(await client.fetch("$stats?count=1", 1)) == 1


async def test_a_session_without_a_server_has_no_stats() -> None:
    with trio.fail_after(TIMEOUT):
        async with rstreams.testing.session_pair(server_app=standard_app()) as (client, _):
            with pytest.raises(rstreams.UnknownPublisher):
                await client.fetch("$stats", 1)


async def test_a_servers_sessions_suggest_within_the_apps_budget() -> None:
    # The server's routes hand suggestions to the app's own budget: one budget
    # per app, however the sessions reach it.
    app = standard_app()
    app._suggestions.charge(1.0)  # spent for the next 50 s
    server = rstreams.Server(app)
    assert app.closest_paths("rnage") == ["range"]
    with trio.fail_after(TIMEOUT):
        async with serving(server) as url, rstreams.open_session(url) as client:
            with pytest.raises(rstreams.UnknownPublisher) as info:
                await client.fetch("rnage", 1)
    assert info.value.message == "no such publisher: rnage"
