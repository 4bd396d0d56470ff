"""The HTTP front of a WebSocket listener: one request, then a file or an upgrade.

A WebSocket listener is an HTTP server with a small job. Each connection
sends one request head, read here with h11 under a size limit
(:data:`MAX_REQUEST_HEAD`) and a time limit (:data:`REQUEST_HEAD_TIMEOUT`),
and :func:`route_request` (pure, no I/O) decides what it gets:

* a WebSocket upgrade at ``/``: the ``Origin`` is checked
  (:class:`OriginPolicy`), wsproto completes the handshake from the headers
  h11 parsed, selecting ``rstreams.v0`` when offered, and the caller gets a
  :class:`WebSocketStream` to run a session on;
* ``GET`` / ``HEAD`` of ``/`` (``index.html``) or ``/NAME`` where ``NAME`` is a
  file directly in the static directory: the file, with a content type from
  :data:`CONTENT_TYPES`. Names are looked up in the directory's listing, so
  no request can reach outside it (no path is ever joined from user input).
  The listing is kept between requests and taken again when the directory
  has changed (:class:`_Listing`): a request costs one ``stat`` of the
  directory, not a pass over its entries;
* ``GET`` / ``HEAD`` of one of the site's *endpoints* (``/healthz``,
  ``/stats``, ``/metrics``: see ``_endpoints``): what its function answers,
  computed when asked;
* anything else: 404, 405 (other methods), 403 (a refused origin) or 400,
  and the connection is closed (``Connection: close``: one request each).

trio-websocket's server could not do this: it answers every non-upgrade
request with 400 before a handler sees it.
"""

from __future__ import annotations

import enum
import functools
import ipaddress
import os
import threading
import time
from http import HTTPStatus
from collections.abc import Callable, Collection, Container, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlsplit

import h11
import trio
from wsproto import ConnectionType, WSConnection
from wsproto.events import AcceptConnection
from wsproto.events import Request as WebSocketRequest
from wsproto.utilities import ProtocolError as WebSocketProtocolError

from ._logs import logger, peer_address, peer_text
from ._websocket import BEARER_SUBPROTOCOL_PREFIX, SUBPROTOCOL, WebSocketStream

__all__ = [
    "CLIENT_MODULES",
    "DEFAULT_STATIC_DIR",
    "MAX_REQUEST_HEAD",
    "REQUEST_HEAD_TIMEOUT",
    "CONTENT_TYPES",
    "OriginPolicy",
    "upgrade_token",
    "Route",
    "RouteKind",
    "Endpoint",
    "route_request",
    "is_upgrade",
    "normalize_origin",
    "listener_origins",
    "accept_http",
]

KiB = 1024

#: Where the browser client and demo pages ship: ``rstreams/web/``.
DEFAULT_STATIC_DIR = Path(__file__).resolve().parent / "web"
# The browser client's modules: rstreams.js and what it imports. A listener
# serving a directory of the user's own pages serves these too (from
# DEFAULT_STATIC_DIR, unless the directory has its own), so a page of the
# user's imports /rstreams.js from the origin it connects to.
CLIENT_MODULES = ("rstreams.js", "errors.js", "msgpack.js", "protocol.js", "demand.js")
#: The largest request head read (h11's default, and plenty for a browser).
MAX_REQUEST_HEAD = 16 * KiB
#: Seconds a client has to send its request head (and, for a file, to
#: receive the answer) before the connection is dropped.
REQUEST_HEAD_TIMEOUT = 10.0
_READ_SIZE = 4 * KiB
# A listing taken less than this long after its directory last changed is
# taken again at the next request: a change within the same tick of the
# file system's clock (2 s on FAT, a few ms on ext4) leaves the mtime as it
# was (git's "racily clean" entries).
_SETTLE_NS = 2_000_000_000

#: Content types by file suffix; anything else is application/octet-stream.
CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".htm": "text/html; charset=utf-8",
    ".js": "text/javascript",
    ".mjs": "text/javascript",
    ".css": "text/css; charset=utf-8",
    ".json": "application/json",
    ".map": "application/json",
    ".txt": "text/plain; charset=utf-8",
    ".md": "text/markdown; charset=utf-8",
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".jpg": "image/jpeg",
    ".jpeg": "image/jpeg",
    ".gif": "image/gif",
    ".ico": "image/x-icon",
    ".webp": "image/webp",
    ".wasm": "application/wasm",
}
_DEFAULT_CONTENT_TYPE = "application/octet-stream"
_WILDCARD_HOSTS = frozenset({"", "0.0.0.0", "::"})
_DEFAULT_PORTS = {"http": 80, "ws": 80, "https": 443, "wss": 443}


