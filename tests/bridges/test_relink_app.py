"""The Relink app server and the ``relink://`` client, over real sockets on 127.0.0.1.

A raw connector (``open_relink_link``) checks the mapping message by message:
subscribe, elements within the window, completion, errors, cancellation and
id reuse, the server's shutdown; then the rstreams peer reads through a
proxy that cuts the connection mid-stream.
"""

from __future__ import annotations

from functools import partial

import pytest
import trio
from conftest import add_idle_publisher
from relink_proxy import CuttingProxy

import examples.demo
import rstreams
from bridges.relink import (
    SHUTTING_DOWN,
    HandshakeRejected,
    LinkConfig,
    RelinkAppServer,
    RelinkClosed,
    RelinkLink,
    RelinkSettings,
    connect_relink_url,
    open_relink_link,
)
from rstreams.support import listener_port

FAST = RelinkSettings(reconnect_delay=0.01, reconnect_max_delay=0.05, shutdown_timeout=1.0)


def element(n: int) -> tuple[bytes]:
    return (n.to_bytes(8, "big"),)


async def start(nursery: trio.Nursery, settings: RelinkSettings = FAST) -> tuple[RelinkAppServer, int]:
    server = RelinkAppServer(examples.demo.app, settings=settings)
    listeners = await nursery.start(partial(server.serve_tcp, "127.0.0.1", 0))
    return server, listener_port(listeners[0])


def sizes(size: int) -> LinkConfig:
    return LinkConfig(connector_id_size=size, listener_id_size=size)


async def everything(link: RelinkLink, channel: int) -> list[tuple[bytes, ...]]:
    return [parts async for parts in link.inbound(channel)]


@pytest.mark.parametrize("size, channel", [(0, 0), (1, 200), (3, 0x10203), (8, 2**64 - 1)])
async def test_subscribe_and_complete_with_every_id_size(nursery: trio.Nursery, size: int, channel: int) -> None:
    _, port = await start(nursery)
    with trio.fail_after(10):
        async with open_relink_link("127.0.0.1", port, config=sizes(size), settings=FAST) as link:
            replies = link.inbound(channel)
            await link.send(channel, [b"range?count=5"])
            assert [parts async for parts in replies] == [element(n) for n in range(5)]
            # Close ours; then the id is free again, for another subscription.
            await link.close_channel(channel)
            await link.send(channel, [b"range?count=2"])
            assert await everything(link, channel) == [element(0), element(1)]


async def test_errors_are_a_two_part_message_then_the_close(nursery: trio.Nursery) -> None:
    _, port = await start(nursery)
    with trio.fail_after(10):
        async with open_relink_link("127.0.0.1", port, config=sizes(1), settings=FAST) as link:
            for channel, request in enumerate([[b"nothing-here"], [b"fail?after=2"], [b"range", b"two parts"], [b"\xff"]]):
                replies = link.inbound(channel)
                await link.send(channel, request)
                got = [parts async for parts in replies]
                *elements, (empty, text) = got
                assert empty == b""
                if channel == 0:
                    assert elements == [] and text == b"no such publisher: nothing-here"
                elif channel == 1:
                    assert elements == [element(0), element(1)] and text.startswith(b"fail: ")
                else:
                    assert elements == [] and b"one part" in text


async def test_unequal_id_sizes_or_transactions_are_refused(nursery: trio.Nursery) -> None:
    _, port = await start(nursery)
    with trio.fail_after(10):
        for config in (LinkConfig(connector_id_size=1, listener_id_size=2), LinkConfig(connector_transactions=True)):
            with pytest.raises(HandshakeRejected):
                async with open_relink_link("127.0.0.1", port, config=config, settings=FAST):
                    pass  # pragma: no cover
        with pytest.raises(HandshakeRejected):
            async with open_relink_link("127.0.0.1", port, endpoint="other", settings=FAST):
                pass  # pragma: no cover


async def test_never_more_than_the_window_beyond_what_was_consumed(nursery: trio.Nursery) -> None:
    window = 4
    server, port = await start(nursery, RelinkSettings(send_window=window, ack_delay=0.01))
    with trio.fail_after(10):
        async with open_relink_link("127.0.0.1", port, config=sizes(1), settings=FAST) as link:
            replies = link.inbound(9)
            await link.send(9, [b"range?count=40"])
            # Elements fill the window but for one message, kept for the
            # error that may end the stream (it must not wait for us).
            while len(replies) < window - 1:
                await trio.sleep(0.01)
            await trio.sleep(0.2)  # a server ignoring the window would have sent more by now
            assert len(replies) == window - 1
            [served] = server.links
            assert served.connection is not None and served.connection.machine.unacknowledged(9) == window - 1
            got = []
            async for parts in replies:
                assert len(replies) <= window
                got.append(parts)
            assert got == [element(n) for n in range(40)]


