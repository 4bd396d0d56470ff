"""The MicroMsg2 machine after the handshake: windows, sequence numbers,
CONTINUED frames, the dotnet type, pubsub commands, errors and limits."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from bridges.micromsg2 import (
    MIB,
    Acknowledged,
    Completed,
    Connection,
    ConnectionClosed,
    ConnectionFailed,
    ConnectionState,
    ErrorFrame,
    Limits,
    LocalProtocolError,
    MessageFrame,
    MessageReceived,
    MessageTooLargeError,
    NamedArguments,
    RemoteProtocolError,
    Role,
    SendsRefused,
    StreamFailed,
    Subscribe,
    TooManyPendingMessagesError,
    Unsubscribe,
    WindowExceededError,
    encode_frame,
    parse_filter,
)
from tests.bridges.micromsg2_pair import Pair, open_pair


def messages(events: Sequence[object]) -> list[MessageReceived]:
    return [event for event in events if isinstance(event, MessageReceived)]


def error_frame(message: str) -> bytes:
    return encode_frame(ErrorFrame(error=NamedArguments.of("error", {"message": message})))


def broken(connection: Connection, data: bytes, error: type[Exception], text: str) -> None:
    connection.receive_data(data)
    with pytest.raises(error, match=text):
        connection.events()
    assert connection.state is ConnectionState.ERROR
    assert connection.data_to_send().startswith(b"\x04")  # the ERROR frame, then disconnect


# ---- windows ------------------------------------------------------------------


def test_batch_ack_window_paces_the_server() -> None:
    pair = open_pair("pubsub", "", "", "batch-ack:max-count=3")  # indexes: pubsub 1, batch-ack 2
    server, client = pair.server, pair.client
    assert server.send_credit == 3
    assert [server.send_message("t", b"%d" % n) for n in range(3)] == [1, 2, 3]
    assert server.send_credit == 0
    with pytest.raises(LocalProtocolError, match="window of 3 is full"):
        server.send_message("t", b"4")
    received = messages(pair.take_client_events())
    assert [m.payload for m in received] == [b"0", b"1", b"2"] and client.pending_messages == 3
    client.acknowledge(2)
    assert client.data_to_send() == bytes.fromhex("02 02 02 00 02")  # batch-ack up to 2
    client.receive_data(b"")  # (nothing but the ack in flight)
    server.receive_data(bytes.fromhex("02 02 02 00 02"))
    assert server.events() == [Acknowledged(sequence=2, count=2)]  # request(2)
    assert server.send_credit == 2 and server.unacknowledged == 1


def test_acks_work_both_ways_and_promptly() -> None:
    pair = open_pair("batch-ack:max-count=4")
    client, server = pair.client, pair.server
    assert client.send_message("orders", b"one") == 1  # a SEND
    [received] = messages(pair.take_server_events())
    assert received == MessageReceived(sequence=1, destination="orders", properties=(), payload=b"one")
    server.acknowledge()  # one message read: acked at once, not when the window is full
    assert server.data_to_send() == bytes.fromhex("02 01 02 00 01")
    client.receive_data(bytes.fromhex("02 01 02 00 01"))
    assert client.events() == [Acknowledged(sequence=1, count=1)]
    assert client.send_credit == 4


def test_ack_is_a_window_of_one() -> None:
    pair = open_pair("", "", "ack")
    server = pair.server
    assert server.window == 1
    server.send_message("t", b"a")
    with pytest.raises(LocalProtocolError, match="window of 1 is full"):
        server.send_message("t", b"b")
    messages(pair.take_client_events())
    pair.client.acknowledge()
    assert [type(e) for e in pair.take_server_events()] == [Acknowledged]
    assert server.send_credit == 1


def test_without_acks_nothing_is_acked_and_credit_is_unlimited() -> None:
    pair = open_pair()
    for n in range(50):
        pair.server.send_message("t", b"x")
    assert pair.server.send_credit is None
    assert len(messages(pair.take_client_events())) == 50
    pair.client.acknowledge(50)
    assert pair.client.data_to_send() == b""


def test_a_peer_beyond_the_window_is_refused() -> None:
    pair = open_pair("batch-ack:max-count=2")
    data = b"".join(encode_frame(MessageFrame(sequence=n, destination="t")) for n in (1, 2, 3))
    pair.client.receive_data(data)
    assert len(messages(pair.client.events())) == 2  # what came before the violation
    with pytest.raises(WindowExceededError, match="beyond the ack window of 2"):
        pair.client.events()
    assert pair.client.data_to_send() == error_frame("a message beyond the ack window of 2")


def test_too_many_pending_messages_without_acks() -> None:
    client = Connection(Role.CLIENT, limits=Limits(max_pending_messages=2))
    server = Connection(Role.SERVER)
    Pair(client, server).pump()
    data = b"".join(encode_frame(MessageFrame(sequence=n, destination="t")) for n in (1, 2, 3))
    client.receive_data(data)
    assert len(messages(client.events())) == 2
    with pytest.raises(TooManyPendingMessagesError, match="more than 2 messages pending"):
        client.events()


@pytest.mark.parametrize(
    ("payload", "text"),
    [
        (bytes.fromhex("02 01 02 00 09"), "sequence number 9, which is not awaiting an ack"),
        (bytes.fromhex("02 01 01 00"), "carries 2 bytes, not 1"),
        (bytes.fromhex("02 01 03 00 01 00"), "carries 2 bytes, not 3"),
        (bytes.fromhex("02 02 02 00 01"), "index 2, which is not negotiated"),
    ],
)
def test_bad_acks(payload: bytes, text: str) -> None:
    pair = open_pair("batch-ack")
    pair.server.send_message("t", b"x")
    pair.pump()
    broken(pair.server, payload, RemoteProtocolError, text)


def test_acknowledging_more_than_was_received_is_local_misuse() -> None:
    pair = open_pair("batch-ack")
    with pytest.raises(LocalProtocolError, match="cannot consume 1 of 0"):
        pair.client.acknowledge()
    assert pair.client.state is ConnectionState.OPEN


# ---- sequence numbers -----------------------------------------------------------


def test_sequence_numbers_wrap_from_65535_to_1_with_batch_acks() -> None:
    pair = open_pair("", "", "batch-ack:max-count=512")
    server, client = pair.server, pair.client
    sequences: list[int] = []
    acks: list[Acknowledged] = []
    while len(sequences) < 65535 + 600:
        for _ in range(512):
            server.send_message("t", b"")
        sequences += [m.sequence for m in messages(pair.take_client_events())]
        client.acknowledge(client.pending_messages)
        acks += [e for e in pair.take_server_events() if isinstance(e, Acknowledged)]
    assert sequences[:3] == [1, 2, 3]
    wrap = sequences.index(65535)
    assert sequences[wrap - 1 : wrap + 3] == [65534, 65535, 1, 2]  # 0 is skipped
    assert sequences == [(n % 65535) + 1 for n in range(len(sequences))]
    # the batch-ack that crossed the wrap freed the messages on both sides of it
    crossing = acks[wrap // 512]
    assert crossing.count == 512 and crossing.sequence < 512
    assert all(ack.count == 512 for ack in acks)


def test_a_sequence_number_out_of_order_is_refused() -> None:
    pair = open_pair()
    broken(pair.client, encode_frame(MessageFrame(sequence=2, destination="t")), RemoteProtocolError,
           "sequence number 2 where 1 was due")  # fmt: skip


def test_a_message_refused_by_the_sender_takes_no_sequence_number() -> None:
    # A payload that is not bytes, a bad destination, a full window: each is
    # refused before a number is taken, so the next message gets the next
    # number and the receiver (which refuses a gap) takes it.
    pair = open_pair("", "", "batch-ack:max-count=1")
    server, client = pair.server, pair.client
    for destination, payload in (("t", bytearray(b"x")), ("t" * 256, b"x"), ("t", "text")):
        with pytest.raises(LocalProtocolError):
            server.send_message(destination, payload)  # type: ignore[arg-type]
    assert server.send_message("t", b"one") == 1
    with pytest.raises(LocalProtocolError, match="window"):
        server.send_message("t", b"two")
    assert [m.sequence for m in messages(pair.take_client_events())] == [1]
    client.acknowledge(1)
    pair.take_server_events()
    assert server.send_message("t", b"two") == 2
    assert [(m.sequence, m.payload) for m in messages(pair.take_client_events())] == [(2, b"two")]


# ---- CONTINUED frames --------------------------------------------------------------


def test_a_3_mib_element_goes_as_continued_frames_and_counts_once() -> None:
    pair = open_pair("", "", "batch-ack:max-count=2")
    server, client = pair.server, pair.client
    element = bytes(range(256)) * (3 * MIB // 256) + b"tail!"
    server.send_message("big", element, properties={"n": 1})
    assert server.send_credit == 1  # one message, however many frames
    wire = server.data_to_send()
    header = bytes.fromhex("0001 03") + b"big" + bytes.fromhex("0004") + b"n:N1"
    frame_size = 1 + len(header) + 4 + MIB
    assert len(wire) == 3 * frame_size + 1 + len(header) + 1 + 5
    for part in range(3):
        frame = wire[part * frame_size : (part + 1) * frame_size]
        assert frame[0] == 0x18  # CONTINUED | LARGE_PAYLOAD
        assert frame[1 : 1 + len(header)] == header and frame[1 + len(header) : 5 + len(header)] == b"\x00\x10\x00\x00"
    assert wire[3 * frame_size :] == b"\x00" + header + b"\x05tail!"  # the last: no CONTINUED, small
    client.receive_data(wire[: frame_size + 7])
    assert client.events() == []
    client.receive_data(wire[frame_size + 7 :])
    [received] = client.events()
    assert received == MessageReceived(sequence=1, destination="big", properties=(("n", 1),), payload=element)
    client.acknowledge()
    server.receive_data(client.data_to_send())
    assert server.events() == [Acknowledged(sequence=1, count=1)]


def test_a_message_over_the_reassembly_limit_is_refused() -> None:
    client = Connection(Role.CLIENT, limits=Limits(max_frame_payload=MIB, max_message_size=2 * MIB))
    server = Connection(Role.SERVER)
    Pair(client, server).pump()
    server.send_message("big", bytes(3 * MIB))
    broken(client, server.data_to_send(), MessageTooLargeError, "more than 2097152 bytes")


def test_another_message_inside_a_continued_one_is_refused() -> None:
    pair = open_pair()
    first = encode_frame(MessageFrame(sequence=1, destination="t", payload=b"a", continued=True))
    for intruder in (
        MessageFrame(sequence=2, destination="t"),
        MessageFrame(sequence=1, destination="u"),
        MessageFrame(sequence=1, destination="t", properties=(("a", 1),)),
    ):
        client = Connection(Role.CLIENT)
        Pair(client, Connection(Role.SERVER)).pump()
        broken(client, first + encode_frame(intruder), RemoteProtocolError, "still CONTINUED")
    assert pair.client.state is ConnectionState.OPEN


def test_end_of_file_inside_a_continued_message() -> None:
    pair = open_pair()
    pair.client.receive_data(encode_frame(MessageFrame(sequence=1, destination="t", continued=True)))
    pair.client.receive_data(b"")
    with pytest.raises(RemoteProtocolError, match="middle of a frame or message"):
        pair.client.events()


def test_end_of_file() -> None:
    pair = open_pair()
    pair.client.receive_data(b"")
    assert pair.client.events() == [ConnectionClosed()]
    assert pair.client.state is ConnectionState.CLOSED
    with pytest.raises(LocalProtocolError):
        pair.client.send_message("t", b"")


# ---- dotnet ------------------------------------------------------------------------


def test_the_dotnet_type_goes_with_the_next_message_and_stays() -> None:
    pair = open_pair("json;dotnet", "", "", "batch-ack")
    type_name = "OneTrueError.Contracts.Reports, OneTrueError.Client"
    pair.server.send_message("t", b"{}", dotnet_type=type_name)
    wire = pair.server.data_to_send()
    assert wire.startswith(bytes([2, 2, 51]) + type_name.encode())  # dotnet is index 2
    pair.client.receive_data(wire)
    pair.server.send_message("t", b"[]")
    pair.pump()
    first, second = messages(pair.client.events() + pair.take_client_events())
    assert first.dotnet_type == second.dotnet_type == type_name


def test_dotnet_misuse() -> None:
    pair = open_pair()
    with pytest.raises(LocalProtocolError, match="dotnet extension"):
        pair.server.send_message("t", b"", dotnet_type="T")
    pair = open_pair("dotnet")
    inside = encode_frame(MessageFrame(sequence=1, destination="t", continued=True))
    broken(pair.client, inside + bytes([2, 1, 1]) + b"T", RemoteProtocolError, "between the frames")
    pair = open_pair("dotnet")
    broken(pair.client, bytes([2, 1, 0]), RemoteProtocolError, "empty dotnet type")
    pair = open_pair("dotnet")
    broken(pair.client, bytes([2, 1, 1, 0xFF]), RemoteProtocolError, "not UTF-8")
    pair = open_pair("json")
    broken(pair.client, bytes([2, 1, 0]), RemoteProtocolError, "'json' defines no EXTENSION frames")


# ---- pubsub --------------------------------------------------------------------------


def test_pubsub_commands_as_events() -> None:
    pair = open_pair("pubsub")
    client, server = pair.client, pair.server
    client.subscribe("topic/x", parse_filter("price>=N10"))
    assert client.data_to_send() == bytes([1, 53]) + b"subscribe;destination=topic%2Fx,filter=price%3E%3DN10"
    server.receive_data(bytes([1, 53]) + b"subscribe;destination=topic%2Fx,filter=price%3E%3DN10")
    client.subscribe("range?count=2")
    assert server.events() + pair.take_server_events() == [
        Subscribe(destination="topic/x", filter=parse_filter("price>=N10")),
        Subscribe(destination="range?count=2"),
    ]
    assert server.subscriptions == client.subscriptions == {"topic/x", "range?count=2"}
    server.complete("range?count=2")
    assert server.data_to_send() == b"\x01\x27completed;destination=range%3Fcount%3D2"
    server.fail_stream("topic/x", "no such publisher")
    client.receive_data(b"\x01\x27completed;destination=range%3Fcount%3D2")
    pair.pump()
    assert pair.take_client_events() == [
        Completed(destination="range?count=2"),
        StreamFailed(destination="topic/x", message="no such publisher"),
    ]
    assert client.state is server.state is ConnectionState.OPEN  # a stream error keeps the connection
    assert client.subscriptions == server.subscriptions == frozenset()
    client.subscribe("a")
    client.unsubscribe("a")
    assert pair.take_server_events() == [Subscribe(destination="a"), Unsubscribe(destination="a")]


def test_the_server_refuses_sends_to_a_destination_without_ending_a_stream_or_the_connection() -> None:
    pair = open_pair("pubsub")
    client, server = pair.client, pair.server
    client.subscribe("a")
    pair.pump()
    pair.take_server_events()
    wire = b"\x04\x36error;destination=a,for=send,message=no%20such%20topic"
    server.refuse_sends("a", "no such topic")  # (a subscription to "a" crossing it, say)
    assert server.data_to_send() == wire
    client.receive_data(wire)
    assert pair.take_client_events() == [SendsRefused(destination="a", message="no such topic")]
    assert client.state is server.state is ConnectionState.OPEN
    assert client.subscriptions == server.subscriptions == {"a"}  # no stream ended
    with pytest.raises(LocalProtocolError, match="only the server"):
        client.refuse_sends("a", "x")


def test_an_unsubscribe_after_completed_is_ignored() -> None:
    pair = open_pair("pubsub")
    pair.client.subscribe("a")
    pair.pump()
    pair.server.complete("a")
    pair.server.receive_data(encode_frame_command(b"unsubscribe;destination=a"))
    assert pair.server.events() == []


def test_a_bad_filter_fails_only_its_subscription() -> None:
    pair = open_pair("pubsub")
    pair.server.receive_data(encode_frame_command(b"subscribe;destination=a,filter=b"))
    assert pair.server.events() == []
    assert pair.server.data_to_send() == encode_frame(
        ErrorFrame(error=NamedArguments.of("error", {"destination": "a", "message": "condition 'b' is not 'key OP VALUE'"}))
    )
    assert pair.server.state is ConnectionState.OPEN and pair.server.subscriptions == frozenset()


@pytest.mark.parametrize(
    ("server_side", "payload", "text"),
    [
        (True, b"subscribe;destination=a", "already subscribed"),
        (True, b"subscribe", "without a destination"),
        (True, b"completed;destination=a", "unexpected command 'completed' from the client"),
        (True, b"publish;destination=a", "unexpected command 'publish'"),
        (False, b"subscribe;destination=a", "unexpected command 'subscribe' from the server"),
        (True, b"subscribe;destination=" + b"x" * 256, "at most 255 bytes"),
    ],
)
def test_bad_commands(server_side: bool, payload: bytes, text: str) -> None:
    pair = open_pair("pubsub")
    pair.client.subscribe("a")
    pair.pump()
    connection = pair.server if server_side else pair.client
    broken(connection, encode_frame_command(payload), RemoteProtocolError, text)


def encode_frame_command(payload: bytes) -> bytes:
    return (bytes([1, len(payload)]) if len(payload) < 256 else bytes([9]) + len(payload).to_bytes(4, "big")) + payload


def test_commands_need_pubsub() -> None:
    pair = open_pair()
    broken(pair.server, b"\x01\x17subscribe;destination=a", RemoteProtocolError, "without the pubsub extension")
    pair = open_pair()
    with pytest.raises(LocalProtocolError, match="pubsub"):
        pair.client.subscribe("a")


def test_command_misuse_is_local() -> None:
    pair = open_pair("pubsub")
    with pytest.raises(LocalProtocolError, match="only the server"):
        pair.client.complete("a")
    with pytest.raises(LocalProtocolError, match="only the client"):
        pair.server.subscribe("a")
    with pytest.raises(LocalProtocolError, match="not subscribed"):
        pair.client.unsubscribe("a")
    with pytest.raises(LocalProtocolError, match="is not subscribed"):
        pair.server.complete("a")
    with pytest.raises(LocalProtocolError, match="is not subscribed"):
        pair.server.fail_stream("a", "x")
    with pytest.raises(LocalProtocolError, match="not 'key OP VALUE'"):
        pair.client.subscribe("a", "nonsense")
    pair.client.subscribe("a")
    with pytest.raises(LocalProtocolError, match="already subscribed"):
        pair.client.subscribe("a")


# ---- connection errors and misuse -----------------------------------------------------


def test_a_connection_error_from_the_peer_is_an_event() -> None:
    pair = open_pair()
    pair.client.receive_data(error_frame("shutting down") + b"ignored")
    assert pair.client.events() == [ConnectionFailed(message="shutting down")]
    assert pair.client.state is ConnectionState.ERROR
    assert pair.client.data_to_send() == b""


def test_send_error_then_nothing() -> None:
    pair = open_pair()
    pair.server.send_error("going away")
    assert pair.server.data_to_send() == b"\x04\x1aerror;message=going%20away"
    assert pair.client.state is ConnectionState.OPEN
    with pytest.raises(LocalProtocolError):
        pair.server.send_error("again")
    pair.client.receive_data(b"\x04\x1aerror;message=going%20away")
    assert pair.client.events() == [ConnectionFailed(message="going away")]


def test_close_locally() -> None:
    pair = open_pair()
    pair.client.close()
    assert pair.client.state is ConnectionState.CLOSED
    with pytest.raises(LocalProtocolError):
        pair.client.close()


@pytest.mark.parametrize(
    ("data", "text"),
    [
        (b"\x04\x04oops", "ERROR frame named 'oops'"),
        (b"\x02\x05\x00", "index 5, which is not negotiated"),
        (b"\x40", "unknown frame flags"),
    ],
)
def test_bad_frames_after_the_handshake(data: bytes, text: str) -> None:
    pair = open_pair()
    broken(pair.client, data, RemoteProtocolError, text)


def test_local_message_errors_change_nothing() -> None:
    pair = open_pair()
    for call in (
        lambda: pair.server.send_message("x" * 256, b""),
        lambda: pair.server.send_message("t", b"", properties={"Bad": 1}),
        lambda: pair.server.send_message("t", b"", properties={"b": 1.5}),  # type: ignore[arg-type]
        lambda: pair.server.send_message("t", b"", properties={"b": "\ud800"}),
        lambda: pair.server.send_message("\ud800", b""),
    ):
        with pytest.raises(LocalProtocolError):
            call()
    assert pair.server.send_message("t", b"") == 1  # no number was used up