# ---- origins ---------------------------------------------------------------


def normalize_origin(text: str) -> str | None:
    """``scheme://host:port`` in lower case with the port spelled out; None if not an origin.

    ``http://LocalHost`` and ``http://localhost:80`` are the same origin.
    """
    try:
        parts = urlsplit(text.strip())
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    host = parts.hostname
    if scheme not in _DEFAULT_PORTS or not host or parts.path not in ("", "/") or parts.query or parts.username:
        return None
    if port is None:
        port = _DEFAULT_PORTS[scheme]
    host = f"[{host}]" if ":" in host else host
    return f"{scheme}://{host}:{port}"


def listener_origins(host: str | None, addresses: Iterable[tuple[str, int]], *, secure: bool) -> frozenset[str]:
    """The origins of pages a listener serves itself.

    For each address the listener is bound to, and for ``host`` as given (a
    name such as ``localhost``), ``http://HOST:PORT`` and ``ws://HOST:PORT``
    (``https`` / ``wss`` with TLS); ``localhost`` too for a loopback address. A wildcard bind (``0.0.0.0``, ``::``) has no
    origin of its own: name the origins the pages are served from with
    ``allowed_origins``.
    """
    schemes = ("https", "wss") if secure else ("http", "ws")
    origins: set[str] = set()
    for address, port in addresses:
        names = {address, host}
        if _is_loopback(address):
            # Browsers resolve localhost to loopback themselves, so a page at
            # http://localhost:PORT is this listener's whatever the bind said.
            names.add("localhost")
        for name in names:
            if name is None or name in _WILDCARD_HOSTS:
                continue
            for scheme in schemes:
                origin = normalize_origin(f"{scheme}://{f'[{name}]' if ':' in name else name}:{port}")
                if origin is not None:
                    origins.add(origin)
    return frozenset(origins)


def _is_loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address.split("%", 1)[0]).is_loopback
    except ValueError:
        return False


class OriginPolicy:
    """Which ``Origin`` headers a WebSocket upgrade may carry.

    Allowed: no ``Origin`` at all (not a browser), the listener's own origins,
    and every origin in ``allowed`` (``"*"`` allows any). Everything else is
    refused: a page from another site must not drive a browser into this
    server's publishers.

    Raises:
        ValueError: an entry of ``allowed`` that is not an origin.
    """

    def __init__(self, own: Iterable[str] = (), allowed: Iterable[str] = ()) -> None:
        self.any = False
        origins: set[str] = set()
        for text in (*own, *allowed):
            if text == "*":
                self.any = True
                continue
            origin = normalize_origin(text)
            if origin is None:
                raise ValueError(f"not an origin: {text!r} (expected scheme://host[:port], e.g. http://localhost:8000)")
            origins.add(origin)
        self.origins = frozenset(origins)

    def allows(self, origin: str | None) -> bool:
        if origin is None or self.any:
            return True
        normalized = normalize_origin(origin)
        return normalized is not None and normalized in self.origins


# ---- routing (pure) -------------------------------------------------------------


class RouteKind(enum.Enum):
    UPGRADE = "upgrade"
    FILE = "file"
    ENDPOINT = "endpoint"
    ERROR = "error"


#: An endpoint's answer, made when a request asks: (status, content type, body).
Endpoint = Callable[[], tuple[int, str, bytes]]


@dataclass(frozen=True, slots=True)
class Route:
    """What to do with one request: upgrade, send ``name``, or answer ``status``."""

    kind: RouteKind
    name: str = ""
    status: int = 200
    message: str = ""
    head_only: bool = False


def _header(request: h11.Request, name: bytes) -> list[bytes]:
    return [value for key, value in request.headers if key == name]


def is_upgrade(request: h11.Request) -> bool:
    """True for a request that asks to switch to WebSocket."""
    return any(b"websocket" in value.lower() for value in _header(request, b"upgrade"))


