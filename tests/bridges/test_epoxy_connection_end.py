"""What the Epoxy app server logs when a connection ends with requests queued, and what it echoes.

Over real sockets on 127.0.0.1, with the probe's budget (1 MiB): a client
that pipelines Subscribe requests to a publisher that never completes and
then resets the connection, or that follows a valid request with a protocol
violation in the same write, leaves no ERROR record and no traceback in the
log: requests queued when the connection ended are dropped unrun, and a
method that fails with the connection's own end is no method failure
(``dispatch_request(..., connection=...)``). Error texts made from the
peer's names are cut at ``MAX_ERROR_MESSAGE``, and warnings about a peer's
dropped events are bounded per connection (``MAX_PEER_WARNINGS``, then one
count at the end).

Each test waits for the server's ``session closed`` line (a log handler
sets an event), so none of them depends on timing.
"""

from __future__ import annotations

import logging
import socket
import struct
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from functools import partial

import pytest
import trio
from conftest import add_idle_publisher
from epoxy_helpers import RawEpoxy, decode_message, message

import examples.demo
import rstreams
from bridges.epoxy import (
    PUBLISHERS_SERVICE,
    EpoxyAppServer,
    EpoxyClosed,
    EpoxyConnectionLost,
    EpoxyMessageType,
    EpoxySettings,
    Error,
    ErrorCode,
    ProtocolErrorCode,
    PublishEvent,
    Request,
    ServiceError,
    ServiceTable,
    SubscribeRequest,
    bond,
    dispatch_request,
    method,
    service,
)
from bridges.kit import MAX_PEER_WARNINGS
from bridges.epoxy._service import MAX_ERROR_MESSAGE
from rstreams.support import listener_port

REQUEST, EVENT = EpoxyMessageType.REQUEST, EpoxyMessageType.EVENT
BUDGET = 1024 * 1024  # the probe's --max-connection-memory 1M


class _SessionsClosed(logging.Handler):
    # Counts the kit's "session closed" lines as they are logged (in the
    # trio thread), so a test can wait for the server to be done with a
    # connection without sleeping.
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.closed = 0
        self.changed = trio.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage().startswith("session closed:"):
            self.closed += 1
            self.changed.set()
            self.changed = trio.Event()

    async def wait_closed(self, count: int) -> None:
        while self.closed < count:
            await self.changed.wait()


@dataclass
class Served:
    port: int
    idle_asked: trio.MemoryReceiveChannel[str]
    sessions: _SessionsClosed
    caplog: pytest.LogCaptureFixture

    def errors(self) -> list[logging.LogRecord]:
        """Records at ERROR or above, or with a traceback, from any logger."""
        return [record for record in self.caplog.records if record.levelno >= logging.ERROR or record.exc_info]


@pytest.fixture
def sessions() -> Iterator[_SessionsClosed]:
    handler = _SessionsClosed()
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        yield handler
    finally:
        root.removeHandler(handler)


@pytest.fixture
async def served(nursery: trio.Nursery, sessions: _SessionsClosed, caplog: pytest.LogCaptureFixture) -> AsyncIterator[Served]:
    caplog.set_level(logging.INFO)
    app = rstreams.Router()
    route = examples.demo.app.resolve("range")
    assert route is not None
    app.add("range", route)
    idle_asked = add_idle_publisher(app)
    rstreams.Topic("chat", capacity=8).mount(app)
    server = EpoxyAppServer(app, settings=EpoxySettings(max_connection_memory=BUDGET))
    [listener] = await nursery.start(partial(server.serve_tcp, "127.0.0.1", 0))
    yield Served(listener_port(listener), idle_asked, sessions, caplog)
    await server.aclose()


def subscribe(conversation_id: int, publisher: str) -> bytes:
    frame = message(conversation_id, REQUEST, SubscribeRequest(publisher=publisher), PUBLISHERS_SERVICE, "Subscribe")
    return frame.encode()


async def reset(raw: RawEpoxy) -> None:
    # An abrupt close: RST, not FIN (SO_LINGER 0), as the probe's clients did.
    stream = raw.stream
    assert isinstance(stream, trio.SocketStream)
    stream.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    await stream.aclose()


async def test_a_reset_with_requests_queued_logs_no_error_and_no_traceback(served: Served) -> None:
    with trio.fail_after(20):
        raw = await RawEpoxy.connect(served.port)
        await raw.handshake_as_client()
        # 64 requests to a publisher that never completes: 16 are answered
        # at once (waiting for the publisher, or for room in the budget),
        # the rest wait in the connection's queue.
        await raw.send(b"".join(subscribe(1 + 2 * n, "idle") for n in range(64)))
        await served.idle_asked.receive()  # the first one is running
        await reset(raw)
        await served.sessions.wait_closed(1)
    assert served.errors() == []
    closes = [record.getMessage() for record in served.caplog.records if "session closed" in record.getMessage()]
    assert len(closes) == 1
    assert "connection lost" in closes[0]


