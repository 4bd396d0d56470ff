"""Element codecs: how Python values become element bytes and back.

Elements are bytes on the wire. A codec per publisher and per subscription
lets applications work with values instead; raw bytes stay the default so
that the fast paths pay nothing for a feature they do not use.
"""

from __future__ import annotations

import json
from typing import Any, Protocol, runtime_checkable

import msgpack

__all__ = ["Codec", "RawCodec", "MsgpackCodec", "JsonCodec", "resolve_codec", "CodecLike"]


@runtime_checkable
class Codec(Protocol):
    """Turns values into element bytes and back."""

    name: str

    def encode(self, value: Any) -> bytes: ...

    def decode(self, data: bytes) -> Any: ...


class RawCodec:
    """Elements are bytes, passed through unchanged."""

    name = "raw"

    def encode(self, value: Any) -> bytes:
        if type(value) is bytes:
            return value
        if isinstance(value, (bytearray, memoryview)):
            return bytes(value)
        raise TypeError(f"the raw codec sends bytes, got {type(value).__name__}")

    def decode(self, data: bytes) -> bytes:
        return data


class MsgpackCodec:
    """Elements are MessagePack values (bytes stay bytes, str stays str)."""

    name = "msgpack"

    def encode(self, value: Any) -> bytes:
        return msgpack.packb(value, use_bin_type=True)  # type: ignore[no-any-return]

    def decode(self, data: bytes) -> Any:
        # unpackb bounds every length by the size of data, so a hostile
        # element cannot ask for more memory than it occupies.
        return msgpack.unpackb(data, raw=False)


class JsonCodec:
    """Elements are UTF-8 JSON texts."""

    name = "json"

    def encode(self, value: Any) -> bytes:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()

    def decode(self, data: bytes) -> Any:
        return json.loads(data)


CodecLike = Codec | str | None

_BY_NAME: dict[str, Codec] = {codec.name: codec for codec in (RawCodec(), MsgpackCodec(), JsonCodec())}


def resolve_codec(codec: CodecLike) -> Codec | None:
    """A codec from a name ("raw", "msgpack", "json"), an object, or None.

    Returns None for raw bytes, which the runtime treats as "no codec" so the
    raw path calls nothing per element.
    """
    if codec is None or codec == "raw" or isinstance(codec, RawCodec):
        return None
    if isinstance(codec, str):
        try:
            return _BY_NAME[codec]
        except KeyError:
            raise ValueError(f"unknown codec {codec!r}: use one of {sorted(_BY_NAME)} or a Codec object") from None
    if not isinstance(codec, Codec):
        raise TypeError(f"a codec needs name, encode and decode; got {codec!r}")
    return codec
