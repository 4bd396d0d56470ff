"""How ``rstreams sub`` prints an element: ``--format raw|hex|msgpack|json``.

Each format is a function from an element's bytes to one output line
(without its newline); one that cannot decode the element raises
:class:`DecodeError`, which ``sub`` reports with exit status 5.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import msgpack

__all__ = ["FORMATS", "DecodeError"]


class DecodeError(Exception):
    """An element that is not valid for the format asked for (exit status 5)."""


def _json_default(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).hex()
    if isinstance(value, msgpack.ExtType):
        return {"ext": value.code, "data": value.data.hex()}
    raise TypeError


def _to_json_line(value: Any) -> bytes:
    try:
        text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=_json_default)
    except (TypeError, ValueError):
        text = repr(value)  # map keys JSON cannot hold, for example
    return text.encode("utf-8", "backslashreplace")


def _format_raw(element: bytes) -> bytes:
    return element


def _format_hex(element: bytes) -> bytes:
    return element.hex().encode("ascii")


def _format_msgpack(element: bytes) -> bytes:
    try:
        value = msgpack.unpackb(element, raw=False, strict_map_key=False)
    except Exception as exc:  # msgpack raises several unrelated types
        raise DecodeError(f"not valid MessagePack: {exc}") from None
    return _to_json_line(value)


def _format_json(element: bytes) -> bytes:
    try:
        value = json.loads(element)
    except (ValueError, UnicodeDecodeError) as exc:
        raise DecodeError(f"not valid JSON: {exc}") from None
    return _to_json_line(value)


FORMATS: dict[str, Callable[[bytes], bytes]] = {
    "raw": _format_raw,
    "hex": _format_hex,
    "msgpack": _format_msgpack,
    "json": _format_json,
}
