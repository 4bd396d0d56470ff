"""Peers that break the protocol, overrun demand, vanish, or say nothing.

Each scenario ends the same way: the offended session answers with goodbye
(``protocol error: ...`` for a protocol violation) and closes; no task of it
is left running; and the same server still serves a well-behaved client.

The raw peer (``_support.RawPeer``) writes hand-made bytes and reads with the
codec alone. The ``harness`` fixture runs each scenario over memory streams
and over TCP.
"""

from __future__ import annotations

import msgpack
import pytest
import trio
import trio.testing

import rstreams
from rstreams.protocol import (
    Goodbye,
    Hello,
    OnNext,
    OnNextLastPart,
    OnNextPacked,
    OnNextPart,
    Request,
    Subscribe,
    Subscribed,
    encode,
)

from ._support import (
    SESSION_HELLO,
    Probe,
    RawPeer,
    blob,
    fetch_range,
    from_u32,
    standard_app,
    u32,
    wait_no_session_tasks,
)

HARNESS_CONFIG = rstreams.SessionConfig(
    limits=rstreams.ProtocolLimits(max_message_size=65536, max_string_size=256, split_threshold=1024),
)


async def assert_recovered(harness, session: rstreams.Session) -> None:  # type: ignore[no-untyped-def]
    """The offended session closed, left no task behind, and the server still serves."""
    await session.wait_closed()
    assert session.closed
    await wait_no_session_tasks()
    assert harness.server.sessions == frozenset()
    async with harness.open_client(config=HARNESS_CONFIG) as client:
        await fetch_range(client, 50)
    await wait_no_session_tasks()


async def expect_protocol_error(peer: RawPeer, session: rstreams.Session) -> str:
    """Read to end of stream: the last message is a protocol-error goodbye. Its reason."""
    reason = await peer.expect_goodbye_and_close()
    assert reason.startswith("protocol error:"), reason
    await session.wait_closed()
    assert session.close_reason == reason
    return reason


# ---- garbage ----------------------------------------------------------------