async def test_a_stream_that_completes_empty_opens_the_channel_with_a_message_of_no_parts(nursery: trio.Nursery) -> None:
    # A channel opens with its first message, and the close of one never
    # opened is ignored: without the message of no parts an empty stream
    # never completed (fetch and sub hung).
    _, port = await start(nursery, RelinkSettings(send_window=4, ack_delay=0.01))
    with trio.fail_after(10):
        async with open_relink_link("127.0.0.1", port, config=sizes(1), settings=FAST) as link:
            replies = link.inbound(9)
            await link.send(9, [b"range?count=0"])
            assert await everything(link, 9) == [()]
            assert replies.ended
        async with connect_relink_url(f"relink://127.0.0.1:{port}", settings=FAST) as peer:
            assert await peer.fetch("range?count=0", 1) == []
            async with peer.subscribe("range?count=0") as numbers:
                assert [raw async for raw in numbers] == []
            assert await peer.fetch("range?count=2", 5) == [element(n)[0] for n in range(2)]


async def test_closing_our_channel_cancels_the_subscription(nursery: trio.Nursery) -> None:
    server, port = await start(nursery, RelinkSettings(send_window=4, ack_delay=0.01))
    with trio.fail_after(10):
        async with open_relink_link("127.0.0.1", port, config=sizes(1), settings=FAST) as link:
            replies = link.inbound(1)
            await link.send(1, [b"range?count=1000000"])
            assert await replies.receive() == element(0)
            replies.discard()  # what a leaving subscriber does: drop the rest
            await link.close_channel(1)  # acknowledged once the server's side is over
            await replies.wait_closed()
            # Reuse the id at once: a fresh subscription, nothing of the old one.
            await link.send(1, [b"range?count=3"])
            assert await everything(link, 1) == [element(n) for n in range(3)]


async def test_the_server_s_shutdown_fails_running_subscriptions(nursery: trio.Nursery) -> None:
    server, port = await start(nursery, RelinkSettings(send_window=2, ack_delay=0.01, shutdown_timeout=2.0))
    with trio.fail_after(10):
        async with open_relink_link("127.0.0.1", port, config=sizes(1), settings=FAST) as link:
            replies = link.inbound(5)
            await link.send(5, [b"range?count=1000000"])
            assert await replies.receive() == element(0)
            async with trio.open_nursery() as inner:
                inner.start_soon(server.aclose)
                got = [parts async for parts in replies]
                assert got[-1] == (b"", SHUTTING_DOWN.encode())
                assert got[:-1] == [element(n) for n in range(1, len(got))]
                while not link.peer_shutdown:
                    await trio.sleep(0.01)
                await link.aclose()
            assert server.links == ()


async def test_the_rstreams_peer_reads_across_cuts(nursery: trio.Nursery) -> None:
    _, port = await start(nursery, RelinkSettings(send_window=16))
    proxy = CuttingProxy(port)
    await nursery.start(proxy.serve)
    with trio.fail_after(15):
        async with connect_relink_url(f"relink://127.0.0.1:{proxy.port}/rstreams?id_size=2", settings=FAST) as peer:
            got = []
            async with peer.subscribe("range?count=500", prefetch=8) as numbers:
                async for raw in numbers:
                    got.append(int.from_bytes(raw, "big"))
                    if len(got) % 120 == 0:
                        proxy.cut()
            assert got == list(range(500))
            assert proxy.connections >= 5
            assert await peer.fetch("range?count=3", 10) == [element(n)[0] for n in range(3)]


async def test_relink_urls_are_checked() -> None:
    for url in ("relink://127.0.0.1:1?id_size=9", "relink://127.0.0.1:1?nope=1", "relink://127.0.0.1", "relink://127.0.0.1:1?id_size=x"):
        with pytest.raises(ValueError):
            async with rstreams.connect(url):
                pass  # pragma: no cover


