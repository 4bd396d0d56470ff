"""An rstreams app over EMP (``EmpAppServer``): a request names a publisher, the response holds its elements.

The server is the demo app on 127.0.0.1 port 0; the client is a RawPeer
writing bytes by hand, so these tests pin the wire contract documented in
``docs/bridges/emp.md``.
"""

from __future__ import annotations

import gzip
from collections.abc import AsyncIterator

import msgpack
import pytest
import trio
from conftest import RawPeer, connect_raw

import examples.demo
import rstreams
from bridges.emp import (
    Compression,
    CompressionScheme,
    Data,
    EmpAppServer,
    EmpConfig,
    EmpLimits,
    Error,
    ErrorCode,
    ExtensionErrorCode,
    Framing,
    Hello,
    RequestResponse,
    encode,
    open_emp_connection,
)

GOLDEN_REQUEST = bytes.fromhex(
    "00000029 05800000"  # envelope size 41; type 5 (data), E bit
    "00000014 00000000"  # block size 20; extension 0 (request-response), no M bit
    "80000000 0000000000000001"  # R bit (a request); request id 1
    + b"range?count=3".hex()
)
GOLDEN_RESPONSE = bytes.fromhex(
    "00000045 05800000"  # envelope size 69; data, E bit
    "00000014 00000000"  # block size 20; request-response
    "00000000 0000000000000001"  # R bit clear (a response); request id 1
    "81 a8" + b"elements".hex() + "93"  # {"elements": [ three items
    "c408 0000000000000000 c408 0000000000000001 c408 0000000000000002"  # bin 8 each
)


def request(request_id: int, body: bytes, gzipped: bool = False) -> Data:
    blocks: tuple = (RequestResponse(request_id=request_id, is_request=True),)
    if gzipped:
        blocks += (Compression(scheme=CompressionScheme.GZIP),)
    return Data(body=body, extensions=blocks)


async def serve(nursery: trio.Nursery, config: EmpConfig = EmpConfig(keepalive_interval=None), **options: object) -> int:
    server = EmpAppServer(examples.demo.app, config=config, **options)  # type: ignore[arg-type]
    listeners = await nursery.start(server.serve_tcp, "127.0.0.1", 0)
    return rstreams.listener_port(listeners[0])


@pytest.fixture
async def peer(nursery: trio.Nursery) -> AsyncIterator[RawPeer]:
    port = await serve(nursery)
    raw = await connect_raw(port)
    await raw.send(Hello())
    assert await raw.receive() == Hello()
    yield raw


def unpack(message: object) -> dict:
    assert isinstance(message, Data), message
    return msgpack.unpackb(message.body, raw=False)


async def test_golden_request_and_response(peer: RawPeer) -> None:
    with trio.fail_after(10):
        await peer.stream.send_all(GOLDEN_REQUEST)
        assert peer.decoder.buffered == 0
        data = await peer.stream.receive_some(len(GOLDEN_RESPONSE))
        while len(data) < len(GOLDEN_RESPONSE):
            data += await peer.stream.receive_some(len(GOLDEN_RESPONSE) - len(data))
        assert data == GOLDEN_RESPONSE


async def test_gzip_request_gets_a_gzip_response(peer: RawPeer) -> None:
    with trio.fail_after(10):
        await peer.send(request(1, b"range?count=3", gzipped=True))
        response = await peer.receive()
        assert isinstance(response, Data)
        assert response.extensions == (
            RequestResponse(request_id=1, is_request=False),
            Compression(scheme=CompressionScheme.GZIP),
        )
        assert unpack(response) == {"elements": [n.to_bytes(8, "big") for n in range(3)]}


async def test_errors_are_one_key_maps(peer: RawPeer) -> None:
    with trio.fail_after(10):
        await peer.send(request(1, b"nope"), request(2, b"fail?after=2"), request(3, b"\xff\xfe"))
        answers = {}
        for _ in range(3):
            message = await peer.receive()
            assert isinstance(message, Data) and message.request_response is not None
            answers[message.request_response.request_id] = unpack(message)
        assert answers[1] == {"error": "no such publisher: nope"}
        assert set(answers[2]) == {"error"} and "fail" in answers[2]["error"]
        assert set(answers[3]) == {"error"}


