"""``docs/bridges/micromsg2.md`` shows the bytes the machines produce for a whole session."""

from __future__ import annotations

import re
from decimal import Decimal
from pathlib import Path

from bridges.micromsg2 import Connection, ExtensionSpec, Role, UnixTime

DOC = Path(__file__).resolve().parents[2] / "docs" / "bridges" / "micromsg2.md"
BLOCK = re.compile(r"<!-- bytes: session -->\n```text\n(.*?)\n```", re.S)


def session() -> list[tuple[str, bytes]]:
    """A whole session, step by step: (who sends, the bytes)."""
    client = Connection(Role.CLIENT, identity="hulk", required=[ExtensionSpec(name="pubsub")],
                        optional=[ExtensionSpec.batch_ack(2)])  # fmt: skip
    server = Connection(Role.SERVER, optional=[ExtensionSpec.batch_ack(64), ExtensionSpec(name="pubsub")])
    steps: list[tuple[str, bytes]] = []

    def client_says() -> None:
        data = client.data_to_send()
        steps.append(("C", data))
        server.receive_data(data)
        server.events()

    def server_says() -> None:
        data = server.data_to_send()
        steps.append(("S", data))
        client.receive_data(data)
        client.events()

    client_says()  # 1. hello
    server_says()  # 2. reply
    client_says()  # 3. final
    client.subscribe("prices", "price>=N10")
    client_says()
    at = UnixTime(Decimal("1413198000.0"))
    server.send_message("prices", b"12", properties={"price": 12, "at": at})
    server_says()
    server.send_message("prices", b"15", properties={"price": 15, "at": at})
    server_says()
    client.acknowledge(2)
    client_says()
    server.complete("prices")
    server_says()
    return steps


def render(steps: list[tuple[str, bytes]]) -> str:
    lines = []
    for who, data in steps:
        for start in range(0, len(data), 16):
            lines.append(f"{who if start == 0 else ' '}  {data[start:start + 16].hex(' ')}")
    return "\n".join(lines)


def test_the_session_is_documented_exactly() -> None:
    [block] = BLOCK.findall(DOC.read_text(encoding="utf-8"))
    assert block == render(session())


def test_the_rendering_reads_back_as_the_same_bytes() -> None:
    [block] = BLOCK.findall(DOC.read_text(encoding="utf-8"))
    data = bytes.fromhex(" ".join(line[3:] for line in block.splitlines()))
    assert data == b"".join(step for _, step in session())


def test_the_fixed_spec_examples_in_the_doc_are_what_we_encode() -> None:
    from bridges.micromsg2 import ExtensionFrame, Handshake, encode_frame, encode_handshake

    text = DOC.read_text(encoding="utf-8")
    json, dotnet, batch_ack = (ExtensionSpec(name=n) for n in ("json", "dotnet", "batch-ack"))
    for handshake in (
        Handshake(identity="hulk", required=(json, dotnet)),
        Handshake(identity="srver", optional=(batch_ack,)),
        Handshake(identity="hulk", required=(json, dotnet), optional=(batch_ack,)),
    ):
        assert encode_handshake(handshake).hex(" ") in text
    assert "`" + encode_frame(ExtensionFrame(extension_id=3, payload=b"\x00\x04")).hex(" ") + "`" in text
    dotnet_frame = encode_frame(ExtensionFrame(extension_id=2, payload=b"OneTrueError.Contracts.Reports, OneTrueError.Client"))
    assert dotnet_frame[:15].hex(" ") in text


