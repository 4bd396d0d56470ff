"""The Relink handshake: golden bytes, new and resumed links, refusals and bad input."""

from __future__ import annotations

import struct

import pytest
from relink_pair import EPOCH, NAME, Pair

from bridges.relink import (
    Connection,
    ConnectionClosed,
    ConnectionState,
    HandshakeComplete,
    HandshakeRejected,
    HandshakeRequest,
    LinkConfig,
    LinkRefused,
    LinkRegistry,
    LinkRequested,
    LocalProtocolError,
    RemoteProtocolError,
    Resumed,
    Role,
    UnsupportedVersionError,
    decode_request,
    encode_request,
)
from bridges.relink._handshake import request_size

CONFIG = LinkConfig(connector_id_size=1, listener_id_size=2, connector_transactions=True)


def h(text: str) -> bytes:
    return bytes.fromhex(text)


def ident(epoch: int, link_id: int) -> bytes:
    return struct.pack("<qQ", epoch, link_id)


# ---- golden bytes ---------------------------------------------------------------


def test_spec_example_connector_transmission_with_six_byte_name() -> None:
    connector = Connection(Role.CONNECTOR, config=CONFIG, endpoint_name="events")
    assert connector.data_to_send() == h("00 00 00 00 00 00 00 00")  # version 0, 7 padding
    connector.receive_data(h("00 00 00 00 00 00 00 00"))
    assert connector.events() == []
    # Stream offsets: name length at 8, name 9-14, connector's id size at
    # 15, listener's at 16, flags at 17, padding 18-23, epoch 24, link id 32.
    assert connector.data_to_send() == h(
        "06 65 76 65 6e 74 73 01  02 01 00 00 00 00 00 00  00 00 00 00 00 00 00 00  00 00 00 00 00 00 00 00"
    )
    assert connector.state is ConnectionState.AWAIT_REPLY


def test_connector_transmission_with_old_link_and_every_flag() -> None:
    request = HandshakeRequest(
        endpoint_name="events",
        config=LinkConfig(connector_id_size=8, listener_id_size=0, connector_transactions=True, listener_transactions=True),
        require_old_link=True,
        old_epoch=0x0102030405060708,
        old_link_id=42,
    )
    wire = encode_request(request)
    assert wire == h("06 65 76 65 6e 74 73 08 00 07 00 00 00 00 00 00") + ident(0x0102030405060708, 42)
    assert decode_request(wire) == (request, 32)
    assert decode_request(wire[:-1]) is None


def test_listener_transmission() -> None:
    listener = Connection(Role.LISTENER, endpoints={NAME: CONFIG}, epoch=EPOCH)
    listener.receive_data(h("00 00 00 00 00 00 00 00"))
    assert listener.events() == []
    assert listener.data_to_send() == h("00 00 00 00 00 00 00 00")
    listener.receive_data(encode_request(HandshakeRequest(endpoint_name=NAME, config=CONFIG)))
    [requested] = listener.events()
    assert isinstance(requested, LinkRequested) and requested.request.config == CONFIG
    link = listener.accept_link(new_link_id=7)
    assert link is not None and (link.epoch, link.link_id) == (EPOCH, 7)
    assert listener.data_to_send() == ident(EPOCH, 7) == h("00 40 1e 18 24 0a 06 00  07 00 00 00 00 00 00 00")
    assert listener.events() == [HandshakeComplete(resumed=False, epoch=EPOCH, link_id=7)]


@pytest.mark.parametrize("size", [0, 1, 4, 5, 6, 12, 255])
def test_padding_before_the_epoch_counts_from_the_start_of_the_stream(size: int) -> None:
    wire = encode_request(HandshakeRequest(endpoint_name="x" * size))
    assert len(wire) == request_size(size)
    assert (8 + len(wire)) % 8 == 0
    assert len(wire) - 16 - (1 + size + 3) == (-(1 + size + 3)) % 8


# ---- new, resumed and refused links -----------------------------------------------