async def test_several_requests_in_flight_each_answered_with_its_id(peer: RawPeer) -> None:
    with trio.fail_after(10):
        counts = {1: 5, 2: 1, 3: 0, 4: 3}
        await peer.send(*(request(i, b"range?count=%d" % n) for i, n in counts.items()))
        got = {}
        for _ in counts:
            message = await peer.receive()
            assert isinstance(message, Data) and message.request_response is not None
            got[message.request_response.request_id] = len(unpack(message)["elements"])
        assert got == counts


async def test_bad_gzip_is_error_4_naming_extension_1_then_close(peer: RawPeer) -> None:
    bad = Data(body=b"", extensions=(RequestResponse(request_id=1, is_request=True),))
    wire = bytearray(encode(bad))
    # Append a compression block (gzip) by hand, then a body that is not gzip.
    block = (12).to_bytes(4, "big") + bytes([1, 0, 0, 0]) + bytes([1, 0, 0, 0])
    wire[8 + 5] = 0x80  # the M bit of the request-response block
    wire += block + b"plain text"
    wire[0:4] = len(wire).to_bytes(4, "big")
    with trio.fail_after(10):
        await peer.send(bytes(wire))
        messages = await peer.receive_until_eof()
        assert len(messages) == 1
        error = messages[0]
        assert isinstance(error, Error)
        assert (error.code, error.extension_id, error.extension_code) == (
            ErrorCode.EXTENSION,
            1,
            ExtensionErrorCode.BAD_COMPRESSED_BODY,
        )


async def test_response_size_limit(nursery: trio.Nursery) -> None:
    port = await serve(nursery, max_response_bytes=20)
    with trio.fail_after(10):
        async with open_emp_connection("127.0.0.1", port, config=EmpConfig(keepalive_interval=None)) as emp:
            assert msgpack.unpackb(await emp.call(b"range?count=2")) == {"elements": [bytes(8), (1).to_bytes(8, "big")]}
            answer = msgpack.unpackb(await emp.call(b"range?count=3"))
            assert set(answer) == {"error"} and "20 bytes" in answer["error"]


async def test_plain_data_is_dropped_and_stalls_nothing(peer: RawPeer) -> None:
    with trio.fail_after(10):
        await peer.send(*(Data(body=bytes(10000)) for _ in range(300)))
        await peer.send(request(1, b"range?count=1"))
        assert unpack(await peer.receive()) == {"elements": [bytes(8)]}


async def test_author_framing(nursery: trio.Nursery) -> None:
    config = EmpConfig(framing=Framing.SIZE_EXCLUDES_FIELD, keepalive_interval=None)
    port = await serve(nursery, config=config)
    with trio.fail_after(10):
        raw = await connect_raw(port, Framing.SIZE_EXCLUDES_FIELD)
        await raw.send(bytes.fromhex("00000008 00000000 01000000"))  # hello, size without its field
        assert await raw.receive() == Hello()
        await raw.send(request(7, gzip.compress(b"range?count=2", mtime=0), gzipped=False))
        # Without a compression block the body is taken as is: not a UTF-8 name.
        assert set(unpack(await raw.receive())) == {"error"}
        await raw.send(request(8, b"range?count=2", gzipped=True))
        assert len(unpack(await raw.receive())["elements"]) == 2


async def test_a_flood_of_tiny_requests_is_held_back_not_refused(nursery: trio.Nursery) -> None:
    # More requests than max_pending_requests allows: reading stops at half
    # the limit (and with the read-ahead bound), so the flood waits instead
    # of being refused as a protocol error.
    limits = EmpLimits(max_pending_requests=4000)
    config = EmpConfig(keepalive_interval=None, limits=limits, max_read_ahead=2**30)
    port = await serve(nursery, config=config)
    raw = await connect_raw(port)
    with trio.fail_after(60):
        await raw.send(Hello())
        assert await raw.receive() == Hello()
        async with trio.open_nursery() as flooding:
            flooding.start_soon(raw.send, b"".join(encode(request(i, b"range?count=0")) for i in range(1, 6001)))
            for _ in range(6000):
                message = await raw.receive()
                assert isinstance(message, Data), message
