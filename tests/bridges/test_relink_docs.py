"""``docs/bridges/relink.md`` shows the bytes the code produces, block for block."""

from __future__ import annotations

import re
from pathlib import Path

from relink_examples import examples, render

DOC = Path(__file__).resolve().parents[2] / "docs" / "bridges" / "relink.md"
BLOCK = re.compile(r"<!-- bytes: ([\w-]+) -->\n```text\n(.*?)\n```", re.S)


def documented() -> dict[str, str]:
    return dict(BLOCK.findall(DOC.read_text(encoding="utf-8")))


def test_every_example_is_documented_exactly() -> None:
    blocks = documented()
    generated = examples()
    assert set(blocks) == set(generated)
    for name, data in generated.items():
        assert blocks[name] == render(data), name


def test_the_rendering_is_read_back_as_the_same_bytes() -> None:
    for name, text in documented().items():
        data = bytes.fromhex(" ".join(line.split(":", 1)[1] for line in text.splitlines()))
        assert data == examples()[name], name


def test_the_trio_side_is_documented() -> None:
    text = DOC.read_text(encoding="utf-8")
    for section in ("## Trio adapter", "## rstreams mapping", "## Command line"):
        assert f"{section}\n" in text
    assert "To be written." not in text
