"""The bridge registry (entry points and register_bridge) and the URL helpers bridges use."""

from __future__ import annotations

import logging
from importlib.metadata import EntryPoint, entry_points

import pytest

import rstreams
import rstreams._registry as registry
from rstreams.support import (
    ENTRY_POINT_GROUP,
    Bridge,
    BridgeURL,
    Scheme,
    UnsupportedScheme,
    find_scheme,
    known_schemes,
    parse_bridge_url,
    register_bridge,
    registered_bridges,
    url_is_secure,
    url_scheme,
)


def never_connect(url: str, *, ssl_context: object = None):  # type: ignore[no-untyped-def]
    raise AssertionError("not called")  # pragma: no cover


LINE = Bridge(
    name="line",
    summary="a test bridge",
    schemes=(Scheme(name="line", default_port=7777, form="line://HOST[:PORT]"), Scheme(name="lines", secure=True)),
    connect=never_connect,
)


@pytest.fixture
def fresh_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    """Load the entry points again and start with no hand-registered bridge (restored after)."""
    monkeypatch.setattr(registry, "_loaded", None)
    monkeypatch.setattr(registry, "_registered", {})


def test_the_emp_bridge_is_found_through_its_entry_point(fresh_registry: None) -> None:
    import bridges.emp

    # Every installed bridge is found (epoxy too, ...), sorted by name; EMP among them.
    bridges_found = registered_bridges()
    names = [bridge.name for bridge in bridges_found]
    assert "emp" in names and names == sorted(names)
    assert bridges_found[names.index("emp")] is bridges.emp.BRIDGE
    assert registry._loaded is not None and registry._loaded["emp"] is bridges.emp.BRIDGE
    schemes = known_schemes()
    assert schemes[:4] == ["tcp", "tls", "ws", "wss"]
    assert {"emp", "emps"} <= set(schemes[4:])
    bridge, scheme = find_scheme("emps://h:1", "emps")
    assert bridge.name == "emp" and scheme.secure
    assert [ep.value for ep in entry_points(group=ENTRY_POINT_GROUP) if ep.name == "emp"] == ["bridges.emp:BRIDGE"]


def test_unsupported_scheme_lists_the_known_schemes(fresh_registry: None) -> None:
    with pytest.raises(UnsupportedScheme) as info:
        find_scheme("nope://h:1", "nope")
    error = info.value
    assert isinstance(error, ValueError)
    assert error is not None and error.scheme == "nope"
    assert error.known == tuple(known_schemes())
    message = str(error)
    assert "'nope://'" in message and "'nope://h:1'" in message
    for scheme in ("tcp", "tls", "ws", "wss", "emp", "emps"):
        assert scheme in message.split("known schemes are ")[1].split(", ")
    assert rstreams.UnsupportedScheme is UnsupportedScheme
    with pytest.raises(UnsupportedScheme, match="has no scheme"):
        url_is_secure("h:1")


async def test_connect_refuses_an_unknown_scheme(fresh_registry: None) -> None:
    with pytest.raises(UnsupportedScheme, match="known schemes are tcp, tls, ws, wss"):
        async with rstreams.connect("nope://h:1"):
            pytest.fail("no bridge answers nope://")  # pragma: no cover


def test_register_bridge(fresh_registry: None) -> None:
    assert "line" not in known_schemes()
    register_bridge(LINE)
    names = [bridge.name for bridge in registered_bridges()]
    assert "emp" in names and "line" in names and names == sorted(names)  # sorted by name
    schemes = known_schemes()  # the bridges' schemes come sorted by bridge name
    assert schemes[schemes.index("line") :][:2] == ["line", "lines"]
    assert find_scheme("line://h", "line") == (LINE, LINE.schemes[0])
    assert url_is_secure("lines://h:1") and not url_is_secure("line://h:1")
    # Registering again under the same name replaces it.
    replacement = Bridge(name="line", summary="v2", schemes=(Scheme(name="line2"),), connect=never_connect)
    register_bridge(replacement)
    assert [bridge.summary for bridge in registered_bridges() if bridge.name == "line"] == ["v2"]
    assert "lines" not in known_schemes()


def test_register_bridge_is_undone_by_the_fixture() -> None:
    # Runs after test_register_bridge: the monkeypatched dict did not leak.
    assert all(bridge.name != "line" for bridge in registered_bridges())


