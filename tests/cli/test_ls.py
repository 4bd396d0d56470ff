"""``rstreams ls URL``: a server's publishers and topics, from its ``$publishers``."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from ._support import COMMAND_TIMEOUT, RSTREAMS, ROOT, ServeProcess, free_port, rstreams

DEMO_ROUTES = [
    ("blob", "publisher"),
    ("chat", "topic"),
    ("chat/publish", "topic publishing"),
    ("echo", "publisher"),
    ("fail", "publisher"),
    ("range", "publisher"),
    ("sensors", "topic"),
    ("sensors/publish", "topic publishing"),
    ("ticker", "publisher"),
]


@pytest.fixture(scope="module")
def demo_urls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[str]]:
    """The demo app served on TCP and WebSocket: ``[tcp://..., ws://.../]``."""
    log = tmp_path_factory.mktemp("ls") / "log"
    args = ["serve", "rstreams.demo:app", "--tcp", "127.0.0.1:0", "--ws", "127.0.0.1:0"]
    with ServeProcess.start(args, log, listeners=2) as server:
        yield server.urls


@pytest.mark.parametrize("transport", [0, 1], ids=["tcp", "ws"])
def test_lists_every_route_with_its_kind(demo_urls: list[str], transport: int) -> None:
    result = rstreams("ls", demo_urls[transport])
    assert result.returncode == 0, result.stderr
    assert [tuple(line.split(None, 1)) for line in result.stdout.decode().splitlines()] == DEMO_ROUTES
    assert result.stderr == b""


def test_names_line_up(demo_urls: list[str]) -> None:
    lines = rstreams("ls", demo_urls[0]).stdout.decode().splitlines()
    width = len("sensors/publish") + 2
    assert {line[width - 2 : width] for line in lines} == {"  "}
    assert all(line[width] != " " for line in lines)


def test_jsonl_prints_the_records(demo_urls: list[str]) -> None:
    result = rstreams("ls", demo_urls[0], "--format", "jsonl")
    assert result.returncode == 0, result.stderr
    records = [json.loads(line) for line in result.stdout.splitlines()]
    assert [(record["name"], record["kind"]) for record in records] == DEMO_ROUTES
    sizes = {record["name"]: record["element_size"] for record in records}
    assert sizes["range"] == 8 and sizes["blob"] == 0  # range announces its fixed size


def test_url_from_the_environment(demo_urls: list[str]) -> None:
    environment = {**os.environ, "RSTREAMS_URL": demo_urls[1]}
    result = subprocess.run([RSTREAMS, "ls"], cwd=ROOT, capture_output=True, timeout=COMMAND_TIMEOUT, env=environment)
    assert result.returncode == 0, result.stderr
    assert len(result.stdout.splitlines()) == len(DEMO_ROUTES)


def test_a_refused_connection() -> None:
    result = rstreams("ls", f"tcp://127.0.0.1:{free_port()}")
    assert result.returncode == 4
    assert result.stderr.startswith(b"rstreams: cannot connect to tcp://127.0.0.1:")


def test_a_served_stdin_lists_its_one_publisher(tmp_path: Path) -> None:
    args = ["pub", "--serve", "lines", "--tcp", "127.0.0.1:0"]
    with ServeProcess.start(args, tmp_path / "log", stdin=subprocess.PIPE) as server:
        result = rstreams("ls", server.url)
    assert result.returncode == 0, result.stderr
    assert result.stdout == b"lines  publisher\n"


def test_no_url_says_where_one_comes_from() -> None:
    environment = {key: value for key, value in os.environ.items() if key != "RSTREAMS_URL"}
    result = subprocess.run([RSTREAMS, "ls"], cwd=ROOT, capture_output=True, timeout=COMMAND_TIMEOUT, env=environment)
    assert result.returncode == 2
    assert result.stderr == b"rstreams: no URL: give one, or set RSTREAMS_URL\n"
