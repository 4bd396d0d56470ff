"""Relink packets as values, and the limits on what a peer may send.

Each class is one packet format of ``specs/relink.md`` section 2. They are
what the codec turns into bytes and back; the connection builds and reads
them but hands the application higher-level events (``_events``).

Channel ids are plain ``int``: on the wire they are little-endian unsigned
integers of the negotiated size (0 to 8 bytes). With size 0 no id bytes are
sent and the id is always ``0``. A packet names one channel (unicast) or any
number (multicast, ``multicast=True``; a multicast packet may name one channel
or none, and the codec keeps that distinction so decode-encode round-trips).

Validation happens in ``__post_init__``, so a malformed packet cannot exist:
a local caller gets ``LocalProtocolError``.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Union

from ._errors import LocalProtocolError
from ._sequence import MASK

__all__ = [
    "PROTOCOL_VERSION",
    "MAX_CHANNEL_ID_SIZE",
    "GeneralType",
    "ChannelFormat",
    "ChannelOpType",
    "ChannelAckType",
    "SequenceOpType",
    "SequenceAckType",
    "GeneralPacket",
    "ChannelOp",
    "ChannelAck",
    "SequenceOp",
    "SequenceAck",
    "MessagePacket",
    "Packet",
    "RelinkLimits",
    "DEFAULT_LIMITS",
    "check_channel_id",
]

#: The only Relink version this implementation speaks (the spec's draft).
PROTOCOL_VERSION = 0
#: Channel ids are little-endian unsigned integers of 0 to 8 bytes.
MAX_CHANNEL_ID_SIZE = 8

KiB = 1024
MiB = 1024 * KiB


class GeneralType(enum.IntEnum):
    """The packet type of a general packet (header byte 0, bits 5-7)."""

    NOP = 0
    PING = 1
    PONG = 2
    RESUME = 3
    SHUTDOWN = 4


class ChannelFormat(enum.IntEnum):
    """The channel packet format (header byte 0, bits 2-4).

    The least significant bit is the direction: odd formats (acknowledgements)
    name a channel of the packet's *receiver*; even ones a channel of its sender.
    """

    CHANNEL_OP = 0
    CHANNEL_ACK = 1
    SEQUENCE_OP = 2
    SEQUENCE_ACK = 3
    MESSAGE = 4

    @property
    def names_receivers_channel(self) -> bool:
        return bool(self & 1)


class ChannelOpType(enum.IntEnum):
    COMMIT = 0
    ROLLBACK = 1
    CLOSE = 2


class ChannelAckType(enum.IntEnum):
    RECEIVED = 0
    CONSUMED = 1
    COMMITTED = 2
    UNCOMMITTED = 3
    CLOSED = 4


class SequenceOpType(enum.IntEnum):
    COMMIT = 0
    ROLLBACK = 1


class SequenceAckType(enum.IntEnum):
    RECEIVED = 0
    CONSUMED = 1
    COMMITTED = 2
    UNCOMMITTED = 3


def check_channel_id(channel: object, size: int) -> int:
    """``channel`` if it is a valid id for ``size``-byte ids, else LocalProtocolError."""
    if type(channel) is not int or not 0 <= channel < 1 << (8 * size):
        limit = "0" if size == 0 else f"[0, 2**{8 * size})"
        raise LocalProtocolError(f"channel id must be an int in {limit} for {size}-byte ids, got {channel!r}")
    return channel


def _check_channels(channels: object, multicast: object) -> None:
    if not isinstance(channels, tuple) or not all(type(c) is int and 0 <= c < 1 << 64 for c in channels):
        raise LocalProtocolError(f"channels must be a tuple of unsigned 64-bit ints, got {channels!r}")
    if type(multicast) is not bool:
        raise LocalProtocolError(f"multicast must be a bool, got {multicast!r}")
    if not multicast and len(channels) != 1:
        raise LocalProtocolError(f"a unicast packet names exactly one channel, got {len(channels)}")
    if len(channels) > MASK:
        raise LocalProtocolError("a multicast packet names at most 2**32 - 1 channels")


def _check_sequence(sequence: object) -> None:
    if type(sequence) is not int or not 0 <= sequence <= MASK:
        raise LocalProtocolError(f"sequence must be an int in [0, 2**32), got {sequence!r}")


@dataclass(frozen=True, slots=True, kw_only=True)
class GeneralPacket:
    """nop, ping, pong, resume or shutdown: no channel, 8 bytes."""

    type: GeneralType

    def __post_init__(self) -> None:
        if not isinstance(self.type, GeneralType):
            raise LocalProtocolError(f"type must be a GeneralType, got {self.type!r}")


@dataclass(frozen=True, slots=True, kw_only=True)
class ChannelOp:
    """A channel operation: commit or rollback of the next message, or close."""

    type: ChannelOpType
    channels: tuple[int, ...]
    multicast: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.type, ChannelOpType):
            raise LocalProtocolError(f"type must be a ChannelOpType, got {self.type!r}")
        _check_channels(self.channels, self.multicast)


@dataclass(frozen=True, slots=True, kw_only=True)
class ChannelAck:
    """A channel acknowledgement: of the next message, or of a close."""

    type: ChannelAckType
    channels: tuple[int, ...]
    multicast: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.type, ChannelAckType):
            raise LocalProtocolError(f"type must be a ChannelAckType, got {self.type!r}")
        _check_channels(self.channels, self.multicast)


@dataclass(frozen=True, slots=True, kw_only=True)
class SequenceOp:
    """A sequence operation: commit or rollback of the messages up to ``sequence``."""

    type: SequenceOpType
    channels: tuple[int, ...]
    sequence: int
    multicast: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.type, SequenceOpType):
            raise LocalProtocolError(f"type must be a SequenceOpType, got {self.type!r}")
        _check_channels(self.channels, self.multicast)
        _check_sequence(self.sequence)


@dataclass(frozen=True, slots=True, kw_only=True)
class SequenceAck:
    """A sequence acknowledgement: received, consumed, committed or uncommitted up to ``sequence``."""

    type: SequenceAckType
    channels: tuple[int, ...]
    sequence: int
    multicast: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.type, SequenceAckType):
            raise LocalProtocolError(f"type must be a SequenceAckType, got {self.type!r}")
        _check_channels(self.channels, self.multicast)
        _check_sequence(self.sequence)


@dataclass(frozen=True, slots=True, kw_only=True)
class MessagePacket:
    """A message: zero or more parts of bytes, to one channel or several."""

    channels: tuple[int, ...]
    parts: tuple[bytes, ...]
    multicast: bool = False

    def __post_init__(self) -> None:
        _check_channels(self.channels, self.multicast)
        if not isinstance(self.parts, tuple) or not all(isinstance(part, bytes) for part in self.parts):
            raise LocalProtocolError("parts must be a tuple of bytes")
        if len(self.parts) > MASK:
            raise LocalProtocolError("a message has at most 2**32 - 1 parts")


Packet = Union[GeneralPacket, ChannelOp, ChannelAck, SequenceOp, SequenceAck, MessagePacket]


@dataclass(frozen=True, slots=True, kw_only=True)
class RelinkLimits:
    """What a peer may send, and what we send it (so a Go peer with its defaults accepts it).

    Attributes:
        max_parts: most parts in one message. Go's default: 1024.
        max_part_size: largest single part, in bytes. Default 16 MiB (Go's
            is 1 GiB; ours bounds the decoder's buffer).
        max_message_size: largest sum of a message's part sizes. Default 16 MiB.
        max_multicast: most channel ids in one multicast packet. Default 1024.
        max_unconsumed: most messages received on one channel and not yet
            consumed. A sender keeps at most its send window unconsumed
            (Go's default 65,536, also Go's receive buffer), so a peer that
            exceeds this has overrun its window. Default 65,536.
        max_pending_commits: most commits awaiting their answer on one
            channel, and how many answers a receiver keeps to repeat after a
            reconnection. Both peers must use the same value. Default 64.
    """

    max_parts: int = 1024
    max_part_size: int = 16 * MiB
    max_message_size: int = 16 * MiB
    max_multicast: int = 1024
    max_unconsumed: int = 65536
    max_pending_commits: int = 64

    def __post_init__(self) -> None:
        for name in self.__dataclass_fields__:
            value = getattr(self, name)
            if type(value) is not int or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if self.max_parts > MASK or self.max_multicast > MASK:
            raise ValueError("max_parts and max_multicast must fit 32 bits")


DEFAULT_LIMITS = RelinkLimits()
