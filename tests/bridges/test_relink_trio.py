"""The Relink trio side: a connector against a listener over real sockets on 127.0.0.1.

Messages both ways on named and unnamed channels, the send window and the
batched consumed acknowledgements that pace it, close and reuse of a
channel id, transactions, keepalive, graceful shutdown, TLS, and the
handshake's refusals. Reconnection is in ``test_relink_reconnect.py``.
"""

from __future__ import annotations

import logging
import ssl
from functools import partial

import pytest
import trio
import trustme

from bridges.kit import ITEM_COST
from bridges.relink import (
    CommitRequested,
    HandshakeRejected,
    LinkConfig,
    LocalProtocolError,
    MessageReceived,
    RelinkClosed,
    RelinkLink,
    RelinkServer,
    RelinkSettings,
    RollbackRequested,
    open_relink_link,
)
from rstreams.support import listener_port

ONE_BYTE = LinkConfig(connector_id_size=1, listener_id_size=1)
FAST = RelinkSettings(reconnect_delay=0.01, shutdown_timeout=1.0)


async def echo(link: RelinkLink) -> None:
    # Every message back on our channel with the same id; a close, closed.
    async def serve(channel_id: int) -> None:
        inbound = link.inbound(channel_id)
        async for parts in inbound:
            await link.send(channel_id, parts)
        await link.close_channel(channel_id, wait=False)

    async with trio.open_nursery() as nursery:
        while True:
            try:
                channel = await link.accept_channel()
            except trio.EndOfChannel:
                return
            nursery.start_soon(serve, channel.id)


async def start(nursery: trio.Nursery, handler=echo, config: LinkConfig = ONE_BYTE, settings: RelinkSettings = FAST, **kwargs) -> tuple[RelinkServer, int]:  # type: ignore[no-untyped-def]
    server = RelinkServer(handler, {"test": config}, settings=settings)
    listeners = await nursery.start(partial(server.serve_tcp, "127.0.0.1", 0, **kwargs))
    return server, listener_port(listeners[0])


async def test_echo_on_several_channels(nursery: trio.Nursery) -> None:
    _, port = await start(nursery)
    with trio.fail_after(10):
        async with open_relink_link("127.0.0.1", port, endpoint="test", config=ONE_BYTE, settings=FAST) as link:
            replies = {channel: link.inbound(channel) for channel in (0, 7, 255)}
            for channel in replies:
                await link.send(channel, [b"to", bytes([channel]), b""])
            for channel, inbound in replies.items():
                assert await inbound.receive() == (b"to", bytes([channel]), b"")
            # Close: the echo closes its side too, and the id is free again.
            await link.close_channel(7)
            with pytest.raises(trio.EndOfChannel):
                await replies[7].receive()
            again = link.inbound(7)
            assert again is not replies[7]
            await link.send(7, [b"again"])
            assert await again.receive() == (b"again",)


async def test_unnamed_channels(nursery: trio.Nursery) -> None:
    _, port = await start(nursery, config=LinkConfig())
    with trio.fail_after(10):
        async with open_relink_link("127.0.0.1", port, endpoint="test", settings=FAST) as link:
            inbound = link.inbound(0)
            for n in range(100):
                await link.send(0, [n.to_bytes(2, "big") * n])
            assert [await inbound.receive() for _ in range(100)] == [(n.to_bytes(2, "big") * n,) for n in range(100)]


async def test_the_window_bounds_what_is_unconsumed(nursery: trio.Nursery) -> None:
    # The listener pushes 50 messages on its channel 1 as fast as the window
    # lets it; the connector holds at most the window unconsumed, and the
    # listener's 5th send waits until the connector consumes.
    window = 4
    settings = RelinkSettings(send_window=window, ack_delay=0.01)
    sent: list[int] = []
    blocked = trio.Event()

    async def push(link: RelinkLink) -> None:
        for n in range(50):
            if n == window:
                with trio.move_on_after(0.3):
                    await link.send(1, [b"%d" % n])
                    raise AssertionError("a send beyond the window went through")
                blocked.set()
            await link.send(1, [b"%d" % n])
            sent.append(n)
            assert link.connection is not None
            assert link.connection.machine.unacknowledged(1) <= window
        await link.close_channel(1)

    _, port = await start(nursery, handler=push, settings=settings)
    with trio.fail_after(10):
        async with open_relink_link("127.0.0.1", port, endpoint="test", config=ONE_BYTE, settings=settings) as link:
            inbound = link.inbound(1)
            await blocked.wait()
            assert sent == list(range(window))
            got = []
            while True:
                assert len(inbound) <= window
                try:
                    got.append(await inbound.receive())
                except trio.EndOfChannel:
                    break
            assert got == [(b"%d" % n,) for n in range(50)]