@pytest.mark.parametrize(
    ("violation", "code"),
    [
        pytest.param(subscribe(7, "range?count=3"), ProtocolErrorCode.BAD_CONVERSATION_ID, id="reused-conversation-id"),
        pytest.param(subscribe(8, "range?count=3"), ProtocolErrorCode.BAD_CONVERSATION_ID, id="even-conversation-id"),
        pytest.param(b"\x00\x00", ProtocolErrorCode.PROTOCOL_VIOLATED, id="frame-of-no-framelets"),
    ],
)
async def test_a_violation_after_a_request_is_answered_and_logs_no_traceback(served: Served, violation: bytes, code: int) -> None:
    with trio.fail_after(20):
        for attempt in range(5):  # (before, 2 to 4 of 5 logged a traceback)
            raw = await RawEpoxy.connect(served.port)
            await raw.handshake_as_client()
            await raw.send(subscribe(7, "range?count=3") + violation)
            error = await raw.protocol_error()
            assert error.error_code == code
            await raw.aclose()
            await served.sessions.wait_closed(attempt + 1)
    assert served.errors() == []


async def test_a_long_unknown_name_is_not_echoed_whole(served: Served) -> None:
    with trio.fail_after(20):
        raw = await RawEpoxy.connect(served.port)
        await raw.handshake_as_client()
        # (Names within the 64 KiB of EpoxyHeaders, max_headers_size.)
        await raw.send(message(1, REQUEST, SubscribeRequest(publisher="range?count=1"), "s" * 40_000, "m" * 20_000))
        await raw.send(subscribe(3, "nothing-" + "x" * 200_000))
        await raw.send(subscribe(5, "range?count=1"))  # and the connection goes on
        answers = {}
        for _ in range(3):
            frame = await raw.receive()
            assert frame is not None
            headers, content, is_error = decode_message(frame)
            answers[headers.conversation_id] = (content, is_error)
        await raw.aclose()
    errors = {conversation_id: bond.unmarshal(Error, answers[conversation_id][0]) for conversation_id in (1, 3)}
    assert all(answers[conversation_id][1] for conversation_id in (1, 3))
    assert errors[1].error_code == ErrorCode.METHOD_NOT_FOUND
    assert errors[1].message.startswith("no such service: 'sss")
    assert len(errors[1].message) == MAX_ERROR_MESSAGE
    # A publisher name longer than the session to the app can carry names
    # no publisher (it used to close that session, and every later
    # Subscribe of the connection failed with a traceback).
    assert (errors[3].error_code, errors[3].message) == (ErrorCode.METHOD_NOT_FOUND, "no such publisher: a name of 200008 bytes")
    assert answers[5][1] is False
    assert served.errors() == []


async def test_an_unknown_publisher_s_long_name_is_cut(served: Served) -> None:
    with trio.fail_after(20):
        raw = await RawEpoxy.connect(served.port)
        await raw.handshake_as_client()
        await raw.send(subscribe(1, "nothing-" + "x" * 30_000))
        frame = await raw.receive()
        assert frame is not None
        _, content, is_error = decode_message(frame)
        await raw.aclose()
    error = bond.unmarshal(Error, content)
    assert is_error and error.error_code == ErrorCode.METHOD_NOT_FOUND
    assert error.message.startswith("no such publisher: nothing-xxx")
    assert len(error.message) == MAX_ERROR_MESSAGE


async def test_warnings_about_a_peer_s_dropped_events_are_bounded_per_connection(served: Served) -> None:
    with trio.fail_after(20):
        raw = await RawEpoxy.connect(served.port)
        await raw.handshake_as_client()
        events = [message(1 + 2 * n, EVENT, PublishEvent(topic=f"x?{n % 2}", value=b"v"), PUBLISHERS_SERVICE, "Publish") for n in range(40)]
        events += [message(81 + 2 * n, EVENT, PublishEvent(topic="chat", value=b"v"), PUBLISHERS_SERVICE, "Nope") for n in range(10)]
        await raw.send(b"".join(frame.encode() for frame in events))
        await raw.send(subscribe(201, "range?count=1"))  # answered once the events before it were read
        frame = await raw.receive()
        assert frame is not None and decode_message(frame)[0].conversation_id == 201
        await raw.aclose()
        await served.sessions.wait_closed(1)
    warnings = [record.getMessage() for record in served.caplog.records if record.name == "rstreams.epoxy" and record.levelno == logging.WARNING]
    assert len(warnings) == MAX_PEER_WARNINGS + 1
    assert all("is not a topic name" in line for line in warnings[:MAX_PEER_WARNINGS])
    assert f"{50 - MAX_PEER_WARNINGS} more warnings like the {MAX_PEER_WARNINGS} above were not logged" in warnings[-1]


