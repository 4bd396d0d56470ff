"""The package as a user installs it: metadata, typing, and the layout."""

from __future__ import annotations

import importlib.metadata
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import bridges
import rstreams

ROOT = Path(__file__).resolve().parent.parent


def test_version_matches_the_installed_metadata() -> None:
    assert rstreams.__version__ == importlib.metadata.version("rstreams")


def test_public_names_are_exported_and_exist() -> None:
    for name in rstreams.__all__:
        assert hasattr(rstreams, name), name
    for name in rstreams.protocol.__all__:
        assert hasattr(rstreams.protocol, name), name


def test_py_typed_marker_ships_with_the_package() -> None:
    assert (Path(rstreams.__file__).parent / "py.typed").is_file()


def test_bridges_is_our_package_not_a_namesake() -> None:
    # "bridges" is a generic top-level name: make sure the import finds ours.
    assert Path(bridges.__file__).resolve().parent == ROOT / "bridges"
    assert "rstreams" in (bridges.__doc__ or "")


def test_console_script_prints_the_version() -> None:
    script = shutil.which("rstreams", path=str(Path(sys.executable).parent))
    assert script is not None, "the rstreams console script is not installed next to the interpreter"
    result = subprocess.run([script, "--version"], capture_output=True, text=True, timeout=30)
    assert result.returncode == 0
    assert rstreams.__version__ in result.stdout


def test_protocol_package_type_checks_strictly() -> None:
    mypy = pytest.importorskip("mypy.api")
    stdout, stderr, status = mypy.run(["--strict", "--no-incremental", str(ROOT / "rstreams" / "protocol")])
    assert status == 0, stdout + stderr


def test_bridges_type_check_strictly() -> None:
    # The bridges, their kit and their commands, trio adapters included.
    mypy = pytest.importorskip("mypy.api")
    targets = [str(ROOT / "bridges")]
    stdout, stderr, status = mypy.run(["--strict", "--no-incremental", *targets])
    assert status == 0, stdout + stderr
