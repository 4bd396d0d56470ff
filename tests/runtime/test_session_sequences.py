"""A session fed any sequence of messages, cut into reads anywhere, survives it.

Issue 18, defect 1: a subscribe followed, in the same read, by a cancel or a
request(n <= 0) for the same Id made the session drop the connection without
goodbye (the machine had ended the publication before the session answered
the subscribe, and ``accept`` then raised ``LocalProtocolError``), cutting
every other stream on it. The connection now holds such a message back to
its next ``events()`` call, so the subscribe is answered first.

The property: whatever a peer sends, the session either stays up and answers
(a fresh subscribe is served in full), or closes with a goodbye, which names
a protocol error unless the peer itself said goodbye or spoke another
version. It never drops the connection without goodbye, and never raises.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import msgpack
import pytest
import trio
import trio.testing
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import examples.demo as demo
import rstreams
from rstreams.protocol import Goodbye, Message, MessageDecoder, OnComplete, OnError, OnNextPacked, Subscribed

from ._support import RawPeer

HELLO = bytes.fromhex("93000090")
HELLO_KEEPALIVE = bytes.fromhex("9300009101")  # hello(0, [1]): the keepalive extension
SUBSCRIBE_TICKER = bytes.fromhex("9401a67469636b65720100")  # subscribe("ticker", 1, 0)
CANCEL_1 = bytes.fromhex("920301")  # cancel(1)
REQUEST_1_0 = bytes.fromhex("93020100")  # request(1, 0)


def pack(obj: object) -> bytes:
    return msgpack.packb(obj, use_bin_type=True)  # type: ignore[no-any-return]


@asynccontextmanager
async def demo_over_tcp() -> AsyncIterator[tuple[rstreams.Server, int]]:
    server = rstreams.Server(demo.app)
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(server.serve_tcp, "127.0.0.1", 0)
        yield server, rstreams.listener_port(listeners[0])
        nursery.cancel_scope.cancel()


async def serve_range_to(peer: RawPeer, subscriber: int, count: int = 3) -> list[Message]:
    """Subscribe to ``range?count=N`` and read its whole answer."""
    await peer.send_raw(pack([1, f"range?count={count}", subscriber, count]))
    messages = []
    while True:
        message = await peer.receive()
        if getattr(message, "subscriber", None) == subscriber:
            messages.append(message)
            if isinstance(message, (OnComplete, OnError)):
                return messages


# ---- the report's bytes, over a real socket ------------------------------------


@pytest.mark.parametrize("ending", [CANCEL_1, REQUEST_1_0], ids=["cancel", "request-0"])
async def test_subscribe_then_its_end_in_one_write_keeps_the_session(ending: bytes) -> None:
    with trio.fail_after(10):
        async with demo_over_tcp() as (server, port):
            peer = RawPeer(await trio.open_tcp_stream("127.0.0.1", port))
            await peer.send_raw(HELLO + SUBSCRIBE_TICKER + ending)
            await peer.receive()  # the server's hello
            answer = await peer.receive()
            assert answer == Subscribed(subscriber=1)
            if ending == REQUEST_1_0:
                error = await peer.receive()
                assert isinstance(error, OnError) and error.subscriber == 1 and "3.9" in error.error
            # The session is still up and serves a new stream in full.
            served = await serve_range_to(peer, 2)
            assert isinstance(served[0], Subscribed) and isinstance(served[-1], OnComplete)
            session = next(iter(server.sessions))
            assert not session.closed
            await peer.send(Goodbye(reason="done"))
            assert await peer.expect_goodbye_and_close() == "goodbye"
            await session.wait_closed()


async def test_other_streams_on_the_connection_are_not_cut() -> None:
    with trio.fail_after(10):
        async with demo_over_tcp() as (_, port):
            peer = RawPeer(await trio.open_tcp_stream("127.0.0.1", port))
            await peer.send_raw(HELLO + pack([1, "ticker?interval=0.001", 7, 2]))
            await peer.receive()
            assert await peer.receive() == Subscribed(subscriber=7)
            await peer.send_raw(SUBSCRIBE_TICKER + CANCEL_1 + pack([2, 7, 3]))
            ticks = 0
            while ticks < 5:  # two, then three more after the request
                message = await peer.receive()
                assert not isinstance(message, (Goodbye, OnError)), message
                ticks += getattr(message, "subscriber", None) == 7 and type(message).__name__ == "OnNext"
            await peer.aclose()


async def test_an_id_ended_and_reused_in_one_write_gets_its_own_answer() -> None:
    # subscribe(1, ticker), cancel(1), subscribe(1, range?count=2) in one
    # write: the second stream is range's, not the ticker's.
    with trio.fail_after(10):
        async with demo_over_tcp() as (_, port):
            peer = RawPeer(await trio.open_tcp_stream("127.0.0.1", port))
            await peer.send_raw(HELLO + SUBSCRIBE_TICKER + CANCEL_1 + pack([1, "range?count=2", 1, 5]))
            await peer.receive()
            messages = [await peer.receive() for _ in range(3)]
            assert messages[0] == Subscribed(subscriber=1)  # the ticker's
            assert messages[1] == Subscribed(subscriber=1, element_size=8)  # range's
            assert messages[2] == OnNextPacked(subscriber=1, count=2, messages=bytes(8) + (1).to_bytes(8, "big"))
            assert await peer.receive() == OnComplete(subscriber=1)
            await peer.aclose()


# ---- any sequence, any split ---------------------------------------------------

IDS = st.integers(min_value=0, max_value=3)
DEMANDS = st.sampled_from([-1, 0, 1, 2, 5, 2**63 - 1])
NAMES = st.sampled_from(
    ["range?count=3", "range?count=100000", "blob?count=2&size=70000", "ticker", "fail?after=1", "nowhere", "range?count=x"]
)
VALID = st.one_of(
    st.builds(lambda n, i, d: [1, n, i, d], NAMES, IDS, DEMANDS),
    st.builds(lambda n, i: [1, n, i], NAMES, IDS),
    st.builds(lambda i, d: [2, i, d], IDS, DEMANDS),
    st.builds(lambda i: [3, i], IDS),
    # The keepalive extension's ping: answered when the hello offered it,
    # a protocol error when it did not.
    st.builds(lambda i: [12, i], IDS),
)
INVALID = st.sampled_from(
    [
        b"\xc1",  # a byte msgpack never uses
        pack([99, 1]),  # unknown code
        pack([2, 1, "many"]),  # demand not an int
        pack([1, 5, 1, 1]),  # publisher not a str
        pack([3]),  # missing field
        pack([5, 2, b"x"]),  # onNext for a stream we never opened
        pack([4, 1, 0]),  # subscribed we never asked for
        pack([6, 3]),  # onComplete we never asked for
        HELLO,  # hello twice
        pack([0, 7, []]),  # another version
        pack([11, "bye"]),  # the peer's goodbye
        pack([13, 1]),  # a pong for a ping the session never sent
        pack([12, -1]),  # a ping whose nonce is no Id
    ]
)
# A subscribe and what may follow it on the same stream, back to back: the
# neighbours that broke the session, drawn more often than chance would.
STREAM_LIFE = st.builds(
    lambda n, i, d, after: [[1, n, i, d], *[[*m[:1], i, *m[2:]] for m in after]],
    NAMES,
    IDS,
    DEMANDS,
    st.lists(st.sampled_from([[3, 0], [2, 0, 0], [2, 0, -1], [2, 0, 3], [1, "range?count=2", 0, 2]]), min_size=1, max_size=3),
)
MESSAGES = st.lists(st.one_of(VALID, VALID, INVALID, STREAM_LIFE), max_size=10).map(
    lambda units: [m for unit in units for m in (unit if isinstance(unit, list) and isinstance(unit[0], list) else [unit])]
)


def encoded(message: list[object] | bytes) -> bytes:
    return message if isinstance(message, bytes) else pack(message)


@st.composite
def reads(draw: st.DrawFn) -> tuple[list[bytes], bool]:
    """The bytes a peer sends, cut into reads anywhere; and whether it spoke
    another version (then the session's goodbye names that, not a protocol
    error)."""
    messages = draw(MESSAGES)
    hello = draw(st.sampled_from([HELLO] * 5 + [HELLO_KEEPALIVE] * 4 + [b""]))
    data = hello + b"".join(map(encoded, messages))
    cuts = sorted(draw(st.lists(st.integers(min_value=1, max_value=max(1, len(data) - 1)), max_size=6, unique=True)))
    chunks = [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)]) if data[a:b]]
    other_version = any(m == pack([0, 7, []]) for m in messages)
    return chunks, other_version


async def feed_session(chunks: list[bytes], other_version: bool) -> None:
    client_stream, server_stream = trio.testing.memory_stream_pair()
    received: list[Message] = []
    decoder = MessageDecoder()
    eof = trio.Event()

    async def send(data: bytes) -> None:
        try:
            await client_stream.send_all(data)
        except trio.BrokenResourceError:
            pass  # the session has closed the connection: what it said is read below

    async def read_all() -> None:
        while True:
            data = await client_stream.receive_some(1 << 20)
            if not data:
                eof.set()
                return
            decoder.feed(bytes(data))
            received.extend(decoder)

    # open_stream_session re-raises whatever breaks the session: a crash
    # fails the test here.
    async with trio.open_nursery() as nursery:
        nursery.start_soon(read_all)
        async with rstreams.open_stream_session(server_stream, app=demo.app) as session:
            for chunk in chunks:
                await send(chunk)
                await trio.testing.wait_all_tasks_blocked()  # one read per chunk
            if session.close_reason is None:
                # Still up: it must answer a fresh subscribe in full.
                await send(pack([1, "range?count=3", 999, 3]))
                await trio.testing.wait_all_tasks_blocked()
                if session.close_reason is None:
                    answer = [type(m) for m in received if getattr(m, "subscriber", None) == 999]
                    assert answer == [Subscribed, OnNextPacked, OnComplete], received
                await send(pack([11, "done"]))
            await session.wait_closed()
        await eof.wait()
    # Exactly one goodbye from the session, and nothing after it.
    goodbyes = [m for m in received if isinstance(m, Goodbye)]
    assert len(goodbyes) == 1 and received[-1] is goodbyes[0], received
    reason = goodbyes[0].reason
    if reason == "goodbye":
        event("stayed up and answered" if session.close_reason == "done" else "answered the peer's goodbye")
    else:
        event(reason.partition(":")[0])
    if reason == "goodbye":
        assert session.close_reason in ("done", "bye")  # the answer to the peer's goodbye
    elif other_version and reason.startswith("unsupported protocol version"):
        pass
    else:
        assert reason.startswith("protocol error:") and session.close_reason == reason, (reason, session.close_reason)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sent=reads())
def test_any_sequence_in_any_reads_never_crashes_the_session(sent: tuple[list[bytes], bool]) -> None:
    def run() -> None:
        async def main() -> None:
            with trio.fail_after(20):
                await feed_session(*sent)

        trio.run(main)

    run()
