"""The HTTP front of a WebSocket listener: static files, errors, limits, origins.

Requests are written by hand (bytes on a socket, or on a memory stream for
the time limit), so every answer is checked as a browser or curl would see it.
"""

from __future__ import annotations

import logging
import os
import ssl
import time
import tomllib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import h11
import pytest
import trio
import trio.testing
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from wsproto import ConnectionType, WSConnection
from wsproto.events import AcceptConnection, BytesMessage
from wsproto.events import Request as WebSocketRequest

import rstreams
from rstreams import _http
from rstreams._logs import PEER_TEXT_LOGGED, peer_text
from rstreams._http import (
    DEFAULT_STATIC_DIR,
    MAX_REQUEST_HEAD,
    OriginPolicy,
    RouteKind,
    Site,
    accept_http,
    content_type,
    listener_origins,
    normalize_origin,
    route_request,
)
from rstreams._websocket import SUBPROTOCOL

from ._support import standard_app

TIMEOUT = 20
ROOT = Path(__file__).resolve().parents[2]

FILES = {
    "index.html": b"<!doctype html><title>rstreams</title>\n",
    "rstreams.js": b"export const version = 0;\n",
    "pipeline.html": b"<p>pipeline</p>\n",
    "style.css": b"p {}\n",
    "data.bin": b"\x00\x01",
}


@pytest.fixture
def static_dir(tmp_path: Path) -> Path:
    web = tmp_path / "web"
    web.mkdir()
    for name, content in FILES.items():
        (web / name).write_bytes(content)
    (web / ".secret").write_bytes(b"dot files stay private")
    (web / "sub").mkdir()
    (web / "sub" / "inner.js").write_bytes(b"not served: only files directly in the directory")
    (tmp_path / "outside.txt").write_bytes(b"outside the static directory")
    return web


@asynccontextmanager
async def serving(static_dir: Path, ssl_context: ssl.SSLContext | None = None) -> AsyncIterator[int]:
    server = rstreams.Server(standard_app())
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(
            lambda task_status: server.serve_websocket(
                "127.0.0.1", 0, ssl_context, static_dir=static_dir, task_status=task_status
            )
        )
        yield rstreams.listener_port(listeners[0])
        nursery.cancel_scope.cancel()


async def exchange(port: int, request: bytes, ssl_context: ssl.SSLContext | None = None) -> bytes:
    """Send ``request`` as is; everything the server answers until it closes."""
    stream: trio.abc.Stream
    if ssl_context is not None:
        stream = await trio.open_ssl_over_tcp_stream("127.0.0.1", port, ssl_context=ssl_context, https_compatible=True)
    else:
        stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        await stream.send_all(request)
        answer = b""
        while True:
            try:
                data = await stream.receive_some()
            except trio.BrokenResourceError:
                break
            if not data:
                break
            answer += data
    return answer


def parse_response(answer: bytes, head_only: bool = False) -> tuple[int, dict[str, str], bytes]:
    client = h11.Connection(h11.CLIENT)
    client.send(h11.Request(method="HEAD" if head_only else "GET", target="/", headers=[("Host", "x")]))
    client.receive_data(answer)
    client.receive_data(b"")
    response = client.next_event()
    assert isinstance(response, h11.Response), response
    body = b""
    while True:
        event = client.next_event()
        if isinstance(event, h11.Data):
            body += event.data
        elif isinstance(event, h11.EndOfMessage):
            break
    headers = {name.decode(): value.decode() for name, value in response.headers}
    return response.status_code, headers, body


def get(path: str, method: str = "GET", extra: str = "") -> bytes:
    return f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{extra}\r\n".encode()


# ---- static files -------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "name", "kind"),
    [
        ("/", "index.html", "text/html; charset=utf-8"),
        ("/?v=1", "index.html", "text/html; charset=utf-8"),
        ("/index.html", "index.html", "text/html; charset=utf-8"),
        ("/rstreams.js", "rstreams.js", "text/javascript"),
        ("/rstreams.js?cache=no", "rstreams.js", "text/javascript"),
        ("/pipeline.html", "pipeline.html", "text/html; charset=utf-8"),
        ("/style.css", "style.css", "text/css; charset=utf-8"),
        ("/data.bin", "data.bin", "application/octet-stream"),
    ],
)
async def test_get_serves_files_of_the_static_directory(static_dir: Path, path: str, name: str, kind: str) -> None:
    with trio.fail_after(TIMEOUT):
        async with serving(static_dir) as port:
            status, headers, body = parse_response(await exchange(port, get(path)))
    assert status == 200
    assert headers["content-type"] == kind
    assert body == FILES[name]
    assert headers["content-length"] == str(len(FILES[name]))
    assert headers["access-control-allow-origin"] == "*"


