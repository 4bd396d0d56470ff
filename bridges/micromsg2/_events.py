"""What a MicroMsg2 :class:`~bridges.micromsg2.Connection` tells its I/O layer.

Frames are wire values (:mod:`._frames`); events are what they mean once
the machine has checked them against the handshake, the sequence numbers,
the windows and the pubsub commands. Each is a frozen value.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Union

from ._extensions import ExtensionSpec
from ._filters import Filter
from ._properties import Properties

__all__ = [
    "HandshakeCompleted",
    "MessageReceived",
    "Acknowledged",
    "Subscribe",
    "Unsubscribe",
    "Completed",
    "StreamFailed",
    "SendsRefused",
    "ConnectionFailed",
    "ConnectionClosed",
    "Event",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class HandshakeCompleted:
    """The three steps are done: frames may flow.

    Attributes:
        peer_identity: the identity in the peer's handshake.
        version: the ``(major, minor)`` in use, the lower of both sides'.
        extensions: what is used, in index order (the index of
            ``extensions[i]`` is ``i + 1``).
        window: the ack window (1 for ``ack``, N for ``batch-ack``), or None
            when no ack extension is used.
    """

    peer_identity: str
    version: tuple[int, int]
    extensions: tuple[ExtensionSpec, ...]
    window: int | None


@dataclass(frozen=True, slots=True, kw_only=True)
class MessageReceived:
    """A whole MESSAGE (from a server) or SEND (from a client), reassembled.

    Call :meth:`Connection.acknowledge` once the application has taken it:
    that frees the peer's window.

    Attributes:
        sequence: its sequence number.
        destination: the queue or topic.
        properties: its typed properties.
        payload: the body, all CONTINUED parts joined.
        dotnet_type: the type from the last dotnet frame, when the dotnet
            extension is used and one has arrived (it stays in force for the
            messages after it, as the spec says).
    """

    sequence: int
    destination: str
    properties: Properties
    payload: bytes
    dotnet_type: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Acknowledged:
    """The peer acknowledged our messages up to ``sequence``: ``count`` were freed.

    For an adapter mapping the window to demand, this is ``request(count)``.
    """

    sequence: int
    count: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Subscribe:
    """The client's ``subscribe;destination=D[,filter=F]`` (pubsub, server side)."""

    destination: str
    filter: Filter | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Unsubscribe:
    """The client's ``unsubscribe;destination=D`` for an open subscription."""

    destination: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Completed:
    """The server's ``completed;destination=D``: the stream ended normally."""

    destination: str


@dataclass(frozen=True, slots=True, kw_only=True)
class StreamFailed:
    """ERROR ``error;destination=D,message=M``: one stream failed, the connection stays."""

    destination: str
    message: str


@dataclass(frozen=True, slots=True, kw_only=True)
class SendsRefused:
    """ERROR ``error;destination=D,for=send,message=M`` (*ours*): the server
    dropped what we sent to ``D`` (not a topic, say); no stream ends, the
    connection stays."""

    destination: str
    message: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ConnectionFailed:
    """ERROR ``error;message=M``: the peer gave up on the connection and disconnects."""

    message: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ConnectionClosed:
    """The peer closed the transport (end of file)."""


Event = Union[
    HandshakeCompleted,
    MessageReceived,
    Acknowledged,
    Subscribe,
    Unsubscribe,
    Completed,
    StreamFailed,
    SendsRefused,
    ConnectionFailed,
    ConnectionClosed,
]