def test_broken_entry_points_are_logged_and_skipped(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    points = [
        EntryPoint("broken", "rstreams_no_such_module_for_tests:BRIDGE", ENTRY_POINT_GROUP),
        EntryPoint("notabridge", "os:sep", ENTRY_POINT_GROUP),
        EntryPoint("emp", "bridges.emp:BRIDGE", ENTRY_POINT_GROUP),
    ]
    groups: list[str] = []

    def fake_entry_points(*, group: str) -> list[EntryPoint]:
        groups.append(group)
        return points

    monkeypatch.setattr(registry, "entry_points", fake_entry_points)
    monkeypatch.setattr(registry, "_loaded", None)
    monkeypatch.setattr(registry, "_registered", {})
    with caplog.at_level(logging.WARNING, logger="rstreams"):
        assert [bridge.name for bridge in registered_bridges()] == ["emp"]
        assert [bridge.name for bridge in registered_bridges()] == ["emp"]
    assert groups == [ENTRY_POINT_GROUP]  # loaded once
    warnings = [record for record in caplog.records if record.name == "rstreams"]
    assert len(warnings) == 2
    assert "'broken'" in warnings[0].getMessage() and "could not be loaded" in warnings[0].getMessage()
    assert warnings[0].exc_info is not None and issubclass(warnings[0].exc_info[0], ImportError)
    assert "'notabridge'" in warnings[1].getMessage() and "is a str, not an rstreams Bridge" in warnings[1].getMessage()
    assert all(record.levelno == logging.WARNING for record in warnings)
    # The rest of the registry still works.
    assert known_schemes() == ["tcp", "tls", "ws", "wss", "emp", "emps"]


@pytest.mark.parametrize(
    ("url", "secure"),
    [
        ("tcp://h:1", False),
        ("tls://h:1", True),
        ("ws://h:1/", False),
        ("wss://h:1/path", True),
        ("emp://h:1", False),
        ("emps://h:1", True),
        ("EMPS://h:1", True),
        ("TLS://h:1", True),
    ],
)
def test_url_is_secure(url: str, secure: bool) -> None:
    assert url_is_secure(url) is secure


def test_url_is_secure_checks_native_urls() -> None:
    with pytest.raises(ValueError, match="needs a host and a port"):
        url_is_secure("tcp://h")
    with pytest.raises(UnsupportedScheme):
        url_is_secure("nope://h:1")


# ---- parse_bridge_url and url_scheme --------------------------------------------------


def test_parse_bridge_url_basics() -> None:
    url = parse_bridge_url("emp://example.org:7000")
    assert url == BridgeURL("emp", "example.org", 7000, "", {}, False)
    assert str(url) == "emp://example.org:7000"
    assert parse_bridge_url("EMP://Host:1").scheme == "emp"
    assert parse_bridge_url("emps://h:1", secure=True).secure
    assert rstreams.parse_bridge_url is parse_bridge_url


def test_parse_bridge_url_ports() -> None:
    assert parse_bridge_url("relink://h", default_port=11100).port == 11100
    assert parse_bridge_url("relink://h:9", default_port=11100).port == 9
    with pytest.raises(ValueError, match="needs a host and a port"):
        parse_bridge_url("relink://h")
    with pytest.raises(ValueError, match="needs a host and a port"):
        parse_bridge_url("relink://:9")
    for bad in ("relink://h:port", "relink://h:99999"):
        with pytest.raises(ValueError, match="invalid port"):
            parse_bridge_url(bad)


def test_parse_bridge_url_ipv6() -> None:
    url = parse_bridge_url("emp://[::1]:7000")
    assert (url.host, url.port) == ("::1", 7000)
    assert str(url) == "emp://[::1]:7000"
    assert parse_bridge_url("emp://[fe80::1]", default_port=5).host == "fe80::1"


def test_parse_bridge_url_path_loses_its_leading_slash() -> None:
    assert parse_bridge_url("relink://h:1/endpoint").path == "endpoint"
    assert parse_bridge_url("relink://h:1/a/b").path == "a/b"
    assert parse_bridge_url("relink://h:1/").path == ""
    url = parse_bridge_url("relink://h:1/endpoint?x=1", allowed_query=frozenset({"x"}))
    assert str(url) == "relink://h:1/endpoint?x=1"


def test_parse_bridge_url_query() -> None:
    allowed = frozenset({"framing", "token"})
    url = parse_bridge_url("emp://h:1?framing=author&token=&framing=spec", allowed_query=allowed)
    assert url.query == {"framing": "spec", "token": ""}  # the last value wins, blanks are kept
    with pytest.raises(ValueError, match=r"unknown query parameter 'zzz' \(known: framing, token\)"):
        parse_bridge_url("emp://h:1?framing=spec&zzz=1", allowed_query=allowed)
    with pytest.raises(ValueError, match=r"unknown query parameter 'a' \(known: none\)"):
        parse_bridge_url("emp://h:1?b=1&a=2")


def test_parse_bridge_url_refuses_a_fragment() -> None:
    with pytest.raises(ValueError, match="has a fragment"):
        parse_bridge_url("emp://h:1#part")


def test_url_scheme() -> None:
    assert url_scheme("EMP://h:1") == "emp"
    assert url_scheme("tcp://h:1") == "tcp"
    assert url_scheme("h:1") == ""
    assert url_scheme("") == ""
    assert url_scheme("mailto:x@y") == ""
