"""Relink packets to bytes and back (``specs/relink.md`` section 2).

Layout
------
Bit 0 is the least significant bit of a byte. Header byte 0: channel flag
``0x01``, multicast ``0x02``, channel packet format ``(b >> 2) & 7``,
format-specific data ``b >> 5`` (a packet type, or the message flags long
``0x20`` and large ``0x40``). Header byte 1: the short message length. Then::

    unicast     id (id size bytes; none when the size is 0)
    multicast   padding:2  count:u32  id * count
    sequence    pad to 4  sequence:u32
    message     pad to 2  [length:u32 if long]
                small: size:u16 * length  pad to 8
                large: pad to 8  size:u64 * length
                each part's bytes, padded to 8 (an empty part takes none)
    every packet ends padded to 8

All integers are little-endian. Every packet starts 8-aligned in the stream
(the handshake is a multiple of 8 bytes too), so offsets inside a packet are
aligned relative to its start.

Which id size?
--------------
Channel ops, sequence ops and messages name a channel of the packet's
*sender*; channel and sequence acks name a channel of its *receiver* (the
one whose messages they acknowledge). Both sizes were negotiated in the
handshake, so both the encoder and the decoder take ``sender_id_size`` and
``receiver_id_size`` as seen from the packet.

Decoder
-------
:class:`PacketDecoder` is incremental: feed bytes, take packets. It reads a
packet's header, ids and size vector, checks every count and size against
:class:`~bridges.relink.RelinkLimits` *before* waiting for the rest, and
never allocates on an unchecked length, so it buffers at most one packet
(bounded by the limits) plus what it was fed. Unknown enumeration values end
the connection (``RemoteProtocolError``); padding and unused bits are
ignored, as the spec says.
"""

from __future__ import annotations

import struct

from rstreams.protocol import prechecked

from ._errors import LimitExceeded, LocalProtocolError, RemoteProtocolError
from ._packets import (
    DEFAULT_LIMITS,
    MAX_CHANNEL_ID_SIZE,
    ChannelAck,
    ChannelAckType,
    ChannelFormat,
    ChannelOp,
    ChannelOpType,
    GeneralPacket,
    GeneralType,
    MessagePacket,
    Packet,
    RelinkLimits,
    SequenceAck,
    SequenceAckType,
    SequenceOp,
    SequenceOpType,
)

__all__ = ["encode_packet", "PacketDecoder", "packet_size"]

_CHANNEL = 0x01
_MULTICAST = 0x02
_LONG = 0x01  # message flags, in the format-specific data (header bits 5-7)
_LARGE = 0x02
_U32 = struct.Struct("<I")
_MAX_SHORT_LENGTH = 0xFF
_MAX_SMALL_SIZE = 0xFFFF
_COMPACT_AT = 64 * 1024  # drop consumed bytes from the buffer past this offset
# The channel formats by their three bits (None: no such format), looked up
# instead of calling the enum for every packet.
_FORMATS: tuple[ChannelFormat | None, ...] = tuple(
    next((member for member in ChannelFormat if member == bits), None) for bits in range(8)
)
# A received message, built without MessagePacket's checks: the decoder made
# every field itself (channels from their id bytes, one unless multicast;
# parts as bytes, no more than max_parts), so they hold by construction, and
# checking them again was a fifth of reading a small message.
_decoded_message = prechecked(MessagePacket)


#: Padding of 0 to 7 bytes, made once.
_ZEROS = tuple(bytes(count) for count in range(8))
_MESSAGE_FORMAT = int(ChannelFormat.MESSAGE) << 2


def _pad(offset: int, alignment: int) -> int:
    return -offset % alignment


def _check_id_size(name: str, size: int) -> None:
    if type(size) is not int or not 0 <= size <= MAX_CHANNEL_ID_SIZE:
        raise ValueError(f"{name} must be an int in [0, {MAX_CHANNEL_ID_SIZE}], got {size!r}")


