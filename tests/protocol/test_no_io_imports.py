"""The protocol core is sans-I/O: it must not import anything that does I/O.

Checked twice: statically, by reading every module's imports, and
dynamically, by importing and running the core in a fresh interpreter where
the I/O modules cannot be imported at all.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import rstreams.protocol

PROTOCOL_DIR = Path(rstreams.protocol.__file__).parent
RSTREAMS_DIR = PROTOCOL_DIR.parent
FORBIDDEN = {"trio", "socket", "logging", "asyncio", "selectors"}


def forbidden_imports(source: str) -> list[str]:
    """Top-level names of the forbidden modules that ``source`` imports."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        found.extend(name for name in names if name.partition(".")[0] in FORBIDDEN)
    return found


@pytest.mark.parametrize(
    "source",
    [
        "import trio",
        "import trio.lowlevel",
        "from socket import socket",
        "import logging as log",
        "def f():\n    import asyncio",
    ],
)
def test_the_import_check_finds_forbidden_imports(source: str) -> None:
    assert forbidden_imports(source)


def test_the_import_check_ignores_relative_and_harmless_imports() -> None:
    assert forbidden_imports("from . import trio\nfrom ._socket import x\nimport msgpack\nimport trio_like") == []


def test_protocol_modules_import_no_io_modules() -> None:
    modules = sorted(PROTOCOL_DIR.glob("*.py"))
    assert {path.name for path in modules} >= {"__init__.py", "_codec.py", "_connection.py", "_outbound.py"}
    offenders = {path.name: forbidden_imports(path.read_text(encoding="utf-8")) for path in modules}
    assert {name: found for name, found in offenders.items() if found} == {}


# A fresh interpreter (-I: no cwd, no PYTHONPATH) where importing any I/O
# module fails. Packages are registered bare, so that an __init__.py that is
# allowed to pull in trio (rstreams/__init__.py, bridges/emp/__init__.py)
# never runs; only the sans-I/O modules the body imports are loaded.
IO_BLOCKED_PROLOGUE = textwrap.dedent(
    """
    import importlib.abc
    import sys
    import types

    BLOCKED = {"trio", "socket", "_socket", "asyncio", "selectors", "logging"}
    assert not BLOCKED & set(sys.modules), sorted(BLOCKED & set(sys.modules))


    class BlockIO(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.partition(".")[0] in BLOCKED:
                raise ImportError(f"{name} is blocked: sans-I/O code must not do I/O")
            return None


    sys.meta_path.insert(0, BlockIO())
    for name, directory in PACKAGES:
        package = types.ModuleType(name)
        package.__path__ = [directory]
        sys.modules[name] = package
    """
)


def run_with_io_blocked(packages: list[tuple[str, Path]], body: str) -> str:
    """Run ``body`` after the prologue above, with ``packages`` registered bare; its stdout.

    The body must end by checking that no blocked module was loaded after all.
    """
    prologue = IO_BLOCKED_PROLOGUE.replace("PACKAGES", repr([(name, str(directory)) for name, directory in packages]))
    result = subprocess.run(
        [sys.executable, "-I", "-c", prologue + textwrap.dedent(body)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


CORE_BODY = """
    from rstreams.protocol import Connection, Elements, OnComplete

    client, server = Connection(), Connection()
    server.receive_data(client.data_to_send())
    server.events()
    client.receive_data(server.data_to_send())
    client.events()
    subscriber = client.subscribe("ticker", 3)
    server.receive_data(client.data_to_send())
    server.events()
    server.accept(subscriber)
    server.send_elements(subscriber, [b"a", b"b" * 100_000])
    server.complete(subscriber)
    while server.has_data_to_send:
        client.receive_data(server.data_to_send())
    events = client.events()
    received = [element for event in events if isinstance(event, Elements) for element in event.elements]
    assert received == [b"a", b"b" * 100_000], received
    assert events[-1] == OnComplete(subscriber=subscriber), events
    assert "rstreams._version" not in sys.modules  # the real package __init__ never ran
    assert not BLOCKED & set(sys.modules), sorted(BLOCKED & set(sys.modules))
    print("sans-I/O ok")
"""


def test_protocol_core_runs_where_io_modules_cannot_be_imported() -> None:
    assert run_with_io_blocked([("rstreams", RSTREAMS_DIR)], CORE_BODY).strip() == "sans-I/O ok"


def test_the_blocker_would_notice() -> None:
    with pytest.raises(AssertionError, match="trio is blocked"):
        run_with_io_blocked([], "import trio\n")