async def test_the_documented_bytes_are_what_the_server_does(nursery: trio.Nursery) -> None:
    # A connector written from the spec alone: the handshake, then the
    # subscribe of docs/bridges/relink.md; the server answers with exactly
    # the documented elements and close, then the error and close.
    from relink_examples import subscribe_examples

    from bridges.relink import HandshakeRequest, encode_request, encode_version

    wire = subscribe_examples()
    _, port = await start(nursery)
    with trio.fail_after(10):
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        async with stream:

            async def read(size: int) -> bytes:
                data = b""
                while len(data) < size:
                    chunk = await stream.receive_some(size - len(data))
                    assert chunk, "the server closed the connection"
                    data += chunk
                return data

            await stream.send_all(encode_version())
            assert await read(8) == bytes(8)
            await stream.send_all(encode_request(HandshakeRequest(endpoint_name="rstreams", config=sizes(1))))
            reply = await read(16)
            assert 1 <= int.from_bytes(reply[8:], "little") < 2**63  # a new link (its id drawn at random)
            await stream.send_all(wire["subscribe"])
            assert await read(len(wire["subscribe-elements"])) == wire["subscribe-elements"]


async def test_the_peer_reuses_its_only_channel_after_every_kind_of_end(nursery: trio.Nursery) -> None:
    # id_size=0: one channel each way, so each subscription waits for the
    # previous one's channel to be closed on both sides, and must see
    # nothing of it: left early, never requested, completed, failed.
    _, port = await start(nursery, RelinkSettings(send_window=4, ack_delay=0.01))
    with trio.fail_after(10):
        async with connect_relink_url(f"relink://127.0.0.1:{port}?id_size=0", settings=FAST) as peer:
            async with peer.subscribe("range?count=100000", prefetch=1) as numbers:
                assert bytes(await numbers.__anext__()) == element(0)[0]
            async with peer.subscribe("range?count=5", prefetch=0):
                pass  # no demand: nothing was ever sent
            assert await peer.fetch("range?count=3", 10) == [element(n)[0] for n in range(3)]
            with pytest.raises(rstreams.UnknownPublisher):
                await peer.fetch("nothing-here", 1)
            assert await peer.fetch("range?count=2", 10) == [element(n)[0] for n in range(2)]


async def test_the_subscriber_s_prefetch_is_the_consumed_ack_window(nursery: trio.Nursery) -> None:
    # A link ack delay far beyond the test: acknowledgements go out only
    # because prefetch (4) elements were taken; the listener's window (6)
    # would otherwise stall the stream after 6 elements.
    server, port = await start(nursery, RelinkSettings(send_window=6))
    slow_acks = RelinkSettings(ack_delay=3600.0, shutdown_timeout=0.5)
    with trio.fail_after(10):
        async with connect_relink_url(f"relink://127.0.0.1:{port}?id_size=1", settings=slow_acks) as peer:
            async with peer.subscribe("range?count=50", prefetch=4) as numbers:
                got = [int.from_bytes(raw, "big") async for raw in numbers]
            assert got == list(range(50))


async def test_a_peer_s_stream_ends_as_closed_by_the_peer_when_the_server_stops(nursery: trio.Nursery) -> None:
    # The listener's "server shutting down" is the server leaving, as a
    # goodbye over tcp://, not the publisher failing.
    server, port = await start(nursery, RelinkSettings(send_window=2, ack_delay=0.01, shutdown_timeout=2.0))
    with trio.fail_after(10):
        async with connect_relink_url(f"relink://127.0.0.1:{port}", settings=FAST) as peer:
            with pytest.raises(RelinkClosed, match=SHUTTING_DOWN) as ended:
                async with peer.subscribe("range?count=1000000", prefetch=1) as numbers:
                    async for raw in numbers:
                        if raw == element(3)[0]:
                            nursery.start_soon(server.aclose)
            assert ended.value.by_peer
            with pytest.raises(RelinkClosed) as caught:  # the listener shut the link down: no new streams
                await peer.fetch("range?count=1", 1)
            assert caught.value.by_peer
        assert server.links == ()


