"""The Relink listener (``bridges/relink/_serve.py``) against connectors that misbehave.

Over real sockets on 127.0.0.1, with hand-written connectors where a
connector of ours would not do what an attacker does:

* **Link ids are secrets.** A link is resumed by naming its epoch and id,
  and the epoch is in every reply, so ids are drawn at random: a connector
  cannot work out another's link id from its own, a guessed neighbour gets
  a new link of its own, and the link it aimed at keeps its connection.
* **Links without a connection never keep a connection out.** A connection's
  place under ``max_connections`` is free once it ends, whatever becomes of
  its link; the links kept for their connectors count under the same limit
  (they hold what their connections held) and the one that has gone longest
  without a connection is forgotten to make room for a new link. A
  connection refused all the same is logged.
* **A violation is one log line.** Relink has no error packet: the listener
  closes the connection (the link is kept for the connector to come back)
  and says why in one info line naming the peer, as every bridge does.

Every test is bounded by ``fail_after``; the one that waits for the link
timeout runs on trio's autojump clock.
"""

from __future__ import annotations

import itertools
import logging
import socket
import struct
from functools import partial

import pytest
import trio
import trio.testing

from bridges.relink import (
    HandshakeRequest,
    LinkConfig,
    RelinkLink,
    RelinkServer,
    RelinkSettings,
    encode_request,
    encode_version,
    open_relink_link,
)
from rstreams.support import HANDSHAKE_GRACE, listener_port

ONE_BYTE = LinkConfig(connector_id_size=1, listener_id_size=1)
FAST = RelinkSettings(reconnect_delay=0.01, shutdown_timeout=1.0)
LOGGER = "rstreams.bridges"


async def echo(link: RelinkLink) -> None:
    # Every message back on our channel with the same id.
    async def serve(channel_id: int) -> None:
        async for parts in link.inbound(channel_id):
            await link.send(channel_id, parts)

    async with trio.open_nursery() as nursery:
        while True:
            try:
                channel = await link.accept_channel()
            except trio.EndOfChannel:
                return
            nursery.start_soon(serve, channel.id)


async def start(nursery: trio.Nursery, settings: RelinkSettings = FAST, max_connections: int | None = None) -> tuple[RelinkServer, int]:
    server = RelinkServer(echo, {"test": ONE_BYTE}, settings=settings, max_connections=max_connections)
    listeners = await nursery.start(partial(server.serve_tcp, "127.0.0.1", 0))
    return server, listener_port(listeners[0])


class RawConnector:
    """One TCP connection of a hand-written connector: the handshake, then raw bytes."""

    def __init__(self, stream: trio.SocketStream, epoch: int, link_id: int) -> None:
        self.stream = stream
        self.epoch = epoch
        self.link_id = link_id
        host, port = stream.socket.getsockname()[:2]
        self.address = f"{host}:{port}"  # (as the listener logs its peer)

    @classmethod
    async def connect(cls, port: int, *, epoch: int = 0, link_id: int = 0, require: bool = False) -> RawConnector:
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        await stream.send_all(encode_version())
        assert await receive_exactly(stream, 8) == bytes(8)  # the listener speaks version 0
        request = HandshakeRequest(
            endpoint_name="test", config=ONE_BYTE, old_epoch=epoch, old_link_id=link_id, require_old_link=require
        )
        await stream.send_all(encode_request(request))
        epoch, link_id = struct.unpack("<qQ", await receive_exactly(stream, 16))
        return cls(stream, epoch, link_id)

    async def reset(self) -> None:
        # Gone without a word: RST (SO_LINGER 0), as a crashed client.
        self.stream.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        await self.stream.aclose()

    async def wait_closed_by_listener(self) -> None:
        while True:
            try:
                if not await self.stream.receive_some(65536):
                    return
            except trio.BrokenResourceError:
                return


