"""The msgpack vectors of the browser client are what Python's msgpack makes.

``js/test/codec.test.mjs`` checks the JS codec against
``tests/data/msgpack-vectors.json``; this test checks that the file is exactly
what ``tests/data/make_msgpack_vectors.py`` writes with the msgpack installed
here (which also re-packs every value), so a stale or hand-edited vector file
fails here rather than passing in node.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

DATA = Path(__file__).parent / "data"


def test_vector_file_is_up_to_date() -> None:
    spec = importlib.util.spec_from_file_location("make_msgpack_vectors", DATA / "make_msgpack_vectors.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    expected = module.document()
    actual = (DATA / "msgpack-vectors.json").read_text(encoding="utf-8")
    assert actual == expected, "run: python tests/data/make_msgpack_vectors.py"
