"""Fuzzing the EMP decoder and connection with hypothesis.

Whatever the peer sends, the only exception is the typed
``RemoteProtocolError``; parsing always ends; and memory stays bounded by
the limits (buffered bytes never exceed one message plus what was fed).
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bridges.emp import (
    Compression,
    CompressionScheme,
    Connection,
    ConnectionState,
    Data,
    Decoder,
    EmpLimits,
    Error,
    Framing,
    Hello,
    Message,
    Ping,
    RemoteProtocolError,
    RequestResponse,
    UnknownExtension,
    decode,
    encode,
)

FUZZ = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
LIMITS = EmpLimits(max_message_size=4096, max_body_size=8192, max_extensions=4, max_pending_requests=8)

extension = st.one_of(
    st.builds(RequestResponse, request_id=st.integers(1, 2**64 - 1), is_request=st.booleans()),
    st.builds(Compression, scheme=st.sampled_from(list(CompressionScheme))),
    st.builds(UnknownExtension, extension_id=st.integers(2, 255), content=st.binary(max_size=16)),
)
messages = st.one_of(
    st.builds(Hello, version=st.integers(0, 255)),
    st.builds(Ping),
    st.builds(Error, code=st.integers(0, 255), message=st.text(max_size=20)),
    st.builds(
        Data,
        body=st.binary(max_size=64),
        extensions=st.lists(extension, max_size=3)
        .filter(lambda blocks: sum(isinstance(b, RequestResponse) for b in blocks) <= 1)
        .map(tuple),
    ),
)


def mutate(wire: bytes, positions: list[int], values: list[int]) -> bytes:
    data = bytearray(wire)
    for position, value in zip(positions, values):
        if data:
            data[position % len(data)] = value
    return bytes(data)


@FUZZ
@given(st.binary(max_size=512), st.sampled_from(list(Framing)), st.integers(1, 64))
def test_random_bytes_only_raise_remote_protocol_error(data: bytes, framing: Framing, step: int) -> None:
    connection = Connection(framing=framing, limits=LIMITS)
    try:
        for start in range(0, len(data), step):
            connection.receive_data(data[start : start + step])
            connection.events()
            assert connection._decoder.buffered <= LIMITS.max_message_size + step
        connection.receive_data(b"")
        connection.events()
    except RemoteProtocolError:
        assert connection.state is ConnectionState.ERROR
        assert connection.has_data_to_send


@FUZZ
@given(
    st.lists(messages, min_size=1, max_size=5),
    st.sampled_from(list(Framing)),
    st.lists(st.integers(0, 10_000), max_size=4),
    st.lists(st.integers(0, 255), max_size=4),
)
def test_mutated_valid_streams_only_raise_remote_protocol_error(
    stream: list[Message], framing: Framing, positions: list[int], values: list[int]
) -> None:
    wire = encode(Hello(), framing=framing) + b"".join(encode(message, framing=framing) for message in stream)
    wire = mutate(wire, positions, values)
    connection = Connection(framing=framing, limits=LIMITS)
    connection.receive_data(wire)
    connection.receive_data(b"")
    try:
        while connection.state not in (ConnectionState.CLOSED, ConnectionState.ERROR):
            connection.events()
    except RemoteProtocolError:
        assert connection.state is ConnectionState.ERROR


@FUZZ
@given(messages, st.sampled_from(list(Framing)))
def test_round_trip(message: Message, framing: Framing) -> None:
    assert decode(encode(message, framing=framing), framing=framing) == message


@FUZZ
@given(st.binary(max_size=256), st.sampled_from(list(Framing)))
def test_decoder_on_random_bytes(data: bytes, framing: Framing) -> None:
    decoder = Decoder(framing=framing, limits=LIMITS)
    decoder.feed(data)
    try:
        for _ in range(len(data) + 1):  # each message consumes at least 4 bytes
            if decoder.next_message() is None:
                break
        else:
            pytest.fail("the decoder did not stop")
    except RemoteProtocolError:
        pass


@FUZZ
@given(st.binary(max_size=64), st.integers(0, 200))
def test_random_gzip_bodies_are_extension_errors_or_data(garbage: bytes, cut: int) -> None:
    valid = encode(Data(body=garbage, extensions=(Compression(scheme=CompressionScheme.GZIP),)))
    for wire in (valid, valid[: 20 + cut % max(1, len(valid) - 20)] + garbage):
        wire = len(wire).to_bytes(4, "big") + wire[4:]
        try:
            result = decode(wire, limits=LIMITS)
        except RemoteProtocolError as error:
            assert error.code in (3, 4)
        else:
            assert isinstance(result, Data)


def test_ping_is_never_answered_before_the_handshake() -> None:
    connection = Connection()
    connection.data_to_send()
    connection.receive_data(encode(Ping()))
    with pytest.raises(RemoteProtocolError):
        connection.events()


# ---- the trio adapter under fuzz --------------------------------------------


async def _adapter_answers(wire: bytes) -> list[Message]:
    import trio
    import trio.testing
    from conftest import RawPeer

    from bridges.emp import EmpConfig, EmpServer, serve_requests

    async def reverse(body: bytes) -> bytes:
        return body[::-1]

    async def handler(connection) -> None:  # type: ignore[no-untyped-def]
        await serve_requests(connection, reverse, max_concurrency=2)

    ours, theirs = trio.testing.memory_stream_pair()
    peer = RawPeer(theirs)
    server = EmpServer(handler, config=EmpConfig(keepalive_interval=None, limits=LIMITS))
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(server.serve_stream, ours)
            await peer.send(Hello(), wire)
            await theirs.send_stream.aclose()  # end of file after the fuzz
            return await peer.receive_until_eof()


@FUZZ
@given(st.lists(st.one_of(st.binary(max_size=64), messages.map(lambda m: encode(m))), max_size=6).map(b"".join))
def test_adapter_answers_anything_with_valid_messages_then_closes(wire: bytes) -> None:
    import trio

    answers = trio.run(_adapter_answers, wire)
    assert answers[0] == Hello()
    # Whatever came in, what goes out is well-formed: pongs, responses, and at
    # most one error or bye, last.
    for answer in answers[1:-1]:
        assert not isinstance(answer, (Error, Hello)), answers
    errors = [answer for answer in answers if isinstance(answer, Error)]
    assert len(errors) <= 1 and (not errors or answers[-1] is errors[0])