def route_request(
    request: h11.Request,
    files: Container[str],
    origins: OriginPolicy,
    endpoints: Collection[str] = (),
    *,
    upgrades: bool = True,
) -> Route:
    """Decide what a request gets.

    Args:
        files: the names in the static directory (looked up, never walked).
        endpoints: paths answered by an endpoint (``/metrics``); they take
            precedence over files.
        upgrades: False for a listener without WebSocket (404 to upgrades).
    """
    # Every answer to HEAD is headers only, errors included.
    head_only = request.method == b"HEAD"
    target = request.target
    if not target.startswith(b"/"):
        return Route(RouteKind.ERROR, status=400, message="bad request target", head_only=head_only)
    path = target.split(b"?", 1)[0].decode("ascii", "replace")
    if is_upgrade(request):
        if not upgrades:
            return Route(RouteKind.ERROR, status=404, message="no WebSocket endpoint on this listener", head_only=head_only)
        if request.method != b"GET":
            return Route(RouteKind.ERROR, status=405, message="a WebSocket upgrade must be a GET", head_only=head_only)
        if path != "/":
            return Route(RouteKind.ERROR, status=404, message="the WebSocket endpoint is /", head_only=head_only)
        origin_headers = _header(request, b"origin")
        if len(origin_headers) > 1:
            return Route(RouteKind.ERROR, status=403, message="more than one Origin header", head_only=head_only)
        origin = origin_headers[0].decode("latin-1") if origin_headers else None
        if origin is not None and not origins.allows(origin):
            return Route(
                RouteKind.ERROR,
                status=403,
                message=f"origin {peer_text(origin)} is not allowed{_allow_hint(origin)}",
                head_only=head_only,
            )
        return Route(RouteKind.UPGRADE)
    if request.method not in (b"GET", b"HEAD"):
        return Route(RouteKind.ERROR, status=405, message="only GET and HEAD (and WebSocket upgrades at /)", head_only=head_only)
    if path in endpoints:
        return Route(RouteKind.ENDPOINT, name=path, head_only=head_only)
    name = unquote(path[1:], errors="replace") or "index.html"
    # Only a name listed in the directory: never a path built from the request.
    if name in files:
        return Route(RouteKind.FILE, name=name, head_only=head_only)
    return Route(RouteKind.ERROR, status=404, message="not found", head_only=head_only)


def _allow_hint(origin: str) -> str:
    # The option that would allow the origin, for an origin quoted whole
    # (a cut one is no option to copy; it is an attacker's or a mistake).
    quoted = peer_text(origin)
    return f" (allow it with --allow-origin {quoted})" if quoted == origin else ""


def content_type(name: str) -> str:
    return CONTENT_TYPES.get(os.path.splitext(name)[1].lower(), _DEFAULT_CONTENT_TYPE)


def _static_files(directory: Path) -> list[str]:
    # Regular files directly in the directory; dot files stay private.
    try:
        with os.scandir(directory) as entries:
            return [entry.name for entry in entries if entry.is_file() and not entry.name.startswith(".")]
    except OSError:
        return []


class _Listing:
    # The names served from one directory (_static_files), kept between
    # requests. The directory's device, inode and mtime, read before it is
    # listed, say whether it changed since: adding, removing or renaming a
    # file changes the mtime, and another directory put in its place has
    # another inode. So a request costs one stat, and a directory of 20,000
    # files is walked once per change, not for every 404. A listing taken
    # within _SETTLE_NS of the last change is not trusted (see there).
    # Called from worker threads: one lists, the others wait for it.

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._lock = threading.Lock()
        self._version: tuple[int, int, int] | None = None
        self._names: frozenset[str] = frozenset()

    def names(self) -> frozenset[str]:
        try:
            status = os.stat(self.directory)
        except OSError:
            return frozenset()
        version = (status.st_dev, status.st_ino, status.st_mtime_ns)
        with self._lock:
            if version != self._version:
                began = time.time_ns()
                self._names = frozenset(_static_files(self.directory))
                self._version = version if status.st_mtime_ns <= began - _SETTLE_NS else None
            return self._names


# One listing per directory served (a listener's static and client
# directories: a handful), shared by every request and listener.
@functools.lru_cache(maxsize=64)
def _listing(directory: Path) -> _Listing:
    return _Listing(directory)


@dataclass(frozen=True, slots=True)
class _SiteFiles:
    # What route_request looks a name up in: the static directory's names,
    # then the client modules found in client_dir. Two sets rather than
    # their union, which would copy the directory's names for each request.
    static: frozenset[str] = frozenset()
    client: frozenset[str] = frozenset()

    def __contains__(self, name: object) -> bool:
        return name in self.static or name in self.client


def _read_static(directory: Path, name: str) -> bytes | None:
    # Run in a thread. Only a listed name: never a path built from the request.
    if name not in _listing(directory).names():
        return None
    try:
        return (directory / name).read_bytes()
    except OSError:
        return None