def test_new_link() -> None:
    pair = Pair(CONFIG)
    connector_events, listener_events = pair.handshake()
    assert connector_events == [HandshakeComplete(resumed=False, epoch=EPOCH, link_id=1)]
    assert [type(e) for e in listener_events] == [LinkRequested, HandshakeComplete]
    assert pair.connector.state is pair.listener.state is ConnectionState.OPEN
    assert pair.connector.link is not None and pair.listener.link is not None
    assert pair.connector.link.link_id == pair.listener.link.link_id == 1
    assert pair.registry.lookup(EPOCH, 1) is pair.listener.link
    assert not pair.connector.peer_resuming


def test_resumed_link() -> None:
    pair = Pair(CONFIG)
    pair.handshake()
    second = pair.reconnect()
    connector_events, listener_events = second.handshake()
    assert connector_events[0] == HandshakeComplete(resumed=True, epoch=EPOCH, link_id=1)
    assert listener_events[1] == HandshakeComplete(resumed=True, epoch=EPOCH, link_id=1)
    assert Resumed() in connector_events and Resumed() in listener_events
    assert second.connector.link is pair.connector.link and second.listener.link is pair.listener.link
    assert not second.connector.peer_resuming and not second.listener.peer_resuming
    # The old connections lost the link to the new ones.
    assert pair.connector.state is pair.listener.state is ConnectionState.CLOSED
    with pytest.raises(LocalProtocolError):
        pair.connector.send_message(1, [b"late"])


def test_changed_epoch_discards_the_link_and_reports_lost_channels() -> None:
    pair = Pair(CONFIG)
    pair.handshake()
    pair.connector.send_message(3, [b"lost?"])
    pair.listener.send_message(0x0102, [b"to the connector"])
    pair.pump()
    old_link = pair.connector.link
    assert old_link is not None
    restarted = Pair(CONFIG, registry=LinkRegistry(EPOCH + 1), link=old_link)
    connector_events, _ = restarted.handshake()
    assert connector_events == [
        HandshakeComplete(resumed=False, epoch=EPOCH + 1, link_id=1, lost_outgoing=(3,), lost_incoming=(0x0102,))
    ]
    assert old_link.discarded and restarted.connector.link is not old_link
    with pytest.raises(LocalProtocolError):
        Connection(Role.CONNECTOR, config=CONFIG, endpoint_name=NAME, link=old_link)


def test_unknown_link_without_requirement_starts_a_new_one() -> None:
    pair = Pair(CONFIG)
    pair.handshake()
    pair.connector.send_message(3, [b"x"])
    forgetful = Pair(CONFIG, registry=LinkRegistry(EPOCH), link=pair.connector.link)
    forgetful.registry.new_link_id()  # the restarted listener hands out id 2
    connector_events, listener_events = forgetful.handshake()
    assert connector_events == [HandshakeComplete(resumed=False, epoch=EPOCH, link_id=2, lost_outgoing=(3,))]
    assert listener_events[1] == HandshakeComplete(resumed=False, epoch=EPOCH, link_id=2)


def test_required_old_link_unknown_is_refused() -> None:
    pair = Pair(CONFIG)
    pair.handshake()
    pair.connector.send_message(5, [b"pending"])
    refused = Pair(CONFIG, registry=LinkRegistry(EPOCH + 5), link=pair.connector.link, require_old_link=True)
    refused.to_listener()
    refused.to_connector()
    request_bytes = refused.connector.data_to_send()
    assert request_bytes[9] == 0x05  # flags after "06 events 01 02": connector transactions, require old link
    refused.listener.receive_data(request_bytes)
    [requested] = refused.listener.events()
    assert isinstance(requested, LinkRequested) and requested.request.require_old_link
    assert refused.listener.accept_link() is None
    assert refused.listener.events() == [LinkRefused()]
    assert refused.listener.state is ConnectionState.CLOSED
    reply = refused.listener.data_to_send()
    assert reply == ident(EPOCH + 5, 0)  # the listener's epoch and the zero link id
    refused.connector.receive_data(reply)
    assert refused.connector.events() == [LinkRefused(lost_outgoing=(5,))]
    assert refused.connector.state is ConnectionState.CLOSED
    assert pair.connector.link is not None and pair.connector.link.discarded


