"""``rstreams serve --emp`` and ``rstreams emp ping|send|call``, end to end, as a user runs them."""

from __future__ import annotations

import json
import re
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import trustme

from ._support import OutputLines, free_port, rstreams, start, stop

URL = re.compile(r"^rstreams: serving (?P<label>\S+) on (?P<scheme>emps?|tcp|tls|wss?)://(?P<host>.+):(?P<port>\d+)/?$")


class EmpServe:
    def __init__(self, process: subprocess.Popen[bytes], listeners: int) -> None:
        self.process = process
        self.output = OutputLines(process.stdout)  # type: ignore[arg-type]
        self.urls: dict[str, str] = {}
        for _ in range(listeners):
            line = self.output.readline().decode()
            match = URL.match(line)
            assert match, line
            self.urls[match["scheme"]] = f"{match['host']}:{match['port']}"

    @property
    def emp(self) -> str:
        return self.urls.get("emp") or self.urls["emps"]


def serve(*args: str, listeners: int = 1, log: Path) -> Iterator[EmpServe]:
    with open(log, "wb") as stderr:
        process = start("serve", "examples.demo:app", *args, stderr=stderr)
    try:
        yield EmpServe(process, listeners)
    finally:
        if process.poll() is None:
            stop(process)
        assert process.stdout is not None
        process.stdout.close()


@pytest.fixture(scope="module")
def emp_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmpServe]:
    """``rstreams serve examples.demo:app --emp 127.0.0.1:0`` (EMP alone)."""
    yield from serve("--emp", "127.0.0.1:0", log=tmp_path_factory.mktemp("emp") / "stderr.log")


def test_serve_emp_answers_range(emp_server: EmpServe) -> None:
    result = rstreams("emp", "call", emp_server.emp, "range?count=3", "--format", "msgpack")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {"elements": ["%016x" % n for n in range(3)]}


def test_call_with_gzip(emp_server: EmpServe) -> None:
    result = rstreams("emp", "call", emp_server.emp, "range?count=2", "--gzip", "--format", "msgpack")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {"elements": ["%016x" % n for n in range(2)]}


def test_call_prints_error_answers_and_exits_0(emp_server: EmpServe) -> None:
    # The server answered: the error is in the response, not in EMP.
    result = rstreams("emp", "call", emp_server.emp, "nope", "--format", "msgpack")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {"error": "no such publisher: nope"}


def test_ping_and_send(emp_server: EmpServe) -> None:
    result = rstreams("emp", "ping", emp_server.emp)
    assert result.returncode == 0, result.stderr
    assert re.match(rb"pong from .+ in \d+\.\d ms\n", result.stdout)
    result = rstreams("emp", "send", emp_server.emp, "some data", "--gzip")
    assert result.returncode == 0, result.stderr


def test_wrong_framing_is_a_protocol_error(emp_server: EmpServe) -> None:
    result = rstreams("emp", "ping", emp_server.emp, "--framing", "author")
    assert result.returncode == 1
    assert b"rstreams: the peer broke the protocol" in result.stderr


def test_connection_refused() -> None:
    result = rstreams("emp", "call", f"127.0.0.1:{free_port()}", "x")
    assert result.returncode == 4
    assert b"rstreams: cannot connect" in result.stderr


def test_peer_error_and_bye_exit_non_zero(tmp_path: Path) -> None:
    # A peer that says hello and then error 4 (or bye) to anything.
    script = tmp_path / "peer.py"
    script.write_text(
        "import socket, sys\n"
        "from bridges.emp import Bye, Error, Hello, encode\n"
        "s = socket.create_server(('127.0.0.1', 0)); print(s.getsockname()[1], flush=True)\n"
        "for reply in (Error(code=4, extension_id=1, extension_code=4, message='bad body'), Bye()):\n"
        "    c, _ = s.accept(); c.sendall(encode(Hello())); got = b''\n"
        "    while len(got) < 12 + 29: got += c.recv(100)  # hello, then the request (body 'x')\n"
        "    c.sendall(encode(reply))\n"
        "    while c.recv(100): pass  # until the client closes: no reset, nothing lost\n"
        "    c.close()\n"
    )
    peer = subprocess.Popen([_python(), str(script)], stdout=subprocess.PIPE, cwd=Path(__file__).resolve().parents[2])
    try:
        port = int(OutputLines(peer.stdout).readline())  # type: ignore[arg-type]
        result = rstreams("emp", "call", f"127.0.0.1:{port}", "x")
        assert result.returncode == 1
        assert b"rstreams: peer sent error 4 (extension), extension 1 code 4: bad body" in result.stderr
        result = rstreams("emp", "call", f"127.0.0.1:{port}", "x")
        assert result.returncode == 3
        assert b"rstreams: the peer said bye" in result.stderr
    finally:
        peer.kill()
        peer.wait()


def _python() -> str:
    import sys

    return sys.executable


