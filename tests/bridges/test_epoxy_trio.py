"""The trio adapter: a Python client against a Python server over TCP and TLS, and every way a connection ends.

Real sockets on 127.0.0.1 (port 0) wherever a connection is made; a raw peer
(``epoxy_helpers.RawEpoxy``) plays the misbehaving side byte by byte, so
each ProtocolError the adapter sends or receives is checked on the wire.
"""

from __future__ import annotations

import ssl
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

import outcome
import pytest
import trio
import trio.testing
import trustme
from epoxy_helpers import RawEpoxy, decode_message, headers, message

from bridges.epoxy import (
    DEFAULT_SETTINGS,
    ConfigReceived,
    ConnectionInfo,
    ConversationIdsExhaustedError,
    EpoxyClosed,
    EpoxyConnection,
    EpoxyConnectionLost,
    EpoxyLimits,
    EpoxyMessageType,
    EpoxyServer,
    EpoxySettings,
    EpoxyTimeout,
    Error,
    ErrorCode,
    ErrorResponse,
    Frame,
    Framelet,
    FrameletType,
    PeerProtocolError,
    ProtocolError,
    ProtocolErrorCode,
    RemoteProtocolError,
    Request,
    Role,
    ServiceProxy,
    bond,
    config_frame,
    connect_epoxy,
    error_frame,
    message_frame,
    open_epoxy_connection,
    open_epoxy_stream,
    serve_epoxy,
    event,
    method,
    service,
)
from examples.epoxy_calc import Calc, Operation, Params, Result
from rstreams.support import listener_port

REQUEST, RESPONSE, EVENT = EpoxyMessageType.REQUEST, EpoxyMessageType.RESPONSE, EpoxyMessageType.EVENT
CALC = "examples.calc.Calc"
Code = ProtocolErrorCode
SHORT = EpoxySettings(handshake_timeout=0.2, close_timeout=1.0)


async def start_server(nursery: trio.Nursery, **options: Any) -> int:
    [listener] = await nursery.start(partial(serve_epoxy, "127.0.0.1", 0, **options))
    return listener_port(listener)


async def raw_server(nursery: trio.Nursery) -> tuple[int, trio.MemoryReceiveChannel[RawEpoxy]]:
    """A listener whose connections are handed over as raw peers."""
    [listener] = await trio.open_tcp_listeners(0, host="127.0.0.1")
    send, receive = trio.open_memory_channel[RawEpoxy](8)

    async def accept_loop() -> None:
        async with listener:
            while True:
                await send.send(RawEpoxy(await listener.accept()))

    nursery.start_soon(accept_loop)
    return listener.socket.getsockname()[1], receive


class Background:
    """Runs ``function`` in the nursery and keeps its outcome (value or exception)."""

    def __init__(self, nursery: trio.Nursery, function: Callable[[], Awaitable[Any]]) -> None:
        self.done = trio.Event()
        self.result: outcome.Outcome[Any] | None = None
        nursery.start_soon(self._run, function)

    async def _run(self, function: Callable[[], Awaitable[Any]]) -> None:
        self.result = await outcome.acapture(function)
        self.done.set()

    async def get(self) -> Any:
        await self.done.wait()
        assert self.result is not None
        return self.result.unwrap()


# ---- a Python client against a Python server ---------------------------------------


async def test_calc_over_tcp(nursery: trio.Nursery) -> None:
    port = await start_server(nursery, services=[Calc()])
    with trio.fail_after(10):
        async with open_epoxy_connection("127.0.0.1", port) as connection:
            assert connection.role is Role.CLIENT
            result = await connection.call(CALC, "Calculate", Params(x=67, y=87, operation=Operation.Mul), Result)
            assert result == Result(z=5829)
            calc = ServiceProxy(connection, Calc)
            assert await calc.Calculate(Params(x=2, y=3)) == Result(z=5)
            pending = await connection.start_call(CALC, "Calculate", Params(x=1, y=1, operation=Operation.Sub))
            assert pending.conversation_id == 5  # odd ids from 1, step 2
            response = await pending.response()
            assert response.conversation_id == 5 and not response.is_error
            assert response.decode(Result) == Result(z=0)
            with pytest.raises(ErrorResponse) as caught:
                await calc.Calculate(Params(x=1, y=0, operation=Operation.Div))
            assert caught.value.error == Error(error_code=ErrorCode.INVALID_INVOCATION, message="division by zero")
            assert caught.value.error_code == ErrorCode.INVALID_INVOCATION


