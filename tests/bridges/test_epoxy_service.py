"""Python services: declaring them, dispatching requests and events, and the proxy.

Dispatch is tested without a connection (``dispatch_request`` and
``dispatch_event`` take the sans-I/O events); the proxy and
``serve_services`` over real sockets.
"""

from __future__ import annotations

import logging
import subprocess
import sys
from functools import partial
from pathlib import Path

import pytest
import trio

from bridges.epoxy import (
    EpoxyConnection,
    Error,
    ErrorCode,
    ErrorResponse,
    Event,
    MethodKind,
    Request,
    ServiceError,
    ServiceProxy,
    ServiceTable,
    bond,
    dispatch_event,
    dispatch_events,
    dispatch_request,
    event,
    hold_for_response,
    method,
    open_epoxy_connection,
    serve_epoxy,
    service,
    service_info,
    serve_services,
)
from bridges.kit import MemoryBudget
from examples.epoxy_calc import Calc, Operation, Params, Result
from rstreams.support import listener_port

ROOT = Path(__file__).resolve().parents[2]


class Note(bond.Struct):
    text: str = bond.field(0, bond.STRING)


@service("test.Notes")
class Notes:
    def __init__(self) -> None:
        self.notes: list[str] = []

    @method
    async def Count(self, note: Note) -> Result:  # noqa: N802
        return Result(z=len(self.notes))

    @event
    async def Add(self, note: Note) -> None:  # noqa: N802
        if note.text == "boom":
            raise RuntimeError("boom")
        self.notes.append(note.text)

    @method(name="Fail")
    async def fail(self, note: Note) -> Result:
        if note.text == "service":
            raise ServiceError(ErrorCode.INVALID_INVOCATION, "bad note")
        if note.text == "type":
            return Note(text="not a Result")  # type: ignore[return-value]
        if note.text == "encode":
            return Result(z=2**40)
        raise ValueError("it failed")


def request(method_name: str, payload: bond.Struct | bytes, service_name: str = "test.Notes") -> Request:
    content = bond.marshal(payload) if isinstance(payload, bond.Struct) else payload
    return Request(conversation_id=1, service_name=service_name, method_name=method_name, payload=content)


def test_service_info_reads_the_annotations() -> None:
    info = service_info(Notes)
    assert info.name == "test.Notes"
    assert set(info.methods) == {"Count", "Add", "Fail"}
    assert info.methods["Count"].kind is MethodKind.REQUEST_RESPONSE
    assert info.methods["Count"].request_class is Note and info.methods["Count"].response_class is Result
    assert info.methods["Add"].kind is MethodKind.EVENT and info.methods["Add"].response_class is None
    assert info.methods["Fail"].attribute == "fail"
    assert service_info(Notes()) is info


def test_declarations_are_checked() -> None:
    with pytest.raises(TypeError, match="async"):

        class Sync:
            @method
            def Nope(self, note: Note) -> Result:  # noqa: N802
                return Result()

    with pytest.raises(TypeError, match="bond.Struct"):

        @service("bad.Untyped")
        class Untyped:
            @method
            async def Nope(self, note: int) -> Result:  # noqa: N802
                return Result()

    with pytest.raises(TypeError, match="exactly one argument"):

        @service("bad.Two")
        class Two:
            @method
            async def Nope(self, a: Note, b: Note) -> Result:  # noqa: N802
                return Result()

    with pytest.raises(TypeError, match="two methods"):

        @service("bad.Twice")
        class Twice:
            @method(name="Same")
            async def one(self, note: Note) -> Result:
                return Result()

            @method(name="Same")
            async def two(self, note: Note) -> Result:
                return Result()

    with pytest.raises(TypeError, match="not an Epoxy service"):
        ServiceTable([object()])
    with pytest.raises(TypeError, match="instance"):
        ServiceTable([Notes])
    with pytest.raises(TypeError, match="two objects"):
        ServiceTable([Notes(), Notes()])


def test_explicit_structs_override_the_annotations() -> None:
    @service("test.Explicit")
    class Explicit:
        @method(request=Params, response=Result)
        async def Calculate(self, params):  # type: ignore[no-untyped-def]  # noqa: N802
            return Result(z=params.x)

    info = service_info(Explicit).methods["Calculate"]
    assert (info.request_class, info.response_class) == (Params, Result)


