"""The MicroMsg2 trio adapter over real sockets: TCP and TLS, both roles, and every way it ends."""

from __future__ import annotations

import ssl
from functools import partial

import pytest
import trio
import trustme
from micromsg2_raw import PUBSUB, RawClient

import rstreams
from bridges.micromsg2 import (
    Decoder,
    ErrorFrame,
    ExtensionSpec,
    Handshake,
    HandshakeCompleted,
    LocalProtocolError,
    MicroMsg2AppServer,
    MicroMsg2Closed,
    MicroMsg2Connection,
    MicroMsg2Server,
    MicroMsg2Settings,
    PeerError,
    Subscribe,
    Unsubscribe,
    UnsupportedExtensionError,
    connect_micromsg2,
    encode_handshake,
    open_micromsg2_connection,
)
from rstreams.support import listener_port

CLIENT = MicroMsg2Settings(required=(PUBSUB,), optional=(ExtensionSpec.batch_ack(4),))


async def start(nursery: trio.Nursery, server: MicroMsg2Server, ssl_context: ssl.SSLContext | None = None) -> int:
    [listener] = await nursery.start(partial(server.serve_tcp, "127.0.0.1", 0, ssl_context))
    return listener_port(listener)


async def read_error(stream: trio.abc.Stream) -> str:
    """Read until the peer closes; the message of the ERROR frame it sent where a handshake was due."""
    data = bytearray()
    while chunk := await stream.receive_some(65536):
        data.extend(chunk)
    decoder = Decoder()
    decoder.feed(bytes(data))
    item = decoder.next_handshake()
    assert isinstance(item, ErrorFrame), item
    return item.error.get("message") or ""


async def test_tls(nursery: trio.Nursery) -> None:
    ca = trustme.CA()
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(server_context)
    client_context = ssl.create_default_context()
    ca.configure_trust(client_context)
    app = rstreams.Router()

    @app.publisher("secret")
    async def secret(sink: rstreams.Sink, request: rstreams.SubscribeRequest) -> None:
        await sink.send(b"s3cr3t")

    port = await start(nursery, MicroMsg2AppServer(app), server_context)
    with trio.fail_after(10):
        async with open_micromsg2_connection("127.0.0.1", port, ssl_context=client_context, settings=CLIENT) as mm2:
            assert isinstance(mm2.stream, trio.SSLStream)
            stream = await mm2.subscribe("secret")
            assert [message.payload async for message in stream] == [b"s3cr3t"]


async def test_a_handler_sees_commands_and_sends(nursery: trio.Nursery) -> None:
    # A server of our own on the adapter: it echoes each SEND back as a
    # MESSAGE to the subscribed destination, then completes it.
    seen: list[object] = []
    finished = trio.Event()

    async def handler(connection: MicroMsg2Connection) -> None:
        command = await connection.receive_command()
        assert isinstance(command, Subscribe)
        seen.append(command)
        message = await connection.receive_send()
        connection.acknowledge()
        await connection.send_message(command.destination, message.payload.upper(), properties=message.properties)
        await connection.complete(command.destination)
        seen.append(await connection.receive_command())
        seen.append(await connection.receive_command())
        with pytest.raises(trio.EndOfChannel):
            await connection.receive_command()
        seen.append("closed")
        finished.set()

    settings = MicroMsg2Settings(optional=(ExtensionSpec.batch_ack(8), ExtensionSpec(name="pubsub")))
    port = await start(nursery, MicroMsg2Server(handler, settings=settings))
    with trio.fail_after(10):
        async with trio.open_nursery() as own:
            mm2 = await connect_micromsg2(own, "127.0.0.1", port, settings=CLIENT)
            assert mm2.peer_identity == "rstreams" and mm2.window == 4  # the smaller count wins
            echo = await mm2.subscribe("echo", "n>N1")
            await mm2.send_message("echo", b"shout", properties={"n": 2})
            await mm2.wait_acknowledged()
            message = await echo.receive()
            assert (message.payload, dict(message.properties)) == (b"SHOUT", {"n": 2})
            with pytest.raises(trio.EndOfChannel):
                await echo.receive()
            gate = await mm2.subscribe("other")
            gate.unsubscribe()
            await mm2.aclose()
        await finished.wait()
    assert seen[1:] == [Subscribe(destination="other"), Unsubscribe(destination="other"), "closed"]


