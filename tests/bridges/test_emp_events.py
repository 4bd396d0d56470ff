"""EMP message values: validation at construction, helpers."""

from __future__ import annotations

import dataclasses

import pytest

from bridges.emp import (
    Bye,
    Compression,
    CompressionScheme,
    Data,
    Error,
    ErrorCode,
    Hello,
    LocalProtocolError,
    Ping,
    Pong,
    RequestResponse,
    UnknownExtension,
)


@pytest.mark.parametrize(
    "build",
    [
        lambda: Hello(version=256),
        lambda: Hello(version=-1),
        lambda: Hello(version=True),
        lambda: Error(code=256),
        lambda: Error(extension_id=-1),
        lambda: Error(extension_code=1.5),
        lambda: Error(message=b"bytes"),
        lambda: Error(message="x" * 65536),
        lambda: Error(message="\ud800"),
        lambda: Data(body="text"),
        lambda: Data(extensions=[Compression(scheme=0)]),
        lambda: Data(extensions=("not a block",)),
        lambda: Data(
            extensions=(
                RequestResponse(request_id=1, is_request=True),
                RequestResponse(request_id=2, is_request=True),
            )
        ),
        lambda: RequestResponse(request_id=0, is_request=True),
        lambda: RequestResponse(request_id=2**64, is_request=True),
        lambda: RequestResponse(request_id=1, is_request=1),
        lambda: Compression(scheme=2),
        lambda: UnknownExtension(extension_id=256),
        lambda: UnknownExtension(extension_id=3, content="text"),
        lambda: Bye(extensions=None),
    ],
)
def test_invalid_values_cannot_exist(build: object) -> None:
    with pytest.raises(LocalProtocolError):
        build()  # type: ignore[operator]


def test_values_are_frozen_and_comparable() -> None:
    hello = Hello()
    with pytest.raises(dataclasses.FrozenInstanceError):
        hello.version = 2  # type: ignore[misc]
    assert Hello(version=1) == hello
    assert Error(code=ErrorCode.PROTOCOL) == Error(code=3)
    assert Compression(scheme=1) == Compression(scheme=CompressionScheme.GZIP)


def test_ping_response_is_pong() -> None:
    assert Ping().response() == Pong()


def test_request_response_property() -> None:
    block = RequestResponse(request_id=4, is_request=True)
    assert Data(extensions=(Compression(scheme=0), block)).request_response == block
    assert Data().request_response is None


def test_response_helper_with_compression() -> None:
    request = Data(extensions=(RequestResponse(request_id=4, is_request=True),))
    assert request.response(b"a", compression=CompressionScheme.GZIP).extensions == (
        RequestResponse(request_id=4, is_request=False),
        Compression(scheme=CompressionScheme.GZIP),
    )
    with pytest.raises(LocalProtocolError):
        request.response().response()
