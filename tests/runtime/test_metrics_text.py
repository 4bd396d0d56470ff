"""The Prometheus text format writer (``rstreams._metrics_text``), byte for byte
where the format is strict: HELP and TYPE before each family's samples,
label values escaped, one sample per line, a final newline."""

from __future__ import annotations

import re

from rstreams._metrics_text import escape_label_value, prometheus_text

_SAMPLE = re.compile(r'^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>(?:[a-zA-Z_]\w*="(?:[^"\\\n]|\\.)*",?)*)\})? (?P<value>\S+)$')


def parse_samples(text: str) -> dict[tuple[str, str], float]:
    """``{(name, labels): value}``, checking every line against the format as it goes."""
    assert text.endswith("\n")
    samples: dict[tuple[str, str], float] = {}
    declared: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith("# HELP "):
            continue
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            assert kind in ("counter", "gauge") and name not in declared
            declared[name] = kind
            continue
        match = _SAMPLE.match(line)
        assert match, f"not a sample line: {line!r}"
        assert match["name"] in declared, f"{match['name']} has no TYPE line before it"
        samples[(match["name"], match["labels"] or "")] = float(match["value"])
    return samples


def snapshot(**changes: object) -> dict[str, object]:
    base: dict[str, object] = {
        "server": {"uptime_seconds": 1.5, "accepting": True, "sessions_opened": 3, "connections_refused": 2},
        "totals": {},
        "transports": {
            "tcp": {
                "sessions": 1,
                "sessions_opened": 3,
                "streams": 4,
                "demand_outstanding": 100,
                "unbounded_streams": 1,
                "bytes_received": 10,
                "bytes_sent": 20,
                "elements_sent": 30,
                "memory_bytes": 40,
                "publications_stopping": 2,
            }
        },
        "sessions": [],
        "topics": [
            {"name": 'we"ird\\topic\n', "held": 1, "published": 2, "subscribers": 3, "lag_max": 4, "lag_total": 5, "dropped": 6}
        ],
        "bridges": {"emp": {"connections": 2, "bytes_sent": 7}},
    }
    base.update(changes)
    return base


def test_every_family_is_declared_and_every_figure_is_there() -> None:
    samples = parse_samples(prometheus_text(snapshot()))
    assert samples[("rstreams_uptime_seconds", "")] == 1.5
    assert samples[("rstreams_accepting", "")] == 1
    assert samples[("rstreams_connections_refused_total", "")] == 2
    assert samples[("rstreams_sessions", 'transport="tcp"')] == 1
    assert samples[("rstreams_sessions_opened_total", 'transport="tcp"')] == 3
    assert samples[("rstreams_streams", 'transport="tcp"')] == 4
    assert samples[("rstreams_demand_outstanding", 'transport="tcp"')] == 100
    assert samples[("rstreams_unbounded_streams", 'transport="tcp"')] == 1
    assert samples[("rstreams_bytes_received_total", 'transport="tcp"')] == 10
    assert samples[("rstreams_bytes_sent_total", 'transport="tcp"')] == 20
    assert samples[("rstreams_elements_sent_total", 'transport="tcp"')] == 30
    assert samples[("rstreams_memory_bytes", 'transport="tcp"')] == 40
    assert samples[("rstreams_publications_stopping", 'transport="tcp"')] == 2
    topic = 'topic="we\\"ird\\\\topic\\n"'
    assert [samples[(name, topic)] for name in (
        "rstreams_topic_held",
        "rstreams_topic_published_total",
        "rstreams_topic_subscribers",
        "rstreams_topic_lag_max",
        "rstreams_topic_lag",
        "rstreams_topic_dropped",
    )] == [1, 2, 3, 4, 5, 6]
    assert samples[("rstreams_bridge_connections", 'bridge="emp"')] == 2
    assert samples[("rstreams_bridge_bytes_sent", 'bridge="emp"')] == 7


def test_counters_end_in_total_and_gauges_do_not() -> None:
    text = prometheus_text(snapshot())
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            assert name.endswith("_total") == (kind == "counter"), line


def test_a_server_shutting_down_is_not_accepting() -> None:
    server = {"uptime_seconds": 1, "accepting": False, "sessions_opened": 0, "connections_refused": 0}
    assert "\nrstreams_accepting 0\n" in prometheus_text(snapshot(server=server))


def test_label_values_are_escaped() -> None:
    assert escape_label_value('a"b\\c\nd') == 'a\\"b\\\\c\\nd'
    assert escape_label_value("127.0.0.1:9000") == "127.0.0.1:9000"