async def test_consumed_acknowledgements_are_batched(nursery: trio.Nursery) -> None:
    # With an ack window of 8, consuming 7 sends no acknowledgement at once;
    # the ack delay sends it; the 8th consumption of the next batch at once.
    settings = RelinkSettings(send_window=32, ack_window=8, ack_delay=0.2)
    done = trio.Event()

    async def push(link: RelinkLink) -> None:
        for n in range(16):
            await link.send(0, [b"x"])
        await done.wait()

    _, port = await start(nursery, handler=push, settings=settings)
    with trio.fail_after(10):
        async with open_relink_link("127.0.0.1", port, endpoint="test", config=ONE_BYTE, settings=settings) as link:
            inbound = link.inbound(0)
            for _ in range(7):
                await inbound.receive()
            assert link.connection is not None
            assert link.connection.machine.pending_acks == (0,)
            while link.connection.machine.pending_acks:
                await trio.sleep(0.01)  # the ack timer flushes it
            for _ in range(7):
                await inbound.receive()
            assert link.connection.machine.pending_acks == (0,)
            await inbound.receive()
            assert link.connection.machine.pending_acks == ()  # 8 since the flush: sent at once
            done.set()


async def test_transactions(nursery: trio.Nursery) -> None:
    config = LinkConfig(connector_id_size=1, listener_id_size=1, connector_transactions=True)
    seen: list[object] = []

    async def judge(link: RelinkLink) -> None:
        channel = await link.accept_channel()
        while True:
            try:
                item = await channel.receive_event()
            except trio.EndOfChannel:
                return
            seen.append(item)
            if isinstance(item, CommitRequested):
                await link.answer_commit(item.channel, item.sequence, committed=len(seen) < 5)

    _, port = await start(nursery, handler=judge, config=config)
    with trio.fail_after(10):
        async with open_relink_link("127.0.0.1", port, endpoint="test", config=config, settings=FAST) as link:
            await link.send(3, [b"a"])
            await link.send(3, [b"b"])
            assert await link.commit(3) is True
            await link.send(3, [b"c"])
            await link.rollback(3)
            await link.send(3, [b"d"])
            assert await link.commit(3) is False
            with pytest.raises(LocalProtocolError):
                await link.commit(3)  # nothing sent since
            await link.close_channel(3)
    assert [type(item).__name__ for item in seen] == [
        "MessageReceived", "MessageReceived", "CommitRequested",
        "MessageReceived", "RollbackRequested", "MessageReceived", "CommitRequested",
    ]
    assert isinstance(seen[2], CommitRequested) and seen[2].sequence == 1
    assert isinstance(seen[4], RollbackRequested) and seen[4].sequence == 2
    assert isinstance(seen[0], MessageReceived) and seen[0].parts == (b"a",)


async def test_graceful_shutdown_both_ways(nursery: trio.Nursery) -> None:
    ended: list[BaseException | None] = []

    async def handler(link: RelinkLink) -> None:
        await echo(link)  # returns once the connector shut down
        ended.append(None)

    server, port = await start(nursery, handler=handler)
    with trio.fail_after(10):
        async with open_relink_link("127.0.0.1", port, endpoint="test", config=ONE_BYTE, settings=FAST) as link:
            inbound = link.inbound(2)
            await link.send(2, [b"bye"])
            assert await inbound.receive() == (b"bye",)
        assert isinstance(link.end_reason, RelinkClosed)
        assert link.state is not None and link.state.ended  # both shutdowns went out
        while server.links:
            await trio.sleep(0.01)
    assert ended == [None]


async def test_server_shutdown_ends_the_connector_s_link(nursery: trio.Nursery) -> None:
    server, port = await start(nursery)
    with trio.fail_after(10):
        async with open_relink_link("127.0.0.1", port, endpoint="test", config=ONE_BYTE, settings=FAST) as link:
            inbound = link.inbound(2)
            await link.send(2, [b"hi"])
            assert await inbound.receive() == (b"hi",)
            assert link.peer_shutdown is False
            async with trio.open_nursery() as inner:
                inner.start_soon(server.aclose)
                while not link.peer_shutdown:
                    await trio.sleep(0.01)
                with pytest.raises(trio.EndOfChannel):
                    await inbound.receive()  # the listener closed its channels first
                with pytest.raises(trio.EndOfChannel):
                    await link.accept_channel()
                await link.aclose()  # our shutdown: the link is over on both sides
            assert server.links == ()
            assert link.state is not None and link.state.ended


