"""Helpers shared by the sans-I/O tests: a connected pair of machines, and the golden vectors.

``ConnectionPair`` follows h11's ``tests/helpers.py``: two protocol machines
wired back to back with no sockets in between. A test calls methods on one
side, then moves whatever that side wrote to the other side and looks at the
events it produced.

Test modules import this file as ``helpers``: the test directories below
``tests/`` are packages and ``tests/`` is not, so pytest puts ``tests/`` on
``sys.path``.
"""

from __future__ import annotations

import dataclasses
import json
import socket
from collections.abc import Iterable
from pathlib import Path

import pytest

from rstreams.protocol import (
    DEFAULT_LIMITS,
    DEFAULT_WRITE_SIZE,
    Cancel,
    Connection,
    Elements,
    Event,
    Goodbye,
    Hello,
    Message,
    MessageDecoder,
    OnComplete,
    OnError,
    OnNext,
    OnNextLastPart,
    OnNextPacked,
    OnNextPart,
    Ping,
    Pong,
    ProtocolLimits,
    Request,
    Subscribe,
    Subscribed,
)

__all__ = [
    "TCP_CONGESTION",
    "congestion_control",
    "choose_congestion_control",
    "host_congestion_control",
    "another_allowed_congestion_control",
    "SMALL_LIMITS",
    "ConnectionPair",
    "GoldenVector",
    "decode",
    "elements_of",
    "load_golden_vectors",
]

VECTORS_PATH = Path(__file__).parent / "data" / "wire-v0-vectors.json"

#: Limits small enough that splitting, packing and the size limits show up
#: with elements of a few kilobytes.
SMALL_LIMITS = ProtocolLimits(
    max_message_size=4096,
    max_element_size=16384,
    max_string_size=256,
    max_extensions=8,
    split_threshold=1024,
    part_size=1024,
    max_remembered_ids=16,
)

# The profile's message names (as in wire-v0.md and the JSON file) -> classes.
MESSAGE_CLASSES: dict[str, type] = {
    "hello": Hello,
    "subscribe": Subscribe,
    "request": Request,
    "cancel": Cancel,
    "subscribed": Subscribed,
    "onNext": OnNext,
    "onComplete": OnComplete,
    "onError": OnError,
    "onNextPacked": OnNextPacked,
    "onNextPart": OnNextPart,
    "onNextLastPart": OnNextLastPart,
    "goodbye": Goodbye,
    "ping": Ping,
    "pong": Pong,
}


class ConnectionPair:
    """A client and a server :class:`Connection`, connected without I/O.

    The two machines are the same class (the protocol is symmetric); the
    names only say who opened the connection.
    """

    def __init__(
        self,
        limits: ProtocolLimits = DEFAULT_LIMITS,
        *,
        client_limits: ProtocolLimits | None = None,
        server_limits: ProtocolLimits | None = None,
    ) -> None:
        self.client = Connection(limits=client_limits or limits)
        self.server = Connection(limits=server_limits or limits)

    def peer_of(self, connection: Connection) -> Connection:
        if connection is self.client:
            return self.server
        assert connection is self.server, "not a connection of this pair"
        return self.client

    @staticmethod
    def drain(sender: Connection, max_bytes: int = DEFAULT_WRITE_SIZE) -> bytes:
        """Everything ``sender`` has queued, exactly as it would go on the wire."""
        chunks = []
        while sender.has_data_to_send:
            chunks.append(bytes(sender.data_to_send(max_bytes)))
        return b"".join(chunks)

    def send(self, sender: Connection, max_bytes: int = DEFAULT_WRITE_SIZE) -> list[Event]:
        """Move all of ``sender``'s queued bytes to its peer; return the peer's events."""
        receiver = self.peer_of(sender)
        receiver.receive_data(self.drain(sender, max_bytes))
        return receiver.events()

    def deliver(self, receiver: Connection, data: bytes) -> list[Event]:
        """Feed hand-made bytes to ``receiver``, as if its peer had sent them."""
        receiver.receive_data(data)
        return receiver.events()

    def open(self) -> None:
        """Exchange hellos in both directions."""
        assert self.send(self.client) == [Hello()]
        assert self.send(self.server) == [Hello()]

    def open_stream(
        self,
        subscribing: Connection,
        publisher: str = "ticker",
        *,
        initial_demand: int = 0,
        element_size: int = 0,
    ) -> int:
        """Subscribe from ``subscribing`` and accept on the other side; return the Id."""
        publishing = self.peer_of(subscribing)
        subscriber = subscribing.subscribe(publisher, initial_demand)
        assert self.send(subscribing) == [
            Subscribe(publisher=publisher, subscriber=subscriber, initial_demand=initial_demand)
        ]
        publishing.accept(subscriber, element_size=element_size)
        assert self.send(publishing) == [Subscribed(subscriber=subscriber, element_size=element_size)]
        return subscriber


