"""The EMP connection state machine, driven as a client/server pair."""

from __future__ import annotations

import pytest

from bridges.emp import (
    Bye,
    Compression,
    CompressionScheme,
    Connection,
    ConnectionClosed,
    ConnectionState,
    Data,
    EmpLimits,
    Error,
    ErrorCode,
    Event,
    ExtensionErrorCode,
    Framing,
    Hello,
    LocalProtocolError,
    Ping,
    Pong,
    RemoteProtocolError,
    RequestResponse,
    UnknownExtension,
    UnsupportedVersionError,
    decode,
    encode,
)
from bridges.emp._codec import Decoder


class ConnectionPair:
    """Two machines wired back to back; ``deliver`` moves bytes one way."""

    def __init__(self, framing: Framing = Framing.SIZE_INCLUDES_FIELD) -> None:
        self.client = Connection(framing=framing)
        self.server = Connection(framing=framing)

    def deliver(self, source: Connection, target: Connection) -> list[Event]:
        target.receive_data(source.data_to_send())
        return target.events()

    def to_server(self) -> list[Event]:
        return self.deliver(self.client, self.server)

    def to_client(self) -> list[Event]:
        return self.deliver(self.server, self.client)

    def handshake(self) -> None:
        assert self.to_server() == [Hello(version=1)]
        assert self.to_client() == [Hello(version=1)]
        assert self.client.state is self.server.state is ConnectionState.OPEN


@pytest.fixture(params=list(Framing))
def pair(request: pytest.FixtureRequest) -> ConnectionPair:
    return ConnectionPair(request.param)


def open_connection() -> Connection:
    connection = Connection()
    connection.data_to_send()
    connection.receive_data(encode(Hello()))
    assert connection.events() == [Hello()]
    return connection


def sent(connection: Connection) -> list[object]:
    decoder = Decoder(framing=connection.framing)
    decoder.feed(connection.data_to_send())
    messages = []
    while (message := decoder.next_message()) is not None:
        messages.append(message)
    return messages


def fail_with(connection: Connection, wire: bytes) -> RemoteProtocolError:
    connection.receive_data(wire)
    with pytest.raises(RemoteProtocolError) as info:
        connection.events()
    assert connection.state is ConnectionState.ERROR
    error = info.value
    assert sent(connection) == [
        Error(
            code=error.code,
            extension_id=error.extension_id,
            extension_code=error.extension_code,
            message=error.message,
        )
    ]
    return error


# ---- handshake ------------------------------------------------------------


def test_hello_is_queued_at_creation() -> None:
    assert Connection().data_to_send() == encode(Hello(version=1))
    assert Connection(framing=Framing.SIZE_EXCLUDES_FIELD).data_to_send() == bytes.fromhex("00000008 00000000 01000000")


def test_handshake(pair: ConnectionPair) -> None:
    pair.handshake()
    assert pair.client.peer_version == 1


@pytest.mark.parametrize("message", [Ping(), Pong(), Data(body=b"x")])
def test_exchange_before_the_handshake_is_a_protocol_error(message: object) -> None:
    connection = Connection()
    connection.data_to_send()
    error = fail_with(connection, encode(message))  # type: ignore[arg-type]
    assert error.code == ErrorCode.PROTOCOL


def test_bye_or_error_during_the_handshake_ends_it() -> None:
    connection = Connection()
    connection.receive_data(encode(Bye()))
    assert connection.events() == [Bye()]
    assert connection.state is ConnectionState.CLOSED
    connection = Connection()
    connection.receive_data(encode(Error(code=ErrorCode.PROTOCOL, message="no")))
    assert connection.events() == [Error(code=3, message="no")]
    assert connection.state is ConnectionState.ERROR


