"""How ``rstreams sub`` prints an element: ``--format raw|hex|msgpack|json|jsonl``.

Each of :data:`FORMATS` is a function from an element's bytes to one output
line (without its newline); one that cannot decode the element raises
:class:`DecodeError`, which ``sub`` reports with exit status 5.

``jsonl`` is for programs rather than eyes: :class:`JsonLines` wraps every
element in an envelope, ``{"seq", "name", "size", "value" or "hex", "t"}``,
and never fails on an element: one that does not decode as asked
(``--decode``) is given as ``hex`` instead of ``value``, so a reader always
gets every element and can tell which ones did not decode.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from typing import Any

import msgpack

__all__ = ["FORMATS", "DECODERS", "DecodeError", "JsonLines"]


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
        try:
            text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=_json_default)
        except (TypeError, ValueError):
            text = repr(value)  # map keys JSON cannot hold, for example
    except RecursionError:
        raise DecodeError("nested too deeply to print") from None
    return text.encode("utf-8", "backslashreplace")


def _format_raw(element: bytes) -> bytes:
    return element


def _format_hex(element: bytes) -> bytes:
    return element.hex().encode("ascii")


def _format_msgpack(element: bytes) -> bytes:
    return _to_json_line(_decode_msgpack(element))


def _format_json(element: bytes) -> bytes:
    return _to_json_line(_decode_json(element))


FORMATS: dict[str, Callable[[bytes], bytes]] = {
    "raw": _format_raw,
    "hex": _format_hex,
    "msgpack": _format_msgpack,
    "json": _format_json,
}


# ---- jsonl --------------------------------------------------------------


# Control characters other than tab, newline and carriage return: an element
# holding them is binary data that happens to be valid UTF-8 (``range``'s
# big-endian integers are), better shown as hex than as "\u0000" escapes.
_CONTROL_CHARACTERS = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def _decode_text(element: bytes) -> Any:
    try:
        text = element.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DecodeError(f"not UTF-8 text: {exc}") from None
    if _CONTROL_CHARACTERS.search(text):
        raise DecodeError("binary: it holds control characters")
    return text


def _decode_json(element: bytes) -> Any:
    try:
        return json.loads(element)
    except (ValueError, UnicodeDecodeError) as exc:
        raise DecodeError(f"not valid JSON: {exc}") from None
    except RecursionError:
        # Valid JSON, perhaps, but nested deeper than the interpreter's stack.
        raise DecodeError("not JSON this command can read: nested too deeply") from None


def _decode_msgpack(element: bytes) -> Any:
    try:
        return msgpack.unpackb(element, raw=False, strict_map_key=False)
    except Exception as exc:  # msgpack raises several unrelated types
        raise DecodeError(f"not valid MessagePack: {exc}") from None


#: What ``--decode`` turns an element into for the envelope's ``value``.
DECODERS: dict[str, Callable[[bytes], Any]] = {
    "text": _decode_text,
    "json": _decode_json,
    "msgpack": _decode_msgpack,
}


class JsonLines:
    """The ``jsonl`` format: one JSON envelope per element, numbered from 0.

    ``seq`` counts the elements of this subscription, ``name`` is the
    publisher name as subscribed (query included), ``size`` the element's
    length in bytes, ``value`` the element decoded by ``decode`` (``text``:
    UTF-8 without control characters but tab, newline and carriage return)
    or ``hex``, lowercase, when it does not decode or its value has no JSON
    form (a NaN, a map with binary keys), and ``t`` the Unix time the element
    was printed at, in seconds. Bytes inside a decoded value are hex strings.
    """

    def __init__(self, name: str, decode: str = "text") -> None:
        self.name = name
        self.decode = DECODERS[decode]
        self.seq = 0

    def __call__(self, element: bytes) -> bytes:
        data = bytes(element)
        head = {"seq": self.seq, "name": self.name, "size": len(data)}
        self.seq += 1
        printed_at = round(time.time(), 6)
        try:
            # UnicodeEncodeError (a ValueError) too: JSON text may hold lone surrogates.
            return _envelope_json({**head, "value": self.decode(data), "t": printed_at}).encode("utf-8")
        except (DecodeError, TypeError, ValueError, RecursionError):
            return _envelope_json({**head, "hex": data.hex(), "t": printed_at}).encode("utf-8")


def _envelope_json(envelope: dict[str, Any]) -> str:
    return json.dumps(envelope, separators=(",", ":"), ensure_ascii=False, allow_nan=False, default=_json_default)
