"""Write ``msgpack-vectors.json``: msgpack bytes made by Python's msgpack, for the JS codec.

The browser client has its own small msgpack (``rstreams/web/msgpack.js``)
encoder and decoder; ``js/test/codec.test.mjs`` checks it against these
vectors, and ``tests/test_msgpack_vectors.py`` checks that this file is what
this script writes, so the two sides cannot drift apart. Run it from the
repository root after changing a vector::

    python tests/data/make_msgpack_vectors.py

Each vector has ``hex`` (what ``msgpack.packb(value, use_bin_type=True)``
gives) and ``value`` in a tagged JSON form that keeps every msgpack type
apart: ``{"nil": null}``, ``{"bool": b}``, ``{"int": "decimal"}``,
``{"float": x}`` (float64; ``"nan"``/``"inf"``/``"-inf"`` as strings),
``{"float32": x}``, ``{"str": s}``, ``{"bin": "hex"}``, ``{"array": [...]}``,
``{"map": [[k, v], ...]}``, and for the few large ones
``{"repeat": [tagged, count]}`` (an array), ``{"str_repeat": [s, count]}`` or ``{"bin_repeat": [hex, count]}``
with the bytes given as ``hex_repeat``: [head, unit, count]. ``encode`` is false where a JS value cannot say
which msgpack type was meant (a float64 holding an integer, a float32): the
JS side then only decodes. ``errors`` are bytes the decoder must refuse,
with the kind of error (``decode``: malformed or truncated, ``limit``: over a
size or nesting limit given in ``limits``).
"""

from __future__ import annotations

import json
import math
import struct
from pathlib import Path
from typing import Any

import msgpack

OUT = Path(__file__).with_name("msgpack-vectors.json")


def tag(value: Any) -> Any:
    if value is None:
        return {"nil": None}
    if isinstance(value, bool):
        return {"bool": value}
    if isinstance(value, int):
        return {"int": str(value)}
    if isinstance(value, float):
        if math.isnan(value):
            return {"float": "nan"}
        if math.isinf(value):
            return {"float": "inf" if value > 0 else "-inf"}
        return {"float": value}
    if isinstance(value, str):
        return {"str": value}
    if isinstance(value, bytes):
        return {"bin": value.hex()}
    if isinstance(value, list):
        return {"array": [tag(v) for v in value]}
    if isinstance(value, dict):
        return {"map": [[tag(k), tag(v)] for k, v in value.items()]}
    raise TypeError(value)


def vector(name: str, value: Any, *, encode: bool = True) -> dict[str, Any]:
    packed = msgpack.packb(value, use_bin_type=True)
    assert msgpack.unpackb(packed, raw=False, strict_map_key=False) == value or value != value
    return {"name": name, "hex": packed.hex(), "value": tag(value), "encode": encode}


def big_vector(name: str, value: Any, head: bytes, unit: bytes, count: int, tagged: Any) -> dict[str, Any]:
    # Values of 64 Ki items/bytes (the 32-bit length forms) in a few bytes of
    # JSON: the bytes are ``head`` then ``unit`` repeated ``count`` times, and
    # the value is given by a ``repeat`` tag. Checked against msgpack here.
    packed = msgpack.packb(value, use_bin_type=True)
    assert packed == head + unit * count, name
    return {"name": name, "hex_repeat": [head.hex(), unit.hex(), count], "value": tagged, "encode": True}


INTS = [0, 1, 127, 128, 255, 256, 65535, 65536, 2**32 - 1, 2**32, 2**53 - 1, 2**53, 2**53 + 1, 2**63 - 1, 2**63, 2**64 - 1,
        -1, -32, -33, -128, -129, -32768, -32769, -(2**31), -(2**31) - 1, -(2**53) + 1, -(2**53), -(2**63)]


