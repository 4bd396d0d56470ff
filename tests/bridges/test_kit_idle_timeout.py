"""A bridge connection whose peer goes quiet is closed after the idle timeout.

MicroMsg2 and Epoxy have no ping, so a peer that completed its handshake
and then said nothing, or stopped in the middle of a frame, held its
connection (and a slot of ``--max-connections``) for ever: an adversarial
run kept a MicroMsg2 listener refusing every new client with "server busy"
that way. ``LinkSettings.idle_timeout`` (``rstreams serve --idle-timeout``)
now closes, with the protocol's error, a connection that received nothing
for that long while it holds nothing open, or while a message of the
peer's is begun and stalled; a quiet subscriber is left alone.
"""

from __future__ import annotations

from dataclasses import replace

import trio
import trio.testing
from epoxy_helpers import RawEpoxy
from micromsg2_raw import PUBSUB, RawClient

import rstreams.demo
from bridges.epoxy import DEFAULT_SETTINGS as EPOXY_SETTINGS
from bridges.epoxy import EpoxyAppServer, ProtocolErrorCode
from bridges.micromsg2 import (
    BROKER_SETTINGS,
    Connection,
    ConnectionFailed,
    ExtensionSpec,
    HandshakeCompleted,
    MicroMsg2AppServer,
    Role,
)

IDLE = 30.0


def _mm2_server() -> MicroMsg2AppServer:
    return MicroMsg2AppServer(rstreams.demo.app, settings=replace(BROKER_SETTINGS, idle_timeout=IDLE))


async def _mm2_client(nursery: trio.Nursery, server: MicroMsg2AppServer) -> RawClient:
    ours, theirs = trio.testing.memory_stream_pair()
    nursery.start_soon(server.serve_stream, ours)
    machine = Connection(Role.CLIENT, identity="quiet", required=[PUBSUB], optional=[ExtensionSpec.batch_ack(4)])
    client = RawClient(theirs, machine)
    await client.flush()
    assert isinstance(await client.next_event(), HandshakeCompleted)
    return client


async def test_a_quiet_micromsg2_peer_with_nothing_open_is_closed_with_an_error(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    server = _mm2_server()
    client = await _mm2_client(nursery, server)
    start = trio.current_time()
    with trio.fail_after(10 * IDLE):
        event = await client.next_event()
    assert isinstance(event, ConnectionFailed), event
    assert "idle timeout" in event.message, event
    assert IDLE <= trio.current_time() - start <= 1.25 * IDLE + 1


async def test_a_quiet_micromsg2_subscriber_is_left_alone(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    # A subscription to a topic with nothing new: the peer has nothing to
    # say for a long time, and that is no reason to close it.
    server = _mm2_server()
    client = await _mm2_client(nursery, server)
    await client.subscribe("chat")
    with trio.move_on_after(10 * IDLE) as waited:
        event = await client.next_event()
        raise AssertionError(f"the server spoke: {event}")
    assert waited.cancelled_caught
    assert len(server.connections) == 1


async def test_a_micromsg2_frame_begun_and_stalled_is_closed(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    # The frame header declares 60,000 bytes; ten come. Even with a
    # subscription open (which would spare a quiet peer), a message that
    # stalls half-way is not quiet but stuck.
    server = _mm2_server()
    client = await _mm2_client(nursery, server)
    await client.subscribe("chat")
    await client.stream.send_all(bytes.fromhex("090000ea60") + bytes(10))
    with trio.fail_after(10 * IDLE):
        event = await client.next_event()
    assert isinstance(event, ConnectionFailed), event
    assert "idle timeout" in event.message and "begun" in event.message, event


async def test_a_quiet_epoxy_peer_is_sent_timeout_and_closed(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    server = EpoxyAppServer(rstreams.demo.app, settings=replace(EPOXY_SETTINGS, idle_timeout=IDLE))
    ours, theirs = trio.testing.memory_stream_pair()
    nursery.start_soon(server.serve_stream, ours)
    peer = RawEpoxy(theirs)
    await peer.handshake_as_client()
    start = trio.current_time()
    with trio.fail_after(10 * IDLE):
        error = await peer.protocol_error()
        assert await peer.receive() is None
    assert error.error_code == ProtocolErrorCode.TIMEOUT
    assert IDLE <= trio.current_time() - start <= 1.25 * IDLE + 1