def _site_files(static_dir: Path | None, client_dir: Path | None) -> _SiteFiles:
    # Run in a thread.
    static = frozenset() if static_dir is None else _listing(static_dir).names()
    client: frozenset[str] = frozenset()
    if client_dir is not None:
        client = _listing(client_dir).names().intersection(CLIENT_MODULES) - static
    return _SiteFiles(static, client)


def _read_site_file(static_dir: Path | None, client_dir: Path | None, name: str) -> bytes | None:
    # The directory's own file first; a client module from client_dir only
    # by its listed name (never a path built from the request).
    if static_dir is not None:
        content = _read_static(static_dir, name)
        if content is not None:
            return content
    if client_dir is not None and name in CLIENT_MODULES:
        return _read_static(client_dir, name)
    return None


# ---- I/O ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Site:
    """Everything a listener's HTTP front needs to answer a request."""

    static_dir: Path | None
    origins: OriginPolicy
    # Where CLIENT_MODULES come from when static_dir lacks them (None: nowhere).
    client_dir: Path | None = None
    max_message_size: int
    head_timeout: float = REQUEST_HEAD_TIMEOUT
    endpoints: Mapping[str, Endpoint] = field(default_factory=dict)
    upgrades: bool = True


async def accept_http(stream: trio.abc.Stream, site: Site) -> WebSocketStream | None:
    """Read one request from ``stream`` and answer it.

    Returns:
        The WebSocket stream, for an accepted upgrade (the caller owns it);
        None once any other request has been answered and ``stream`` closed.

    Cancellation: ``stream`` is closed.
    """
    # The peer's address now, while the socket has one: a peer that resets
    # during the upgrade has none by the time its session is logged.
    peer = peer_address(stream)
    try:
        with trio.move_on_after(site.head_timeout):
            connection = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_REQUEST_HEAD)
            request = await _read_request(stream, connection)
            if request is None:
                await trio.aclose_forcefully(stream)
                return None
            if isinstance(request, h11.RemoteProtocolError):
                status = request.error_status_hint
                await _answer(stream, connection, Route(RouteKind.ERROR, status=status, message=str(request)))
                return None
            # The listing is only needed for files (a thread hop: skip it otherwise).
            path = request.target.split(b"?", 1)[0].decode("ascii", "replace")
            files = _SiteFiles()
            has_files = site.static_dir is not None or site.client_dir is not None
            if has_files and not is_upgrade(request) and path not in site.endpoints:
                files = await trio.to_thread.run_sync(_site_files, site.static_dir, site.client_dir)
            route = route_request(request, files, site.origins, site.endpoints, upgrades=site.upgrades)
            if route.status == 403 and is_upgrade(request):
                _log_refused_origin(peer, request)
            if route.kind is RouteKind.UPGRADE:
                return await _upgrade(stream, connection, request, site, peer)
            await _answer(stream, connection, route, site)
            return None
        await trio.aclose_forcefully(stream)
        return None
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        await trio.aclose_forcefully(stream)
        return None
    except BaseException:
        await trio.aclose_forcefully(stream)
        raise


def _log_refused_origin(peer: str, request: h11.Request) -> None:
    headers = _header(request, b"origin")
    origin = b", ".join(headers).decode("latin-1")
    # The peer's text, cut and escaped (peer_text): a 15 KB Origin had made
    # two copies of itself per line, 15 MB of log a second.
    quoted = peer_text(origin)
    fields = {"event": "origin_refused", "peer": peer, "origin": quoted, "reason": "origin not allowed"}
    # The page only sees its WebSocket fail: the operator's terminal is where the fix is named.
    hint = _allow_hint(origin) if len(headers) == 1 else ""
    logger.info("WebSocket upgrade refused: %s from origin %s%s", peer, quoted, hint, extra=fields)


async def _read_request(stream: trio.abc.Stream, connection: h11.Connection) -> h11.Request | h11.RemoteProtocolError | None:
    # Never read more than MAX_REQUEST_HEAD bytes before the head is whole
    # (h11's own limit only applies to what it holds unparsed).
    received = 0
    while True:
        try:
            event = connection.next_event()
        except h11.RemoteProtocolError as exc:
            return exc
        if isinstance(event, h11.Request):
            return event
        if event is h11.NEED_DATA:
            if received >= MAX_REQUEST_HEAD:
                return h11.RemoteProtocolError("request head too large", error_status_hint=431)
            data = await stream.receive_some(min(_READ_SIZE, MAX_REQUEST_HEAD - received))
            if not data:
                return None  # closed before a whole head: nothing to answer
            received += len(data)
            connection.receive_data(bytes(data))
        else:  # ConnectionClosed (the only other event before a request)
            return None