def test_required_old_link_known_resumes() -> None:
    pair = Pair(CONFIG)
    pair.handshake()
    second = pair.reconnect(require_old_link=True)
    connector_events, _ = second.handshake()
    assert connector_events[0] == HandshakeComplete(resumed=True, epoch=EPOCH, link_id=1)


def test_require_flag_is_only_sent_with_an_old_link() -> None:
    connector = Connection(Role.CONNECTOR, config=CONFIG, endpoint_name=NAME, require_old_link=True)
    assert connector.request is not None and not connector.request.require_old_link


# ---- bad handshakes ---------------------------------------------------------------


def connector_after_version(config: LinkConfig = CONFIG) -> Connection:
    connector = Connection(Role.CONNECTOR, config=config, endpoint_name=NAME)
    connector.receive_data(bytes(8))
    assert connector.events() == []
    connector.data_to_send()
    return connector


def listener_after_version(endpoints: dict[str, LinkConfig] | None = None) -> Connection:
    listener = Connection(Role.LISTENER, endpoints=endpoints or {NAME: CONFIG}, epoch=EPOCH)
    listener.receive_data(bytes(8))
    assert listener.events() == []
    listener.data_to_send()
    return listener


def test_listener_answering_another_version_is_refused() -> None:
    connector = Connection(Role.CONNECTOR, config=CONFIG, endpoint_name=NAME)
    connector.receive_data(h("01 00 00 00 00 00 00 00"))
    with pytest.raises(UnsupportedVersionError) as caught:
        connector.events()
    assert caught.value.peer_version == 1
    assert connector.state is ConnectionState.ERROR and not connector.has_data_to_send


def test_listener_answers_a_newer_connector_with_version_zero() -> None:
    listener = Connection(Role.LISTENER, endpoints={NAME: CONFIG}, epoch=EPOCH)
    listener.receive_data(h("05 ff ff ff ff ff ff ff"))  # padding is ignored
    assert listener.events() == []
    assert listener.data_to_send() == bytes(8)


@pytest.mark.parametrize(
    ("request_bytes", "error", "match"),
    [
        (encode_request(HandshakeRequest(endpoint_name="other", config=CONFIG)), HandshakeRejected, "unknown endpoint"),
        (
            encode_request(HandshakeRequest(endpoint_name=NAME, config=LinkConfig(connector_id_size=2, listener_id_size=2))),
            HandshakeRejected,
            "channel id sizes 2/2",
        ),
        (
            encode_request(HandshakeRequest(endpoint_name=NAME, config=LinkConfig(connector_id_size=1, listener_id_size=2))),
            HandshakeRejected,
            "transaction flags",
        ),
        (h("06") + NAME.encode() + h("09 02 01 00 00 00 00 00 00") + ident(0, 0), RemoteProtocolError, "size 9"),
        (h("06") + NAME.encode() + h("01 09 01 00 00 00 00 00 00") + ident(0, 0), RemoteProtocolError, "size 9"),
        (h("02 ff fe 01 02 01 00 00") + ident(0, 0), RemoteProtocolError, "UTF-8"),
        (h("06") + NAME.encode() + h("01 02 01 00 00 00 00 00 00") + ident(EPOCH, 2**63), RemoteProtocolError, "link id"),
        (h("06") + NAME.encode() + h("01 02 01 00 00 00 00 00 00") + ident(0, 5), RemoteProtocolError, "without an epoch"),
    ],
)
def test_listener_refuses_bad_requests(request_bytes: bytes, error: type[Exception], match: str) -> None:
    listener = listener_after_version()
    listener.receive_data(request_bytes)
    with pytest.raises(error, match=match):
        listener.events()
    assert listener.state is ConnectionState.ERROR


@pytest.mark.parametrize(
    ("reply", "match"),
    [
        (ident(0, 1), "bad epoch 0"),
        (ident(-5, 1), "bad epoch -5"),
        (ident(EPOCH, 0), "no link id"),
        (ident(EPOCH, 2**63), "link id"),
    ],
)
def test_connector_refuses_bad_replies(reply: bytes, match: str) -> None:
    connector = connector_after_version()
    connector.receive_data(reply)
    with pytest.raises(RemoteProtocolError, match=match):
        connector.events()
    assert connector.state is ConnectionState.ERROR