async def test_one_channel_reused_across_cuts_never_mixes_subscriptions(nursery: trio.Nursery) -> None:
    # One channel each way (id_size=0), so every subscription reuses the id
    # of the one before, left early or read to the end, while the proxy
    # cuts the connection now and then: each must see exactly its own
    # elements, from 0, in order.
    _, port = await start(nursery, RelinkSettings(send_window=8, ack_delay=0.01))
    proxy = CuttingProxy(port)
    await nursery.start(proxy.serve)
    with trio.fail_after(20):
        async with connect_relink_url(f"relink://127.0.0.1:{proxy.port}?id_size=0", settings=FAST) as peer:
            for round_ in range(24):
                count, leave_after = 5 + round_ % 7, round_ % 3 + 2
                got = []
                async with peer.subscribe(f"range?count={count}", prefetch=2) as numbers:
                    async for raw in numbers:
                        got.append(int.from_bytes(raw, "big"))
                        if round_ % 4 == 1 and len(got) == 1:
                            proxy.cut()
                        if round_ % 2 and len(got) == leave_after:
                            break
                expected = leave_after if round_ % 2 else count
                assert got == list(range(expected)), (round_, got)
            assert proxy.connections >= 5


async def test_a_listener_window_smaller_than_the_prefetch_does_not_stall(nursery: trio.Nursery) -> None:
    # The listener may send 3 ahead; the subscriber asks for 64 at a time:
    # having taken everything there is, the client acknowledges at once.
    _, port = await start(nursery, RelinkSettings(send_window=3))
    slow_acks = RelinkSettings(ack_delay=3600.0, shutdown_timeout=0.5)
    with trio.fail_after(10):
        async with connect_relink_url(f"relink://127.0.0.1:{port}?id_size=1", settings=slow_acks) as peer:
            async with peer.subscribe("range?count=40", prefetch=64) as numbers:
                assert [bytes(raw) async for raw in numbers] == [element(n)[0] for n in range(40)]


async def test_relinks_urls_speak_tls(nursery: trio.Nursery) -> None:
    import ssl

    import trustme

    ca = trustme.CA()
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(server_context)
    client_context = ssl.create_default_context()
    ca.configure_trust(client_context)
    server = RelinkAppServer(examples.demo.app, settings=FAST)
    listeners = await nursery.start(partial(server.serve_tcp, "127.0.0.1", 0, server_context))
    url = f"relinks://127.0.0.1:{listener_port(listeners[0])}/rstreams"
    with trio.fail_after(10):
        async with rstreams.connect(url, ssl_context=client_context) as peer:
            assert await peer.fetch("range?count=2", 10) == [element(0)[0], element(1)[0]]
        with pytest.raises(ValueError):
            async with connect_relink_url(url.replace("relinks", "relink"), ssl_context=client_context):
                pass  # pragma: no cover


async def test_subscriptions_per_link_are_bounded(nursery: trio.Nursery) -> None:
    server = RelinkAppServer(examples.demo.app, settings=RelinkSettings(send_window=1), max_subscriptions=2)
    listeners = await nursery.start(partial(server.serve_tcp, "127.0.0.1", 0))
    with trio.fail_after(10):
        async with open_relink_link("127.0.0.1", listener_port(listeners[0]), config=sizes(1), settings=FAST) as link:
            running = [link.inbound(channel) for channel in (1, 2)]
            for channel in (1, 2):
                await link.send(channel, [b"range?count=1000"])
                assert await running[channel - 1].receive() == element(0)  # then the window holds them
            await link.send(3, [b"range?count=3"])
            assert await everything(link, 3) == [(b"", b"too many subscriptions")]
            await link.close_channel(3)
            running[0].discard()
            await link.close_channel(1)  # one ends: room for another
            await link.send(3, [b"range?count=3"])
            assert await everything(link, 3) == [element(n) for n in range(3)]


