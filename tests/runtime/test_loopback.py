"""Loopback connections get a congestion control that does not pace (``rstreams/_loopback.py``).

A host that runs BBR paces every TCP connection, loopback too, to the rate
its peer last read at; a session over loopback asks for Reno instead
(``SessionConfig.loopback_congestion_control``), and a connection to any
other address keeps the host's choice. These tests read the option back
from real sockets over 127.0.0.1.
"""

from __future__ import annotations

import socket
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st

import rstreams
from rstreams.support import check_congestion_control, unpace_loopback

from rstreams._loopback import is_loopback_address

from helpers import (
    TCP_CONGESTION,
    another_allowed_congestion_control,
    choose_congestion_control,
    congestion_control,
    host_congestion_control,
)

from ._support import range_publisher, u32

needs_congestion_option = pytest.mark.skipif(TCP_CONGESTION is None, reason="no TCP_CONGESTION on this platform")


@asynccontextmanager
async def _tcp_pair() -> AsyncIterator[tuple[trio.SocketStream, trio.SocketStream]]:
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]
    client = await trio.open_tcp_stream("127.0.0.1", port)
    server = await listeners[0].accept()
    try:
        yield client, server
    finally:
        await client.aclose()
        await server.aclose()
        await listeners[0].aclose()


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.255.0.9", True),
        ("::1", True),
        ("::ffff:127.0.0.1", True),
        ("10.0.0.1", False),
        ("192.168.1.127", False),
        ("::ffff:10.1.2.3", False),
        ("fe80::1%eth0", False),
        ("2001:db8::1", False),
        ("", False),
        ("not an address", False),
    ],
)
def test_is_loopback_address(host: str, loopback: bool) -> None:
    assert is_loopback_address(host) is loopback


@given(st.ip_addresses())
def test_is_loopback_address_agrees_with_ipaddress(address: object) -> None:
    import ipaddress

    assert isinstance(address, (ipaddress.IPv4Address, ipaddress.IPv6Address))
    expected = address.is_loopback
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        expected = address.ipv4_mapped.is_loopback
    assert is_loopback_address(str(address)) is expected


@pytest.mark.parametrize("name", ["", "x" * 16, "bbr\0", "cubic ", "é", 3, b"reno"])
def test_a_congestion_control_that_cannot_be_one_is_refused(name: object) -> None:
    with pytest.raises(ValueError, match="loopback_congestion_control must be a congestion control's name"):
        rstreams.SessionConfig(loopback_congestion_control=name)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="must be a congestion control's name"):
        check_congestion_control(name)


def test_none_and_names_are_accepted() -> None:
    assert rstreams.SessionConfig().loopback_congestion_control == "reno"
    assert rstreams.SessionConfig(loopback_congestion_control=None).loopback_congestion_control is None
    assert rstreams.SessionConfig(loopback_congestion_control="cubic").loopback_congestion_control == "cubic"


@needs_congestion_option
async def test_sessions_over_loopback_use_reno_on_both_sides() -> None:
    app = rstreams.Router()
    app.add("range", range_publisher)
    other = another_allowed_congestion_control()
    if other is None and host_congestion_control() == b"reno":
        pytest.skip("this host allows only Reno, its default: nothing would tell the change apart")
    with trio.fail_after(10):
        async with _tcp_pair() as (client_stream, server_stream):
            # Start from something else where the host allows it, so that the
            # change is seen even on a host whose default is Reno already.
            if other is not None:
                for stream in (client_stream, server_stream):
                    choose_congestion_control(stream.socket, other)
            async with rstreams.open_stream_session(server_stream, app=app):
                async with rstreams.open_stream_session(client_stream) as client:
                    assert congestion_control(client_stream.socket) == b"reno"
                    assert congestion_control(server_stream.socket) == b"reno"
                    async with client.subscribe("range?count=3") as subscription:
                        assert [element async for element in subscription] == [u32(0), u32(1), u32(2)]


@needs_congestion_option
async def test_none_keeps_the_hosts_choice() -> None:
    config = rstreams.SessionConfig(loopback_congestion_control=None)
    with trio.fail_after(10):
        async with _tcp_pair() as (client_stream, server_stream):
            async with rstreams.open_stream_session(server_stream, app=rstreams.Router(), config=config):
                async with rstreams.open_stream_session(client_stream, config=config):
                    assert congestion_control(client_stream.socket) == host_congestion_control()
                    assert congestion_control(server_stream.socket) == host_congestion_control()


@needs_congestion_option
async def test_unpace_loopback_reaches_the_socket_under_tls_and_reports_a_change() -> None:
    with trio.fail_after(10):
        async with _tcp_pair() as (client_stream, _server_stream):
            other = another_allowed_congestion_control()
            if other is not None:
                choose_congestion_control(client_stream.socket, other)
            before = congestion_control(client_stream.socket)
            wrapped = trio.SSLStream(client_stream, ssl.create_default_context(), server_hostname="localhost")
            assert unpace_loopback(wrapped) is (before != b"reno")
            assert congestion_control(client_stream.socket) == b"reno"
            assert unpace_loopback(wrapped) is False  # already Reno: nothing to do


@needs_congestion_option
async def test_a_name_the_kernel_does_not_know_changes_nothing_and_raises_nothing() -> None:
    with trio.fail_after(10):
        async with _tcp_pair() as (client_stream, _server_stream):
            before = congestion_control(client_stream.socket)
            assert unpace_loopback(client_stream, "no-such-cc") is False
            assert congestion_control(client_stream.socket) == before


async def test_streams_without_a_tcp_socket_are_left_alone() -> None:
    left, right = trio.socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    unix = trio.SocketStream(left)
    try:
        assert unpace_loopback(unix) is False
        memory, _ = rstreams.support.memory_stream_pair()
        assert unpace_loopback(memory) is False
        assert unpace_loopback(object()) is False
        assert unpace_loopback(unix, None) is False
    finally:
        await unix.aclose()
        right.close()
