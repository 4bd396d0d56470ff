"""``$stats``: a server's statistics as a stream, one record a second.

Every :class:`rstreams.Server` serves the publisher ``$stats`` next to its
app's: each element is one JSON object (UTF-8, encoded once per snapshot
and shared by every stream), the snapshot of
:meth:`rstreams.Server.statistics` with the wall-clock ``time`` (seconds
since the epoch) added. The first record goes
out at once, then one every ``interval`` seconds (default 1) for as long as
the subscriber asks, or ``count`` records (default: no end)::

    rstreams sub tcp://127.0.0.1:9000 '$stats' --format jsonl --decode json
    rstreams sub tcp://127.0.0.1:9000 '$stats?interval=5&count=3' --format json
    rstreams stats tcp://127.0.0.1:9000          # the same, as a table

Names starting with ``$`` belong to the server: ``Router.add`` refuses them,
so no app can shadow ``$stats``. The server's sessions see the app through
:class:`ServerRoutes`, which answers the ``$`` names itself and hands every
other name to the app (the server's current one: assigning ``server.app``
switches it).

Demand paces it like any stream: a subscriber that stops asking stops
getting records, and nothing is built for it meanwhile. However many
streams ask, the snapshots cost the server at most a set share of a core
(``_snapshots``): beyond it, streams share the newest one.
"""

from __future__ import annotations

from collections.abc import Mapping

import trio

from ._codecs import CodecLike
from ._publish import RESERVED_PREFIX, Route, RouteLike, Router, Sink, SubscribeRequest
from ._snapshots import SharedStatistics

__all__ = ["STATS_PUBLISHER", "DEFAULT_STATS_INTERVAL", "MIN_STATS_INTERVAL", "stats_route", "ServerRoutes"]

#: The name of the statistics publisher.
STATS_PUBLISHER = RESERVED_PREFIX + "stats"
#: Seconds between two records.
DEFAULT_STATS_INTERVAL = 1.0
#: The shortest interval a subscriber may ask for (a snapshot walks every
#: session and stream; and the snapshots peers get are shared within a CPU
#: budget, see ``_snapshots``).
MIN_STATS_INTERVAL = 0.01


def stats_route(snapshots: SharedStatistics) -> Route:
    """The ``$stats`` route: a snapshot from ``snapshots`` (JSON) every interval.

    Snapshots are shared within a CPU budget (``_snapshots``): however many
    ``$stats`` streams peers hold, the server spends at most a set share of
    a core on taking and encoding them, and beyond that a stream gets the
    newest snapshot it has not sent yet, once there is one.
    """

    async def publish_statistics(sink: Sink, request: SubscribeRequest) -> None:
        interval = request.float_param("interval", DEFAULT_STATS_INTERVAL, minimum=MIN_STATS_INTERVAL)
        count = request.int_param("count", 0, minimum=0)  # 0: no end
        sent = 0
        snapshot = None
        while True:
            await sink.wait_demand()  # the snapshot is taken when it can go out
            snapshot = await snapshots.newer_than(snapshot)
            await sink.send(snapshot.record())  # (encoded once, shared by every stream)
            sent += 1
            if sent == count:
                return
            await trio.sleep(interval)

    return Route(publish_statistics)


class ServerRoutes(Router):
    """What a server's sessions resolve names with: the app, then its ``$`` routes.

    Args:
        app: the app to serve (:meth:`serve` switches to another).
        own: the server's routes, each name starting with ``$``.
    """

    def __init__(self, app: Router, own: Mapping[str, Route]) -> None:
        super().__init__()
        self._own = dict(own)
        self.serve(app)

    @property
    def app(self) -> Router:
        """The app other names go to."""
        return self._app

    def serve(self, app: Router) -> None:
        """Resolve names with ``app`` from now on."""
        self._app = app
        # The app's own table, read directly: a subscribe then costs one
        # dict lookup here, as with the app itself (Router.resolve).
        self._app_routes = app._routes

    def add(self, path: str, publisher: RouteLike, *, element_size: int = 0, codec: CodecLike = None) -> None:
        """Add to the app (``$`` names are refused there)."""
        self._app.add(path, publisher, element_size=element_size, codec=codec)

    def remove(self, path: str) -> None:
        """Remove from the app."""
        self._app.remove(path)

    def resolve(self, path: str) -> Route | None:
        """The app's route, else the server's own for a ``$`` name, else the
        app's reserved ones (``$publishers``, ``$ping``)."""
        route = self._app_routes.get(path)
        if route is None and path[:1] == RESERVED_PREFIX:
            return self._own.get(path) or self._app.resolve(path)
        return route

    def closest_paths(self, path: str, count: int = 3) -> list[str]:
        """The app's paths that look like ``path``."""
        return self._app.closest_paths(path, count)

    def suggest(self, path: str) -> list[str]:
        """The app's suggestions for "no such publisher", within the app's budget."""
        return self._app.suggest(path)

    @property
    def paths(self) -> list[str]:
        """The app's paths and the server's, sorted."""
        return sorted([*self._app.paths, *self._own])