async def test_connect_epoxy_runs_in_the_callers_nursery(nursery: trio.Nursery) -> None:
    port = await start_server(nursery, services=[Calc()])
    with trio.fail_after(10):
        async with trio.open_nursery() as own:
            connection = await connect_epoxy(own, "127.0.0.1", port)
            assert await connection.call(CALC, "Calculate", Params(x=40, y=2), Result) == Result(z=42)
            await connection.aclose()
        assert connection.ended


def _tls(ca: trustme.CA) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("localhost").configure_cert(server)
    server.verify_mode = ssl.CERT_REQUIRED  # ask for the client's certificate
    ca.configure_trust(server)
    client = ssl.create_default_context()
    ca.configure_trust(client)
    ca.issue_cert("client.example.com").configure_cert(client)
    return server, client


async def test_calc_over_tls_with_the_client_certificate_given_to_accept(nursery: trio.Nursery) -> None:
    server_context, client_context = _tls(trustme.CA())
    seen: list[ConnectionInfo] = []

    async def accept(info: ConnectionInfo) -> bool:
        seen.append(info)
        await trio.lowlevel.checkpoint()
        return True

    port = await start_server(nursery, services=[Calc()], ssl_context=server_context, accept=accept)
    with trio.fail_after(10):
        async with open_epoxy_connection(
            "127.0.0.1", port, ssl_context=client_context, server_hostname="localhost"
        ) as connection:
            assert await connection.call(CALC, "Calculate", Params(x=67, y=87, operation=Operation.Mul), Result) == Result(z=5829)
            assert connection.info.tls and connection.info.peer_address is not None
    [info] = seen
    assert info.tls and info.tls_version is not None and info.tls_version.startswith("TLS")
    assert info.peer_address is not None and info.peer_address[0] == "127.0.0.1"
    assert info.peer == f"127.0.0.1:{info.peer_address[1]}"
    assert info.peer_certificate is not None
    assert ("DNS", "client.example.com") in info.peer_certificate["subjectAltName"]
    assert info.peer_certificate_der and info.cipher
    assert info.config is not None


async def test_plain_tcp_info_has_addresses_and_no_certificate(nursery: trio.Nursery) -> None:
    seen: list[ConnectionInfo] = []
    port = await start_server(nursery, services=[Calc()], accept=lambda info: seen.append(info) is None)
    with trio.fail_after(10):
        async with open_epoxy_connection("127.0.0.1", port) as connection:
            await connection.call(CALC, "Calculate", Params(), Result)
    [info] = seen
    assert not info.tls and info.peer_certificate is None and info.local_address == ("127.0.0.1", port)


# ---- rejection ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("verdict", "details"),
    [
        (False, None),
        (Error(error_code=ErrorCode.INVALID_INVOCATION, message="not you"), "not you"),
    ],
)
async def test_a_rejected_client_gets_connection_rejected(nursery: trio.Nursery, verdict: Any, details: str | None) -> None:
    port = await start_server(nursery, services=[Calc()], accept=lambda info: verdict)
    with trio.fail_after(10):
        with pytest.raises(PeerProtocolError) as caught:
            async with open_epoxy_connection("127.0.0.1", port):
                pass  # pragma: no cover
        assert caught.value.error_code == Code.CONNECTION_REJECTED
        assert (caught.value.details.message if caught.value.details else None) == details
        # On the wire: our config, then only the Error frame, then the close.
        raw = await RawEpoxy.connect(port)
        await raw.send(config_frame())
        frames = await raw.receive_until_eof()
        assert len(frames) == 1
        error = bond.deserialize(ProtocolError, frames[0].framelets[0].content, bond.Protocol.FAST)
        assert error.error_code == Code.CONNECTION_REJECTED


