"""The Epoxy connection state machine: a client against a server, and against hand-made frames."""

from __future__ import annotations

import pytest
from bond_test_schema import Operation, Params, Result
from epoxy_helpers import EpoxyPair, frames_of

from bridges.epoxy import (
    ConfigReceived,
    Connection,
    ConnectionClosed,
    ConnectionState,
    ConversationIdsExhaustedError,
    EpoxyConfig,
    EpoxyHeaders,
    EpoxyLimits,
    EpoxyMessageType,
    Error,
    ErrorCode,
    Event,
    Frame,
    Framelet,
    FrameletType,
    LocalProtocolError,
    ProtocolError,
    ProtocolErrorCode,
    ProtocolErrorReceived,
    RemoteProtocolError,
    Request,
    Response,
    Role,
    bond,
    config_frame,
    error_frame,
    message_frame,
)

S = ConnectionState
Code = ProtocolErrorCode
REQUEST, RESPONSE, EVENT = EpoxyMessageType.REQUEST, EpoxyMessageType.RESPONSE, EpoxyMessageType.EVENT
PAYLOAD = bond.marshal(Params(x=1))


@pytest.fixture
def pair() -> EpoxyPair:
    pair = EpoxyPair()
    pair.handshake()
    return pair


def open_server() -> Connection:
    server = Connection(Role.SERVER)
    server.receive_data(config_frame().encode())
    server.events()
    server.accept()
    server.data_to_send()
    return server


def open_client() -> Connection:
    client = Connection(Role.CLIENT)
    client.data_to_send()
    client.receive_data(config_frame().encode())
    client.events()
    return client


def message(conversation_id: int, message_type: int, payload: bytes = PAYLOAD, **options: object) -> bytes:
    headers = EpoxyHeaders(conversation_id=conversation_id, message_type=message_type, service_name="s", method_name="m")
    return message_frame(headers, payload, **options).encode()  # type: ignore[arg-type]


def sent_error(connection: Connection) -> int:
    """The code of the Error frame ``connection`` queued, which must be all it queued."""
    [frame] = frames_of(connection.data_to_send())
    assert frame.framelets[0].type == FrameletType.PROTOCOL_ERROR
    return bond.deserialize(ProtocolError, frame.framelets[0].content, bond.Protocol.FAST).error_code


def violation(connection: Connection, wire: bytes, code: ProtocolErrorCode, match: str | None = None) -> RemoteProtocolError:
    connection.receive_data(wire)
    with pytest.raises(RemoteProtocolError, match=match) as caught:
        connection.events()  # may first return the events before the violation
        connection.events()
    assert caught.value.error_code == code
    assert connection.state is S.ERROR
    assert sent_error(connection) == code
    # Deaf from now on.
    connection.receive_data(message(2, REQUEST))
    assert connection.events() == [] and not connection.has_data_to_send
    return caught.value


# ---- the handshake -------------------------------------------------------------------


def test_handshake() -> None:
    pair = EpoxyPair()
    assert pair.client.state is S.CLIENT_AWAITING_CONFIG and pair.server.state is S.SERVER_AWAITING_CONFIG
    assert pair.client.data_to_send() == config_frame().encode() == bytes.fromhex("01 00 43 47 01 00 00 00 00")
    pair.server.receive_data(config_frame().encode())
    assert pair.server.events() == [ConfigReceived(config=EpoxyConfig())]
    assert pair.server.state is S.SERVER_DECIDING and not pair.server.has_data_to_send
    pair.server.accept()
    assert pair.server.state is S.OPEN
    assert pair.to_client() == [ConfigReceived(config=EpoxyConfig())]
    assert pair.client.state is S.OPEN and pair.client.peer_config == EpoxyConfig()


def test_nothing_but_config_before_the_handshake_is_over() -> None:
    pair = EpoxyPair()
    with pytest.raises(LocalProtocolError, match="cannot send a message in state CLIENT_AWAITING_CONFIG"):
        pair.client.send_request("s", "m", PAYLOAD)
    pair.to_server()
    with pytest.raises(LocalProtocolError, match="SERVER_DECIDING"):
        pair.server.send_event("s", "m", PAYLOAD)
    with pytest.raises(LocalProtocolError, match="only a server"):
        pair.client.accept()


