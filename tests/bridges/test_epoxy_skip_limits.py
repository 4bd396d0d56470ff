"""Epoxy over real sockets (127.0.0.1): what a peer's unknown fields and big responses may cost.

* Headers: the framelets the connection decodes itself are held to
  ``max_headers_size`` (64 KiB): a bigger one is ``LIMIT_EXCEEDED`` before
  it is buffered; within it, headers that make Bond skip more than
  ``max_skipped_items`` values are ``MALFORMED_DATA``. Either way that
  connection ends with the Error frame, and another connection goes on.
* Requests: a ``Subscribe`` request past ``MAX_SUBSCRIBE_REQUEST_SIZE`` is
  answered unread, one that makes Bond skip too much is answered with the
  limit; the connection goes on.
* Responses are marshalled a chunk of elements per step
  (``bond.MARSHAL_STEP_ITEMS``) with a checkpoint between: other tasks run
  while a big one is built.
"""

from __future__ import annotations

import struct
from collections.abc import AsyncIterator
from functools import partial

import pytest
import trio
from epoxy_helpers import RawEpoxy, decode_message, message

import examples.demo
import rstreams
from bridges.epoxy import (
    MAX_SUBSCRIBE_REQUEST_SIZE,
    PUBLISHERS_SERVICE,
    Elements,
    EpoxyAppServer,
    EpoxyHeaders,
    EpoxyLimits,
    EpoxyMessageType,
    Error,
    ErrorCode,
    ProtocolErrorCode,
    Request,
    ServiceTable,
    SubscribeRequest,
    bond,
    dispatch_request,
    method,
    service,
)
from bridges.epoxy._frames import Frame, Framelet, FrameletType
from rstreams.support import listener_port

REQUEST, RESPONSE = EpoxyMessageType.REQUEST, EpoxyMessageType.RESPONSE


def varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | 0x80 if value else byte)
        if not value:
            return bytes(out)


def headers_with_junk(conversation_id: int, count: int) -> bytes:
    """Fast Binary EpoxyHeaders with an unknown field 900: a list of ``count`` empty structs."""
    data = bond.serialize(EpoxyHeaders(conversation_id=conversation_id, message_type=RESPONSE), bond.Protocol.FAST)
    return data[:-1] + bytes([11]) + struct.pack("<H", 900) + bytes([10]) + varint(count) + b"\x00" * count + b"\x00"


def junk_frame(conversation_id: int, count: int) -> bytes:
    # A "response" to a request of the server's parity: dropped, once its headers decode.
    payload = bond.marshal(SubscribeRequest(publisher="x"))
    framelets = (
        Framelet(type=FrameletType.EPOXY_HEADERS, content=headers_with_junk(conversation_id, count)),
        Framelet(type=FrameletType.PAYLOAD_DATA, content=payload),
    )
    return Frame(framelets=framelets).encode()


def subscribe(conversation_id: int, payload: bytes | bond.Struct) -> bytes:
    return message(conversation_id, REQUEST, payload, PUBLISHERS_SERVICE, "Subscribe").encode()


def with_junk(value: bond.Struct, count: int) -> bytes:
    """Marshalled Compact v1 of ``value`` plus field 5: a list of ``count`` empty structs."""
    data = bond.marshal(value)
    return data[:-1] + bytes([5 << 5 | 11, 10]) + varint(count) + b"\x00" * count + b"\x00"


@pytest.fixture
async def port(nursery: trio.Nursery) -> AsyncIterator[int]:
    app = rstreams.Router()
    route = examples.demo.app.resolve("range")
    assert route is not None
    app.add("range", route)
    server = EpoxyAppServer(app)
    [listener] = await nursery.start(partial(server.serve_tcp, "127.0.0.1", 0))
    yield listener_port(listener)
    await server.aclose()


async def range_works(port: int) -> None:
    raw = await RawEpoxy.connect(port)
    await raw.handshake_as_client()
    await raw.send(subscribe(1, SubscribeRequest(publisher="range?count=3")))
    frame = await raw.receive()
    assert frame is not None
    _, content, is_error = decode_message(frame)
    await raw.aclose()
    assert not is_error and len(bond.unmarshal(Elements, content).elements) == 3


