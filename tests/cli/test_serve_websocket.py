"""``rstreams serve --ws``, run as a user runs it, with ``rstreams sub ws://`` as the client."""

from __future__ import annotations

import signal
import socket
import time
from pathlib import Path

import pytest
import trustme

from ._support import SHUTDOWN_TIMEOUT, OutputLines, ServeProcess, rstreams, start, stop


def http_get(port: int, path: str, origin: str | None = None, upgrade: bool = False) -> bytes:
    """The raw answer to one request (blocking socket, with a deadline)."""
    lines = [f"GET {path} HTTP/1.1", "Host: 127.0.0.1", "Connection: close"]
    if upgrade:
        lines += ["Upgrade: websocket", "Connection: Upgrade", "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==", "Sec-WebSocket-Version: 13"]
    if origin is not None:
        lines.append(f"Origin: {origin}")
    with socket.create_connection(("127.0.0.1", port), timeout=10) as connection:
        connection.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        answer = b""
        while b"\r\n\r\n" not in answer:
            data = connection.recv(65536)
            if not data:
                break
            answer += data
    return answer


def test_tcp_and_websocket_listeners_serve_the_same_app(tmp_path: Path) -> None:
    args = ["serve", "examples.demo:app", "--tcp", "127.0.0.1:0", "--ws", "127.0.0.1:0"]
    with ServeProcess.start(args, tmp_path / "log", listeners=2) as server:
        tcp_url, ws_url = server.urls
        assert tcp_url.startswith("tcp://127.0.0.1:")
        assert ws_url.startswith("ws://127.0.0.1:") and ws_url.endswith("/")
        assert int(ws_url.rstrip("/").rsplit(":", 1)[1]) > 0
        for url in (tcp_url, ws_url):
            result = rstreams("sub", url, "range?count=5", "--format", "hex")
            assert result.returncode == 0, result.stderr
            assert result.stdout.splitlines() == [b"%016x" % i for i in range(5)]
        large = rstreams("sub", ws_url, "blob?count=2&size=1048577", "--format", "hex")
        assert large.returncode == 0, large.stderr
        assert [len(line) for line in large.stdout.splitlines()] == [2 * 1048577] * 2


def test_websocket_only(tmp_path: Path) -> None:
    with ServeProcess.start(["serve", "examples.demo:app", "--ws", "127.0.0.1:0"], tmp_path / "log") as server:
        assert server.url.startswith("ws://")
        result = rstreams("sub", server.url, "range?count=3", "--format", "hex")
        assert (result.returncode, result.stdout.count(b"\n")) == (0, 3), result.stderr
        unknown = rstreams("sub", server.url, "nothing")
        assert unknown.returncode == 1


def test_origins_from_the_command_line(tmp_path: Path) -> None:
    args = ["serve", "examples.demo:app", "--ws", "127.0.0.1:0", "--allow-origin", "http://app.example:3000"]
    args += ["--allow-origin", "https://other.example"]
    with ServeProcess.start(args, tmp_path / "log") as server:
        own = f"http://127.0.0.1:{server.port}"
        for origin in (None, own, "http://app.example:3000", "https://other.example:443"):
            assert http_get(server.port, "/", origin, upgrade=True).startswith(b"HTTP/1.1 101 "), origin
        refused = http_get(server.port, "/", "http://evil.example", upgrade=True)
        assert refused.startswith(b"HTTP/1.1 403 ")
        assert http_get(server.port, "/nothing.js").startswith(b"HTTP/1.1 404 ")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], b"name at least one listener"),
        (["--tcp", "127.0.0.1:0", "--allow-origin", "http://x:1"], b"--allow-origin is for --ws"),
        (["--ws", "127.0.0.1:0", "--allow-origin", "localhost:8000"], b"expected an origin"),
        (["--ws", "localhost"], b"--ws"),
    ],
)
def test_usage_errors(args: list[str], message: bytes) -> None:
    result = rstreams("serve", "examples.demo:app", *args)
    assert result.returncode == 2
    assert message in result.stderr
    assert b"Traceback" not in result.stderr


def test_wss(tmp_path: Path) -> None:
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    cert.private_key_pem.write_to_path(str(tmp_path / "key.pem"))
    cert.cert_chain_pems[0].write_to_path(str(tmp_path / "cert.pem"))
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    args = ["serve", "examples.demo:app", "--ws", "127.0.0.1:0", "--tcp", "127.0.0.1:0"]
    args += ["--tls-cert", str(tmp_path / "cert.pem"), "--tls-key", str(tmp_path / "key.pem")]
    with ServeProcess.start(args, tmp_path / "log", listeners=2) as server:
        tls_url, wss_url = server.urls
        assert tls_url.startswith("tls://") and wss_url.startswith("wss://127.0.0.1:")
        trusted = rstreams("sub", wss_url, "range?count=2", "--format", "hex", "--ca", str(tmp_path / "ca.pem"))
        assert trusted.returncode == 0, trusted.stderr
        assert trusted.stdout == b"0000000000000000\n0000000000000001\n"
        untrusted = rstreams("sub", wss_url, "range?count=2")
        assert untrusted.returncode == 4
        assert b"CERTIFICATE_VERIFY_FAILED" in untrusted.stderr
        assert b"Traceback" not in untrusted.stderr


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_signal_shuts_down_with_goodbye_to_websocket_subscribers(tmp_path: Path, signum: int) -> None:
    args = ["serve", "examples.demo:app", "--tcp", "127.0.0.1:0", "--ws", "127.0.0.1:0"]
    with ServeProcess.start(args, tmp_path / "log", listeners=2) as server:
        subscribers = [start("sub", url, "ticker?interval=0.01", "--format", "msgpack") for url in server.urls]
        try:
            for subscriber in subscribers:
                OutputLines(subscriber.stdout).readlines(3)  # type: ignore[arg-type]
            began = time.monotonic()
            server.process.send_signal(signum)
            assert server.process.wait(timeout=SHUTDOWN_TIMEOUT) == 0, server.log()
            assert time.monotonic() - began < 5
            assert server.output.rest() == [b"rstreams: shut down"]
            for subscriber in subscribers:
                assert subscriber.wait(timeout=SHUTDOWN_TIMEOUT) == 3
                assert subscriber.stderr is not None
                assert b"rstreams: the server said goodbye: server shutting down" in subscriber.stderr.read()
        finally:
            for subscriber in subscribers:
                stop(subscriber)
                for stream in (subscriber.stdout, subscriber.stderr):
                    if stream is not None:
                        stream.close()


def test_sub_reports_a_refused_upgrade(tmp_path: Path) -> None:
    with ServeProcess.start(["serve", "examples.demo:app", "--ws", "127.0.0.1:0"], tmp_path / "log") as server:
        result = rstreams("sub", server.url + "elsewhere", "range?count=1")
        assert result.returncode == 4
        assert b"WebSocket upgrade refused: HTTP 404" in result.stderr