def vectors() -> list[dict[str, Any]]:
    out = [vector("nil", None), vector("true", True), vector("false", False)]
    out += [vector(f"int {n}", n) for n in INTS]
    out += [vector(f"float64 {x!r}", x) for x in [1.5, -0.25, 3.141592653589793, 1e300, -1e-300, math.inf, -math.inf]]
    out.append(vector("float64 nan", math.nan))
    # A float64 that holds an integer: JS cannot tell it from the int, so decode only.
    out += [vector(f"float64 {x!r} (decode only)", x, encode=False) for x in [0.0, 1.0, -2.0, 2.0**60]]
    f32 = struct.unpack(">f", struct.pack(">f", 0.1))[0]
    out.append({"name": "float32 0.1", "hex": (b"\xca" + struct.pack(">f", 0.1)).hex(), "value": {"float32": f32}, "encode": False})
    out.append({"name": "float32 -2.5", "hex": (b"\xca" + struct.pack(">f", -2.5)).hex(), "value": {"float32": -2.5}, "encode": False})
    for s in ["", "a", "ticker", "x" * 31, "y" * 32, "z" * 255, "w" * 256, "héllo wörld", "日本語", "emoji 🎉", "\u0000nul"]:
        out.append(vector(f"str of {len(s.encode())} bytes{' (non-ASCII)' if not s.isascii() else ''}", s))
    for n in [0, 1, 255, 256, 300]:
        out.append(vector(f"bin of {n} bytes", bytes(i % 256 for i in range(n))))
    out += [
        vector("array empty", []),
        vector("array of 15", list(range(15))),
        vector("array of 16", list(range(16))),
        big_vector("array of 65536 (array32)", [0] * 65536, b"\xdd\x00\x01\x00\x00", b"\x00", 65536, {"repeat": [{"int": "0"}, 65536]}),
        big_vector("str of 65536 bytes (str32)", "v" * 65536, b"\xdb\x00\x01\x00\x00", b"v", 65536, {"str_repeat": ["v", 65536]}),
        big_vector("bin of 65536 bytes (bin32)", b"\x07" * 65536, b"\xc6\x00\x01\x00\x00", b"\x07", 65536, {"bin_repeat": ["07", 65536]}),
        vector("array nested", [1, [2, [3, [4, []]]], "s", b"\x00\xff"]),
        vector("ticker element", [42, 1700000000.125, 101.5]),
        vector("map empty", {}),
        vector("map str keys", {"a": 1, "b": [True, None], "c": {"d": "e"}}),
        vector("map of 16", {f"k{i}": i for i in range(16)}),
        vector("map int keys", {1: "one", 2: "two"}),
        vector("map __proto__ key", {"__proto__": 1}),
        vector("wire request(1, 2^63-1)", [2, 1, 2**63 - 1]),
    ]
    return out


ERRORS = [
    {"name": "empty input", "hex": "", "error": "decode"},
    {"name": "reserved byte c1", "hex": "c1", "error": "decode"},
    {"name": "ext type fixext1", "hex": "d40100", "error": "decode"},
    {"name": "ext8", "hex": "c7010100", "error": "decode"},
    {"name": "truncated uint32", "hex": "ce0000", "error": "decode"},
    {"name": "truncated str", "hex": "a3616263"[:-2], "error": "decode"},
    {"name": "truncated bin", "hex": "c40501", "error": "decode"},
    {"name": "truncated array", "hex": "9301", "error": "decode"},
    {"name": "array32 claiming 2^32-1 items, no limit on length", "hex": "ddffffffff", "error": "decode", "limits": {"maxArrayLength": 2**32}},
    {"name": "invalid UTF-8", "hex": "a2c328", "error": "decode"},
    {"name": "trailing bytes", "hex": "0101", "error": "decode"},
    {"name": "str over limit", "hex": "a3616263", "error": "limit", "limits": {"maxStringBytes": 2}},
    {"name": "bin over limit", "hex": "c403010203", "error": "limit", "limits": {"maxBinBytes": 2}},
    {"name": "array over limit", "hex": "93010203", "error": "limit", "limits": {"maxArrayLength": 2}},
    {"name": "map over limit", "hex": "81a16101", "error": "limit", "limits": {"maxMapLength": 0}},
    {"name": "nesting over limit", "hex": "91919100", "error": "limit", "limits": {"maxDepth": 2}},
]


def document() -> str:
    data = {
        "about": "msgpack vectors made by Python's msgpack (use_bin_type=True) for the JS codec; written by tests/data/make_msgpack_vectors.py, see its docstring for the format.",
        "vectors": vectors(),
        "errors": ERRORS,
    }
    return json.dumps(data, indent=1, ensure_ascii=False) + "\n"


if __name__ == "__main__":
    OUT.write_text(document(), encoding="utf-8")
    print(f"wrote {OUT}")
