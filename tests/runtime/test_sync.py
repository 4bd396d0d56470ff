"""rstreams.sync: the blocking client, over real sockets, from plain code and asyncio.

The server runs in a trio run of its own in a background thread (as it would
in another process), so the tests themselves are plain synchronous code, as
a script or a notebook is. Every wait is bounded: the thread hand-offs by
``WAIT``, the whole test by pytest-timeout.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

import msgpack
import pytest
import trio

import rstreams
import rstreams.sync

from ._support import standard_app

WAIT = 10.0  # seconds: an upper bound for anything that should happen at once
PREFETCH = 4


@dataclass
class Counting:
    """``count``: 0, 1, 2, ... for ever, recording what it sent and how it ended."""

    sent: int = 0
    starved: threading.Event = field(default_factory=threading.Event)
    cancelled: threading.Event = field(default_factory=threading.Event)

    async def publish(self, sink: rstreams.Sink) -> None:
        try:
            while True:
                if sink.demand == 0:
                    self.starved.set()  # the subscriber's demand is used up
                    await sink.wait_demand()
                    self.starved.clear()
                await sink.send(self.sent.to_bytes(4, "big"))
                self.sent += 1
        except trio.Cancelled:
            self.cancelled.set()
            raise


@dataclass
class ServerThread:
    urls: dict[str, str]
    counting: Counting
    silent_cancelled: threading.Event


@pytest.fixture
def server() -> Iterator[ServerThread]:
    counting = Counting()
    silent_cancelled = threading.Event()

    async def silent(sink: rstreams.Sink) -> None:
        try:
            await trio.sleep_forever()
        finally:
            silent_cancelled.set()

    app = standard_app(count=counting.publish, packed=packed, silent=silent)
    ready = threading.Event()
    urls: dict[str, str] = {}
    stop: list[tuple[trio.lowlevel.TrioToken, trio.CancelScope]] = []

    async def serve() -> None:
        async with trio.open_nursery() as nursery:
            server = rstreams.Server(app)
            tcp = await nursery.start(server.serve_tcp, "127.0.0.1", 0)
            ws = await nursery.start(server.serve_websocket, "127.0.0.1", 0)
            urls["tcp"] = f"tcp://127.0.0.1:{rstreams.listener_port(tcp[0])}"
            urls["ws"] = f"ws://127.0.0.1:{rstreams.listener_port(ws[0])}/"
            stop.append((trio.lowlevel.current_trio_token(), nursery.cancel_scope))
            ready.set()

    thread = threading.Thread(target=trio.run, args=(serve,), daemon=True)
    thread.start()
    assert ready.wait(WAIT)
    try:
        yield ServerThread(urls, counting, silent_cancelled)
    finally:
        token, scope = stop[0]
        trio.from_thread.run_sync(scope.cancel, trio_token=token)
        thread.join(WAIT)
        assert not thread.is_alive()


async def packed(sink: rstreams.Sink) -> None:
    for value in ({"a": 1}, [1, 2], "three"):
        await sink.send(msgpack.packb(value))


def sync_threads() -> list[threading.Thread]:
    return [thread for thread in threading.enumerate() if thread.name == "rstreams.sync"]


@pytest.mark.parametrize("transport", ["tcp", "ws"])
def test_fetch_returns_the_elements_and_closes(server: ServerThread, transport: str) -> None:
    elements = rstreams.sync.fetch(server.urls[transport], "range?count=5", 3)
    assert [int.from_bytes(element, "big") for element in elements] == [0, 1, 2]
    assert sync_threads() == []


@pytest.mark.parametrize("transport", ["tcp", "ws"])
def test_subscribe_iterates_to_the_end(server: ServerThread, transport: str) -> None:
    subscription = rstreams.sync.subscribe(server.urls[transport], "range?count=10000")
    assert [int.from_bytes(element, "big") for element in subscription] == list(range(10000))
    assert sync_threads() == []  # the end of the stream released the connection
    assert list(subscription) == []


def test_codec_decodes(server: ServerThread) -> None:
    with rstreams.sync.subscribe(server.urls["tcp"], "packed", codec="msgpack") as values:
        assert list(values) == [{"a": 1}, [1, 2], "three"]
    assert rstreams.sync.fetch(server.urls["tcp"], "packed", 2, codec="msgpack") == [{"a": 1}, [1, 2]]


def test_leaving_the_block_early_cancels_the_stream(server: ServerThread) -> None:
    with rstreams.sync.subscribe(server.urls["tcp"], "count") as numbers:
        for number in numbers:
            if int.from_bytes(number, "big") == 100:
                break
    assert server.counting.cancelled.wait(WAIT)
    assert sync_threads() == []


def test_demand_bounds_what_a_slow_loop_is_sent(server: ServerThread) -> None:
    with rstreams.sync.subscribe(server.urls["tcp"], "count", prefetch=PREFETCH) as numbers:
        for taken in range(1, 20):
            assert int.from_bytes(next(numbers), "big") == taken - 1
            assert server.counting.starved.wait(WAIT)
            # The publisher was never allowed more than what the loop took,
            # plus the batch the iterator holds (at most one window), plus
            # the window requested ahead of that.
            assert server.counting.sent <= taken + 2 * PREFETCH


def test_close_from_another_thread_ends_the_iteration(server: ServerThread) -> None:
    # "silent" never sends: the iterating thread waits for an element until
    # the close, whichever comes first of its wait and the close.
    numbers = rstreams.sync.subscribe(server.urls["tcp"], "silent")
    results: list[object] = []
    consumer = threading.Thread(target=lambda: results.append(list(numbers)))
    consumer.start()
    numbers.close()
    consumer.join(WAIT)
    assert not consumer.is_alive()
    assert results == [[]]  # the iteration ended, without error
    assert server.silent_cancelled.wait(WAIT)
    assert sync_threads() == []


def test_unknown_publisher_is_raised_in_the_caller(server: ServerThread) -> None:
    with pytest.raises(rstreams.UnknownPublisher):
        rstreams.sync.subscribe(server.urls["tcp"], "nope")
    with pytest.raises(rstreams.UnknownPublisher):
        rstreams.sync.fetch(server.urls["ws"], "nope", 1)
    assert sync_threads() == []


def test_connection_refused_is_an_os_error() -> None:
    with socket_closed_port() as port, pytest.raises(OSError):
        rstreams.sync.subscribe(f"tcp://127.0.0.1:{port}", "range")
    assert sync_threads() == []


def test_fetch_limit_is_checked() -> None:
    with pytest.raises(ValueError, match="limit"):
        rstreams.sync.fetch("tcp://127.0.0.1:1", "range", 0)


def test_from_asyncio_through_to_thread(server: ServerThread) -> None:
    async def main() -> tuple[list[bytes], list[int]]:
        fetched = await asyncio.to_thread(rstreams.sync.fetch, server.urls["tcp"], "range?count=3", 3)
        numbers = await asyncio.to_thread(rstreams.sync.subscribe, server.urls["ws"], "range?count=5")
        streamed = []
        try:
            while (element := await asyncio.to_thread(next, numbers, None)) is not None:
                streamed.append(int.from_bytes(element, "big"))
        finally:
            await asyncio.to_thread(numbers.close)
        return fetched, streamed

    fetched, streamed = asyncio.run(asyncio.wait_for(main(), WAIT))
    assert len(fetched) == 3
    assert streamed == [0, 1, 2, 3, 4]


def test_the_trio_api_under_asyncio_says_what_to_do(server: ServerThread) -> None:
    async def connect() -> None:
        async with rstreams.connect(server.urls["tcp"]):
            pass

    async def open_session() -> None:
        async with rstreams.open_session(server.urls["tcp"]):
            pass

    async def serve() -> None:
        await rstreams.serve_tcp(rstreams.Router(), "127.0.0.1", 0)

    async def server_serve_websocket() -> None:
        await rstreams.Server(rstreams.Router()).serve_websocket("127.0.0.1", 0)

    for main in (connect, open_session, serve, server_serve_websocket):
        with pytest.raises(RuntimeError) as caught:
            asyncio.run(main())
        message = str(caught.value)
        assert "asyncio" in message and "rstreams.sync" in message and "trio.run" in message


class socket_closed_port:
    """A port on 127.0.0.1 that nothing listens on (bound, then closed)."""

    def __enter__(self) -> int:
        import socket

        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            return int(probe.getsockname()[1])

    def __exit__(self, *exc_info: object) -> None:
        pass


def test_ctrl_c_while_connecting_leaves_nothing_behind() -> None:
    # A server that accepts and never says hello: the client waits in the
    # handshake, and Ctrl-C (SIGINT, sent once the connection is accepted)
    # interrupts subscribe() and cancels the connecting.
    import os
    import signal
    import socket

    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        accepted: list[socket.socket] = []

        def accept_then_interrupt() -> None:
            connection, _ = listener.accept()
            accepted.append(connection)
            os.kill(os.getpid(), signal.SIGINT)

        interrupter = threading.Thread(target=accept_then_interrupt, daemon=True)
        interrupter.start()
        with pytest.raises(KeyboardInterrupt):
            rstreams.sync.subscribe(f"tcp://127.0.0.1:{port}", "range")
        interrupter.join(WAIT)
        for connection in accepted:
            connection.close()
    assert sync_threads() == []


def test_the_readme_example_runs() -> None:
    # README.md's rstreams.sync example, against the demo app, as written
    # (only the port differs): so that it never rots.
    import re
    import subprocess
    import sys
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = readme.split("### From asyncio, scripts and notebooks", 1)[1]
    example = re.search(r"```python\n(.*?)```", section, flags=re.S)
    assert example is not None and "rstreams.sync" in example.group(1)
    serve_demo = f"""
import threading, trio, rstreams, rstreams.demo
ready = threading.Event(); port = []
async def serve():
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(rstreams.serve_tcp, rstreams.demo.app, "127.0.0.1", 0)
        port.append(rstreams.listener_port(listeners[0])); ready.set()
threading.Thread(target=trio.run, args=(serve,), daemon=True).start()
assert ready.wait({WAIT})
"""
    code = serve_demo + example.group(1).replace('"tcp://127.0.0.1:9000"', 'f"tcp://127.0.0.1:{port[0]}"')
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == repr([bytes(7) + bytes([i]) for i in range(5)])
    assert [line.split()[0] for line in lines[1:5]] == ["0", "1", "2", "3"]  # the ticker's seq
    assert lines[6:] == ["0000000000000000", "0000000000000001", "0000000000000002"]
