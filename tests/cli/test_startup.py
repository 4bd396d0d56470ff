"""What the ``rstreams`` command imports to start: only what the command run needs.

Each case runs the command's ``main`` in a fresh interpreter (as the console
script does) and reads back ``sys.modules``: ``--version`` needs neither
trio nor any bridge, ``sub tcp://`` needs no bridge and no WebSocket, and
nothing loads Spark. Modules, not timings: the times are in the report of
the change, and belong to bench/ if anywhere.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ._support import COMMAND_TIMEOUT, ROOT, ServeProcess

# Run as the console script would, then list every module imported.
SCRIPT = """
import json, sys
from rstreams.cli import main
try:
    status = main(sys.argv[2:])
except SystemExit as exit:
    status = exit.code
with open(sys.argv[1], "w") as out:
    json.dump({"status": status, "modules": sorted(sys.modules)}, out)
"""

BRIDGES = ("bridges",)
WEBSOCKET = ("wsproto", "h11", "trio_websocket", "rstreams._websocket", "rstreams._http")
SPARK = ("pyspark", "pyarrow", "rstreams.spark")
RUNTIME = ("trio", "ssl", "rstreams._session", "rstreams._serve", "rstreams._connect", "rstreams.protocol")


def imported(tmp_path: Path, *args: str) -> tuple[int, set[str], str]:
    report = tmp_path / "modules.json"
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(report), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT,
    )
    assert report.exists(), result.stderr
    data = json.loads(report.read_text())
    return data["status"], set(data["modules"]), result.stdout


def loaded(modules: set[str], prefixes: tuple[str, ...]) -> list[str]:
    return sorted(module for module in modules if any(module == prefix or module.startswith(prefix + ".") for prefix in prefixes))


def test_version_imports_no_runtime_bridge_websocket_or_spark(tmp_path: Path) -> None:
    status, modules, out = imported(tmp_path, "--version")
    assert status == 0
    assert out.startswith("rstreams ")
    assert loaded(modules, BRIDGES + WEBSOCKET + SPARK + RUNTIME) == []


def test_the_loader_would_notice(tmp_path: Path) -> None:
    # The same probe sees the modules a command does import.
    status, modules, _ = imported(tmp_path, "serve", "--help")
    assert status == 0
    assert loaded(modules, BRIDGES) and loaded(modules, ("trio",))


def test_help_lists_every_command_and_loads_no_spark_or_trio_websocket(tmp_path: Path) -> None:
    status, modules, out = imported(tmp_path, "--help")
    assert status == 0
    for command in ("demo", "serve", "sub", "pub", "ls", "ping", "emp", "epoxy"):
        assert f"\n    {command} " in out, command
    assert loaded(modules, SPARK + ("trio_websocket",)) == []


@pytest.mark.parametrize("command", ["sub", "pub", "ls", "ping", "demo"])
def test_a_runtime_command_loads_no_bridge_to_start(tmp_path: Path, command: str) -> None:
    status, modules, out = imported(tmp_path, command, "--help")
    assert status == 0
    assert "examples:" in out
    assert loaded(modules, BRIDGES + SPARK) == []


def test_sub_over_tcp_loads_no_bridge_and_no_websocket(tmp_path: Path, demo_server: ServeProcess) -> None:
    status, modules, out = imported(tmp_path, "sub", demo_server.url, "range?count=2", "--format", "hex")
    assert (status, out) == (0, "0000000000000000\n0000000000000001\n")
    assert loaded(modules, BRIDGES + WEBSOCKET + SPARK) == []


def test_sub_over_a_bridge_still_finds_it(tmp_path: Path) -> None:
    # The bridges are loaded when the URL needs one: here to say the port is closed.
    status, modules, _ = imported(tmp_path, "sub", "emp://127.0.0.1:1", "range")
    assert status == 4
    assert "bridges.emp" in modules
