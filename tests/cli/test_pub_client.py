"""``rstreams pub URL NAME``: lines into a running server's topic or publisher.

The server is ``rstreams serve rstreams.demo:app`` as a user runs it, on
every scheme the runtime speaks: one process with plain TCP and WebSocket
listeners, one with TLS on both (a trustme CA). What ``pub`` published is
read back with ``rstreams sub`` (a topic's ``history``) or straight from
``pub``'s own output (the demo's ``echo`` sends each line back).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import msgpack
import pytest
import trustme

from rstreams.cli._pub_client import publish_route

from ._support import ServeProcess, cut_upstream_after, free_port, rstreams

SCHEMES = ["tcp", "ws", "tls", "wss"]


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, tuple[str, list[str]]]]:
    """``scheme -> (URL, extra client arguments)`` for each scheme."""
    tmp_path = tmp_path_factory.mktemp("pub")
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    cert.private_key_pem.write_to_path(str(tmp_path / "key.pem"))
    cert.cert_chain_pems[0].write_to_path(str(tmp_path / "cert.pem"))
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    listeners = ["serve", "rstreams.demo:app", "--tcp", "127.0.0.1:0", "--ws", "127.0.0.1:0"]
    tls = ["--tls-cert", str(tmp_path / "cert.pem"), "--tls-key", str(tmp_path / "key.pem")]
    with ServeProcess.start(listeners, tmp_path / "plain.log", listeners=2) as plain:
        with ServeProcess.start([*listeners, *tls], tmp_path / "tls.log", listeners=2) as secure:
            urls = {url.split("://")[0]: url for url in plain.urls + secure.urls}
            trust = ["--ca", str(tmp_path / "ca.pem")]
            yield {scheme: (urls[scheme], trust if scheme in ("tls", "wss") else []) for scheme in SCHEMES}


@pytest.mark.parametrize("scheme", SCHEMES)
def test_lines_go_into_a_topic(servers: dict[str, tuple[str, list[str]]], scheme: str) -> None:
    url, trust = servers[scheme]
    lines = [f"{scheme} line {i}" for i in range(3)]
    result = rstreams("pub", url, "chat", *trust, input="".join(f"{line}\n" for line in lines).encode())
    assert result.returncode == 0, result.stderr
    assert result.stdout == b""  # a topic streams nothing back
    assert result.stderr == b"rstreams: published 3 lines into chat\n"
    read_back = rstreams("sub", url, "chat?history=3", "--count", "3", *trust)
    assert read_back.returncode == 0, read_back.stderr
    assert read_back.stdout.decode().splitlines() == lines


@pytest.mark.parametrize("scheme", SCHEMES)
def test_a_publisher_that_reads_the_source_streams_back(servers: dict[str, tuple[str, list[str]]], scheme: str) -> None:
    url, trust = servers[scheme]
    result = rstreams("pub", url, "echo?source=", *trust, input=b"hello\n\nworld\n")
    assert result.returncode == 0, result.stderr
    assert result.stdout == b"hello\n\nworld\n"  # raw: an empty line is an empty element


def test_file_and_msgpack_format(servers: dict[str, tuple[str, list[str]]], tmp_path: Path) -> None:
    url, _ = servers["tcp"]
    values = [{"sensor": "a", "t": 21.5}, [1, 2, 3], "text"]
    source = tmp_path / "values.jsonl"
    source.write_text("".join(json.dumps(value) + "\n\n" for value in values))  # blank lines are skipped
    result = rstreams("pub", url, "echo?source=", "--file", str(source), "--format", "msgpack")
    assert result.returncode == 0, result.stderr
    assert [msgpack.unpackb(element) for element in result.stdout.split(b"\n")[:-1]] == values


def test_jsonl_sends_compact_json(servers: dict[str, tuple[str, list[str]]]) -> None:
    url, _ = servers["ws"]
    result = rstreams("pub", url, "echo?source=", "--format", "jsonl", input=b'{ "a" : [1, 2] }\n')
    assert result.returncode == 0, result.stderr
    assert result.stdout == b'{"a":[1,2]}\n'


def test_a_line_that_is_not_json_stops_there(servers: dict[str, tuple[str, list[str]]]) -> None:
    url, _ = servers["tcp"]
    result = rstreams("pub", url, "chat", "--format", "jsonl", input=b'"before"\nnot json\n"after"\n')
    assert result.returncode == 5
    message = result.stderr.decode()
    assert message.startswith("rstreams: --format jsonl: line 2: not JSON")
    assert "the 1 lines before it were published" in message
    read_back = rstreams("sub", url, "chat?history=1", "--count", "1")
    assert read_back.stdout == b'"before"\n'


def test_an_unknown_topic_is_a_publisher_error(servers: dict[str, tuple[str, list[str]]]) -> None:
    url, _ = servers["tcp"]
    result = rstreams("pub", url, "no-such-topic", input=b"x\n")
    assert result.returncode == 1
    assert b"no such publisher: no-such-topic/publish?source=stdin" in result.stderr


def test_a_refused_connection() -> None:
    result = rstreams("pub", f"tcp://127.0.0.1:{free_port()}", "chat", input=b"x\n")
    assert result.returncode == 4
    assert result.stderr.startswith(b"rstreams: cannot connect to tcp://127.0.0.1:")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["chat", "--tcp", "127.0.0.1:0"], b"rstreams pub --serve NAME --tcp HOST:PORT"),
        (["--serve", "chat"], b"--serve needs at least one --tcp"),
        (["--serve", "tcp://127.0.0.1:9000", "chat", "--tcp", "127.0.0.1:0"], b"--serve takes NAME alone"),
        (["emp://127.0.0.1:7000", "chat"], b"pub cannot publish over emp://"),
        (["tcp://127.0.0.1:9000", "chat", "--file", "/nonexistent/lines"], b"cannot read '/nonexistent/lines'"),
    ],
)
def test_usage_errors(args: list[str], message: bytes) -> None:
    result = rstreams("pub", *args)
    assert result.returncode == 2
    assert message in result.stderr


@pytest.mark.parametrize(
    ("name", "route"),
    [
        ("chat", "chat/publish?source=stdin&confirm=1"),
        ("room/chat", "room/chat/publish?source=stdin&confirm=1"),
        ("chat?policy=block", "chat/publish?policy=block&source=stdin&confirm=1"),
        ("echo?source=", "echo?source=stdin"),
        ("echo?x=1&source=old", "echo?x=1&source=stdin"),
    ],
)
def test_publish_route(name: str, route: str) -> None:
    assert publish_route(name) == route


def test_a_lost_connection_says_how_many_lines_left(servers: dict[str, tuple[str, list[str]]]) -> None:
    # The connection to the server is cut once 200 KB of lines went up: pub
    # says how many lines it sent before, so that a user can start again
    # from there (found cutting connections at random: it said only
    # "connection lost").
    url, _ = servers["tcp"]
    host, port = url.removeprefix("tcp://").rsplit(":", 1)
    lines = b"".join(b"line %d\n" % n for n in range(100_000))
    with cut_upstream_after(host, int(port), 200_000) as front:
        result = rstreams("pub", f"tcp://127.0.0.1:{front}", "chat", input=lines)
    assert result.returncode == 4, result.stderr
    found = re.fullmatch(
        rb"rstreams: connection lost: .*\((\d+) lines? sent to chat before it, (none|all|the first (\d+)) of them confirmed\)\n",
        result.stderr,
    )
    assert found is not None, result.stderr
    sent = int(found.group(1))
    assert 0 < sent < 100_000
    # The topic confirms as it takes them (confirm=1): a count it holds for
    # sure, never more (the newest line it holds is at least that far in).
    confirmed = {b"none": 0, b"all": sent}.get(found.group(2), int(found.group(3) or 0))
    assert confirmed <= sent
    newest = rstreams("sub", url, "chat?history=1", "--count", "1", "--timeout", "10")
    assert newest.returncode == 0, newest.stderr
    if confirmed:
        assert int(newest.stdout.split()[-1]) >= confirmed - 1, (confirmed, newest.stdout)