def test_server_rejects_the_connection() -> None:
    pair = EpoxyPair()
    pair.to_server()
    pair.server.reject(details=Error(error_code=ErrorCode.INTERNAL_SERVER_ERROR, message="go away"))
    assert pair.server.state is S.ERROR
    assert pair.to_client() == [
        ProtocolErrorReceived(
            error_code=Code.CONNECTION_REJECTED, details=Error(error_code=ErrorCode.INTERNAL_SERVER_ERROR, message="go away")
        )
    ]
    assert pair.client.state is S.ERROR
    with pytest.raises(LocalProtocolError):
        pair.server.accept()


def test_server_rejects_a_bad_config_and_even_before_one() -> None:
    server = Connection(Role.SERVER)
    server.reject(Code.CLIENT_BAD_HANDSHAKE)
    assert sent_error(server) == Code.CLIENT_BAD_HANDSHAKE
    with pytest.raises(LocalProtocolError, match="only a server"):
        open_client().reject()
    with pytest.raises(LocalProtocolError, match="cannot reject in state OPEN"):
        open_server().reject()


def test_a_config_that_does_not_decode_is_a_bad_handshake() -> None:
    bad = Frame(framelets=(Framelet(type=FrameletType.EPOXY_CONFIG, content=b"\x02"),)).encode()
    violation(Connection(Role.SERVER), bad, Code.CLIENT_BAD_HANDSHAKE, "EpoxyConfig does not decode")
    client = Connection(Role.CLIENT)
    client.data_to_send()
    violation(client, bad, Code.SERVER_BAD_HANDSHAKE)


def test_a_message_before_the_handshake_is_a_violation() -> None:
    violation(Connection(Role.SERVER), message(1, REQUEST), Code.PROTOCOL_VIOLATED, "Message frame in state SERVER_AWAITING")
    client = Connection(Role.CLIENT)
    client.data_to_send()
    violation(client, message(2, REQUEST), Code.PROTOCOL_VIOLATED, "CLIENT_AWAITING_CONFIG")
    deciding = Connection(Role.SERVER)
    violation(deciding, config_frame().encode() + message(1, REQUEST), Code.PROTOCOL_VIOLATED, "SERVER_DECIDING")


def test_a_second_config_is_a_violation() -> None:
    violation(open_server(), config_frame().encode(), Code.PROTOCOL_VIOLATED, "Config frame in state OPEN")


def test_handshake_timeout() -> None:
    for connection in (Connection(Role.SERVER), Connection(Role.CLIENT)):
        connection.data_to_send()
        connection.handshake_timed_out()
        assert connection.state is S.ERROR and sent_error(connection) == Code.TIMEOUT
    with pytest.raises(LocalProtocolError, match="no handshake in progress"):
        open_client().handshake_timed_out()


# ---- messages --------------------------------------------------------------------------


def test_request_and_response(pair: EpoxyPair) -> None:
    conversation = pair.client.send_request("examples.calc.Calc", "Calculate", Params(x=67, y=87, operation=Operation.Mul))
    assert conversation == 1 and pair.client.pending_requests == {1}
    [request] = pair.to_server()
    assert isinstance(request, Request)
    assert (request.conversation_id, request.service_name, request.method_name) == (1, "examples.calc.Calc", "Calculate")
    assert request.decode(Params) == Params(x=67, y=87, operation=Operation.Mul)
    assert pair.server.peer_pending_requests == {1}
    pair.server.send_response(1, Result(z=5829))
    assert pair.server.peer_pending_requests == frozenset()
    [response] = pair.to_client()
    assert response == Response(conversation_id=1, payload=bond.marshal(Result(z=5829)))
    assert response.decode(Result) == Result(z=5829) and not response.is_error
    assert pair.client.pending_requests == frozenset()


def test_conversation_ids_by_parity(pair: EpoxyPair) -> None:
    assert [pair.client.send_request("s", "m", PAYLOAD) for _ in range(3)] == [1, 3, 5]
    assert pair.client.send_event("s", "m", PAYLOAD) == 7
    assert [pair.server.send_request("s", "m", PAYLOAD) for _ in range(2)] == [2, 4]
    assert pair.server.send_event("s", "m", PAYLOAD) == 6 == pair.server.next_conversation_id - 2
    assert [event.conversation_id for event in pair.to_server()] == [1, 3, 5, 7]  # type: ignore[union-attr]
    assert [event.conversation_id for event in pair.to_client()] == [2, 4, 6]  # type: ignore[union-attr]
    # The server answers the client's requests; the client the server's.
    pair.server.send_response(3, PAYLOAD)
    pair.client.send_response(2, PAYLOAD)
    assert pair.to_client() == [Response(conversation_id=3, payload=PAYLOAD)]
    assert pair.to_server() == [Response(conversation_id=2, payload=PAYLOAD)]


