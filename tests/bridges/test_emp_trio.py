"""The trio adapter: client against server over TCP and TLS, every way a connection ends.

Peers that misbehave are ``RawPeer``s (conftest) writing bytes by hand.
Timeouts run on trio's MockClock over memory streams, so they take no time
and cannot flake; everything else is bounded by ``trio.fail_after``.
"""

from __future__ import annotations

import ssl

import pytest
import trio
import trio.testing
import trustme
from conftest import connect_raw

import rstreams
from bridges.emp import (
    Bye,
    CompressionScheme,
    Data,
    EmpClosed,
    EmpConfig,
    EmpConnection,
    EmpConnectionLost,
    EmpServer,
    EmpTimeout,
    Error,
    ErrorCode,
    ExtensionErrorCode,
    Framing,
    Hello,
    Ping,
    Pong,
    PeerError,
    RemoteProtocolError,
    RequestResponse,
    UnknownExtension,
    UnsupportedVersionError,
    encode,
    open_emp_connection,
    open_emp_stream,
    serve_emp,
)

QUIET = EmpConfig(keepalive_interval=None)


async def echo(connection: EmpConnection) -> None:
    # Data comes back as data; requests are answered with the body reversed.
    async with trio.open_nursery() as nursery:

        async def answer() -> None:
            while True:
                request = await connection.receive_request()
                await connection.respond(request, request.body[::-1])

        nursery.start_soon(answer)
        async for body in connection:
            await connection.send_data(body)
        nursery.cancel_scope.cancel()


async def start_server(nursery: trio.Nursery, handler=echo, config: EmpConfig = QUIET, ssl_context=None) -> int:
    listeners = await nursery.start(lambda task_status: serve_emp(handler, "127.0.0.1", 0, ssl_context=ssl_context, config=config, task_status=task_status))
    return rstreams.listener_port(listeners[0])


@pytest.mark.parametrize("framing", list(Framing))
async def test_client_against_server_over_tcp(nursery: trio.Nursery, framing: Framing) -> None:
    config = EmpConfig(framing=framing, keepalive_interval=None)
    port = await start_server(nursery, config=config)
    with trio.fail_after(10):
        async with open_emp_connection("127.0.0.1", port, config=config) as emp:
            assert emp.peer_version == 1
            await emp.send_data(b"one")
            await emp.send_data(b"two" * 1000, compression=CompressionScheme.GZIP)
            assert await emp.receive_data() == b"one"
            assert await emp.receive_data() == b"two" * 1000
            assert await emp.call(b"abc") == b"cba"
            assert await emp.call(b"xyz", compression=CompressionScheme.GZIP) == b"zyx"
            assert await emp.ping() >= 0


async def test_tls(nursery: trio.Nursery) -> None:
    ca = trustme.CA()
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(server_context)
    client_context = ssl.create_default_context()
    ca.configure_trust(client_context)
    port = await start_server(nursery, ssl_context=server_context)
    with trio.fail_after(10):
        async with open_emp_connection("127.0.0.1", port, ssl_context=client_context, config=QUIET) as emp:
            assert await emp.call(b"secure") == b"eruces"


async def test_server_closes_every_connection_with_bye(nursery: trio.Nursery) -> None:
    server = EmpServer(echo, config=QUIET)
    listeners = await nursery.start(server.serve_tcp, "127.0.0.1", 0)
    with trio.fail_after(10):
        peer = await connect_raw(rstreams.listener_port(listeners[0]))
        await peer.send(Hello())
        assert await peer.receive() == Hello()
        while not server.connections:
            await trio.sleep(0.01)
        await server.aclose()
        assert await peer.receive_until_eof() == [Bye()]


async def test_bye_ends_inbound_data_normally_and_fails_pending_calls(raw_pair) -> None:
    ours, peer = raw_pair()
    with trio.fail_after(5):
        await peer.send(Hello(), Data(body=b"last words"))
        async with open_emp_stream(ours, config=QUIET) as emp:
            pending = await emp.start_call(b"q")
            await peer.send(Bye())
            assert [body async for body in emp] == [b"last words"]
            with pytest.raises(EmpClosed) as info:
                await pending.response()
            assert info.value.by_peer
            with pytest.raises(EmpClosed):
                await emp.send_data(b"too late")
        sent = await peer.receive_until_eof()
        assert sent[0] == Hello() and isinstance(sent[1], Data)
        assert Bye() not in sent  # nobody answers a bye