# ---- dispatch_request, without a socket -------------------------------------------


@service("tests.Ends")
class Ends:
    def __init__(self, raised: BaseException) -> None:
        self.raised = raised

    @method
    async def Call(self, request: SubscribeRequest) -> SubscribeRequest:
        raise self.raised


class _Ended:
    # What dispatch_request asks of a connection: why it ended.
    def __init__(self, end_reason: BaseException | None) -> None:
        self.end_reason = end_reason


def call_request() -> Request:
    return Request(
        conversation_id=1, service_name="tests.Ends", method_name="Call", payload=bond.marshal(SubscribeRequest(publisher="x"))
    )


async def test_a_method_failing_with_its_connection_s_end_is_not_a_method_failure(caplog: pytest.LogCaptureFixture) -> None:
    end = EpoxyConnectionLost("connection lost while reading: reset")
    copy = EpoxyConnectionLost("connection lost while reading: reset")  # (the kit raises a copy in each waiter)
    table = ServiceTable([Ends(copy)])
    with pytest.raises(EpoxyConnectionLost):
        await dispatch_request(table, call_request(), connection=_Ended(end))  # type: ignore[arg-type]
    assert caplog.records == []


@pytest.mark.parametrize(
    "end_reason",
    [None, EpoxyClosed("the peer closed the connection", by_peer=True)],
    ids=["connection-open", "another-end"],
)
async def test_any_other_failure_is_still_logged_and_answered(caplog: pytest.LogCaptureFixture, end_reason: BaseException | None) -> None:
    table = ServiceTable([Ends(EpoxyConnectionLost("some other connection was lost"))])
    with caplog.at_level(logging.ERROR, logger="rstreams.epoxy"):
        outcome = await dispatch_request(table, call_request(), connection=_Ended(end_reason))  # type: ignore[arg-type]
    assert isinstance(outcome, Error)
    assert outcome.error_code == ErrorCode.INTERNAL_SERVER_ERROR
    assert [record.getMessage() for record in caplog.records] == ["Epoxy method tests.Ends.Call failed"]


async def test_service_errors_and_not_found_errors_are_cut() -> None:
    table = ServiceTable([Ends(ServiceError(ErrorCode.METHOD_NOT_FOUND, "y" * 100_000))])
    outcome = await dispatch_request(table, call_request())
    assert isinstance(outcome, Error)
    assert outcome.message == "y" * MAX_ERROR_MESSAGE
    for service_name, method_name in (("z" * 100_000, "Call"), ("tests.Ends", "w" * 100_000)):
        request = Request(conversation_id=1, service_name=service_name, method_name=method_name, payload=b"")
        outcome = await dispatch_request(table, request)
        assert isinstance(outcome, Error)
        assert outcome.error_code == ErrorCode.METHOD_NOT_FOUND
        assert len(outcome.message) == MAX_ERROR_MESSAGE


async def test_a_publish_to_a_name_too_long_for_the_app_session_is_dropped_and_the_connection_goes_on(served: Served) -> None:
    with trio.fail_after(20):
        raw = await RawEpoxy.connect(served.port)
        await raw.handshake_as_client()
        event = message(1, EVENT, PublishEvent(topic="t" * 70_000, value=b"v"), PUBLISHERS_SERVICE, "Publish")
        await raw.send(event, subscribe(3, "range?count=1"))
        frame = await raw.receive()
        assert frame is not None
        headers, _, is_error = decode_message(frame)
        assert (headers.conversation_id, is_error) == (3, False)
        await raw.aclose()
        await served.sessions.wait_closed(1)
    assert served.errors() == []
    [warning] = [record.getMessage() for record in served.caplog.records if record.levelno == logging.WARNING]
    assert "is not a topic name" in warning
    assert "... (69800 more characters)" in warning and len(warning) < 400  # (cut as rstreams cuts a peer's text)


def test_a_peer_s_text_in_a_warning_cannot_forge_a_line(caplog: pytest.LogCaptureFixture) -> None:
    # The kit quotes a peer's names as the runtime does (peer_text): a
    # newline in a topic name stays inside the one line.
    from bridges.kit import PeerWarnings

    with caplog.at_level(logging.WARNING, logger="rstreams.bridges"):
        PeerWarnings(logging.getLogger("rstreams.bridges")).warn("dropped event %s: no such event method", "x\nWARNING forged")
    [line] = [record.getMessage() for record in caplog.records]
    assert "\n" not in line and "\\n" in line