def decode(data: bytes, limits: ProtocolLimits = DEFAULT_LIMITS) -> list[Message]:
    """The wire messages in ``data``, decoded without any state machine."""
    decoder = MessageDecoder(limits)
    decoder.feed(data)
    return list(decoder)


def elements_of(events: Iterable[Event], subscriber: int) -> list[bytes]:
    """All elements that ``events`` delivered for ``subscriber``, in order."""
    return [
        element
        for event in events
        if isinstance(event, Elements) and event.subscriber == subscriber
        for element in event.elements
    ]


@dataclasses.dataclass(frozen=True)
class GoldenVector:
    """One message of the wire profile and its exact encoding."""

    name: str
    code: int
    message: Message
    wire: bytes

    def __str__(self) -> str:  # readable pytest ids
        return self.name


def _field_value(value: object) -> object:
    if isinstance(value, dict):
        return bytes.fromhex(value["bin"])
    if isinstance(value, list):
        return tuple(value)
    return value


def load_golden_vectors(path: Path = VECTORS_PATH) -> list[GoldenVector]:
    """The golden vectors from ``tests/data``, as message objects and bytes.

    The file lists fields in wire order, which is also the field order of
    the message dataclasses.
    """
    document = json.loads(path.read_text(encoding="utf-8"))
    vectors = []
    for entry in document["vectors"]:
        cls = MESSAGE_CLASSES[entry["message"]]
        # Hello's token is not a wire field of its own (it rides inside the
        # extension list, as the bearer extension's argument).
        names = [field.name for field in dataclasses.fields(cls) if (cls, field.name) != (Hello, "token")]
        values = [_field_value(value) for value in entry["fields"]]
        assert len(values) == len(names), f"{entry['name']}: expected fields {names}"
        vectors.append(
            GoldenVector(
                name=entry["name"],
                code=entry["code"],
                message=cls(**dict(zip(names, values))),
                wire=bytes.fromhex(entry["hex"]),
            )
        )
    return vectors


# ---- TCP congestion control (the loopback tests of rstreams and the kit) ----

#: Linux's socket option, None where the platform has none.
TCP_CONGESTION: int | None = getattr(socket, "TCP_CONGESTION", None)


def congestion_control(sock: socket.socket) -> bytes:
    """The congestion control ``sock`` uses (a socket or a trio socket)."""
    assert TCP_CONGESTION is not None
    return sock.getsockopt(socket.IPPROTO_TCP, TCP_CONGESTION, 16).split(b"\0", 1)[0]


def choose_congestion_control(sock: socket.socket, name: bytes) -> None:
    assert TCP_CONGESTION is not None
    sock.setsockopt(socket.IPPROTO_TCP, TCP_CONGESTION, name)


def host_congestion_control() -> bytes:
    """What a new socket gets: the host's default."""
    with socket.socket() as probe:
        return congestion_control(probe)


def another_allowed_congestion_control() -> bytes | None:
    """A congestion control other than Reno that this process may choose, or
    None: a test starts from it so that a switch to Reno can be seen even on
    a host whose default is Reno."""
    try:
        with open("/proc/sys/net/ipv4/tcp_allowed_congestion_control") as allowed:
            names = allowed.read().split()
    except OSError:
        return None
    others = [name for name in names if name != "reno"]
    return others[0].encode() if others else None


def count_new_buffers(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count the element buffers the reassemblers allocate (not reuse):
    ``copy=False`` streams' through their ``ElementBuffers``, ``copy=True``
    streams' directly. Returns a one-item list, the count so far."""
    from rstreams.protocol import _element_buffers, _split

    made = [0]
    original = _element_buffers.new_buffer

    def new_buffer(size: int) -> bytearray:
        made[0] += 1
        return original(size)

    monkeypatch.setattr(_element_buffers, "new_buffer", new_buffer)
    monkeypatch.setattr(_split, "new_buffer", new_buffer)
    return made
