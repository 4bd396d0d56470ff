"""Epoxy onto rstreams for any service: events as a publisher, elements as events, calls paced by demand."""

from __future__ import annotations

from collections.abc import AsyncIterator
from functools import partial

import pytest
import trio
import trio.testing

import rstreams
from bridges.epoxy import (
    EpoxyConnection,
    call_publisher,
    event_publisher,
    open_epoxy_connection,
    send_events,
    serve_epoxy,
    service,
    method,
    bond,
)
from examples.epoxy_calc import Calc, Operation, Params, Result
from rstreams.support import listener_port

CALC = "examples.calc.Calc"


@service("test.Counted")
class Counted:
    """Calc's Calculate, counting the requests being answered at once."""

    def __init__(self) -> None:
        self.in_flight = 0
        self.most = 0
        self.release = trio.Event()

    @method
    async def Calculate(self, params: Params) -> Result:  # noqa: N802
        self.in_flight += 1
        self.most = max(self.most, self.in_flight)
        try:
            await self.release.wait()
            if params.operation == Operation.Div and params.y == 0:
                raise ZeroDivisionError("division by zero")
            return Result(z=params.x + params.y)
        finally:
            self.in_flight -= 1


async def test_inbound_events_are_a_publisher_and_elements_become_events(nursery: trio.Nursery) -> None:
    got: list[bytes] = []
    done = trio.Event()

    async def handler(connection: EpoxyConnection) -> None:
        app = rstreams.Router()
        app.add("events", event_publisher(connection, method_name="Tick"))
        async with rstreams.open_local_session(app) as session:
            async with session.subscribe("events", prefetch=2) as events:
                async for payload in events:
                    got.append(bytes(payload))
                    if len(got) == 3:
                        break
        done.set()

    [listener] = await nursery.start(partial(serve_epoxy, "127.0.0.1", 0, handler=handler))
    with trio.fail_after(10):
        async with open_epoxy_connection("127.0.0.1", listener_port(listener)) as connection:
            await connection.send_event("test", "Other", Params(x=99))  # filtered out

            async def payloads() -> AsyncIterator[bond.Struct]:
                for x in range(3):
                    yield Params(x=x)

            assert await send_events(connection, "test", "Tick", payloads()) == 3
            await done.wait()
    assert [bond.unmarshal(Params, payload).x for payload in got] == [0, 1, 2]


@pytest.mark.parametrize("prefetch", [1, 3])
async def test_calls_in_flight_never_exceed_demand(nursery: trio.Nursery, prefetch: int) -> None:
    counted = Counted()
    [listener] = await nursery.start(partial(serve_epoxy, "127.0.0.1", 0, services=[counted, Calc()]))
    with trio.fail_after(10):
        async with open_epoxy_connection("127.0.0.1", listener_port(listener)) as connection:

            async def requests() -> AsyncIterator[bond.Struct]:
                for x in range(8):
                    yield Params(x=x, y=1)

            app = rstreams.Router()
            app.add("sums", call_publisher(connection, "test.Counted", "Calculate", requests()))
            async with rstreams.open_local_session(app) as session:
                async with session.subscribe("sums", prefetch=prefetch) as sums:
                    while counted.in_flight < prefetch:
                        await trio.sleep(0.01)
                    await trio.testing.wait_all_tasks_blocked(0.05)
                    assert counted.in_flight == prefetch  # bounded by the subscriber's demand
                    counted.release.set()
                    results = [bond.unmarshal(Result, raw).z async for raw in sums]
            assert results == [x + 1 for x in range(8)]  # in request order
            assert counted.most <= prefetch


async def test_an_error_response_fails_the_call_stream(nursery: trio.Nursery) -> None:
    [listener] = await nursery.start(partial(serve_epoxy, "127.0.0.1", 0, services=[Calc()]))
    with trio.fail_after(10):
        async with open_epoxy_connection("127.0.0.1", listener_port(listener)) as connection:

            async def requests() -> AsyncIterator[bond.Struct]:
                yield Params(x=1, y=1)
                yield Params(x=1, y=0, operation=Operation.Div)

            app = rstreams.Router()
            app.add("calc", call_publisher(connection, CALC, "Calculate", requests()))
            async with rstreams.open_local_session(app) as session:
                with pytest.raises(rstreams.PublisherError, match="division by zero"):
                    async with session.subscribe("calc", prefetch=4) as results:
                        async for _ in results:
                            pass
    with pytest.raises(ValueError):
        call_publisher(connection, CALC, "Calculate", requests(), max_in_flight=0)

