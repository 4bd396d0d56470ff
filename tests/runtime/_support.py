"""Helpers shared by the runtime tests: publishers, a raw peer, task checks.

``RawPeer`` is a hand-driven peer: it writes exactly the bytes a test chooses
and decodes what it receives with the codec alone (no state machine), so it can
misbehave in ways a real ``Session`` never would.
"""

from __future__ import annotations

import sys
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager

import trio
import trio.testing

import rstreams
from rstreams.protocol import Extension, Goodbye, Hello, Message, MessageDecoder, encode

UNBOUNDED = 2**63 - 1

#: The hello of a session with the default config: it announces keepalive.
SESSION_HELLO = Hello(extensions=(int(Extension.KEEPALIVE),))

#: Split elements above 1 KiB so that splitting shows up with small elements.
SMALL_SPLIT_CONFIG = rstreams.SessionConfig(limits=rstreams.ProtocolLimits(split_threshold=1024, part_size=1024))


def u32(value: int) -> bytes:
    return value.to_bytes(4, "big")


def from_u32(data: bytes) -> int:
    return int.from_bytes(data, "big")


async def range_publisher(sink: rstreams.Sink, request: rstreams.SubscribeRequest) -> None:
    """``range?count=N``: the numbers 0..N-1 as 4-byte big-endian elements."""
    count = request.int_param("count", 10, minimum=0)
    for value in range(count):
        await sink.send(u32(value))


async def blob_publisher(sink: rstreams.Sink, request: rstreams.SubscribeRequest) -> None:
    """``blob?count=N&size=S``: N elements of S bytes, element i filled with byte i % 251."""
    count = request.int_param("count", 3, minimum=0)
    size = request.int_param("size", 100_000, minimum=1)
    for index in range(count):
        await sink.send(blob(index, size))


def blob(index: int, size: int) -> bytes:
    return bytes([index % 251]) * (size - 4) + u32(index)


def standard_app(**extra: object) -> rstreams.Router:
    """A router with ``range`` and ``blob``, plus ``extra`` routes."""
    router = rstreams.Router({"range": range_publisher, "blob": blob_publisher})
    for path, route in extra.items():
        router.add(path, route)  # type: ignore[arg-type]
    return router


async def collect(subscription: rstreams.Subscription) -> list[object]:
    return [element async for element in subscription]


async def fetch_range(session: rstreams.Session, count: int = 50) -> None:
    """Subscribe to ``range?count=count`` and check every element arrives in order."""
    async with session.subscribe(f"range?count={count}", prefetch=16) as numbers:
        received = [from_u32(raw) async for raw in numbers]  # type: ignore[arg-type]
    assert received == list(range(count))


# ---- tasks ---------------------------------------------------------------


def live_task_names() -> list[str]:
    """Names of every task running right now."""
    names: list[str] = []
    stack = [trio.lowlevel.current_root_task()]
    while stack:
        task = stack.pop()
        names.append(task.name)
        for nursery in task.child_nurseries:
            stack.extend(nursery.child_tasks)
    return names


def session_task_names() -> list[str]:
    """Tasks that belong to some session: its own tasks, publishers, server handlers."""
    return [
        name
        for name in live_task_names()
        if name.startswith(("rstreams._session.", "publisher ")) or name.endswith("Server.serve_stream")
    ]


async def wait_no_session_tasks() -> None:
    """Wait until no session task is left (use under ``fail_after``).

    Call it once the sessions are known to be closed: what is left to run
    then is only cancellation unwinding, which needs no I/O.
    """
    while True:
        await trio.testing.wait_all_tasks_blocked()
        if not session_task_names():
            return
        await trio.sleep(0.001)


async def wait_for(predicate: Callable[[], bool]) -> None:
    """Poll ``predicate`` until it is true (use under ``fail_after``)."""
    while not predicate():
        await trio.sleep(0.001)


async def new_session(server: rstreams.Server, known: Iterable[rstreams.Session] = ()) -> rstreams.Session:
    """The first server session not in ``known`` (waits for it)."""
    known = set(known)
    while True:
        fresh = [session for session in server.sessions if session not in known]
        if fresh:
            assert len(fresh) == 1, fresh
            return fresh[0]
        await trio.sleep(0.001)


def stack_depth() -> int:
    depth = 0
    frame = sys._getframe(1)
    while frame is not None:
        depth += 1
        frame = frame.f_back  # type: ignore[assignment]
    return depth


# ---- a peer driven by hand ------------------------------------------------


class PeerClosed(Exception):
    """The other side closed the connection."""


