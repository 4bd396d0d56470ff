"""WebSocket specifics, checked from the outside with trio-websocket as the raw peer.

The whole session suite already runs over ``ws`` and ``wss`` (see conftest);
these tests pin what only WebSocket has: the subprotocol, binary messages
that each hold whole protocol messages within 256 KiB, text messages and
oversized messages as protocol errors, pings, origins, and shutdown.
"""

from __future__ import annotations

import functools
import ssl
import struct
from collections.abc import AsyncIterator, Callable, Generator
from contextlib import asynccontextmanager
from unittest import mock

import msgpack
import pytest
import trio
import trio.testing
import trio_websocket
from hypothesis import given, settings
from hypothesis import strategies as st
from wsproto import ConnectionType, WSConnection
from wsproto.events import AcceptConnection, BytesMessage, CloseConnection, Event, Ping, Pong, TextMessage
from wsproto.events import Request as WebSocketRequest

import rstreams
from rstreams._http import REQUEST_HEAD_TIMEOUT
from rstreams.support import HANDSHAKE_GRACE
from rstreams import _websocket
from rstreams._websocket import (
    MAX_EVENTS_PER_STEP,
    MAX_OUTGOING_MESSAGE,
    SUBPROTOCOL,
    WebSocketStream,
    open_websocket_client,
    split_whole_messages,
    websocket_config,
)
from rstreams.protocol import Goodbye, Hello, MessageDecoder, OnComplete, OnError, Subscribe, Subscribed, encode

from ._support import RawPeer, blob, fetch_range, from_u32, new_session, standard_app, wait_for

KiB = 1024
MiB = 1024 * KiB
UNBOUNDED = 2**63 - 1
TIMEOUT = 20


class WebSocketPeerStream(trio.abc.Stream):
    """A trio-websocket client connection seen as a stream, recording every message.

    ``send_all`` sends one binary message; ``receive_some`` returns one
    message's payload. ``received`` keeps each message as it came.
    """

    def __init__(self, connection: trio_websocket.WebSocketConnection) -> None:
        self.connection = connection
        self.received: list[bytes | str] = []

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await self.connection.send_message(bytes(data))

    async def wait_send_all_might_not_block(self) -> None:
        await trio.lowlevel.checkpoint()

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        try:
            message = await self.connection.get_message()
        except trio_websocket.ConnectionClosed:
            return b""
        self.received.append(message)
        assert isinstance(message, bytes), f"a text message from the server: {message!r}"
        return message

    async def aclose(self) -> None:
        await self.connection.aclose()


@asynccontextmanager
async def serving(
    app: rstreams.Router | None = None,
    ssl_context: ssl.SSLContext | None = None,
    **options: object,
) -> AsyncIterator[tuple[rstreams.Server, int]]:
    server = rstreams.Server(app or standard_app(), max_connections=options.pop("max_connections", None))  # type: ignore[arg-type]
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(lambda task_status: server.serve_websocket("127.0.0.1", 0, ssl_context, task_status=task_status, **options))
        yield server, rstreams.listener_port(listeners[0])
        nursery.cancel_scope.cancel()


@asynccontextmanager
async def raw_client(port: int, *, scheme: str = "ws", **options: object) -> AsyncIterator[tuple[RawPeer, WebSocketPeerStream]]:
    options.setdefault("max_message_size", 64 * MiB)
    async with trio_websocket.open_websocket_url(f"{scheme}://127.0.0.1:{port}/", **options) as connection:  # type: ignore[arg-type]
        stream = WebSocketPeerStream(connection)
        yield RawPeer(stream), stream


def whole_messages(payload: bytes) -> list[object]:
    """The protocol messages in one WebSocket message; fails if one is cut."""
    unpacker = msgpack.Unpacker(max_buffer_size=len(payload) + 1)
    unpacker.feed(payload)
    messages = list(unpacker)
    assert unpacker.tell() == len(payload), "a protocol message spans two WebSocket messages"
    return messages


# ---- subprotocol -------------------------------------------------------------


async def test_subprotocol_selected_when_offered() -> None:
    with trio.fail_after(TIMEOUT):
        async with serving() as (server, port):
            async with raw_client(port, subprotocols=["other", SUBPROTOCOL]) as (peer, stream):
                assert stream.connection.subprotocol == SUBPROTOCOL
                await peer.handshake()
                await peer.send(Goodbye(reason="bye"))
                await peer.receive_until(Goodbye)


@pytest.mark.parametrize("offered", [None, ["something.else"]])
async def test_clients_offering_no_rstreams_subprotocol_are_served(offered: list[str] | None) -> None:
    with trio.fail_after(TIMEOUT):
        async with serving() as (server, port):
            async with raw_client(port, subprotocols=offered) as (peer, stream):
                assert stream.connection.subprotocol is None
                await peer.handshake()
                await peer.send(Subscribe(publisher="range?count=3", subscriber=1, initial_demand=10))
                await peer.expect(Subscribed)
                messages = await peer.receive_until(OnComplete)
                assert [from_u32(m.element) for m in messages[:-1]] == [0, 1, 2]  # type: ignore[attr-defined]
                await peer.send(Goodbye(reason="bye"))
                await peer.receive_until(Goodbye)


