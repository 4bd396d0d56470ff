"""The bridge kit, through a tiny bridge of its own: a line protocol.

The protocol (sans-I/O, below) speaks newline-terminated ASCII lines: each
side says ``HELLO`` first; ``PING`` is answered with ``PONG`` by the machine
itself; ``DATA <text>`` carries data, ``BYE`` ends normally, ``ERR <text>``
ends with an error; any other line is a violation (the machine queues
``ERR protocol`` and raises a ``RemoteProtocolError``). ``LineConnection``
runs it on :class:`bridges.kit.BridgeConnection`, and the tests drive the
other side by hand (``RawLinePeer``) over trio's memory streams, or over TCP
on 127.0.0.1 for the server. Timeouts run on trio's MockClock.
"""

from __future__ import annotations

import math
import re
import ssl
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any
from urllib.parse import parse_qsl

import pytest
import trio
import trio.testing
from hypothesis import given, settings as hypothesis_settings
from hypothesis import strategies as st

import rstreams
from rstreams.protocol import EMPTY_ELEMENT_BYTES
from bridges.kit import (
    ITEM_COST,
    BatchesWithinBudget,
    BridgeConnection,
    BridgeError,
    BridgePeer,
    BridgeServer,
    InboundQueue,
    LinkSettings,
    PendingCall,
    PendingCalls,
    ListenerService,
    MemoryBudget,
    RequestSlots,
    ResponseTooLarge,
    SendWindow,
    collect_elements,
    next_ask,
    open_bridge_peer,
    open_connection,
)
from bridges.machine import ProtocolMachine
from helpers import (
    TCP_CONGESTION,
    another_allowed_congestion_control,
    choose_congestion_control,
    congestion_control,
    host_congestion_control,
)
from rstreams.support import HANDSHAKE_GRACE, StreamFeed

# ---- the line protocol: errors, events, machine ---------------------------------


class LineError(BridgeError):
    """Base of the line bridge's errors."""


class LineClosed(LineError):
    def __init__(self, message: str, *, by_peer: bool) -> None:
        super().__init__(message)
        self.by_peer = by_peer


class LinePeerError(LineError):
    def __init__(self, text: str) -> None:
        super().__init__(f"the peer said: {text}")
        self.text = text


class LineLost(LineError):
    pass


class LineTimeout(LineError):
    pass


class LineProtocolError(LineError, rstreams.RemoteProtocolError):
    pass


class LineStreamLost(rstreams.SubscriptionError):
    pass


@dataclass(frozen=True)
class Hello:
    pass


@dataclass(frozen=True)
class Pong:
    pass


@dataclass(frozen=True)
class Bye:
    pass


@dataclass(frozen=True)
class Data:
    text: str


@dataclass(frozen=True)
class Err:
    text: str


@dataclass(frozen=True)
class ConnectionClosed:
    pass


_LINE_EVENTS: dict[str, type] = {"HELLO": Hello, "PONG": Pong, "BYE": Bye}


class LineMachine(ProtocolMachine[Any, LineProtocolError]):
    """Bytes in, events out; calls in, bytes out. One event per ``events()`` call.

    Built on ``bridges.machine.ProtocolMachine``, as a bridge's machine is:
    the base holds the output and the order of events and violations.
    """

    def __init__(self) -> None:
        super().__init__(LineProtocolError, output=b"HELLO\n")
        self._inbox = bytearray()
        self._eof = False
        self._eof_reported = False

    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        if data:
            self._inbox += data
        else:
            self._eof = True

    def events(self) -> list[Any]:
        return self._take_events()

    def _parse(self, events: list[Any]) -> None:
        while (end := self._inbox.find(b"\n")) >= 0:
            line = bytes(self._inbox[:end]).decode("ascii", "replace")
            del self._inbox[: end + 1]
            if line == "PING":
                self._outbound += b"PONG\n"
                continue
            event = _LINE_EVENTS.get(line)
            if event is not None:
                events.append(event())
                return
            if line.startswith("DATA "):
                events.append(Data(line[5:]))
                return
            if line.startswith("ERR "):
                events.append(Err(line[4:]))
                return
            raise LineProtocolError(f"unexpected line {line!r}")
        if self._eof and not self._eof_reported:
            self._eof_reported = True
            if self._inbox:
                # (As EMP, Epoxy and MicroMsg2 machines do: a violation.)
                raise LineProtocolError(f"connection closed in the middle of a line ({len(self._inbox)} bytes)")
            events.append(ConnectionClosed())

    def _fail(self, error: LineProtocolError) -> None:
        self._outbound += b"ERR protocol\n"

    def send_line(self, line: str) -> None:
        self._outbound += line.encode("ascii") + b"\n"

    @property
    def buffered_input_size(self) -> int:
        return len(self._inbox)

    def fail_memory_budget(self, message: str) -> BaseException:
        self.send_line(f"ERR {message}")
        return LineProtocolError(message)


QUIET = LinkSettings(keepalive_interval=None)


def settings(**changes: Any) -> LinkSettings:
    return LinkSettings(**{"keepalive_interval": None, **changes})


class LineConnection(BridgeConnection[LineMachine, LinkSettings]):
    """The line protocol over a trio stream; data lines come out of :meth:`take`."""

    def __init__(self, stream: trio.abc.Stream, config: LinkSettings = QUIET) -> None:
        super().__init__(stream, LineMachine(), config)
        self.data: InboundQueue[str] = InboundQueue(self)

    def _dispatch(self, event: Any) -> None:
        if isinstance(event, Hello):
            self._handshake_complete()
        elif isinstance(event, Pong):
            self._pong_received()
        elif isinstance(event, Data):
            self.data.put(event.text, len(event.text))
        elif isinstance(event, Bye):
            self._finish(LineClosed("the peer said bye", by_peer=True), normal=True)
        elif isinstance(event, Err):
            self._finish(LinePeerError(event.text))
        elif isinstance(event, ConnectionClosed):
            self._finish(self._lost("the peer closed the connection"))

    def _say_goodbye(self) -> None:
        self._machine.send_line("BYE")

    def _closed_locally(self) -> BaseException:
        return LineClosed("closed by this side", by_peer=False)

    def _lost(self, message: str) -> BaseException:
        return LineLost(message)

    def _queue_ping(self) -> None:
        self._machine.send_line("PING")

    def _ping_timed_out(self) -> BaseException:
        self._machine.send_line("ERR timeout")
        return LineTimeout(f"no pong within {self.config.ping_timeout} s")

    def _handshake_timed_out(self) -> BaseException:
        self._machine.send_line("ERR timeout")
        return LineTimeout(f"no hello within {self.config.handshake_timeout} s")

    async def take(self) -> str:
        return await self.data.take()

    async def send_data(self, text: str) -> None:
        await trio.lowlevel.checkpoint_if_cancelled()
        self._check_open()
        self._machine.send_line(f"DATA {text}")
        await self._send_queued()

    async def ping(self) -> None:
        await trio.lowlevel.checkpoint_if_cancelled()
        self._check_open()
        await self._start_ping().wait()
        self._check_open()


class RawLinePeer:
    """The other side, driven line by line."""

    def __init__(self, stream: trio.abc.Stream) -> None:
        self.stream = stream
        self._buffer = bytearray()
        self.eof = False

    async def send(self, *lines: str) -> None:
        await self.stream.send_all(b"".join(line.encode("ascii") + b"\n" for line in lines))

    async def receive(self) -> str | None:
        """The next line, or None at end of file."""
        while True:
            end = self._buffer.find(b"\n")
            if end >= 0:
                line = bytes(self._buffer[:end]).decode("ascii")
                del self._buffer[: end + 1]
                return line
            if self.eof:
                return None
            try:
                data = await self.stream.receive_some(65536)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                data = b""
            if not data:
                self.eof = True
            self._buffer += data

    async def receive_until_eof(self) -> list[str]:
        lines = []
        while (line := await self.receive()) is not None:
            lines.append(line)
        return lines


def line_pair(config: LinkSettings = QUIET) -> tuple[LineConnection, RawLinePeer]:
    ours, theirs = trio.testing.memory_stream_pair()
    return LineConnection(ours, config), RawLinePeer(theirs)


class RecordingStream(trio.abc.Stream):
    """Delegates to ``inner``; records every ``send_all``; can be made to fail writes."""

    def __init__(self, inner: trio.abc.Stream) -> None:
        self.inner = inner
        self.sent: list[bytes] = []
        self.broken = False

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        if self.broken:
            await trio.lowlevel.checkpoint()
            raise trio.BrokenResourceError("connection reset by peer")
        self.sent.append(bytes(data))
        await self.inner.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self.inner.wait_send_all_might_not_block()

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        return await self.inner.receive_some(max_bytes)

    async def aclose(self) -> None:
        await self.inner.aclose()