def test_unsupported_version() -> None:
    connection = Connection()
    connection.data_to_send()
    connection.receive_data(encode(Hello(version=2)))
    with pytest.raises(UnsupportedVersionError) as info:
        connection.events()
    assert info.value.peer_version == 2
    assert connection.state is ConnectionState.ERROR
    [error] = sent(connection)
    assert isinstance(error, Error) and error.code == ErrorCode.PROTOCOL


def test_hello_is_sent_even_if_the_peer_fails_first() -> None:
    connection = Connection()
    connection.receive_data(encode(Ping()))
    with pytest.raises(RemoteProtocolError):
        connection.events()
    assert [type(message) for message in sent(connection)] == [Hello, Error]


def test_second_hello_is_a_protocol_error() -> None:
    assert fail_with(open_connection(), encode(Hello())).code == ErrorCode.PROTOCOL


@pytest.mark.parametrize("send", ["send_ping", "send_pong", "send_data", "send_request"])
def test_no_exchange_may_be_sent_during_the_handshake(send: str) -> None:
    connection = Connection()
    with pytest.raises(LocalProtocolError):
        getattr(connection, send)(*([b"x"] if "data" in send or "request" in send else []))
    assert connection.state is ConnectionState.HANDSHAKING
    assert connection.data_to_send() == encode(Hello())


# ---- data, ping-pong ------------------------------------------------------


def test_data_both_ways(pair: ConnectionPair) -> None:
    pair.handshake()
    pair.client.send_data(b"one")
    pair.client.send_data(b"two" * 1000, compression=CompressionScheme.GZIP)
    events = pair.to_server()
    assert [event.body for event in events if isinstance(event, Data)] == [b"one", b"two" * 1000]
    pair.server.send_data(b"back")
    assert pair.to_client() == [Data(body=b"back")]


def test_ping_pong(pair: ConnectionPair) -> None:
    pair.handshake()
    pair.client.send_ping()
    assert pair.client.ping_outstanding
    with pytest.raises(LocalProtocolError):
        pair.client.send_ping()
    assert pair.to_server() == [Ping()]
    assert pair.to_client() == [Pong()]
    assert not pair.client.ping_outstanding
    pair.client.send_ping()  # allowed again


def test_other_messages_are_processed_while_a_ping_is_outstanding(pair: ConnectionPair) -> None:
    pair.handshake()
    pair.client.send_ping()
    pair.to_server()
    pair.server.send_data(b"before")
    # The server's automatic pong went out first, then the data.
    assert pair.to_client() == [Pong(), Data(body=b"before")]


def test_manual_pong() -> None:
    connection = Connection(auto_pong=False)
    connection.receive_data(encode(Hello()))
    connection.events()
    connection.data_to_send()
    connection.receive_data(encode(Ping()))
    assert connection.events() == [Ping()]
    assert not connection.has_data_to_send
    connection.send_pong()
    assert sent(connection) == [Pong()]


def test_unsolicited_pong_is_ignored() -> None:
    connection = open_connection()
    connection.receive_data(encode(Pong()))
    assert connection.events() == [Pong()]
    assert connection.state is ConnectionState.OPEN


def test_ping_timeout_sends_error_2() -> None:
    connection = open_connection()
    with pytest.raises(LocalProtocolError):
        connection.ping_timed_out()
    connection.send_ping()
    connection.data_to_send()
    connection.ping_timed_out()
    assert connection.state is ConnectionState.ERROR
    [error] = sent(connection)
    assert isinstance(error, Error) and error.code == ErrorCode.TIMEOUT


# ---- request-response ---------------------------------------------------------


