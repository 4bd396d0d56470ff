"""``Session.fetch``: a subscription as one request-response call."""

from __future__ import annotations

import pytest
import trio
import trio.testing

import rstreams

from ._support import Probe, blob, fetch_range, from_u32, standard_app, u32


async def test_fetch_returns_every_element_of_a_short_stream(connect) -> None:
    with trio.fail_after(10):
        async with connect(server_app=standard_app()) as (client, server):
            assert [from_u32(e) for e in await client.fetch("range?count=5", 100)] == [0, 1, 2, 3, 4]
            assert await client.fetch("range?count=0", 3) == []
            assert await client.fetch("blob?count=2&size=70000", 2) == [blob(0, 70000), blob(1, 70000)]
            assert client.statistics().subscriptions == 0
            assert server.statistics().publications == 0


async def test_fetch_stops_at_the_limit_and_cancels_the_rest(connect) -> None:
    probe = Probe()
    with trio.fail_after(10):
        async with connect(server_app=standard_app(probe=probe.publisher)) as (client, server):
            assert [from_u32(e) for e in await client.fetch("probe", 3)] == [0, 1, 2]
            await probe.cancelled.wait()
            assert probe.sent == 3  # never more than asked for
            await fetch_range(client)
            assert client.statistics().subscriptions == 0
            assert server.statistics().publications == 0


async def test_fetch_of_packed_elements_returns_one_bytes_per_element() -> None:
    def packed(sink: rstreams.Sink) -> None:
        sink.send_packed_nowait(b"".join(u32(i) for i in range(4)))

    app = rstreams.Router()
    app.add("packed", packed, element_size=4)
    with trio.fail_after(10):
        async with rstreams.testing.session_pair(server_app=app) as (client, _):
            assert await client.fetch("packed", 4) == [u32(i) for i in range(4)]


async def test_fetch_decodes_with_the_codec(connect) -> None:
    async def records(sink: rstreams.Sink) -> None:
        await sink.send_many([{"n": 1}, {"n": 2}])

    app = rstreams.Router()
    app.add("records", records, codec="msgpack")
    with trio.fail_after(10):
        async with connect(server_app=app) as (client, _):
            assert await client.fetch("records", 10, codec="msgpack") == [{"n": 1}, {"n": 2}]


async def test_fetch_raises_what_the_publisher_answers(connect) -> None:
    async def failing(sink: rstreams.Sink) -> None:
        await sink.send(b"one")
        raise RuntimeError("gave up")

    with trio.fail_after(10):
        async with connect(server_app=standard_app(failing=failing)) as (client, server):
            with pytest.raises(rstreams.UnknownPublisher):
                await client.fetch("nothing-here", 1)
            with pytest.raises(rstreams.PublisherError, match="gave up"):
                await client.fetch("failing", 10)
            assert await client.fetch("range?count=1", 1) == [u32(0)]
            assert server.statistics().publications == 0


@pytest.mark.parametrize("limit", [0, -1, 1.5, "3", None])
async def test_fetch_refuses_a_bad_limit(limit: object) -> None:
    with trio.fail_after(10):
        async with rstreams.testing.session_pair(server_app=standard_app()) as (client, _):
            with pytest.raises(ValueError, match="limit"):
                await client.fetch("range", limit)  # type: ignore[arg-type]
            assert client.statistics().subscriptions == 0


async def test_a_cancelled_fetch_cancels_its_stream(connect) -> None:
    probe = Probe()
    with trio.fail_after(10):
        async with connect(server_app=standard_app(probe=probe.publisher)) as (client, server):
            with trio.move_on_after(0.05) as scope:
                await client.fetch("probe", 2**63 - 1)  # the probe never completes
            assert scope.cancelled_caught
            await probe.cancelled.wait()
            await fetch_range(client)
            assert client.statistics().subscriptions == 0
            assert server.statistics().publications == 0


async def test_fetch_raises_session_closed_when_the_session_ends_first() -> None:
    probe = Probe()
    with trio.fail_after(10):
        async with rstreams.testing.session_pair(server_app=standard_app(probe=probe.publisher)) as (client, server):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(server.aclose)
                with pytest.raises(rstreams.SessionClosed):
                    await client.fetch("probe", 2**63 - 1)


async def test_fetch_always_checkpoints() -> None:
    with trio.fail_after(10):
        async with rstreams.testing.session_pair(server_app=standard_app()) as (client, _):
            with trio.CancelScope() as scope:
                scope.cancel()
                with pytest.raises(trio.Cancelled):
                    await client.fetch("range?count=1", 1)
            await trio.testing.wait_all_tasks_blocked()
            assert client.statistics().subscriptions == 0
            # Not cancelled: a schedule point too, whether it waits or not.
            with trio.testing.assert_checkpoints():
                assert await client.fetch("range?count=1", 1) == [u32(0)]
            with trio.testing.assert_checkpoints():
                assert await client.fetch("range?count=0", 1) == []