async def test_the_python_client_offers_the_subprotocol() -> None:
    with trio.fail_after(TIMEOUT):
        async with serving() as (server, port):
            async with rstreams.open_session(f"ws://127.0.0.1:{port}/") as client:
                assert client._stream.subprotocol == SUBPROTOCOL  # type: ignore[attr-defined]
                session = await new_session(server)
                assert session._stream.subprotocol == SUBPROTOCOL  # type: ignore[attr-defined]
                await fetch_range(client, 10)


# ---- text messages and sizes -------------------------------------------------


async def test_a_text_message_is_a_protocol_error_for_that_connection_only() -> None:
    with trio.fail_after(TIMEOUT):
        async with serving() as (server, port):
            async with rstreams.open_session(f"ws://127.0.0.1:{port}/") as bystander:
                async with raw_client(port, subprotocols=[SUBPROTOCOL]) as (peer, stream):
                    await peer.handshake()
                    await stream.connection.send_message("[0, 0, []]")
                    messages = await peer.rest()
                    assert isinstance(messages[-1], Goodbye)
                    assert messages[-1].reason.startswith("protocol error: text WebSocket message")
                    closed = stream.connection.closed
                    assert closed is not None and closed.code == 1003
                await fetch_range(bystander, 100)
                async with rstreams.open_session(f"ws://127.0.0.1:{port}/") as newcomer:
                    await fetch_range(newcomer, 10)


# What RFC 6455 forbids, as the first frame after the upgrade (masked where
# a client's frame must be, so that only the named fault is at fault).
_MASK = bytes(4)
_BROKEN_FRAMES = {
    "unmasked": (b"\x82\x01\x00", 1002, "unmasked"),
    "reserved opcode": (b"\x83\x80" + _MASK, 1002, "opcode"),
    "control frame over 125 bytes": (b"\x89\xfe\x00\x7e" + _MASK + bytes(126), 1002, "125"),
    "non-minimal length": (b"\x82\xfe\x00\x05" + _MASK + bytes(5), 1002, "sufficed"),
}


@pytest.mark.parametrize("fault", sorted(_BROKEN_FRAMES))
async def test_a_frame_that_breaks_rfc_6455_is_a_protocol_error_said_as_such(fault: str) -> None:
    # wsproto reports a framing error as a close event of its own, the
    # connection still open; it was taken for the peer's close: no goodbye,
    # often no close frame, and a log line blaming the peer for leaving.
    frame, code, words = _BROKEN_FRAMES[fault]
    with trio.fail_after(TIMEOUT):
        async with serving() as (server, port):
            stream = await trio.open_tcp_stream("127.0.0.1", port)
            client = WSConnection(ConnectionType.CLIENT)
            await stream.send_all(client.send(WebSocketRequest(host=f"127.0.0.1:{port}", target="/", subprotocols=[SUBPROTOCOL])))
            pending: list[object] = []
            while not any(isinstance(event, AcceptConnection) for event in pending):
                client.receive_data(await stream.receive_some(65536))
                pending += client.events()
            await stream.send_all(client.send(BytesMessage(data=encode(Hello()))))
            await stream.send_all(frame)
            payload = bytearray()
            closed: CloseConnection | None = None
            while closed is None:
                data = await stream.receive_some(65536)
                assert data, "closed without a close frame"
                client.receive_data(data)
                for event in client.events():
                    if isinstance(event, BytesMessage):
                        payload += event.data
                    elif isinstance(event, CloseConnection):
                        closed = event
            decoder = MessageDecoder()
            decoder.feed(bytes(payload))
            messages = list(decoder)
            assert isinstance(messages[-1], Goodbye), messages
            assert messages[-1].reason.startswith("protocol error: WebSocket framing error:"), messages[-1]
            assert words in messages[-1].reason
            assert closed.code == code
            await stream.aclose()


async def batch_publisher(sink: rstreams.Sink, request: rstreams.SubscribeRequest) -> None:
    """``batch?count=N``: N 8-byte elements queued in one ``send_many``."""
    count = request.int_param("count", 10, minimum=0)
    await sink.send_many([n.to_bytes(8, "big") for n in range(count)])


async def test_elements_are_coalesced_into_few_messages_of_whole_protocol_messages() -> None:
    count = 50_000  # 50,000 × 15 bytes: about 750 KB of protocol messages
    with trio.fail_after(TIMEOUT):
        async with serving(standard_app(batch=batch_publisher)) as (server, port):
            async with raw_client(port) as (peer, stream):
                await peer.handshake()
                await peer.send(Subscribe(publisher=f"batch?count={count}", subscriber=1, initial_demand=UNBOUNDED))
                await peer.receive_until(OnComplete)
                protocol_messages = [m for payload in stream.received for m in whole_messages(payload)]  # type: ignore[arg-type]
                assert len(protocol_messages) >= count + 3  # hello, subscribed, elements, onComplete
                assert len(stream.received) <= 10
                assert max(len(payload) for payload in stream.received) <= MAX_OUTGOING_MESSAGE


