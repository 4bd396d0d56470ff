"""Keepalive and the idle timeout, over memory streams and real TCP sockets.

Time is trio's MockClock (``autojump_clock``): when every task waits, the
clock jumps to the next deadline, so minutes of silence take no real time.
Over loopback TCP a sent message is in the peer's socket buffer before the
sender blocks, so the clock cannot jump past a pong that is on its way.
"""

from __future__ import annotations

import logging

import pytest
import trio
import trio.testing

import rstreams
from rstreams.protocol import Extension, Goodbye, Hello, Ping, Pong, Subscribe, Subscribed

from ._support import SESSION_HELLO, RawPeer, fetch_range, standard_app, wait_no_session_tasks

KEEPALIVE = int(Extension.KEEPALIVE)

# The server of the ``harness`` fixture: keepalive and idle timeout short
# enough to read in a test (virtual time anyway).
HARNESS_CONFIG = rstreams.SessionConfig(keepalive_interval=10, keepalive_timeout=5, idle_timeout=100)


async def forever(sink: rstreams.Sink, request: rstreams.SubscribeRequest) -> None:
    await trio.sleep_forever()


# ---- both sides are rstreams sessions ------------------------------------------------


@pytest.mark.parametrize("transport", ["memory", "tcp", "ws"])
async def test_live_sessions_ping_each_other_and_stay_open(connect, autojump_clock) -> None:
    config = rstreams.SessionConfig(keepalive_interval=10, keepalive_timeout=5)
    with trio.fail_after(3600):
        async with connect(standard_app(), config=config) as (client, server):
            sent = client.statistics().bytes_sent, server.statistics().bytes_sent
            await trio.sleep(600)  # 60 intervals, each side pings every 10 s
            assert not client.closed and not server.closed
            # At least one ping and one pong (3 bytes each) per interval.
            assert client.statistics().bytes_sent - sent[0] >= 59 * 6
            assert server.statistics().bytes_sent - sent[1] >= 59 * 6
            await fetch_range(client)


async def test_sessions_agree_on_keepalive_in_their_hellos() -> None:
    client_stream, server_stream = trio.testing.memory_stream_pair()
    peer = RawPeer(server_stream)
    with trio.fail_after(10):
        async with rstreams.open_stream_session(client_stream):
            assert await peer.receive() == Hello(extensions=(KEEPALIVE,))
            await peer.send(Goodbye(reason="bye"))
    off = rstreams.SessionConfig(keepalive_interval=None)
    client_stream, server_stream = trio.testing.memory_stream_pair()
    peer = RawPeer(server_stream)
    with trio.fail_after(10):
        async with rstreams.open_stream_session(client_stream, config=off):
            assert await peer.receive() == Hello()
            await peer.send(Goodbye(reason="bye"))


# ---- a peer that stops answering -------------------------------------------------------


async def test_a_server_that_stops_answering_is_detected(raw_publisher_peer, autojump_clock, caplog) -> None:
    caplog.set_level(logging.INFO)
    config = rstreams.SessionConfig(keepalive_interval=10, keepalive_timeout=5)
    with trio.fail_after(600):
        async with raw_publisher_peer(config=config) as (client, peer):
            assert await peer.receive() == SESSION_HELLO
            await peer.send(Hello(extensions=(KEEPALIVE,)))
            async with trio.open_nursery() as nursery:

                async def subscribe() -> None:
                    with pytest.raises(rstreams.SessionBroken, match="keepalive timeout: no pong within 5 s"):
                        async with client.subscribe("ticker") as ticker:
                            async for _ in ticker:
                                pass  # pragma: no cover

                nursery.start_soon(subscribe)
                assert isinstance(await peer.receive(), Subscribe)
                await peer.send(Subscribed(subscriber=1))
                # The first ping is answered, on time: the session stays.
                start = trio.current_time()
                assert await peer.receive() == Ping(nonce=1)
                assert trio.current_time() - start == pytest.approx(10)
                await trio.sleep(4)
                await peer.send(Pong(nonce=1))
                # The second is not: 5 s later the client says goodbye.
                assert await peer.receive() == Ping(nonce=2)
                pinged = trio.current_time()
                assert await peer.receive() == Goodbye(reason="keepalive timeout: no pong within 5 s")
                assert trio.current_time() - pinged == pytest.approx(5)
            await client.wait_closed()
            assert client.close_reason == "keepalive timeout: no pong within 5 s"
            # A call after the close says what the streams heard: the
            # transport broke (it said the local side had closed).
            with pytest.raises(rstreams.SessionBroken, match="keepalive timeout") as late:
                async with client.subscribe("ticker"):
                    pass  # pragma: no cover
            assert late.value.by_peer is True
    # One line, at info: the application hears it as SessionBroken (and
    # `rstreams sub`, at warning, printed the log line beside its own).
    records = [record for record in caplog.records if "keepalive timeout" in record.getMessage()]
    assert [record.levelno for record in records] == [logging.INFO]