async def test_error_ends_everything_with_a_typed_error(raw_pair) -> None:
    ours, peer = raw_pair()
    with trio.fail_after(5):
        await peer.send(Hello())
        async with open_emp_stream(ours, config=QUIET) as emp:
            pending = await emp.start_call(b"q")
            await peer.send(Error(code=4, extension_id=1, extension_code=9, message="nope"))
            with pytest.raises(PeerError) as info:
                await emp.receive_data()
            assert (info.value.code, info.value.extension_id, info.value.extension_code, info.value.message) == (4, 1, 9, "nope")
            assert "extension 1 code 9: nope" in str(info.value)
            with pytest.raises(PeerError):
                await pending.response()


async def test_plain_close_is_a_lost_connection(raw_pair) -> None:
    ours, peer = raw_pair()
    with trio.fail_after(5):
        await peer.send(Hello(), Data(body=b"x"))
        async with open_emp_stream(ours, config=QUIET) as emp:
            await peer.stream.aclose()
            assert await emp.receive_data() == b"x"
            with pytest.raises(EmpConnectionLost):
                await emp.receive_data()


# ---- error paths: our side answers with the right error, then closes -----------

HELLO = encode(Hello())


def raw_block(extension_id: int, content: bytes, more: bool = False) -> bytes:
    return (8 + len(content)).to_bytes(4, "big") + bytes([extension_id, 0x80 if more else 0, 0, 0]) + content


def raw_data(blocks: bytes, body: bytes) -> bytes:
    header = bytes([5, 0x80 if blocks else 0, 0, 0])
    return (4 + len(header) + len(blocks) + len(body)).to_bytes(4, "big") + header + blocks + body


ERROR_CASES = {
    "bad version": (encode(Hello(version=2)), ErrorCode.PROTOCOL, 0, 0),
    "data before the handshake": (encode(Data(body=b"early")), ErrorCode.PROTOCOL, 0, 0),
    "unknown message type": (HELLO + bytes.fromhex("00000008 07000000"), ErrorCode.PROTOCOL, 0, 0),
    "unknown extension": (HELLO + raw_data(raw_block(9, b"??"), b"x"), ErrorCode.EXTENSION, 9, ExtensionErrorCode.UNSUPPORTED_EXTENSION),
    "bad gzip": (HELLO + raw_data(raw_block(1, bytes([1, 0, 0, 0])), b"not gzip"), ErrorCode.EXTENSION, 1, ExtensionErrorCode.BAD_COMPRESSED_BODY),
    "unknown response id": (HELLO + encode(Data(body=b"", extensions=(RequestResponse(request_id=42, is_request=False),))), ErrorCode.PROTOCOL, 0, 0),
    "oversize message": (HELLO + (2**20).to_bytes(4, "big") + bytes([5, 0, 0, 0]), ErrorCode.PROTOCOL, 0, 0),
}


@pytest.mark.parametrize("case", list(ERROR_CASES))
async def test_server_answers_violations_with_error_then_closes(nursery: trio.Nursery, case: str) -> None:
    wire, code, extension_id, extension_code = ERROR_CASES[case]
    config = EmpConfig(keepalive_interval=None, limits=rstreams_limits())
    handled: list[BaseException] = []

    async def handler(connection: EmpConnection) -> None:
        try:
            await connection.receive_data()
        except BaseException as exc:
            handled.append(exc)
            raise

    port = await start_server(nursery, handler, config=config)
    with trio.fail_after(10):
        peer = await connect_raw(port)
        await peer.send(wire)
        messages = await peer.receive_until_eof()
    assert messages[0] == Hello()
    assert len(messages) == 2, messages
    error = messages[1]
    assert isinstance(error, Error)
    assert (error.code, error.extension_id, error.extension_code) == (code, extension_id, extension_code), error


def rstreams_limits():
    from bridges.emp import EmpLimits

    return EmpLimits(max_message_size=64 * 1024)


@pytest.mark.parametrize("case", ["bad version", "unknown message type", "bad gzip", "unknown response id"])
async def test_client_raises_the_violation_and_tells_the_peer(raw_pair, case: str) -> None:
    wire, code, extension_id, extension_code = ERROR_CASES[case]
    ours, peer = raw_pair()
    with trio.fail_after(5):
        await peer.send(wire)
        with pytest.raises(RemoteProtocolError) as info:
            async with open_emp_stream(ours, config=QUIET) as emp:
                await emp.receive_data()
        assert info.value.code == code
        if case == "bad version":
            assert isinstance(info.value, UnsupportedVersionError)
        messages = await peer.receive_until_eof()
        assert isinstance(messages[-1], Error) and messages[-1].code == code