def test_error_response(pair: EpoxyPair) -> None:
    pair.client.send_request("examples.calc.Calc", "Square", PAYLOAD)
    pair.to_server()
    pair.server.send_error_response(1, Error(error_code=ErrorCode.METHOD_NOT_FOUND, message="no Square"))
    [response] = pair.to_client()
    assert isinstance(response, Response) and response.is_error
    assert response.decode_error() == Error(error_code=ErrorCode.METHOD_NOT_FOUND, message="no Square")
    with pytest.raises(LocalProtocolError):
        Response(conversation_id=1, payload=PAYLOAD).decode_error()


def test_event_and_layer_data(pair: EpoxyPair) -> None:
    layer = bond.marshal(Result(z=1))
    pair.client.send_event("svc", "Notify", Params(y=2), layer_data=Result(z=1))
    assert pair.client.pending_requests == frozenset()  # no response expected
    [event] = pair.to_server()
    assert event == Event(conversation_id=1, service_name="svc", method_name="Notify", payload=bond.marshal(Params(y=2)), layer_data=layer)
    assert event.decode_layer_data(Result) == Result(z=1)
    assert pair.server.peer_pending_requests == frozenset()
    pair.client.send_request("s", "m", b"CB\x01\x00\x00", layer_data=layer)
    [request] = pair.to_server()
    assert request.payload == b"CB\x01\x00\x00" and request.layer_data == layer  # type: ignore[union-attr]
    pair.server.send_response(3, PAYLOAD, layer_data=layer)
    [response] = pair.to_client()
    assert response.layer_data == layer  # type: ignore[union-attr]
    assert Request(conversation_id=0, service_name="", method_name="", payload=b"p").decode_layer_data(Result) is None


def test_local_misuse_changes_nothing(pair: EpoxyPair) -> None:
    with pytest.raises(LocalProtocolError, match="no request of the peer is pending"):
        pair.server.send_response(1, PAYLOAD)
    pair.client.send_request("s", "m", PAYLOAD)
    pair.to_server()
    for call in (
        lambda: pair.server.send_response(1, b""),
        lambda: pair.server.send_response(1, "text"),  # type: ignore[arg-type]
        lambda: pair.server.send_response(1, Params(x=2**40)),
        lambda: pair.server.send_error_response(1, Result()),  # type: ignore[arg-type]
        lambda: pair.client.send_request(1, "m", PAYLOAD),  # type: ignore[arg-type]
        lambda: pair.client.send_request("\ud800", "m", PAYLOAD),
        lambda: pair.server.send_protocol_error(Code.ERROR_IN_ERROR),
        lambda: pair.server.send_protocol_error("x"),  # type: ignore[arg-type]
        lambda: pair.server.send_protocol_error(Code.GENERIC_ERROR, details=Result()),  # type: ignore[arg-type]
    ):
        with pytest.raises(LocalProtocolError):
            call()
    assert pair.server.state is S.OPEN and not pair.server.has_data_to_send
    assert pair.server.peer_pending_requests == {1}
    assert pair.client.next_conversation_id == 3 and not pair.client.has_data_to_send
    pair.server.send_response(1, PAYLOAD)
    with pytest.raises(LocalProtocolError):
        pair.server.send_response(1, PAYLOAD)  # answered already


def test_conversation_ids_exhausted() -> None:
    pair = EpoxyPair(max_conversation_id=5)
    pair.handshake()
    assert [pair.client.send_request("s", "m", PAYLOAD) for _ in range(3)] == [1, 3, 5]
    with pytest.raises(ConversationIdsExhaustedError, match="7 is above 5") as caught:
        pair.client.send_event("s", "m", PAYLOAD)
    assert caught.value.error_code == Code.CONVERSATION_IDS_EXHAUSTED
    assert pair.client.state is S.ERROR
    events = pair.to_server()
    assert [type(event) for event in events] == [Request, Request, Request, ProtocolErrorReceived]
    assert events[-1] == ProtocolErrorReceived(error_code=Code.CONVERSATION_IDS_EXHAUSTED)
    assert pair.server.state is S.ERROR


