"""URLs: ``tcp://host:port``, ``tls://host:port``, ``ws://host:port/path`` and ``wss://...``."""

from __future__ import annotations

import pytest

import rstreams


@pytest.mark.parametrize(
    ("url", "scheme", "host", "port"),
    [
        ("tcp://127.0.0.1:9000", "tcp", "127.0.0.1", 9000),
        ("tls://example.org:443", "tls", "example.org", 443),
        ("TCP://localhost:1/", "tcp", "localhost", 1),
        ("tcp://[::1]:7000", "tcp", "::1", 7000),
        ("ws://127.0.0.1:8000", "ws", "127.0.0.1", 8000),
        ("WSS://example.org:443/", "wss", "example.org", 443),
    ],
)
def test_parse_url(url: str, scheme: str, host: str, port: int) -> None:
    endpoint = rstreams.parse_url(url)
    assert endpoint == rstreams.Endpoint(scheme, host, port)
    assert endpoint.path == "/"
    assert endpoint.secure is (scheme in ("tls", "wss"))
    assert endpoint.websocket is (scheme in ("ws", "wss"))


def test_websocket_urls_may_name_a_path() -> None:
    endpoint = rstreams.parse_url("wss://[::1]:8443/streams/v0")
    assert endpoint == rstreams.Endpoint("wss", "::1", 8443, "/streams/v0")
    assert str(endpoint) == "wss://[::1]:8443/streams/v0"


def test_endpoint_str_round_trips() -> None:
    for url in ("tcp://127.0.0.1:9000", "tls://[::1]:443", "ws://127.0.0.1:8000/", "wss://h:1/a/b"):
        assert str(rstreams.parse_url(url)) == url
        assert rstreams.parse_url(str(rstreams.parse_url(url))) == rstreams.parse_url(url)


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:80",
        "http://127.0.0.1:80/",
        "ws://127.0.0.1",
        "ws://127.0.0.1:80/?count=3",
        "wss://127.0.0.1:80/#x",
        "127.0.0.1:9000",
        "tcp://127.0.0.1",
        "tcp://:9000",
        "tcp://127.0.0.1:port",
        "tcp://127.0.0.1:99999",
        "tcp://127.0.0.1:9000/range",
        "tcp://127.0.0.1:9000?count=3",
    ],
)
def test_bad_urls(url: str) -> None:
    with pytest.raises(ValueError):
        rstreams.parse_url(url)
