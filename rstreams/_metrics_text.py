"""The Prometheus text exposition format (0.0.4) of a server's statistics.

Written here in a few lines rather than with ``prometheus-client``: the
figures already exist as one snapshot (``_stats.server_statistics``), taken
when a scrape asks; the client library's registry of live metric objects
would mean either updating its counters on the hot path (the cost this
design avoids) or a custom collector translating the same snapshot, which is
this module plus a dependency. The format itself is small: ``# HELP`` and
``# TYPE`` lines, then ``name{label="value"} number`` samples, with ``\\``,
``"`` and newlines escaped in label values.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["CONTENT_TYPE", "prometheus_text", "escape_label_value"]

#: The Content-Type of ``/metrics``.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

# (metric, type, help, key in the per-transport counts)
_TRANSPORT_METRICS = (
    ("rstreams_sessions", "gauge", "Sessions open now.", "sessions"),
    ("rstreams_sessions_opened_total", "counter", "Sessions opened since the server started.", "sessions_opened"),
    ("rstreams_streams", "gauge", "Streams open now (publications and subscriptions).", "streams"),
    ("rstreams_demand_outstanding", "gauge", "Elements subscribers have requested and not yet been sent (bounded streams).", "demand_outstanding"),
    ("rstreams_unbounded_streams", "gauge", "Streams whose subscriber requested 2**63-1 (unbounded).", "unbounded_streams"),
    ("rstreams_bytes_received_total", "counter", "Transport bytes received.", "bytes_received"),
    ("rstreams_bytes_sent_total", "counter", "Transport bytes sent.", "bytes_sent"),
    ("rstreams_elements_sent_total", "counter", "Elements publishers have sent to subscribers.", "elements_sent"),
    (
        "rstreams_memory_bytes",
        "gauge",
        "Bytes the open sessions hold for their peers, in and out (each session's bounded by max_connection_memory).",
        "memory_bytes",
    ),
    (
        "rstreams_publications_stopping",
        "gauge",
        "Publications cancelled or ended whose publisher task has not finished yet.",
        "publications_stopping",
    ),
)

# (metric, type, help, key in a topic's entry)
_TOPIC_METRICS = (
    ("rstreams_topic_held", "gauge", "Elements the topic holds in memory.", "held"),
    ("rstreams_topic_published_total", "counter", "Elements published to the topic.", "published"),
    ("rstreams_topic_subscribers", "gauge", "Subscribers of the topic.", "subscribers"),
    ("rstreams_topic_lag_max", "gauge", "Elements the furthest-behind subscriber has not taken yet.", "lag_max"),
    ("rstreams_topic_lag", "gauge", "Elements not taken yet, summed over the subscribers.", "lag_total"),
    ("rstreams_topic_dropped", "gauge", "Elements skipped by the current subscribers' policies.", "dropped"),
)


def escape_label_value(value: str) -> str:
    """A label value as the text format writes it between double quotes."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _number(value: float | int | bool) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    return repr(float(value))


def _family(lines: list[str], name: str, kind: str, help_text: str, samples: Iterable[tuple[str, str, Any]]) -> None:
    lines.append(f"# HELP {name} {help_text}")
    lines.append(f"# TYPE {name} {kind}")
    for label, value, number in samples:
        labels = f'{{{label}="{escape_label_value(value)}"}}' if label else ""
        lines.append(f"{name}{labels} {_number(number)}")


def prometheus_text(snapshot: Mapping[str, Any]) -> str:
    """The ``/metrics`` body for a ``server_statistics`` snapshot."""
    lines: list[str] = []
    server = snapshot["server"]
    _family(lines, "rstreams_uptime_seconds", "gauge", "Seconds since the server started.", [("", "", server["uptime_seconds"])])
    _family(lines, "rstreams_accepting", "gauge", "1 while the server accepts connections.", [("", "", server["accepting"])])
    _family(
        lines,
        "rstreams_connections_refused_total",
        "counter",
        "Connections refused (server busy or shutting down).",
        [("", "", server["connections_refused"])],
    )
    transports: Mapping[str, Mapping[str, int]] = snapshot["transports"]
    for name, kind, help_text, key in _TRANSPORT_METRICS:
        _family(lines, name, kind, help_text, [("transport", transport, counts[key]) for transport, counts in transports.items()])
    topics = snapshot["topics"]
    for name, kind, help_text, key in _TOPIC_METRICS:
        _family(lines, name, kind, help_text, [("topic", topic["name"], topic[key]) for topic in topics])
    bridges: Mapping[str, Mapping[str, int]] = snapshot["bridges"]
    keys = sorted({key for counts in bridges.values() for key in counts})
    for key in keys:
        # Gauges: a bridge reports its open connections' figures, which fall
        # when a connection closes.
        samples = [("bridge", bridge, counts[key]) for bridge, counts in bridges.items() if key in counts]
        help_text = f"The bridge's {key.replace('_', ' ')} (open connections)."
        _family(lines, f"rstreams_bridge_{key}", "gauge", help_text, samples)
    return "\n".join(lines) + "\n"
