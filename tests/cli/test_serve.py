"""``rstreams serve``, run as a user runs it: the installed console script, from
the repository root, then stopped with Ctrl-C (SIGINT) or SIGTERM."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest
import trustme

from rstreams import Router, SessionConfig
from rstreams.cli import build_parser
from rstreams.cli._common import server_from_arguments

from ._support import RSTREAMS, ROOT, SHUTDOWN_TIMEOUT, OutputLines, ServeProcess, rstreams, start, stop


@pytest.mark.parametrize("command", [[], ["serve"], ["sub"], ["pub"], ["stats"], ["ls"], ["ping"], ["completion"]])
def test_every_command_has_help_with_examples(command: list[str]) -> None:
    result = rstreams(*command, "--help")
    assert result.returncode == 0, result.stderr
    assert b"\nexamples:\n" in result.stdout
    examples = result.stdout.split(b"\nexamples:\n", 1)[1]
    assert examples.count(b"rstreams ") >= 3


def test_version() -> None:
    result = rstreams("--version")
    assert result.returncode == 0
    assert result.stdout.startswith(b"rstreams ")


def test_no_command_prints_usage() -> None:
    result = rstreams()
    assert result.returncode == 2
    assert b"usage: rstreams" in result.stderr


def test_serve_from_the_repository_root_with_the_console_script(demo_server: ServeProcess) -> None:
    assert RSTREAMS.endswith("rstreams") and demo_server.process.args[0] == RSTREAMS  # type: ignore[index]
    assert demo_server.url.startswith("tcp://127.0.0.1:") and demo_server.port > 0
    result = rstreams("sub", demo_server.url, "range?count=3", "--format", "hex")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [b"%016x" % i for i in range(3)]


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_signal_shuts_down_with_goodbye_to_connected_subscribers(fresh_demo_server: ServeProcess, signum: int) -> None:
    server = fresh_demo_server
    subscriber = start("sub", server.url, "ticker?interval=0.01", "--format", "msgpack")
    try:
        ticks = OutputLines(subscriber.stdout)  # type: ignore[arg-type]
        ticks.readlines(3)  # connected and receiving
        began = time.monotonic()
        server.process.send_signal(signum)
        assert server.process.wait(timeout=SHUTDOWN_TIMEOUT) == 0, server.log()
        assert time.monotonic() - began < 5
        assert server.output.rest() == [b"rstreams: shut down"]
        assert subscriber.wait(timeout=SHUTDOWN_TIMEOUT) == 3
        assert subscriber.stderr is not None
        message = subscriber.stderr.read().decode()
        assert "rstreams: the server said goodbye: server shutting down" in message
    finally:
        stop(subscriber)
        for stream in (subscriber.stdout, subscriber.stderr):
            if stream is not None:
                stream.close()


def test_ctrl_c_with_no_sessions_exits_at_once(fresh_demo_server: ServeProcess) -> None:
    assert fresh_demo_server.stop(signal.SIGINT) == 0
    assert fresh_demo_server.output.rest() == [b"rstreams: shut down"]


def test_several_listeners(tmp_path: Path) -> None:
    args = ["serve", "examples.demo:app", "--tcp", "127.0.0.1:0", "--tcp", "127.0.0.1:0"]
    with ServeProcess.start(args, tmp_path / "log", listeners=2) as server:
        assert len(set(server.urls)) == 2
        for url in server.urls:
            result = rstreams("sub", url, "range?count=1", "--format", "hex")
            assert result.stdout == b"0000000000000000\n"


def test_app_dir_puts_another_directory_first(tmp_path: Path) -> None:
    (tmp_path / "myapp.py").write_text(
        "import rstreams\n"
        "app = rstreams.Router()\n"
        "@app.publisher('hi')\n"
        "async def hi(sink):\n"
        "    await sink.send(b'hello')\n"
    )
    args = ["serve", "myapp:app", "--app-dir", str(tmp_path), "--tcp", "127.0.0.1:0"]
    with ServeProcess.start(args, tmp_path / "log") as server:
        result = rstreams("sub", server.url, "hi")
        assert (result.returncode, result.stdout) == (0, b"hello\n")


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("examples.demo", b"expected MODULE:APP"),
        ("examples.nothing:app", b"cannot import module 'examples.nothing'"),
        ("examples.demo:nothing", b"has no attribute 'nothing'"),
        ("examples.demo:RANGE_BLOCK", b"is a int, not an rstreams.Router"),
    ],
)
def test_bad_app_specs_are_usage_errors(spec: str, message: bytes) -> None:
    result = rstreams("serve", spec, "--tcp", "127.0.0.1:0")
    assert result.returncode == 2
    assert message in result.stderr
    assert b"Traceback" not in result.stderr


def test_the_app_is_looked_up_in_the_current_directory(tmp_path: Path) -> None:
    result = rstreams("serve", "examples.demo:app", "--tcp", "127.0.0.1:0", cwd=tmp_path)
    assert result.returncode == 2
    assert b"cannot import module 'examples.demo'" in result.stderr


def test_a_port_in_use_is_reported(demo_server: ServeProcess) -> None:
    result = rstreams("serve", "examples.demo:app", "--tcp", f"127.0.0.1:{demo_server.port}")
    assert result.returncode == 1
    assert b"rstreams: cannot listen on 127.0.0.1:" in result.stderr


@pytest.mark.parametrize("address", ["localhost", "127.0.0.1:http", "127.0.0.1:70000"])
def test_bad_addresses_are_usage_errors(address: str) -> None:
    result = rstreams("serve", "examples.demo:app", "--tcp", address)
    assert result.returncode == 2
    assert b"--tcp" in result.stderr


def test_max_connections_refuses_with_goodbye(tmp_path: Path) -> None:
    args = ["serve", "examples.demo:app", "--tcp", "127.0.0.1:0", "--max-connections", "1"]
    with ServeProcess.start(args, tmp_path / "log") as server:
        first = start("sub", server.url, "ticker?interval=0.01")
        try:
            OutputLines(first.stdout).readline()  # type: ignore[arg-type]
            second = rstreams("sub", server.url, "range?count=1")
            assert second.returncode == 3
            assert b"rstreams: the server said goodbye: server busy" in second.stderr
        finally:
            stop(first)
            first.stdout.close()  # type: ignore[union-attr]
            first.stderr.close()  # type: ignore[union-attr]


def test_tls_listeners(tmp_path: Path) -> None:
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    cert.private_key_pem.write_to_path(str(tmp_path / "key.pem"))
    cert.cert_chain_pems[0].write_to_path(str(tmp_path / "cert.pem"))
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    args = ["serve", "examples.demo:app", "--tcp", "127.0.0.1:0"]
    args += ["--tls-cert", str(tmp_path / "cert.pem"), "--tls-key", str(tmp_path / "key.pem")]
    with ServeProcess.start(args, tmp_path / "log") as server:
        assert server.url.startswith("tls://127.0.0.1:")
        trusted = rstreams("sub", server.url, "range?count=2", "--format", "hex", "--ca", str(tmp_path / "ca.pem"))
        assert trusted.returncode == 0, trusted.stderr
        assert trusted.stdout == b"0000000000000000\n0000000000000001\n"
        untrusted = rstreams("sub", server.url, "range?count=2")
        assert untrusted.returncode == 4
        assert b"rstreams: TLS handshake failed: [SSL: CERTIFICATE_VERIFY_FAILED]" in untrusted.stderr
        plain = rstreams("sub", server.url.replace("tls://", "tcp://"), "range?count=2")
        assert plain.returncode != 0


def test_bad_tls_files_are_usage_errors(tmp_path: Path) -> None:
    missing = str(tmp_path / "missing.pem")
    result = rstreams("serve", "examples.demo:app", "--tcp", "127.0.0.1:0", "--tls-cert", missing)
    assert result.returncode == 2
    assert b"cannot load the TLS certificate" in result.stderr
    result = rstreams("serve", "examples.demo:app", "--tcp", "127.0.0.1:0", "--tls-key", missing)
    assert result.returncode == 2
    assert b"--tls-key needs --tls-cert" in result.stderr


def test_python_dash_m_works_too() -> None:
    import subprocess
    import sys

    result = subprocess.run([sys.executable, "-m", "rstreams", "--version"], cwd=ROOT, capture_output=True, timeout=30)
    assert result.returncode == 0 and result.stdout.startswith(b"rstreams ")


@pytest.mark.parametrize("command", [["serve", "examples.demo:app"], ["pub", "--serve", "lines"]])
def test_busy_poll_sets_the_servers_session_config(command: list[str]) -> None:
    parser = build_parser()
    default = server_from_arguments(Router(), parser.parse_args([*command, "--tcp", "127.0.0.1:0"]))
    assert default.config.busy_poll == SessionConfig().busy_poll > 0
    off = server_from_arguments(Router(), parser.parse_args([*command, "--tcp", "127.0.0.1:0", "--busy-poll", "0"]))
    assert off.config.busy_poll == 0.0


@pytest.mark.parametrize("command", [["serve", "examples.demo:app"], ["pub", "--serve", "lines"]])
def test_no_precise_timers_reaches_the_servers_session_config(command: list[str]) -> None:
    parser = build_parser()
    default = parser.parse_args([*command, "--tcp", "127.0.0.1:0"])
    assert default.precise_timers and server_from_arguments(Router(), default).config.precise_timers
    off = parser.parse_args([*command, "--tcp", "127.0.0.1:0", "--no-precise-timers"])
    assert not off.precise_timers and not server_from_arguments(Router(), off).config.precise_timers


@pytest.mark.parametrize(
    ("module", "command"),
    [("_serve", ["serve", "examples.demo:app", "--app-dir", str(ROOT)]), ("_pub", ["pub", "--serve", "lines"])],
)
def test_no_precise_timers_runs_the_server_with_trios_own(
    monkeypatch: pytest.MonkeyPatch, module: str, command: list[str]
) -> None:
    # The command itself, not only its sessions: rstreams.run would turn the
    # precise timers on for the whole run whatever the sessions were told.
    import importlib

    from rstreams.cli import main

    asked: list[bool] = []

    def recording(function: object, *, precise_timers: bool = True) -> int:
        asked.append(precise_timers)
        return 0

    monkeypatch.setattr(importlib.import_module(f"rstreams.cli.{module}"), "run_command", recording)
    assert main([*command, "--tcp", "127.0.0.1:0"]) == 0
    assert main([*command, "--tcp", "127.0.0.1:0", "--no-precise-timers"]) == 0
    assert asked == [True, False]


@pytest.mark.parametrize("value", ["-1", "abc", "nan", "inf"])
def test_bad_busy_poll_values_are_usage_errors(value: str) -> None:
    result = rstreams("serve", "examples.demo:app", "--tcp", "127.0.0.1:0", "--busy-poll", value)
    assert result.returncode == 2
    assert b"--busy-poll" in result.stderr


@pytest.mark.parametrize("command", [["serve", "examples.demo:app"], ["pub", "lines"]])
def test_servers_have_default_connection_and_idle_limits(command: list[str]) -> None:
    parser = build_parser()
    default = server_from_arguments(Router(), parser.parse_args([*command, "--tcp", "127.0.0.1:0"]))
    assert default.max_connections == 1024
    assert default.config.idle_timeout == 300
    chosen = parser.parse_args([*command, "--tcp", "127.0.0.1:0", "--idle-timeout", "2.5", "--max-connections", "3"])
    server = server_from_arguments(Router(), chosen)
    assert (server.config.idle_timeout, server.max_connections) == (2.5, 3)
    never = parser.parse_args([*command, "--tcp", "127.0.0.1:0", "--idle-timeout", "0"])
    assert server_from_arguments(Router(), never).config.idle_timeout is None


@pytest.mark.parametrize("value", ["-1", "abc", "nan"])
def test_bad_idle_timeouts_are_usage_errors(value: str) -> None:
    result = rstreams("serve", "examples.demo:app", "--tcp", "127.0.0.1:0", "--idle-timeout", value)
    assert result.returncode == 2
    assert b"--idle-timeout" in result.stderr


def test_idle_timeout_closes_a_silent_client_with_goodbye(tmp_path: Path) -> None:
    import socket

    from rstreams.protocol import Goodbye, Hello, MessageDecoder, encode

    args = ["serve", "examples.demo:app", "--tcp", "127.0.0.1:0", "--idle-timeout", "0.5", "--log-level", "info"]
    with ServeProcess.start(args, tmp_path / "log") as server:
        with socket.create_connection(("127.0.0.1", server.port), timeout=30) as client:
            client.sendall(encode(Hello()))
            received = b""
            while chunk := client.recv(4096):  # until the server closes
                received += chunk
        decoder = MessageDecoder()
        decoder.feed(received)
        messages = list(decoder)
        assert messages[-1] == Goodbye(reason="idle timeout: nothing received and no stream open for 0.5 s")