async def _upgrade(
    stream: trio.abc.Stream, connection: h11.Connection, request: h11.Request, site: Site, peer: str
) -> WebSocketStream | None:
    try:
        event = connection.next_event()
    except h11.RemoteProtocolError:
        event = None
    if not isinstance(event, h11.EndOfMessage):
        await _answer(stream, connection, Route(RouteKind.ERROR, status=400, message="a WebSocket upgrade has no body"))
        return None
    websocket = WSConnection(ConnectionType.SERVER)
    try:
        websocket.initiate_upgrade_connection(list(request.headers), request.target)
        [handshake] = [event for event in websocket.events() if isinstance(event, WebSocketRequest)]
    except (WebSocketProtocolError, ValueError) as exc:
        await _answer(stream, connection, Route(RouteKind.ERROR, status=400, message=f"bad WebSocket upgrade: {exc}"))
        return None
    subprotocol = SUBPROTOCOL if SUBPROTOCOL in handshake.subprotocols else None
    await stream.send_all(websocket.send(AcceptConnection(subprotocol=subprotocol)))
    trailing, _ = connection.trailing_data
    return WebSocketStream(
        stream,
        websocket,
        max_message_size=site.max_message_size,
        subprotocol=subprotocol,
        trailing=trailing,
        bearer_token=upgrade_token(request, handshake.subprotocols),
        peer_name=peer,
    )


def upgrade_token(request: h11.Request, subprotocols: Iterable[str]) -> str | None:
    """The bearer token an upgrade request carries, if any.

    ``Authorization: Bearer TOKEN`` first, else a ``rstreams.bearer.TOKEN``
    subprotocol (the browsers' way). Checked by the server's authenticate
    hook like a token in hello (which wins when both are present).
    """
    for value in _header(request, b"authorization"):
        scheme, _, token = value.decode("latin-1").strip().partition(" ")
        if scheme.lower() == "bearer" and token.strip():
            return token.strip()
    for offered in subprotocols:
        if offered.startswith(BEARER_SUBPROTOCOL_PREFIX) and len(offered) > len(BEARER_SUBPROTOCOL_PREFIX):
            return offered[len(BEARER_SUBPROTOCOL_PREFIX) :]
    return None


async def _answer(
    stream: trio.abc.Stream,
    connection: h11.Connection,
    route: Route,
    site: Site | None = None,
) -> None:
    status, body, kind = route.status, (route.message + "\n").encode(), "text/plain; charset=utf-8"
    headers = [("Cache-Control", "no-cache"), ("X-Content-Type-Options", "nosniff"), ("Connection", "close")]
    if route.kind is RouteKind.ENDPOINT:
        assert site is not None
        try:
            status, kind, body = site.endpoints[route.name]()
        except Exception:
            # Our bug, not the client's: it costs this answer, never the
            # listener (an escaping error would end every connection on it).
            logger.exception("the %s endpoint failed", route.name)
            status, body = 500, b"internal error: see the server's log\n"
    if route.kind is RouteKind.FILE:
        assert site is not None
        content = await trio.to_thread.run_sync(_read_site_file, site.static_dir, site.client_dir, route.name)
        if content is None:  # gone since the listing
            status, body = 404, b"not found\n"
        else:
            body, kind = content, content_type(route.name)
            # The client and pages are public: a page of another origin may
            # import /rstreams.js (module scripts are fetched with CORS). Its
            # WebSocket still has to pass the origin policy.
            headers.append(("Access-Control-Allow-Origin", "*"))
    if status == 405:
        headers.append(("Allow", "GET, HEAD"))
    headers += [("Content-Type", kind), ("Content-Length", str(len(body)))]
    reason = HTTPStatus(status).phrase if status in HTTPStatus._value2member_map_ else ""
    try:
        if connection.our_state is not h11.SEND_RESPONSE:
            raise h11.LocalProtocolError("no request to answer")
        data = connection.send(h11.Response(status_code=status, headers=headers, reason=reason.encode())) or b""
        if not route.head_only:
            data += connection.send(h11.Data(data=body)) or b""
        data += connection.send(h11.EndOfMessage()) or b""
    except h11.LocalProtocolError:
        # h11 cannot answer this one (the request was unreadable): a bare response.
        head = f"HTTP/1.1 {status} {reason}\r\n" + "".join(f"{name}: {value}\r\n" for name, value in headers) + "\r\n"
        data = head.encode() + (b"" if route.head_only else body)
    try:
        await stream.send_all(data)
    finally:
        await trio.aclose_forcefully(stream)
