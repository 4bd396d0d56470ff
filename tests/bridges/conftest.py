"""Fixtures for the EMP trio tests: a hand-driven "raw" peer, and servers on port 0.

``tests/bridges`` is deliberately not a package (an ``__init__.py`` would make
pytest's rootdir import shadow the real ``bridges`` package), so shared
helpers live here as fixtures and plain classes.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import trio
import trio.testing

from bridges.emp import Decoder, EmpLimits, Framing, Message, encode

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
# tests/helpers.py, shared with the runtime's tests (appended: it must not
# come before the real ``bridges`` package).
if str(ROOT / "tests") not in sys.path:
    sys.path.append(str(ROOT / "tests"))


class RawPeer:
    """An EMP peer driven byte by byte: what the held-out peer could do."""

    def __init__(self, stream: trio.abc.Stream, framing: Framing = Framing.SIZE_INCLUDES_FIELD) -> None:
        self.stream = stream
        self.framing = framing
        self.decoder = Decoder(framing=framing, limits=EmpLimits(max_message_size=2**30, max_body_size=2**30))
        self.eof = False

    async def send(self, *items: Message | bytes) -> None:
        for item in items:
            await self.stream.send_all(item if isinstance(item, bytes) else encode(item, framing=self.framing))

    async def receive(self) -> Message | None:
        """The next message, or None at end of file."""
        while True:
            message = self.decoder.next_message()
            if message is not None:
                return message
            if self.eof:
                return None
            try:
                data = await self.stream.receive_some(65536)
            except trio.BrokenResourceError:
                data = b""
            if not data:
                self.eof = True
            self.decoder.feed(data)

    async def receive_until_eof(self) -> list[Message]:
        messages = []
        while (message := await self.receive()) is not None:
            messages.append(message)
        return messages


@pytest.fixture
def raw_pair() -> Callable[..., tuple[trio.abc.Stream, RawPeer]]:
    """``raw_pair(framing)``: (stream for our side, RawPeer) over memory streams."""

    def make(framing: Framing = Framing.SIZE_INCLUDES_FIELD, lockstep: bool = False) -> tuple[trio.abc.Stream, RawPeer]:
        pair = trio.testing.lockstep_stream_pair if lockstep else trio.testing.memory_stream_pair
        ours, theirs = pair()
        return ours, RawPeer(theirs, framing)

    return make


async def connect_raw(port: int, framing: Framing = Framing.SIZE_INCLUDES_FIELD) -> RawPeer:
    return RawPeer(await trio.open_tcp_stream("127.0.0.1", port), framing)


def add_idle_publisher(app: object, name: str = "idle") -> trio.MemoryReceiveChannel[str]:
    """Add to ``app`` (an ``rstreams.Router``) a publisher that never sends:
    the channel returned gets its subscribe's name once the server has first
    asked it for an element (its demand came), so a test knows the ask is out."""
    import rstreams

    assert isinstance(app, rstreams.Router)
    asks, asked = trio.open_memory_channel[str](64)

    @app.publisher(name)
    async def idle(sink: rstreams.Sink, request: rstreams.SubscribeRequest) -> None:
        await sink.wait_demand()
        asks.send_nowait(request.name)
        await trio.sleep_forever()

    return asked