async def test_keepalive_pings_after_silence(nursery: trio.Nursery) -> None:
    settings = RelinkSettings(keepalive_interval=0.05, ping_timeout=1.0)
    _, port = await start(nursery, settings=settings)
    with trio.fail_after(10):
        async with open_relink_link("127.0.0.1", port, endpoint="test", config=ONE_BYTE, settings=settings) as link:
            assert link.connection is not None
            machine = link.connection.machine
            while machine.statistics().packets_received < 3:  # pongs (and the peer's pings)
                await trio.sleep(0.05)
            assert link.connected


async def test_tls(nursery: trio.Nursery) -> None:
    ca = trustme.CA()
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(server_context)
    client_context = ssl.create_default_context()
    ca.configure_trust(client_context)
    _, port = await start(nursery, ssl_context=server_context)
    with trio.fail_after(10):
        async with open_relink_link(
            "127.0.0.1", port, endpoint="test", config=ONE_BYTE, settings=FAST, ssl_context=client_context
        ) as link:
            inbound = link.inbound(9)
            await link.send(9, [b"secret"])
            assert await inbound.receive() == (b"secret",)


@pytest.mark.parametrize(
    "endpoint, config",
    [("nope", ONE_BYTE), ("test", LinkConfig(connector_id_size=1, listener_id_size=2)), ("test", LinkConfig())],
)
async def test_a_rejected_handshake_closes_the_connection(nursery: trio.Nursery, endpoint: str, config: LinkConfig) -> None:
    _, port = await start(nursery)
    with trio.fail_after(10):
        with pytest.raises(HandshakeRejected):
            async with open_relink_link("127.0.0.1", port, endpoint=endpoint, config=config, settings=FAST):
                pass  # pragma: no cover


async def test_sending_more_than_the_limits_allow_is_refused(nursery: trio.Nursery) -> None:
    _, port = await start(nursery)
    with trio.fail_after(10):
        async with open_relink_link("127.0.0.1", port, endpoint="test", config=ONE_BYTE, settings=FAST) as link:
            with pytest.raises(LocalProtocolError):
                await link.send(1, [b""] * 2000)
            inbound = link.inbound(1)
            await link.send(1, [b"still fine"])  # the window's room was given back
            assert await inbound.receive() == (b"still fine",)




async def test_what_the_application_holds_is_bounded_in_bytes(nursery: trio.Nursery) -> None:
    # Windows count messages; max_read_ahead bounds the bytes held for an
    # application that does not read: the connection stops reading there.
    settings = RelinkSettings(max_read_ahead=64 * 1024, receive_size=16 * 1024, shutdown_timeout=0.2)
    size, channels, each = 8 * 1024, 10, 12

    async def flood(link: RelinkLink) -> None:
        for n in range(each):
            for channel in range(channels):
                await link.send(channel, [bytes([n]) * size])
        await trio.sleep_forever()

    _, port = await start(nursery, handler=flood)
    with trio.fail_after(10):
        async with open_relink_link("127.0.0.1", port, endpoint="test", config=ONE_BYTE, settings=settings) as link:
            inbound = [link.inbound(channel) for channel in range(channels)]
            while link.held_bytes < settings.max_read_ahead:
                await trio.sleep(0.01)
            await trio.sleep(0.2)  # reading on would have taken far more by now
            bound = settings.max_read_ahead + settings.receive_size + size + 64
            assert link.held_bytes <= bound
            for n in range(each):
                for channel in range(channels):
                    assert await inbound[channel].receive() == (bytes([n]) * size,)
                    assert link.held_bytes <= bound
            assert link.held_bytes == 0


async def silent_listener(stream: trio.SocketStream, *, reply: bool) -> None:
    # A listener written from the spec that handshakes (or not), then never answers.
    from bridges.relink import HandshakeReply, decode_request, encode_reply, encode_version

    data = b""
    while len(data) < 8:
        data += await stream.receive_some(4096)
    if not reply:
        await trio.sleep_forever()
    await stream.send_all(encode_version())
    data = data[8:]
    while decode_request(data) is None:
        data += await stream.receive_some(4096)
    await stream.send_all(encode_reply(HandshakeReply(epoch=1_700_000_000_000_000, link_id=1)))
    while await stream.receive_some(4096):
        pass  # pings, unanswered


