"""The bridge registry: how the runtime finds bridges without naming any.

A bridge (EMP, Relink, Epoxy, or one written outside this project) describes
itself with one :class:`Bridge` value and registers it under the entry-point
group ``rstreams.bridges``::

    [project.entry-points."rstreams.bridges"]
    emp = "bridges.emp:BRIDGE"

From that value alone the runtime and the command line learn the URL
schemes the bridge answers (``rstreams.connect("emp://...")``, ``rstreams
sub``), the options it adds to ``rstreams serve`` (``--emp HOST:PORT``), and
its own commands (``rstreams emp ...``). Code that cannot install entry
points (a test, an application with a private bridge) calls
:func:`register_bridge` instead.

A bridge module that cannot be imported is logged and skipped: one broken
plugin must not take ``rstreams sub tcp://...`` down with it.
"""

from __future__ import annotations

import argparse
import logging
import ssl
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import Any, NoReturn, Protocol

import trio

from ._loopback import DEFAULT_LOOPBACK_CONGESTION_CONTROL
from ._peer import Peer
from ._publish import Router
from ._url import SCHEMES as NATIVE_SCHEMES
from ._url import parse_url, url_scheme
from .protocol import DEFAULT_CONNECTION_MEMORY

__all__ = [
    "ENTRY_POINT_GROUP",
    "Scheme",
    "Bridge",
    "BridgeService",
    "PublishFunction",
    "ReadyElements",
    "ConfirmedElements",
    "ServeContext",
    "UnsupportedScheme",
    "registered_bridges",
    "register_bridge",
    "find_scheme",
    "known_schemes",
    "take_ready",
    "report_confirmed",
    "url_is_secure",
]

logger = logging.getLogger("rstreams")

#: The entry-point group bridges register under.
ENTRY_POINT_GROUP = "rstreams.bridges"


@dataclass(frozen=True, slots=True, kw_only=True)
class Scheme:
    """One URL scheme of a bridge.

    Attributes:
        name: the scheme, lower case (``emp``).
        secure: True for the protocol's TLS form (``emps``).
        default_port: the port a URL without one gets (None: a port is required).
        form: how the URL looks, for help texts (``emp://HOST:PORT``).
    """

    name: str
    secure: bool = False
    default_port: int | None = None
    form: str = ""


class BridgeService(Protocol):
    """What ``rstreams serve`` runs for a bridge's option (``--emp HOST:PORT``).

    ``serve`` opens the listeners, reports their URLs with
    ``task_status.started(urls)``, and accepts until cancelled, running each
    connection in ``handler_nursery`` (so that cancelling the accept loop
    leaves the connections to ``aclose``). ``aclose`` ends every connection
    gracefully (the protocol's goodbye), bounded in time.
    """

    async def serve(
        self, *, handler_nursery: trio.Nursery, task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED
    ) -> NoReturn: ...

    async def aclose(self) -> None: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class ServeContext:
    """What ``rstreams serve`` hands a bridge to build its services from.

    Attributes:
        app: the router being served.
        ssl_context: the server's TLS context (``--tls-cert``), or None.
        max_connections: the server's connection limit, or None.
        label: how the app is named in messages (``examples.demo:app``).
        max_connection_memory: each connection's memory budget
            (``--max-connection-memory``), which a bridge's connections obey
            as the wire-v0 sessions do.
        loopback_congestion_control: the TCP congestion control given to
            connections whose peer is on loopback
            (``--loopback-congestion-control``; None keeps the host's), which
            a bridge's connections take as the wire-v0 sessions do.
        idle_timeout: seconds after which a connection whose peer went
            quiet is closed (``--idle-timeout``; None: never), which a
            bridge's connections obey as the wire-v0 sessions do (see
            ``bridges.kit.LinkSettings.idle_timeout``).
    """

    app: Router
    ssl_context: ssl.SSLContext | None = None
    max_connections: int | None = None
    label: str = ""
    max_connection_memory: int = DEFAULT_CONNECTION_MEMORY
    loopback_congestion_control: str | None = DEFAULT_LOOPBACK_CONGESTION_CONTROL
    idle_timeout: float | None = None


ConnectFunction = Callable[..., AbstractAsyncContextManager[Peer]]


class ReadyElements(Protocol):
    """Elements to publish that can also hand over, without waiting, those they hold now.

    What ``rstreams pub`` hands a bridge's publish (the lines already read
    from its input): a bridge that awaited one element may then take the
    ones ready after it (:func:`take_ready`) and send them in one write, so
    that its peer reads them in one read and acknowledges them once.
    """

    def __aiter__(self) -> AsyncIterator[bytes]: ...

    def take_ready(self, max_count: int) -> list[bytes]:
        """At most ``max_count`` more elements, those ready now; never waits.

        Each counts as handed out, as one from the iterator does.
        """
        ...


def take_ready(elements: AsyncIterable[bytes], max_count: int) -> list[bytes]:
    """The elements ``elements`` has ready now, at most ``max_count``: none
    unless it is :class:`ReadyElements` (any other async iterable only says
    what it has by being awaited)."""
    if max_count <= 0:
        return []
    take = getattr(elements, "take_ready", None)
    return take(max_count) if take is not None else []


class ConfirmedElements(Protocol):
    """Elements to publish that want to know how many of them are in the topic.

    What ``rstreams pub`` hands a bridge's publish, so that a run cut short
    can say how many lines are in for sure. A bridge whose protocol confirms
    (MicroMsg2's acks) calls :func:`report_confirmed`; one whose protocol
    cannot (Epoxy's events) never does.
    """

    def confirm(self, count: int) -> None:
        """The first ``count`` elements handed out are in the topic (counts only grow)."""
        ...