async def test_an_accept_function_that_raises_rejects(nursery: trio.Nursery) -> None:
    def accept(info: ConnectionInfo) -> bool:
        raise RuntimeError("broken policy")

    port = await start_server(nursery, services=[Calc()], accept=accept)
    with trio.fail_after(10):
        with pytest.raises(PeerProtocolError) as caught:
            async with open_epoxy_connection("127.0.0.1", port):
                pass  # pragma: no cover
        assert caught.value.error_code == Code.CONNECTION_REJECTED and caught.value.details is None


async def test_a_server_over_its_connection_limit_rejects_with_server_busy(nursery: trio.Nursery) -> None:
    port = await start_server(nursery, services=[Calc()], max_connections=1)
    with trio.fail_after(10):
        async with open_epoxy_connection("127.0.0.1", port) as first:
            await first.call(CALC, "Calculate", Params(), Result)
            with pytest.raises(PeerProtocolError) as caught:
                async with open_epoxy_connection("127.0.0.1", port):
                    pass  # pragma: no cover
            assert caught.value.error_code == Code.CONNECTION_REJECTED
            assert caught.value.details is not None and caught.value.details.message == "server busy"


# ---- handshake timeouts --------------------------------------------------------------


async def test_a_client_that_sends_no_config_gets_timeout(nursery: trio.Nursery) -> None:
    port = await start_server(nursery, services=[Calc()], settings=SHORT)
    with trio.fail_after(10):
        raw = await RawEpoxy.connect(port)
        assert (await raw.protocol_error()).error_code == Code.TIMEOUT
        assert await raw.receive() is None


async def test_an_undecided_server_times_out_the_handshake(nursery: trio.Nursery) -> None:
    async def accept(info: ConnectionInfo) -> bool:
        await trio.sleep_forever()
        raise AssertionError  # pragma: no cover

    port = await start_server(nursery, services=[Calc()], settings=SHORT, accept=accept)
    with trio.fail_after(10):
        raw = await RawEpoxy.connect(port)
        await raw.send(config_frame())
        assert (await raw.protocol_error()).error_code == Code.TIMEOUT


async def test_a_server_that_sends_no_config_gets_timeout(nursery: trio.Nursery) -> None:
    port, accepted = await raw_server(nursery)
    with trio.fail_after(10):
        client = Background(nursery, partial(_connect_and_close, port, SHORT))
        raw = await accepted.receive()
        frame = await raw.receive()
        assert frame is not None and frame.framelets[0].type == FrameletType.EPOXY_CONFIG
        assert (await raw.protocol_error()).error_code == Code.TIMEOUT
        with pytest.raises(EpoxyTimeout) as caught:
            await client.get()
        assert caught.value.error_code == Code.TIMEOUT


async def _connect_and_close(port: int, settings: EpoxySettings = DEFAULT_SETTINGS) -> None:
    async with open_epoxy_connection("127.0.0.1", port, settings=settings):
        pass


# ---- protocol errors, client side -------------------------------------------------


def _unknown_framelet() -> bytes:
    # A frame of one framelet of an unknown type (0x5858, "XX").
    return b"\x01\x00" + b"XX" + b"\x01\x00\x00\x00" + b"\x00"


async def test_a_server_protocol_error_instead_of_config_is_raised(nursery: trio.Nursery) -> None:
    port, accepted = await raw_server(nursery)
    with trio.fail_after(10):
        client = Background(nursery, partial(_connect_and_close, port))
        raw = await accepted.receive()
        await raw.receive()
        details = Error(error_code=ErrorCode.CONNECTION_SHUT_DOWN, message="go away")
        await raw.send(error_frame(ProtocolError(error_code=Code.CONNECTION_REJECTED, details=bond.Bonded(details))))
        with pytest.raises(PeerProtocolError) as caught:
            await client.get()
        assert caught.value.error_code == Code.CONNECTION_REJECTED and caught.value.details == details
        assert "CONNECTION_REJECTED: go away" in str(caught.value)


