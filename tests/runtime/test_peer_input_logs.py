"""What a peer's input makes the server log, and hold, with the demo app.

The promise: whatever a peer sends is answered with a typed error and costs
the log one ``info`` line (``bad_input``), never a traceback or a warning,
and never the peer's text whole (a 60 KB onError, newlines that would forge
log lines: ``rstreams._logs.peer_text``). And what a peer publishes into a
topic is bounded in bytes: a topic's history is the application's memory,
outside every connection's budget.

Each test serves the demo app on 127.0.0.1 (``rstreams serve
rstreams.demo:app`` in-process) and speaks to it as a raw peer, or as an
rstreams client; the ``rstreams`` logger is read with caplog. The tests that
publish into the demo's topics load a fresh copy of ``rstreams/demo.py``, so
that the module's own ``chat`` is never filled for the other tests.
"""

from __future__ import annotations

import importlib.util
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from types import ModuleType

import pytest
import trio

import rstreams
import rstreams.demo
from rstreams._logs import PEER_TEXT_LOGGED, peer_text
from rstreams.protocol import OnError, Subscribe, Subscribed

from ._support import RawPeer, wait_for

TIMEOUT = 20
MiB = 1024 * 1024


def fresh_demo() -> ModuleType:
    # A second instance of the demo module: the same code, its own topics.
    spec = importlib.util.spec_from_file_location("rstreams_demo_copy", rstreams.demo.__file__)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@asynccontextmanager
async def demo_server(app: rstreams.Router, config: rstreams.SessionConfig | None = None) -> AsyncIterator[int]:
    server = rstreams.Server(app, config=config)
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(server.serve_tcp, "127.0.0.1", 0)
        yield rstreams.listener_port(listeners[0])
        nursery.cancel_scope.cancel()


@asynccontextmanager
async def raw_peer(port: int) -> AsyncIterator[RawPeer]:
    peer = RawPeer(await trio.open_tcp_stream("127.0.0.1", port))
    try:
        await peer.handshake()
        yield peer
    finally:
        await peer.aclose()


def events(caplog: pytest.LogCaptureFixture, name: str) -> list[logging.LogRecord]:
    return [record for record in caplog.records if getattr(record, "event", None) == name]


def assert_no_warning_or_traceback(caplog: pytest.LogCaptureFixture) -> None:
    loud = [record for record in caplog.records if record.levelno >= logging.WARNING or record.exc_info]
    assert not loud, [record.getMessage()[:200] for record in loud]


# ---- peer_text -------------------------------------------------------------------


def test_peer_text_keeps_a_short_printable_text_as_it_is() -> None:
    assert peer_text("no such source: src (é, 日本)") == "no such source: src (é, 日本)"


def test_peer_text_cuts_a_long_text_and_says_how_much_was_cut() -> None:
    text = peer_text("E" * 60_000)
    assert text == "E" * PEER_TEXT_LOGGED + f"... ({60_000 - PEER_TEXT_LOGGED} more characters)"
    assert peer_text("abcdef", limit=3) == "abc... (3 more characters)"


def test_peer_text_escapes_what_would_break_or_forge_a_line() -> None:
    forged = "bad\n2026-01-01 00:00:00,000 ERROR rstreams: forged\r\x1b[31m\x00\u2028\ud800 C:\\path"
    text = peer_text(forged)
    assert "\n" not in text and "\r" not in text and text.isprintable()
    assert text == "bad\\n2026-01-01 00:00:00,000 ERROR rstreams: forged\\r\\x1b[31m\\x00\\u2028\\ud800 C:\\\\path"
    text.encode("utf-8")  # (a lone surrogate would not encode)


def test_peer_text_cuts_before_escaping_so_a_line_stays_bounded() -> None:
    text = peer_text("\x00" * 60_000)
    assert len(text) < 5 * PEER_TEXT_LOGGED


# ---- an onError on a stream a publisher relays -------------------------------------