async def test_the_ack_window_grows_with_an_adaptive_subscriber_s_demand(nursery: trio.Nursery) -> None:
    # An adaptive subscriber (prefetch=None) starts with ADAPTIVE_INITIAL
    # demand and raises it while it keeps up; the stream's consumed-ack window
    # must grow with it, or acknowledgements go out every ADAPTIVE_INITIAL
    # elements however much the subscriber takes at once. The link's own
    # triggers are out of the way (ack delay and ack window far beyond the
    # test), and the listener's window is large, so acks go out only from
    # run_stream: when the stream's ack window is full, or when it took all
    # that was received. The second says nothing about the window, so only
    # flushes made while the inbound queue still held messages are judged:
    # each of those must cover at least the largest batch taken so far (a
    # batch is at most the demand, and the window is at least the highest
    # demand seen). The consumer checkpoints per element so the fast producer
    # keeps the queue non-empty and such flushes happen.
    _, port = await start(nursery, RelinkSettings(send_window=4096))
    slow_acks = RelinkSettings(ack_delay=3600.0, ack_window=1_000_000, shutdown_timeout=0.5)
    taken = acknowledged = largest_batch = 0
    window_full: list[tuple[int, int]] = []  # (elements the flush covers, largest batch before it)
    queues = []
    with trio.fail_after(15):
        async with connect_relink_url(f"relink://127.0.0.1:{port}?id_size=1", settings=slow_acks) as peer:
            link = peer.link
            open_inbound, flush_acks = link.inbound, link.flush_acks

            def inbound(channel: int):  # type: ignore[no-untyped-def]
                queue = open_inbound(channel)
                consume = queue.consume

                def counting_consume(count: int = 1) -> None:
                    nonlocal taken, largest_batch
                    taken += count
                    largest_batch = max(largest_batch, count)
                    consume(count)

                queue.consume = counting_consume  # type: ignore[method-assign]
                queues.append(queue)
                return queue

            def counting_flush_acks() -> None:
                nonlocal acknowledged
                if queues and len(queues[-1]):
                    window_full.append((taken - acknowledged, largest_batch))
                acknowledged = taken
                flush_acks()

            link.inbound, link.flush_acks = inbound, counting_flush_acks  # type: ignore[method-assign]
            async with peer.subscribe("range?count=5000", prefetch=None) as numbers:
                got = []
                async for raw in numbers:
                    got.append(int.from_bytes(raw, "big"))
                    await trio.lowlevel.checkpoint()
            assert got == list(range(5000))
    assert largest_batch > rstreams.ADAPTIVE_INITIAL  # the demand grew
    assert window_full, "no flush with messages still queued: the window was never what sent an ack"
    assert all(step >= batch for step, batch in window_full), window_full


async def test_channels_to_idle_publishers_do_not_hold_back_a_live_one(nursery: trio.Nursery) -> None:
    # A channel's first ask, before its element size is known, used to hold
    # all of what the link's subscriptions may ask for until its element
    # came: one channel to a publisher that never sends held back every
    # other channel of the link.
    app = rstreams.Router()
    route = examples.demo.app.resolve("range")
    assert route is not None
    app.add("range", route)
    idle_asked = add_idle_publisher(app)
    server = RelinkAppServer(app, settings=FAST)
    listeners = await nursery.start(partial(server.serve_tcp, "127.0.0.1", 0))
    with trio.fail_after(10):
        async with open_relink_link("127.0.0.1", listener_port(listeners[0]), config=sizes(1), settings=FAST) as link:
            await link.send(1, [b"idle?n=1"])
            assert await idle_asked.receive() == "idle?n=1"  # its first ask is out
            await link.send(3, [b"range?count=100"])
            assert await everything(link, 3) == [element(n) for n in range(100)]
            # And a second idle channel's first ask goes out beside the first's.
            await link.send(2, [b"idle?n=2"])
            assert await idle_asked.receive() == "idle?n=2"


async def test_channels_whose_peer_stopped_consuming_do_not_hold_back_the_others(nursery: trio.Nursery) -> None:
    # Elements count in the link's half for elements in hand (shared by its
    # channels) from the app session until the link has them. A channel
    # whose window is full (its peer consumes nothing) must not wait there
    # with a batch counted: four such channels took the whole half (4 MiB of
    # an 8 MiB budget, 1 MiB elements, a window of one message), and a fifth
    # channel's first element, and the live channel's behind it, waited for
    # good though the connection's budget had room.
    settings = RelinkSettings(
        reconnect_delay=0.01, reconnect_max_delay=0.05, shutdown_timeout=1.0, send_window=1, max_connection_memory=8 * 1024 * 1024
    )
    _, port = await start(nursery, settings)
    with trio.fail_after(20):
        async with open_relink_link("127.0.0.1", port, config=sizes(1), settings=FAST) as link:
            for channel in range(1, 6):
                await link.send(channel, [b"blob?count=1000&size=1048576"])  # never read
            while link.held_bytes < 5 * 1024 * 1024:  # their first elements came: their windows are full
                await trio.sleep(0.01)
            # (A window of one message: each element waits for the last one's ack.)
            await link.send(9, [b"range?count=3"])
            assert await everything(link, 9) == [element(n) for n in range(3)]