async def test_a_missing_pong_drops_the_connection_and_the_connector_comes_back(nursery: trio.Nursery) -> None:
    from bridges.relink import RelinkTimeout

    listeners = await nursery.start(trio.serve_tcp, partial(silent_listener, reply=True), 0)
    settings = RelinkSettings(keepalive_interval=0.05, ping_timeout=0.1, reconnect_delay=0.01, shutdown_timeout=0.2)
    with trio.fail_after(10):
        async with open_relink_link("127.0.0.1", listener_port(listeners[0]), config=ONE_BYTE, settings=settings) as link:
            first = link.connection
            assert first is not None
            await first.wait_ended()
            assert isinstance(first.end_reason, RelinkTimeout)
            while link.connection is None or link.connection is first:
                await trio.sleep(0.01)
            request = link.connection.machine.request
            assert request is not None and (request.old_epoch, request.old_link_id) == (1_700_000_000_000_000, 1)


async def test_a_missing_handshake_times_out(nursery: trio.Nursery) -> None:
    from bridges.relink import RelinkTimeout

    listeners = await nursery.start(trio.serve_tcp, partial(silent_listener, reply=False), 0)
    with trio.fail_after(10):
        with pytest.raises(RelinkTimeout):
            async with open_relink_link(
                "127.0.0.1", listener_port(listeners[0]), settings=RelinkSettings(handshake_timeout=0.2)
            ):
                pass  # pragma: no cover


async def test_the_listener_logs_a_connector_that_never_shakes_hands(nursery: trio.Nursery, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="rstreams.bridges")
    _, port = await start(nursery, settings=RelinkSettings(handshake_timeout=0.2))
    with trio.fail_after(10):
        silent = await trio.open_tcp_stream("127.0.0.1", port)
        assert await silent.receive_some() == b""  # closed by the listener, after the log line
        await silent.aclose()
    [record] = [r for r in caplog.records if getattr(r, "event", None) == "session_close"]
    assert record.getMessage().endswith(" over relink: handshake failed: no handshake within 0.2 s")
    assert (record.transport, record.reason) == ("relink", "handshake failed: no handshake within 0.2 s")  # type: ignore[attr-defined]
    assert record.peer.startswith("127.0.0.1:")  # type: ignore[attr-defined]


async def test_send_batch_hands_over_what_the_window_takes(nursery: trio.Nursery) -> None:
    _, port = await start(nursery)
    settings = RelinkSettings(send_window=4, shutdown_timeout=1.0)
    with trio.fail_after(10):
        async with open_relink_link("127.0.0.1", port, endpoint="test", config=ONE_BYTE, settings=settings) as link:
            replies = link.inbound(3)
            messages = [[b"%d" % n] for n in range(10)]
            assert await link.send_batch(3, messages) == 4  # the window's room, in one step
            assert link.connection is not None and link.connection.machine.unacknowledged(3) == 4
            del messages[:4]
            while messages:
                del messages[: await link.send_batch(3, messages)]
            assert [await replies.receive() for _ in range(10)] == [(b"%d" % n,) for n in range(10)]
            assert await link.send_batch(3, []) == 0


async def test_receive_held_takes_what_is_held_up_to_a_limit_and_stops_before_a_commit(nursery: trio.Nursery) -> None:
    # Four items wait on the listener's channel: a, b, c and a commit
    # request. After one receive, receive_held takes the held messages in
    # one step, never past its limit nor the commit, and releases what they
    # held from max_read_ahead at once.
    config = LinkConfig(connector_id_size=1, listener_id_size=1, connector_transactions=True)
    taken: list[object] = []
    done = trio.Event()

    async def judge(link: RelinkLink) -> None:
        channel = await link.accept_channel()
        await channel.wait_more_than(3)
        held = link.held_bytes
        taken.append(await channel.receive(consume=False))
        taken.append(channel.receive_held(0))
        taken.append(channel.receive_held(1, consume=False))
        taken.append(channel.receive_held(10, consume=False))
        taken.append(held - link.held_bytes)
        channel.consume(3)
        commit = await channel.receive_event()
        assert isinstance(commit, CommitRequested)
        await link.answer_commit(commit.channel, commit.sequence, committed=True)
        await channel.wait_more_than(0)
        taken.append(channel.receive_held(10))
        taken.append(link.held_bytes)
        done.set()
        with pytest.raises(trio.EndOfChannel):
            await channel.receive_event()

    _, port = await start(nursery, handler=judge, config=config)
    with trio.fail_after(10):
        async with open_relink_link("127.0.0.1", port, endpoint="test", config=config, settings=FAST) as link:
            for body in (b"a", b"b", b"c"):
                await link.send(3, [body])
            assert await link.commit(3) is True
            await link.send(3, [b"d"])
            await done.wait()
            await link.close_channel(3)
    assert taken[:4] == [(b"a",), [], [(b"b",)], [(b"c",)]]
    assert taken[4] == 3 * (ITEM_COST + 1)  # the three messages, released
    assert taken[5:] == [[(b"d",)], 0]