def u32(value: int) -> bytes:
    return value.to_bytes(4, "big")


# ---- handshake ------------------------------------------------------------------


async def test_handshake_completes_and_leaving_says_bye() -> None:
    connection, peer = line_pair()
    with trio.fail_after(5):
        await peer.send("HELLO")
        async with open_connection(connection) as opened:
            assert opened is connection
            assert await peer.receive() == "HELLO"
            assert not connection.ended and connection.end_reason is None
        assert await peer.receive_until_eof() == ["BYE"]
    assert connection.ended
    assert isinstance(connection.end_reason, LineClosed) and not connection.end_reason.by_peer


async def test_handshake_timeout(autojump_clock: trio.testing.MockClock) -> None:
    connection, peer = line_pair(settings(handshake_timeout=4))
    with trio.fail_after(60):
        with pytest.raises(LineTimeout, match="no hello within 4"):
            async with open_connection(connection):
                pytest.fail("the handshake cannot complete")  # pragma: no cover
        assert trio.current_time() == pytest.approx(4)
        assert connection.ended and isinstance(connection.end_reason, LineTimeout)
        assert await peer.receive_until_eof() == ["HELLO", "ERR timeout"]


async def test_error_instead_of_hello_fails_the_handshake() -> None:
    connection, peer = line_pair()
    with trio.fail_after(5):
        await peer.send("ERR go away")
        with pytest.raises(LinePeerError) as info:
            async with open_connection(connection):
                pytest.fail("the handshake cannot complete")  # pragma: no cover
        assert info.value.text == "go away"
        assert info.value is not connection.end_reason  # a copy
        assert await peer.receive_until_eof() == ["HELLO"]


# ---- the reader: paced by waiters ------------------------------------------------