async def test_unknown_extension_on_hello_is_refused(raw_pair) -> None:
    ours, peer = raw_pair()
    with trio.fail_after(5):
        await peer.send(encode(Hello(extensions=(UnknownExtension(extension_id=3, content=b"x"),))))
        with pytest.raises(RemoteProtocolError) as info:
            async with open_emp_stream(ours, config=QUIET):
                pass
        assert info.value.code == ErrorCode.EXTENSION


# ---- timers (MockClock) ------------------------------------------------------------


async def test_ping_timeout_sends_error_2_and_closes(raw_pair, autojump_clock: trio.testing.MockClock) -> None:
    ours, peer = raw_pair()
    config = EmpConfig(keepalive_interval=5, ping_timeout=3)
    with trio.fail_after(60):
        await peer.send(Hello())
        async with open_emp_stream(ours, config=config) as emp:
            start = trio.current_time()
            assert await peer.receive() == Hello()
            assert await peer.receive() == Ping()
            assert trio.current_time() - start == pytest.approx(5)
            with pytest.raises(EmpTimeout):
                await emp.receive_data()
            assert trio.current_time() - start == pytest.approx(8)
        error = await peer.receive()
        assert isinstance(error, Error) and error.code == ErrorCode.TIMEOUT
        assert await peer.receive() is None


async def test_keepalive_goes_on_while_pongs_arrive(raw_pair, autojump_clock: trio.testing.MockClock) -> None:
    ours, peer = raw_pair()
    config = EmpConfig(keepalive_interval=5, ping_timeout=3)
    with trio.fail_after(120):
        await peer.send(Hello())
        async with open_emp_stream(ours, config=config) as emp:
            assert await peer.receive() == Hello()
            for _ in range(4):
                assert await peer.receive() == Ping()
                await trio.sleep(2)
                await peer.send(Pong())
            assert not emp.ended
        assert await peer.receive_until_eof() == [Bye()]


async def test_pings_are_answered_and_one_ping_at_a_time(raw_pair, autojump_clock: trio.testing.MockClock) -> None:
    ours, peer = raw_pair()
    with trio.fail_after(60):
        await peer.send(Hello(), Ping())
        async with open_emp_stream(ours, config=QUIET) as emp:
            assert await peer.receive() == Hello()
            assert await peer.receive() == Pong()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(emp.ping)
                nursery.start_soon(emp.ping)  # joins the outstanding ping
                assert await peer.receive() == Ping()
                await trio.sleep(1)
                await peer.send(Pong())
        assert await peer.receive_until_eof() == [Bye()]


async def test_handshake_timeout(raw_pair, autojump_clock: trio.testing.MockClock) -> None:
    ours, peer = raw_pair()
    with trio.fail_after(60):
        with pytest.raises(EmpTimeout):
            async with open_emp_stream(ours, config=EmpConfig(handshake_timeout=4)):
                pass
        assert trio.current_time() == pytest.approx(4)
        messages = await peer.receive_until_eof()
        assert messages[0] == Hello()
        assert isinstance(messages[1], Error) and messages[1].code == ErrorCode.TIMEOUT


async def test_bye_or_error_instead_of_hello(raw_pair) -> None:
    for first, expected in ((Bye(), EmpClosed), (Error(code=0, message="busy"), PeerError)):
        ours, peer = raw_pair()
        with trio.fail_after(5):
            await peer.send(first)
            with pytest.raises(expected):
                async with open_emp_stream(ours, config=QUIET):
                    pass


# ---- back-pressure ----------------------------------------------------------------