class RawPeer:
    """One end of a connection, written and read message by message."""

    def __init__(self, stream: trio.abc.Stream) -> None:
        self.stream = stream
        self._decoder = MessageDecoder()
        self._pending: deque[Message] = deque()
        self.eof = False

    async def send(self, *messages: Message) -> None:
        await self.stream.send_all(b"".join(encode(message) for message in messages))

    async def send_raw(self, data: bytes) -> None:
        await self.stream.send_all(data)

    async def receive(self) -> Message:
        """The next message; PeerClosed at end of stream."""
        while not self._pending:
            if self.eof:
                raise PeerClosed
            try:
                data = await self.stream.receive_some(65536)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                data = b""
            if not data:
                self.eof = True
                continue
            self._decoder.feed(data)
            self._pending.extend(self._decoder)
        return self._pending.popleft()

    async def expect(self, message_type: type) -> Message:
        """The next message, which must be of ``message_type``."""
        message = await self.receive()
        assert isinstance(message, message_type), f"expected {message_type.__name__}, got {message!r}"
        return message

    async def receive_until(self, message_type: type) -> list[Message]:
        """Every message up to and including the first of ``message_type``."""
        messages: list[Message] = []
        while True:
            message = await self.receive()
            messages.append(message)
            if isinstance(message, message_type):
                return messages

    async def rest(self) -> list[Message]:
        """Every message until the peer closes the connection."""
        messages: list[Message] = []
        while True:
            try:
                messages.append(await self.receive())
            except PeerClosed:
                return messages

    async def expect_goodbye_and_close(self) -> str:
        """Read to end of stream; there must be exactly one goodbye, last. Its reason."""
        messages = await self.rest()
        assert messages and isinstance(messages[-1], Goodbye), messages
        assert sum(isinstance(m, Goodbye) for m in messages) == 1, messages
        return messages[-1].reason

    async def answer_goodbye(self) -> None:
        """Read until the peer's goodbye (or end of stream), answer it, close."""
        try:
            await self.receive_until(Goodbye)
            await self.send(Goodbye(reason="goodbye"))
        except (PeerClosed, trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        await self.aclose()

    async def handshake(self) -> None:
        """Send our hello and read the peer's."""
        await self.send(Hello())
        await self.expect(Hello)

    async def aclose(self) -> None:
        await trio.aclose_forcefully(self.stream)


# ---- a wire tap -------------------------------------------------------------


class TapStream(trio.abc.Stream):
    """A stream that records every message written and read through it."""

    def __init__(self, stream: trio.abc.Stream) -> None:
        self._stream = stream
        self._sent_decoder = MessageDecoder()
        self._received_decoder = MessageDecoder()
        self.sent: list[Message] = []
        self.received: list[Message] = []

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        self._sent_decoder.feed(bytes(data))
        self.sent.extend(self._sent_decoder)
        await self._stream.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self._stream.wait_send_all_might_not_block()

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        data = await self._stream.receive_some(max_bytes)
        self._received_decoder.feed(bytes(data))
        self.received.extend(self._received_decoder)
        return data

    async def aclose(self) -> None:
        await self._stream.aclose()


@asynccontextmanager
async def tapped_pair(
    client_app: rstreams.Router | None = None,
    server_app: rstreams.Router | None = None,
    *,
    config: rstreams.SessionConfig = rstreams.SessionConfig(),
) -> AsyncIterator[tuple[rstreams.Session, rstreams.Session, TapStream]]:
    """Like ``session_pair`` over memory streams, with a tap on the client's stream."""
    client_stream, server_stream = trio.testing.memory_stream_pair()
    tap = TapStream(client_stream)
    async with rstreams.open_stream_session(server_stream, app=server_app, config=config) as server:
        async with rstreams.open_stream_session(tap, app=client_app, config=config) as client:
            yield client, server, tap


# ---- an instrumented publisher ----------------------------------------------


class Probe:
    """An endless publisher that records what happens to it.

    ``probe.publisher`` sends 0, 1, 2, ... (4-byte elements) for as long as
    there is demand; ``started`` is set on entry, ``cancelled`` when it sees
    ``trio.Cancelled``, ``finished`` whenever it exits. ``sent`` counts the
    elements ``sink.send`` accepted.
    """

    def __init__(self) -> None:
        self.started = trio.Event()
        self.cancelled = trio.Event()
        self.finished = trio.Event()
        self.sent = 0
        self.max_demand = 0
        self.sink: rstreams.Sink | None = None

    async def publisher(self, sink: rstreams.Sink) -> None:
        self.sink = sink
        self.started.set()
        try:
            while True:
                self.max_demand = max(self.max_demand, sink.demand)
                await sink.send(u32(self.sent))
                self.sent += 1
        except trio.Cancelled:
            self.cancelled.set()
            raise
        finally:
            self.finished.set()