async def test_reader_reads_only_while_someone_waits() -> None:
    connection, peer = line_pair(settings(receive_size=16))
    with trio.fail_after(5):
        # HELLO is 6 bytes and each data line 10: the handshake's one read
        # (16 bytes) holds HELLO and exactly one data line.
        await peer.send("HELLO", *(f"DATA {i:04}" for i in range(50)))
        async with open_connection(connection):
            await trio.testing.wait_all_tasks_blocked()
            assert connection.bytes_received == 16
            assert connection.buffered_bytes == ITEM_COST + 4
            await peer.send(*(f"DATA {i:04}" for i in range(50, 500)))
            await trio.testing.wait_all_tasks_blocked()
            assert connection.bytes_received == 16  # nobody waits: nothing is read
            assert await connection.take() == "0000"  # held: taken without reading
            assert connection.bytes_received == 16
            assert connection.buffered_bytes == 0  # released on take
            for taken in range(2, 12):
                assert await connection.take() == f"{taken - 1:04}"
                await trio.testing.wait_all_tasks_blocked()
                # Just the reads that item needed, 16 bytes at a time.
                assert connection.bytes_received == 16 * -(-(6 + 10 * taken) // 16), taken
                held = len(connection.data)
                assert connection.buffered_bytes == held * (ITEM_COST + 4)


async def test_take_held_hands_over_what_one_read_brought_up_to_a_limit_and_a_stop() -> None:
    # One read brings HELLO and seven data lines; after one take, take_held
    # gives the held ones without reading, at most ``limit``, and stops at
    # the first the predicate refuses (an end, for a protocol), releasing
    # what it took from max_read_ahead.
    connection, peer = line_pair()
    with trio.fail_after(5):
        await peer.send("HELLO", *(f"DATA {i}" for i in range(5)), "DATA end", "DATA 7")
        async with open_connection(connection):
            assert await connection.take() == "0"
            await trio.testing.wait_all_tasks_blocked()
            received = connection.bytes_received
            assert len(connection.data) == 6
            assert connection.data.take_held(2, str.isdigit) == ["1", "2"]
            assert connection.buffered_bytes == 2 * (ITEM_COST + 1) + ITEM_COST + 3 + ITEM_COST + 1
            assert connection.data.take_held(10, str.isdigit) == ["3", "4"]  # not "end"
            assert connection.data.take_held(10, str.isdigit) == []
            assert connection.data.take_held(0, lambda _: True) == []
            assert len(connection.data) == 2
            assert await connection.take() == "end"
            assert connection.data.take_held(5, str.isdigit) == ["7"]
            assert connection.buffered_bytes == 0
            assert connection.bytes_received == received  # never read for them


@hypothesis_settings(max_examples=200, deadline=None)
@given(
    steps=st.lists(
        st.one_of(
            st.tuples(st.just("put"), st.text(alphabet="ab01", max_size=3)),
            st.tuples(st.just("take_held"), st.integers(0, 5)),
        ),
        max_size=40,
    )
)
def test_take_held_follows_its_model(steps: list[tuple[str, Any]]) -> None:
    # Against a model list: take_held gives the held items in order, at most
    # its limit, stopping at the first the predicate refuses (here: not all
    # digits), and what stays held is exactly what counts against the
    # read-ahead and the budget.
    connection, _ = line_pair()
    queue = connection.data
    model: list[str] = []
    for op, argument in steps:
        if op == "put":
            queue.put(argument, len(argument))
            model.append(argument)
        else:
            expected: list[str] = []
            while model and len(expected) < argument and model[0].isdigit():
                expected.append(model.pop(0))
            assert queue.take_held(argument, str.isdigit) == expected
        assert len(queue) == len(model)
        assert connection.buffered_bytes == sum(ITEM_COST + len(item) for item in model)
        assert connection.budget.used == connection.buffered_bytes


async def test_read_ahead_bound_stops_reading_even_with_a_waiter() -> None:
    # A ping waits for its pong, but what was read already (8 data lines)
    # is at the bound: the reader waits until the application takes it.
    connection, peer = line_pair(settings(receive_size=64, max_read_ahead=1))
    with trio.fail_after(5):
        await peer.send("HELLO", *(f"DATA {i:02}" for i in range(20)))  # 6 + 20 * 8 bytes
        async with open_connection(connection):
            assert await peer.receive() == "HELLO"
            await trio.testing.wait_all_tasks_blocked()
            assert connection.bytes_received == 64
            assert len(connection.data) == 7
            pinged = trio.Event()

            async def ping() -> None:
                await connection.ping()
                pinged.set()

            async with trio.open_nursery() as nursery:
                nursery.start_soon(ping)
                assert await peer.receive() == "PING"
                await peer.send("PONG")  # behind the data lines
                await trio.testing.wait_all_tasks_blocked()
                assert connection.bytes_received == 64  # the bound wins over the waiter
                for i in range(6):
                    assert await connection.take() == f"{i:02}"
                    await trio.testing.wait_all_tasks_blocked()
                    assert connection.bytes_received == 64  # still one held
                assert not pinged.is_set()
                assert await connection.take() == "06"
                await trio.testing.wait_all_tasks_blocked()
                assert connection.bytes_received == 128  # free again: one more read
                for i in range(7, 20):
                    assert await connection.take() == f"{i:02}"
                await pinged.wait()
            assert not connection.ended


async def test_a_detached_queue_hands_back_what_it_held_and_is_read_for_no_more() -> None:
    connection, peer = line_pair(settings(receive_size=16))
    with trio.fail_after(5):
        await peer.send("HELLO", "DATA 0000")  # one read of 16 bytes holds both
        async with open_connection(connection):
            await trio.testing.wait_all_tasks_blocked()
            assert connection.buffered_bytes == ITEM_COST + 4
            assert connection.data.detach() == ["0000"]
            assert connection.buffered_bytes == 0 and len(connection.data) == 0
            assert connection.data.detach() == []  # twice is harmless
            await peer.send("DATA 0001")
            async with trio.open_nursery() as nursery:
                # A taker of a detached queue does not make the reader read.
                nursery.start_soon(connection.take)
                await trio.testing.wait_all_tasks_blocked()
                assert connection.bytes_received == 16
                nursery.cancel_scope.cancel()


# ---- the writer --------------------------------------------------------------------


async def test_sends_coalesce_into_one_write() -> None:
    ours, theirs = trio.testing.memory_stream_pair()
    recording = RecordingStream(ours)
    peer = RawLinePeer(theirs)
    with trio.fail_after(5):
        await peer.send("HELLO")
        async with open_connection(LineConnection(recording)) as connection:
            await trio.testing.wait_all_tasks_blocked()
            assert recording.sent == [b"HELLO\n"]
            for text in ("a", "b", "c"):
                await connection.send_data(text)
            await trio.testing.wait_all_tasks_blocked()
            assert recording.sent == [b"HELLO\n", b"DATA a\nDATA b\nDATA c\n"]
            assert connection.bytes_sent == 6 + 21
        assert await peer.receive_until_eof() == ["HELLO", "DATA a", "DATA b", "DATA c", "BYE"]


async def test_a_send_waits_past_max_write_buffer() -> None:
    # Lockstep streams have no buffer: a write completes only as the peer reads.
    ours, theirs = trio.testing.lockstep_stream_pair()
    connection = LineConnection(ours, settings(max_write_buffer=20))
    peer = RawLinePeer(theirs)
    big = "b" * 20  # "DATA " + 20 + "\n" = 26 bytes
    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(peer.send, "HELLO")
            async with open_connection(connection):
                await trio.testing.wait_all_tasks_blocked()
                assert connection.bytes_sent == 0  # our HELLO waits for the peer to read
                await connection.send_data("a")  # 6 + 7 = 13 unwritten: within the bound
                sent = trio.Event()

                async def send_big() -> None:
                    await connection.send_data(big)  # 39 unwritten: past the bound
                    sent.set()

                nursery.start_soon(send_big)
                await trio.testing.wait_all_tasks_blocked()
                assert not sent.is_set()
                assert await theirs.receive_some() == b"HELLO\n"
                await trio.testing.wait_all_tasks_blocked()
                assert connection.bytes_sent == 6
                assert not sent.is_set()  # 33 still unwritten
                # Both queued messages go out in one write.
                assert await theirs.receive_some() == f"DATA a\nDATA {big}\n".encode()
                await sent.wait()
                assert connection.bytes_sent == 39
                nursery.start_soon(peer.receive_until_eof)  # takes our BYE


async def test_wait_writable_or_ended_returns_once_the_connection_ended() -> None:
    # A sender on a link that outlives its connections (Relink) looks for the
    # next connection once this one has ended: or_ended returns then, neither
    # waiting for the last words nor raising. Any other waiter waits for its
    # bytes, and gets the end error once they cannot go.
    ours, theirs = trio.testing.lockstep_stream_pair()
    connection = LineConnection(ours, settings(max_write_buffer=0, close_timeout=0.2))
    results: list[tuple[bool, object]] = []

    async def wait(or_ended: bool) -> None:
        try:
            await connection.wait_writable(or_ended=or_ended)
        except LineLost as exc:
            results.append((or_ended, exc.args))
        else:
            results.append((or_ended, "returned"))

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(theirs.send_all, b"HELLO\n")
            async with open_connection(connection):
                # Our HELLO is queued and stays unwritten: the peer reads nothing.
                nursery.start_soon(wait, True)
                nursery.start_soon(wait, False)
                await trio.testing.wait_all_tasks_blocked()
                assert results == []
                connection._finish(LineLost("gone"))
                await trio.testing.wait_all_tasks_blocked()
                assert results == [(True, "returned")]
        assert results == [(True, "returned"), (False, ("gone",))]


async def test_ctrl_c_reaches_the_callers_task_not_the_connections_own(autojump_clock: trio.testing.MockClock) -> None:
    # The connection's reader, writer, keepalive and idle watch are protected
    # from KeyboardInterrupt, as a session's and trio's own machinery are:
    # Ctrl-C raised inside one (a busy reader often is the running task)
    # ended the connection from within, and the caller's task waiting on it
    # met the connection's end next to the KeyboardInterrupt. Each notes
    # whether it ran protected where it calls the transport or the protocol.
    protected: dict[str, set[bool]] = {}

    def note(name: str) -> None:
        protected.setdefault(name, set()).add(trio.lowlevel.currently_ki_protected())

    class Watched(RecordingStream):
        async def send_all(self, data: bytes | bytearray | memoryview) -> None:
            note("writer")
            await super().send_all(data)

        async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
            note("reader")
            return await super().receive_some(max_bytes)

    class Noting(LineConnection):
        def _queue_ping(self) -> None:
            note("keepalive")
            super()._queue_ping()

        def _holds_open(self) -> bool:
            note("idle watch")
            return False

    # The keepalive's ping goes unanswered; the idle watch ends a connection
    # with nothing open (each ends its connection before the other would).
    for ending, changes, error in (
        ("keepalive", {"keepalive_interval": 5, "ping_timeout": 3}, LineTimeout),
        ("idle watch", {"idle_timeout": 4}, TimeoutError),
    ):
        ours, theirs = trio.testing.memory_stream_pair()
        connection = Noting(Watched(ours), settings(**changes))
        with trio.fail_after(100):
            await RawLinePeer(theirs).send("HELLO")
            async with open_connection(connection):
                with pytest.raises(error):
                    await connection.take()  # (one waits, so the connection reads)
        assert ending in protected
    assert protected == {"writer": {True}, "reader": {True}, "keepalive": {True}, "idle watch": {True}}


# ---- keepalive (MockClock) ------------------------------------------------------------


async def test_keepalive_pings_every_interval(autojump_clock: trio.testing.MockClock) -> None:
    connection, peer = line_pair(settings(keepalive_interval=5, ping_timeout=3))
    with trio.fail_after(100):
        await peer.send("HELLO")
        async with open_connection(connection):
            start = trio.current_time()
            assert await peer.receive() == "HELLO"
            for beat in (1, 2, 3):
                assert await peer.receive() == "PING"
                assert trio.current_time() - start == pytest.approx(5 * beat + 1 * (beat - 1))
                await trio.sleep(1)
                await peer.send("PONG")
            assert not connection.ended
        assert await peer.receive_until_eof() == ["BYE"]


async def test_missing_pong_ends_the_connection(autojump_clock: trio.testing.MockClock) -> None:
    connection, peer = line_pair(settings(keepalive_interval=5, ping_timeout=3))
    with trio.fail_after(100):
        await peer.send("HELLO")
        async with open_connection(connection):
            start = trio.current_time()
            assert await peer.receive() == "HELLO"
            assert await peer.receive() == "PING"
            with pytest.raises(LineTimeout, match="no pong within 3"):
                await connection.take()
            assert trio.current_time() - start == pytest.approx(8)
            assert isinstance(connection.end_reason, LineTimeout)
        assert await peer.receive_until_eof() == ["ERR timeout"]


@pytest.mark.parametrize("when_idle", [False, True])
async def test_keepalive_when_idle_waits_for_silence(autojump_clock: trio.testing.MockClock, when_idle: bool) -> None:
    connection, peer = line_pair(settings(keepalive_interval=5, ping_timeout=3, keepalive_when_idle=when_idle))
    pings: list[float] = []
    with trio.fail_after(100):
        await peer.send("HELLO")
        async with open_connection(connection):
            start = trio.current_time()

            async def answer() -> None:
                while (line := await peer.receive()) is not None:
                    if line == "PING":
                        pings.append(trio.current_time() - start)
                        await peer.send("PONG")

            async def consume() -> None:
                while True:
                    await connection.take()

            async with trio.open_nursery() as nursery:
                nursery.start_soon(answer)
                nursery.start_soon(consume)
                for i in range(10):  # data every 2 s, the last at 18 s
                    await peer.send(f"DATA {i}")
                    await trio.sleep(2)
                await trio.sleep(8)  # then 8 s of silence
                nursery.cancel_scope.cancel()
            assert not connection.ended
    if when_idle:
        assert pings == [pytest.approx(23)]  # 5 s after the last input
    else:
        assert pings == [pytest.approx(t) for t in (5, 10, 15, 20, 25)]  # on a fixed beat


# ---- how it ends ------------------------------------------------------------------------


async def test_aclose_says_bye_and_takers_drain_then_see_end_of_channel() -> None:
    connection, peer = line_pair()
    with trio.fail_after(5):
        await peer.send("HELLO", "DATA a", "DATA b")
        async with open_connection(connection):
            assert await connection.take() == "a"  # one read: "b" is held too
            assert len(connection.data) == 1
            await connection.aclose()
            assert connection.ended
            assert await connection.take() == "b"
            for _ in range(2):
                with pytest.raises(trio.EndOfChannel):
                    await connection.take()
            with pytest.raises(LineClosed) as info:
                await connection.send_data("too late")
            assert not info.value.by_peer
            await connection.aclose()  # idempotent
        assert await peer.receive_until_eof() == ["HELLO", "BYE"]


async def test_the_peers_bye_is_a_normal_end_and_is_not_answered() -> None:
    connection, peer = line_pair()
    with trio.fail_after(5):
        await peer.send("HELLO")
        async with open_connection(connection):
            await peer.send("DATA last", "BYE")
            assert await connection.take() == "last"
            with pytest.raises(trio.EndOfChannel):
                await connection.take()
            assert isinstance(connection.end_reason, LineClosed) and connection.end_reason.by_peer
        assert await peer.receive_until_eof() == ["HELLO"]


async def test_hello_data_and_bye_in_one_read() -> None:
    connection, peer = line_pair()
    with trio.fail_after(5):
        await peer.send("HELLO", "DATA last", "BYE")
        async with open_connection(connection):
            assert await connection.take() == "last"
            with pytest.raises(trio.EndOfChannel):
                await connection.take()
            assert isinstance(connection.end_reason, LineClosed) and connection.end_reason.by_peer
        assert await peer.receive_until_eof() == ["HELLO"]


ENDINGS = {
    "peer error": ("ERR boom", LinePeerError, ["HELLO"]),
    "protocol violation": ("WHAT", LineProtocolError, ["HELLO", "ERR protocol"]),
    "end of file": (None, LineLost, None),
}


@pytest.mark.parametrize("ending", list(ENDINGS))
async def test_every_waiter_gets_its_own_typed_error(ending: str) -> None:
    line, expected, answer = ENDINGS[ending]
    connection, peer = line_pair()
    errors: list[BaseException] = []
    with trio.fail_after(5):
        await peer.send("HELLO")
        async with open_connection(connection):

            async def waiter() -> None:
                with pytest.raises(expected) as info:
                    await connection.take()
                errors.append(info.value)

            async with trio.open_nursery() as nursery:
                for _ in range(3):
                    nursery.start_soon(waiter)
                await trio.testing.wait_all_tasks_blocked()
                assert not errors
                if line is None:
                    await peer.stream.aclose()
                else:
                    await peer.send(line)
            assert len(errors) == 3
            reason = connection.end_reason
            assert isinstance(reason, expected)
            assert len({id(error) for error in [*errors, reason]}) == 4  # copy_error: one object each
            assert all(error.args == reason.args for error in errors)
            with pytest.raises(expected):
                await connection.send_data("after the end")
        if answer is not None:
            assert await peer.receive_until_eof() == answer
    if ending == "protocol violation":
        assert isinstance(reason, rstreams.RemoteProtocolError)
        assert "WHAT" in str(reason)
    if ending == "peer error":
        assert all(error.text == "boom" for error in errors)  # type: ignore[attr-defined]


async def test_end_of_file_in_the_middle_of_a_message_is_a_lost_connection() -> None:
    # The machine calls a message cut short by end of file a violation; the
    # application sees what happened to it, a connection lost in the middle
    # of a message (as over tcp:// and Relink), the violation as its cause.
    # It was the violation itself: `rstreams sub` said the peer "broke the
    # protocol" (exit 1) when a connection dropped mid-message.
    connection, peer = line_pair()
    with trio.fail_after(5):
        await peer.send("HELLO")
        async with open_connection(connection):
            await peer.stream.send_all(b"DATA half a li")
            await peer.stream.aclose()
            with pytest.raises(LineLost, match=r"middle of a line \(14 bytes\)") as caught:
                await connection.take()
    assert isinstance(caught.value.__cause__, LineProtocolError)
    assert isinstance(connection.end_reason, LineLost)


@pytest.mark.parametrize("idle", [45, None])
async def test_tcp_keepalive_finds_a_peer_that_vanished_without_a_word(idle: int | None) -> None:
    # A protocol with no ping (MicroMsg2, Epoxy) would hold the connection of
    # a peer that lost power for ever: the kernel probes it instead, after
    # tcp_keepalive seconds of silence (None: the host's default, off).
    import socket

    [listener] = await trio.open_tcp_listeners(0, host="127.0.0.1")
    async with listener:
        client = await trio.open_tcp_stream("127.0.0.1", listener.socket.getsockname()[1])
        server = await listener.accept()
        async with client, server:
            LineConnection(server, settings(tcp_keepalive=idle))
            sock = server.socket
            assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == (1 if idle else 0)
            if idle:
                assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE) == idle
                assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL) == 10
                assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT) == 6
    for value in (0, -1, 1.5, 40000, "60"):
        with pytest.raises(ValueError, match="tcp_keepalive"):
            settings(tcp_keepalive=value)


