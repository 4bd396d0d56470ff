"""The EMP sans-I/O modules import neither trio nor socket nor logging."""

from __future__ import annotations

from pathlib import Path

import pytest

import bridges.emp
from tests.protocol.test_no_io_imports import forbidden_imports

EMP_DIR = Path(bridges.emp.__file__).parent
SANS_IO = ["_codec.py", "_events.py", "_connection.py", "_state.py", "_errors.py", "__init__.py"]


@pytest.mark.parametrize("name", SANS_IO)
def test_emp_sans_io_modules_import_no_io_modules(name: str) -> None:
    assert forbidden_imports((EMP_DIR / name).read_text(encoding="utf-8")) == []


def test_the_check_would_notice() -> None:
    assert forbidden_imports("import trio\nimport socket\nimport logging") == ["trio", "socket", "logging"]