@pytest.mark.parametrize(
    ("reply", "code"),
    [
        (Frame(framelets=(Framelet(type=FrameletType.EPOXY_CONFIG, content=b"\xff"),)).encode(), Code.SERVER_BAD_HANDSHAKE),
        (_unknown_framelet(), Code.PROTOCOL_VIOLATED),
        (message(2, REQUEST, Params(), CALC, "Calculate").encode(), Code.PROTOCOL_VIOLATED),
        (b"\x00\x00", Code.PROTOCOL_VIOLATED),
    ],
    ids=["bad-config", "unknown-framelet", "message-before-config", "empty-frame"],
)
async def test_a_bad_handshake_from_the_server(nursery: trio.Nursery, reply: bytes, code: int) -> None:
    port, accepted = await raw_server(nursery)
    with trio.fail_after(10):
        client = Background(nursery, partial(_connect_and_close, port))
        raw = await accepted.receive()
        await raw.receive()
        await raw.send(reply)
        assert (await raw.protocol_error()).error_code == code
        with pytest.raises(RemoteProtocolError) as caught:
            await client.get()
        assert caught.value.error_code == code


async def test_a_server_that_closes_during_the_handshake_is_a_lost_connection(nursery: trio.Nursery) -> None:
    port, accepted = await raw_server(nursery)
    with trio.fail_after(10):
        client = Background(nursery, partial(_connect_and_close, port))
        raw = await accepted.receive()
        await raw.receive()
        await raw.aclose()
        with pytest.raises(EpoxyConnectionLost):
            await client.get()


def _oversized() -> bytes:
    return message(2, RESPONSE, b"CB\x01\x00" + b"\x00" * 5000).encode()


@pytest.mark.parametrize(
    ("frame", "code"),
    [
        (message(2, RESPONSE, Result(z=1)).encode(), Code.BAD_CONVERSATION_ID),  # a response with the server's parity
        (message(3, REQUEST, Params(), CALC, "Calculate").encode(), Code.BAD_CONVERSATION_ID),  # a request with ours
        (
            Frame(
                framelets=(
                    Framelet(type=FrameletType.EPOXY_HEADERS, content=b"\xff\xff"),
                    Framelet(type=FrameletType.PAYLOAD_DATA, content=b"CB\x01\x00\x00"),
                )
            ).encode(),
            Code.MALFORMED_DATA,
        ),
        (message_frame(headers(1, 7), b"CB\x01\x00\x00").encode(), Code.NOT_SUPPORTED),
        (message(2, REQUEST, Error(error_code=1), CALC, "Calculate", is_error=True).encode(), Code.PROTOCOL_VIOLATED),
        (config_frame().encode(), Code.PROTOCOL_VIOLATED),  # a second config
        (_unknown_framelet(), Code.PROTOCOL_VIOLATED),
        (_oversized(), Code.LIMIT_EXCEEDED),
    ],
    ids=["response-parity", "request-parity", "malformed-headers", "message-type", "request-with-error-data", "second-config", "unknown-framelet", "limit"],
)
async def test_a_violation_after_the_handshake_fails_the_pending_call(nursery: trio.Nursery, frame: bytes, code: int) -> None:
    port, accepted = await raw_server(nursery)
    settings = EpoxySettings(limits=EpoxyLimits(max_framelet_size=4096, max_frame_size=8192))
    with trio.fail_after(10):
        async with trio.open_nursery() as inner:

            async def client() -> None:
                async with open_epoxy_connection("127.0.0.1", port, settings=settings) as connection:
                    pending = await connection.start_call(CALC, "Calculate", Params())
                    with pytest.raises(RemoteProtocolError) as caught:
                        await pending.response()
                    assert caught.value.error_code == code
                    # Every later operation raises the same end, a fresh copy each time.
                    with pytest.raises(RemoteProtocolError):
                        await connection.start_call(CALC, "Calculate", Params())

            inner.start_soon(client)
            raw = await accepted.receive()
            await raw.handshake_as_server()
            await raw.receive()  # the request
            await raw.send(frame)
            assert (await raw.protocol_error()).error_code == code


