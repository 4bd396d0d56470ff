"""The three-step handshake: the negotiation matrix and every way it is refused."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from bridges.micromsg2 import (
    Connection,
    ConnectionFailed,
    ConnectionState,
    ExtensionSpec,
    Handshake,
    HandshakeCompleted,
    Limits,
    LocalProtocolError,
    RemoteProtocolError,
    Role,
    UnsupportedExtensionError,
    UnsupportedVersionError,
    encode_handshake,
)
from tests.bridges.micromsg2_pair import Pair, ext, open_pair


def names(extensions: tuple[ExtensionSpec, ...]) -> list[str]:
    return [str(extension) for extension in extensions]


def completed(events: Sequence[object]) -> HandshakeCompleted:
    [event] = [event for event in events if isinstance(event, HandshakeCompleted)]
    return event


def test_the_spec_complete_handshake_example_byte_for_byte() -> None:
    client = Connection(Role.CLIENT, identity="hulk", required=[ext("json"), ext("dotnet")])
    server = Connection(Role.SERVER, identity="srver", optional=[ext("batch-ack")])
    hello = client.data_to_send()
    assert hello == bytes([1, 0, 0, 4]) + b"hulk" + bytes([0, 11]) + b"json;dotnet" + bytes([0, 0])
    server.receive_data(hello)
    assert server.events() == []
    assert server.state is ConnectionState.AWAITING_FINAL
    reply = server.data_to_send()
    assert reply == bytes([1, 0, 0, 5]) + b"srver" + bytes([0, 0]) + bytes([0, 9]) + b"batch-ack"
    client.receive_data(reply)
    client_done = completed(client.events())
    final = client.data_to_send()
    assert final == bytes([1, 0, 0, 4]) + b"hulk" + bytes([0, 11]) + b"json;dotnet" + bytes([0, 9]) + b"batch-ack"
    server.receive_data(final)
    server_done = completed(server.events())
    assert client_done.peer_identity == "srver" and server_done.peer_identity == "hulk"
    for done in (client_done, server_done):
        assert names(done.extensions) == ["json", "dotnet", "batch-ack"]  # indexes 1, 2, 3
        assert done.window == 10 and done.version == (1, 0)
    assert client.state is server.state is ConnectionState.OPEN


def test_nothing_negotiated() -> None:
    pair = open_pair()
    assert pair.client.state is pair.server.state is ConnectionState.OPEN
    assert pair.client.extensions == pair.server.extensions == ()
    assert pair.client.window is None and pair.client.send_credit is None
    assert pair.client.peer_identity == "rstreams"  # our server's identity


@pytest.mark.parametrize(
    ("client_required", "client_optional", "server_required", "server_optional", "accept", "used"),
    [
        # required on the client only, on the server only, on both
        ("json;dotnet", "", "", "", None, ["json", "dotnet"]),
        ("", "", "pubsub", "", None, ["pubsub"]),
        ("json", "", "pubsub;json", "", None, ["json", "pubsub"]),
        # optional: taken only if the server suggests it; by default any it suggests
        ("", "json", "", "", None, []),
        ("", "json", "", "json", None, ["json"]),
        ("", "json", "", "dotnet;json", None, ["dotnet", "json"]),  # "Y like you but also Z"
        ("", "json", "", "json;ack;batch-ack", {"json"}, ["json"]),  # the client does not want acks
        ("pubsub", "json", "", "json;pubsub", None, ["pubsub", "json"]),  # required is not repeated
        # batch-ack: the smaller count wins, and it wins over ack
        ("", "batch-ack:max-count=5", "", "batch-ack:max-count=64", None, ["batch-ack:max-count=5"]),
        ("batch-ack:max-count=64", "", "batch-ack:max-count=8", "", None, ["batch-ack:max-count=8"]),
        ("", "", "", "ack;batch-ack:max-count=64", None, ["batch-ack:max-count=64"]),
        ("", "", "ack", "batch-ack", None, ["ack", "batch-ack"]),
        ("", "", "ack", "", None, ["ack"]),
    ],
)
def test_negotiation_matrix(
    client_required: str,
    client_optional: str,
    server_required: str,
    server_optional: str,
    accept: set[str] | None,
    used: list[str],
) -> None:
    pair = open_pair(client_required, client_optional, server_required, server_optional, accept=accept)
    assert pair.client.state is pair.server.state is ConnectionState.OPEN
    assert names(pair.client.extensions) == names(pair.server.extensions) == used
    windows = {"ack": 1, "batch-ack": 10, "batch-ack:max-count=5": 5, "batch-ack:max-count=8": 8,
               "batch-ack:max-count=64": 64}  # fmt: skip
    expected_window = next((windows[n] for n in reversed(used) if n.startswith("batch-ack")), None)
    if expected_window is None and "ack" in used:
        expected_window = 1
    assert pair.client.window == pair.server.window == expected_window


def refused(connection: Connection, data: bytes, error: type[RemoteProtocolError], text: str) -> bytes:
    connection.receive_data(data)
    with pytest.raises(error, match=text):
        connection.events()
    assert connection.state is ConnectionState.ERROR
    return connection.data_to_send()


def hello(**fields: object) -> bytes:
    return encode_handshake(Handshake(**fields))  # type: ignore[arg-type]


def test_the_server_refuses_an_unknown_required_extension() -> None:
    server = Connection(Role.SERVER)
    sent = refused(server, hello(required=(ext("json"), ext("xml"), ext("x-acme"))), UnsupportedExtensionError, "xml")
    message = b"required%20extensions%20not%20supported%3A%20xml%2C%20x-acme"
    assert sent == bytes([4, len(b"error;message=" + message)]) + b"error;message=" + message
    server.receive_data(b"more")  # deaf after the error
    assert server.events() == [] and server.data_to_send() == b""


def test_unknown_optional_extensions_are_ignored() -> None:
    server = Connection(Role.SERVER, optional=[ext("json")])
    server.receive_data(hello(optional=(ext("xml"), ext("json"))))
    assert server.events() == []
    assert server.data_to_send() == hello(identity="rstreams", optional=(ext("json"),))


def test_the_client_refuses_an_unknown_required_extension() -> None:
    client = Connection(Role.CLIENT)
    client.data_to_send()
    sent = refused(client, hello(required=(ext("xml"),)), UnsupportedExtensionError, "xml")
    assert sent.startswith(b"\x04") and b"error;message=required%20extensions%20not%20supported" in sent


@pytest.mark.parametrize(("major", "minor"), [(0, 9), (0, 0)])
def test_a_lower_version_we_do_not_speak_is_refused(major: int, minor: int) -> None:
    server = Connection(Role.SERVER)
    text = f"error;message=version%20{major}.{minor}%20is%20not%20supported%3B%20this%20side%20speaks%201.0"
    expected = bytes([4, len(text)]) + text.encode()
    assert len(text) == 0x52
    assert refused(server, hello(major=major, minor=minor), UnsupportedVersionError, "is not supported") == expected
    client = Connection(Role.CLIENT)
    client.data_to_send()
    sent = refused(client, hello(major=major, minor=minor), UnsupportedVersionError, "is not supported")
    assert sent == expected


def test_version_error_carries_the_peer_version() -> None:
    server = Connection(Role.SERVER)
    server.receive_data(hello(major=0, minor=7))
    with pytest.raises(UnsupportedVersionError) as info:
        server.events()
    assert info.value.peer_version == (0, 7)


@pytest.mark.parametrize(("major", "minor"), [(1, 5), (2, 0), (255, 255)])
def test_a_higher_version_falls_back_to_ours(major: int, minor: int) -> None:
    server = Connection(Role.SERVER)
    server.receive_data(hello(major=major, minor=minor, identity="future"))
    server.events()
    assert server.data_to_send() == hello(identity="rstreams")  # we answer 1.0
    server.receive_data(hello(major=major, minor=minor))
    assert completed(server.events()).version == (1, 0)


def test_the_final_list_must_keep_what_the_server_requires() -> None:
    server = Connection(Role.SERVER, required=[ext("pubsub")])
    server.receive_data(hello())
    server.events()
    server.data_to_send()
    refused(server, hello(), RemoteProtocolError, "leaves out required extensions: pubsub")


def test_the_final_list_must_name_only_known_extensions() -> None:
    server = Connection(Role.SERVER)
    server.receive_data(hello())
    server.events()
    refused(server, hello(optional=(ext("xml"),)), UnsupportedExtensionError, "not supported: xml")


def test_a_bad_batch_ack_count_is_refused() -> None:
    server = Connection(Role.SERVER)
    refused(server, hello(required=(ext("batch-ack:max-count=0"),)), RemoteProtocolError, "batch-ack count")
    client = Connection(Role.CLIENT)
    refused(client, hello(optional=(ext("batch-ack:count=x"),)), RemoteProtocolError, "batch-ack count")


def test_the_client_sees_the_server_refusal_as_an_event() -> None:
    client = Connection(Role.CLIENT, required=[ext("json")])
    server = Connection(Role.SERVER)
    server.receive_data(hello(required=(ext("xml"),)))
    with pytest.raises(UnsupportedExtensionError):
        server.events()
    client.receive_data(server.data_to_send())
    assert client.events() == [ConnectionFailed(message="required extensions not supported: xml")]
    assert client.state is ConnectionState.ERROR


def test_a_malformed_handshake_is_refused() -> None:
    server = Connection(Role.SERVER)
    refused(server, bytes([1, 0, 0, 0, 0, 4]) + b"JSON" + bytes(2), RemoteProtocolError, "bad handshake")


def test_nothing_but_the_handshake_before_it_completes() -> None:
    client = Connection(Role.CLIENT, required=[ext("pubsub")])
    for call in (lambda: client.send_message("d", b""), lambda: client.subscribe("d"), lambda: client.acknowledge()):
        with pytest.raises(LocalProtocolError, match="AWAITING_REPLY"):
            call()


def test_end_of_file_during_the_handshake() -> None:
    server = Connection(Role.SERVER)
    server.receive_data(b"\x01\x00")
    server.receive_data(b"")
    with pytest.raises(RemoteProtocolError, match="middle of a frame"):
        server.events()
    server = Connection(Role.SERVER)
    server.receive_data(b"")
    assert [type(event).__name__ for event in server.events()] == ["ConnectionClosed"]
    assert server.state is ConnectionState.CLOSED


def test_options_we_cannot_honour_are_a_value_error() -> None:
    with pytest.raises(ValueError, match="does not speak: xml"):
        Connection(Role.CLIENT, required=[ext("xml")])
    with pytest.raises(LocalProtocolError):
        Connection(Role.CLIENT, identity="é")


def test_the_client_caps_the_window_at_what_it_will_hold() -> None:
    client = Connection(Role.CLIENT, limits=Limits(max_pending_messages=16))
    server = Connection(Role.SERVER, required=[ext("batch-ack:max-count=64")])
    Pair(client, server).pump()
    assert client.window == server.window == 16
    assert names(server.extensions) == ["batch-ack:max-count=16"]


def test_the_server_refuses_a_final_window_over_its_limit() -> None:
    server = Connection(Role.SERVER, limits=Limits(max_pending_messages=16))
    server.receive_data(hello())
    server.events()
    refused(server, hello(optional=(ext("batch-ack:max-count=17"),)), RemoteProtocolError,
            "count of 17 is over this side's limit of 16")  # fmt: skip


def test_a_configured_window_over_the_pending_limit_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="over the limit of 16 pending messages"):
        Connection(Role.SERVER, optional=[ext("batch-ack:max-count=64")], limits=Limits(max_pending_messages=16))
