"""``bridges.emp`` re-exports its public API; every module declares ``__all__``."""

from __future__ import annotations

import importlib
from pathlib import Path

import bridges.emp


def test_every_public_name_exists() -> None:
    for name in bridges.emp.__all__:
        assert hasattr(bridges.emp, name), name
    assert len(set(bridges.emp.__all__)) == len(bridges.emp.__all__)


def test_every_module_declares_all_and_the_package_exports_it() -> None:
    for path in sorted(Path(bridges.emp.__file__).parent.glob("_*.py")):
        if path.name == "__init__.py":
            continue
        module = importlib.import_module(f"bridges.emp.{path.stem}")
        assert isinstance(module.__all__, list), path.name
        missing = [name for name in module.__all__ if name not in bridges.emp.__all__]
        # Internal tables of the state machine stay internal.
        assert set(missing) <= {"ConnectionEvent", "CONNECTION_TRANSITIONS"}, (path.name, missing)