#: The browser client's ES modules: rstreams.js (the entry point) imports the
#: others by relative URL, so each is fetched on its own and must be served.
CLIENT_MODULES = ["rstreams.js", "errors.js", "msgpack.js", "protocol.js", "demand.js"]


@pytest.mark.parametrize("name", CLIENT_MODULES)
async def test_every_client_module_is_served_from_the_package(name: str) -> None:
    with trio.fail_after(TIMEOUT):
        async with serving(DEFAULT_STATIC_DIR) as port:
            status, headers, body = parse_response(await exchange(port, get("/" + name)))
    assert status == 200
    assert headers["content-type"] == "text/javascript"
    assert headers["access-control-allow-origin"] == "*"
    assert body == (DEFAULT_STATIC_DIR / name).read_bytes()


async def test_only_files_are_open_to_other_origins(static_dir: Path) -> None:
    # A page elsewhere may import the module; errors and upgrades say nothing of CORS.
    with trio.fail_after(TIMEOUT):
        async with serving(static_dir) as port:
            status, headers, _ = parse_response(await exchange(port, get("/nothing-here")))
    assert status == 404
    assert "access-control-allow-origin" not in headers


async def test_head_sends_the_headers_only(static_dir: Path) -> None:
    with trio.fail_after(TIMEOUT):
        async with serving(static_dir) as port:
            answer = await exchange(port, get("/rstreams.js", "HEAD"))
    status, headers, body = parse_response(answer, head_only=True)
    assert (status, body) == (200, b"")
    assert headers["content-length"] == str(len(FILES["rstreams.js"]))
    assert answer.endswith(b"\r\n\r\n")


async def test_a_file_added_later_is_served(static_dir: Path) -> None:
    with trio.fail_after(TIMEOUT):
        async with serving(static_dir) as port:
            assert parse_response(await exchange(port, get("/later.js")))[0] == 404
            (static_dir / "later.js").write_bytes(b"1;")
            assert parse_response(await exchange(port, get("/later.js")))[2] == b"1;"


def settle(directory: Path, seconds_ago: float = 60) -> None:
    """Date the directory's last change ``seconds_ago`` (negative: in the future)."""
    when = time.time_ns() - int(seconds_ago * 1e9)
    os.utime(directory, ns=(when, when))