async def test_a_busy_server_refuses_with_an_error_frame(nursery: trio.Nursery) -> None:
    held = trio.Event()

    async def hold(connection: MicroMsg2Connection) -> None:
        await held.wait()

    port = await start(nursery, MicroMsg2Server(hold, max_connections=1))
    with trio.fail_after(10):
        async with open_micromsg2_connection("127.0.0.1", port, settings=CLIENT):
            with pytest.raises(PeerError) as caught:
                async with open_micromsg2_connection("127.0.0.1", port, settings=CLIENT):
                    pass  # pragma: no cover
            assert caught.value.message == "server busy"
            held.set()


async def test_an_unknown_required_extension_is_refused_with_an_error_frame(nursery: trio.Nursery) -> None:
    port = await start(nursery, MicroMsg2AppServer(rstreams.Router()))
    with trio.fail_after(10):
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        await stream.send_all(encode_handshake(Handshake(identity="hulk", required=(ExtensionSpec(name="x-magic"),))))
        assert "x-magic" in await read_error(stream)


async def test_an_older_major_version_is_refused_with_an_error_frame(nursery: trio.Nursery) -> None:
    port = await start(nursery, MicroMsg2AppServer(rstreams.Router()))
    with trio.fail_after(10):
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        await stream.send_all(bytes([0, 9, 0, 0, 0, 0, 0, 0]))
        assert "version 0.9 is not supported" in await read_error(stream)


async def test_a_client_is_refused_by_a_server_that_requires_what_it_lacks(nursery: trio.Nursery) -> None:
    # Our client refuses too: it does not implement what the server requires.
    async def fake_server(stream: trio.SocketStream) -> None:
        await stream.receive_some(65536)
        reply = Handshake(identity="odd", required=(ExtensionSpec(name="x-odd"),))
        await stream.send_all(encode_handshake(reply))
        assert "x-odd" in await read_error(stream)

    [listener] = await nursery.start(partial(trio.serve_tcp, fake_server, 0, host="127.0.0.1"))
    with trio.fail_after(10):
        with pytest.raises(UnsupportedExtensionError):
            async with open_micromsg2_connection("127.0.0.1", listener_port(listener), settings=CLIENT):
                pass  # pragma: no cover


async def test_a_silent_client_times_out_with_an_error_frame(nursery: trio.Nursery) -> None:
    settings = MicroMsg2Settings(identity="rstreams", handshake_timeout=0.2)
    port = await start(nursery, MicroMsg2Server(lambda connection: trio.sleep(0), settings=settings))
    with trio.fail_after(10):
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        assert await read_error(stream) == "no handshake within 0.2 s"


async def test_a_peer_s_connection_error_ends_everything_with_peer_error(nursery: trio.Nursery) -> None:
    async def leave(connection: MicroMsg2Connection) -> None:
        await connection.receive_command()
        await connection.send_error("going away")

    settings = MicroMsg2Settings(optional=(ExtensionSpec(name="pubsub"),))
    port = await start(nursery, MicroMsg2Server(leave, settings=settings))
    with trio.fail_after(10):
        async with open_micromsg2_connection("127.0.0.1", port, settings=CLIENT) as mm2:
            stream = await mm2.subscribe("anything")
            with pytest.raises(PeerError) as caught:
                await stream.receive()
            assert caught.value.message == "going away"


async def test_a_protocol_violation_is_answered_with_an_error_frame_and_a_close(nursery: trio.Nursery) -> None:
    port = await start(nursery, MicroMsg2AppServer(rstreams.Router()))
    with trio.fail_after(10):
        client = await RawClient.connect(port)
        assert isinstance(await client.next_event(), HandshakeCompleted)
        await client.stream.send_all(b"\x40\x00")  # a flag bit above 16
        data = bytearray()
        while chunk := await client.stream.receive_some(65536):
            data.extend(chunk)
        assert data[0] == 0x04 and b"error;message=" in data


