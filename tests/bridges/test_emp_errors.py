"""EMP errors carry what the EMP error message would say."""

from __future__ import annotations

import rstreams.protocol
from bridges import BridgeError
from bridges.emp import (
    EmpError,
    ErrorCode,
    LocalProtocolError,
    RemoteProtocolError,
    UnsupportedVersionError,
)


def test_fields_and_defaults() -> None:
    error = RemoteProtocolError("bad", code=ErrorCode.EXTENSION, extension_id=1, extension_code=4)
    assert (error.message, error.code, error.extension_id, error.extension_code) == ("bad", 4, 1, 4)
    assert str(error) == "bad"
    assert "extension_id=1" in repr(error)
    default = LocalProtocolError("oops")
    assert (default.code, default.extension_id, default.extension_code) == (ErrorCode.PROTOCOL, 0, 0)


def test_hierarchy() -> None:
    for cls in (LocalProtocolError, RemoteProtocolError, UnsupportedVersionError):
        assert issubclass(cls, EmpError)
        assert issubclass(cls, BridgeError)
        assert issubclass(cls, rstreams.protocol.RStreamsError)
    assert issubclass(LocalProtocolError, rstreams.protocol.LocalProtocolError)
    assert issubclass(RemoteProtocolError, rstreams.protocol.RemoteProtocolError)
    assert not issubclass(LocalProtocolError, rstreams.protocol.RemoteProtocolError)
    assert not issubclass(RemoteProtocolError, rstreams.protocol.LocalProtocolError)


def test_unsupported_version() -> None:
    error = UnsupportedVersionError("v9", peer_version=9)
    assert error.peer_version == 9
    assert error.code == ErrorCode.PROTOCOL
    assert isinstance(error, RemoteProtocolError)


def test_error_codes_follow_the_spec_table() -> None:
    assert [(code.name, code.value) for code in ErrorCode] == [
        ("UNSPECIFIED", 0),
        ("IO", 1),
        ("TIMEOUT", 2),
        ("PROTOCOL", 3),
        ("EXTENSION", 4),
    ]