async def test_end_of_file_in_the_middle_of_a_frame(nursery: trio.Nursery) -> None:
    port, accepted = await raw_server(nursery)
    with trio.fail_after(10):
        async with trio.open_nursery() as inner:

            async def client() -> None:
                async with open_epoxy_connection("127.0.0.1", port) as connection:
                    pending = await connection.start_call(CALC, "Calculate", Params())
                    # The machine's violation, reported as what the
                    # application sees: the connection lost mid-frame.
                    with pytest.raises(EpoxyConnectionLost, match="middle of a frame") as caught:
                        await pending.response()
                    violation = caught.value.__cause__
                    assert isinstance(violation, RemoteProtocolError)
                    assert violation.error_code == Code.PROTOCOL_VIOLATED

            inner.start_soon(client)
            raw = await accepted.receive()
            await raw.handshake_as_server()
            await raw.receive()
            await raw.send(message(1, RESPONSE, Result(z=1)).encode()[:7])
            assert isinstance(raw.stream, trio.SocketStream)
            await raw.stream.send_eof()


async def test_the_peers_error_frame_fails_pending_calls(nursery: trio.Nursery) -> None:
    port, accepted = await raw_server(nursery)
    with trio.fail_after(10):
        async with trio.open_nursery() as inner:

            async def client() -> None:
                async with open_epoxy_connection("127.0.0.1", port) as connection:
                    first = await connection.start_call(CALC, "Calculate", Params())
                    second = await connection.start_call(CALC, "Calculate", Params())
                    for pending in (first, second):
                        with pytest.raises(PeerProtocolError) as caught:
                            await pending.response()
                        assert caught.value.error_code == Code.INTERNAL_ERROR

            inner.start_soon(client)
            raw = await accepted.receive()
            await raw.handshake_as_server()
            await raw.receive()
            await raw.receive()
            await raw.send(error_frame(ProtocolError(error_code=Code.INTERNAL_ERROR)))
            assert await raw.receive() is None  # and nothing back: never an error about an error


async def test_conversation_ids_exhausted(nursery: trio.Nursery) -> None:
    port, accepted = await raw_server(nursery)
    settings = EpoxySettings(max_conversation_id=3)
    with trio.fail_after(10):
        async with trio.open_nursery() as inner:

            async def client() -> None:
                async with open_epoxy_connection("127.0.0.1", port, settings=settings) as connection:
                    assert (await connection.start_call(CALC, "Calculate", Params())).conversation_id == 1
                    assert await connection.send_event(CALC, "Calculate", Params()) == 3
                    with pytest.raises(ConversationIdsExhaustedError):
                        await connection.start_call(CALC, "Calculate", Params())
                    assert connection.ended

            inner.start_soon(client)
            raw = await accepted.receive()
            await raw.handshake_as_server()
            assert (await raw.protocol_error()).error_code == Code.CONVERSATION_IDS_EXHAUSTED


async def test_a_server_closing_gracefully_fails_pending_calls_with_closed(nursery: trio.Nursery) -> None:
    port, accepted = await raw_server(nursery)
    with trio.fail_after(10):
        async with trio.open_nursery() as inner:

            async def client() -> None:
                async with open_epoxy_connection("127.0.0.1", port) as connection:
                    pending = await connection.start_call(CALC, "Calculate", Params())
                    with pytest.raises(EpoxyClosed) as caught:
                        await pending.response()
                    assert caught.value.by_peer and not isinstance(caught.value, EpoxyConnectionLost)
                    with pytest.raises(EpoxyClosed):
                        await connection.start_call(CALC, "Calculate", Params())

            inner.start_soon(client)
            raw = await accepted.receive()
            await raw.handshake_as_server()
            await raw.receive()
            await raw.aclose()


async def test_responses_to_unknown_or_abandoned_calls_are_dropped(nursery: trio.Nursery) -> None:
    port, accepted = await raw_server(nursery)
    with trio.fail_after(10):
        async with trio.open_nursery() as inner:
            answered = trio.Event()

            async def client() -> None:
                async with open_epoxy_connection("127.0.0.1", port) as connection:
                    abandoned = await connection.start_call(CALC, "Calculate", Params())
                    abandoned.abandon()
                    kept = await connection.start_call(CALC, "Calculate", Params())
                    response = await kept.response()
                    assert response.conversation_id == 3 and response.decode(Result) == Result(z=3)
                    stats = connection.statistics()
                    assert stats.dropped_responses == 1 and stats.buffered_bytes == 0 and stats.pending_calls == 0
                    answered.set()

            inner.start_soon(client)
            raw = await accepted.receive()
            await raw.handshake_as_server()
            await raw.receive()
            await raw.receive()
            await raw.send(message(1, RESPONSE, Result(z=1)), message(7, RESPONSE, Result(z=7)), message(3, RESPONSE, Result(z=3)))
            await answered.wait()