def test_request_response(pair: ConnectionPair) -> None:
    pair.handshake()
    first = pair.client.send_request(b"q1")
    second = pair.client.send_request(b"q2", compression=CompressionScheme.GZIP)
    assert (first, second) == (1, 2)
    assert pair.client.pending_requests == {1, 2}
    requests = pair.to_server()
    assert pair.server.peer_pending_requests == {1, 2}
    assert [event.request_response for event in requests if isinstance(event, Data)] == [
        RequestResponse(request_id=1, is_request=True),
        RequestResponse(request_id=2, is_request=True),
    ]
    pair.server.send_response(2, b"a2")
    pair.server.send_response(1, b"a1", compression=CompressionScheme.GZIP)
    with pytest.raises(LocalProtocolError):
        pair.server.send_response(1, b"again")
    responses = pair.to_client()
    assert responses == [
        Data(body=b"a2", extensions=(RequestResponse(request_id=2, is_request=False),)),
        Data(
            body=b"a1",
            extensions=(
                RequestResponse(request_id=1, is_request=False),
                Compression(scheme=CompressionScheme.GZIP),
            ),
        ),
    ]
    assert pair.client.pending_requests == frozenset()
    assert pair.server.peer_pending_requests == frozenset()


def test_response_helper_on_a_request() -> None:
    request = Data(body=b"q", extensions=(RequestResponse(request_id=7, is_request=True),))
    assert request.response(b"a") == Data(body=b"a", extensions=(RequestResponse(request_id=7, is_request=False),))
    with pytest.raises(LocalProtocolError):
        Data(body=b"x").response()


def test_response_to_an_unknown_id_is_a_protocol_error() -> None:
    connection = open_connection()
    response = Data(extensions=(RequestResponse(request_id=1, is_request=False),))
    assert fail_with(connection, encode(response)).code == ErrorCode.PROTOCOL


def test_a_response_is_accepted_once() -> None:
    connection = open_connection()
    connection.send_request(b"q")
    response = encode(Data(extensions=(RequestResponse(request_id=1, is_request=False),)))
    connection.receive_data(response)
    assert len(connection.events()) == 1
    connection.data_to_send()
    fail_with(connection, response)


def test_duplicate_pending_request_id_is_a_protocol_error() -> None:
    connection = open_connection()
    request = encode(Data(extensions=(RequestResponse(request_id=3, is_request=True),)))
    connection.receive_data(request)
    connection.events()
    assert fail_with(connection, request).code == ErrorCode.PROTOCOL


def test_pending_requests_from_the_peer_are_bounded() -> None:
    connection = Connection(limits=EmpLimits(max_pending_requests=2))
    connection.receive_data(encode(Hello()))
    connection.events()
    connection.data_to_send()
    for request_id in (1, 2):
        connection.receive_data(encode(Data(extensions=(RequestResponse(request_id=request_id, is_request=True),))))
    assert len(connection.events()) == 2
    fail_with(connection, encode(Data(extensions=(RequestResponse(request_id=3, is_request=True),))))


def test_request_ids_are_exhausted_at_2_64() -> None:
    connection = open_connection()
    connection._last_request_id = 2**64 - 2
    assert connection.send_request(b"") == 2**64 - 1
    with pytest.raises(LocalProtocolError):
        connection.send_request(b"")


# ---- extensions on the connection -----------------------------------------


def test_unknown_extension_is_an_extension_error() -> None:
    error = fail_with(open_connection(), encode(Data(extensions=(UnknownExtension(extension_id=9),))))
    assert (error.code, error.extension_id, error.extension_code) == (4, 9, ExtensionErrorCode.UNSUPPORTED_EXTENSION)


def test_extensions_outside_data_are_extension_errors() -> None:
    error = fail_with(open_connection(), encode(Ping(extensions=(Compression(scheme=0),))))
    assert (error.code, error.extension_id, error.extension_code) == (4, 1, ExtensionErrorCode.NOT_ALLOWED_HERE)


def test_bad_gzip_body_is_error_4() -> None:
    wire = bytearray(encode(Data(body=b"x" * 50, extensions=(Compression(scheme=CompressionScheme.GZIP),))))
    wire[-8] ^= 0xFF  # corrupt the CRC
    error = fail_with(open_connection(), bytes(wire))
    assert (error.code, error.extension_id) == (ErrorCode.EXTENSION, 1)


# ---- termination and errors ---------------------------------------------------