async def receive_exactly(stream: trio.abc.ReceiveStream, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = await stream.receive_some(size - len(data))
        assert chunk, f"the listener closed the connection after {len(data)} of {size} bytes"
        data += chunk
    return data


def records(caplog: pytest.LogCaptureFixture, event: str) -> list[logging.LogRecord]:
    return [record for record in caplog.records if getattr(record, "event", None) == event]


# ---- link ids ---------------------------------------------------------------------------


async def test_link_ids_cannot_be_worked_out_from_one_s_own(nursery: trio.Nursery) -> None:
    # Go hands ids out from 1, so a connector that got 7 knew 6 was live.
    # Eight connectors in a row get ids spread over [1, 2**63): no two
    # within one of each other, in no order.
    _, port = await start(nursery)
    with trio.fail_after(10):
        connectors = [await RawConnector.connect(port) for _ in range(8)]
    ids = [connector.link_id for connector in connectors]
    assert all(1 <= link_id < 2**63 for link_id in ids)
    assert len({connector.epoch for connector in connectors}) == 1
    ordered = sorted(ids)
    assert all(higher - lower > 1 for lower, higher in itertools.pairwise(ordered)), ids
    assert ids != ordered and ids != ordered[::-1]  # (one chance in 20,160 each, for random draws)
    assert max(ids) > 2**40  # (one chance in 2**23 otherwise)
    for connector in connectors:
        await connector.stream.aclose()


@pytest.mark.parametrize("require", [False, True], ids=["new-link-if-unknown", "old-link-required"])
async def test_a_guessed_neighbour_id_gets_a_new_link_and_leaves_the_other_link_alone(
    nursery: trio.Nursery, require: bool
) -> None:
    # The probe's takeover: learn the epoch and one's own id with an
    # ordinary handshake, then ask to resume a neighbour's link (own id
    # plus or minus one). Sequential ids made that the victim's link: its
    # connection was closed and its messages went to the attacker.
    server, port = await start(nursery)
    with trio.fail_after(10):
        async with open_relink_link("127.0.0.1", port, endpoint="test", config=ONE_BYTE, settings=FAST) as victim:
            replies = victim.inbound(1)
            await victim.send(1, [b"before"])
            assert await replies.receive() == (b"before",)
            victim_connection = victim.connection
            assert victim_connection is not None
            scout = await RawConnector.connect(port)
            await scout.stream.aclose()
            for guess in (scout.link_id - 1, scout.link_id + 1):
                attacker = await RawConnector.connect(port, epoch=scout.epoch, link_id=guess, require=require)
                if require:
                    assert attacker.link_id == 0  # "not known": refused, and closed
                    await attacker.wait_closed_by_listener()
                else:
                    assert attacker.link_id not in (0, guess, scout.link_id)  # a new link of its own
                await attacker.stream.aclose()
            # The victim's connection was never dropped, and its link still serves it.
            assert victim.connection is victim_connection and not victim_connection.ended
            await victim.send(1, [b"after"])
            assert await replies.receive() == (b"after",)
            assert victim.connections == 1
            assert len(server.links) == (2 if require else 4)  # the victim's, the scout's, and the attacker's new ones


async def test_a_connector_that_was_told_its_id_resumes_its_link(nursery: trio.Nursery) -> None:
    server, port = await start(nursery)
    with trio.fail_after(10):
        first = await RawConnector.connect(port)
        [handle] = server.links
        await first.reset()
        await handle.wait_disconnected()
        again = await RawConnector.connect(port, epoch=first.epoch, link_id=first.link_id, require=True)
        assert (again.epoch, again.link_id) == (first.epoch, first.link_id)  # resumed
        assert server.links == (handle,) and handle.connected
        await again.stream.aclose()


# ---- links without a connection, and the connection limit --------------------------------


async def test_links_without_a_connection_never_keep_a_connection_out(
    nursery: trio.Nursery, caplog: pytest.LogCaptureFixture
) -> None:
    # The probe: with --max-connections 20, twenty handshakes each followed
    # by a reset left twenty links kept for their connectors, and every
    # Relink connection after them was refused, without a log line, for the
    # 60 s the links were kept. Here with a limit of 3.
    caplog.set_level(logging.INFO, logger=LOGGER)
    server, port = await start(nursery, max_connections=3)
    with trio.fail_after(20):
        dropped = []
        for _ in range(3):
            connector = await RawConnector.connect(port)
            await connector.reset()
            dropped.append(connector)
        handles = server.links
        for handle in handles:
            await handle.wait_disconnected()
        assert len(server.detached_links) == 3
        # A live client is served: the link that has gone longest without
        # a connection makes room for it, ended as if its time ran out.
        async with open_relink_link("127.0.0.1", port, endpoint="test", config=ONE_BYTE, settings=FAST) as live:
            replies = live.inbound(2)
            await live.send(2, [b"served"])
            assert await replies.receive() == (b"served",)
            await handles[0].wait_ended()
            assert not handles[1].ended and not handles[2].ended
            # Its connector, coming back, gets a new link; the others resume theirs.
            late = await RawConnector.connect(port, epoch=dropped[0].epoch, link_id=dropped[0].link_id)
            assert late.link_id != dropped[0].link_id
            await late.stream.aclose()
    closed = records(caplog, "session_close")
    assert closed, [record.getMessage() for record in caplog.records]
    first = closed[0]
    assert first.getMessage().startswith(f"session closed: {dropped[0].address} over relink (link 1): forgotten: no connection for ")
    assert "a new link needed its room (max_connections 3 counts the links kept without one)" in first.getMessage()
    assert records(caplog, "connection_refused") == []


async def test_a_connection_beyond_the_limit_is_refused_and_logged(
    nursery: trio.Nursery, caplog: pytest.LogCaptureFixture
) -> None:
    # When every place is a live connection, there is nothing to forget:
    # the next connection is refused, and the log says so.
    caplog.set_level(logging.INFO, logger=LOGGER)
    server, port = await start(nursery, max_connections=2)
    with trio.fail_after(10):
        live = [await RawConnector.connect(port) for _ in range(2)]
        refused = await trio.open_tcp_stream("127.0.0.1", port)
        host, refused_port = refused.socket.getsockname()[:2]
        address = f"{host}:{refused_port}"
        try:
            assert await refused.receive_some(8) == b""
        except trio.BrokenResourceError:
            pass  # (closed with a reset: aclose_forcefully)
        await refused.aclose()
        assert all(handle.connected for handle in server.links) and len(server.links) == 2
        # One live client leaves (its link is kept): the next comes in, and its new link takes that place.
        await live[0].reset()
        for handle in server.links:
            if handle.state is not None and handle.state.link_id == live[0].link_id:
                await handle.wait_disconnected()
        newcomer = await RawConnector.connect(port)
        assert newcomer.link_id not in (0, live[0].link_id, live[1].link_id)
    [record] = records(caplog, "connection_refused")
    assert record.getMessage() == f"connection refused: {address} over relink: server busy: 2 connections already open"
    assert (record.peer, record.transport, record.reason) == (address, "relink", "server busy: 2 connections already open")  # type: ignore[attr-defined]
    for connector in (live[1], newcomer):
        await connector.stream.aclose()


async def test_a_silent_connection_gives_its_place_to_a_newcomer(
    nursery: trio.Nursery, caplog: pytest.LogCaptureFixture
) -> None:
    # A connection that has not sent its opening holds its place only until
    # the server is full and another connector comes: the oldest such goes.
    caplog.set_level(logging.INFO, logger=LOGGER)
    server, port = await start(nursery, max_connections=2)
    with trio.fail_after(10):
        live = await RawConnector.connect(port)
        silent = await trio.open_tcp_stream("127.0.0.1", port)
        host, silent_port = silent.socket.getsockname()[:2]
        await trio.sleep(HANDSHAKE_GRACE)  # (before it, a connection is never closed for another)
        newcomer = await RawConnector.connect(port)
        assert newcomer.link_id not in (0, live.link_id)
        try:
            while await silent.receive_some(4096):
                pass  # (the server's version block, then the end)
        except trio.BrokenResourceError:
            pass  # (closed with a reset: aclose_forcefully)
        await silent.aclose()
        assert len(server.links) == 2 and all(handle.connected for handle in server.links)
    [record] = [record for record in records(caplog, "session_close") if record.peer == f"{host}:{silent_port}"]  # type: ignore[attr-defined]
    assert record.reason == "server busy: no handshake yet, closed for a new connection (2 open)"  # type: ignore[attr-defined]
    for connector in (live, newcomer):
        await connector.stream.aclose()


async def test_a_resume_never_makes_room(nursery: trio.Nursery) -> None:
    # At the limit, a connector coming back for its link takes it back: only
    # a new link makes room, and a resumed one needs none (it stops being a
    # link without a connection).
    server, port = await start(nursery, max_connections=1)
    with trio.fail_after(10):
        first = await RawConnector.connect(port)
        [handle] = server.links
        await first.reset()
        await handle.wait_disconnected()
        again = await RawConnector.connect(port, epoch=first.epoch, link_id=first.link_id)
        assert again.link_id == first.link_id and handle.connected and not handle.ended
        await again.stream.aclose()


async def test_a_link_without_a_connection_is_kept_for_link_timeout(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    # Within the limit, nothing is forgotten early: the link waits its whole
    # link_timeout for its connector (here 60 s of trio's clock), then ends.
    caplog.set_level(logging.INFO, logger=LOGGER)
    settings = RelinkSettings(link_timeout=60, keepalive_interval=None, shutdown_timeout=1.0)
    server, port = await start(nursery, settings=settings, max_connections=2)
    with trio.fail_after(600):
        first = await RawConnector.connect(port)
        [handle] = server.links
        await first.reset()
        await handle.wait_disconnected()
        other = await RawConnector.connect(port)  # one live, one kept: within 2
        await trio.sleep(59)
        assert not handle.ended
        again = await RawConnector.connect(port, epoch=first.epoch, link_id=first.link_id)
        assert again.link_id == first.link_id
        await again.reset()
        await handle.wait_disconnected()
        gone = trio.current_time()
        await handle.wait_ended()
        assert trio.current_time() - gone == pytest.approx(60)
        while handle in server.links:
            await trio.sleep(0.01)  # (its task logs its end as it leaves)
        await other.stream.aclose()
    [closed] = [record for record in records(caplog, "session_close") if "(link 1)" in record.getMessage()]
    assert closed.reason == "forgotten: no connection for 60 s"  # type: ignore[attr-defined]


# ---- violations --------------------------------------------------------------------------

# What the probe sent after a good handshake (1-byte channel ids both ways).
VIOLATIONS = {
    "general-type-5": (bytes([5 << 5]) + bytes(7), "unknown general packet type 5"),
    "channel-format-5": (bytes([0x01 | 5 << 2, 0, 1]) + bytes(5), "unknown channel packet format 5"),
    "channel-op-type-7": (bytes([0x01 | 7 << 5, 0, 1]) + bytes(5), "unknown channel op packet type 7"),
    "1025-parts": (bytes([0x11 | 0x20, 0, 1, 0]) + struct.pack("<I", 1025), "message of 1025 parts; the limit is 1024"),
    "long-length-0xffffffff": (
        bytes([0x11 | 0x20, 0, 1, 0]) + struct.pack("<I", 0xFFFFFFFF),
        "message of 4294967295 parts; the limit is 1024",
    ),
    "message-after-shutdown": (
        bytes([4 << 5]) + bytes(7) + bytes([0x11, 1, 1, 0, 1, 0, 0, 0]) + b"x" + bytes(7),
        "message after the peer's shutdown",
    ),
}


@pytest.mark.parametrize("name", sorted(VIOLATIONS))
async def test_a_violation_closes_the_connection_with_one_log_line(
    nursery: trio.Nursery, caplog: pytest.LogCaptureFixture, name: str
) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    data, reason = VIOLATIONS[name]
    server, port = await start(nursery)
    with trio.fail_after(10):
        connector = await RawConnector.connect(port)
        [handle] = server.links
        await connector.stream.send_all(data)
        await connector.wait_closed_by_listener()
        await handle.wait_disconnected()
    assert not handle.ended  # (the link is kept for the connector to come back)
    [record] = records(caplog, "bad_input")
    assert record.levelno == logging.INFO and record.exc_info is None and record.name == LOGGER
    # As EMP's session_close says it: the peer, the transport, the violation.
    assert (record.peer, record.transport, record.reason) == (connector.address, "relink", reason)  # type: ignore[attr-defined]
    assert record.getMessage() == f"closing the connection with {connector.address} over relink (link 1): {reason}"
    # The link's own lines: it opened, and it has not closed.
    assert [getattr(r, "event", None) for r in caplog.records if r.name == LOGGER] == ["session_open", "bad_input"]
    await connector.stream.aclose()


async def test_a_lost_connection_is_no_violation(nursery: trio.Nursery, caplog: pytest.LogCaptureFixture) -> None:
    # A reset, or an end of file in the middle of a packet, is a connection
    # lost (the link waits for its connector): nothing to log yet.
    caplog.set_level(logging.INFO, logger=LOGGER)
    server, port = await start(nursery)
    with trio.fail_after(10):
        for ending in ("reset", "cut"):
            connector = await RawConnector.connect(port)
            handle = next(h for h in server.links if h.state is not None and h.state.link_id == connector.link_id)
            if ending == "cut":
                await connector.stream.send_all(bytes([0x11, 1, 1, 0, 5, 0, 0, 0]) + b"ab")  # half a message
                await connector.stream.aclose()
            else:
                await connector.reset()
            await handle.wait_disconnected()
    assert records(caplog, "bad_input") == []