# ---- protocol errors, server side ---------------------------------------------------


@service("test.Slow")
class Slow:
    """``Wait`` answers once the test releases the request's key (the request's ``x``)."""

    def __init__(self) -> None:
        self.gates: dict[int, trio.Event] = {}
        self.entered: list[int] = []

    def gate(self, key: int) -> trio.Event:
        return self.gates.setdefault(key, trio.Event())

    @method
    async def Wait(self, params: Params) -> Result:  # noqa: N802
        self.entered.append(params.x)
        await self.gate(params.x).wait()
        return Result(z=params.x)


@pytest.mark.parametrize(
    ("handshake", "frames", "code"),
    [
        (False, [Frame(framelets=(Framelet(type=FrameletType.EPOXY_CONFIG, content=b"\xff"),))], Code.CLIENT_BAD_HANDSHAKE),
        (False, [message(1, REQUEST, Params(), CALC, "Calculate")], Code.PROTOCOL_VIOLATED),  # before the config
        # The client must wait for the server's config before its first message.
        (False, [config_frame(), message(1, REQUEST, Params(), CALC, "Calculate")], Code.PROTOCOL_VIOLATED),
        (True, [config_frame()], Code.PROTOCOL_VIOLATED),
        (True, [message(2, REQUEST, Params(), CALC, "Calculate")], Code.BAD_CONVERSATION_ID),
        (True, [message(1, RESPONSE, Result())], Code.BAD_CONVERSATION_ID),
        (
            True,
            [message(1, REQUEST, Params(x=1), "test.Slow", "Wait"), message(1, REQUEST, Params(x=2), "test.Slow", "Wait")],
            Code.BAD_CONVERSATION_ID,
        ),
        (True, [message(n, REQUEST, Params(x=n), "test.Slow", "Wait") for n in range(1, 13, 2)], Code.LIMIT_EXCEEDED),
        (True, [message(1, EVENT, Error(error_code=1), CALC, "Calculate", is_error=True)], Code.PROTOCOL_VIOLATED),
        (True, [message_frame(headers(1, 0), b"CB\x01\x00\x00")], Code.NOT_SUPPORTED),
    ],
    ids=[
        "bad-config",
        "request-before-config",
        "request-before-the-servers-config",
        "second-config",
        "request-parity",
        "response-parity",
        "id-reused",
        "too-many-pending",
        "event-with-error-data",
        "message-type-0",
    ],
)
async def test_a_client_violation_gets_the_spec_s_error(
    nursery: trio.Nursery, handshake: bool, frames: list[Frame], code: int
) -> None:
    slow = Slow()
    settings = EpoxySettings(limits=EpoxyLimits(max_pending_requests=4))
    port = await start_server(nursery, services=[Calc(), slow], settings=settings)
    with trio.fail_after(10):
        raw = await RawEpoxy.connect(port)
        if handshake:
            await raw.handshake_as_client()
        await raw.send(b"".join(frame.encode() for frame in frames))  # one write: one read, often
        assert (await raw.protocol_error()).error_code == code
        assert await raw.receive() is None
        for gate in slow.gates.values():
            gate.set()


# ---- requests and events on one connection ----------------------------------------


async def test_several_requests_in_flight_are_answered_as_they_complete(nursery: trio.Nursery) -> None:
    slow = Slow()
    port = await start_server(nursery, services=[slow])
    with trio.fail_after(10):
        raw = await RawEpoxy.connect(port)
        await raw.handshake_as_client()
        await raw.send(*(message(n, REQUEST, Params(x=n), "test.Slow", "Wait") for n in (1, 3, 5)))
        for key in (5, 1, 3):
            slow.gate(key).set()
            frame = await raw.receive()
            assert frame is not None
            head, payload, is_error = decode_message(frame)
            assert (head.conversation_id, head.message_type, is_error) == (key, RESPONSE, False)
            assert head.service_name == head.method_name == ""  # responses carry no names, as Bond's C#
            assert bond.unmarshal(Result, payload) == Result(z=key)