@pytest.mark.parametrize("route", ["chat/publish?source=src", "echo?source=src"])
async def test_an_onerror_on_a_relayed_stream_is_one_info_line_with_the_text_cut(
    caplog: pytest.LogCaptureFixture, route: str
) -> None:
    caplog.set_level(logging.DEBUG, logger="rstreams")
    huge = "E" * 60_000 + "\nERROR rstreams: a forged line"
    with trio.fail_after(TIMEOUT):
        async with demo_server(fresh_demo().app) as port, raw_peer(port) as peer:
            await peer.send(Subscribe(publisher=route, subscriber=1, initial_demand=10))
            # The server subscribes back to our "src": answer it, then fail it.
            back = (await peer.receive_until(Subscribe))[-1]
            assert isinstance(back, Subscribe) and back.publisher == "src"
            await peer.send(Subscribed(subscriber=back.subscriber, element_size=0), OnError(subscriber=back.subscriber, error=huge))
            messages = await peer.receive_until(OnError)
            assert messages[-1] == OnError(subscriber=1, error=huge)  # the peer's own text, back to it whole
            await wait_for(lambda: bool(events(caplog, "bad_input")))
    [bad] = events(caplog, "bad_input")
    assert bad.levelno == logging.INFO and not bad.exc_info
    assert bad.publisher == route  # type: ignore[attr-defined]
    assert bad.reason == peer_text(huge)  # type: ignore[attr-defined]
    message = bad.getMessage()
    assert "\n" not in message and len(message) < 2 * PEER_TEXT_LOGGED + 200
    assert bad.peer in message and route in message  # type: ignore[attr-defined]
    assert_no_warning_or_traceback(caplog)


async def test_echo_of_a_source_the_peer_does_not_have_is_one_info_line(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="rstreams")
    with trio.fail_after(TIMEOUT):
        async with demo_server(rstreams.demo.app) as port:
            async with rstreams.open_session(f"tcp://127.0.0.1:{port}", app=rstreams.Router()) as client:
                with pytest.raises(rstreams.PublisherError, match="no such publisher"):
                    await client.fetch("echo?source=missing", 1)
            await wait_for(lambda: bool(events(caplog, "bad_input")))
    [bad] = events(caplog, "bad_input")
    assert bad.publisher == "echo?source=missing"  # type: ignore[attr-defined]
    assert_no_warning_or_traceback(caplog)


# ---- bad query parameters of the demo's publishers -----------------------------------

BAD_PARAMETERS = [
    ("ticker?interval=inf", "not a finite number"),
    ("ticker?interval=-inf", "not a finite number"),
    ("ticker?interval=1e400", "not a finite number"),
    ("ticker?interval=nan", "not a finite number"),
    ("ticker?interval=-1", "below the minimum"),
    ("ticker?interval=0", "below the minimum"),
    ("ticker?interval=1e300", "above the maximum"),
    ("ticker?interval=fast", "not a number"),
    ("echo", "echo needs a source"),
    ("echo?source=", "echo needs a source"),
    ("chat/publish", "needs a source"),
    ("chat/publish?source=", "needs a source"),
    ("sensors/publish?source=", "needs a source"),
    ("chat/publish?source=src&confirm=2", "use 1"),
    ("range?count=-1", "below the minimum"),
    ("range?count=1e99", "not an integer"),
    ("range?count=" + "9" * 30, "above the maximum"),
    ("range?count=" + "9" * 5000, "not an integer"),
    ("blob?size=-1", "below the minimum"),
    ("blob?size=99999999999", "above the maximum"),
    ("blob?count=-1", "below the minimum"),
    ("fail?after=-1", "below the minimum"),
    ("fail?after=inf", "not an integer"),
    ("chat?history=-1", "below the minimum"),
    ("chat?policy=bogus", "use block, drop or latest"),
    ("chat?from=-1", "below the minimum"),
    ("chat?from=5", "ahead of the newest"),
    ("chat?partition=1", "above the maximum"),
    ("chat?from=0&history=3", "exclude each other"),
    ("sensors?pack=4", "pack needs from"),
]


@pytest.mark.parametrize(("name", "why"), BAD_PARAMETERS)
async def test_a_bad_parameter_of_a_demo_publisher_is_an_onerror_and_one_info_line(
    caplog: pytest.LogCaptureFixture, name: str, why: str
) -> None:
    caplog.set_level(logging.DEBUG, logger="rstreams")
    with trio.fail_after(TIMEOUT):
        async with demo_server(rstreams.demo.app) as port, raw_peer(port) as peer:
            await peer.send(Subscribe(publisher=name, subscriber=1, initial_demand=10))
            messages = await peer.receive_until(OnError)
            error = messages[-1].error
            assert why in error
            await wait_for(lambda: bool(events(caplog, "bad_input")))
    [bad] = events(caplog, "bad_input")
    assert bad.levelno == logging.INFO and not bad.exc_info
    assert bad.reason == peer_text(error)  # type: ignore[attr-defined]
    assert len(bad.getMessage()) < 3 * PEER_TEXT_LOGGED + 200
    assert_no_warning_or_traceback(caplog)


