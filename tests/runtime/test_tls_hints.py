"""TLS failures say what to do (issue 18, item 10): an untrusted certificate,
a tcp:// client at a TLS port, a tls:// client at a plain port; real sockets
on 127.0.0.1, trustme certificates."""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
import trio
import trustme

import rstreams

from ._support import fetch_range, standard_app


@asynccontextmanager
async def two_ports(server_ssl_context: ssl.SSLContext) -> AsyncIterator[tuple[int, int]]:
    server = rstreams.Server(standard_app())
    async with trio.open_nursery() as nursery:
        tls = await nursery.start(server.serve_tcp, "127.0.0.1", 0, server_ssl_context)
        plain = await nursery.start(server.serve_tcp, "127.0.0.1", 0, None)
        yield rstreams.listener_port(tls[0]), rstreams.listener_port(plain[0])
        nursery.cancel_scope.cancel()


async def test_an_untrusted_certificate_says_pass_ca(server_ssl_context: ssl.SSLContext) -> None:
    with trio.fail_after(10):
        async with two_ports(server_ssl_context) as (tls_port, _):
            with pytest.raises(rstreams.SessionBroken) as info:
                async with rstreams.open_session(f"tls://127.0.0.1:{tls_port}", ssl_context=ssl.create_default_context()) as client:
                    await client.fetch("range?count=1", 1)
    assert info.value.reason.startswith("TLS handshake failed: [SSL: CERTIFICATE_VERIFY_FAILED]")
    assert info.value.reason.endswith("; certificate not trusted: pass --ca FILE")


async def test_a_plain_client_at_a_tls_port_is_told_to_use_tls(
    server_ssl_context: ssl.SSLContext, client_ssl_context: ssl.SSLContext
) -> None:
    with trio.fail_after(10):
        async with two_ports(server_ssl_context) as (tls_port, _):
            with pytest.raises(rstreams.SessionClosed) as info:
                async with rstreams.open_session(f"tcp://127.0.0.1:{tls_port}") as client:
                    await client.fetch("range?count=1", 1)
            assert info.value.reason == "this port speaks TLS: use tls://" and info.value.by_peer
            # The port still serves TLS clients.
            async with rstreams.open_session(f"tls://127.0.0.1:{tls_port}", ssl_context=client_ssl_context) as client:
                await fetch_range(client)


async def test_a_tls_client_at_a_plain_port_is_told_to_use_tcp(
    server_ssl_context: ssl.SSLContext, client_ssl_context: ssl.SSLContext
) -> None:
    with trio.fail_after(10):
        async with two_ports(server_ssl_context) as (_, plain_port):
            with pytest.raises(rstreams.SessionBroken) as info:
                async with rstreams.open_session(f"tls://127.0.0.1:{plain_port}", ssl_context=client_ssl_context) as client:
                    await client.fetch("range?count=1", 1)
    assert info.value.reason.startswith("TLS handshake failed: ")
    assert info.value.reason.endswith("this port does not speak TLS: use tcp://")


async def test_mutual_tls_gives_the_hook_the_client_certificate(tls_ca: trustme.CA, client_ssl_context: ssl.SSLContext) -> None:
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    tls_ca.issue_cert("127.0.0.1").configure_cert(server_context)
    client_ca = trustme.CA()
    client_ca.configure_trust(server_context)
    server_context.verify_mode = ssl.CERT_REQUIRED
    client_ca.issue_cert("alice@example.org").configure_cert(client_ssl_context_with_cert := ssl.create_default_context())
    tls_ca.configure_trust(client_ssl_context_with_cert)
    seen: list[rstreams.PeerInfo] = []

    async def authenticate(token: str | None, peer: rstreams.PeerInfo) -> rstreams.Principal | None:
        seen.append(peer)
        return rstreams.Principal(name="cert") if peer.certificate is not None else None

    server = rstreams.Server(standard_app(), authenticate=authenticate)
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            [listener] = await nursery.start(server.serve_tcp, "127.0.0.1", 0, server_context)
            url = f"tls://127.0.0.1:{rstreams.listener_port(listener)}"
            async with rstreams.open_session(url, ssl_context=client_ssl_context_with_cert) as client:
                await fetch_range(client)
            with pytest.raises((rstreams.SessionBroken, OSError)):
                async with rstreams.open_session(url, ssl_context=client_ssl_context) as client:
                    await client.fetch("range?count=1", 1)
            nursery.cancel_scope.cancel()
    assert seen[0].transport == "tls"
    assert seen[0].certificate is not None
    assert "alice@example.org" in repr(seen[0].certificate["subjectAltName"])
