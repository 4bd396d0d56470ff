"""URLs: ``tcp://host:port`` and ``tls://host:port``."""

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
    ],
)
def test_parse_url(url: str, scheme: str, host: str, port: int) -> None:
    endpoint = rstreams.parse_url(url)
    assert endpoint == rstreams.Endpoint(scheme, host, port)
    assert endpoint.secure is (scheme == "tls")


def test_endpoint_str_round_trips() -> None:
    for url in ("tcp://127.0.0.1:9000", "tls://[::1]:443"):
        assert str(rstreams.parse_url(url)) == url
        assert rstreams.parse_url(str(rstreams.parse_url(url))) == rstreams.parse_url(url)


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:80",
        "ws://127.0.0.1:80",
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