async def test_a_long_publisher_name_is_cut_in_the_log(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="rstreams")
    name = "ticker?interval=inf&pad=" + "A" * 60_000
    with trio.fail_after(TIMEOUT):
        async with demo_server(rstreams.demo.app) as port, raw_peer(port) as peer:
            await peer.send(Subscribe(publisher=name, subscriber=1, initial_demand=10))
            await peer.receive_until(OnError)
            await wait_for(lambda: bool(events(caplog, "bad_input")))
    [bad] = events(caplog, "bad_input")
    assert bad.publisher == peer_text(name)  # type: ignore[attr-defined]
    assert len(bad.getMessage()) < 3 * PEER_TEXT_LOGGED + 200
    assert_no_warning_or_traceback(caplog)


async def test_a_replay_from_a_sequence_no_longer_held_is_not_retained_and_one_info_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="rstreams")
    demo = fresh_demo()
    for n in range(300):  # more than chat's capacity of 256: 0 .. 43 are gone
        demo.chat.publish_nowait(b'{"from": "test", "text": "%d"}' % n)
    with trio.fail_after(TIMEOUT):
        async with demo_server(demo.app) as port:
            async with rstreams.open_session(f"tcp://127.0.0.1:{port}") as client:
                with pytest.raises(rstreams.NotRetained) as caught:
                    await client.fetch("chat?from=0", 1)
            await wait_for(lambda: bool(events(caplog, "bad_input")))
    assert caught.value.oldest == 300 - 256
    [bad] = events(caplog, "bad_input")
    assert "no longer retained" in bad.reason  # type: ignore[attr-defined]
    assert_no_warning_or_traceback(caplog)


# ---- the demo's topics are bounded in bytes ----------------------------------------


@pytest.mark.parametrize(("topic", "limit"), [("chat", rstreams.demo.CHAT_CAPACITY_BYTES), ("sensors", rstreams.demo.SENSORS_CAPACITY_BYTES)])
def test_the_demo_topics_hold_a_few_mib_at_most(topic: str, limit: int) -> None:
    statistics = getattr(rstreams.demo, topic).statistics()
    assert statistics.capacity_bytes == limit <= 4 * MiB


async def test_a_peer_filling_the_demo_chat_with_large_messages_holds_only_its_byte_bound(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The probe's attack: one connection at --max-connection-memory 1M
    # publishes 256 x 400 KB into chat. The topic used to hold all of them
    # (100 MB, after the connection was gone); now it holds 4 MiB.
    caplog.set_level(logging.INFO, logger="rstreams")
    demo = fresh_demo()
    message = b'{"from": "x", "text": "' + b"A" * 400_000 + b'"}'
    config = rstreams.SessionConfig.for_connection_memory(MiB)  # (rstreams serve --max-connection-memory 1M)
    with trio.fail_after(TIMEOUT):
        async with demo_server(demo.app, config) as port:
            url = f"tcp://127.0.0.1:{port}"
            async with rstreams.open_session(url, app=rstreams.Router()) as client:
                sent = await rstreams.publish_to_topic(client, "chat", (message for _ in range(256)))
    assert sent == 256
    partition = demo.chat.statistics().partitions[0]
    assert partition.published == 256
    assert partition.held_bytes <= demo.CHAT_CAPACITY_BYTES
    assert partition.held == demo.CHAT_CAPACITY_BYTES // len(message)  # the newest ones
    assert_no_warning_or_traceback(caplog)


async def test_a_peer_message_larger_than_the_demo_chat_holds_is_refused_with_one_info_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="rstreams")
    demo = fresh_demo()
    small = b'{"from": "x", "text": "hello"}'
    large = b'{"from": "x", "text": "' + b"A" * demo.CHAT_CAPACITY_BYTES + b'"}'
    with trio.fail_after(TIMEOUT):
        async with demo_server(demo.app) as port:
            async with rstreams.open_session(f"tcp://127.0.0.1:{port}", app=rstreams.Router()) as client:
                with pytest.raises(rstreams.PublisherError, match="larger than topic chat holds"):
                    await rstreams.publish_to_topic(client, "chat", [small, large, small])
                # The connection stays up, and the topic still takes messages:
                # the one before the large one, and this one.
                assert await rstreams.publish_to_topic(client, "chat", [small]) == 1
                assert await client.fetch("chat?history=10&until=now", 10) == [small, small]
            await wait_for(lambda: bool(events(caplog, "bad_input")))
    [bad] = events(caplog, "bad_input")
    assert f"an element of {len(large)} bytes" in bad.reason  # type: ignore[attr-defined]
    assert_no_warning_or_traceback(caplog)
