"""The product as a new user gets it: the wheel, installed outside the checkout.

The wheel is built from a copy of the package's sources (so a stale
``build/`` of the checkout cannot leak into it), installed with its own
dependencies into a fresh virtual environment in a temporary directory (not
``--system-site-packages``, which would hide a missing dependency), and run
from a directory with no checkout in sight:

* ``rstreams demo`` serves the demo app on TCP and WebSocket and prints the
  page's URL; ``rstreams sub`` reads it over both, and the page is served;
* every ``rstreams`` example of README.md and of every ``--help`` parses
  with that installed command, and every app it serves imports from the
  wheel alone.

Installing needs the dependencies from the package index (or pip's cache):
without them the test skips, saying why, except under CI (``CI`` set), where
that is a failure.
"""

from __future__ import annotations

import json
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

#: Upper bound of each step (build, venv, install, a command).
STEP_TIMEOUT = 60.0

pytestmark = pytest.mark.timeout(180)

# What a wheel is built from: the package's sources and the files pyproject
# names (readme, license).
SOURCES = ("pyproject.toml", "README.md", "LICENSE", "rstreams", "bridges")

# pip's words for "the index could not be reached or had nothing for us".
OFFLINE_HINTS = (
    "No matching distribution found",
    "Could not find a version",
    "Failed to establish a new connection",
    "Temporary failure in name resolution",
    "Network is unreachable",
)


def _run(args: list[str], **options: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, timeout=STEP_TIMEOUT, **options)  # type: ignore[call-overload, no-any-return]