async def test_input_the_machine_holds_counts_against_the_budget_by_default() -> None:
    # A line that never ends stays in the machine's inbox. The kit counts it
    # through the machine's buffered_input_size and, past the budget, ends
    # the connection with the machine's fail_memory_budget: no override.
    connection, peer = line_pair(settings(max_connection_memory=4096, receive_size=1024))
    with trio.fail_after(5):
        await peer.send("HELLO")
        async with open_connection(connection):
            with pytest.raises(LineProtocolError, match="memory budget exceeded"):
                await peer.stream.send_all(b"DATA " + b"x" * 8192)  # no newline
                await connection.take()
        assert isinstance(connection.end_reason, LineProtocolError)
        answer = await peer.receive_until_eof()
    assert answer[0] == "HELLO" and answer[1].startswith("ERR memory budget exceeded")


def test_a_machine_the_budget_cannot_ask_is_refused_with_what_to_add() -> None:
    # A machine with only the four members the kit asked for before it
    # counted held input by default: refused when the connection is made,
    # naming what to add, not in the reader mid-connection.
    class BareMachine:
        def receive_data(self, data: bytes | bytearray | memoryview) -> None:
            pass

        def events(self) -> Sequence[Any]:
            return []

        @property
        def has_data_to_send(self) -> bool:
            return False

        def data_to_send(self) -> bytes:
            return b""

    class BareConnection(BridgeConnection[Any, LinkSettings]):
        def _dispatch(self, event: Any) -> None:
            pass

    class CountingConnection(BareConnection):
        def _input_held_by_machine(self) -> int:
            return 0

    class AnsweringConnection(CountingConnection):
        def _memory_budget_exceeded(self, message: str) -> BaseException:
            return LineProtocolError(message)

    ours, _ = trio.testing.memory_stream_pair()
    with pytest.raises(TypeError, match="BareMachine has no buffered_input_size.*override _input_held_by_machine"):
        BareConnection(ours, BareMachine(), QUIET)
    with pytest.raises(TypeError, match="BareMachine has no fail_memory_budget.*override _memory_budget_exceeded"):
        CountingConnection(ours, BareMachine(), QUIET)
    AnsweringConnection(ours, BareMachine(), QUIET)  # the connection answers both itself
    LineConnection(ours)  # the line machine has both members


async def test_pending_calls_by_id() -> None:
    connection, peer = line_pair()
    with trio.fail_after(5):
        await peer.send("HELLO")
        async with open_connection(connection):
            calls: PendingCalls[str] = PendingCalls()
            first, second, third = (PendingCall[str](connection, len) for _ in range(3))
            for call_id, call in enumerate((first, second, third), start=1):
                calls.add(call_id, call)
            assert calls.waiting and len(calls) == 3
            calls.deliver(2, "two")
            calls.deliver(2, "again")  # that call has its response: dropped
            calls.deliver(9, "nobody's")  # no such call: dropped, as the protocols allow
            assert calls.waiting and len(calls) == 2
            assert await second.response() == "two"
            assert connection.buffered_bytes == 0  # the response was counted until taken
            first.abandon()
            calls.deliver(1, "late")  # abandoned: dropped, never counted
            assert connection.buffered_bytes == 0 and len(calls) == 1
            calls.fail_all(LineLost("gone"))
            assert not calls.waiting and len(calls) == 0
            with pytest.raises(LineLost, match="gone"):
                await third.response()


async def test_a_failed_write_ends_the_connection_as_lost(autojump_clock: trio.testing.MockClock) -> None:
    ours, theirs = trio.testing.memory_stream_pair()
    recording = RecordingStream(ours)
    peer = RawLinePeer(theirs)
    with trio.fail_after(60):
        await peer.send("HELLO")
        async with open_connection(LineConnection(recording, settings(max_write_buffer=0))) as connection:
            recording.broken = True
            with pytest.raises(LineLost, match="while writing"):
                await connection.send_data("x")
            assert isinstance(connection.end_reason, LineLost)
            with pytest.raises(LineLost):
                await connection.take()


async def test_the_peers_last_words_win_over_a_failed_write(autojump_clock: trio.testing.MockClock) -> None:
    ours, theirs = trio.testing.memory_stream_pair()
    recording = RecordingStream(ours)
    peer = RawLinePeer(theirs)
    with trio.fail_after(60):
        await peer.send("HELLO")
        async with open_connection(LineConnection(recording, settings(max_write_buffer=0))) as connection:
            await peer.send("ERR going away")  # unread: nobody waits for input
            await trio.testing.wait_all_tasks_blocked()
            assert not connection.ended
            recording.broken = True
            with pytest.raises(LinePeerError, match="going away"):
                await connection.send_data("x")


class FailingReadStream(RecordingStream):
    """Its reads fail as a TLS stream's do when the certificate does not verify."""

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        await trio.lowlevel.checkpoint()
        try:
            raise ssl.SSLCertVerificationError(1, "[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: self-signed certificate")
        except ssl.SSLError as exc:
            raise trio.BrokenResourceError from exc