async def test_reads_only_on_demand_so_the_sender_blocks(raw_pair) -> None:
    # Lockstep streams have no buffer at all: the sender's send_all returns
    # only once our reader took the bytes. So what the sender managed to send
    # is exactly what we chose to read.
    ours, peer = raw_pair(lockstep=True)
    config = EmpConfig(keepalive_interval=None, receive_size=4096, max_read_ahead=0)
    sent = 0

    async def flood() -> None:
        nonlocal sent
        for _ in range(1000):
            await peer.send(Data(body=bytes(1000)))
            sent += 1

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            async def hello_then_flood() -> None:
                await peer.send(Hello())
                await flood()

            nursery.start_soon(hello_then_flood)
            nursery.start_soon(peer.receive_until_eof)  # takes our hello
            async with open_emp_stream(ours, config=config) as emp:
                for _ in range(3):
                    await emp.receive_data()
                await trio.testing.wait_all_tasks_blocked()
                assert not emp.statistics().reading
                assert sent <= 3 + 4096 // 1000 + 2, sent
                before = sent
                await trio.testing.wait_all_tasks_blocked()
                assert sent == before  # nobody asks, nobody reads, the sender waits
                for _ in range(10):
                    await emp.receive_data()
                await trio.testing.wait_all_tasks_blocked()
                assert 13 <= sent <= 13 + 4096 // 1000 + 2
                nursery.cancel_scope.cancel()


async def test_pong_clock_stops_while_our_read_ahead_bound_holds_us_back(raw_pair, autojump_clock: trio.testing.MockClock) -> None:
    # The peer answers every ping at once, but its pong sits behind data we
    # refuse to read (the read-ahead bound): that is not a timeout.
    ours, peer = raw_pair()
    config = EmpConfig(keepalive_interval=5, ping_timeout=3, receive_size=1024, max_read_ahead=1)
    with trio.fail_after(300):
        await peer.send(Hello(), *(Data(body=bytes(500)) for _ in range(20)))
        async with open_emp_stream(ours, config=config) as emp:
            assert await emp.receive_data() == bytes(500)  # one read: two bodies held
            assert await peer.receive() == Hello()
            assert await peer.receive() == Ping()
            await peer.send(Pong())  # queued behind 18 data messages
            await trio.sleep(100)
            assert not emp.ended and not emp.statistics().reading
            for _ in range(19):
                assert await emp.receive_data() == bytes(500)
            await trio.sleep(4)  # the next ping, answered by the pong above
            assert not emp.ended


async def test_connections_beyond_the_limit_get_hello_then_error(nursery: trio.Nursery) -> None:
    server = EmpServer(echo, config=QUIET, max_connections=1)
    listeners = await nursery.start(server.serve_tcp, "127.0.0.1", 0)
    port = rstreams.listener_port(listeners[0])
    with trio.fail_after(10):
        async with open_emp_connection("127.0.0.1", port, config=QUIET) as first:
            assert await first.call(b"12") == b"21"
            second = await connect_raw(port)
            messages = await second.receive_until_eof()
            assert messages[0] == Hello()
            assert messages[1] == Error(code=ErrorCode.UNSPECIFIED, message="server busy")


async def test_tls_client_against_a_plain_server_fails_cleanly(nursery: trio.Nursery) -> None:
    port = await start_server(nursery)
    with trio.fail_after(10):
        with pytest.raises(EmpConnectionLost):
            async with open_emp_connection("127.0.0.1", port, ssl_context=ssl.create_default_context(), config=QUIET):
                pass


async def test_connect_emp_runs_in_the_callers_nursery(nursery: trio.Nursery) -> None:
    from bridges.emp import connect_emp

    port = await start_server(nursery)
    with trio.fail_after(10):
        async with trio.open_nursery() as mine:
            emp = await connect_emp(mine, "127.0.0.1", port, config=QUIET)
            assert await emp.call(b"ab") == b"ba"
            await emp.aclose()
        assert emp.ended


async def test_the_peers_last_error_wins_over_a_failed_write(nursery: trio.Nursery) -> None:
    # A peer that sends error and closes at once, with our bytes unread (so
    # its kernel resets the connection): we still report its error.
    async def abrupt(server_stream: trio.SocketStream) -> None:
        await server_stream.send_all(encode(Hello()))
        await server_stream.receive_some(100)  # our hello, and then some
        await server_stream.send_all(encode(Error(code=3, message="go away")))
        await server_stream.aclose()

    listeners = await nursery.start(trio.serve_tcp, abrupt, 0)
    port = rstreams.listener_port(listeners[0])
    with trio.fail_after(10):
        with pytest.raises(PeerError, match="go away"):
            async with open_emp_connection("127.0.0.1", port, config=QUIET) as emp:
                for _ in range(1000):
                    await emp.send_data(bytes(10000))