def test_new_link_id_when_the_old_one_was_required_is_a_violation() -> None:
    pair = Pair(CONFIG)
    pair.handshake()
    again = Connection(Role.CONNECTOR, endpoint_name=NAME, link=pair.connector.link, require_old_link=True)
    again.receive_data(bytes(8))
    again.events()
    again.receive_data(ident(EPOCH, 99))
    with pytest.raises(RemoteProtocolError, match="new link"):
        again.events()


def test_too_much_early_data_is_refused() -> None:
    listener = listener_after_version()
    listener.receive_data(encode_request(HandshakeRequest(endpoint_name=NAME, config=CONFIG)) + bytes(70_000))
    assert [type(e) for e in listener.events()] == [LinkRequested]  # the error comes after
    with pytest.raises(RemoteProtocolError, match="too much"):
        listener.events()
    assert listener.state is ConnectionState.ERROR


def test_bytes_after_the_request_wait_for_the_decision() -> None:
    listener = listener_after_version()
    nop = bytes(8)
    listener.receive_data(encode_request(HandshakeRequest(endpoint_name=NAME, config=CONFIG)) + nop)
    [requested] = listener.events()
    assert isinstance(requested, LinkRequested)
    listener.accept_link(new_link_id=1)
    assert [type(e) for e in listener.events()] == [HandshakeComplete]


@pytest.mark.parametrize("role", list(Role))
def test_end_of_file_during_the_handshake(role: Role) -> None:
    if role is Role.CONNECTOR:
        connection = Connection(role, config=CONFIG, endpoint_name=NAME)
    else:
        connection = Connection(role, endpoints={NAME: CONFIG}, epoch=EPOCH)
    connection.receive_data(bytes(5))
    connection.receive_data(b"")
    assert connection.events() == [ConnectionClosed()]
    assert connection.state is ConnectionState.CLOSED
    connection.receive_data(b"ignored")
    assert connection.events() == []


def test_accept_link_misuse() -> None:
    listener = Connection(Role.LISTENER, endpoints={NAME: CONFIG}, epoch=EPOCH)
    with pytest.raises(LocalProtocolError, match="no link decision"):
        listener.accept_link(new_link_id=1)
    listener = listener_after_version()
    listener.receive_data(encode_request(HandshakeRequest(endpoint_name=NAME, config=CONFIG)))
    listener.events()
    with pytest.raises(LocalProtocolError, match="new_link_id"):
        listener.accept_link()
    with pytest.raises(LocalProtocolError, match="new_link_id"):
        listener.accept_link(new_link_id=2**63)
    other = Pair(CONFIG)
    other.handshake()
    with pytest.raises(LocalProtocolError, match="not the link"):
        listener.accept_link(other.listener.link)
    assert listener.state is ConnectionState.AWAIT_DECISION


@pytest.mark.parametrize(
    "kwargs",
    [
        {"role": Role.CONNECTOR},
        {"role": Role.CONNECTOR, "config": CONFIG, "epoch": 5},
        {"role": Role.LISTENER, "endpoints": {NAME: CONFIG}},
        {"role": Role.LISTENER, "endpoints": {NAME: CONFIG}, "epoch": 0},
        {"role": Role.LISTENER, "endpoints": {}, "epoch": EPOCH},
        {"role": Role.LISTENER, "endpoints": {NAME: CONFIG}, "epoch": EPOCH, "config": CONFIG},
        {"role": Role.CONNECTOR, "config": CONFIG, "send_window": 0},
        {"role": "connector", "config": CONFIG},
    ],
)
def test_bad_construction(kwargs: dict[str, object]) -> None:
    role = kwargs.pop("role")
    with pytest.raises(LocalProtocolError):
        Connection(role, **kwargs)  # type: ignore[arg-type]


def test_link_config_validation() -> None:
    with pytest.raises(LocalProtocolError):
        LinkConfig(connector_id_size=9)
    with pytest.raises(LocalProtocolError):
        HandshakeRequest(endpoint_name="é" * 128)
    with pytest.raises(LocalProtocolError):
        HandshakeRequest(endpoint_name=NAME, old_link_id=2**63)