async def test_a_lost_connection_says_why_from_the_cause() -> None:
    ours, _ = trio.testing.memory_stream_pair()
    with trio.fail_after(5):
        # A certificate that does not verify is a handshake that failed, not
        # a connection that was lost (trio's TLS handshakes on the first read).
        with pytest.raises(LineLost, match=r"^TLS handshake failed: \[SSL: CERTIFICATE_VERIFY_FAILED\] certificate verify failed: self-signed"):
            async with open_connection(LineConnection(FailingReadStream(ours), QUIET)):
                pytest.fail("the handshake cannot complete")  # pragma: no cover


def test_next_ask_shares_half_the_budget_among_the_subscriptions_open_now() -> None:
    mib = 1024 * 1024
    assert next_ask(64 * mib, 1, 0, 1024) == 1  # no element seen yet: one, to learn the size
    assert next_ask(64 * mib, 1, 65536, 1024) == 512  # alone: all of the half
    assert next_ask(64 * mib, 4, 65536, 1024) == 128  # four open: a quarter each
    assert next_ask(64 * mib, 0, 65536, 1024) == 512  # (none counted yet: as one)
    assert next_ask(64 * mib, 1, 8, 1024) == 1024  # small elements: the cap
    assert next_ask(64 * mib, 1, 8, 16) == 16
    assert next_ask(mib, 1, 4 * mib, 1024) == 1  # an element over the share: still one
    assert next_ask(1, 1, 1, 1024) == 1


# ---- SendWindow -------------------------------------------------------------------------


def test_send_window_arithmetic() -> None:
    window = SendWindow(3)
    assert (window.size, window.in_flight, window.available) == (3, 0, 3)
    window.acquire_nowait(2)
    assert (window.in_flight, window.available) == (2, 1)
    with pytest.raises(trio.WouldBlock):
        window.acquire_nowait(2)
    assert window.in_flight == 2  # nothing taken
    window.acquire_nowait()
    assert window.available == 0
    with pytest.raises(trio.WouldBlock):
        window.acquire_nowait()
    window.release(2)
    assert (window.in_flight, window.available) == (1, 2)
    with pytest.raises(ValueError):
        window.release(2)  # only one in flight
    with pytest.raises(ValueError):
        window.release(-1)
    window.release(0)
    assert window.in_flight == 1
    window.reset()
    assert (window.in_flight, window.available) == (0, 3)


@pytest.mark.parametrize("size", [0, -1, 1.5, True, "3", None])
def test_send_window_needs_a_positive_int(size: object) -> None:
    with pytest.raises(ValueError):
        SendWindow(size)  # type: ignore[arg-type]


async def test_send_window_wait_room_waits_for_one_and_takes_nothing() -> None:
    window = SendWindow(2)
    window.acquire_nowait(2)
    roomy = trio.Event()

    async def wait_room() -> None:
        await window.wait_room()
        roomy.set()

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(wait_room)
            await trio.testing.wait_all_tasks_blocked()
            assert not roomy.is_set()
            window.release(1)
            await roomy.wait()
        assert window.in_flight == 1  # nothing taken
        await window.wait_room()  # room now: returns at once
        window.acquire_nowait()
        window.close(RuntimeError("ended"))
        with pytest.raises(RuntimeError, match="ended"):
            await window.wait_room()


async def test_send_window_wait_room_can_keep_room_for_a_last_message() -> None:
    window = SendWindow(3)
    window.acquire_nowait(2)
    roomy = trio.Event()

    async def wait_room() -> None:
        await window.wait_room(keep=1)
        roomy.set()

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(wait_room)
            await trio.testing.wait_all_tasks_blocked()
            assert not roomy.is_set()  # one left, and it is kept
            window.acquire_nowait()  # the kept room is still there to take
            window.release(2)
            await roomy.wait()
    for keep in (-1, 3):
        with pytest.raises(ValueError, match="keep"):
            await window.wait_room(keep)


async def test_send_window_acquire_waits_for_release() -> None:
    window = SendWindow(3)
    window.acquire_nowait(3)
    acquired = trio.Event()

    async def acquire() -> None:
        await window.acquire(2)
        acquired.set()

    with trio.fail_after(5):
        for bad in (0, 4, -1):
            with pytest.raises(ValueError):
                await window.acquire(bad)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(acquire)
            await trio.testing.wait_all_tasks_blocked()
            assert not acquired.is_set()
            window.release(1)
            await trio.testing.wait_all_tasks_blocked()
            assert not acquired.is_set()  # room for 1, not 2
            assert window.in_flight == 2
            window.release(1)
            await acquired.wait()
        assert window.in_flight == 3
        # Cancelled while waiting: nothing is taken.
        with trio.move_on_after(0) as scope:
            await window.acquire(1)
        assert scope.cancelled_caught and window.in_flight == 3


async def test_send_window_acquire_up_to_takes_what_the_window_has_room_for() -> None:
    window = SendWindow(4)
    got: list[int] = []

    async def acquire_up_to(n: int) -> None:
        got.append(await window.acquire_up_to(n))

    with trio.fail_after(5):
        for bad in (0, -1):
            with pytest.raises(ValueError):
                await window.acquire_up_to(bad)
        assert await window.acquire_up_to(10) == 4  # all the room there is, not 10
        async with trio.open_nursery() as nursery:
            nursery.start_soon(acquire_up_to, 3)
            await trio.testing.wait_all_tasks_blocked()
            assert not got  # a full window: it waits for room for one
            window.release(2)
        assert got == [2] and window.in_flight == 4  # what the release freed, in one step
        window.release(4)
        assert await window.acquire_up_to(3) == 3 and window.in_flight == 3
        with trio.move_on_after(0) as scope:
            await window.acquire_up_to(1)
        assert scope.cancelled_caught and window.in_flight == 3  # cancelled: nothing taken
        window.close(LineLost("gone"))
        with pytest.raises(LineLost):
            await window.acquire_up_to(1)


window_steps = st.lists(
    st.one_of(
        st.tuples(st.just("acquire_nowait"), st.integers(-1, 10)),
        st.tuples(st.just("acquire_up_to"), st.integers(-1, 10)),
        st.tuples(st.just("release"), st.integers(-1, 10)),
        st.tuples(st.just("reset"), st.just(0)),
    ),
    max_size=40,
)


@hypothesis_settings(max_examples=200, deadline=None)
@given(size=st.integers(1, 8), steps=window_steps)
def test_send_window_follows_its_model(size: int, steps: list[tuple[str, int]]) -> None:
    # The window against a model count: what is in flight never leaves
    # [0, size]; acquire_nowait takes all or nothing; acquire_up_to (run
    # only when it need not wait) takes min(n, room); a release of more than
    # is in flight, or of a negative count, is refused and changes nothing.
    window = SendWindow(size)
    in_flight = 0

    async def acquire_up_to(n: int) -> int:
        return await window.acquire_up_to(n)

    for op, n in steps:
        if op == "acquire_nowait":
            if 0 <= n <= size - in_flight:
                window.acquire_nowait(n)
                in_flight += n
            else:
                with pytest.raises(ValueError if n < 0 else trio.WouldBlock):
                    window.acquire_nowait(n)
        elif op == "acquire_up_to":
            if n <= 0:
                with pytest.raises(ValueError):
                    trio.run(acquire_up_to, n)
            elif in_flight < size:
                assert trio.run(acquire_up_to, n) == min(n, size - in_flight)
                in_flight += min(n, size - in_flight)
        elif op == "release":
            if 0 <= n <= in_flight:
                window.release(n)
                in_flight -= n
            else:
                with pytest.raises(ValueError):
                    window.release(n)
        else:
            window.reset()
            in_flight = 0
        assert (window.in_flight, window.available) == (in_flight, size - in_flight)


async def test_send_window_close_wakes_waiters_with_the_error() -> None:
    window = SendWindow(1)
    window.acquire_nowait()
    errors: list[BaseException] = []

    async def acquire() -> None:
        with pytest.raises(LineLost) as info:
            await window.acquire()
        errors.append(info.value)

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(acquire)
            nursery.start_soon(acquire)
            await trio.testing.wait_all_tasks_blocked()
            assert not errors
            window.close(LineLost("gone"))
        assert [error.args for error in errors] == [("gone",), ("gone",)]
        # A copy each: one object raised in two tasks would collect both tracebacks.
        assert errors[0] is not errors[1]
        window.release(1)
        with pytest.raises(LineLost):
            window.acquire_nowait()
        with pytest.raises(LineLost):
            await window.acquire()


# ---- RequestSlots -------------------------------------------------------------------------


