"""A subscribe whose publisher name the app session cannot carry, over real sockets on 127.0.0.1.

The in-process session to the app carries strings up to the wire's
``max_string_size`` (64 KiB); a longer name (or one whose answer, which
quotes it, is longer) used to close the session, fail
the link's handler and log a traceback of some 4 KB per link. Now it is
answered as an unknown publisher would be, the session never sees it, and
the link goes on serving.
"""

from __future__ import annotations

import logging
from functools import partial

import pytest
import trio

import examples.demo
from bridges.relink import LinkConfig, RelinkAppServer, RelinkLink, RelinkSettings, open_relink_link
from rstreams.protocol import DEFAULT_LIMITS
from rstreams.support import listener_port

FAST = RelinkSettings(reconnect_delay=0.01, reconnect_max_delay=0.05, shutdown_timeout=1.0)
CONFIG = LinkConfig(connector_id_size=1, listener_id_size=1)


async def replies(link: RelinkLink, channel: int, request: bytes) -> list[tuple[bytes, ...]]:
    inbound = link.inbound(channel)
    await link.send(channel, [request])
    got = [parts async for parts in inbound]
    await link.close_channel(channel)
    return got


@pytest.mark.parametrize("size", [66_000, 600_000, DEFAULT_LIMITS.max_string_size])
async def test_an_over_long_name_is_no_such_publisher_and_the_link_goes_on(
    nursery: trio.Nursery, caplog: pytest.LogCaptureFixture, size: int
) -> None:
    caplog.set_level(logging.DEBUG, logger="rstreams")
    server = RelinkAppServer(examples.demo.app, settings=FAST)
    listeners = await nursery.start(partial(server.serve_tcp, "127.0.0.1", 0))
    port = listener_port(listeners[0])
    with trio.fail_after(20):
        async with open_relink_link("127.0.0.1", port, config=CONFIG, settings=FAST) as link:
            for channel in (1, 2):  # twice: the session is still there after the first
                assert await replies(link, channel, b"r" * size) == [(b"", b"no such publisher: a name of %d bytes" % size)]
            assert await replies(link, 3, b"range?count=2") == [((0).to_bytes(8, "big"),), ((1).to_bytes(8, "big"),)]
    assert not [r for r in caplog.records if r.exc_info or "handler failed" in r.getMessage()]
    assert all(len(r.getMessage()) < 1000 for r in caplog.records)  # the peer's name is never logged whole


async def test_a_long_name_within_the_limit_reaches_the_app(nursery: trio.Nursery) -> None:
    server = RelinkAppServer(examples.demo.app, settings=FAST)
    listeners = await nursery.start(partial(server.serve_tcp, "127.0.0.1", 0))
    port = listener_port(listeners[0])
    limit = DEFAULT_LIMITS.max_string_size - 1024  # room for the app's answer, which quotes it
    with trio.fail_after(20):
        async with open_relink_link("127.0.0.1", port, config=CONFIG, settings=FAST) as link:
            (empty, text), = await replies(link, 1, b"r" * limit)
            assert empty == b"" and text.startswith(b"no such publisher: rrrr")  # the app's own answer
            assert await replies(link, 2, b"range?count=1") == [((0).to_bytes(8, "big"),)]


def test_the_decoder_lets_a_large_packet_go_once_it_is_taken() -> None:
    # A link outlives its connection (link_timeout), and what a connection's
    # decoder held of a peer's 600 KB message stayed with it: the attack's
    # server held one per dropped link, over a gigabyte at 75 links/s.
    from bridges.relink import MessagePacket, PacketDecoder, encode_packet

    packet = encode_packet(MessagePacket(channels=(1,), parts=(b"r" * 600_000,)), sender_id_size=1, receiver_id_size=1)
    decoder = PacketDecoder(sender_id_size=1, receiver_id_size=1)
    for start in range(0, len(packet), 65536):
        decoder.feed(packet[start : start + 65536])
    taken = decoder.next_packet()
    assert isinstance(taken, MessagePacket) and taken.parts == (b"r" * 600_000,)
    assert decoder.buffered == 0 and len(decoder._buffer) < 65536
