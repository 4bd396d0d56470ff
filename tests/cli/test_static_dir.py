"""``rstreams serve --ws ... --static-dir DIR``: a page of your own, at the server's origin."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from rstreams._http import CLIENT_MODULES, DEFAULT_STATIC_DIR

from ._support import ServeProcess, rstreams


def fetch(port: int, path: str, *, origin: str | None = None, upgrade: bool = False) -> tuple[int, bytes]:
    """Status and body of one request (blocking socket with a deadline; the server closes)."""
    lines = [f"GET {path} HTTP/1.1", "Host: 127.0.0.1", "Connection: close"]
    if upgrade:
        lines += ["Upgrade: websocket", "Connection: Upgrade", "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==", "Sec-WebSocket-Version: 13"]
    if origin is not None:
        lines.append(f"Origin: {origin}")
    answer = b""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as connection:
        connection.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        while upgrade is False or b"\r\n\r\n" not in answer:
            data = connection.recv(65536)
            if not data:
                break
            answer += data
    head, _, body = answer.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), body


@pytest.fixture
def pages(tmp_path: Path) -> Path:
    pages = tmp_path / "pages"
    pages.mkdir()
    (pages / "index.html").write_bytes(b"<!doctype html><title>mine</title>")
    (pages / "app.js").write_bytes(b"import { connect } from '/rstreams.js';")
    (pages / "sub").mkdir()
    (pages / "sub" / "nested.js").write_bytes(b"only files directly in DIR")
    (tmp_path / "secret.txt").write_bytes(b"outside DIR")
    return pages


def test_serves_your_pages_and_the_client_at_the_servers_origin(pages: Path, tmp_path: Path) -> None:
    args = ["serve", "rstreams.demo:app", "--ws", "127.0.0.1:0", "--static-dir", str(pages)]
    with ServeProcess.start(args, tmp_path / "log") as server:
        assert fetch(server.port, "/") == (200, b"<!doctype html><title>mine</title>")
        assert fetch(server.port, "/app.js") == (200, (pages / "app.js").read_bytes())
        # The client your page imports, from the package (DIR has none).
        for name in CLIENT_MODULES:
            assert fetch(server.port, f"/{name}") == (200, (DEFAULT_STATIC_DIR / name).read_bytes()), name
        # The package's own pages are not served in place of yours.
        assert fetch(server.port, "/pipeline.html")[0] == 404
        for path in ("/../secret.txt", "/%2e%2e/secret.txt", "/..%2fsecret.txt", "/sub/nested.js", "//etc/passwd"):
            status, body = fetch(server.port, path)
            assert status == 404 and b"outside" not in body, path
        # A page from DIR connects without --allow-origin: its origin is the listener's own.
        own = f"http://127.0.0.1:{server.port}"
        assert fetch(server.port, "/", origin=own, upgrade=True)[0] == 101
        assert fetch(server.port, "/", origin="http://elsewhere.example", upgrade=True)[0] == 403
        sub = rstreams("sub", server.url, "range?count=2", "--format", "hex")
        assert (sub.returncode, sub.stdout) == (0, b"0000000000000000\n0000000000000001\n"), sub.stderr


def test_a_client_module_of_your_own_comes_first(pages: Path, tmp_path: Path) -> None:
    (pages / "rstreams.js").write_bytes(b"// a pinned copy")
    args = ["serve", "rstreams.demo:app", "--ws", "127.0.0.1:0", "--static-dir", str(pages)]
    with ServeProcess.start(args, tmp_path / "log") as server:
        assert fetch(server.port, "/rstreams.js") == (200, b"// a pinned copy")


def test_a_refused_origin_is_logged_with_the_hint(pages: Path, tmp_path: Path) -> None:
    args = ["serve", "rstreams.demo:app", "--ws", "127.0.0.1:0", "--log-level", "info"]
    with ServeProcess.start(args, tmp_path / "log") as server:
        assert fetch(server.port, "/", origin="http://app.example:3000")[0] == 200  # a plain GET from anywhere: the page itself is public
        refused = fetch_full_upgrade(server.port, "http://app.example:3000")
        assert refused.startswith(b"HTTP/1.1 403 ")
        assert b"--allow-origin http://app.example:3000" in refused
    assert "from origin http://app.example:3000 (allow it with --allow-origin http://app.example:3000)" in server.log()


def fetch_full_upgrade(port: int, origin: str) -> bytes:
    lines = ["GET / HTTP/1.1", "Host: 127.0.0.1", "Upgrade: websocket", "Connection: Upgrade"]
    lines += ["Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==", "Sec-WebSocket-Version: 13", f"Origin: {origin}"]
    answer = b""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as connection:
        connection.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        while data := connection.recv(65536):
            answer += data
    return answer


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--ws", "127.0.0.1:0", "--static-dir", "no/such/dir"], b"--static-dir no/such/dir: does not exist"),
        (["--ws", "127.0.0.1:0", "--static-dir", "README.md"], b"--static-dir README.md: is not a directory"),
        (["--tcp", "127.0.0.1:0", "--static-dir", "docs"], b"--static-dir is for --ws listeners"),
    ],
)
def test_usage_errors(args: list[str], message: bytes) -> None:
    result = rstreams("serve", "rstreams.demo:app", *args)
    assert result.returncode == 2
    assert message in result.stderr
    assert b"Traceback" not in result.stderr