@pytest.mark.parametrize(
    "garbage",
    [
        pytest.param(b"\xc1\xc1\xc1\xc1", id="never-used-byte"),
        pytest.param(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", id="http"),
        pytest.param(msgpack.packb([99, 1], use_bin_type=True), id="unknown-code"),
        pytest.param(msgpack.packb({"a": 1}, use_bin_type=True), id="map"),
        pytest.param(msgpack.packb([2, 1, "many"], use_bin_type=True), id="demand-not-int"),
        pytest.param(msgpack.packb([1, 5, 1, 1], use_bin_type=True), id="publisher-not-str"),
        pytest.param(msgpack.packb([3], use_bin_type=True), id="missing-field"),
        pytest.param(msgpack.packb([2, -1, 1], use_bin_type=True), id="negative-id"),
        pytest.param(encode(Hello()), id="hello-twice"),
        pytest.param(encode(Request(subscriber=42, demand=1)), id="request-unknown-id"),
        pytest.param(encode(OnNext(subscriber=3, element=b"x")), id="onnext-unknown-id"),
        pytest.param(encode(Subscribed(subscriber=9)), id="subscribed-unasked"),
        pytest.param(msgpack.packb([1, "x" * 1000, 1, 1], use_bin_type=True), id="string-over-limit"),
        pytest.param(msgpack.packb([5, 1, b"x" * 70000], use_bin_type=True), id="message-over-limit"),
    ],
)
async def test_garbage_after_hello(harness, garbage: bytes) -> None:
    with trio.fail_after(10):
        peer, session = await harness.open_raw()
        await peer.handshake()
        await peer.send_raw(garbage)
        await expect_protocol_error(peer, session)
        await assert_recovered(harness, session)


@pytest.mark.parametrize(
    "before",
    [
        pytest.param(encode(Subscribe(publisher="range?count=3", subscriber=1, initial_demand=10)), id="subscribe"),
        pytest.param(encode(Subscribe(publisher="nowhere", subscriber=1, initial_demand=10)), id="unknown-publisher"),
        pytest.param(
            encode(Subscribe(publisher="range", subscriber=1, initial_demand=1)) + encode(Request(subscriber=1, demand=5)),
            id="subscribe-and-request",
        ),
    ],
)
async def test_valid_messages_then_garbage_in_one_read(harness, before: bytes) -> None:
    # The connection hands over the events parsed before the bad message,
    # already in its ERROR state: acting on them must not try to answer.
    with trio.fail_after(10):
        peer, session = await harness.open_raw()
        await peer.handshake()
        await peer.send_raw(before + b"\xc1")
        await expect_protocol_error(peer, session)
        await assert_recovered(harness, session)


@pytest.mark.parametrize(
    "first",
    [
        pytest.param(b"\xc1", id="garbage"),
        pytest.param(encode(Subscribe(publisher="range", subscriber=1, initial_demand=1)), id="subscribe"),
        pytest.param(encode(Request(subscriber=1, demand=1)), id="request"),
    ],
)
async def test_anything_but_hello_first(harness, first: bytes) -> None:
    with trio.fail_after(10):
        peer, session = await harness.open_raw()
        assert await peer.receive() == SESSION_HELLO  # the server says hello without waiting
        await peer.send_raw(first)
        reason = await expect_protocol_error(peer, session)
        if first != b"\xc1":
            assert "expected hello" in reason
        await assert_recovered(harness, session)


class GatedStream(trio.abc.Stream):
    """A stream whose writer side waits for ``gate`` before its first write."""

    def __init__(self, stream: trio.abc.Stream) -> None:
        self._stream = stream
        self.gate = trio.Event()

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await self._stream.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self.gate.wait()
        await self._stream.wait_send_all_might_not_block()

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        return await self._stream.receive_some(max_bytes)

    async def aclose(self) -> None:
        await self._stream.aclose()


async def test_goodbye_for_an_early_protocol_error_still_follows_our_hello() -> None:
    peer_stream, server_stream = trio.testing.memory_stream_pair()
    gated = GatedStream(server_stream)
    peer = RawPeer(peer_stream)
    await peer.send_raw(b"\xc1")  # garbage, there before the session starts
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(rstreams.serve_stream, standard_app(), gated)
            await trio.testing.wait_all_tasks_blocked()  # the reader has seen the garbage
            gated.gate.set()
            messages = await peer.rest()
    assert isinstance(messages[-1], Goodbye) and messages[-1].reason.startswith("protocol error:")
    assert messages[0] == SESSION_HELLO


async def test_unsupported_version(harness) -> None:
    with trio.fail_after(10):
        peer, session = await harness.open_raw()
        await peer.send(Hello(version=7))
        reason = await peer.expect_goodbye_and_close()
        assert "version 7" in reason
        await assert_recovered(harness, session)


async def test_reusing_an_active_subscriber_id(harness) -> None:
    harness.server.app.add("probe", Probe().publisher)
    with trio.fail_after(10):
        peer, session = await harness.open_raw()
        await peer.handshake()
        await peer.send(Subscribe(publisher="probe", subscriber=1, initial_demand=0))
        assert await peer.receive() == Subscribed(subscriber=1)
        await peer.send(Subscribe(publisher="probe", subscriber=1, initial_demand=0))
        reason = await expect_protocol_error(peer, session)
        assert "still in use" in reason
        await assert_recovered(harness, session)


async def test_garbage_in_the_middle_of_a_stream(harness) -> None:
    # The protocol error ends the publishers of that session too.
    probe = Probe()
    harness.server.app.add("probe", probe.publisher)
    with trio.fail_after(10):
        peer, session = await harness.open_raw()
        await peer.handshake()
        await peer.send(Subscribe(publisher="probe", subscriber=1, initial_demand=2))
        await peer.expect(Subscribed)
        await peer.expect(OnNext)
        await peer.send_raw(b"\xc1")
        await expect_protocol_error(peer, session)
        await probe.cancelled.wait()
        await assert_recovered(harness, session)


async def test_other_clients_are_unaffected(harness) -> None:
    with trio.fail_after(10):
        async with harness.open_client(config=HARNESS_CONFIG) as good:
            async with good.subscribe("range?count=200", prefetch=8) as numbers:
                first = [from_u32(await numbers.__anext__()) for _ in range(100)]
                peer, bad = await harness.open_raw()
                await peer.handshake()
                await peer.send_raw(b"\xc1")
                await expect_protocol_error(peer, bad)
                rest = [from_u32(raw) async for raw in numbers]
            assert first + rest == list(range(200))
            assert not good.closed
        await assert_recovered(harness, bad)


# ---- demand overrun ------------------------------------------------------------


def mirror_app() -> tuple[rstreams.Router, Probe, trio.Event]:
    """A server whose ``mirror`` publisher subscribes back to the client's ``numbers``."""
    finished = trio.Event()

    async def mirror(sink: rstreams.Sink, request: rstreams.SubscribeRequest) -> None:
        try:
            async with request.session.subscribe("numbers", prefetch=2) as numbers:
                async for value in numbers:
                    await sink.send(value)
        finally:
            finished.set()

    probe = Probe()
    app = standard_app(mirror=mirror, probe=probe.publisher)
    return app, probe, finished


async def subscribe_to_mirror(peer: RawPeer) -> int:
    """Subscribe to ``mirror`` and return the Id of the server's subscribe back."""
    await peer.handshake()
    await peer.send(Subscribe(publisher="mirror", subscriber=1, initial_demand=10))
    assert await peer.receive() == Subscribed(subscriber=1)
    back = await peer.expect(Subscribe)
    assert back.publisher == "numbers" and back.initial_demand == 2
    return back.subscriber


@pytest.mark.parametrize(
    "overrun",
    [
        pytest.param(lambda sid: [OnNext(subscriber=sid, element=u32(i)) for i in range(3)], id="onNext"),
        pytest.param(
            lambda sid: [OnNextPart(subscriber=sid, element=0, data=b"ab") for _ in range(1)]
            + [OnNextLastPart(subscriber=sid, element=0, data=b"cd")]
            + [OnNext(subscriber=sid, element=u32(i)) for i in range(2)],
            id="split",
        ),
    ],
)
async def test_demand_overrun_toward_the_server(harness, overrun) -> None:  # type: ignore[no-untyped-def]
    app, _, finished = mirror_app()
    harness.server.app = app
    with trio.fail_after(10):
        peer, session = await harness.open_raw()
        sid = await subscribe_to_mirror(peer)
        await peer.send(Subscribed(subscriber=sid), *overrun(sid))
        reason = await expect_protocol_error(peer, session)
        assert "demand" in reason
        await finished.wait()
        await assert_recovered(harness, session)


async def test_packed_overrun_toward_the_server(harness) -> None:
    app, _, finished = mirror_app()
    harness.server.app = app
    with trio.fail_after(10):
        peer, session = await harness.open_raw()
        sid = await subscribe_to_mirror(peer)
        packed = b"".join(u32(i) for i in range(3))
        await peer.send(Subscribed(subscriber=sid, element_size=4), OnNextPacked(subscriber=sid, count=3, messages=packed))
        reason = await expect_protocol_error(peer, session)
        assert "exceeds demand" in reason
        await assert_recovered(harness, session)


async def test_demand_overrun_toward_the_client(raw_publisher_peer) -> None:
    with trio.fail_after(10):
        async with raw_publisher_peer() as (client, peer):
            await peer.handshake()
            async with trio.open_nursery() as nursery:

                async def overrun() -> None:
                    subscribe = await peer.expect(Subscribe)
                    sid = subscribe.subscriber
                    await peer.send(Subscribed(subscriber=sid), *[OnNext(subscriber=sid, element=b"x")] * 3)

                nursery.start_soon(overrun)
                with pytest.raises(rstreams.SessionClosed) as info:
                    async with client.subscribe("feed", prefetch=2) as stream:
                        async for _ in stream:
                            pass
            reason = await peer.expect_goodbye_and_close()
            assert reason.startswith("protocol error:") and "demand" in reason
            assert info.value.reason == reason
            assert info.value.by_peer is False
            assert isinstance(info.value.__cause__, rstreams.RemoteProtocolError)
            await client.wait_closed()


# ---- vanishing --------------------------------------------------------------------


async def test_vanishing_in_the_middle_of_a_split_element_toward_the_server(harness) -> None:
    app, _, finished = mirror_app()
    harness.server.app = app
    with trio.fail_after(10):
        peer, session = await harness.open_raw()
        sid = await subscribe_to_mirror(peer)
        await peer.send(Subscribed(subscriber=sid), OnNextPart(subscriber=sid, element=0, data=b"half of it"))
        await peer.aclose()
        await session.wait_closed()
        assert session.close_reason is not None and "without goodbye" in session.close_reason
        await finished.wait()
        await assert_recovered(harness, session)


async def test_vanishing_while_the_server_sends_a_split_element(harness) -> None:
    cancelled = trio.Event()

    async def big_then_wait(sink: rstreams.Sink) -> None:
        try:
            await sink.send(blob(0, 500_000))
            await trio.sleep_forever()
        except trio.Cancelled:
            cancelled.set()
            raise

    harness.server.app.add("big", big_then_wait)
    with trio.fail_after(10):
        peer, session = await harness.open_raw()
        await peer.handshake()
        await peer.send(Subscribe(publisher="big", subscriber=1, initial_demand=1))
        assert await peer.receive() == Subscribed(subscriber=1)
        assert isinstance(await peer.receive(), OnNextPart)
        await peer.aclose()  # gone, with most parts still to come
        await cancelled.wait()
        await session.wait_closed()
        assert session.close_reason is not None and session.close_reason.startswith("connection")
        await assert_recovered(harness, session)


async def test_vanishing_in_the_middle_of_a_split_element_toward_the_client(raw_publisher_peer) -> None:
    with trio.fail_after(10):
        async with raw_publisher_peer() as (client, peer):
            await peer.handshake()

            async def half_then_vanish() -> None:
                subscribe = await peer.expect(Subscribe)
                sid = subscribe.subscriber
                await peer.send(
                    Subscribed(subscriber=sid),
                    OnNext(subscriber=sid, element=b"whole"),
                    OnNextPart(subscriber=sid, element=0, data=b"half"),
                )
                await peer.aclose()

            async with trio.open_nursery() as nursery:
                nursery.start_soon(half_then_vanish)
                async with client.subscribe("feed", prefetch=4) as stream:
                    assert await stream.__anext__() == b"whole"
                    with pytest.raises(rstreams.SessionBroken) as info:
                        await stream.__anext__()
            assert isinstance(info.value, rstreams.SessionClosed)
            assert info.value.by_peer is True
            assert "without goodbye" in info.value.reason
            assert stream.statistics().received == 1  # the half element never surfaced
            await client.wait_closed()
            assert client.close_reason == info.value.reason


# ---- silence --------------------------------------------------------------------


async def test_silent_peer_hits_the_handshake_timeout(autojump_clock) -> None:
    server = rstreams.Server(standard_app(), config=rstreams.SessionConfig(handshake_timeout=5))
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            silent_stream, server_stream = trio.testing.memory_stream_pair()
            nursery.start_soon(server.serve_stream, server_stream)
            silent = RawPeer(silent_stream)
            start = trio.current_time()
            assert await silent.receive() == SESSION_HELLO
            await trio.testing.wait_all_tasks_blocked()
            [session] = server.sessions
            # Say nothing at all.
            reason = await silent.expect_goodbye_and_close()
            assert reason == "handshake timeout: no hello within 5 s"
            assert trio.current_time() - start == pytest.approx(5, abs=0.5)
            await session.wait_closed()
            assert session.close_reason == reason
            await wait_no_session_tasks()
            assert server.sessions == frozenset()
            # The server still serves others.
            client_stream, server_stream = trio.testing.memory_stream_pair()
            nursery.start_soon(server.serve_stream, server_stream)
            async with rstreams.open_stream_session(client_stream) as client:
                await fetch_range(client)
            await wait_no_session_tasks()


async def test_a_peer_that_sends_only_part_of_its_hello_times_out(autojump_clock) -> None:
    server = rstreams.Server(standard_app(), config=rstreams.SessionConfig(handshake_timeout=3))
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            slow_stream, server_stream = trio.testing.memory_stream_pair()
            nursery.start_soon(server.serve_stream, server_stream)
            slow = RawPeer(slow_stream)
            await slow.send_raw(encode(Hello())[:2])
            assert await slow.receive() == SESSION_HELLO
            reason = await slow.expect_goodbye_and_close()
            assert reason.startswith("handshake timeout")
            await wait_no_session_tasks()


async def test_silent_server_fails_the_client_subscribe(autojump_clock) -> None:
    client_stream, server_stream = trio.testing.memory_stream_pair()
    silent = RawPeer(server_stream)
    config = rstreams.SessionConfig(handshake_timeout=2)
    with trio.fail_after(60):
        async with rstreams.open_stream_session(client_stream, config=config) as client:
            with pytest.raises(rstreams.SessionClosed) as info:
                async with client.subscribe("range"):
                    pass  # pragma: no cover
            assert info.value.reason == "handshake timeout: no hello within 2 s"
            assert info.value.by_peer is False
            assert isinstance(info.value, rstreams.HandshakeTimeout)  # the session never came up
            await client.wait_closed()
        messages = await silent.rest()
        assert messages[0] == SESSION_HELLO
        assert isinstance(messages[1], Subscribe)
        assert messages[-1] == Goodbye(reason="handshake timeout: no hello within 2 s")


async def test_peer_that_never_answers_goodbye(autojump_clock) -> None:
    # Our goodbye waits a bounded time for the peer's, then closes anyway.
    client_stream, server_stream = trio.testing.memory_stream_pair()
    mute = RawPeer(server_stream)
    config = rstreams.SessionConfig(goodbye_timeout=4)
    with trio.fail_after(60):
        async with rstreams.open_stream_session(client_stream, config=config) as client:
            await mute.handshake()
            start = trio.current_time()
            await client.aclose("leaving")
            assert client.closed
            assert trio.current_time() - start == pytest.approx(4, abs=0.5)
        assert await mute.expect_goodbye_and_close() == "leaving"


async def test_peer_that_stops_reading_cannot_block_goodbye(autojump_clock) -> None:
    # A publisher queues data the peer never reads; aclose drains for at most
    # drain_timeout, drops the rest, and still closes.
    client_stream, server_stream = trio.testing.lockstep_stream_pair()
    stuck = RawPeer(client_stream)
    config = rstreams.SessionConfig(drain_timeout=2, goodbye_timeout=2)
    with trio.fail_after(60):
        async with rstreams.open_stream_session(server_stream, app=standard_app(), config=config) as server:
            await stuck.send(Hello(), Subscribe(publisher="blob?count=5&size=100000", subscriber=1, initial_demand=5))
            await stuck.expect(Hello)  # read a little, then stop reading
            await trio.testing.wait_all_tasks_blocked()
            start = trio.current_time()
            await server.aclose("no more")
            assert server.closed
            assert trio.current_time() - start <= 2 + 2 + 1 + 0.5
            assert server.statistics().elements_dropped > 0
        await wait_no_session_tasks()
    await stuck.aclose()


async def test_client_facing_an_unsupported_version(raw_publisher_peer) -> None:
    with trio.fail_after(10):
        async with raw_publisher_peer() as (client, peer):
            errors: list[rstreams.SessionClosed] = []

            async def subscriber() -> None:
                with pytest.raises(rstreams.SessionClosed) as info:
                    async with client.subscribe("x"):
                        pass  # pragma: no cover
                errors.append(info.value)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(subscriber)
                assert await peer.receive() == SESSION_HELLO
                assert isinstance(await peer.receive(), Subscribe)  # the subscription is waiting
                await peer.send(Hello(version=7))
            [error] = errors
            assert "version 7" in error.reason
            assert error.by_peer is False
            cause = error.__cause__
            assert isinstance(cause, rstreams.HandshakeError) and cause.peer_version == 7
            assert await peer.rest() == [Goodbye(reason=error.reason)]
            await client.wait_closed()


async def test_by_peer_is_consistent_after_a_handshake_timeout(autojump_clock) -> None:
    client_stream, server_stream = trio.testing.memory_stream_pair()
    silent = RawPeer(server_stream)
    config = rstreams.SessionConfig(handshake_timeout=2)
    with trio.fail_after(60):
        async with rstreams.open_stream_session(client_stream, config=config) as client:
            with pytest.raises(rstreams.SessionClosed) as during:
                async with client.subscribe("range"):
                    pass  # pragma: no cover
            await client.wait_closed()
            with pytest.raises(rstreams.SessionClosed) as after:
                async with client.subscribe("range"):
                    pass  # pragma: no cover
            assert after.value.reason == during.value.reason
            assert after.value.by_peer is during.value.by_peer
    await silent.aclose()


# ---- leaving at once ---------------------------------------------------------


@pytest.mark.parametrize("publisher", ["range?count=5", "no-such-thing", "bad name?%zz=&"])
async def test_subscribe_and_goodbye_in_one_write(harness, publisher: str) -> None:
    # A peer that subscribes and leaves at once: its goodbye arrives in the
    # same read as the subscribe, so by the time the subscribe is dispatched
    # the goodbye has already ended every stream (the spec: goodbye closes
    # all open streams). The subscribe gets no answer; the goodbye does.
    with trio.fail_after(10):
        peer, session = await harness.open_raw()
        await peer.send(Hello(), Subscribe(publisher=publisher, subscriber=1, initial_demand=10), Goodbye(reason="bye"))
        messages = await peer.rest()
        assert messages == [SESSION_HELLO, Goodbye(reason="goodbye")]
        await session.wait_closed()
        assert session.close_reason == "bye"
        await assert_recovered(harness, session)


async def test_many_subscribes_then_goodbye_in_one_write(harness) -> None:
    with trio.fail_after(10):
        peer, session = await harness.open_raw()
        subscribes = [Subscribe(publisher="range?count=3", subscriber=n, initial_demand=3) for n in range(1, 3001)]
        await peer.send(Hello(), *subscribes, Goodbye(reason="bye"))
        messages = await peer.rest()
        assert messages[0] == SESSION_HELLO and messages[-1] == Goodbye(reason="goodbye")
        assert sum(isinstance(m, Goodbye) for m in messages) == 1
        await session.wait_closed()
        await assert_recovered(harness, session)
