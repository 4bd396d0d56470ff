"""Bytes to MicroMsg2 handshakes and frames and back, within limits.

Layouts (all numbers big-endian)::

    handshake  major:1 minor:1 flags:1 idlen:1 identity
               reqlen:2 required optlen:2 optional
    MESSAGE    flags:1 seq:2 destlen:1 destination proplen:2 properties
               paylen:1|4 payload
    COMMAND    flags:1 paylen:1|4 payload          (ERROR: the same)
    EXTENSION  flags:1 id:1 paylen:1|4 payload

The payload length is 4 bytes when the flags carry LARGE_PAYLOAD (8). We
set it only for payloads over 255 bytes; we accept it on any frame.

A frame is rejected with a typed ``RemoteProtocolError`` for: a flag bit
above 16; more than one of COMMAND, EXTENSION, ERROR; CONTINUED on a frame
that is not a MESSAGE; a payload length over ``Limits.max_frame_payload``
(checked when the length is read, before anything is buffered for it, so
the decoder never holds more than one frame's header plus what was fed);
and any field that does not parse.

Where the handshake is expected, a first byte of 0x04 or 0x0C is not a
major version but an ERROR frame: that is how a peer refuses our handshake
(the spec says to send an ERROR frame, and no real version is 4 or 12).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from rstreams.protocol import prechecked

from ._errors import (
    FrameTooLargeError,
    LocalProtocolError,
    MalformedTextError,
    RemoteProtocolError,
)
from ._extensions import format_extensions, parse_extensions
from ._frames import (
    CommandFrame,
    ErrorFrame,
    ExtensionFrame,
    Frame,
    FrameFlags,
    Handshake,
    MessageFrame,
    check_sequence,
)
from ._payloads import NamedArguments
from ._properties import decode_properties, encode_properties

__all__ = ["MIB", "Limits", "DEFAULT_LIMITS", "encode_handshake", "encode_frame", "Decoder"]

# A received MESSAGE frame, built without MessageFrame's checks: the decoder
# checks the sequence number itself, and makes every other field so that it
# holds (a destination of at most 255 bytes from its length byte, decoded
# as UTF-8; properties parsed and checked by decode_properties; the payload
# as bytes). Checking them again was a fifth of receiving a small message.
_decoded_message = prechecked(MessageFrame)

#: One mebibyte, the spec's largest MESSAGE payload per frame.
MIB = 1024 * 1024
# The flags as plain ints: every frame is read and written through these,
# and arithmetic on an IntFlag member builds a new member each time (a third
# of the cost of reading a small MESSAGE frame).
_COMMAND = int(FrameFlags.COMMAND)
_EXTENSION = int(FrameFlags.EXTENSION)
_ERROR = int(FrameFlags.ERROR)
_LARGE_PAYLOAD = int(FrameFlags.LARGE_PAYLOAD)
_CONTINUED = int(FrameFlags.CONTINUED)
_TYPE_FLAGS = _COMMAND | _EXTENSION | _ERROR
_ALL_FLAGS = _TYPE_FLAGS | _LARGE_PAYLOAD | _CONTINUED
_ERROR_FIRST_BYTES = (_ERROR, _ERROR | _LARGE_PAYLOAD)


@dataclass(frozen=True, slots=True, kw_only=True)
class Limits:
    """What the peer may make us hold.

    Attributes:
        max_frame_payload: the largest payload of one frame (the spec splits
            messages at 1 MiB, so that is the default).
        max_message_size: the largest message reassembled from CONTINUED
            frames (default 16 MiB).
        max_pending_messages: how many received messages may wait for the
            application to consume them (default 1024); with an ack window
            the peer is held to the window as well.
        max_filter_length: the longest filter a subscribe may carry, in
            characters once URL-decoded (default 4 KiB).
        max_filter_conditions: the most conditions in one filter (default
            32). A filter over either limit fails that subscription only
            (its stream ERROR), before any condition is parsed: a 1 MiB
            COMMAND frame holds 150,000 conditions, which took a second to
            parse in one step, 11 MB to keep and 18 ms to match against each
            message. 256 conditions still cost 1.6 ms to parse and up to
            150 µs a message to match, times 64 subscriptions: a peer's
            filters bought the server's core (a bystander waited 237 ms).
            Within 32, parsing one takes about 0.2 ms, matching it at most
            about 20 µs, and it holds about 5 KB.
    """

    max_frame_payload: int = MIB
    max_message_size: int = 16 * MIB
    max_pending_messages: int = 1024
    max_filter_length: int = 4 * 1024
    max_filter_conditions: int = 32

    def __post_init__(self) -> None:
        for name in (
            "max_frame_payload",
            "max_message_size",
            "max_pending_messages",
            "max_filter_length",
            "max_filter_conditions",
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, not {value!r}")
        if self.max_frame_payload > 2**32 - 1:
            raise ValueError("max_frame_payload cannot exceed a 4-byte length")


DEFAULT_LIMITS = Limits()


def _field16(data: bytes, what: str) -> bytes:
    if len(data) > 0xFFFF:
        raise LocalProtocolError(f"{what} is {len(data)} bytes, over 65535")
    return struct.pack(">H", len(data)) + data


def encode_handshake(handshake: Handshake) -> bytes:
    """The bytes of one handshake message."""
    identity = handshake.identity.encode("ascii")
    return (
        bytes((handshake.major, handshake.minor, handshake.flags, len(identity)))
        + identity
        + _field16(format_extensions(handshake.required), "RequiredExtensions")
        + _field16(format_extensions(handshake.optional), "OptionalExtensions")
    )


def _sized(flags: int, prefix: bytes, payload: bytes) -> bytes:
    if len(payload) > 255:
        return bytes((flags | _LARGE_PAYLOAD,)) + prefix + struct.pack(">I", len(payload)) + payload
    return bytes((flags,)) + prefix + bytes((len(payload),)) + payload


def encode_frame(frame: Frame) -> bytes:
    """The bytes of one frame.

    Raises:
        LocalProtocolError: a field does not fit its length field.
    """
    if isinstance(frame, MessageFrame):
        destination = frame.destination.encode("utf-8")
        prefix = (
            struct.pack(">HB", frame.sequence, len(destination))
            + destination
            + _field16(encode_properties(frame.properties), "Properties")
        )
        return _sized(_CONTINUED if frame.continued else 0, prefix, frame.payload)
    if isinstance(frame, CommandFrame):
        return _sized(_COMMAND, b"", frame.command.encode())
    if isinstance(frame, ErrorFrame):
        return _sized(_ERROR, b"", frame.error.encode())
    return _sized(_EXTENSION, bytes((frame.extension_id,)), frame.payload)


class Decoder:
    """Parse handshakes and frames from a byte stream, one at a time.

    Feed bytes with :meth:`feed`; take a handshake with
    :meth:`next_handshake` or a frame with :meth:`next_frame` (the caller
    knows which one comes next). Each returns None while the bytes are
    incomplete, and raises ``RemoteProtocolError`` (or a subclass) for bytes
    that can never be valid.
    """

    def __init__(self, limits: Limits = DEFAULT_LIMITS) -> None:
        self.limits = limits
        self._buffer = bytearray()

    @property
    def buffered(self) -> int:
        """Bytes fed and not yet parsed."""
        return len(self._buffer)

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        """Add received bytes."""
        self._buffer += data

    def _take(self, size: int) -> bytes:
        data = bytes(self._buffer[:size])
        del self._buffer[:size]
        return data

    def next_handshake(self) -> Handshake | ErrorFrame | None:
        """The next handshake message (or the ERROR frame that refuses ours), or None."""
        buffer = self._buffer
        if buffer[:1] and buffer[0] in _ERROR_FIRST_BYTES:
            frame = self.next_frame()
            assert frame is None or isinstance(frame, ErrorFrame)
            return frame
        if len(buffer) < 4:
            return None
        required_at = 4 + buffer[3]
        if len(buffer) < required_at + 2:
            return None
        optional_at = required_at + 2 + int.from_bytes(buffer[required_at : required_at + 2], "big")
        if len(buffer) < optional_at + 2:
            return None
        end = optional_at + 2 + int.from_bytes(buffer[optional_at : optional_at + 2], "big")
        if len(buffer) < end:
            return None
        raw = self._take(end)
        try:
            identity = raw[4:required_at].decode("ascii")
            required = parse_extensions(raw[required_at + 2 : optional_at])
            optional = parse_extensions(raw[optional_at + 2 : end])
            return Handshake(
                major=raw[0], minor=raw[1], flags=raw[2], identity=identity, required=required, optional=optional
            )
        except UnicodeDecodeError:
            raise RemoteProtocolError("the handshake identity is not ASCII") from None
        except (MalformedTextError, LocalProtocolError) as exc:
            raise RemoteProtocolError(f"bad handshake: {exc.message}") from None

    def _payload_length(self, at: int, flags: int) -> tuple[int, int] | None:
        # Returns (length, where the payload starts) once the length field is in.
        width = 4 if flags & _LARGE_PAYLOAD else 1
        if len(self._buffer) < at + width:
            return None
        length = int.from_bytes(self._buffer[at : at + width], "big")
        if length > self.limits.max_frame_payload:
            raise FrameTooLargeError(
                f"a frame payload of {length} bytes is over the limit of {self.limits.max_frame_payload}"
            )
        return length, at + width

    def next_frame(self) -> Frame | None:
        """The next frame, or None while it is incomplete."""
        buffer = self._buffer
        if not buffer:
            return None
        flags = buffer[0]
        if flags & ~_ALL_FLAGS & 0xFF:
            raise RemoteProtocolError(f"unknown frame flags 0x{flags:02x}")
        kind = flags & _TYPE_FLAGS
        if kind not in (0, _COMMAND, _EXTENSION, _ERROR):
            raise RemoteProtocolError(f"frame flags 0x{flags:02x} name more than one frame type")
        if kind and flags & _CONTINUED:
            raise RemoteProtocolError("CONTINUED is only for MESSAGE frames")
        if kind == 0:
            return self._next_message(flags)
        header = 2 if kind == _EXTENSION else 1
        sized = self._payload_length(header, flags)
        if sized is None or len(buffer) < sized[1] + sized[0]:
            return None
        length, start = sized
        raw = self._take(start + length)
        payload = raw[start:]
        try:
            if kind == _EXTENSION:
                return ExtensionFrame(extension_id=raw[1], payload=payload)
            arguments = NamedArguments.decode(payload)
        except (MalformedTextError, LocalProtocolError) as exc:
            raise RemoteProtocolError(f"bad frame: {exc.message}") from None
        return CommandFrame(command=arguments) if kind == _COMMAND else ErrorFrame(error=arguments)

    def _next_message(self, flags: int) -> MessageFrame | None:
        buffer = self._buffer
        if len(buffer) < 4:
            return None
        properties_at = 4 + buffer[3]
        if len(buffer) < properties_at + 2:
            return None
        length_at = properties_at + 2 + int.from_bytes(buffer[properties_at : properties_at + 2], "big")
        sized = self._payload_length(length_at, flags)
        if sized is None or len(buffer) < sized[1] + sized[0]:
            return None
        length, start = sized
        raw = self._take(start + length)
        sequence = int.from_bytes(raw[1:3], "big")
        try:
            if not sequence:  # (two bytes: 0 is the one value out of range)
                check_sequence(sequence)
            return _decoded_message(
                sequence,
                raw[4:properties_at].decode("utf-8"),
                decode_properties(raw[properties_at + 2 : length_at]),
                raw[start:],
                bool(flags & _CONTINUED),
            )
        except UnicodeDecodeError:
            raise RemoteProtocolError("a destination is not UTF-8") from None
        except (MalformedTextError, LocalProtocolError) as exc:
            raise RemoteProtocolError(f"bad message frame: {exc.message}") from None