async def test_dispatch_answers_and_errors() -> None:
    table = ServiceTable([Notes()])

    async def answer(req: Request) -> bond.Struct | Error:
        outcome = await dispatch_request(table, req)
        return outcome if isinstance(outcome, Error) else bond.unmarshal(Result, outcome)

    assert await answer(request("Count", Note())) == Result(z=0)
    assert await answer(request("Count", Note(), "test.Other")) == Error(
        error_code=ErrorCode.METHOD_NOT_FOUND, message="no such service: 'test.Other' (method 'Count')"
    )
    assert await answer(request("Missing", Note())) == Error(
        error_code=ErrorCode.METHOD_NOT_FOUND, message="no such method: test.Notes.Missing"
    )
    invalid = await answer(request("Add", Note()))
    assert isinstance(invalid, Error) and invalid.error_code == ErrorCode.INVALID_INVOCATION
    assert await answer(request("Fail", Note(text="service"))) == Error(
        error_code=ErrorCode.INVALID_INVOCATION, message="bad note"
    )
    assert await answer(request("Fail", Note(text="other"))) == Error(
        error_code=ErrorCode.INTERNAL_SERVER_ERROR, message="it failed"
    )
    wrong_type = await answer(request("Fail", Note(text="type")))
    assert isinstance(wrong_type, Error) and "returned a Note, not a Result" in wrong_type.message
    unencodable = await answer(request("Fail", Note(text="encode")))
    assert isinstance(unencodable, Error) and "does not encode" in unencodable.message
    undecodable = await answer(request("Count", b"CB\x01\x00\x09"))  # a string field cut short
    assert isinstance(undecodable, Error) and undecodable.error_code == ErrorCode.INTERNAL_SERVER_ERROR
    assert "not a valid Note" in undecodable.message


async def test_events_run_and_what_cannot_run_is_dropped(caplog: pytest.LogCaptureFixture) -> None:
    notes = Notes()
    table = ServiceTable([notes])

    def message(method_name: str, payload: bytes) -> Event:
        return Event(conversation_id=1, service_name="test.Notes", method_name=method_name, payload=payload)

    with caplog.at_level(logging.WARNING, logger="rstreams.epoxy"):
        await dispatch_event(table, message("Add", bond.marshal(Note(text="a"))))
        await dispatch_event(table, message("Count", bond.marshal(Note(text="b"))))  # not an event method
        await dispatch_event(table, message("Nope", bond.marshal(Note(text="c"))))
        await dispatch_event(table, message("Add", b"CB\x01\x00\x09"))
        await dispatch_event(table, message("Add", bond.marshal(Note(text="boom"))))
        await dispatch_event(table, message("Add", bond.marshal(Note(text="d"))))
    assert notes.notes == ["a", "d"]
    assert sum("dropped event" in record.message for record in caplog.records) == 3
    assert any("failed" in record.message for record in caplog.records)


@service("test.Log")
class Log:
    # A batch event method beside a plain one: what each call got.
    def __init__(self) -> None:
        self.calls: list[tuple[str, list[str]]] = []

    @event(name="Write", batch=True)
    async def write(self, notes: list[Note]) -> None:
        if any(note.text == "boom" for note in notes):
            raise RuntimeError("boom")
        self.calls.append(("Write", [note.text for note in notes]))

    @event
    async def Mark(self, note: Note) -> None:  # noqa: N802
        self.calls.append(("Mark", [note.text]))


async def test_a_batch_event_method_gets_each_run_of_its_events_in_order(caplog: pytest.LogCaptureFixture) -> None:
    # What one read brought, run in one step per run of a batch method's
    # events: a run ends at another method's event, and an event that does
    # not decode is dropped alone (the rest of its run still goes).
    log = Log()
    table = ServiceTable([log])
    info = service_info(log).methods["Write"]
    assert info.batch and info.request_class is Note and info.attribute == "write"

    def message(method_name: str, payload: bytes) -> Event:
        return Event(conversation_id=1, service_name="test.Log", method_name=method_name, payload=payload)

    def write(text: str) -> Event:
        return message("Write", bond.marshal(Note(text=text)))

    with caplog.at_level(logging.WARNING, logger="rstreams.epoxy"):
        await dispatch_events(
            table,
            [write("a"), write("b"), message("Mark", bond.marshal(Note(text="m"))), write("c"),
             message("Write", b"CB\x01\x00\x09"), write("d"), write("boom"), write("e"),
             message("Nope", b""), write("f")],
        )  # fmt: skip
    # c, d, boom and e are one run (the bad one dropped), and the method
    # raised for it: logged, and the events after it still run.
    assert log.calls == [("Write", ["a", "b"]), ("Mark", ["m"]), ("Write", ["f"])]
    messages = [record.message for record in caplog.records]
    assert sum("dropped event test.Log.Write: not a valid Note" in message for message in messages) == 1
    assert sum("no such event method" in message for message in messages) == 1
    assert any("Epoxy event method test.Log.Write failed" in message for message in messages)  # the run with "boom"