@pytest.fixture
def listings(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Every directory the HTTP front walks (lists), in order."""
    walked: list[Path] = []
    list_files = _http._static_files

    def counted(directory: Path) -> list[str]:
        walked.append(directory)
        return list_files(directory)

    monkeypatch.setattr(_http, "_static_files", counted)
    return walked


async def test_a_request_does_not_walk_the_static_directory_again(static_dir: Path, listings: list[Path]) -> None:
    # The directory was listed for every request (twice for a file), 404s
    # included: with 20,000 files, 50 404s a second made a bystander's
    # fetch 3 to 8 ms (137 ms at worst). Now it is listed once per change.
    for index in range(2000):
        (static_dir / f"page{index}.html").write_bytes(b"p")
    settle(static_dir)
    answers = {"/nope": 404, "/index.html": 200, "/page1999.html": 200, "/missing.js": 404, "/.secret": 404, "/rstreams.js": 200}
    with trio.fail_after(TIMEOUT):
        async with serving(static_dir) as port:
            for path, status in [*answers.items(), *answers.items()]:
                assert parse_response(await exchange(port, get(path)))[0] == status, path
            assert listings.count(static_dir) == 1
            # A change is seen at the next request: the directory's mtime moved.
            (static_dir / "later.js").write_bytes(b"1;")
            assert parse_response(await exchange(port, get("/later.js")))[2] == b"1;"
            (static_dir / "page7.html").unlink()
            assert parse_response(await exchange(port, get("/page7.html")))[0] == 404


def test_a_listing_is_kept_only_once_its_directory_has_settled(tmp_path: Path, listings: list[Path]) -> None:
    # A file added within the same tick of the file system's clock as the
    # listing leaves the mtime as it was: a directory changed less than 2 s
    # before it was listed is listed again at each request until then.
    web = tmp_path / "web"
    web.mkdir()
    (web / "a.js").write_bytes(b"a")
    listing = _http._Listing(web)
    settle(web, -60)  # (changed "now" for the next minute, whatever the machine's speed)
    assert listing.names() == {"a.js"} and listing.names() == {"a.js"}
    assert len(listings) == 2
    settle(web)
    assert listing.names() == {"a.js"} and listing.names() == {"a.js"}
    assert len(listings) == 3
    # Another directory put in its place, even with the same mtime, is another inode.
    other = tmp_path / "other"
    other.mkdir()
    (other / "b.js").write_bytes(b"b")
    os.utime(other, ns=(web.stat().st_atime_ns, web.stat().st_mtime_ns))
    web.rename(tmp_path / "old")
    other.rename(web)
    assert listing.names() == {"b.js"}
    web.rename(tmp_path / "gone")
    assert listing.names() == frozenset()


@pytest.mark.parametrize(
    "path",
    [
        "/missing.js",
        "/sub/inner.js",
        "/sub",
        "/.secret",
        "/../outside.txt",
        "/..%2foutside.txt",
        "/%2e%2e/outside.txt",
        "/%2e%2e%2foutside.txt",
        "//etc/passwd",
        "/..\\outside.txt",
        "/%2fetc%2fpasswd",
        "/index.html%00.js",
        "/web/index.html",
    ],
)
async def test_anything_else_is_not_found(static_dir: Path, path: str) -> None:
    with trio.fail_after(TIMEOUT):
        async with serving(static_dir) as port:
            status, headers, body = parse_response(await exchange(port, get(path)))
    assert status == 404
    assert b"outside" not in body and b"private" not in body


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "OPTIONS", "PATCH"])
async def test_other_methods_are_not_allowed(static_dir: Path, method: str) -> None:
    with trio.fail_after(TIMEOUT):
        async with serving(static_dir) as port:
            status, headers, _ = parse_response(await exchange(port, get("/", method, "Content-Length: 0\r\n")))
    assert status == 405
    assert headers["allow"] == "GET, HEAD"


async def test_static_files_over_tls(static_dir: Path, server_ssl_context: ssl.SSLContext, client_ssl_context: ssl.SSLContext) -> None:
    with trio.fail_after(TIMEOUT):
        async with serving(static_dir, server_ssl_context) as port:
            status, _, body = parse_response(await exchange(port, get("/rstreams.js"), client_ssl_context))
    assert (status, body) == (200, FILES["rstreams.js"])


async def test_a_missing_static_directory_serves_nothing(tmp_path: Path) -> None:
    with trio.fail_after(TIMEOUT):
        async with serving(tmp_path / "nowhere") as port:
            assert parse_response(await exchange(port, get("/")))[0] == 404


def test_the_default_static_directory_is_the_packages_web_directory() -> None:
    assert DEFAULT_STATIC_DIR == Path(rstreams.__file__).resolve().parent / "web"
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "web/*" in pyproject["tool"]["setuptools"]["package-data"]["rstreams"]


# ---- malformed and slow requests --------------------------------------------------


@pytest.mark.parametrize(
    ("request_bytes", "status"),
    [
        (b"GARBAGE\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\n\r\n", 400),  # no Host
        (b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * MAX_REQUEST_HEAD + b"\r\n\r\n", 431),
        (b"GET * HTTP/1.1\r\nHost: x\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n", 400),  # no key
        (b"POST / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nContent-Length: 0\r\n\r\n", 405),
    ],
)
async def test_bad_requests_get_an_error_status(static_dir: Path, request_bytes: bytes, status: int) -> None:
    with trio.fail_after(TIMEOUT):
        async with serving(static_dir) as port:
            answer = await exchange(port, request_bytes)
    assert answer.startswith(b"HTTP/1.1 %d " % status), answer[:100]


async def test_a_silent_client_is_dropped_after_the_head_timeout(static_dir: Path, autojump_clock: trio.testing.MockClock) -> None:
    client, server = trio.testing.memory_stream_pair()
    site = Site(static_dir=static_dir, origins=OriginPolicy(), max_message_size=1024, head_timeout=10)
    await client.send_all(b"GET / HTTP/1.1\r\nHost")  # and then nothing
    began = trio.current_time()
    assert await accept_http(server, site) is None
    assert trio.current_time() - began == pytest.approx(10)
    assert await client.receive_some() == b""  # closed without an answer


async def test_a_client_closing_early_gets_nothing(static_dir: Path) -> None:
    client, server = trio.testing.memory_stream_pair()
    site = Site(static_dir=static_dir, origins=OriginPolicy(), max_message_size=1024)
    await client.send_all(b"GET / HT")
    await client.aclose()
    with trio.fail_after(TIMEOUT):
        assert await accept_http(server, site) is None


async def test_a_websocket_keeps_its_peer_s_address_once_the_socket_is_gone(static_dir: Path) -> None:
    # A peer that resets right after its upgrade has no address by the time
    # its session is logged ("session open: - over ws", seen cutting
    # connections at random): the address is read before the handshake.
    import socket
    import struct

    from rstreams._logs import peer_address

    site = Site(static_dir=static_dir, origins=OriginPolicy(), max_message_size=1024)
    with trio.fail_after(TIMEOUT):
        [listener] = await trio.open_tcp_listeners(0, host="127.0.0.1")
        async with listener:
            client = await trio.open_tcp_stream("127.0.0.1", listener.socket.getsockname()[1])
            server = await listener.accept()
            ws = WSConnection(ConnectionType.CLIENT)
            await client.send_all(ws.send(WebSocketRequest(host="127.0.0.1", target="/", subprotocols=[SUBPROTOCOL])))
            websocket = await accept_http(server, site)
            assert websocket is not None
            address = "127.0.0.1:%d" % client.socket.getsockname()[1]
            client.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            client.socket.close()  # a reset
            with pytest.raises(OSError):
                while True:  # until the reset has arrived
                    server.socket.getpeername()
                    await trio.sleep(0.01)
            assert peer_address(websocket) == address
            await websocket.aclose()


# ---- routing, origins and content types (pure) ------------------------------------


def request(target: bytes, method: bytes = b"GET", headers: list[tuple[bytes, bytes]] | None = None) -> h11.Request:
    return h11.Request(method=method, target=target, headers=[(b"Host", b"x"), *(headers or [])])


UPGRADE = [(b"Upgrade", b"websocket"), (b"Connection", b"Upgrade")]


def test_a_refused_origin_is_quoted_cut_and_escaped() -> None:
    # A 15 KB Origin was echoed whole, twice, in the 403 and in the log.
    long = "http://evil.example/" + "a" * 15_000
    refused = route_request(request(b"/", headers=[*UPGRADE, (b"Origin", long.encode())]), [], OriginPolicy())
    assert refused.status == 403 and len(refused.message) < 2 * PEER_TEXT_LOGGED
    assert "(14720 more characters) is not allowed" in refused.message
    assert "--allow-origin" not in refused.message  # (a cut origin is no option to copy)
    odd = route_request(request(b"/", headers=[*UPGRADE, (b"Origin", b"http://\x7f\xff.example")]), [], OriginPolicy())
    assert odd.message.startswith("origin http://\\x7f\xff.example is not allowed")


@settings(max_examples=300, deadline=None)
@given(
    origin=st.one_of(
        st.binary(max_size=2 * PEER_TEXT_LOGGED),
        # Mostly what h11 lets through: any latin-1 text (obs-text included).
        st.text(st.characters(min_codepoint=0x09, max_codepoint=0xFF), max_size=2 * PEER_TEXT_LOGGED).map(lambda text: text.encode("latin-1")),
        st.integers(0, 2 * PEER_TEXT_LOGGED).map(lambda size: b"http://" + b"h" * size + b":1"),
    )
)
def test_fuzz_a_refused_origin_s_answer_is_one_short_line(origin: bytes) -> None:
    try:
        parsed = request(b"/", headers=[*UPGRADE, (b"Origin", origin)])
    except h11.LocalProtocolError:
        return  # not a header h11 would have parsed either
    route = route_request(parsed, [], OriginPolicy())
    text = origin.strip(b" \t").decode("latin-1")
    if route.status != 403:
        return
    assert len(route.message) <= 2 * len(peer_text(text)) + 60
    assert route.message.isprintable()
    assert ("--allow-origin" in route.message) == (peer_text(text) == text)


async def test_a_long_refused_origin_costs_the_log_one_short_line(static_dir: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="rstreams")
    origin = "http://evil.example/" + "a" * 15_000
    upgrade = get("/", extra=f"Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\nOrigin: {origin}\r\n")
    with trio.fail_after(TIMEOUT):
        async with serving(static_dir) as port:
            status, _, body = parse_response(await exchange(port, upgrade))
    assert status == 403 and len(body) < 2 * PEER_TEXT_LOGGED
    [refused] = [record for record in caplog.records if getattr(record, "event", None) == "origin_refused"]
    assert refused.origin == peer_text(origin)  # type: ignore[attr-defined]
    assert len(refused.getMessage()) < 2 * PEER_TEXT_LOGGED
    assert "--allow-origin" not in refused.getMessage()


def test_route_upgrade_and_origins() -> None:
    policy = OriginPolicy(["http://127.0.0.1:8000"], ["https://app.example"])
    assert route_request(request(b"/", headers=UPGRADE), [], policy).kind is RouteKind.UPGRADE
    assert route_request(request(b"/?token=1", headers=UPGRADE), [], policy).kind is RouteKind.UPGRADE
    with_origin = [*UPGRADE, (b"Origin", b"https://app.example:443")]
    assert route_request(request(b"/", headers=with_origin), [], policy).kind is RouteKind.UPGRADE
    refused = route_request(request(b"/", headers=[*UPGRADE, (b"Origin", b"http://evil.example")]), [], policy)
    assert (refused.kind, refused.status) == (RouteKind.ERROR, 403)
    assert "--allow-origin http://evil.example" in refused.message
    two = [*UPGRADE, (b"Origin", b"http://127.0.0.1:8000"), (b"Origin", b"http://127.0.0.1:8000")]
    assert route_request(request(b"/", headers=two), [], policy).status == 403
    assert route_request(request(b"/x", headers=UPGRADE), [], policy).status == 404


@pytest.mark.parametrize(
    ("text", "origin"),
    [
        ("http://localhost", "http://localhost:80"),
        ("HTTPS://Example.ORG", "https://example.org:443"),
        ("http://127.0.0.1:8000/", "http://127.0.0.1:8000"),
        ("http://[::1]:8000", "http://[::1]:8000"),
        ("ws://h:1", "ws://h:1"),
        ("null", None),
        ("localhost:8000", None),
        ("ftp://h", None),
        ("http://h/path", None),
        ("http://h:99999", None),
        ("http://user@h", None),
        ("http://", None),
    ],
)
def test_normalize_origin(text: str, origin: str | None) -> None:
    assert normalize_origin(text) == origin


def test_listener_origins() -> None:
    own = listener_origins("localhost", [("127.0.0.1", 8000), ("::1", 8000)], secure=False)
    assert own == {
        "http://localhost:8000",
        "ws://localhost:8000",
        "http://127.0.0.1:8000",
        "ws://127.0.0.1:8000",
        "http://[::1]:8000",
        "ws://[::1]:8000",
    }
    assert listener_origins(None, [("0.0.0.0", 8000), ("::", 8000)], secure=False) == frozenset()
    assert listener_origins("h", [("10.0.0.1", 443)], secure=True) == {
        "https://h:443",
        "wss://h:443",
        "https://10.0.0.1:443",
        "wss://10.0.0.1:443",
    }
    # A page at http://localhost:PORT is the loopback listener's own.
    assert "http://localhost:9000" in listener_origins("127.0.0.1", [("127.0.0.1", 9000)], secure=False)


def test_content_types() -> None:
    assert content_type("rstreams.js") == "text/javascript"
    assert content_type("INDEX.HTML") == "text/html; charset=utf-8"
    assert content_type("noext") == "application/octet-stream"


# ---- fuzz ------------------------------------------------------------------------

targets = st.one_of(
    st.binary(max_size=60).map(lambda data: b"/" + data),
    st.lists(st.sampled_from(["..", ".", "%2e%2e", "%2f", "/", "\\", "index.html", "sub", "inner.js", "%00", "web"]), max_size=8).map(
        lambda parts: ("/" + "/".join(parts)).encode()
    ),
)


@settings(max_examples=400, deadline=None)
@given(target=targets, method=st.sampled_from([b"GET", b"HEAD", b"POST"]), upgrade=st.booleans())
def test_fuzz_routing_only_ever_names_a_listed_file(target: bytes, method: bytes, upgrade: bool) -> None:
    files = list(FILES)
    try:
        parsed = request(target, method, UPGRADE if upgrade else [])
    except h11.LocalProtocolError:
        return  # not a target h11 would have parsed either
    route = route_request(parsed, files, OriginPolicy())
    if route.kind is RouteKind.FILE:
        assert route.name in files
        assert method in (b"GET", b"HEAD") and not upgrade


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    head=st.one_of(
        st.binary(max_size=300),
        st.builds(
            lambda method, target, headers: method + b" " + target + b" HTTP/1.1\r\n" + headers + b"\r\n",
            st.sampled_from([b"GET", b"HEAD", b"POST", b"G\x00T", b""]),
            targets,
            st.lists(
                st.sampled_from(
                    [
                        b"Host: x\r\n",
                        b"Upgrade: websocket\r\n",
                        b"Connection: Upgrade\r\n",
                        b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n",
                        b"Sec-WebSocket-Version: 13\r\n",
                        b"Sec-WebSocket-Version: 8\r\n",
                        b"Sec-WebSocket-Protocol: rstreams.v0, x\r\n",
                        b"Origin: http://evil.example\r\n",
                        b"Origin: null\r\n",
                        b"Content-Length: 3\r\n",
                        b"Transfer-Encoding: chunked\r\n",
                        b"Bad Header\r\n",
                    ]
                ),
                max_size=8,
            ).map(b"".join),
        ),
    )
)
def test_fuzz_any_request_head_gets_an_answer_or_a_websocket(static_dir: Path, head: bytes) -> None:
    async def main() -> None:
        client, server = trio.testing.memory_stream_pair()
        site = Site(static_dir=static_dir, origins=OriginPolicy(), max_message_size=1024, head_timeout=5)
        await client.send_all(head)
        await client.send_eof()
        with trio.fail_after(10):
            websocket = await accept_http(server, site)
            answer = b""
            while data := await client.receive_some():
                answer += data
                if websocket is not None and b"\r\n\r\n" in answer:
                    break
        if websocket is not None:
            assert answer.startswith(b"HTTP/1.1 101 ")
            await websocket.aclose()
        else:
            assert answer == b"" or answer.startswith(b"HTTP/1.1 "), answer

    trio.run(main)


# ---- bytes that arrive with the handshake -----------------------------------------


async def test_frames_sent_with_the_upgrade_request_are_not_lost(static_dir: Path) -> None:
    # Clients wait for the 101 before sending frames, but the server must not
    # lose bytes that arrive in the same read as the request head.
    upgrade = WSConnection(ConnectionType.CLIENT).send(WebSocketRequest(host="x", target="/", subprotocols=[SUBPROTOCOL]))
    # A client frame (masked; each frame carries its own key), from a client
    # connection whose handshake is done in memory.
    framer, peer = WSConnection(ConnectionType.CLIENT), WSConnection(ConnectionType.SERVER)
    peer.receive_data(framer.send(WebSocketRequest(host="x", target="/")))
    list(peer.events())
    framer.receive_data(peer.send(AcceptConnection()))
    list(framer.events())
    frame = framer.send(BytesMessage(data=b"\x93\x00\x00\x90"))
    client, server = trio.testing.memory_stream_pair()
    site = Site(static_dir=static_dir, origins=OriginPolicy(), max_message_size=1024)
    with trio.fail_after(TIMEOUT):
        await client.send_all(upgrade + frame)
        websocket = await accept_http(server, site)
        assert websocket is not None and websocket.subprotocol == SUBPROTOCOL
        assert await websocket.receive_some() == b"\x93\x00\x00\x90"
        await websocket.aclose()


def test_route_endpoints_before_files_and_upgrades_only_where_allowed() -> None:
    policy, endpoints = OriginPolicy(), ["/metrics", "/stats"]
    metrics = route_request(request(b"/metrics?x=1"), ["metrics", "index.html"], policy, endpoints)
    assert (metrics.kind, metrics.name) == (RouteKind.ENDPOINT, "/metrics")
    assert route_request(request(b"/stats", method=b"HEAD"), [], policy, endpoints).head_only
    assert route_request(request(b"/stats", method=b"POST"), [], policy, endpoints).status == 405
    assert route_request(request(b"/healthz"), [], policy, endpoints).status == 404  # not one of them
    assert route_request(request(b"/", headers=UPGRADE), [], policy, endpoints).kind is RouteKind.UPGRADE
    refused = route_request(request(b"/", headers=UPGRADE), [], policy, endpoints, upgrades=False)
    assert (refused.kind, refused.status) == (RouteKind.ERROR, 404)
