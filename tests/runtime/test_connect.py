"""Client entry point: open_session(url, app=..., ssl_context=...)."""

from __future__ import annotations

import ssl

import pytest
import trio

import rstreams

from ._support import fetch_range, new_session, standard_app


async def test_open_session_errors(client_ssl_context: ssl.SSLContext) -> None:
    with trio.fail_after(10):
        with pytest.raises(ValueError):
            async with rstreams.open_session("http://127.0.0.1:1"):
                pass  # pragma: no cover
        with pytest.raises(ValueError, match="tls://"):
            async with rstreams.open_session("tcp://127.0.0.1:1", ssl_context=client_ssl_context):
                pass  # pragma: no cover
        # A port nobody listens on (bound, then closed).
        [listener] = await trio.open_tcp_listeners(0, host="127.0.0.1")
        port = listener.socket.getsockname()[1]
        await listener.aclose()
        with pytest.raises(OSError):
            async with rstreams.open_session(f"tcp://127.0.0.1:{port}"):
                pass  # pragma: no cover


async def test_open_session_serves_the_client_app_to_the_server() -> None:
    # open_session(url, app=...) serves the client's publishers to the server.
    server = rstreams.Server(rstreams.Router())
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            listeners = await nursery.start(server.serve_tcp, "127.0.0.1", 0)
            url = f"tcp://127.0.0.1:{rstreams.listener_port(listeners[0])}"
            async with rstreams.open_session(url, app=standard_app()) as client:
                server_session = await new_session(server)
                await fetch_range(server_session, 100)
                assert client.statistics().bytes_sent > 0
            nursery.cancel_scope.cancel()