async def test_a_lone_channel_asks_for_many_large_elements_at_once_and_a_second_halves_its_asks(nursery: trio.Nursery) -> None:
    # A budget of 8 MiB, so half of it is 4 MiB: alone, a channel of 64 KiB
    # elements asks for up to 64 at a time (its share is that whole half; a
    # share of the 1,024 subscriptions that may run was 2 KiB, one element
    # per ask). While a second channel runs (one that sent its element and
    # holds), the asks are 32. The publisher records the demand it sees
    # before each element.
    app = rstreams.Router()
    demands: dict[str, list[int]] = {"a": [], "b": [], "held": []}
    release = trio.Event()

    @app.publisher("big")
    async def publish_big(sink: rstreams.Sink, request: rstreams.SubscribeRequest) -> None:
        seen = demands[request.params["name"]]
        for _ in range(int(request.params["count"])):
            await sink.wait_demand()
            seen.append(sink.demand)
            await sink.send(bytes(65536))
        if request.params["name"] == "held":
            await release.wait()

    settings = RelinkSettings(max_connection_memory=8 * 1024 * 1024, shutdown_timeout=1.0)
    server = RelinkAppServer(app, settings=settings)
    listeners = await nursery.start(partial(server.serve_tcp, "127.0.0.1", 0))
    with trio.fail_after(20):
        async with open_relink_link("127.0.0.1", listener_port(listeners[0]), config=sizes(1), settings=settings) as link:
            await link.send(1, [b"big?name=a&count=200"])
            assert len(await everything(link, 1)) == 200
            assert max(demands["a"]) == 64
            await link.send(2, [b"big?name=held&count=1"])
            while not demands["held"]:
                await trio.sleep(0.01)
            await link.send(3, [b"big?name=b&count=200"])
            assert len(await everything(link, 3)) == 200
            assert max(demands["b"]) == 32
            release.set()
            assert len(await everything(link, 2)) == 1


def test_an_endpoint_no_request_could_name_is_refused_when_the_server_is_made() -> None:
    # Lone surrogates (no UTF-8 form) or over 255 bytes: such a listener was
    # served, and every connector was refused as if it had asked for another.
    for endpoint in (b"caf\xe9".decode("utf-8", "surrogateescape"), "e" * 256):
        with pytest.raises(ValueError, match="endpoint_name"):
            RelinkAppServer(examples.demo.app, endpoint=endpoint)
    RelinkAppServer(examples.demo.app, endpoint="é" * 127)  # 254 bytes: fits


async def test_a_connector_that_stopped_consuming_still_learns_the_server_stopped(nursery: trio.Nursery) -> None:
    # The connector holds a full window and takes nothing more while the
    # server stops: the error that ends its stream goes out past the window
    # (onError needs no demand), so once it reads again it gets every
    # element sent, then the listener's shutdown, not a link lost a minute
    # later.
    server, port = await start(nursery, RelinkSettings(send_window=4, ack_delay=0.01, shutdown_timeout=0.5))
    with trio.fail_after(10):
        async with connect_relink_url(f"relink://127.0.0.1:{port}", settings=FAST) as peer:
            async with peer.subscribe("range?count=1000000", prefetch=4) as numbers:
                got = [await numbers.__anext__() for _ in range(4)]
                await trio.sleep(0.2)  # the listener fills the window again and waits
                await server.aclose()
                with pytest.raises(RelinkClosed, match=SHUTTING_DOWN) as ended:
                    async for raw in numbers:
                        got.append(raw)
            assert ended.value.by_peer
            assert [int.from_bytes(raw, "big") for raw in got] == list(range(len(got)))


async def test_messages_after_a_subscribe_are_ignored_without_holding_them(
    nursery: trio.Nursery, caplog: pytest.LogCaptureFixture
) -> None:
    # "Further messages on a channel that already carries a subscription are
    # consumed and ignored": they were held until the subscription ended,
    # and 30,000 empty ones (within the window) filled a 1 MiB budget: the
    # connection was closed for "memory budget exceeded" (or, once reads fit
    # the budget, stuck with it full). Now they cost nothing while they wait.
    settings = RelinkSettings(
        reconnect_delay=0.01, reconnect_max_delay=0.05, shutdown_timeout=1.0, max_connection_memory=1024 * 1024
    )
    server, port = await start(nursery, settings)
    with trio.fail_after(30):
        async with open_relink_link("127.0.0.1", port, config=sizes(1), settings=FAST) as link:
            replies = link.inbound(1)
            await link.send(1, [b"ticker?interval=0.01"])
            for _ in range(30000):
                await link.send(1, [b""])
            for _ in range(5):
                await replies.receive()
            assert len(server.links) == 1
            (handle,) = server.links
            assert handle.held_bytes < 64 * 1024, handle.held_bytes
    assert "memory budget exceeded" not in caplog.text