def test_responses_to_unknown_ids_are_dropped(pair: EpoxyPair) -> None:
    pair.client.send_request("s", "m", PAYLOAD)
    pair.to_server()
    pair.server.send_response(1, PAYLOAD)
    answered_twice = message(1, RESPONSE)
    never_sent = message(9, RESPONSE)
    pair.client.receive_data(pair.server.data_to_send() + answered_twice + never_sent)
    assert pair.client.events() == [Response(conversation_id=1, payload=PAYLOAD)]
    assert pair.client.dropped_responses == 2 and pair.client.state is S.OPEN


# ---- the peer's protocol violations -----------------------------------------------------


def test_unknown_framelet() -> None:
    violation(open_server(), bytes.fromhex("01 00 41 41 01 00 00 00 00"), Code.PROTOCOL_VIOLATED, "unknown framelet type")


def test_framelets_out_of_order() -> None:
    violation(open_server(), bytes.fromhex("02 00 50 44"), Code.PROTOCOL_VIOLATED, "cannot start with PAYLOAD_DATA")


def test_empty_frame_and_empty_framelet() -> None:
    violation(open_server(), bytes.fromhex("00 00"), Code.PROTOCOL_VIOLATED, "0 framelets")
    violation(open_server(), bytes.fromhex("02 00 48 52 00 00 00 00"), Code.PROTOCOL_VIOLATED, "empty EPOXY_HEADERS")


def test_request_or_event_carrying_error_data() -> None:
    violation(open_server(), message(1, REQUEST, is_error=True), Code.PROTOCOL_VIOLATED, "request 1 carries ErrorData")
    violation(open_server(), message(1, EVENT, is_error=True), Code.PROTOCOL_VIOLATED, "event 1 carries ErrorData")


def test_headers_that_do_not_decode() -> None:
    garbage = Frame(
        framelets=(Framelet(type=FrameletType.EPOXY_HEADERS, content=b"\x09\x02"), Framelet(type=FrameletType.PAYLOAD_DATA, content=PAYLOAD))
    )
    violation(open_server(), garbage.encode(), Code.MALFORMED_DATA, "EpoxyHeaders do not decode")
    missing_type = Frame(
        framelets=(Framelet(type=FrameletType.EPOXY_HEADERS, content=b"\x00"), Framelet(type=FrameletType.PAYLOAD_DATA, content=PAYLOAD))
    )
    violation(open_server(), missing_type.encode(), Code.MALFORMED_DATA, "message_type")


def test_unknown_message_type() -> None:
    violation(open_server(), message(1, 7), Code.NOT_SUPPORTED, "unknown message type 7")


def test_limits() -> None:
    limits = EpoxyLimits(max_framelet_size=1024, max_pending_requests=2)
    server = Connection(Role.SERVER, limits=limits)
    server.receive_data(config_frame().encode())
    server.events()
    server.accept()
    server.data_to_send()
    violation(server, message(1, REQUEST, b"x" * 1025), Code.LIMIT_EXCEEDED, "framelet of 1025 bytes")
    server = Connection(Role.SERVER, limits=limits)
    server.receive_data(config_frame().encode())
    server.events()
    server.accept()
    server.data_to_send()
    error = violation(server, message(1, REQUEST) + message(3, REQUEST) + message(5, REQUEST), Code.LIMIT_EXCEEDED)
    assert "more than 2 requests pending" in error.message


def test_bad_conversation_ids() -> None:
    violation(open_server(), message(2, REQUEST), Code.BAD_CONVERSATION_ID, "request with conversation id 2, of our parity")
    violation(open_server(), message(4, EVENT), Code.BAD_CONVERSATION_ID, "event")
    violation(open_client(), message(1, REQUEST), Code.BAD_CONVERSATION_ID)
    violation(open_client(), message(2, RESPONSE), Code.BAD_CONVERSATION_ID, "response to conversation 2, an id of the peer's parity")
    violation(open_server(), message(1, REQUEST) + message(1, REQUEST), Code.BAD_CONVERSATION_ID, "already pending")
    # Id 0 is even: a server may use it; a client may not.
    client = open_client()
    client.receive_data(message(0, EVENT))
    assert [event.conversation_id for event in client.events()] == [0]  # type: ignore[union-attr]