@pytest.mark.parametrize(
    ("count", "size"),
    [
        (3, 1 * MiB + 17),  # split into 64 KiB parts
        (200, 64 * KiB),  # exactly the split threshold: whole, one per message at most 3
        (300, 63 * KiB + 1000),  # just under it, back to back
        (5000, 1000),
    ],
)
async def test_every_message_stays_within_256_kib(count: int, size: int) -> None:
    with trio.fail_after(TIMEOUT):
        async with serving() as (server, port):
            async with raw_client(port) as (peer, stream):
                await peer.handshake()
                await peer.send(Subscribe(publisher=f"blob?count={count}&size={size}", subscriber=1, initial_demand=UNBOUNDED))
                await peer.receive_until(OnComplete)
                for payload in stream.received:
                    assert len(payload) <= MAX_OUTGOING_MESSAGE
                    whole_messages(payload)  # type: ignore[arg-type]
                assert sum(len(payload) for payload in stream.received) > count * size


async def test_large_elements_through_the_python_client() -> None:
    sizes = [1 * MiB + 1, 20 * MiB]  # 20 MiB: more than a message may be, so it is split
    with trio.fail_after(TIMEOUT):
        async with serving() as (server, port):
            async with rstreams.open_session(f"ws://127.0.0.1:{port}/") as client:
                for size in sizes:
                    async with client.subscribe(f"blob?count=2&size={size}") as blobs:
                        received = [raw async for raw in blobs]
                    assert received == [blob(0, size), blob(1, size)]