async def test_the_broker_speaks_the_documented_session_byte_for_byte(nursery: object) -> None:
    # The same session against the real broker over a socket: an app whose
    # publisher "prices" attaches properties to its elements (one of them,
    # price 5, fails the filter and is never sent). The broker's bytes are
    # the documented S lines, in order; only where its ``completed`` falls
    # relative to the client's ack may differ (the stream ends without
    # waiting for the ack), so the client's and the server's bytes are
    # compared each as one stream.
    from functools import partial

    import trio

    import rstreams
    from bridges.micromsg2 import MicroMsg2AppServer, wrap
    from rstreams.support import listener_port

    assert isinstance(nursery, trio.Nursery)
    at = UnixTime(Decimal("1413198000.0"))
    app = rstreams.Router()

    @app.publisher("prices")
    async def prices(sink: rstreams.Sink, request: rstreams.SubscribeRequest) -> None:
        for price in (12, 5, 15):
            await sink.send(wrap((("price", price), ("at", at)), str(price).encode()))

    [listener] = await nursery.start(partial(MicroMsg2AppServer(app).serve_tcp, "127.0.0.1", 0))
    steps = session()
    client_steps = [data for who, data in steps if who == "C"]
    expected = b"".join(data for who, data in steps if who == "S")
    received = bytearray()

    async def read_until(size: int) -> None:
        while len(received) < size:
            chunk = await stream.receive_some(65536)
            assert chunk, f"the broker closed after {bytes(received).hex(' ')}"
            received.extend(chunk)

    with trio.fail_after(10):
        stream = await trio.open_tcp_stream("127.0.0.1", listener_port(listener))
        await stream.send_all(client_steps[0])  # hello
        await read_until(len(steps[1][1]))  # the reply
        await stream.send_all(client_steps[1] + client_steps[2])  # final, subscribe
        await read_until(len(expected) - len(steps[-1][1]))  # two MESSAGEs
        await stream.send_all(client_steps[3])  # the batch-ack of 2
        await read_until(len(expected))
        assert bytes(received) == expected
        await stream.aclose()


SEND_BLOCK = re.compile(r"<!-- bytes: send -->\n```text\n(.*?)\n```", re.S)


def documented_send() -> list[tuple[str, bytes]]:
    [block] = SEND_BLOCK.findall(DOC.read_text(encoding="utf-8"))
    steps: list[tuple[str, bytes]] = []
    for line in block.splitlines():
        who, data = line[:1], bytes.fromhex(line[3:])
        if who.strip():
            steps.append((who, data))
        else:
            steps[-1] = (steps[-1][0], steps[-1][1] + data)
    return steps


async def test_the_broker_acknowledges_a_send_as_documented(nursery: object) -> None:
    from functools import partial

    import trio

    import rstreams
    from bridges.micromsg2 import ENVELOPE_MAGIC, MicroMsg2AppServer
    from rstreams.support import listener_port

    assert isinstance(nursery, trio.Nursery)
    app = rstreams.Router()
    chat = rstreams.Topic("chat")
    chat.mount(app)
    [listener] = await nursery.start(partial(MicroMsg2AppServer(app).serve_tcp, "127.0.0.1", 0))
    (_, hello), (_, reply), (_, final), (_, send), (_, ack) = documented_send()
    # The client's bytes are what our client machine sends.
    client = Connection(Role.CLIENT, identity="hulk", optional=[ExtensionSpec.batch_ack(2)])
    assert client.data_to_send() == hello
    received = bytearray()
    with trio.fail_after(10):
        stream = await trio.open_tcp_stream("127.0.0.1", listener_port(listener))
        await stream.send_all(hello)
        while len(received) < len(reply):
            received.extend(await stream.receive_some(65536))
        client.receive_data(bytes(received))
        client.events()
        assert client.data_to_send() == final
        client.send_message("chat", b"hi", properties={"room": "lobby"})
        assert client.data_to_send() == send
        await stream.send_all(final + send)
        while len(received) < len(reply) + len(ack):
            received.extend(await stream.receive_some(65536))
        assert bytes(received) == reply + ack
        await stream.aclose()
        async with rstreams.open_local_session(app) as session:
            [stored] = await session.fetch("chat?history=1", 1)
    assert bytes(stored) == ENVELOPE_MAGIC + bytes.fromhex("00 0b") + b"room:Tlobby" + b"hi"