# ---- encoding ---------------------------------------------------------------


def _channel_part(packet: ChannelOp | ChannelAck | SequenceOp | SequenceAck | MessagePacket, id_size: int) -> bytes:
    out = bytearray()
    if packet.multicast:
        out += b"\0\0" + _U32.pack(len(packet.channels))
    bound = 1 << (8 * id_size)
    for channel in packet.channels:
        if channel >= bound:
            raise LocalProtocolError(f"channel id {channel} does not fit {id_size}-byte ids")
        out += channel.to_bytes(id_size, "little")
    return bytes(out)


def encode_packet(packet: Packet, *, sender_id_size: int, receiver_id_size: int) -> bytes:
    """Encode one packet, padded to a multiple of 8 bytes.

    A message is written short (part count in the header) when it has at
    most 255 parts, else long; small (16-bit sizes) when every part is at
    most 65535 bytes, else large: the smallest form, as Go writes it.

    Args:
        packet: the packet.
        sender_id_size: id size of the channels the packet's sender sends on.
        receiver_id_size: id size of the channels the packet's receiver sends on.

    Raises:
        LocalProtocolError: a channel id does not fit its id size.
    """
    if isinstance(packet, GeneralPacket):
        return bytes((packet.type << 5, 0, 0, 0, 0, 0, 0, 0))
    if isinstance(packet, MessagePacket):
        return _encode_message(packet, sender_id_size)
    if isinstance(packet, (ChannelOp, SequenceOp)):
        id_size = sender_id_size
        channel_format = ChannelFormat.CHANNEL_OP if isinstance(packet, ChannelOp) else ChannelFormat.SEQUENCE_OP
    else:
        id_size = receiver_id_size
        channel_format = ChannelFormat.CHANNEL_ACK if isinstance(packet, ChannelAck) else ChannelFormat.SEQUENCE_ACK
    header = _CHANNEL | (_MULTICAST if packet.multicast else 0) | channel_format << 2 | packet.type << 5
    out = bytearray((header, 0))
    out += _channel_part(packet, id_size)
    if isinstance(packet, (SequenceOp, SequenceAck)):
        out += bytes(_pad(len(out), 4))
        out += _U32.pack(packet.sequence)
    out += bytes(_pad(len(out), 8))
    return bytes(out)


def _encode_message(packet: MessagePacket, id_size: int) -> bytes:
    parts = packet.parts
    sizes = list(map(len, parts))
    flags = 0
    if len(parts) > _MAX_SHORT_LENGTH:
        flags |= _LONG
    if sizes and max(sizes) > _MAX_SMALL_SIZE:
        flags |= _LARGE
    header = _CHANNEL | (_MULTICAST if packet.multicast else 0) | _MESSAGE_FORMAT | flags << 5
    out = bytearray((header, 0 if flags & _LONG else len(parts)))
    out += _channel_part(packet, id_size)
    out += _ZEROS[_pad(len(out), 2)]
    if flags & _LONG:
        out += _U32.pack(len(parts))
    if flags & _LARGE:
        out += _ZEROS[_pad(len(out), 8)]
        out += struct.pack(f"<{len(sizes)}Q", *sizes)
    else:
        out += struct.pack(f"<{len(sizes)}H", *sizes)
        out += _ZEROS[_pad(len(out), 8)]
    for part, size in zip(parts, sizes):
        out += part
        out += _ZEROS[-size % 8]
    return bytes(out)


def packet_size(parts: tuple[bytes, ...], *, channels: int = 1, id_size: int = 0, multicast: bool = False) -> int:
    """How many bytes a message packet takes on the wire (without building it)."""
    size = 2 + (6 if multicast else 0) + channels * id_size
    size += _pad(size, 2)
    if len(parts) > _MAX_SHORT_LENGTH:
        size += 4
    if any(len(part) > _MAX_SMALL_SIZE for part in parts):
        size += _pad(size, 8) + 8 * len(parts)
    else:
        size += 2 * len(parts)
        size += _pad(size, 8)
    return size + sum(len(part) + _pad(len(part), 8) for part in parts)


