"""A Relink "listener" that breaks the protocol on every connection ends the link.

The connector resumes a link after a protocol error, as Go does: one bad
connection may be a fluke. But a port whose greeting passes for a handshake
and then sends nonsense (another protocol's server: EMP's hello reads as a
version block and a reply) breaks every connection the same way, and
reconnecting at once, forever, was a hang for `rstreams sub relink://` and
a busy loop against that server. Three connections in a row broken before
any message end the link with the listener's error; the backoff grows
between them. A connection that ends otherwise starts the count again.

Each fake listener here answers the handshake byte for byte, then does what
its script says: send a packet of an unknown format, or hang up.
"""

from __future__ import annotations

from functools import partial

import pytest
import trio

from bridges.relink import (
    HandshakeReply,
    RelinkSettings,
    RemoteProtocolError,
    decode_request,
    encode_reply,
    encode_version,
    open_relink_link,
)
from rstreams.support import listener_port

pytestmark = pytest.mark.timeout(20)

SETTINGS = RelinkSettings(reconnect_delay=0.01, reconnect_max_delay=0.05, reconnect_timeout=5.0)
# A channel packet of format 7, which the spec does not define: the
# connection must end (RemoteProtocolError), in the first packet.
BAD_PACKET = bytes((0x01 | 7 << 2,)) + bytes(7)


class FakeListener:
    """Answers each connection's handshake, then follows ``script``: "bad"
    sends BAD_PACKET and waits for the connector to hang up, "hang up"
    closes at once. Past the script's end, every connection is "bad"."""

    def __init__(self, script: list[str]) -> None:
        self.script = script
        self.connections = 0
        self.times: list[float] = []

    async def handle(self, stream: trio.SocketStream) -> None:
        action = self.script[self.connections] if self.connections < len(self.script) else "bad"
        self.connections += 1
        self.times.append(trio.current_time())
        async with stream:
            received = bytearray()
            while len(received) < 8:
                received += await stream.receive_some()
            await stream.send_all(encode_version())
            del received[:8]
            while decode_request(bytes(received)) is None:
                chunk = await stream.receive_some()
                assert chunk, "the connector hung up during the handshake"
                received += chunk
            await stream.send_all(encode_reply(HandshakeReply(epoch=7, link_id=self.connections)))
            if action == "hang up":
                return
            await stream.send_all(BAD_PACKET)
            with trio.move_on_after(5):
                while await stream.receive_some():
                    pass


async def _run(listener: FakeListener) -> BaseException:
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(partial(trio.serve_tcp, listener.handle, 0, host="127.0.0.1"))
        port = listener_port(listeners[0])
        try:
            with pytest.raises(RemoteProtocolError) as raised:
                async with open_relink_link("127.0.0.1", port, settings=SETTINGS) as link:
                    await link.wait_ended()
                    raise link.end_reason  # type: ignore[misc]
        finally:
            nursery.cancel_scope.cancel()
    return raised.value


async def test_three_connections_broken_in_a_row_end_the_link() -> None:
    listener = FakeListener([])
    error = await _run(listener)
    assert listener.connections == 3
    text = str(error)
    assert text.startswith("on 3 connections in a row, before any message: unknown channel packet format 7")
    assert "a Relink listener?" in text
    # No reconnect at once: each waited at least the backoff's delay.
    gaps = [later - earlier for earlier, later in zip(listener.times, listener.times[1:])]
    assert all(gap >= SETTINGS.reconnect_delay for gap in gaps), gaps


async def test_a_connection_that_ends_otherwise_starts_the_count_again() -> None:
    listener = FakeListener(["bad", "bad", "hang up", "bad", "bad"])
    error = await _run(listener)
    # bad, bad, then a plain hang-up: the count starts again; three more bad.
    assert listener.connections == 6
    assert "on 3 connections in a row" in str(error)
