"""The error hierarchy: whose fault, and what goodbye says about it."""

from __future__ import annotations

import pytest

import rstreams
from rstreams.protocol import (
    HandshakeError,
    LocalProtocolError,
    ProtocolError,
    RemoteProtocolError,
    RStreamsError,
)


def test_hierarchy() -> None:
    assert issubclass(ProtocolError, RStreamsError)
    assert issubclass(LocalProtocolError, ProtocolError)
    assert issubclass(RemoteProtocolError, ProtocolError)
    assert issubclass(HandshakeError, RemoteProtocolError)
    assert not issubclass(LocalProtocolError, RemoteProtocolError)


def test_errors_are_reexported_by_the_package() -> None:
    assert rstreams.RemoteProtocolError is RemoteProtocolError
    assert rstreams.HandshakeError is HandshakeError


def test_protocol_error_is_abstract() -> None:
    with pytest.raises(TypeError):
        ProtocolError("which side?")


@pytest.mark.parametrize("error_class", [LocalProtocolError, RemoteProtocolError])
def test_goodbye_reason_defaults_to_protocol_error(error_class: type[ProtocolError]) -> None:
    error = error_class("bad thing")
    assert error.message == str(error) == "bad thing"
    assert error.goodbye_reason == "protocol error: bad thing"


def test_goodbye_reason_can_be_given() -> None:
    assert RemoteProtocolError("x", goodbye_reason="custom").goodbye_reason == "custom"


def test_handshake_error_carries_the_peer_version() -> None:
    error = HandshakeError("unsupported", peer_version=3, goodbye_reason="unsupported protocol version 3")
    assert error.peer_version == 3
    assert error.goodbye_reason == "unsupported protocol version 3"
