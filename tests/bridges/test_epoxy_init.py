"""``bridges.epoxy`` and ``bridges.epoxy.bond`` re-export their public API; every module declares ``__all__``."""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType

import pytest

import bridges.epoxy
import bridges.epoxy.bond

# Internals some modules list in __all__ for their siblings, not for users.
INTERNAL = {
    "bridges.epoxy": {"StateInput", "TRANSITIONS", "LISTENING_STATES", "HANDSHAKE_STATES"},
    "bridges.epoxy.bond": {
        "Reader",
        "Writer",
        "CompactReader",
        "CompactWriter",
        "FastReader",
        "FastWriter",
        "SCALAR_WIRES",
        "VALUE_WIRES",
        "wire_name",
        "check_bool",
        "check_count",
        "check_int",
        "check_ints",
        "encode_utf8",
        "encode_utf16",
        "Level",
        "ScalarType",
        "EnumType",
        "BlobType",
        "ListType",
        "SetType",
        "MapType",
        "NullableType",
        "StructType",
        "BondedType",
        "as_type",
    },
}


@pytest.mark.parametrize("package", [bridges.epoxy, bridges.epoxy.bond], ids=lambda p: p.__name__)
def test_every_public_name_exists(package: ModuleType) -> None:
    for name in package.__all__:
        assert hasattr(package, name), name
    assert len(set(package.__all__)) == len(package.__all__)


@pytest.mark.parametrize("package", [bridges.epoxy, bridges.epoxy.bond], ids=lambda p: p.__name__)
def test_every_module_declares_all_and_the_package_exports_it(package: ModuleType) -> None:
    for path in sorted(Path(package.__file__).parent.glob("_*.py")):  # type: ignore[arg-type]
        if path.name == "__init__.py":
            continue
        module = importlib.import_module(f"{package.__name__}.{path.stem}")
        assert isinstance(module.__all__, list), path.name
        missing = {name for name in module.__all__ if name not in package.__all__}
        assert missing <= INTERNAL[package.__name__], (path.name, missing - INTERNAL[package.__name__])