async def test_a_server_that_closes_ends_open_streams_with_closed(nursery: trio.Nursery) -> None:
    async def close_after_subscribe(connection: MicroMsg2Connection) -> None:
        await connection.receive_command()

    settings = MicroMsg2Settings(optional=(ExtensionSpec(name="pubsub"),))
    port = await start(nursery, MicroMsg2Server(close_after_subscribe, settings=settings))
    with trio.fail_after(10):
        async with open_micromsg2_connection("127.0.0.1", port, settings=CLIENT) as mm2:
            stream = await mm2.subscribe("anything")
            with pytest.raises(MicroMsg2Closed) as caught:
                await stream.receive()
            assert caught.value.by_peer


async def test_without_acks_sending_does_not_wait_for_any(nursery: trio.Nursery) -> None:
    received: list[bytes] = []
    done = trio.Event()

    async def collect(connection: MicroMsg2Connection) -> None:
        for _ in range(50):
            received.append((await connection.receive_send()).payload)
            connection.acknowledge()
        done.set()

    port = await start(nursery, MicroMsg2Server(collect))
    with trio.fail_after(10):
        async with open_micromsg2_connection("127.0.0.1", port) as mm2:
            assert mm2.window is None
            for n in range(50):
                await mm2.send_message("q", str(n).encode())
            await mm2.wait_acknowledged()
            await done.wait()
    assert received == [str(n).encode() for n in range(50)]


async def test_without_acks_a_stream_nobody_reads_pauses_the_reader_below_the_limit(nursery: trio.Nursery) -> None:
    # No acks: the server pushes 3000 messages to each of two destinations,
    # interleaved. The client reads "fast" to completion and never takes
    # from "slow": the reader pauses before one more read could carry the
    # pending messages past max_pending_messages (so our side never blames
    # the peer for what we did not read), and dropping "slow" frees it.
    async def push(connection: MicroMsg2Connection) -> None:
        destinations = [await connection.receive_command(), await connection.receive_command()]
        for n in range(3000):
            for command in destinations:
                await connection.send_message(command.destination, b"%d" % n)
        for command in destinations:
            if connection.is_subscribed(command.destination):
                await connection.complete(command.destination)
        with pytest.raises(trio.EndOfChannel):
            while True:
                await connection.receive_command()

    server_settings = MicroMsg2Settings(optional=(ExtensionSpec(name="pubsub"),))
    port = await start(nursery, MicroMsg2Server(push, settings=server_settings))
    client_settings = MicroMsg2Settings(required=(PUBSUB,))
    with trio.fail_after(20):
        async with open_micromsg2_connection("127.0.0.1", port, settings=client_settings) as mm2:
            assert mm2.window is None
            fast = await mm2.subscribe("fast")
            slow = await mm2.subscribe("slow")
            got: list[bytes] = []

            async def read_fast() -> None:
                got.extend([message.payload async for message in fast])

            async with trio.open_nursery() as readers:
                readers.start_soon(read_fast)
                while not mm2.ended:  # until the pending messages stop the reader
                    stats = mm2.statistics()
                    starving = len(fast._queue) == 0  # "fast" waits, with nothing held for it
                    if starving and not stats.reading and stats.pending_messages >= 440:
                        break
                    await trio.sleep(0.01)
                assert not mm2.ended, mm2.end_reason
                assert stats.pending_messages <= 1024
                slow.unsubscribe()
            assert got == [b"%d" % n for n in range(3000)]


async def test_closing_our_side_ends_open_streams_with_closed_by_us(nursery: trio.Nursery) -> None:
    async def wait(connection: MicroMsg2Connection) -> None:
        await connection.receive_command()
        with pytest.raises(trio.EndOfChannel):
            await connection.receive_command()

    settings = MicroMsg2Settings(optional=(ExtensionSpec(name="pubsub"),))
    port = await start(nursery, MicroMsg2Server(wait, settings=settings))
    with trio.fail_after(10):
        async with open_micromsg2_connection("127.0.0.1", port, settings=CLIENT) as mm2:
            stream = await mm2.subscribe("anything")
            await mm2.aclose()
            with pytest.raises(MicroMsg2Closed) as caught:
                await stream.receive()
            assert not caught.value.by_peer