def _clean_environment() -> dict[str, str]:
    # Nothing of the checkout or of the test's own environment may help.
    environment = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    environment["PYTHONDONTWRITEBYTECODE"] = "1"
    return environment


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The ``bin`` directory of a fresh venv with the wheel installed."""
    work = tmp_path_factory.mktemp("wheel")
    source = work / "source"
    source.mkdir()
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    for name in SOURCES:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, source / name, ignore=ignore)
        else:
            shutil.copy2(path, source / name)
    built = _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", str(source), "-w", str(work / "dist")])
    assert built.returncode == 0, built.stdout + built.stderr
    (wheel,) = (work / "dist").glob("rstreams-*.whl")

    venv = work / "venv"
    created = _run([sys.executable, "-m", "venv", str(venv)], env=_clean_environment())
    assert created.returncode == 0, created.stderr
    bin_dir = venv / "bin"
    install = _run([str(bin_dir / "python"), "-m", "pip", "install", "-q", str(wheel)], env=_clean_environment(), cwd=work)
    if install.returncode != 0:
        output = install.stdout + install.stderr
        if any(hint in output for hint in OFFLINE_HINTS):
            reason = f"cannot install the wheel's dependencies (offline?): {output.strip().splitlines()[-1]}"
            if os.environ.get("CI"):
                pytest.fail(f"{reason} (CI is set, so this is a failure, not a skip)")
            pytest.skip(reason)
        raise AssertionError(output)
    return bin_dir


@pytest.mark.parametrize("name", ["open_session", "connect", "open_local_session", "serve_tcp", "serve_websocket", "serve_stream", "Server"])
def test_public_signatures_read_well_in_help(name: str) -> None:
    # help(rstreams.open_session) once showed a 700-character SessionConfig
    # repr as the default; None stands for the defaults instead.
    import inspect

    import rstreams

    signature = inspect.signature(getattr(rstreams, name))
    assert signature.parameters["config"].default is None
    if "static_dir" in signature.parameters:
        assert signature.parameters["static_dir"].default is None
    assert len(str(signature)) < 420, signature


def _in_venv(bin_dir: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return _run([str(bin_dir / args[0]), *args[1:]], cwd=cwd, env=_clean_environment())


def test_the_package_runs_from_the_venv_not_the_checkout(installed: Path, tmp_path: Path) -> None:
    result = _in_venv(installed, "python", "-c", "import rstreams, rstreams.demo; print(rstreams.__file__)", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    location = Path(result.stdout.strip())
    assert location.is_relative_to(installed.parent), location
    assert not location.is_relative_to(ROOT)
    # The checkout's examples are not part of the product, and trio-websocket
    # (the tests' WebSocket peer) is not one of its dependencies.
    for module in ("examples.demo", "trio_websocket"):
        result = _in_venv(installed, "python", "-c", f"import {module}", cwd=tmp_path)
        assert "ModuleNotFoundError" in result.stderr, module
    version = _in_venv(installed, "rstreams", "--version", cwd=tmp_path)
    assert version.returncode == 0, version.stderr
    assert re.fullmatch(r"rstreams \d+\.\d+\.\d+\S*\n", version.stdout)


def _readline(process: subprocess.Popen[bytes], deadline: float) -> str:
    assert process.stdout is not None
    fd = process.stdout.fileno()
    line = b""
    while not line.endswith(b"\n"):
        remaining = deadline - time.monotonic()
        ready, _, _ = select.select([fd], [], [], max(0.0, remaining))
        if not ready:
            raise AssertionError(f"no complete line in time; got {line!r}")
        byte = os.read(fd, 1)
        if not byte:
            raise AssertionError(f"output ended; got {line!r}")
        line += byte
    return line.decode().rstrip("\n")


def test_rstreams_demo_serves_tcp_websocket_and_the_page(installed: Path, tmp_path: Path) -> None:
    log = tmp_path / "demo.log"
    with open(log, "wb") as stderr:
        demo = subprocess.Popen(
            [str(installed / "rstreams"), "demo", "--tcp", "127.0.0.1:0", "--ws", "127.0.0.1:0"],
            cwd=tmp_path,
            env=_clean_environment(),
            stdout=subprocess.PIPE,
            stderr=stderr,
        )
    try:
        deadline = time.monotonic() + STEP_TIMEOUT
        lines = [_readline(demo, deadline) for _ in range(3)]
        tcp = re.fullmatch(r"rstreams: serving rstreams\.demo:app on (tcp://127\.0\.0\.1:\d+)", lines[0])
        ws = re.fullmatch(r"rstreams: serving rstreams\.demo:app on (ws://127\.0\.0\.1:(\d+)/)", lines[1])
        assert tcp and ws, (lines, log.read_text())
        assert lines[2] == f"rstreams: open http://127.0.0.1:{ws[2]}/ in a browser for the demo page"

        over_tcp = _in_venv(installed, "rstreams", "sub", tcp[1], "range?count=3", "--format", "hex", cwd=tmp_path)
        assert (over_tcp.returncode, over_tcp.stdout) == (0, "0000000000000000\n0000000000000001\n0000000000000002\n"), over_tcp.stderr
        ticks = _in_venv(installed, "rstreams", "sub", ws[1], "ticker?interval=0.01", "--format", "msgpack", "--count", "2", cwd=tmp_path)
        assert ticks.returncode == 0, ticks.stderr
        assert [json.loads(line)[0] for line in ticks.stdout.splitlines()] == [0, 1]

        for path, marker in (("/", b"<title>rstreams"), ("/rstreams.js", b"export")):
            with urllib.request.urlopen(f"http://127.0.0.1:{ws[2]}{path}", timeout=STEP_TIMEOUT) as response:
                assert response.status == 200
                assert marker in response.read()
    finally:
        if demo.poll() is None:
            demo.send_signal(signal.SIGINT)
        try:
            status = demo.wait(timeout=STEP_TIMEOUT)
        except subprocess.TimeoutExpired:
            demo.kill()
            demo.wait()
            raise
        assert demo.stdout is not None
        rest = demo.stdout.read().decode()
        demo.stdout.close()
    assert status == 0, log.read_text()
    assert rest.endswith("rstreams: shut down\n"), rest


# Run inside the wheel's venv: every example line of every --help parses, and
# every app it names imports. The README's examples come in on stdin.
EXAMPLES_CHECK = r'''
import argparse, contextlib, io, json, re, shlex, sys
from rstreams.cli import build_parser
from rstreams.cli._serve import load_app

def parsers(parser, name="rstreams"):
    yield name, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub_name, sub in action.choices.items():
                yield from parsers(sub, f"{name} {sub_name}")

def example_lines(text):
    text = text.replace("\\\n", " ")
    for line in text.splitlines():
        for part in line.split("|"):
            part = part.strip()
            if part.startswith("rstreams ") and not part.startswith("rstreams: "):
                yield part

examples = json.load(sys.stdin)
for name, parser in parsers(build_parser()):
    examples += [(name + " --help", line) for line in example_lines(parser.epilog or "")]
failures = []
checked = 0
for where, line in examples:
    words = shlex.split(line, comments=True)[1:]
    try:
        with contextlib.redirect_stderr(io.StringIO()) as errors:
            args = build_parser().parse_args(words)
    except SystemExit:
        failures.append(f"{where}: {line}: {errors.getvalue().strip()}")
        continue
    checked += 1
    app = getattr(args, "app", None)
    if app is not None and not app.startswith("myapp:"):
        try:
            load_app(app)
        except Exception as exc:
            failures.append(f"{where}: {line}: {exc}")
print(json.dumps({"checked": checked, "failures": failures}))
'''


def _readme_examples() -> list[tuple[str, str]]:
    readme = (ROOT / "README.md").read_text()
    lines = []
    for block in re.findall(r"```sh\n(.*?)```", readme, flags=re.S):
        for line in block.replace("\\\n", " ").splitlines():
            for part in line.split("|"):
                part = part.strip()
                if part.startswith("rstreams "):
                    lines.append(("README.md", part))
    return lines


def test_every_cli_example_works_from_the_wheel(installed: Path, tmp_path: Path) -> None:
    readme = _readme_examples()
    assert any("rstreams demo" in line for _, line in readme)
    result = subprocess.run(
        [str(installed / "python"), "-c", EXAMPLES_CHECK],
        input=json.dumps(readme),
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=_clean_environment(),
        timeout=STEP_TIMEOUT,
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["failures"] == []
    # README's and the help texts' examples, bridges' included: dozens.
    assert report["checked"] > len(readme) + 20
