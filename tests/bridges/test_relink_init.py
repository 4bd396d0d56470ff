"""The public names of ``bridges.relink`` and the module layout rules."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import bridges.relink
from bridges.relink import LocalProtocolError, RelinkError, RemoteProtocolError
from bridges import BridgeError
from rstreams.protocol import LocalProtocolError as CoreLocal
from rstreams.protocol import RemoteProtocolError as CoreRemote

RELINK_DIR = Path(bridges.relink.__file__).parent


def test_every_public_name_is_exported() -> None:
    for name in bridges.relink.__all__:
        assert hasattr(bridges.relink, name), name
    assert len(set(bridges.relink.__all__)) == len(bridges.relink.__all__)


@pytest.mark.parametrize("path", sorted(RELINK_DIR.glob("_*.py")), ids=lambda p: p.name)
def test_modules_have_all_and_stay_small(path: Path) -> None:
    source = path.read_text(encoding="utf-8")
    tree = ast.parse(source)
    names = {t.id for node in tree.body if isinstance(node, ast.Assign) for t in node.targets if isinstance(t, ast.Name)}
    assert "__all__" in names
    assert len(source.splitlines()) <= 600


def test_errors_say_whose_fault_and_which_bridge() -> None:
    assert issubclass(LocalProtocolError, CoreLocal) and issubclass(LocalProtocolError, RelinkError)
    assert issubclass(RemoteProtocolError, CoreRemote) and issubclass(RemoteProtocolError, RelinkError)
    assert issubclass(RelinkError, BridgeError)
    for name in ("UnsupportedVersionError", "HandshakeRejected", "LimitExceeded"):
        assert issubclass(getattr(bridges.relink, name), RemoteProtocolError)