async def test_server_drops_a_client_that_stops_answering(harness, autojump_clock) -> None:
    with trio.fail_after(600):
        peer, session = await harness.open_raw()
        harness.server.app.add("forever", forever)
        await peer.send(Hello(extensions=(KEEPALIVE,)), Subscribe(publisher="forever", subscriber=1, initial_demand=1))
        assert await peer.receive() == SESSION_HELLO
        assert await peer.receive() == Subscribed(subscriber=1)
        for nonce in (1, 2, 3):
            assert await peer.receive() == Ping(nonce=nonce)
            await peer.send(Pong(nonce=nonce))
        assert await peer.receive() == Ping(nonce=4)
        # No pong: the server gives up on this client, and only this one.
        reason = await peer.expect_goodbye_and_close()
        assert reason == "keepalive timeout: no pong within 5 s"
        await session.wait_closed()
        async with harness.open_client() as client:
            await fetch_range(client)
        await wait_no_session_tasks()


async def test_pings_of_a_peer_that_did_not_agree_are_a_protocol_error(harness) -> None:
    with trio.fail_after(10):
        peer, session = await harness.open_raw()
        await peer.send(Hello(), Ping(nonce=1))
        messages = await peer.rest()
        assert messages[0] == SESSION_HELLO
        assert messages[-1] == Goodbye(reason="protocol error: ping without the keepalive extension in both hellos")
        await session.wait_closed()


async def test_a_peer_without_keepalive_is_never_pinged(harness, autojump_clock) -> None:
    with trio.fail_after(3600):
        peer, session = await harness.open_raw()
        harness.server.app.add("forever", forever)
        await peer.send(Hello(), Subscribe(publisher="forever", subscriber=1, initial_demand=1))
        assert await peer.receive() == SESSION_HELLO
        assert await peer.receive() == Subscribed(subscriber=1)
        with trio.move_on_after(1000):
            message = await peer.receive()
            pytest.fail(f"unexpected {message!r}")  # pragma: no cover
        assert not session.closed  # it holds a stream open: not idle either
        await peer.send(Goodbye(reason="bye"))
        assert await peer.expect_goodbye_and_close() == "goodbye"


# ---- the idle timeout -----------------------------------------------------------------


async def test_an_idle_peer_is_closed_with_goodbye(harness, autojump_clock) -> None:
    with trio.fail_after(600):
        peer, session = await harness.open_raw()
        start = trio.current_time()
        await peer.send(Hello())
        reason = await peer.expect_goodbye_and_close()
        assert reason == "idle timeout: nothing received and no stream open for 100 s"
        assert trio.current_time() - start == pytest.approx(100)
        await session.wait_closed()
        assert session.close_reason == reason
        await wait_no_session_tasks()


async def test_pings_and_pongs_do_not_keep_a_peer_from_being_idle(harness, autojump_clock) -> None:
    with trio.fail_after(600):
        peer, session = await harness.open_raw()
        start = trio.current_time()
        await peer.send(Hello(extensions=(KEEPALIVE,)))
        assert await peer.receive() == SESSION_HELLO
        nonce = 1
        while True:
            message = await peer.receive()
            if isinstance(message, Goodbye):
                break
            assert message == Ping(nonce=nonce)
            await peer.send(Pong(nonce=message.nonce), Ping(nonce=nonce))
            assert await peer.receive() == Pong(nonce=nonce)
            nonce += 1
        assert message.reason.startswith("idle timeout")
        assert trio.current_time() - start == pytest.approx(100)
        assert nonce > 5


async def test_messages_and_open_streams_hold_off_the_idle_timeout(harness, autojump_clock) -> None:
    with trio.fail_after(3600):
        peer, session = await harness.open_raw()
        harness.server.app.add("forever", forever)
        start = trio.current_time()
        await peer.send(Hello())
        assert await peer.receive() == SESSION_HELLO
        # A subscribe refused at 90 s: something was said, the clock restarts.
        await trio.sleep(90)
        await peer.send(Subscribe(publisher="nothing", subscriber=1, initial_demand=1))
        await peer.receive()  # onError: no such publisher
        # A stream open from 180 s to 500 s: not idle while it is open.
        await trio.sleep(90)
        await peer.send(Subscribe(publisher="forever", subscriber=2, initial_demand=1))
        assert await peer.receive() == Subscribed(subscriber=2)
        await trio.sleep(320)
        assert not session.closed
        from rstreams.protocol import Cancel

        await peer.send(Cancel(subscriber=2))
        cancelled = trio.current_time()
        reason = await peer.expect_goodbye_and_close()
        assert reason.startswith("idle timeout")
        # Between the timeout and a quarter more after the last stream ended.
        assert 100 <= trio.current_time() - cancelled <= 125
        assert trio.current_time() - start > 500


async def test_a_client_session_has_no_idle_timeout_by_default(raw_publisher_peer, autojump_clock) -> None:
    with trio.fail_after(7200):
        async with raw_publisher_peer() as (client, peer):
            assert await peer.receive() == SESSION_HELLO
            await peer.send(Hello())
            await trio.sleep(3600)
            assert not client.closed


def test_servers_default_to_a_five_minute_idle_timeout() -> None:
    assert rstreams.Server(standard_app()).config.idle_timeout == 300
    assert rstreams.SessionConfig().idle_timeout is None
    assert rstreams.SessionConfig().keepalive_interval == 30
    assert rstreams.SessionConfig().keepalive_timeout == 30


@pytest.mark.parametrize("name", ["idle_timeout", "keepalive_interval", "keepalive_timeout"])
@pytest.mark.parametrize("value", [0, -1, float("nan")])
def test_config_refuses_non_positive_times(name: str, value: float) -> None:
    with pytest.raises(ValueError, match=name):
        rstreams.SessionConfig(**{name: value})  # type: ignore[arg-type]
