"""The mapping onto rstreams: data as a publisher, calls bounded by demand, request handlers.

Two EmpConnections talk over memory streams; rstreams subscribers are in
process (``rstreams.testing.session_pair``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
import trio
import trio.testing

import rstreams
from bridges.emp import (
    EmpConfig,
    EmpConnection,
    ErrorCode,
    PeerError,
    ResponseStream,
    call_publisher,
    data_publisher,
    open_emp_stream,
    pipe_publisher,
    serve_requests,
)
from rstreams.testing import session_pair

QUIET = EmpConfig(keepalive_interval=None)


class Pair:
    def __init__(self, client: EmpConnection, server: EmpConnection) -> None:
        self.client, self.server = client, server


@pytest.fixture
async def emp_pair() -> AsyncIterator[Pair]:
    a, b = trio.testing.memory_stream_pair()
    async with trio.open_nursery() as nursery:
        servers: list[EmpConnection] = []
        ready, done = trio.Event(), trio.Event()

        async def run_server() -> None:
            async with open_emp_stream(b, config=QUIET) as server:
                servers.append(server)
                ready.set()
                await done.wait()

        nursery.start_soon(run_server)
        async with open_emp_stream(a, config=QUIET) as client:
            await ready.wait()
            yield Pair(client, servers[0])
            done.set()


async def bodies(*items: bytes) -> AsyncIterator[bytes]:
    for item in items:
        yield item


async def test_inbound_data_is_a_publisher_that_completes_on_bye(emp_pair: Pair) -> None:
    app = rstreams.Router()
    app.add("emp", data_publisher(emp_pair.server))
    with trio.fail_after(5):
        for n in range(5):
            await emp_pair.client.send_data(b"%d" % n)
        await emp_pair.client.aclose()
        async with session_pair(server_app=app) as (subscriber, _):
            async with subscriber.subscribe("emp", prefetch=2) as stream:
                assert [x async for x in stream] == [b"0", b"1", b"2", b"3", b"4"]


async def test_inbound_data_is_read_only_on_demand(emp_pair: Pair) -> None:
    app = rstreams.Router()
    app.add("emp", data_publisher(emp_pair.server))
    with trio.fail_after(5):
        async with session_pair(server_app=app) as (subscriber, _):
            async with subscriber.subscribe("emp", prefetch=0) as stream:
                async with trio.open_nursery() as nursery:

                    async def send_many() -> None:
                        for n in range(100):
                            await emp_pair.client.send_data(b"x" * 100)

                    nursery.start_soon(send_many)
                    await trio.testing.wait_all_tasks_blocked()
                    # No demand yet: the server side has read nothing but the hello.
                    assert emp_pair.server.statistics().buffered_bytes == 0
                    assert not emp_pair.server.statistics().reading
                    stream.request(3)
                    got = [await stream.__anext__() for _ in range(3)]
                    assert got == [b"x" * 100] * 3
                    await trio.testing.wait_all_tasks_blocked()
                    assert not emp_pair.server.statistics().reading
                    nursery.cancel_scope.cancel()


async def test_peer_error_fails_the_publisher(emp_pair: Pair) -> None:
    app = rstreams.Router()
    app.add("emp", data_publisher(emp_pair.server))
    with trio.fail_after(5):
        await emp_pair.client.send_error(ErrorCode.PROTOCOL, "bad things")
        async with session_pair(server_app=app) as (subscriber, _):
            with pytest.raises(rstreams.PublisherError, match="bad things"):
                async with subscriber.subscribe("emp") as stream:
                    async for _ in stream:
                        pass


async def test_pipe_publisher_sends_elements_as_data(emp_pair: Pair) -> None:
    app = rstreams.Router()

    @app.publisher("count")
    async def count(sink: rstreams.Sink, request: rstreams.SubscribeRequest) -> None:
        for n in range(request.int_param("n", 0)):
            await sink.send(b"%d" % n)

    with trio.fail_after(5):
        async with session_pair(server_app=app) as (session, _):
            sent = await pipe_publisher(emp_pair.client, session, "count?n=50", window=4)
        assert sent == 50
        assert [await emp_pair.server.receive_data() for _ in range(50)] == [b"%d" % n for n in range(50)]


async def _pipe_recording_demand(emp_pair: Pair, count: int, **options: Any) -> list[int]:
    """``pipe_publisher`` of ``count`` elements from a publisher that sends
    as many at a time as its subscriber asks for, drained by the EMP peer as
    they come; every element arrives. Returns the demand the publisher had
    each time it waited for some."""
    demands: list[int] = []
    app = rstreams.Router()

    @app.publisher("bulk")
    async def bulk(sink: rstreams.Sink, request: rstreams.SubscribeRequest) -> None:
        left = request.int_param("n", 0)
        while left:
            await sink.wait_demand()
            demands.append(sink.demand)
            run = min(left, sink.demand)
            await sink.send_many([b"e"] * run)
            left -= run

    received: list[bytes] = []

    async def drain() -> None:
        while len(received) < count:
            received.append(await emp_pair.server.receive_data())

    with trio.fail_after(10):
        async with session_pair(server_app=app) as (session, _):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(drain)
                sent = await pipe_publisher(emp_pair.client, session, f"bulk?n={count}", **options)
    assert sent == count and received == [b"e"] * count
    return demands


async def test_pipe_publisher_uses_the_subscriptions_adaptive_demand_by_default(emp_pair: Pair) -> None:
    # As any subscription given no prefetch (issue 19): a small first
    # window that grows while the EMP side keeps up.
    demands = await _pipe_recording_demand(emp_pair, 3000)
    assert demands[0] == rstreams.ADAPTIVE_INITIAL
    assert max(demands) > rstreams.ADAPTIVE_INITIAL


async def test_pipe_publisher_with_a_window_never_asks_for_more(emp_pair: Pair) -> None:
    demands = await _pipe_recording_demand(emp_pair, 500, window=5)
    assert demands[0] == 5 and max(demands) <= 5


@pytest.mark.parametrize("window", [0, -1])
async def test_pipe_publisher_refuses_a_window_that_is_not_positive(emp_pair: Pair, window: int) -> None:
    with trio.fail_after(5):
        async with session_pair(server_app=rstreams.Router()) as (session, _):
            with pytest.raises(ValueError, match="window must be positive"):
                await pipe_publisher(emp_pair.client, session, "anything", window=window)


class Watched:
    """A request handler that records how many requests are in flight at once."""

    def __init__(self) -> None:
        self.in_flight = 0
        self.most = 0
        self.release = trio.Event()

    async def __call__(self, body: bytes) -> bytes:
        self.in_flight += 1
        self.most = max(self.most, self.in_flight)
        await self.release.wait()
        # Answer in reverse order of arrival, to show responses are reordered.
        await trio.sleep(0.001 * (10 - int(body)))
        self.in_flight -= 1
        return b"re:" + body


async def test_call_publisher_keeps_in_flight_within_demand(emp_pair: Pair) -> None:
    handler = Watched()
    app = rstreams.Router()
    app.add("calls", call_publisher(emp_pair.client, bodies(*[b"%d" % n for n in range(10)])))
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(serve_requests, emp_pair.server, handler)
            async with session_pair(server_app=app) as (subscriber, _):
                async with subscriber.subscribe("calls", prefetch=0) as stream:
                    stream.request(3)
                    await trio.testing.wait_all_tasks_blocked()
                    assert handler.in_flight == 3  # exactly the demand
                    handler.release.set()
                    got = [await stream.__anext__() for _ in range(3)]
                    stream.request(7)
                    got += [x async for x in stream]
            assert got == [b"re:%d" % n for n in range(10)]
            assert handler.most == 7  # the second demand, never more
            nursery.cancel_scope.cancel()


async def test_response_stream_window(emp_pair: Pair) -> None:
    handler = Watched()
    handler.release.set()
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(serve_requests, emp_pair.server, handler)
            async with ResponseStream(emp_pair.client, bodies(*[b"%d" % n for n in range(10)]), window=2) as responses:
                got = [x async for x in responses]
            assert got == [b"re:%d" % n for n in range(10)]
            assert handler.most == 2
            nursery.cancel_scope.cancel()


async def test_one_call_is_a_one_element_stream(emp_pair: Pair) -> None:
    handler = Watched()
    handler.release.set()
    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(serve_requests, emp_pair.server, handler)
            assert await emp_pair.client.call(b"7") == b"re:7"
            nursery.cancel_scope.cancel()


async def test_server_concurrency_is_bounded(emp_pair: Pair) -> None:
    handler = Watched()
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(lambda: serve_requests(emp_pair.server, handler, max_concurrency=2))
            results = []

            async def one(n: int) -> None:
                results.append(await emp_pair.client.call(b"%d" % n))

            async with trio.open_nursery() as calls:
                for n in range(8):
                    calls.start_soon(one, n)
                await trio.testing.wait_all_tasks_blocked()
                assert handler.in_flight == 2
                assert emp_pair.client.statistics().pending_calls == 8
                handler.release.set()
            assert sorted(results) == sorted(b"re:%d" % n for n in range(8))
            assert handler.most == 2
            nursery.cancel_scope.cancel()


async def test_processor_answers_in_order(emp_pair: Pair) -> None:
    async def upper(requests: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
        async for body in requests:
            yield body.upper()

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(serve_requests, emp_pair.server, upper)
            async with ResponseStream(emp_pair.client, bodies(b"a", b"bc", b"def"), window=3) as responses:
                assert [x async for x in responses] == [b"A", b"BC", b"DEF"]
            nursery.cancel_scope.cancel()


async def test_failing_handler_ends_the_connection_with_error_0(emp_pair: Pair) -> None:
    async def broken(body: bytes) -> bytes:
        raise ValueError("no way")

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(serve_requests, emp_pair.server, broken)
            with pytest.raises(PeerError) as info:
                await emp_pair.client.call(b"x")
            assert info.value.code == ErrorCode.UNSPECIFIED
            assert "no way" in info.value.message


async def test_serve_requests_returns_on_bye(emp_pair: Pair) -> None:
    handler = Watched()
    handler.release.set()
    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(serve_requests, emp_pair.server, handler)
            assert await emp_pair.client.call(b"1") == b"re:1"
            await emp_pair.client.aclose()
        # the nursery exits: serve_requests returned by itself


async def test_tcp_carries_a_slow_subscribers_pressure_back_to_the_emp_sender(nursery: trio.Nursery) -> None:
    # EMP sender -> TCP -> our EMP server -> data_publisher -> rstreams
    # subscriber that asks for 2 elements only. The sender must get stuck
    # once the kernel's buffers are full, far before its 256 MiB are out.
    from bridges.emp import open_emp_connection, serve_emp

    size, total = 128 * 1024, 2048
    served: list[EmpConnection] = []
    server_done = trio.Event()

    async def handler(connection: EmpConnection) -> None:
        served.append(connection)
        await server_done.wait()

    listeners = await nursery.start(lambda task_status: serve_emp(handler, "127.0.0.1", 0, config=QUIET, task_status=task_status))
    sent = 0
    with trio.fail_after(30):
        async with open_emp_connection("127.0.0.1", rstreams.listener_port(listeners[0]), config=QUIET) as sender:

            async def flood() -> None:
                nonlocal sent
                for _ in range(total):
                    await sender.send_data(bytes(size))
                    sent += 1

            async with trio.open_nursery() as flooding:
                flooding.start_soon(flood)
                while not served:
                    await trio.sleep(0.01)
                app = rstreams.Router()
                app.add("emp", data_publisher(served[0]))
                async with session_pair(server_app=app) as (subscriber, _):
                    async with subscriber.subscribe("emp", prefetch=0) as stream:
                        stream.request(2)
                        assert [len(await stream.__anext__()) for _ in range(2)] == [size, size]
                        await trio.testing.wait_all_tasks_blocked(cushion=0.2)
                        stuck_at = sent
                        assert stuck_at < total // 4, stuck_at  # kernel buffers, not 256 MiB
                        stats = served[0].statistics()
                        assert stats.buffered_bytes <= QUIET.max_read_ahead + size + QUIET.receive_size
                        assert not stats.reading
                        stream.request(10)
                        assert len([await stream.__anext__() for _ in range(10)]) == 10
                        await trio.testing.wait_all_tasks_blocked(cushion=0.2)
                        assert stuck_at < sent < total // 4  # moved by about the demand
                flooding.cancel_scope.cancel()
            server_done.set()


async def test_serve_requests_raises_the_peers_error_unwrapped(emp_pair: Pair) -> None:
    handler = Watched()
    with trio.fail_after(5):
        await emp_pair.client.send_error(ErrorCode.TIMEOUT, "gone")
        with pytest.raises(PeerError) as info:
            await serve_requests(emp_pair.server, handler)
        assert info.value.code == ErrorCode.TIMEOUT


async def test_processor_ends_on_bye(emp_pair: Pair) -> None:
    async def same(requests: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
        async for body in requests:
            yield body

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(serve_requests, emp_pair.server, same)
            assert await emp_pair.client.call(b"1") == b"1"
            await emp_pair.client.aclose()  # bye: serve_requests returns, the nursery exits


async def test_processor_raises_the_peers_error(emp_pair: Pair) -> None:
    async def same(requests: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
        async for body in requests:
            yield body

    with trio.fail_after(5):
        await emp_pair.client.send_error(ErrorCode.IO, "disk on fire")
        with pytest.raises(PeerError, match="disk on fire"):
            await serve_requests(emp_pair.server, same)