async def test_the_proxy_calls_methods_and_sends_events(nursery: trio.Nursery) -> None:
    notes = Notes()
    [listener] = await nursery.start(partial(serve_epoxy, "127.0.0.1", 0, services=[notes, Calc()]))
    with trio.fail_after(10):
        async with open_epoxy_connection("127.0.0.1", listener_port(listener)) as connection:
            proxy = ServiceProxy(connection, Notes)
            assert proxy.service_name == "test.Notes"
            assert await proxy.Add(Note(text="x")) == 1  # the event's conversation id
            assert await proxy.Add(Note(text="y")) == 3
            # Events and requests are served by separate loops: the events
            # land in order, but not necessarily before the next request.
            while (await proxy.Count(Note())).z < 2:
                await trio.sleep(0.01)
            assert notes.notes == ["x", "y"]
            with pytest.raises(ErrorResponse) as caught:
                await proxy.fail(Note(text="service"))  # by Python name
            assert caught.value.error.message == "bad note"
            with pytest.raises(AttributeError):
                proxy.Nope  # noqa: B018
            with pytest.raises(TypeError, match="takes a Note"):
                await proxy.Count(Params())
            assert await ServiceProxy(connection, Calc()).Calculate(Params(x=6, y=7, operation=Operation.Mul)) == Result(z=42)


@service("test.Held")
class Held:
    """Answers with what it took room for in the connection's budget, handed over to the response."""

    def __init__(self, budget: MemoryBudget) -> None:
        self.budget = budget

    @method
    async def Echo(self, note: Note) -> Note:  # noqa: N802
        size = len(note.text)
        await self.budget.take(size)
        assert hold_for_response(self.budget, size)
        assert not hold_for_response(MemoryBudget(10), 1)  # one budget per response
        if note.text.startswith("type"):
            return Result(z=1)  # type: ignore[return-value]  # an error response instead
        if note.text.startswith("fail"):
            raise ValueError("it failed")
        return Note(text=note.text)


async def test_held_bytes_are_handed_over_to_the_response_exactly_once(nursery: trio.Nursery) -> None:
    # hold_for_response: the bytes a method took for its response are given
    # back once the response is queued (as Publishers.Subscribe's elements),
    # or once the request is answered otherwise (an error), never twice:
    # with nothing left to write, the server's budget is back to nothing.
    budgets: list[MemoryBudget] = []

    async def handler(connection: EpoxyConnection) -> None:
        budgets.append(connection.budget)
        await serve_services(connection, [Held(connection.budget)])

    assert not hold_for_response(MemoryBudget(10), 1)  # not within serve_services
    [listener] = await nursery.start(partial(serve_epoxy, "127.0.0.1", 0, handler=handler))
    with trio.fail_after(10):
        async with open_epoxy_connection("127.0.0.1", listener_port(listener)) as connection:
            proxy = ServiceProxy(connection, Held)
            texts = ["x" * 100_000, "type" * 1000, "fail" * 1000, "y" * 3]
            async with trio.open_nursery() as calls:
                for text in texts:
                    calls.start_soon(_echo, proxy, text)
            [budget] = budgets
            while budget.used:  # the last response may still be being written
                await trio.sleep(0.01)
            assert budget.statistics().waiting == 0


async def _echo(proxy: ServiceProxy, text: str) -> None:
    if text.startswith(("type", "fail")):
        with pytest.raises(ErrorResponse):
            await proxy.Echo(Note(text=text))
    else:
        assert await proxy.Echo(Note(text=text)) == Note(text=text)


def test_serve_epoxy_takes_services_or_a_handler() -> None:
    async def handler(connection: object) -> None:
        pass  # pragma: no cover

    async def main() -> None:
        await serve_epoxy("127.0.0.1", 0, services=[Calc()], handler=handler)  # type: ignore[arg-type]

    with pytest.raises(TypeError, match="not both"):
        trio.run(main)


def test_the_calc_example_runs() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "examples.epoxy_calc"], cwd=ROOT, capture_output=True, text=True, timeout=30
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "67 Mul 87 = 5829",
        "1 Div 0: error response INVALID_INVOCATION (0xa0bd0002): division by zero",
    ]