async def test_a_batch_is_taken_in_one_step_with_one_ack(nursery: trio.Nursery) -> None:
    # The server sends ten messages in one step (send_messages, window 16),
    # then completes. The client's one read brings them: receive_batch(4)
    # takes four, receive_batch(100) the other six and not the end behind
    # them, and each take is one ack frame (5 bytes at the server), where a
    # take per message would be ten.
    server_side: list[MicroMsg2Connection] = []
    baseline: list[int] = []
    acknowledged = trio.Event()

    async def push(connection: MicroMsg2Connection) -> None:
        server_side.append(connection)
        command = await connection.receive_command()
        baseline.append(connection.bytes_received)
        await connection.send_messages(command.destination, [(b"%d" % n, {"n": n}) for n in range(10)])
        await connection.complete(command.destination)
        await connection.wait_acknowledged()
        acknowledged.set()
        with pytest.raises(trio.EndOfChannel):
            await connection.receive_command()

    settings = MicroMsg2Settings(optional=(ExtensionSpec.batch_ack(16), ExtensionSpec(name="pubsub")))
    port = await start(nursery, MicroMsg2Server(push, settings=settings))
    client = MicroMsg2Settings(required=(PUBSUB,), optional=(ExtensionSpec.batch_ack(16),))
    with trio.fail_after(10):
        async with open_micromsg2_connection("127.0.0.1", port, settings=client) as mm2:
            assert mm2.window == 16
            stream = await mm2.subscribe("d")
            with pytest.raises(ValueError):
                await stream.receive_batch(0)
            first = await stream.receive_batch(4)
            assert [(m.payload, dict(m.properties)) for m in first] == [(b"%d" % n, {"n": n}) for n in range(4)]
            while server_side[0].unacknowledged != 6:
                await trio.sleep(0.005)
            rest = await stream.receive_batch(100)
            assert [m.payload for m in rest] == [b"%d" % n for n in range(4, 10)]
            await acknowledged.wait()
            assert server_side[0].bytes_received - baseline[0] == 2 * 5  # two ack frames
            with pytest.raises(trio.EndOfChannel):
                await stream.receive_batch(100)


async def test_send_messages_goes_out_within_the_window_and_hands_over_its_prepaid_bytes(nursery: trio.Nursery) -> None:
    # Twenty messages through a window of 4 to a client taking one at a
    # time: all arrive, in order (the client's machine refuses a server past
    # the window). Then a batch whose third message has a bad property: the
    # two before it go out and LocalProtocolError is raised. The bytes the
    # server prepaid for both batches are all back in the budget.
    budgets: list[tuple[int, int]] = []

    async def push(connection: MicroMsg2Connection) -> None:
        command = await connection.receive_command()
        used = connection.budget.used
        connection.budget.take_nowait(40)
        await connection.send_messages(command.destination, [(b"%02d" % n, ()) for n in range(20)], prepaid=[2] * 20)
        bad = [(b"a", ()), (b"b", ()), (b"c", (("k", 1), ("k", 2))), (b"d", ())]
        connection.budget.take_nowait(4)
        with pytest.raises(LocalProtocolError):
            await connection.send_messages(command.destination, bad, prepaid=[1] * 4)
        with pytest.raises(ValueError):
            await connection.send_messages(command.destination, [(b"e", ())], prepaid=[1, 1])
        await connection.complete(command.destination)
        await connection.wait_acknowledged()
        budgets.append((used, connection.budget.used))
        with pytest.raises(trio.EndOfChannel):
            await connection.receive_command()

    settings = MicroMsg2Settings(optional=(ExtensionSpec.batch_ack(4), ExtensionSpec(name="pubsub")))
    port = await start(nursery, MicroMsg2Server(push, settings=settings))
    with trio.fail_after(10):
        async with open_micromsg2_connection("127.0.0.1", port, settings=CLIENT) as mm2:
            assert mm2.window == 4
            stream = await mm2.subscribe("d")
            assert [message.payload async for message in stream] == [b"%02d" % n for n in range(20)] + [b"a", b"b"]
            while not budgets:
                await trio.sleep(0.005)
    [(before, after)] = budgets
    assert after == before