def test_emp_next_to_tcp_and_graceful_shutdown(tmp_path: Path) -> None:
    for server in serve("--tcp", "127.0.0.1:0", "--emp", "127.0.0.1:0", listeners=2, log=tmp_path / "log"):
        assert set(server.urls) == {"emp", "tcp"}
        result = rstreams("sub", "tcp://" + server.urls["tcp"], "range?count=2", "--format", "hex")
        assert result.returncode == 0, result.stderr
        result = rstreams("emp", "call", server.emp, "range?count=1", "--format", "hex")
        assert result.returncode == 0, result.stderr
        assert stop(server.process, signal.SIGINT) == 0
        assert server.output.rest() == [b"rstreams: shut down"]


def test_emp_next_to_tcp_and_ws(tmp_path: Path) -> None:
    # One command serves the same app on all three: each transport answers.
    args = ("--tcp", "127.0.0.1:0", "--ws", "127.0.0.1:0", "--emp", "127.0.0.1:0")
    for server in serve(*args, listeners=3, log=tmp_path / "log"):
        assert set(server.urls) == {"emp", "tcp", "ws"}
        for url in ("tcp://" + server.urls["tcp"], "ws://" + server.urls["ws"] + "/"):
            result = rstreams("sub", url, "range?count=2", "--format", "hex")
            assert result.returncode == 0, result.stderr
            assert result.stdout.split() == [b"%016x" % n for n in range(2)]
        result = rstreams("emp", "call", server.emp, "range?count=1", "--format", "hex")
        assert result.returncode == 0, result.stderr
        assert stop(server.process, signal.SIGINT) == 0
        assert server.output.rest() == [b"rstreams: shut down"]


def test_tls(tmp_path: Path) -> None:
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    cert.private_key_and_cert_chain_pem.write_to_path(str(tmp_path / "server.pem"))
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    for server in serve("--emp", "127.0.0.1:0", "--tls-cert", str(tmp_path / "server.pem"), log=tmp_path / "log"):
        assert "emps" in server.urls
        result = rstreams("emp", "call", server.emp, "range?count=1", "--tls", "--ca", str(tmp_path / "ca.pem"), "--format", "hex")
        assert result.returncode == 0, result.stderr
        assert result.stdout == b"81a8656c656d656e747391c4080000000000000000\n"


def test_serve_needs_a_listener() -> None:
    result = rstreams("serve", "examples.demo:app")
    assert result.returncode == 2
    # Every installed bridge's option is listed too (--epoxy, ...): check EMP's.
    assert b"--tcp HOST:PORT, --ws HOST:PORT, --emp HOST:PORT" in result.stderr


def test_emp_help_has_examples() -> None:
    result = rstreams("emp", "--help")
    assert result.returncode == 0
    assert result.stdout.count(b"rstreams emp ") >= 3


def test_serve_with_the_authors_framing(tmp_path: Path) -> None:
    for server in serve("--emp", "127.0.0.1:0", "--emp-framing", "author", log=tmp_path / "log"):
        result = rstreams("emp", "call", server.emp, "range?count=1", "--framing", "author", "--format", "hex")
        assert result.returncode == 0, result.stderr
        result = rstreams("emp", "ping", server.emp)  # spec framing against author framing
        assert result.returncode == 1


def test_sub_reads_an_app_over_emp(emp_server: EmpServe) -> None:
    result = rstreams("sub", f"emp://{emp_server.emp}", "range?count=3", "--format", "hex")
    assert result.returncode == 0, result.stderr
    assert result.stdout == b"0000000000000000\n0000000000000001\n0000000000000002\n"


def test_sub_over_emp_has_sub_s_exit_statuses(emp_server: EmpServe) -> None:
    unknown = rstreams("sub", f"emp://{emp_server.emp}", "nothing-here")
    assert unknown.returncode == 1
    assert unknown.stderr == b"rstreams: publisher error: no such publisher: nothing-here\n"
    counted = rstreams("sub", f"emp://{emp_server.emp}", "range?count=1000", "--format", "hex", "--count", "2")
    assert counted.returncode == 0, counted.stderr
    assert counted.stdout.splitlines() == [b"0000000000000000", b"0000000000000001"]
    refused = rstreams("sub", f"emp://127.0.0.1:{free_port()}", "range")
    assert refused.returncode == 4
    bad = rstreams("sub", f"emp://{emp_server.emp}?framing=other", "range")
    assert bad.returncode == 2 and b"framing" in bad.stderr


def test_sub_with_an_unknown_scheme_lists_the_known_ones() -> None:
    result = rstreams("sub", "nope://h:1", "x")
    assert result.returncode == 2
    assert result.stderr.startswith(b"rstreams: unsupported URL scheme 'nope://'")
    for scheme in (b"tcp", b"tls", b"ws", b"wss", b"emp", b"emps"):
        assert scheme in result.stderr
    assert b"Traceback" not in result.stderr
