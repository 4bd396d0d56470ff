"""The trio side against arbitrary bytes: the listener never crashes or hangs, the connector fails typed.

``RelinkServer.serve_stream`` reads the connector's opening itself (to pick
the link config) before handing the stream to the machine, so both stages
get random input: arbitrary bytes from the start, and arbitrary packets
after a valid handshake. Each run is on trio's mock clock (timeouts elapse
at once) over an in-memory stream; it must end, and nothing may be logged
as a crash (a handler failing or an unexpected exception).
"""

from __future__ import annotations

import logging

import trio
import trio.testing
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bridges.relink import (
    HandshakeRequest,
    LinkConfig,
    RelinkLink,
    RelinkServer,
    RelinkSettings,
    encode_request,
    encode_version,
)

CONFIG = LinkConfig(connector_id_size=1, listener_id_size=1)
SETTINGS = RelinkSettings(handshake_timeout=1.0, keepalive_interval=1.0, ping_timeout=1.0, shutdown_timeout=1.0)
HANDSHAKE = encode_version() + encode_request(HandshakeRequest(endpoint_name="test", config=CONFIG))


class Crashes(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


async def echo(link: RelinkLink) -> None:
    while True:
        try:
            channel = await link.accept_channel()
        except trio.EndOfChannel:
            return  # the connector shut down
        async for parts in channel:
            await link.send(channel.id, parts)


def serve(data: bytes, *, eof: bool) -> None:
    crashes = Crashes()
    logger = logging.getLogger("rstreams.bridges")
    logger.addHandler(crashes)

    async def main() -> None:
        client, server_stream = trio.testing.memory_stream_pair()
        server = RelinkServer(echo, {"test": CONFIG}, settings=SETTINGS, epoch=1_700_000_000_000_000)
        with trio.fail_after(600):  # virtual seconds: every timeout of the server fits many times
            async with trio.open_nursery() as nursery:
                nursery.start_soon(server.serve_stream, server_stream)
                await client.send_all(data)
                if eof:
                    await client.send_eof()
                while await client.receive_some(65536):
                    pass  # drain what the server says until it closes

    try:
        trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    finally:
        logger.removeHandler(crashes)
    assert crashes.records == [], [record.getMessage() for record in crashes.records]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.binary(max_size=400), eof=st.booleans())
def test_arbitrary_openings_end_cleanly(data: bytes, eof: bool) -> None:
    serve(data, eof=eof)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    packets=st.lists(
        st.one_of(
            st.binary(min_size=8, max_size=8),
            st.builds(lambda body: bytes([0x11, 1, 0, 0, len(body), 0, 0, 0]) + body.ljust(-(-len(body) // 8) * 8, b"\0"), st.binary(max_size=40)),
        ),
        max_size=12,
    ),
    eof=st.booleans(),
)
def test_arbitrary_packets_after_a_handshake_end_cleanly(packets: list[bytes], eof: bool) -> None:
    serve(HANDSHAKE + b"".join(packets), eof=eof)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(reply=st.binary(max_size=200), eof=st.booleans())
def test_a_connector_facing_arbitrary_bytes_fails_with_a_typed_error(reply: bytes, eof: bool) -> None:
    from bridges.kit import open_connection
    from bridges.relink import Connection, RelinkConnection, RelinkError, Role

    async def main() -> None:
        client, server = trio.testing.memory_stream_pair()
        await server.send_all(encode_version() + reply)
        if eof:
            await server.send_eof()
        machine = Connection(Role.CONNECTOR, config=CONFIG, endpoint_name="test")
        handle = RelinkLink(Role.CONNECTOR, SETTINGS, accept_channels=False)
        with trio.fail_after(600):
            try:
                async with open_connection(RelinkConnection(client, machine, SETTINGS, handle=handle)) as connection:
                    await connection.wait_ended()  # a reply that happened to be valid: until the pong timeout
            except RelinkError:
                pass

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