async def test_request_slots_bound_concurrency() -> None:
    slots = RequestSlots(2)
    send, receive = trio.open_memory_channel[int](10)
    running: list[int] = []
    most = 0
    release = trio.Event()

    async def server_loop() -> None:
        nonlocal most
        async with trio.open_nursery() as handlers:
            while True:
                request = await slots.receive(receive.receive)
                running.append(request)
                most = max(most, slots.busy)
                handlers.start_soon(handle, request)

    async def handle(request: int) -> None:
        await release.wait()
        running.remove(request)
        slots.release()

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(server_loop)
            for request in range(5):
                send.send_nowait(request)
            await trio.testing.wait_all_tasks_blocked()
            assert running == [0, 1] and slots.busy == 2
            assert receive.statistics().current_buffer_used == 3  # not even taken from the queue
            release.set()
            while receive.statistics().current_buffer_used or running:
                await trio.testing.wait_all_tasks_blocked()
            nursery.cancel_scope.cancel()
    assert most == 2 and slots.busy == 0


async def test_request_slots_release_the_slot_when_receive_raises() -> None:
    slots = RequestSlots(1)

    async def broken() -> int:
        await trio.lowlevel.checkpoint()
        raise LineLost("gone")

    async def seven() -> int:
        return 7

    with trio.fail_after(5):
        with pytest.raises(LineLost):
            await slots.receive(broken)
        assert slots.busy == 0
        assert await slots.receive(seven) == 7
        assert slots.busy == 1
        slots.release()
        assert slots.busy == 0
    for bad in (0, -1):
        with pytest.raises(ValueError):
            RequestSlots(bad)


# ---- BridgeServer and ListenerService over TCP -------------------------------------------


class LineServer(BridgeServer[LineConnection]):
    def _open(self, stream: trio.abc.Stream):  # type: ignore[no-untyped-def]
        return open_connection(LineConnection(stream))

    async def _refuse(self, stream: trio.abc.Stream, reason: str) -> None:
        with trio.move_on_after(1):
            try:
                await stream.send_all(f"ERR {reason}\n".encode("ascii"))
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass
        await trio.aclose_forcefully(stream)


def upper_echo(entered: trio.Event | None = None):  # type: ignore[no-untyped-def]
    async def handler(connection: LineConnection) -> None:
        if entered is not None:
            entered.set()
        try:
            while True:
                await connection.send_data((await connection.take()).upper())
        except trio.EndOfChannel:
            pass

    return handler


async def connect_raw(port: int) -> RawLinePeer:
    return RawLinePeer(await trio.open_tcp_stream("127.0.0.1", port))


async def test_a_full_server_closes_the_oldest_connection_still_in_its_handshake(nursery: trio.Nursery) -> None:
    # Silent sockets must not hold every place until the handshake timeout:
    # a newcomer takes the place of the oldest connection that has not
    # finished its handshake; one that has is never closed for another.
    server = LineServer(upper_echo(), max_connections=2, protocol="line")
    listeners = await nursery.start(server.serve_tcp, "127.0.0.1", 0)
    port = rstreams.listener_port(listeners[0])
    with trio.fail_after(10):
        established = await connect_raw(port)
        await established.send("HELLO")
        assert await established.receive() == "HELLO"
        silent = await connect_raw(port)
        await trio.sleep(HANDSHAKE_GRACE)  # (before it, a connection is never closed for another)
        newcomer = await connect_raw(port)
        await newcomer.send("HELLO", "DATA in")
        assert await newcomer.receive() == "HELLO"
        assert await newcomer.receive() == "DATA IN"
        assert await silent.receive_until_eof() == ["HELLO"]  # (the server's, then the end)
        # Every place is held by a connection past its handshake: refused.
        refused = await connect_raw(port)
        assert await refused.receive_until_eof() == ["ERR server busy"]
        await established.send("DATA still here")
        assert await established.receive() == "DATA STILL HERE"


async def test_server_refuses_connections_beyond_the_limit(nursery: trio.Nursery) -> None:
    server = LineServer(upper_echo(), max_connections=1, protocol="line")
    listeners = await nursery.start(server.serve_tcp, "127.0.0.1", 0)
    port = rstreams.listener_port(listeners[0])
    with trio.fail_after(10):
        first = await connect_raw(port)
        await first.send("HELLO")
        assert await first.receive() == "HELLO"
        await first.send("DATA hi")
        assert await first.receive() == "DATA HI"
        second = await connect_raw(port)
        assert await second.receive_until_eof() == ["ERR server busy"]
        await first.send("DATA still here")
        assert await first.receive() == "DATA STILL HERE"
        await first.send("BYE")
        assert await first.receive_until_eof() == []
        await trio.testing.wait_all_tasks_blocked()
        assert not server.connections
        third = await connect_raw(port)  # the slot is free again
        await third.send("HELLO", "DATA x")
        assert await third.receive() == "HELLO"
        assert await third.receive() == "DATA X"
    with pytest.raises(ValueError):
        LineServer(upper_echo(), max_connections=0)


async def test_server_aclose_says_bye_on_open_connections(nursery: trio.Nursery) -> None:
    entered = trio.Event()
    server = LineServer(upper_echo(entered), protocol="line")
    listeners = await nursery.start(server.serve_tcp, "127.0.0.1", 0)
    port = rstreams.listener_port(listeners[0])
    with trio.fail_after(10):
        peer = await connect_raw(port)
        await peer.send("HELLO")
        assert await peer.receive() == "HELLO"
        await entered.wait()
        [connection] = server.connections
        await server.aclose()
        assert await peer.receive_until_eof() == ["BYE"]
        assert isinstance(connection.end_reason, LineClosed)
        late = await connect_raw(port)
        assert await late.receive_until_eof() == ["ERR server shutting down"]


async def test_listener_service_reports_urls_and_serves(nursery: trio.Nursery) -> None:
    entered = trio.Event()
    service = ListenerService(
        LineServer(upper_echo(entered), protocol="line"), [("127.0.0.1", 0)], None, scheme="line", secure_scheme="lines"
    )
    with trio.fail_after(10):
        urls = await nursery.start(partial(service.serve, handler_nursery=nursery))
        [url] = urls
        match = re.fullmatch(r"line://127\.0\.0\.1:(\d+)", url)
        assert match, url
        peer = await connect_raw(int(match.group(1)))
        await peer.send("HELLO", "DATA ok")
        assert await peer.receive() == "HELLO"
        assert await peer.receive() == "DATA OK"
        await entered.wait()
        await service.aclose()
        assert await peer.receive_until_eof() == ["BYE"]


def single_error(error: BaseException) -> BaseException:
    while isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
        error = error.exceptions[0]
    return error


async def taken_port(nursery: trio.Nursery) -> int:
    listeners = await nursery.start(partial(trio.serve_tcp, lambda stream: stream.aclose(), 0, host="127.0.0.1"))
    return rstreams.listener_port(listeners[0])


async def test_listener_service_names_the_address_it_cannot_listen_on(nursery: trio.Nursery) -> None:
    port = await taken_port(nursery)
    service = ListenerService(LineServer(upper_echo(), protocol="line"), [("127.0.0.1", port)], None, scheme="line", secure_scheme="lines")
    with trio.fail_after(10):
        with pytest.raises(BaseException) as info:
            await nursery.start(partial(service.serve, handler_nursery=nursery))
    error = single_error(info.value)
    assert isinstance(error, OSError)
    assert f"cannot listen on 127.0.0.1:{port} for line" in str(error)


async def test_listener_service_raises_a_bare_oserror(nursery: trio.Nursery) -> None:
    port = await taken_port(nursery)
    service = ListenerService(LineServer(upper_echo(), protocol="line"), [("127.0.0.1", port)], None, scheme="line", secure_scheme="lines")
    with trio.fail_after(10):
        with pytest.raises(OSError, match=f"cannot listen on 127.0.0.1:{port} for line"):
            await nursery.start(partial(service.serve, handler_nursery=nursery))


# ---- BridgePeer ----------------------------------------------------------------------------


class NumberPeer(BridgePeer[LineConnection]):
    """Streams: ``numbers?count=N`` (u32 0..N-1), ``fail?count=N`` (then raises),
    ``refuse`` (raises at once), ``lines`` (the connection's data lines)."""

    def __init__(self, connection: LineConnection) -> None:
        super().__init__(connection)
        self.cancelled: list[str] = []
        self.most_demand = 0

    async def run_stream(self, feed: StreamFeed) -> None:
        path, _, query = feed.name.partition("?")
        params = dict(parse_qsl(query))
        if path == "refuse":
            raise LineStreamLost("refused")
        feed.subscribed()
        if path == "lines":
            try:
                while True:
                    await feed.wait_demand()
                    if feed.ended:
                        return
                    try:
                        text = await self.connection.take()
                    except trio.EndOfChannel:
                        return
                    feed.deliver([text.encode("ascii")])
            except trio.Cancelled:
                self.cancelled.append(feed.name)
                raise
        count = int(params.get("count", "10"))
        sent = 0
        while sent < count:
            await feed.wait_demand()
            if feed.ended:
                return
            self.most_demand = max(self.most_demand, feed.demand)
            n = min(feed.demand, count - sent)
            feed.deliver([u32(i) for i in range(sent, sent + n)])
            sent += n
        if path == "fail":
            raise KeyError(f"failed after {count}")

    def stream_error(self, reason: BaseException) -> BaseException:
        return LineStreamLost(f"the connection ended: {reason}")


