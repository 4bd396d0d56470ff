"""A plain URL at a bridge's TLS port is told which scheme to use, as ``tcp://`` at a ``tls://`` port is.

The kit's server peeks at the client's first byte before TLS reads it:
anything but a TLS handshake record is a client that does not speak TLS,
and it is refused in the plain protocol ("this port speaks TLS: use
emps://"), with a ``connection_refused`` log line. It saw the connection
close without a word ("the peer closed the connection").
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Callable
from functools import partial
from typing import Any

import pytest
import trio
import trustme

import examples.demo
import rstreams
from bridges.emp import EmpAppServer
from bridges.epoxy import EpoxyAppServer
from bridges.micromsg2 import MicroMsg2AppServer
from rstreams.support import listener_port

SERVERS: dict[str, Callable[[rstreams.Router], Any]] = {
    "emp": EmpAppServer,
    "mm2": MicroMsg2AppServer,
    "epoxy": EpoxyAppServer,
}


@pytest.mark.parametrize("scheme", sorted(SERVERS))
async def test_a_plain_client_at_a_tls_port_is_told_the_scheme(
    scheme: str, nursery: trio.Nursery, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    ca = trustme.CA()
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(server_context)
    server = SERVERS[scheme](examples.demo.app)
    [listener] = await nursery.start(partial(server.serve_tcp, "127.0.0.1", 0, server_context))
    port = listener_port(listener)
    with trio.fail_after(10):
        with pytest.raises(rstreams.RStreamsError, match=f"this port speaks TLS: use {scheme}s://"):
            async with rstreams.connect(f"{scheme}://127.0.0.1:{port}") as peer:
                await peer.fetch("range?count=1", 1)
        # ... and a client that does speak TLS is served as ever.
        client_context = ssl.create_default_context()
        ca.configure_trust(client_context)
        async with rstreams.connect(f"{scheme}s://127.0.0.1:{port}", ssl_context=client_context) as peer:
            assert await peer.fetch("range?count=2", 5) == [n.to_bytes(8, "big") for n in range(2)]
    [refused] = [r for r in caplog.records if getattr(r, "event", None) == "connection_refused"]
    assert refused.transport == f"{scheme}s" and refused.reason == f"this port speaks TLS: use {scheme}s://"  # type: ignore[attr-defined]
    assert refused.peer.startswith("127.0.0.1:")  # type: ignore[attr-defined]


@pytest.mark.parametrize("scheme", sorted(SERVERS))
async def test_a_certificate_that_does_not_verify_is_a_failed_handshake(scheme: str, nursery: trio.Nursery) -> None:
    # trio's TLS stream handshakes on its first read, so a certificate the
    # client does not trust reached it as "connection lost while reading":
    # as if the connection had been up. It never was. (The server sees only
    # an end of file: trio's TLS stream does not send the client's alert.)
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    trustme.CA().issue_cert("127.0.0.1").configure_cert(server_context)
    server = SERVERS[scheme](examples.demo.app)
    [listener] = await nursery.start(partial(server.serve_tcp, "127.0.0.1", 0, server_context))
    port = listener_port(listener)
    with trio.fail_after(10):
        with pytest.raises(rstreams.RStreamsError) as raised:
            async with rstreams.connect(f"{scheme}s://127.0.0.1:{port}", ssl_context=ssl.create_default_context()) as peer:
                await peer.fetch("range?count=1", 1)
        text = str(raised.value)
        assert text.startswith("TLS handshake failed: [SSL: CERTIFICATE_VERIFY_FAILED]"), text
        assert text.endswith("; certificate not trusted: pass --ca FILE"), text
