"""The operator's HTTP endpoints: ``/healthz``, ``/stats`` and ``/metrics``.

Served on every WebSocket listener (next to the page and the WebSocket
endpoint) and on a listener of their own (``Server.serve_metrics``, for
servers without WebSocket). Each answer is made when the request arrives,
from one statistics snapshot: nothing is kept up to date in between, so the
streams pay nothing for being observable. The snapshot is fresh unless
requests come so fast that taking them would cost the server more than a
set share of a core (``_snapshots``); then they share the newest one.

* ``/healthz``: ``200 ok`` while the server accepts connections, ``503``
  once it is shutting down (a load balancer then stops sending new ones).
* ``/stats``: the snapshot as JSON (``_stats``), with its ``time`` as in ``$stats``.
* ``/metrics``: the snapshot in the Prometheus text format (``_metrics_text``).
"""

from __future__ import annotations

from collections.abc import Callable

from ._http import Endpoint
from ._metrics_text import CONTENT_TYPE as METRICS_CONTENT_TYPE
from ._snapshots import SharedStatistics

__all__ = ["HEALTH_PATH", "STATS_PATH", "METRICS_PATH", "operator_endpoints"]

HEALTH_PATH = "/healthz"
STATS_PATH = "/stats"
METRICS_PATH = "/metrics"

_TEXT = "text/plain; charset=utf-8"


def operator_endpoints(snapshots: SharedStatistics, accepting: Callable[[], bool]) -> dict[str, Endpoint]:
    """The three endpoints, answering from ``snapshots`` and ``accepting()``."""

    def health() -> tuple[int, str, bytes]:
        if accepting():
            return 200, _TEXT, b"ok\n"
        return 503, _TEXT, b"shutting down\n"

    def stats() -> tuple[int, str, bytes]:
        return 200, "application/json", snapshots.recent().record() + b"\n"

    def metrics() -> tuple[int, str, bytes]:
        return 200, METRICS_CONTENT_TYPE, snapshots.recent().metrics()

    return {HEALTH_PATH: health, STATS_PATH: stats, METRICS_PATH: metrics}
