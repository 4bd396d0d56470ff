"""A server's shutdown reads the same in ``rstreams sub`` whatever the scheme.

``rstreams serve`` stopped with SIGTERM while one ``sub`` per streaming
scheme reads an endless publisher: each ``sub`` ends by itself with exit
status 3, the status for the server leaving (``the server said goodbye``
over tcp:// and ws://). Relink's listener says so with an error message
(``server shutting down``) before it closes each channel, which is the
server leaving, not the publisher failing (1). EMP and Epoxy are left out:
their request-response never answers an endless publisher, so nothing
shows when such a ``sub`` is connected.
"""

from __future__ import annotations

import re
import signal
import subprocess

from ._support import SHUTDOWN_TIMEOUT, OutputLines, start, stop

SERVING = re.compile(r"^rstreams: serving \S+ on (?P<url>(?P<scheme>[a-z0-9]+)://\S+)$")
LISTENERS = {"tcp": "--tcp", "ws": "--ws", "relink": "--relink", "mm2": "--micromsg2"}
EXPECTED = {
    "tcp": "rstreams: the server said goodbye: server shutting down",
    "ws": "rstreams: the server said goodbye: server shutting down",
    "relink": "rstreams: the listener is shutting down: server shutting down",
    "mm2": "rstreams: the peer closed the connection",
}


def test_every_streaming_scheme_sees_the_server_leave(tmp_path) -> None:  # type: ignore[no-untyped-def]
    args = ["serve", "examples.demo:app", "--log-level", "info"]
    for option in LISTENERS.values():
        args += [option, "127.0.0.1:0"]
    subscribers: dict[str, subprocess.Popen[bytes]] = {}
    with open(tmp_path / "serve.log", "wb") as log:
        server = start(*args, stderr=log)
    try:
        output = OutputLines(server.stdout)  # type: ignore[arg-type]
        urls = {}
        for _ in LISTENERS:
            match = SERVING.match(output.readline().decode())
            assert match, (tmp_path / "serve.log").read_text()
            urls[match["scheme"]] = match["url"]
        assert set(urls) == set(LISTENERS)
        for scheme, url in urls.items():
            subscribers[scheme] = start("sub", url, "ticker?interval=0.01", "--format", "msgpack", "--timeout", "60")
        for subscriber in subscribers.values():
            OutputLines(subscriber.stdout).readlines(3)  # type: ignore[arg-type]  # connected and reading
        server.send_signal(signal.SIGTERM)
        assert server.wait(timeout=SHUTDOWN_TIMEOUT) == 0, (tmp_path / "serve.log").read_text()
        assert output.rest() == [b"rstreams: shut down"]
        for scheme, subscriber in subscribers.items():
            status = subscriber.wait(timeout=SHUTDOWN_TIMEOUT)
            assert subscriber.stderr is not None
            message = subscriber.stderr.read().decode().strip()
            assert (scheme, status, message) == (scheme, 3, EXPECTED[scheme])
        # The server's side says the same, one session_close a client.
        log = (tmp_path / "serve.log").read_text()
        for transport in ("tcp", "ws", "relink (link 1)", "mm2"):
            assert re.search(rf"session closed: 127\.0\.0\.1:\d+ over {re.escape(transport)}: server shutting down", log), log
    finally:
        for subscriber in subscribers.values():
            stop(subscriber)
            for stream in (subscriber.stdout, subscriber.stderr):
                if stream is not None:
                    stream.close()
        stop(server)
        assert server.stdout is not None
        server.stdout.close()