# ---- decoding -----------------------------------------------------------


class PacketDecoder:
    """Incremental packet decoder: :meth:`feed` bytes, :meth:`next_packet` until None.

    Args:
        sender_id_size: id size of the channels the peer (the packets'
            sender) sends messages on.
        receiver_id_size: id size of the channels we send messages on.
        limits: what the peer may send.
    """

    def __init__(self, *, sender_id_size: int, receiver_id_size: int, limits: RelinkLimits = DEFAULT_LIMITS) -> None:
        _check_id_size("sender_id_size", sender_id_size)
        _check_id_size("receiver_id_size", receiver_id_size)
        self.sender_id_size = sender_id_size
        self.receiver_id_size = receiver_id_size
        self.limits = limits
        self._buffer = bytearray()
        self._offset = 0
        # Once the next packet's full length is known, skip re-parsing until
        # that many bytes have arrived (a large message comes in many reads).
        self._need = 0

    @property
    def buffered(self) -> int:
        """Bytes received and not yet returned as packets."""
        return len(self._buffer) - self._offset

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        """Add received bytes."""
        if self._offset >= _COMPACT_AT:
            del self._buffer[: self._offset]
            self._offset = 0
        self._buffer += data

    def next_packet(self) -> Packet | None:
        """The next complete packet, or None until more bytes arrive.

        Raises:
            RemoteProtocolError: the bytes are not a valid packet (or exceed
                the limits: ``LimitExceeded``). The decoder is unusable after.
        """
        have = len(self._buffer) - self._offset  # (self.buffered, without a call per packet)
        if have < 2 or have < self._need:
            return None
        parsed = self._parse()
        if parsed is None:
            return None
        packet, length = parsed
        self._offset += length
        self._need = 0
        if self._offset >= _COMPACT_AT and self._offset == len(self._buffer):
            # All taken: let a large packet's bytes go now, not at the next
            # feed, which may never come (a link outlives its connection,
            # and a peer's 600 KB messages, one per dropped link, were held
            # for the link's lifetime).
            self._buffer, self._offset = bytearray(), 0
        return packet

    def _available(self, length: int) -> bool:
        # Record how much the packet needs, so next_packet can wait cheaply.
        self._need = length
        return len(self._buffer) - self._offset >= length

    def _parse(self) -> tuple[Packet, int] | None:
        buf, start = self._buffer, self._offset
        byte0 = buf[start]
        data = byte0 >> 5
        if not byte0 & _CHANNEL:
            try:
                general_type = GeneralType(data)
            except ValueError:
                raise RemoteProtocolError(f"unknown general packet type {data}") from None
            if not self._available(8):
                return None
            return GeneralPacket(type=general_type), 8
        channel_format = _FORMATS[(byte0 >> 2) & 7]
        if channel_format is None:
            raise RemoteProtocolError(f"unknown channel packet format {(byte0 >> 2) & 7}")
        kind = _packet_type(channel_format, data)
        multicast = bool(byte0 & _MULTICAST)
        id_size = self.receiver_id_size if channel_format.names_receivers_channel else self.sender_id_size
        offset = 2
        count = 1
        if multicast:
            if not self._available(8):
                return None
            count = _U32.unpack_from(buf, start + 4)[0]
            if count > self.limits.max_multicast:
                raise LimitExceeded(
                    f"multicast to {count} channels; the limit is {self.limits.max_multicast}",
                    limit="max_multicast",
                    value=count,
                )
            offset = 8
        if not self._available(offset + count * id_size):
            return None
        at = start + offset
        if count == 1:
            channels: tuple[int, ...] = (int.from_bytes(buf[at : at + id_size], "little"),)
        else:
            channels = tuple(
                int.from_bytes(buf[at + i * id_size : at + (i + 1) * id_size], "little") for i in range(count)
            )
        offset += count * id_size
        if channel_format is ChannelFormat.MESSAGE:
            return self._parse_message(buf, start, offset, byte0, channels, multicast)
        if channel_format in (ChannelFormat.CHANNEL_OP, ChannelFormat.CHANNEL_ACK):
            length = offset + _pad(offset, 8)
            if not self._available(length):
                return None
            if isinstance(kind, ChannelOpType):
                return ChannelOp(type=kind, channels=channels, multicast=multicast), length
            assert isinstance(kind, ChannelAckType)
            return ChannelAck(type=kind, channels=channels, multicast=multicast), length
        offset += _pad(offset, 4)
        length = offset + 4 + _pad(offset + 4, 8)
        if not self._available(length):
            return None
        sequence = _U32.unpack_from(buf, start + offset)[0]
        if isinstance(kind, SequenceOpType):
            return SequenceOp(type=kind, channels=channels, sequence=sequence, multicast=multicast), length
        assert isinstance(kind, SequenceAckType)
        return SequenceAck(type=kind, channels=channels, sequence=sequence, multicast=multicast), length

    def _parse_message(
        self, buf: bytearray, start: int, offset: int, byte0: int, channels: tuple[int, ...], multicast: bool
    ) -> tuple[Packet, int] | None:
        limits = self.limits
        flags = byte0 >> 5
        offset += _pad(offset, 2)
        if flags & _LONG:
            if not self._available(offset + 4):
                return None
            count = _U32.unpack_from(buf, start + offset)[0]
            offset += 4
        else:
            count = buf[start + 1]
        if count > limits.max_parts:
            raise LimitExceeded(
                f"message of {count} parts; the limit is {limits.max_parts}", limit="max_parts", value=count
            )
        if flags & _LARGE:
            offset += _pad(offset, 8)
            if not self._available(offset + 8 * count):
                return None
            sizes = struct.unpack_from(f"<{count}Q", buf, start + offset)
            offset += 8 * count
        else:
            if not self._available(offset + 2 * count):
                return None
            sizes = struct.unpack_from(f"<{count}H", buf, start + offset)
            offset += 2 * count
            offset += -offset % 8
        total = 0
        length = offset
        for size in sizes:
            length += size + (-size % 8)
            if size > limits.max_part_size:
                raise LimitExceeded(
                    f"message part of {size} bytes; the limit is {limits.max_part_size}",
                    limit="max_part_size",
                    value=size,
                )
            total += size
        if total > limits.max_message_size:
            raise LimitExceeded(
                f"message of {total} bytes; the limit is {limits.max_message_size}",
                limit="max_message_size",
                value=total,
            )
        if not self._available(length):
            return None
        parts = []
        at = start + offset
        for size in sizes:
            parts.append(bytes(buf[at : at + size]))
            at += size + (-size % 8)
        return _decoded_message(channels, tuple(parts), multicast), length


def _packet_type(
    channel_format: ChannelFormat, data: int
) -> ChannelOpType | ChannelAckType | SequenceOpType | SequenceAckType | None:
    enumeration: type[ChannelOpType] | type[ChannelAckType] | type[SequenceOpType] | type[SequenceAckType]
    if channel_format is ChannelFormat.MESSAGE:
        return None  # the data bits are message flags; the third bit is unused
    if channel_format is ChannelFormat.CHANNEL_OP:
        enumeration = ChannelOpType
    elif channel_format is ChannelFormat.CHANNEL_ACK:
        enumeration = ChannelAckType
    elif channel_format is ChannelFormat.SEQUENCE_OP:
        enumeration = SequenceOpType
    else:
        enumeration = SequenceAckType
    try:
        return enumeration(data)
    except ValueError:
        name = channel_format.name.lower().replace("_", " ")
        raise RemoteProtocolError(f"unknown {name} packet type {data}") from None