async def test_bridge_peer_respects_demand() -> None:
    connection, peer = line_pair()
    with trio.fail_after(10):
        await peer.send("HELLO")
        async with open_connection(connection):
            async with open_bridge_peer(NumberPeer(connection)) as numbers:
                assert isinstance(numbers, rstreams.Peer)
                for prefetch in (1, 2, 32):
                    numbers.most_demand = 0
                    async with numbers.subscribe("numbers?count=100", prefetch=prefetch) as subscription:
                        received = [int.from_bytes(raw, "big") async for raw in subscription]
                    assert received == list(range(100))
                    assert 0 < numbers.most_demand <= prefetch
                assert numbers.feeds == []
        assert await peer.receive_until_eof() == ["HELLO", "BYE"]


async def test_bridge_peer_manual_demand_and_fetch() -> None:
    connection, peer = line_pair()
    with trio.fail_after(10):
        await peer.send("HELLO")
        async with open_connection(connection):
            async with open_bridge_peer(NumberPeer(connection)) as numbers:
                async with numbers.subscribe("numbers?count=10", prefetch=0) as subscription:
                    await trio.testing.wait_all_tasks_blocked()
                    assert subscription.statistics().received == 0
                    subscription.request(3)
                    await trio.testing.wait_all_tasks_blocked()
                    assert subscription.statistics().received == 3
                    assert [await subscription.__anext__() for _ in range(3)] == [u32(0), u32(1), u32(2)]
                    await trio.testing.wait_all_tasks_blocked()
                    assert subscription.statistics().received == 3  # no automatic demand
                    subscription.request(100)
                    assert [raw async for raw in subscription] == [u32(i) for i in range(3, 10)]
                assert await numbers.fetch("numbers?count=10", 3) == [u32(0), u32(1), u32(2)]
                assert await numbers.fetch("numbers?count=2", 5) == [u32(0), u32(1)]
                with pytest.raises(ValueError):
                    await numbers.fetch("numbers", 0)


async def test_leaving_early_cancels_the_stream_task() -> None:
    connection, peer = line_pair()
    with trio.fail_after(10):
        await peer.send("HELLO", "DATA one")
        async with open_connection(connection):
            async with open_bridge_peer(NumberPeer(connection)) as numbers:
                async with numbers.subscribe("lines", prefetch=4) as subscription:
                    async for raw in subscription:
                        assert raw == b"one"
                        break
                    await trio.testing.wait_all_tasks_blocked()
                    assert numbers.cancelled == []  # waiting in take() for the next line
                await trio.testing.wait_all_tasks_blocked()
                assert numbers.cancelled == ["lines"]
                assert numbers.feeds == []
                assert not connection.ended


async def test_run_stream_raising_fails_the_stream() -> None:
    connection, peer = line_pair()
    with trio.fail_after(10):
        await peer.send("HELLO")
        async with open_connection(connection):
            async with open_bridge_peer(NumberPeer(connection)) as numbers:
                received = []
                with pytest.raises(KeyError, match="failed after 3"):
                    async with numbers.subscribe("fail?count=3", prefetch=8) as subscription:
                        async for raw in subscription:
                            received.append(raw)
                assert received == [u32(0), u32(1), u32(2)]
                with pytest.raises(LineStreamLost, match="refused"):
                    async with numbers.subscribe("refuse"):
                        pytest.fail("the stream was refused")  # pragma: no cover
                # The peer goes on.
                assert await numbers.fetch("numbers?count=2", 2) == [u32(0), u32(1)]


async def test_the_connection_ending_fails_open_streams_and_new_ones() -> None:
    connection, peer = line_pair()
    with trio.fail_after(10):
        await peer.send("HELLO")
        async with open_connection(connection):
            async with open_bridge_peer(NumberPeer(connection)) as numbers:
                async with numbers.subscribe("lines", prefetch=1):  # makes the reader read
                    async with numbers.subscribe("numbers?count=100", prefetch=1) as subscription:
                        await trio.testing.wait_all_tasks_blocked()
                        assert subscription.statistics().buffered == 1
                        await peer.stream.aclose()  # EOF
                        assert await subscription.__anext__() == u32(0)  # what arrived first
                        with pytest.raises(LineStreamLost, match="the connection ended") as info:
                            await subscription.__anext__()
                        assert "the peer closed the connection" in str(info.value)
                assert isinstance(connection.end_reason, LineLost)
                assert numbers.feeds == []
                with pytest.raises(LineStreamLost):
                    async with numbers.subscribe("numbers"):
                        pytest.fail("the connection has ended")  # pragma: no cover


# ---- collect_elements ------------------------------------------------------------------------


async def count_publisher(sink: rstreams.Sink, request: rstreams.SubscribeRequest) -> None:
    for value in range(request.int_param("count", 10, minimum=0)):
        await sink.send(u32(value))


async def test_collect_elements() -> None:
    app = rstreams.Router({"count": count_publisher})
    with trio.fail_after(10):
        async with rstreams.open_local_session(app) as session:
            assert await collect_elements(session, "count?count=20000", max_bytes=80_000) == [u32(i) for i in range(20_000)]
            assert await collect_elements(session, "count?count=5", max_bytes=20) == [u32(i) for i in range(5)]
            assert await collect_elements(session, "count?count=0", max_bytes=0) == []
            assert await collect_elements(session, "count?count=200", max_bytes=800, prefetch=3) == [u32(i) for i in range(200)]
            with pytest.raises(ResponseTooLarge) as info:
                await collect_elements(session, "count?count=100", max_bytes=10)
            assert info.value.limit == 10 and "10 bytes" in str(info.value)
            assert isinstance(info.value, rstreams.SubscriptionError)
            with pytest.raises(rstreams.UnknownPublisher):
                await collect_elements(session, "missing", max_bytes=100)
            # The session is still usable.
            assert await collect_elements(session, "count?count=2", max_bytes=8) == [u32(0), u32(1)]


async def test_collect_elements_asks_for_what_the_room_left_holds() -> None:
    # By default the first ask is COLLECT_PREFETCH; every later one keeps
    # what is asked for and still to come within the room left in max_bytes
    # (by the largest element seen), so a long stream of small elements is
    # collected in a few asks, and never more is asked for than may come.
    seen: dict[str, int] = {"asks": 0, "worst": 0}
    size, count = 100, 1000

    async def hundreds(sink: rstreams.Sink) -> None:
        for value in range(count):
            before = sink.demand
            seen["worst"] = max(seen["worst"], (value + before) * size)
            await sink.send(value.to_bytes(size, "big"))
            if sink.demand > before - 1:  # an ask came while it sent
                seen["asks"] += 1
                seen["worst"] = max(seen["worst"], (value + 1 + sink.demand) * size)

    app = rstreams.Router({"hundreds": hundreds})
    with trio.fail_after(10):
        async with rstreams.open_local_session(app) as session:
            elements = await collect_elements(session, "hundreds", max_bytes=size * count)
            assert elements == [value.to_bytes(size, "big") for value in range(count)]
            assert seen["worst"] <= size * count
            assert 1 < seen["asks"] <= 4, seen  # a fixed window of 64 takes 30 or more
            seen.update(asks=0, worst=0)
            # One byte less than the stream: the last element does not fit.
            with pytest.raises(ResponseTooLarge):
                await collect_elements(session, "hundreds", max_bytes=size * count - 1)
            assert seen["worst"] <= size * count - 1 + size  # the last ask is for one element


async def test_collect_elements_counts_an_empty_element_so_a_stream_of_them_ends() -> None:
    # A stream of empty elements never reaches a byte limit by its bytes: an
    # empty element counts EMPTY_ELEMENT_BYTES, so an endless one
    # ends with ResponseTooLarge instead of growing the response forever.
    async def empties(sink: rstreams.Sink, request: rstreams.SubscribeRequest) -> None:
        count = request.int_param("count", -1)
        sent = 0
        while count < 0 or sent < count:
            run = 1000 if count < 0 else min(1000, count - sent)
            await sink.send_many([b""] * run)
            sent += run

    app = rstreams.Router({"empties": empties, "count": count_publisher})
    limit = 1000 * EMPTY_ELEMENT_BYTES
    with trio.fail_after(10):
        async with rstreams.open_local_session(app) as session:
            with pytest.raises(ResponseTooLarge):
                await collect_elements(session, "empties", max_bytes=limit)  # endless
            assert await collect_elements(session, "empties?count=1000", max_bytes=limit) == [b""] * 1000
            with pytest.raises(ResponseTooLarge):
                await collect_elements(session, "empties?count=1001", max_bytes=limit)
            # Other elements count their size, as before.
            assert len(await collect_elements(session, "count?count=1000", max_bytes=4000)) == 1000
            budget = MemoryBudget(4 * limit)
            assert len(await collect_elements(session, "empties?count=10", max_bytes=limit, budget=budget)) == 10
            assert budget.used == 0  # empty elements: nothing for the caller to hand over


