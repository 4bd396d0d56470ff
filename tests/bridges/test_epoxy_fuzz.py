"""Fuzzing the Epoxy decoder and connection with hypothesis.

Whatever the peer sends, the only exception is ``RemoteProtocolError``;
parsing always ends; the decoder never buffers more than one framelet; and
how the bytes are split into reads changes nothing.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bridges.epoxy import (
    Connection,
    ConnectionState,
    EpoxyHeaders,
    EpoxyLimits,
    FrameDecoder,
    ProtocolError,
    RemoteProtocolError,
    Role,
    config_frame,
    error_frame,
    message_frame,
)

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
LIMITS = EpoxyLimits(max_framelets=4, max_framelet_size=600, max_frame_size=2048, max_pending_requests=4)
LISTENING = (
    ConnectionState.CLIENT_AWAITING_CONFIG,
    ConnectionState.SERVER_AWAITING_CONFIG,
    ConnectionState.SERVER_DECIDING,
    ConnectionState.OPEN,
    ConnectionState.LOCAL_CLOSED,
)


def message(conversation_id: int, message_type: int, payload: bytes, layer: bytes | None, is_error: bool) -> bytes:
    headers = EpoxyHeaders(conversation_id=conversation_id, message_type=message_type, service_name="s", method_name="m")
    return message_frame(headers, payload, layer_data=layer, is_error=is_error).encode()


frames = st.one_of(
    st.builds(
        message,
        st.integers(0, 12),
        st.sampled_from([1, 2, 3]) | st.integers(0, 2**31 - 1),
        st.binary(min_size=1, max_size=40),
        st.none() | st.binary(min_size=1, max_size=8),
        st.booleans(),
    ),
    st.just(config_frame().encode()),
    st.integers(0, 20).map(lambda code: error_frame(ProtocolError(error_code=code)).encode()),
    st.binary(max_size=12),  # garbage
)


def open_server() -> Connection:
    server = Connection(Role.SERVER, limits=LIMITS)
    server.receive_data(config_frame().encode())
    server.events()
    server.accept()
    server.data_to_send()
    return server


def run(connection: Connection, chunks: list[bytes]) -> tuple[list[Any], int | None, bytes, ConnectionState]:
    events: list[Any] = []
    error = None
    try:
        for chunk in chunks:
            connection.receive_data(chunk)
            events += connection.events()
            if connection.state in LISTENING:
                # One framelet at most stays buffered between reads.
                assert connection._decoder.buffered <= max(6, LIMITS.max_framelet_size)
        connection.receive_data(b"")
        events += connection.events()
        events += connection.events()
    except RemoteProtocolError as exc:
        error = exc.error_code
        assert connection.state is ConnectionState.ERROR
        assert connection.events() == []
    return events, error, connection.data_to_send(), connection.state


def split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({cut % (len(data) + 1) for cut in cuts})
    chunks = [data[start:end] for start, end in zip([0, *points], [*points, len(data)])]
    return [chunk for chunk in chunks if chunk]  # an empty read is end of file


@FUZZ
@given(st.lists(frames, max_size=6).map(b"".join), st.lists(st.integers(0, 10_000), max_size=8))
def test_read_splits_change_nothing(wire: bytes, cuts: list[int]) -> None:
    whole = run(open_server(), [wire] if wire else [])
    assert run(open_server(), split(wire, cuts)) == whole
    assert run(open_server(), [bytes([byte]) for byte in wire]) == whole


@FUZZ
@given(st.binary(max_size=400), st.sampled_from(list(Role)), st.integers(1, 64))
def test_random_bytes_only_raise_remote_protocol_error(data: bytes, role: Role, step: int) -> None:
    connection = Connection(role, limits=LIMITS)
    connection.data_to_send()
    events, error, sent, state = run(connection, [data[start : start + step] for start in range(0, len(data), step)])
    if error is not None:
        assert sent  # the Error frame


@FUZZ
@given(
    st.lists(frames, min_size=1, max_size=5).map(b"".join),
    st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=4),
)
def test_mutated_streams_only_raise_remote_protocol_error(wire: bytes, mutations: list[tuple[int, int]]) -> None:
    data = bytearray(wire)
    for position, byte in mutations:
        if data:
            data[position % len(data)] = byte
    run(open_server(), [bytes(data)])


@FUZZ
@given(st.binary(max_size=300))
def test_decoder_on_random_bytes_ends(data: bytes) -> None:
    decoder = FrameDecoder(limits=LIMITS)
    decoder.feed(data)
    try:
        for _ in range(len(data) + 1):  # each frame takes at least 9 bytes
            if decoder.next_frame() is None:
                break
        else:
            raise AssertionError("the decoder did not stop")
    except RemoteProtocolError:
        pass