@pytest.mark.parametrize(
    ("count", "code"),
    [
        # 8 MiB of junk: refused at the framelet's header, never buffered.
        (8 << 20, ProtocolErrorCode.LIMIT_EXCEEDED),
        # Within 64 KiB, but 60,000 values to skip: refused at the list's header.
        (60_000, ProtocolErrorCode.MALFORMED_DATA),
    ],
)
async def test_headers_with_a_huge_unknown_field_end_that_connection_only(
    port: int, count: int, code: ProtocolErrorCode
) -> None:
    with trio.fail_after(20):
        other = await RawEpoxy.connect(port)
        await other.handshake_as_client()
        raw = await RawEpoxy.connect(port)
        await raw.handshake_as_client()
        await raw.send(junk_frame(2, 10))  # a little junk is skipped and the frame dropped
        frame = junk_frame(4, count)
        # The 8 MiB one is refused at its framelet's header: its first bytes are enough.
        await raw.send(frame if len(frame) < 65536 else frame[:4096])
        error = await raw.protocol_error()
        assert error.error_code == code
        assert await raw.receive() is None  # and the connection is closed
        await raw.aclose()
        # The other connection, open all along, and a new one both work.
        await other.send(subscribe(1, SubscribeRequest(publisher="range?count=2")))
        frame = await other.receive()
        assert frame is not None and not decode_message(frame)[2]
        await other.aclose()
        await range_works(port)


async def test_a_request_that_would_skip_too_much_is_answered_and_the_connection_goes_on(port: int) -> None:
    with trio.fail_after(20):
        raw = await RawEpoxy.connect(port)
        await raw.handshake_as_client()
        await raw.send(subscribe(1, with_junk(SubscribeRequest(publisher="range?count=1"), 200_000)))
        await raw.send(subscribe(3, b"\x00" * (MAX_SUBSCRIBE_REQUEST_SIZE + 1)))
        await raw.send(subscribe(5, with_junk(SubscribeRequest(publisher="range?count=1"), 100)))
        answers = {}
        for _ in range(3):
            frame = await raw.receive()
            assert frame is not None
            headers, content, is_error = decode_message(frame)
            answers[headers.conversation_id] = (content, is_error)
        await raw.aclose()
    skipped, big = (bond.unmarshal(Error, answers[n][0]) for n in (1, 3))
    assert answers[1][1] and skipped.error_code == ErrorCode.INTERNAL_SERVER_ERROR
    assert "skipping more than 16384 values" in skipped.message
    assert answers[3][1] and big.error_code == ErrorCode.INTERNAL_SERVER_ERROR
    assert f"exceeds the limit of {MAX_SUBSCRIBE_REQUEST_SIZE}" in big.message
    assert not answers[5][1] and len(bond.unmarshal(Elements, answers[5][0]).elements) == 1


def test_the_headers_limit_is_checked() -> None:
    assert EpoxyLimits().max_headers_size == 64 * 1024
    with pytest.raises(ValueError, match="max_headers_size must be at least 512"):
        EpoxyLimits(max_headers_size=511)


@service("test.Big")
class Big:
    @method
    async def Get(self, request: SubscribeRequest) -> Elements:  # noqa: N802 - Bond's method name
        return Elements(elements=[b"e"] * int(request.publisher))


async def test_a_big_response_is_marshalled_in_steps() -> None:
    # Another task runs between the steps of one response's marshalling: at
    # least once per MARSHAL_STEP_ITEMS elements (before, not at all: the
    # response was one step).
    table = ServiceTable([Big()])
    count = 5 * bond.MARSHAL_STEP_ITEMS
    request = Request(conversation_id=1, service_name="test.Big", method_name="Get",
                      payload=bond.marshal(SubscribeRequest(publisher=str(count))))
    ran = 0
    done = False

    async def bystander() -> None:
        nonlocal ran
        while not done:
            await trio.lowlevel.checkpoint()
            ran += 1

    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(bystander)
            await trio.lowlevel.checkpoint()  # the bystander is running
            before = ran
            outcome = await dispatch_request(table, request)
            during = ran - before
            done = True
    assert outcome == bond.marshal(Elements(elements=[b"e"] * count))
    assert during >= 4