async def test_requests_answered_at_once_are_bounded(nursery: trio.Nursery) -> None:
    slow = Slow()
    port = await start_server(nursery, services=[slow], max_concurrency=2)
    with trio.fail_after(10):
        raw = await RawEpoxy.connect(port)
        await raw.handshake_as_client()
        await raw.send(*(message(n, REQUEST, Params(x=n), "test.Slow", "Wait") for n in (1, 3, 5)))
        while len(slow.entered) < 2:
            await trio.sleep(0.01)
        await trio.testing.wait_all_tasks_blocked(0.05)
        assert slow.entered == [1, 3]  # the third waits for a slot, unread
        slow.gate(1).set()
        assert decode_message(await raw.receive())[0].conversation_id == 1  # type: ignore[arg-type]
        while len(slow.entered) < 3:
            await trio.sleep(0.01)
        slow.gate(3).set()
        slow.gate(5).set()
        ids = {decode_message(await raw.receive())[0].conversation_id for _ in range(2)}  # type: ignore[arg-type]
        assert ids == {3, 5}


async def test_a_client_that_closes_its_side_still_gets_its_answers(nursery: trio.Nursery) -> None:
    slow = Slow()
    port = await start_server(nursery, services=[slow])
    with trio.fail_after(10):
        raw = await RawEpoxy.connect(port)
        await raw.handshake_as_client()
        await raw.send(message(1, REQUEST, Params(x=1), "test.Slow", "Wait"))
        assert isinstance(raw.stream, trio.SocketStream)
        await raw.stream.send_eof()  # "gracefully closes its side", then waits
        while not slow.entered:
            await trio.sleep(0.01)
        slow.gate(1).set()
        [frame] = await raw.receive_until_eof()  # the answer, then the server closes too
        assert decode_message(frame)[0].conversation_id == 1


async def test_a_client_that_leaves_cancels_the_methods_answering_it(nursery: trio.Nursery) -> None:
    slow = Slow()
    cancelled = trio.Event()
    original = slow.gate

    def gate(key: int) -> trio.Event:
        return original(key) if key != 7 else _Forever(cancelled)  # type: ignore[return-value]

    slow.gate = gate  # type: ignore[method-assign]
    port = await start_server(nursery, services=[slow], settings=EpoxySettings(half_close_timeout=0.2))
    with trio.fail_after(10):
        async with open_epoxy_connection("127.0.0.1", port) as connection:
            await connection.start_call("test.Slow", "Wait", Params(x=7))
            while not slow.entered:
                await trio.sleep(0.01)
        left = trio.current_time()
        await cancelled.wait()  # not left running for a client that is gone
        assert trio.current_time() - left >= 0.2  # a half-closed client would have had its answer


class _Forever:
    """An event that is never set and says when its waiter was cancelled."""

    def __init__(self, cancelled: trio.Event) -> None:
        self.cancelled = cancelled

    async def wait(self) -> None:
        try:
            await trio.sleep_forever()
        finally:
            self.cancelled.set()


async def test_events_sent_just_before_closing_still_run(nursery: trio.Nursery) -> None:
    ran: list[int] = []

    @service("test.Log")
    class Log:
        @event
        async def Note(self, params: Params) -> None:  # noqa: N802
            await trio.sleep(0.01)  # slower than the close that follows
            ran.append(params.x)

    port = await start_server(nursery, services=[Log()])
    with trio.fail_after(10):
        async with open_epoxy_connection("127.0.0.1", port) as connection:
            for x in range(3):
                await connection.send_event("test.Log", "Note", Params(x=x))
        while len(ran) < 3:
            await trio.sleep(0.01)
    assert ran == [0, 1, 2]


