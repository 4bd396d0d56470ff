"""``rstreams demo``: the demo app on TCP and WebSocket with its page, as a user runs it."""

from __future__ import annotations

import socket
import urllib.request
from pathlib import Path

import examples.demo
from rstreams import demo as packaged_demo
from rstreams.cli._demo import page_url

from ._support import COMMAND_TIMEOUT, ServeProcess, rstreams


def test_examples_demo_is_the_packaged_app() -> None:
    assert examples.demo.app is packaged_demo.app
    assert examples.demo.RANGE_BLOCK == packaged_demo.RANGE_BLOCK


def test_page_url() -> None:
    assert page_url("ws://127.0.0.1:8000/") == "http://127.0.0.1:8000/"
    assert page_url("wss://[::1]:8443/") == "https://[::1]:8443/"


def test_help_names_the_default_addresses() -> None:
    result = rstreams("demo", "--help")
    assert result.returncode == 0
    text = b" ".join(result.stdout.split())  # argparse wraps the option help
    assert b"(default: 127.0.0.1:9000;" in text
    assert b"(default: 127.0.0.1:8000)" in text


def test_demo_serves_tcp_websocket_and_the_page(tmp_path: Path) -> None:
    args = ["demo", "--tcp", "127.0.0.1:0", "--ws", "127.0.0.1:0"]
    with ServeProcess.start(args, tmp_path / "log", listeners=2, cwd=tmp_path) as server:
        tcp, ws = server.urls
        assert tcp.startswith("tcp://127.0.0.1:") and ws.startswith("ws://127.0.0.1:")
        page = server.output.readline().decode()
        assert page == f"rstreams: open {page_url(ws)} in a browser for the demo page"
        with urllib.request.urlopen(page_url(ws), timeout=COMMAND_TIMEOUT) as response:
            assert response.status == 200
            assert b"<title>rstreams" in response.read()
        for url in (tcp, ws):
            result = rstreams("sub", url, "range?count=2", "--format", "hex")
            assert (result.returncode, result.stdout) == (0, b"0000000000000000\n0000000000000001\n"), result.stderr
        assert server.stop() == 0
        assert server.output.rest() == [b"rstreams: shut down"]


def test_a_taken_port_says_how_to_choose_another(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = rstreams("demo", "--tcp", f"127.0.0.1:{port}", "--ws", "127.0.0.1:0", cwd=tmp_path)
    assert result.returncode == 1
    assert f"cannot listen on 127.0.0.1:{port}".encode() in result.stderr
    assert b"choose other addresses with --tcp and --ws" in result.stderr
    assert b"Traceback" not in result.stderr