def test_eof_in_the_middle_of_a_frame() -> None:
    server = open_server()
    server.receive_data(message(1, REQUEST)[:-1])
    assert server.events() == []
    server.receive_data(b"")
    with pytest.raises(RemoteProtocolError, match="middle of a frame"):
        server.events()
    assert server.state is S.ERROR and sent_error(server) == Code.PROTOCOL_VIOLATED


def test_events_before_a_violation_come_first() -> None:
    server = open_server()
    server.receive_data(message(1, REQUEST) + bytes.fromhex("00 00"))
    [request] = server.events()
    assert isinstance(request, Request) and server.state is S.ERROR
    with pytest.raises(RemoteProtocolError, match="0 framelets"):
        server.events()
    assert server.events() == []


def test_peer_protocol_error(pair: EpoxyPair) -> None:
    pair.server.send_protocol_error(Code.INTERNAL_ERROR, Error(error_code=1, message="oops"))
    assert pair.server.state is S.ERROR
    assert pair.to_client() == [ProtocolErrorReceived(error_code=Code.INTERNAL_ERROR, details=Error(error_code=1, message="oops"))]
    assert pair.client.state is S.ERROR and not pair.client.has_data_to_send
    with pytest.raises(LocalProtocolError):
        pair.client.send_request("s", "m", PAYLOAD)


def test_a_malformed_protocol_error_is_error_in_error_and_not_answered() -> None:
    client = open_client()
    bad = Frame(framelets=(Framelet(type=FrameletType.PROTOCOL_ERROR, content=b"\x10\x00"),)).encode()
    client.receive_data(bad)
    assert client.events() == [ProtocolErrorReceived(error_code=Code.ERROR_IN_ERROR)]
    assert client.state is S.ERROR and not client.has_data_to_send
    # Details that do not decode (an Error without its required error_code)
    # are dropped; the code stays.
    server = open_server()
    bad_details = ProtocolError(error_code=Code.TIMEOUT, details=bond.Bonded.from_data(Error, b"\x00", bond.Protocol.FAST))
    server.receive_data(error_frame(bad_details).encode())
    assert server.events() == [ProtocolErrorReceived(error_code=Code.TIMEOUT)]
    # An unknown code is passed on as an int.
    server = open_server()
    server.receive_data(error_frame(ProtocolError(error_code=77)).encode())
    assert server.events() == [ProtocolErrorReceived(error_code=77)]


# ---- closing ---------------------------------------------------------------------------------


def test_peer_closes_first_we_may_still_answer(pair: EpoxyPair) -> None:
    pair.client.send_request("s", "m", PAYLOAD)
    pair.client.close()
    assert pair.client.state is S.LOCAL_CLOSED
    with pytest.raises(LocalProtocolError):
        pair.client.send_event("s", "m", PAYLOAD)
    pair.server.receive_data(pair.client.data_to_send())
    pair.server.receive_data(b"")
    events = pair.server.events()
    assert [type(event) for event in events] == [Request, ConnectionClosed]
    assert pair.server.state is S.REMOTE_CLOSED
    pair.server.receive_data(message(3, REQUEST))  # after end of file: ignored
    assert pair.server.events() == []
    pair.server.send_response(1, PAYLOAD)
    pair.server.close()
    assert pair.server.state is S.CLOSED
    pair.client.receive_data(pair.server.data_to_send())
    pair.client.receive_data(b"")
    assert [type(event) for event in pair.client.events()] == [Response, ConnectionClosed]
    assert pair.client.state is S.CLOSED


def test_a_violation_after_we_closed_is_not_answered(pair: EpoxyPair) -> None:
    pair.client.close()
    pair.client.receive_data(bytes.fromhex("00 00"))
    with pytest.raises(RemoteProtocolError):
        pair.client.events()
    assert pair.client.state is S.ERROR and not pair.client.has_data_to_send


def test_closing_during_the_handshake() -> None:
    client = Connection(Role.CLIENT)
    client.close()
    assert client.state is S.CLOSED
    server = Connection(Role.SERVER)
    server.receive_data(b"")
    assert server.events() == [ConnectionClosed()] and server.state is S.CLOSED
    with pytest.raises(LocalProtocolError):
        server.close()


def test_repr_and_arguments() -> None:
    assert "client CLIENT_AWAITING_CONFIG" in repr(Connection(Role.CLIENT))
    with pytest.raises(TypeError):
        Connection("client")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        Connection(Role.CLIENT, max_conversation_id=-1)