async def test_batches_within_budget_take_room_once_the_elements_are_there() -> None:
    # Room is waited for while the elements stay in the session (nothing is
    # taken from the budget for an element that has not come), then the
    # batch is taken and counted whole.
    async def sized(sink: rstreams.Sink) -> None:
        await sink.send(b"a" * 60)
        await sink.send_many([b"b" * 20, b"c" * 20])
        await sink.send(b"d" * 150)  # larger than max_bytes: the rest is charged

    budget = MemoryBudget(200)
    with trio.fail_after(10):
        async with rstreams.open_local_session(rstreams.Router({"sized": sized})) as session:
            async with session.subscribe("sized", prefetch=0) as stream:
                batches = BatchesWithinBudget(stream, budget, max_bytes=100)
                budget.take_nowait(150)  # someone else's
                async with trio.open_nursery() as nursery:
                    got: list[list[bytes]] = []

                    async def take() -> None:
                        got.append(list(await batches.__anext__()))

                    nursery.start_soon(take)
                    await trio.testing.wait_all_tasks_blocked()
                    assert budget.statistics().waiting == 0 and budget.used == 150  # nothing asked: nothing taken
                    stream.request(1)
                    await trio.testing.wait_all_tasks_blocked()
                    # It came: 60 bytes wanted, 50 free; it stays in the session meanwhile.
                    assert budget.statistics().waiting_bytes == 60 and stream.statistics().buffered == 1
                    assert got == []
                    budget.give_back(100)
                assert got == [[b"a" * 60]] and budget.used == 50 + 60
                budget.give_back(110)
                stream.request(3)
                # At most max_bytes beyond the first element: b and c, not d.
                assert list(await batches.__anext__()) == [b"b" * 20, b"c" * 20]
                assert budget.used == 40
                assert list(await batches.__anext__()) == [b"d" * 150]
                assert budget.used == 190  # 100 taken, 50 charged
                budget.give_back(190)
                with pytest.raises(StopAsyncIteration):
                    await batches.__anext__()
    assert budget.used == 0
    with pytest.raises(ValueError):
        BatchesWithinBudget(stream, budget, max_bytes=201)


async def test_batches_within_budget_cancelled_take_nothing() -> None:
    budget = MemoryBudget(100)
    app = rstreams.Router({"count": count_publisher})
    with trio.fail_after(10):
        async with rstreams.open_local_session(app) as session:
            async with session.subscribe("count?count=3", prefetch=0) as stream:
                batches = BatchesWithinBudget(stream, budget, max_bytes=100)
                budget.take_nowait(100)
                stream.request(3)
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(batches.__anext__)
                    await trio.testing.wait_all_tasks_blocked()
                    assert budget.statistics().waiting == 1  # an element came: waiting for room
                    nursery.cancel_scope.cancel()
                assert budget.used == 100 and budget.statistics().waiting == 0
                assert stream.statistics().buffered == 3  # still in the session
                budget.give_back(100)
                assert [u32(i) for i in range(3)] == list(await batches.__anext__())
                assert budget.used == 12


# ---- loopback congestion control --------------------------------------------


@pytest.mark.skipif(TCP_CONGESTION is None, reason="no TCP_CONGESTION on this platform")
@pytest.mark.parametrize("setting", ["reno", None])
async def test_bridge_connections_over_loopback_get_the_configured_congestion_control(setting: str | None) -> None:
    """As rstreams sessions (tests/runtime/test_loopback.py): Reno by
    default over loopback, the socket's own choice with None."""
    other = another_allowed_congestion_control()
    if setting is not None and other is None and host_congestion_control() == b"reno":
        pytest.skip("this host allows only Reno, its default: nothing would tell the change apart")
    with trio.fail_after(10):
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        client = await trio.open_tcp_stream("127.0.0.1", rstreams.listener_port(listeners[0]))
        server = await listeners[0].accept()
        try:
            if other is not None:  # start from something that is not Reno
                for stream in (client, server):
                    choose_congestion_control(stream.socket, other)
            before = congestion_control(client.socket)
            LineConnection(client, settings(loopback_congestion_control=setting))
            LineConnection(server, settings(loopback_congestion_control=setting))
            expected = before if setting is None else b"reno"
            assert congestion_control(client.socket) == expected
            assert congestion_control(server.socket) == expected
        finally:
            for resource in (client, server, listeners[0]):
                await resource.aclose()
    with pytest.raises(ValueError, match="loopback_congestion_control"):
        settings(loopback_congestion_control="not a name")


@pytest.mark.parametrize(
    ("field", "values"),
    [
        ("handshake_timeout", [0, -1, math.nan, math.inf]),
        ("ping_timeout", [0, math.nan, math.inf]),
        ("close_timeout", [0, math.nan, math.inf]),
        ("keepalive_interval", [0, math.nan, math.inf]),
        ("receive_size", [0, 1.5, 10**30]),
        ("max_read_ahead", [-1, 1.5]),
        ("max_write_buffer", [-1, "1"]),
    ],
)
def test_link_settings_refuse_what_would_fail_later(field: str, values: list[object]) -> None:
    # nan and infinity bound no wait (nan failed inside trio, mid-connection),
    # and a read larger than the budget is not the connection's to make
    # (10**30 died in os.read).
    for value in values:
        with pytest.raises(ValueError, match=field):
            LinkSettings(**{field: value})  # type: ignore[arg-type]


def test_each_bridge_s_own_settings_refuse_what_would_fail_later() -> None:
    from bridges.epoxy import EpoxySettings
    from bridges.micromsg2 import MicroMsg2Settings

    for value in (math.nan, math.inf, 10**30, 0, 1.5):
        with pytest.raises(ValueError, match="windowed_receive_size"):
            MicroMsg2Settings(windowed_receive_size=value)  # type: ignore[arg-type]
    for value in (math.nan, -1, 2**64, 1.5):
        with pytest.raises(ValueError, match="max_conversation_id"):
            EpoxySettings(max_conversation_id=value)  # type: ignore[arg-type]
    for value in (math.nan, math.inf, 0):
        with pytest.raises(ValueError, match="half_close_timeout"):
            EpoxySettings(half_close_timeout=value)
    # MicroMsg2's handshake fields, checked by each connection's handshake
    # before: a server with one of these failed every connection it took.
    from bridges.micromsg2 import ExtensionSpec

    for identity in ("\u00e9", "x" * 256):
        with pytest.raises(ValueError, match="identity"):
            MicroMsg2Settings(identity=identity)
    with pytest.raises(TypeError, match="identity"):
        MicroMsg2Settings(identity=5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="does not speak: nope"):
        MicroMsg2Settings(required=(ExtensionSpec(name="nope"),))
    with pytest.raises(ValueError, match="listed twice"):
        MicroMsg2Settings(optional=(ExtensionSpec.batch_ack(4), ExtensionSpec.batch_ack(4)))
    assert MicroMsg2Settings(identity="x" * 255).identity == "x" * 255


def test_counts_are_ints_of_at_least_one_everywhere() -> None:
    # (1.5 and nan passed the "<= 0" checks: a server took max_connections=1.5,
    # and MicroMsg2's broker max_subscriptions=0, refusing every subscription.)
    import examples.demo
    from bridges.emp import EmpAppServer
    from bridges.epoxy import EpoxyAppServer
    from bridges.kit import check_count
    from bridges.micromsg2 import MicroMsg2AppServer
    from bridges.relink import RelinkAppServer

    check_count("n", 1)
    for value in (0, -1, 1.5, math.nan, True, "2", None):
        with pytest.raises(ValueError, match="n must be positive"):
            check_count("n", value)
    for server in (EmpAppServer, EpoxyAppServer, MicroMsg2AppServer, RelinkAppServer):
        with pytest.raises(ValueError, match="max_connections"):
            server(examples.demo.app, max_connections=1.5)  # type: ignore[arg-type]
    for server in (MicroMsg2AppServer, RelinkAppServer):
        for value in (0, 1.5):
            with pytest.raises(ValueError, match="max_subscriptions"):
                server(examples.demo.app, max_subscriptions=value)  # type: ignore[arg-type]