def test_bye(pair: ConnectionPair) -> None:
    pair.handshake()
    pair.client.send_bye()
    assert pair.client.state is ConnectionState.CLOSED
    with pytest.raises(LocalProtocolError):
        pair.client.send_data(b"late")
    with pytest.raises(LocalProtocolError):
        pair.client.send_bye()
    assert pair.to_server() == [Bye()]
    assert pair.server.state is ConnectionState.CLOSED
    with pytest.raises(LocalProtocolError):
        pair.server.send_data(b"late")


def test_messages_after_bye_are_ignored() -> None:
    connection = open_connection()
    connection.receive_data(encode(Bye()) + encode(Data(body=b"x")) + b"garbage")
    assert connection.events() == [Bye()]
    connection.receive_data(b"more garbage")
    assert connection.events() == []
    assert not connection.has_data_to_send


def test_peer_error_is_an_event_not_an_exception(pair: ConnectionPair) -> None:
    pair.handshake()
    pair.server.send_error(ErrorCode.EXTENSION, "bad", extension_id=1, extension_code=4)
    assert pair.server.state is ConnectionState.ERROR
    assert pair.to_client() == [Error(code=4, extension_id=1, extension_code=4, message="bad")]
    assert pair.client.state is ConnectionState.ERROR
    with pytest.raises(LocalProtocolError):
        pair.client.send_error(ErrorCode.UNSPECIFIED)


def test_plain_close() -> None:
    connection = open_connection()
    connection.receive_data(encode(Data(body=b"last")))
    connection.receive_data(b"")
    assert connection.events() == [Data(body=b"last"), ConnectionClosed()]
    assert connection.state is ConnectionState.CLOSED
    assert not connection.has_data_to_send


def test_close_in_the_middle_of_a_message_is_a_protocol_error() -> None:
    connection = open_connection()
    connection.receive_data(encode(Data(body=b"cut"))[:-1])
    connection.receive_data(b"")
    with pytest.raises(RemoteProtocolError):
        connection.events()


def test_events_before_the_bad_message_come_first() -> None:
    connection = open_connection()
    connection.receive_data(encode(Data(body=b"good")) + encode(Hello()) + encode(Data(body=b"never")))
    assert connection.events() == [Data(body=b"good")]
    with pytest.raises(RemoteProtocolError):
        connection.events()
    assert connection.events() == []
    assert connection.state is ConnectionState.ERROR
    [error] = sent(connection)
    assert isinstance(error, Error) and error.code == ErrorCode.PROTOCOL


def test_local_errors_change_nothing() -> None:
    connection = open_connection()
    with pytest.raises(LocalProtocolError):
        connection.send_data("not bytes")  # type: ignore[arg-type]
    with pytest.raises(LocalProtocolError):
        connection.send_error(300)
    with pytest.raises(LocalProtocolError):
        connection.send_response(1, b"")
    assert connection.state is ConnectionState.OPEN
    assert not connection.has_data_to_send


def test_local_and_remote_errors_are_rstreams_and_bridge_errors() -> None:
    import rstreams.protocol
    from bridges import BridgeError

    assert issubclass(RemoteProtocolError, rstreams.protocol.RemoteProtocolError)
    assert issubclass(RemoteProtocolError, BridgeError)
    assert issubclass(LocalProtocolError, rstreams.protocol.LocalProtocolError)
    assert issubclass(LocalProtocolError, BridgeError)


def test_error_text_sent_to_the_peer_is_bounded() -> None:
    connection = open_connection()
    connection._fail(RemoteProtocolError("x" * 100_000))
    [error] = sent(connection)
    assert isinstance(error, Error) and len(error.message) <= 1000


def test_repr() -> None:
    assert "HANDSHAKING" in repr(Connection())


def test_round_trip_of_the_error_message() -> None:
    message = Error(code=ErrorCode.TIMEOUT, message="late")
    assert decode(encode(message)) == message
