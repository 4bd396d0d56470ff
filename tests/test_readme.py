"""The README's commands and code, run so that they never rot."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README, flags=re.S)


def test_readme_opens_with_the_two_commands() -> None:
    first_block = re.search(r"```sh\n(.*?)```", README, flags=re.S)
    assert first_block is not None
    commands = [line for line in first_block.group(1).splitlines() if line and not line.startswith("#")]
    assert len(commands) == 2
    assert commands[0].endswith("examples/tour.py") and (ROOT / "examples" / "tour.py").is_file()
    assert "-m pytest" in commands[1] and commands[1].endswith("node --test js/test/")
    # CI runs the same test command, to the letter.
    assert commands[1] in (ROOT / ".ci" / "run").read_text().splitlines()


def test_quickstart_code_is_the_example_files() -> None:
    server, client = python_blocks()[:2]
    assert server.strip() == (ROOT / "examples" / "quickstart_server.py").read_text().strip()
    assert client.strip() == (ROOT / "examples" / "quickstart_client.py").read_text().strip()


def test_quickstart_server_and_client_work_together() -> None:
    server = subprocess.Popen(
        [sys.executable, str(ROOT / "examples" / "quickstart_server.py"), "0"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        line = server.stdout.readline()
        url = line.strip().removeprefix("serving on ")
        assert url.startswith("tcp://127.0.0.1:"), line
        client = subprocess.run(
            [sys.executable, str(ROOT / "examples" / "quickstart_client.py"), url],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert client.returncode == 0, client.stderr
        assert client.stdout.splitlines() == [
            "0 squared is 0",
            "1 squared is 1",
            "2 squared is 4",
            "3 squared is 9",
            "4 squared is 16",
            "as expected: no such publisher: cubes",
        ]
    finally:
        server.kill()
        server.wait(timeout=10)


def test_the_tour_runs_through_every_demo_publisher() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "tour.py")], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "[0, 1, 2, 3, 4] (elementSize 8)" in out
    assert "(200000, '02030405')" in out
    assert "#4 at" in out
    assert "then onError: fail: failing after 2 elements as asked" in out
    assert "['hello', 'from', 'the', 'client']" in out
    assert "no such publisher: nothing-here" in out
