"""The public names of ``bridges.micromsg2``, the module layout rules, and whose fault each error is."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import bridges.micromsg2
from bridges import BridgeError
from bridges.micromsg2 import LocalProtocolError, MalformedTextError, MicroMsg2Error, RemoteProtocolError
from rstreams.protocol import LocalProtocolError as CoreLocal
from rstreams.protocol import RemoteProtocolError as CoreRemote

MICROMSG2_DIR = Path(bridges.micromsg2.__file__).parent


def test_every_public_name_is_exported() -> None:
    for name in bridges.micromsg2.__all__:
        assert hasattr(bridges.micromsg2, name), name
    assert len(set(bridges.micromsg2.__all__)) == len(bridges.micromsg2.__all__)


@pytest.mark.parametrize("path", sorted(MICROMSG2_DIR.glob("_*.py")), ids=lambda p: p.name)
def test_modules_have_all_and_stay_small(path: Path) -> None:
    source = path.read_text(encoding="utf-8")
    tree = ast.parse(source)
    names = {t.id for node in tree.body if isinstance(node, ast.Assign) for t in node.targets if isinstance(t, ast.Name)}
    assert "__all__" in names
    assert len(source.splitlines()) <= 600


def test_errors_say_whose_fault_and_which_bridge() -> None:
    assert issubclass(LocalProtocolError, CoreLocal) and issubclass(LocalProtocolError, MicroMsg2Error)
    assert issubclass(RemoteProtocolError, CoreRemote) and issubclass(RemoteProtocolError, MicroMsg2Error)
    assert issubclass(MicroMsg2Error, BridgeError)
    for name in (
        "UnsupportedVersionError",
        "UnsupportedExtensionError",
        "FrameTooLargeError",
        "MessageTooLargeError",
        "TooManyPendingMessagesError",
        "WindowExceededError",
    ):
        assert issubclass(getattr(bridges.micromsg2, name), RemoteProtocolError), name
    assert issubclass(bridges.micromsg2.FilterError, MalformedTextError)
    assert issubclass(MalformedTextError, ValueError)
    error = RemoteProtocolError("bad")
    assert error.message == "bad" and repr(error) == "RemoteProtocolError('bad')"