async def test_unknown_services_and_methods_are_method_not_found(nursery: trio.Nursery) -> None:
    port = await start_server(nursery, services=[Calc()])
    with trio.fail_after(10):
        async with open_epoxy_connection("127.0.0.1", port) as connection:
            for service_name, method_name, text in [
                ("examples.calc.Nope", "Calculate", "no such service: 'examples.calc.Nope'"),
                (CALC, "Nope", "no such method: examples.calc.Calc.Nope"),
            ]:
                response = await connection.call_raw(service_name, method_name, Params())
                assert response.is_error
                error = response.decode_error()
                assert error.error_code == ErrorCode.METHOD_NOT_FOUND and error.message.startswith(text)
                assert ErrorCode.METHOD_NOT_FOUND == -1598226431  # 0xA0BD0001 as an int32


async def test_a_server_shutdown_closes_every_connection(nursery: trio.Nursery) -> None:
    slow = Slow()

    async def handler(connection: EpoxyConnection) -> None:
        from bridges.epoxy import serve_services

        await serve_services(connection, [slow])

    server = EpoxyServer(handler)
    [listener] = await nursery.start(partial(server.serve_tcp, "127.0.0.1", 0))
    with trio.fail_after(10):
        async with open_epoxy_connection("127.0.0.1", listener_port(listener)) as connection:
            pending = await connection.start_call("test.Slow", "Wait", Params(x=9))
            while not slow.entered:
                await trio.sleep(0.01)
            assert len(server.connections) == 1
            await server.aclose()
            with pytest.raises(EpoxyClosed) as caught:
                await pending.response()
            assert caught.value.by_peer


# ---- demand-paced reading (lockstep memory streams: nothing is buffered in between) ----


async def test_inbound_events_are_read_only_while_someone_takes_them() -> None:
    ours, theirs = trio.testing.lockstep_stream_pair()
    raw = RawEpoxy(theirs)
    settings = EpoxySettings(max_read_ahead=4096, receive_size=1024)
    payload = bond.marshal(Params(x=1)) + b""
    event_frame = message(1, EVENT, payload, "test", "Tick").encode()
    sent = 0
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:

            async def flood() -> None:
                nonlocal sent
                await raw.send(config_frame())
                await raw.receive()
                for conversation in range(1, 2001, 2):
                    await raw.send(message(conversation, EVENT, payload, "test", "Tick"))
                    sent += 1

            nursery.start_soon(flood)
            async with open_epoxy_stream(ours, role=Role.SERVER, settings=settings) as connection:
                await trio.testing.wait_all_tasks_blocked()
                # Nobody takes events: reading stopped within max_read_ahead.
                assert connection.bytes_received <= settings.max_read_ahead + settings.receive_size + 64
                assert not connection.statistics().reading
                stalled = sent
                await trio.testing.wait_all_tasks_blocked()
                assert sent == stalled
                taken = [await connection.receive_event() for _ in range(1000)]
                assert [event.conversation_id for event in taken] == list(range(1, 2001, 2))
                assert all(event.decode(Params) == Params(x=1) for event in taken)
                assert connection.buffered_bytes == 0
                assert connection.bytes_received == len(config_frame().encode()) + 1000 * len(event_frame)


async def test_a_memory_stream_has_no_addresses() -> None:
    ours, theirs = trio.testing.memory_stream_pair()
    seen: list[ConnectionInfo] = []
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(partial(_client_over, theirs))
            async with open_epoxy_stream(ours, role=Role.SERVER, accept=lambda info: seen.append(info) or True) as connection:
                request = await connection.receive_request()
                assert isinstance(request, Request) and request.method_name == "Calculate"
                await connection.respond(request, Result(z=1))
    assert seen[0].peer_address is None and seen[0].peer == "?" and seen[0].config is not None


async def _client_over(stream: trio.abc.Stream) -> None:
    async with open_epoxy_stream(stream) as connection:
        assert await connection.call(CALC, "Calculate", Params(), Result) == Result(z=1)


def test_settings_refuse_a_keepalive() -> None:
    with pytest.raises(ValueError, match="no ping"):
        EpoxySettings(keepalive_interval=1.0)
    with pytest.raises(ValueError):
        EpoxyConnection(trio.testing.memory_stream_pair()[0], Role.CLIENT, accept=lambda info: True)
    assert isinstance(ConfigReceived, type)