def report_confirmed(elements: AsyncIterable[bytes], count: int) -> None:
    """Tell ``elements`` that the first ``count`` it handed out are in the
    topic, if it is :class:`ConfirmedElements` (else nobody asked)."""
    confirm = getattr(elements, "confirm", None)
    if confirm is not None:
        confirm(count)


class PublishFunction(Protocol):
    """A bridge's ``publish(url, topic, elements, *, ssl_context=None)``.

    Publishes every element of ``elements`` into the topic ``topic`` of the
    server at ``url``, paced by the protocol (each element is pulled from
    ``elements`` only when the protocol can take it), and returns how many
    were published. Raises ``ValueError`` for a malformed URL, ``OSError``
    when the connection cannot be made, and the bridge's own errors when it
    ends otherwise. Cancellation closes the connection; elements already
    sent may have been published.
    """

    def __call__(
        self, url: str, topic: str, elements: AsyncIterable[bytes], *, ssl_context: ssl.SSLContext | None = None
    ) -> Awaitable[int]: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class Bridge:
    """A bridge, as the runtime and the command line see it.

    Attributes:
        name: the bridge's name (``emp``); also its ``rstreams NAME`` command.
        summary: one line for help texts.
        schemes: the URL schemes it answers.
        connect: ``connect(url, *, ssl_context=None)``, an async context
            manager yielding a :class:`~rstreams.Peer` for a URL of one of
            ``schemes``; raises ``ValueError`` for a malformed URL and
            ``OSError`` when the connection cannot be made.
        add_serve_arguments: adds its options to ``rstreams serve``.
        services: the services those options ask for (an empty list when
            they were not given).
        add_commands: adds ``rstreams NAME ...`` to the command's subparsers.
        error_status: for ``rstreams sub``: the exit status and message for
            an error of this bridge (None: not one of its errors).
        publish: for ``rstreams pub``: publishes elements into a topic of a
            server (a :class:`PublishFunction`); None: the protocol cannot.
    """

    name: str
    summary: str
    schemes: tuple[Scheme, ...]
    connect: ConnectFunction
    add_serve_arguments: Callable[[argparse.ArgumentParser], None] | None = None
    services: Callable[[ServeContext, argparse.Namespace], Sequence[BridgeService]] | None = None
    add_commands: Callable[[Any], None] | None = None
    error_status: Callable[[BaseException], tuple[int, str] | None] | None = None
    publish: PublishFunction | None = None
    extra: dict[str, Any] = field(default_factory=dict)


class UnsupportedScheme(ValueError):
    """A URL whose scheme neither rstreams nor any installed bridge handles.

    Attributes:
        scheme: the scheme asked for.
        known: every scheme that is handled.
    """

    def __init__(self, url: str, scheme: str, known: Sequence[str]) -> None:
        schemes = ", ".join(known)
        if scheme:
            message = f"unsupported URL scheme {scheme + '://'!r} in {url!r}: known schemes are {schemes}"
        else:
            message = f"URL {url!r} has no scheme (tcp://{url} for rstreams over TCP): known schemes are {schemes}"
        super().__init__(message)
        self.scheme = scheme
        self.known = tuple(known)


_registered: dict[str, Bridge] = {}
_loaded: dict[str, Bridge] | None = None


def register_bridge(bridge: Bridge) -> None:
    """Make ``bridge`` known without an entry point (replaces one of the same name)."""
    _registered[bridge.name] = bridge


def registered_bridges() -> list[Bridge]:
    """Every bridge: the entry points' (loaded once), then those registered by hand."""
    global _loaded
    if _loaded is None:
        loaded: dict[str, Bridge] = {}
        for entry_point in entry_points(group=ENTRY_POINT_GROUP):
            try:
                bridge = entry_point.load()
            except Exception:
                logger.warning("bridge %r (%s) could not be loaded", entry_point.name, entry_point.value, exc_info=True)
                continue
            if not isinstance(bridge, Bridge):
                logger.warning("bridge %r (%s) is a %s, not an rstreams Bridge", entry_point.name, entry_point.value, type(bridge).__name__)
                continue
            loaded[bridge.name] = bridge
        _loaded = loaded
    bridges = dict(_loaded)
    bridges.update(_registered)
    return sorted(bridges.values(), key=lambda bridge: bridge.name)


def known_schemes() -> list[str]:
    """Every URL scheme that is handled: rstreams' own, then the bridges'."""
    return [*NATIVE_SCHEMES, *(scheme.name for bridge in registered_bridges() for scheme in bridge.schemes)]


def find_scheme(url: str, scheme: str) -> tuple[Bridge, Scheme]:
    """The bridge answering ``scheme``.

    Raises:
        UnsupportedScheme: no bridge does.
    """
    for bridge in registered_bridges():
        for candidate in bridge.schemes:
            if candidate.name == scheme:
                return bridge, candidate
    raise UnsupportedScheme(url, scheme, known_schemes())


def url_is_secure(url: str) -> bool:
    """Whether ``url`` names a TLS transport (``tls://``, ``wss://``, ``emps://``, ...).

    Raises:
        UnsupportedScheme: no bridge handles its scheme.
        ValueError: a malformed reactive-streams-io URL.
    """
    scheme = url_scheme(url)
    if scheme in NATIVE_SCHEMES:
        return parse_url(url).secure
    return find_scheme(url, scheme)[1].secure