async def test_a_message_over_the_size_limit_is_a_protocol_error() -> None:
    # 20 MiB in one WebSocket message (many protocol messages, each valid on
    # its own): over the 16 MiB limit, refused as it arrives, and
    # only that connection is closed.
    name = "x" * 30_000  # unknown: each subscribe is answered with onError
    subscribes = b"".join(encode(Subscribe(publisher=name, subscriber=i)) for i in range(1, 20 * MiB // 30_000))
    with trio.fail_after(TIMEOUT):
        async with serving() as (server, port):
            async with rstreams.open_session(f"ws://127.0.0.1:{port}/") as bystander:
                known = {await new_session(server)}
                with trio.CancelScope() as scope:
                    async with raw_client(port, disconnect_timeout=1) as (peer, stream):
                        await peer.handshake()
                        session = await new_session(server, known)
                        async with trio.open_nursery() as nursery:

                            async def send_too_much() -> None:
                                try:
                                    await stream.connection.send_message(subscribes)
                                except (trio_websocket.ConnectionClosed, trio.BrokenResourceError):
                                    pass

                            nursery.start_soon(send_too_much)
                            nursery.start_soon(peer.rest)  # read the answers, so the server can write
                            await session.wait_closed()
                            scope.cancel()  # the client's side of the close is raced by the reset
                limit = 16 * MiB
                assert session.close_reason == f"protocol error: WebSocket message larger than {limit} bytes"
                assert session._stream._close_code == 1009  # type: ignore[attr-defined]
                await fetch_range(bystander, 20)


# ---- the write size and the cut between messages -------------------------------


def test_websocket_write_size_leaves_room_for_one_split_part() -> None:
    config = websocket_config(rstreams.SessionConfig())
    # Parts of split_threshold (64 KiB), not plain TCP's 256 KiB, so that a
    # write that ends with one stays within the message bound.
    assert config.limits.part_size == config.limits.split_threshold == 64 * KiB
    assert config.write_size + config.limits.part_size + 64 <= MAX_OUTGOING_MESSAGE
    assert config.write_size >= 128 * KiB
    assert rstreams.SessionConfig().limits.part_size == 256 * KiB  # plain TCP's own is untouched
    small = rstreams.SessionConfig(write_size=8 * KiB, limits=rstreams.ProtocolLimits(part_size=64 * KiB))
    assert websocket_config(small) is small
    # Parts smaller than the threshold: an unsplit element of up to the
    # threshold may end a batch, so the room is counted from the larger.
    fine = websocket_config(rstreams.SessionConfig(limits=rstreams.ProtocolLimits(part_size=16 * KiB)))
    assert fine.write_size + 64 * KiB + 64 <= MAX_OUTGOING_MESSAGE


@pytest.mark.parametrize("sizes", [[10] * 100_000, [200 * KiB, 200 * KiB, 1], [300 * KiB], [1, 300 * KiB, 1]])
def test_split_whole_messages(sizes: list[int]) -> None:
    data = b"".join(msgpack.packb(b"x" * size) for size in sizes)
    runs = split_whole_messages(data, MAX_OUTGOING_MESSAGE)
    assert b"".join(runs) == data
    for run in runs:
        messages = whole_messages(bytes(run))
        assert len(run) <= MAX_OUTGOING_MESSAGE or len(messages) == 1


def test_split_whole_messages_leaves_what_does_not_parse_alone() -> None:
    data = msgpack.packb(b"x" * 200_000) + b"\xc1" * 100_000  # 0xc1: never valid msgpack
    runs = split_whole_messages(data, MAX_OUTGOING_MESSAGE)
    assert b"".join(runs) == data
    assert [len(run) for run in runs] == [200_005, 100_000]


async def test_a_burst_over_the_bound_goes_as_several_messages() -> None:
    # Control messages are taken whole: thousands of subscribe answers at once.
    subscribers = 30_000
    with trio.fail_after(TIMEOUT):
        async with serving() as (server, port):
            async with raw_client(port) as (peer, stream):
                await peer.handshake()
                name = "x" * 60
                await peer.send(*[Subscribe(publisher=name, subscriber=i) for i in range(subscribers)])
                for _ in range(subscribers):
                    await peer.expect(OnError)
                await peer.send(Goodbye(reason="bye"))
                await peer.expect(Goodbye)
                assert len(stream.received) > 1
                for payload in stream.received:
                    assert len(payload) <= MAX_OUTGOING_MESSAGE
                    whole_messages(payload)  # type: ignore[arg-type]


# ---- pings, origins, TLS, limits, shutdown -------------------------------------


async def test_pings_are_answered() -> None:
    with trio.fail_after(TIMEOUT):
        async with serving() as (server, port):
            async with raw_client(port) as (peer, stream):
                await peer.handshake()
                await stream.connection.ping(b"are you there")
                await peer.send(Subscribe(publisher="range?count=2", subscriber=1, initial_demand=2))
                await peer.receive_until(OnComplete)
                await stream.connection.ping()


async def test_origins() -> None:
    with trio.fail_after(TIMEOUT):
        async with serving(allowed_origins=["https://app.example:8443"]) as (server, port):

            async def upgrade(origin: str | None) -> int:
                headers = [(b"Origin", origin.encode())] if origin is not None else []
                try:
                    async with raw_client(port, extra_headers=headers) as (peer, stream):
                        await peer.handshake()
                        await peer.send(Goodbye(reason="bye"))
                        await peer.receive_until(Goodbye)
                        return 101
                except trio_websocket.ConnectionRejected as exc:
                    assert exc.body is not None and b"not allowed" in exc.body
                    return int(exc.status_code)

            assert await upgrade(None) == 101
            assert await upgrade(f"http://127.0.0.1:{port}") == 101
            assert await upgrade(f"HTTP://127.0.0.1:{port}/") == 101
            assert await upgrade("https://app.example:8443") == 101
            assert await upgrade("https://app.example") == 403  # another port
            assert await upgrade(f"https://127.0.0.1:{port}") == 403  # another scheme
            assert await upgrade(f"http://127.0.0.1:{port + 1}") == 403
            assert await upgrade("http://evil.example") == 403
            assert await upgrade("null") == 403
            assert server.sessions == frozenset()


async def test_the_listener_host_name_counts_as_its_own_origin() -> None:
    with trio.fail_after(TIMEOUT):
        server = rstreams.Server(standard_app())
        async with trio.open_nursery() as nursery:
            listeners = await nursery.start(server.serve_websocket, "localhost", 0)
            port = rstreams.listener_port(listeners[0])
            headers = [(b"Origin", f"http://localhost:{port}".encode())]
            async with trio_websocket.open_websocket_url(f"ws://127.0.0.1:{port}/", extra_headers=headers):
                pass
            nursery.cancel_scope.cancel()


async def test_any_origin_with_a_star() -> None:
    with trio.fail_after(TIMEOUT):
        async with serving(allowed_origins=["*"]) as (server, port):
            async with raw_client(port, extra_headers=[(b"Origin", b"http://anywhere.example")]):
                pass


def test_a_bad_allowed_origin_is_refused_before_listening() -> None:
    with pytest.raises(ValueError, match="not an origin"):
        trio.run(functools.partial(rstreams.serve_websocket, standard_app(), "127.0.0.1", 0, allowed_origins=["localhost:8000"]))


async def test_wss(server_ssl_context: ssl.SSLContext, client_ssl_context: ssl.SSLContext) -> None:
    with trio.fail_after(TIMEOUT):
        async with serving(ssl_context=server_ssl_context) as (server, port):
            async with raw_client(port, scheme="wss", ssl_context=client_ssl_context, subprotocols=[SUBPROTOCOL]) as (peer, stream):
                assert stream.connection.subprotocol == SUBPROTOCOL
                await peer.handshake()
                await peer.send(Goodbye(reason="bye"))
                await peer.receive_until(Goodbye)
            async with rstreams.open_session(f"wss://127.0.0.1:{port}/", ssl_context=client_ssl_context) as client:
                await fetch_range(client, 50)
            with pytest.raises(ConnectionError, match="certificate verify failed"):
                async with rstreams.open_session(f"wss://127.0.0.1:{port}/"):  # untrusted certificate
                    pass
            with pytest.raises(OSError):
                async with rstreams.open_session(f"ws://127.0.0.1:{port}/"):  # plain text to a TLS port
                    pass


async def test_max_connections_counts_websocket_sessions() -> None:
    with trio.fail_after(TIMEOUT):
        async with serving(max_connections=1) as (server, port):
            async with rstreams.open_session(f"ws://127.0.0.1:{port}/") as first:
                await new_session(server)
                async with raw_client(port) as (peer, stream):
                    assert await peer.expect_goodbye_and_close() == "server busy: 1 connections already open"
                await fetch_range(first, 10)


async def test_sockets_that_send_no_request_hold_places_only_until_newcomers_need_them() -> None:
    # Before its upgrade a connection was not counted at all: silent sockets
    # at the WebSocket port were held until the request-head timeout (10 s),
    # as many as the process had descriptors for. Now each holds a place
    # from the start; one beyond the places has HANDSHAKE_GRACE for its
    # request; and a full server closes the oldest still in its handshake
    # past its grace for a newcomer, as on TCP.
    with trio.fail_after(REQUEST_HEAD_TIMEOUT / 2):  # (what closes them must not be the head timeout)
        async with serving(max_connections=2) as (server, port):
            silent = [await trio.open_tcp_stream("127.0.0.1", port) for _ in range(4)]
            for beyond in silent[2:]:
                assert await beyond.receive_some(1) == b""  # (no place: closed after its grace)
            await trio.sleep(HANDSHAKE_GRACE)
            async with rstreams.open_session(f"ws://127.0.0.1:{port}/") as client:
                await fetch_range(client, 10)
                assert await silent[0].receive_some(1) == b""  # (the oldest gave its place)
                with trio.move_on_after(0.2):
                    await silent[1].receive_some(1)
                    raise AssertionError("the newer silent socket was closed too")  # pragma: no cover
            for stream in silent:
                await stream.aclose()


async def test_sockets_that_send_no_request_never_take_a_sessions_place() -> None:
    # The HTTP front has places of its own: a flood of silent sockets at
    # the WebSocket port keeps no TCP client out, not even within the grace.
    with trio.fail_after(TIMEOUT):
        async with serving(max_connections=2) as (server, port):
            async with trio.open_nursery() as nursery:
                tcp = await nursery.start(server.serve_tcp, "127.0.0.1", 0)
                silent = [await trio.open_tcp_stream("127.0.0.1", port) for _ in range(4)]
                await trio.testing.wait_all_tasks_blocked()
                async with rstreams.open_session(f"tcp://127.0.0.1:{rstreams.listener_port(tcp[0])}") as client:
                    await fetch_range(client, 10)
                for stream in silent:
                    await stream.aclose()
                nursery.cancel_scope.cancel()


async def test_graceful_shutdown_says_goodbye_to_websocket_clients() -> None:
    with trio.fail_after(TIMEOUT):
        server = rstreams.Server(standard_app())
        async with trio.open_nursery() as sessions:
            async with trio.open_nursery() as listening:
                listeners = await listening.start(lambda task_status: server.serve_websocket("127.0.0.1", 0, handler_nursery=sessions, task_status=task_status))
                url = f"ws://127.0.0.1:{rstreams.listener_port(listeners[0])}/"
                async with rstreams.open_session(url) as client:
                    async with client.subscribe("range?count=1000000", prefetch=4) as numbers:
                        await numbers.__anext__()
                        listening.cancel_scope.cancel()
                        await server.aclose()
                        with pytest.raises(rstreams.SessionClosed) as closed:
                            async for _ in numbers:
                                pass
                    assert closed.value.by_peer and closed.value.reason == "server shutting down"
            await wait_for(lambda: not server.sessions)


async def test_an_upgrade_elsewhere_than_root_is_not_found() -> None:
    with trio.fail_after(TIMEOUT):
        async with serving() as (server, port):
            with pytest.raises(trio_websocket.ConnectionRejected) as rejected:
                async with trio_websocket.open_websocket_url(f"ws://127.0.0.1:{port}/other"):
                    pass
            assert rejected.value.status_code == 404
            with pytest.raises(ConnectionRefusedError, match="HTTP 404"):
                async with rstreams.open_session(f"ws://127.0.0.1:{port}/other"):
                    pass


async def test_a_client_app_publishes_over_websocket_within_the_bound() -> None:
    # The Python client writes with the WebSocket write size too.
    seen: list[int] = []

    async def subscribe_back(sink: rstreams.Sink, request: rstreams.SubscribeRequest) -> None:
        async with request.session.subscribe("blob?count=40&size=70000", prefetch=40) as blobs:
            async for raw in blobs:
                seen.append(len(raw))  # type: ignore[arg-type]
        await sink.send(b"done")

    with trio.fail_after(TIMEOUT):
        async with serving(rstreams.Router({"back": subscribe_back})) as (server, port):
            async with rstreams.open_session(f"ws://127.0.0.1:{port}/", app=standard_app()) as client:
                session_stream = client._stream
                async with client.subscribe("back") as done:
                    assert [raw async for raw in done] == [b"done"]
                assert seen == [70000] * 40
                assert 0 < session_stream.largest_message_sent <= MAX_OUTGOING_MESSAGE  # type: ignore[attr-defined]


async def test_several_protocol_messages_in_one_client_message() -> None:
    with trio.fail_after(TIMEOUT):
        async with serving() as (server, port):
            async with raw_client(port) as (peer, stream):
                await peer.send(Hello(), Subscribe(publisher="range?count=1", subscriber=1, initial_demand=1))
                await peer.expect(Hello)
                await peer.expect(Subscribed)


def open_wsproto_pair(server_class: type[WSConnection] = WSConnection) -> tuple[WSConnection, WSConnection]:
    """A server and a client wsproto connection, handshake done in memory."""
    server, client = server_class(ConnectionType.SERVER), WSConnection(ConnectionType.CLIENT)
    server.receive_data(client.send(WebSocketRequest(host="test", target="/", subprotocols=[SUBPROTOCOL])))
    [request] = list(server.events())
    client.receive_data(server.send(AcceptConnection(subprotocol=SUBPROTOCOL)))
    [accepted] = list(client.events())
    assert isinstance(request, WebSocketRequest) and isinstance(accepted, AcceptConnection)
    return server, client


async def test_send_all_cuts_data_over_the_bound_between_protocol_messages() -> None:
    # What the writer hands over is normally within the bound (websocket_config);
    # a larger burst still goes out as whole protocol messages, ≤ 256 KiB each.
    server, client = open_wsproto_pair()
    left, right = trio.testing.memory_stream_pair()
    stream = WebSocketStream(left, server, max_message_size=16 * MiB, subprotocol=SUBPROTOCOL)
    data = b"".join(encode(OnError(subscriber=i, error="e" * 90)) for i in range(8000))
    assert len(data) > 2 * MAX_OUTGOING_MESSAGE
    with trio.fail_after(TIMEOUT):
        await stream.send_all(data)
        payloads: list[bytes] = []
        received = 0
        while received < len(data):
            client.receive_data(bytes(await right.receive_some()))
            for event in client.events():
                assert isinstance(event, BytesMessage) and event.message_finished
                payloads.append(bytes(event.data))
                received += len(event.data)
    assert b"".join(payloads) == data
    assert stream.messages_sent == len(payloads) == 3
    for payload in payloads:
        assert len(payload) <= MAX_OUTGOING_MESSAGE
        whole_messages(payload)


async def test_the_stream_hands_over_payloads_and_refuses_text() -> None:
    server, client = open_wsproto_pair()
    left, right = trio.testing.memory_stream_pair()
    stream = WebSocketStream(left, server, max_message_size=100, subprotocol=None)
    with trio.fail_after(TIMEOUT):
        await right.send_all(client.send(BytesMessage(data=b"abc")) + client.send(BytesMessage(data=b"def")))
        received = b""
        while len(received) < 6:
            chunk = await stream.receive_some(4)
            assert 0 < len(chunk) <= 4  # never more than asked
            received += chunk
        assert received == b"abcdef"
        await right.send_all(client.send(Ping(payload=b"p")) + client.send(BytesMessage(data=b"g")) + client.send(TextMessage(data="no")))
        assert await stream.receive_some() == b"g"  # what came before the text message
        with pytest.raises(rstreams.RemoteProtocolError, match="text WebSocket message"):
            await stream.receive_some()
        await stream.aclose()
        client.receive_data(bytes(await right.receive_some()))
        events = list(client.events())
        assert isinstance(events[0], Pong) and events[0].payload == b"p"
        assert isinstance(events[-1], CloseConnection) and events[-1].code == 1003


async def test_the_stream_refuses_a_message_over_its_limit_before_holding_it() -> None:
    server, client = open_wsproto_pair()
    left, right = trio.testing.memory_stream_pair()
    stream = WebSocketStream(left, server, max_message_size=100, subprotocol=None)
    with trio.fail_after(TIMEOUT):
        await right.send_all(client.send(BytesMessage(data=b"x" * 100)))
        assert await stream.receive_some() == b"x" * 100  # exactly the limit is fine
        await right.send_all(client.send(BytesMessage(data=b"y" * 60, message_finished=False)))
        assert await stream.receive_some() == b"y" * 60
        await right.send_all(client.send(BytesMessage(data=b"y" * 41)))
        with pytest.raises(rstreams.RemoteProtocolError, match="larger than 100 bytes"):
            await stream.receive_some()
        await stream.aclose()
        client.receive_data(bytes(await right.receive_some()))
        [close] = list(client.events())
        assert isinstance(close, CloseConnection) and close.code == 1009


async def test_the_peer_closing_is_end_of_stream() -> None:
    server, client = open_wsproto_pair()
    left, right = trio.testing.memory_stream_pair()
    stream = WebSocketStream(left, server, max_message_size=100, subprotocol=None)
    with trio.fail_after(TIMEOUT):
        await right.send_all(client.send(CloseConnection(code=1000)))
        assert await stream.receive_some() == b""
        with pytest.raises(trio.BrokenResourceError):
            await stream.send_all(b"\x90")
        await stream.aclose()
        client.receive_data(bytes(await right.receive_some()))
        [close] = list(client.events())
        assert isinstance(close, CloseConnection)
        with pytest.raises(trio.ClosedResourceError):
            await stream.receive_some()


# ---- many tiny frames in one read ------------------------------------------------


def tiny_fragments(payload: bytes) -> bytes:
    """``payload`` as one binary message of one-byte fragments (7 bytes each on the wire).

    Masked, as a client's frames must be, with a zero key (which leaves the
    payload as it is): wsproto's client never fragments a message itself.
    """
    frames = []
    for index in range(len(payload)):
        opcode = 0x2 if index == 0 else 0x0
        fin = 0x80 if index == len(payload) - 1 else 0
        frames.append(struct.pack("!BB", fin | opcode, 0x80 | 1) + bytes(4) + payload[index : index + 1])
    return b"".join(frames)


class CountingConnection(WSConnection):
    """A wsproto connection that counts the events taken from it."""

    taken = 0

    def events(self) -> Generator[Event, None, None]:
        for event in super().events():
            self.taken += 1
            yield event


class EventsPerStep(trio.abc.Instrument):
    """How many events ``connection`` gave up in each step of ``task``."""

    def __init__(self, task: trio.lowlevel.Task, connection: CountingConnection) -> None:
        self.task, self.connection = task, connection
        self.before: int | None = None  # (None: the step this was added in)
        self.steps: list[int] = []

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        if task is self.task:
            self.before = self.connection.taken

    def after_task_step(self, task: trio.lowlevel.Task) -> None:
        if task is self.task and self.before is not None:
            self.steps.append(self.connection.taken - self.before)


async def test_a_read_of_tiny_frames_is_handled_a_bounded_number_of_frames_per_step() -> None:
    # 3,000 messages of three one-byte fragments (a v0 ping each, as the
    # audit's attacker sent): 9,000 frames in one 63 KB read. They were all
    # parsed in one step of the run loop (37,000 of them in a 256 KiB read:
    # 0.3 s in which no other connection was served).
    server, client = open_wsproto_pair(CountingConnection)
    assert isinstance(server, CountingConnection)
    server.taken = 0  # (the handshake's request)
    left, right = trio.testing.memory_stream_pair()
    stream = WebSocketStream(left, server, max_message_size=16 * MiB, subprotocol=None)
    payloads = [bytes((0x92, 0x0C, index % 100 + 1)) for index in range(3000)]
    with trio.fail_after(TIMEOUT):
        await right.send_all(b"".join(tiny_fragments(payload) for payload in payloads))
        steps = EventsPerStep(trio.lowlevel.current_task(), server)
        trio.lowlevel.add_instrument(steps)
        try:
            received = bytearray()
            while len(received) < 9000:
                received += await stream.receive_some()
        finally:
            trio.lowlevel.remove_instrument(steps)
    assert received == b"".join(payloads)  # every byte, in order
    assert stream.messages_received == 3000 and server.taken == 9000
    # (The steps it was added and removed in are not counted.)
    assert len(steps.steps) >= 9000 // MAX_EVENTS_PER_STEP - 2
    assert max(steps.steps) <= MAX_EVENTS_PER_STEP


class TinyFragmentsPeerStream(trio.abc.Stream):
    """A WebSocket client over TCP whose every ``send_all`` is one message of one-byte fragments."""

    def __init__(self, transport: trio.SocketStream) -> None:
        self.transport = transport
        self.connection = WSConnection(ConnectionType.CLIENT)
        self._payload = bytearray()

    async def open(self, port: int) -> None:
        await self.transport.send_all(self.connection.send(WebSocketRequest(host=f"127.0.0.1:{port}", target="/", subprotocols=[SUBPROTOCOL])))
        while not self._payload:
            data = await self.transport.receive_some(65536)
            assert data, "closed during the handshake"
            self._take(data)

    def _take(self, data: bytes | bytearray) -> None:
        self.connection.receive_data(bytes(data))
        for event in self.connection.events():
            if isinstance(event, AcceptConnection):
                self._payload += b"accepted"
            elif isinstance(event, BytesMessage):
                self._payload += event.data

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await self.transport.send_all(tiny_fragments(bytes(data)))

    async def wait_send_all_might_not_block(self) -> None:
        await self.transport.wait_send_all_might_not_block()

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        self._payload.clear()
        while not self._payload:
            data = await self.transport.receive_some(65536)
            if not data:
                return b""
            self._take(data)
        return bytes(self._payload)

    async def aclose(self) -> None:
        await self.transport.aclose()


async def test_a_message_of_tiny_fragments_arrives_whole_while_others_are_served() -> None:
    # 600 subscribes in one WebSocket message of 11,400 one-byte fragments
    # (80 KB on the wire), handled in steps; meanwhile fetches on another
    # connection are served, and every subscribe is answered.
    subscribers = range(1, 601)
    with trio.fail_after(TIMEOUT):
        async with serving() as (server, port):
            async with rstreams.open_session(f"ws://127.0.0.1:{port}/") as bystander:
                tiny = TinyFragmentsPeerStream(await trio.open_tcp_stream("127.0.0.1", port))
                await tiny.open(port)
                peer = RawPeer(tiny)
                await peer.handshake()
                burst = [Subscribe(publisher="range?count=1", subscriber=index, initial_demand=1) for index in subscribers]
                assert sum(len(encode(message)) for message in burst) > 10_000
                completed: set[int] = set()

                async def read_answers() -> None:
                    while len(completed) < len(subscribers):
                        message = await peer.receive()
                        assert not isinstance(message, Goodbye), message
                        if isinstance(message, OnComplete):
                            completed.add(message.subscriber)

                async with trio.open_nursery() as nursery:
                    nursery.start_soon(read_answers)
                    nursery.start_soon(peer.send, *burst)
                    for _ in range(3):
                        await fetch_range(bystander, 50)
                assert completed == set(subscribers)
                await peer.send(Goodbye(reason="bye"))
                await peer.receive_until(Goodbye)
                await tiny.aclose()


frame_plans = st.lists(
    st.one_of(
        # A message: its payload, cut into fragments of these sizes.
        st.tuples(st.binary(min_size=1, max_size=12), st.lists(st.integers(1, 5), max_size=6)),
        st.binary(max_size=4).map(Ping),
    ),
    min_size=1,
    max_size=40,
)


@settings(max_examples=200, deadline=None)
@given(plan=frame_plans, bound=st.integers(1, 5), read_sizes=st.lists(st.integers(1, 300), min_size=1, max_size=8))
def test_fuzz_frames_handled_in_steps_lose_nothing_and_keep_their_order(
    plan: list[tuple[bytes, list[int]] | Ping], bound: int, read_sizes: list[int]
) -> None:
    # Any cut of messages into fragments, pings between, any read sizes and
    # any bound per step: the payloads come out whole and in order, and the
    # latest ping is answered.
    server, client = open_wsproto_pair()
    wire, payloads, pings = bytearray(), bytearray(), 0
    for item in plan:
        if isinstance(item, Ping):
            wire += client.send(item)
            pings += 1
            continue
        payload, cuts = item
        pieces, start = [], 0
        for size in cuts:
            if start < len(payload) - 1:
                pieces.append(payload[start : start + size])
                start += size
        pieces.append(payload[start:])
        for index, piece in enumerate(pieces):
            wire += client.send(BytesMessage(data=piece, message_finished=index == len(pieces) - 1))
        payloads += payload

    async def main() -> None:
        left, right = trio.testing.memory_stream_pair()
        with trio.fail_after(10), mock.patch.object(_websocket, "MAX_EVENTS_PER_STEP", bound):
            stream = WebSocketStream(left, server, max_message_size=1024, subprotocol=None)
            await right.send_all(bytes(wire))
            await right.send_all(client.send(CloseConnection(code=1000)))
            received = bytearray()
            reads = 0
            while data := await stream.receive_some(read_sizes[reads % len(read_sizes)]):
                received += data
                reads += 1
            assert received == payloads
            assert stream.messages_received == sum(not isinstance(item, Ping) for item in plan)
            await stream.aclose()
            client.receive_data(await right.receive_some())
            answers = list(client.events())
            assert isinstance(answers[-1], CloseConnection)
            pongs = [answer.payload for answer in answers if isinstance(answer, Pong)]
            if pings:  # (one pong per read at most: the latest ping's is the last)
                assert pongs and pongs[-1] == [item for item in plan if isinstance(item, Ping)][-1].payload

    trio.run(main)


async def fake_server(stream: trio.abc.Stream, answer: Callable[[WSConnection, WebSocketRequest], bytes]) -> None:
    """Read a client's upgrade request and write ``answer(...)`` in one piece."""
    server = WSConnection(ConnectionType.SERVER)
    while True:
        server.receive_data(bytes(await stream.receive_some()))
        requests = [event for event in server.events() if isinstance(event, WebSocketRequest)]
        if requests:
            await stream.send_all(answer(server, requests[0]))
            return


async def test_the_client_keeps_frames_that_came_with_the_101(nursery: trio.Nursery) -> None:
    client, server = trio.testing.memory_stream_pair()

    def accept_and_hello(connection: WSConnection, request: WebSocketRequest) -> bytes:
        assert request.subprotocols == [SUBPROTOCOL] and request.target == "/path"
        return connection.send(AcceptConnection(subprotocol=SUBPROTOCOL)) + connection.send(BytesMessage(data=encode(Hello())))

    nursery.start_soon(fake_server, server, accept_and_hello)
    with trio.fail_after(TIMEOUT):
        endpoint = rstreams.parse_url("ws://127.0.0.1:1/path")
        stream = await open_websocket_client(client, endpoint, config=rstreams.SessionConfig())
        assert stream.subprotocol == SUBPROTOCOL
        assert await stream.receive_some() == encode(Hello())


@pytest.mark.parametrize(
    ("answer", "error"),
    [
        (
            lambda c, r: c.send(AcceptConnection(subprotocol=SUBPROTOCOL)).replace(b"rstreams.v0", b"rstreams.v9"),
            "handshake failed: unrecognized subprotocol rstreams.v9",
        ),
        (lambda c, r: b"HTTP/1.1 500 Oops\r\nContent-Length: 4\r\n\r\nsad!", "refused: HTTP 500: sad!"),
        (lambda c, r: b"HTTP/1.1 101 Switching\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n", "WebSocket handshake failed"),
        (lambda c, r: b"", "closed the connection during the WebSocket handshake"),
    ],
)
async def test_client_handshake_failures(nursery: trio.Nursery, answer: Callable[[WSConnection, WebSocketRequest], bytes], error: str) -> None:
    client, server = trio.testing.memory_stream_pair()

    async def answer_then_close() -> None:
        await fake_server(server, answer)
        await server.aclose()

    nursery.start_soon(answer_then_close)
    with trio.fail_after(TIMEOUT), pytest.raises(ConnectionError, match=error):
        await open_websocket_client(client, rstreams.parse_url("ws://h:1/"), config=rstreams.SessionConfig())


async def test_client_handshake_timeout(autojump_clock: trio.testing.MockClock) -> None:
    client, server = trio.testing.memory_stream_pair()  # nobody answers
    config = rstreams.SessionConfig(handshake_timeout=3)
    with pytest.raises(TimeoutError, match="within 3 s"):
        await open_websocket_client(client, rstreams.parse_url("ws://h:1/"), config=config)
