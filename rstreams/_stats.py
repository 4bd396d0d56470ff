"""A server's statistics: one snapshot, for ``/stats``, ``/metrics`` and ``$stats``.

Nothing here runs per element. A snapshot reads what the runtime counts
anyway: each session's transport bytes, each sink's count of elements sent,
each stream's outstanding demand in the protocol machine, each topic's log
and cursors. What would be lost when a session ends is folded into
:class:`ServerTotals` at that moment (once per session), so the totals are
counters that only grow, as Prometheus expects.

The snapshot is plain data (dicts, lists, str, int, float, bool), so that it
is one ``json.dumps`` away from ``/stats`` and from a ``$stats`` record. Its
shape (every key is documented in docs/operating.md)::

    {"server":     {"uptime_seconds", "accepting", "sessions_opened", "connections_refused"},
     "totals":     {COUNTS},
     "transports": {"tcp": {COUNTS, "sessions_opened"}, "ws": ..., ...},
     "sessions":   [{"peer", "transport", "age_seconds", COUNTS,
                     "inbound_bytes", "outbound_bytes",
                     "open_streams": [{"stream", "direction", "name", "elements",
                                       "demand_outstanding"}]}],
     "topics":     [{"name", "capacity", "held", "published", "publishers",
                     "subscribers", "lag_max", "lag_total", "dropped"}],
     "bridges":    {"emp": {"connections", "bytes_received", "bytes_sent"}, ...}}

where COUNTS is ``sessions``, ``streams``, ``demand_outstanding``,
``unbounded_streams``, ``bytes_received``, ``bytes_sent``, ``elements_sent``,
``memory_bytes``, ``publications_stopping``.

``memory_bytes`` is what a session holds for its peer now, both halves of
``SessionConfig.max_connection_memory`` (``inbound_bytes`` plus
``outbound_bytes``, as ``Session.statistics()`` reckons them): the figure
an operator compares with that limit to find the peer that fills it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .protocol import UNBOUNDED

if TYPE_CHECKING:
    from ._publish import Router
    from ._session import Session

__all__ = ["ServerTotals", "StatisticsSource", "server_statistics", "session_statistics", "topic_statistics", "COUNT_KEYS"]

#: The counts kept per session, per transport and in total.
COUNT_KEYS = (
    "sessions",
    "streams",
    "demand_outstanding",
    "unbounded_streams",
    "bytes_received",
    "bytes_sent",
    "elements_sent",
    "memory_bytes",
    "publications_stopping",
)
# Of those, the ones that only grow: a closed session's are kept in the totals.
_CUMULATIVE_KEYS = ("bytes_received", "bytes_sent", "elements_sent")

#: Something with a ``statistics()`` answering a mapping of counts (a bridge's service).
StatisticsSource = Any


class ServerTotals:
    """What a server has counted over its life, beyond its open sessions.

    Updated once per session (opened, ended) and once per refusal, by
    :class:`rstreams.Server`.
    """

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.opened: dict[str, int] = {}
        self.refused = 0
        # Bytes and elements of the sessions that have ended, per transport.
        self.ended: dict[str, dict[str, int]] = {}

    def session_opened(self, transport: str) -> None:
        self.opened[transport] = self.opened.get(transport, 0) + 1

    def session_ended(self, session: Session, transport: str) -> None:
        now = time.monotonic()
        counts = session_statistics(session, transport, now, now)
        ended = self.ended.setdefault(transport, dict.fromkeys(_CUMULATIVE_KEYS, 0))
        for key in _CUMULATIVE_KEYS:
            ended[key] += counts[key]

    def connection_refused(self) -> None:
        self.refused += 1


def session_statistics(session: Session, transport: str, opened_at: float, now: float) -> dict[str, Any]:
    """One session's counts and streams (read from its bookkeeping, no copy of the streams' data)."""
    # Reads the session's private bookkeeping on purpose: this module is the
    # session's one reader for statistics, and a snapshot must not cost the
    # streams anything (no per-element counter of its own).
    conn = session._conn
    streams: list[dict[str, Any]] = []
    demand = unbounded = 0
    elements = session._elements_published
    for subscriber, handle in list(session._publications.items()):
        sink = handle.sink
        sent = sink._sent if sink is not None else 0
        elements += sent
        outstanding = conn.publication_demand(subscriber) if conn.is_publishing(subscriber) else 0
        if outstanding >= UNBOUNDED:
            unbounded += 1
            outstanding = 0
        demand += outstanding
        streams.append(
            {"stream": subscriber, "direction": "publish", "name": handle.name, "elements": sent, "demand_outstanding": outstanding}
        )
    for subscriber, receiver in list(session._subscriptions.items()):
        # Our own subscriptions to the peer (a publisher subscribing back):
        # listed, but their demand is the peer's to serve, not in the totals.
        streams.append(
            {
                "stream": subscriber,
                "direction": "subscribe",
                "name": receiver.name,
                "elements": getattr(receiver, "_received", 0),
                "demand_outstanding": session._outstanding_demand(subscriber),
            }
        )
    figures = session.statistics()  # (its memory, as the budget counts it)
    return {
        "peer": session.peer_address,
        "transport": transport,
        "age_seconds": round(max(0.0, now - opened_at), 3),
        "sessions": 1,
        "streams": len(streams),
        "demand_outstanding": demand,
        "unbounded_streams": unbounded,
        "bytes_received": session._bytes_in,
        "bytes_sent": session._bytes_out,
        "elements_sent": elements,
        "memory_bytes": figures.inbound_bytes + figures.outbound_bytes,
        "publications_stopping": figures.publications_stopping,
        "inbound_bytes": figures.inbound_bytes,
        "outbound_bytes": figures.outbound_bytes,
        "open_streams": streams,
    }


def topic_statistics(app: Router) -> list[dict[str, Any]]:
    """The topics mounted on ``app`` (``Topic.mount``): their log, lag and drops."""
    from ._topic import Topic  # here: _topic imports the session layer

    topics: list[dict[str, Any]] = []
    seen: set[int] = set()
    for path in app.paths:
        route = app.resolve(path)
        topic = getattr(route.publisher, "__self__", None) if route is not None else None
        if not isinstance(topic, Topic) or id(topic) in seen:
            continue
        seen.add(id(topic))
        statistics = topic.statistics()
        lags = [subscriber.lag for subscriber in statistics.subscribers]
        topics.append(
            {
                "name": statistics.name,
                "capacity": statistics.capacity,
                "held": statistics.held,
                "published": statistics.published,
                "publishers": statistics.publishers,
                "subscribers": len(statistics.subscribers),
                "lag_max": max(lags, default=0),
                "lag_total": sum(lags),
                "dropped": sum(subscriber.dropped for subscriber in statistics.subscribers),
            }
        )
    return topics


def server_statistics(
    sessions: Iterable[tuple[Session, str, float]],
    totals: ServerTotals,
    app: Router,
    *,
    accepting: bool,
    bridges: Mapping[str, Sequence[StatisticsSource]] = {},
    now: Callable[[], float] = time.monotonic,
) -> dict[str, Any]:
    """The whole snapshot (see the module docstring for its shape).

    Args:
        sessions: each open session, with its transport name and when it
            opened (``time.monotonic()``).
    """
    moment = now()
    per_session = [session_statistics(session, transport, opened_at, moment) for session, transport, opened_at in sessions]
    transports: dict[str, dict[str, int]] = {}
    for transport in {*totals.opened, *totals.ended, *(entry["transport"] for entry in per_session)}:
        counts = dict.fromkeys(COUNT_KEYS, 0)
        counts.update(totals.ended.get(transport, {}))
        counts["sessions_opened"] = totals.opened.get(transport, 0)
        transports[transport] = counts
    for entry in per_session:
        counts = transports[entry["transport"]]
        for key in COUNT_KEYS:
            counts[key] += entry[key]
    overall = {key: sum(counts[key] for counts in transports.values()) for key in COUNT_KEYS}
    return {
        "server": {
            "uptime_seconds": round(moment - totals.started, 3),
            "accepting": accepting,
            "sessions_opened": sum(totals.opened.values()),
            "connections_refused": totals.refused,
        },
        "totals": overall,
        "transports": dict(sorted(transports.items())),
        "sessions": per_session,
        "topics": topic_statistics(app),
        "bridges": {name: _bridge_statistics(services) for name, services in sorted(bridges.items())},
    }


def _bridge_statistics(services: Sequence[StatisticsSource]) -> dict[str, int]:
    # A bridge's services report what they can (statistics() -> counts);
    # the bridge's figure is their sum.
    counts: dict[str, int] = {}
    for service in services:
        statistics = getattr(service, "statistics", None)
        if statistics is None:
            continue
        for key, value in statistics().items():
            counts[key] = counts.get(key, 0) + int(value)
    return counts
