"""Epoxy frames and framelets: bytes to frames and back, within limits.

Layout (all integers little-endian)::

    frame      count:u16 (0 < count < 65535)  framelet{count}
    framelet   type:u16  size:u32 (> 0)  content[size]

The first framelet decides the frame's kind and what may follow it:

* Config frame: exactly one ``EpoxyConfig``;
* Error frame: exactly one ``ProtocolError``;
* Message frame: ``EpoxyHeaders``, an optional ``LayerData``, then exactly
  one of ``PayloadData`` or ``ErrorData``.

The :class:`FrameDecoder` checks all of it as the bytes arrive, before
buffering any content: the count against ``max_framelets``, each type as
soon as its two bytes are there (an unknown type, or a known one out of
place, is ``PROTOCOL_VIOLATED``, as the spec requires for unknown
framelets), each size against ``max_framelet_size`` (``max_headers_size``
for the headers, config and error structs the connection decodes itself,
which are small) and the running total
against ``max_frame_size`` (``LIMIT_EXCEEDED``), and empty contents
(``PROTOCOL_VIOLATED``: no framelet may be empty, Bond's C# ``Framelet``
refuses them too). So the buffer never holds more than one framelet plus
what the I/O layer fed beyond it.

Errors are :class:`~bridges.epoxy.RemoteProtocolError` carrying the
ProtocolErrorCode to send back.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass

from . import bond
from ._errors import LocalProtocolError, RemoteProtocolError
from ._structs import EpoxyConfig, EpoxyHeaders, ProtocolError, ProtocolErrorCode

__all__ = [
    "FrameletType",
    "FrameKind",
    "Framelet",
    "Frame",
    "EpoxyLimits",
    "DEFAULT_LIMITS",
    "FrameDecoder",
    "config_frame",
    "message_frame",
    "error_frame",
]

KiB = 1024
MiB = 1024 * KiB
_U16 = struct.Struct("<H")
_FRAMELET_HEADER = struct.Struct("<HI")
_MAX_FRAMELETS = 0xFFFE  # "greater than 0 and less than 65,535"


class FrameletType(enum.IntEnum):
    """Framelet type ids.

    Written little-endian, their two bytes read as a mnemonic in a hex dump:
    "CG" (config, ``43 47``), "HR" (headers), "ED" (error data), "LY" (layer
    data), "PD" (payload data), "ER" (protocol error).
    """

    EPOXY_CONFIG = 0x4743
    EPOXY_HEADERS = 0x5248
    ERROR_DATA = 0x4445
    LAYER_DATA = 0x594C
    PAYLOAD_DATA = 0x4450
    PROTOCOL_ERROR = 0x5245


class FrameKind(enum.Enum):
    """What a frame is, from its first framelet."""

    CONFIG = "config"
    MESSAGE = "message"
    ERROR = "error"


_T = FrameletType
_KINDS = {_T.EPOXY_CONFIG: FrameKind.CONFIG, _T.EPOXY_HEADERS: FrameKind.MESSAGE, _T.PROTOCOL_ERROR: FrameKind.ERROR}
# The framelets the connection decodes itself (the first of each frame):
# held to ``max_headers_size``, not to a payload's ``max_framelet_size``.
_DECODED_HERE = frozenset(_KINDS)
_MESSAGE_END = frozenset({_T.PAYLOAD_DATA, _T.ERROR_DATA})
# What each position of a frame may hold, by frame kind and framelet count.
_GRAMMAR: dict[tuple[FrameletType, int], tuple[frozenset[FrameletType], ...]] = {
    (_T.EPOXY_CONFIG, 1): (frozenset({_T.EPOXY_CONFIG}),),
    (_T.PROTOCOL_ERROR, 1): (frozenset({_T.PROTOCOL_ERROR}),),
    (_T.EPOXY_HEADERS, 2): (frozenset({_T.EPOXY_HEADERS}), _MESSAGE_END),
    (_T.EPOXY_HEADERS, 3): (frozenset({_T.EPOXY_HEADERS}), frozenset({_T.LAYER_DATA}), _MESSAGE_END),
}


@dataclass(frozen=True, slots=True, kw_only=True)
class Framelet:
    """One framelet: a type and its (non-empty) content."""

    type: FrameletType
    content: bytes

    def __post_init__(self) -> None:
        if not isinstance(self.type, FrameletType):
            raise LocalProtocolError(f"unknown framelet type {self.type!r}")
        if not isinstance(self.content, bytes) or not self.content:
            raise LocalProtocolError("framelet content must be non-empty bytes")
        if len(self.content) > 0xFFFFFFFF:
            raise LocalProtocolError("framelet content does not fit a 32-bit size")


@dataclass(frozen=True, slots=True, kw_only=True)
class Frame:
    """A frame: 1 to 65534 framelets, in order.

    The constructor checks counts and contents but not the order rules, so
    that tests can build frames a peer must refuse; :attr:`kind` and the
    decoder apply them.
    """

    framelets: tuple[Framelet, ...]

    def __post_init__(self) -> None:
        if not 0 < len(self.framelets) <= _MAX_FRAMELETS:
            raise LocalProtocolError(f"a frame holds 1 to {_MAX_FRAMELETS} framelets, not {len(self.framelets)}")

    @property
    def kind(self) -> FrameKind:
        """The frame's kind, for a frame that follows the order rules.

        Raises:
            LocalProtocolError: the frame breaks them.
        """
        types = [framelet.type for framelet in self.framelets]
        grammar = _GRAMMAR.get((types[0], len(types)))
        if grammar is None or any(kind not in allowed for kind, allowed in zip(types, grammar)):
            raise LocalProtocolError(f"framelets {[t.name for t in types]} do not make a valid frame")
        return _KINDS[types[0]]

    def get(self, framelet_type: FrameletType) -> bytes | None:
        """The content of the first framelet of that type, or None."""
        for framelet in self.framelets:
            if framelet.type == framelet_type:
                return framelet.content
        return None

    def encode(self) -> bytes:
        """The frame's bytes."""
        parts = [_U16.pack(len(self.framelets))]
        for framelet in self.framelets:
            parts.append(_FRAMELET_HEADER.pack(framelet.type, len(framelet.content)))
            parts.append(framelet.content)
        return b"".join(parts)


@dataclass(frozen=True, slots=True, kw_only=True)
class EpoxyLimits:
    """Limits on what a peer may send (the spec's "Limits", at its "should" values).

    Attributes:
        max_framelets: most framelets in a frame; the spec: must support 4,
            should support 16. Default 16. (No valid frame has more than 3
            today; the check just comes first.)
        max_framelet_size: largest framelet content, in bytes; must support
            512 bytes, should support 32 MiB. Default 32 MiB.
        max_frame_size: largest frame, headers included; must support
            2 KiB, should support 32 MiB. Default 32 MiB + 64 KiB, so that a
            framelet of the maximal size still fits with its headers and
            some layer data.
        max_pending_requests: most requests the peer may have waiting for
            our response. Default 65536.
        max_headers_size: largest content of the framelets the connection
            decodes itself, in its reader: ``EpoxyHeaders``, ``EpoxyConfig``
            and ``ProtocolError``. Default 64 KiB. These structs hold a few
            numbers and two names (a few hundred bytes in practice), so the
            32 MiB of a payload is no use to them; and decoding runs inside
            the connection's reader, where any work a framelet makes (Bond
            skipping an unknown field of millions of values took seconds)
            holds up everything else. At least 512 bytes, the spec's
            smallest framelet.
        bond: limits for decoding the headers, config and error structs.
    """

    max_framelets: int = 16
    max_framelet_size: int = 32 * MiB
    max_frame_size: int = 32 * MiB + 64 * KiB
    max_pending_requests: int = 65536
    max_headers_size: int = 64 * KiB
    bond: bond.BondLimits = bond.DEFAULT_LIMITS

    def __post_init__(self) -> None:
        names = ("max_framelets", "max_framelet_size", "max_frame_size", "max_pending_requests", "max_headers_size")
        for name in names:
            value = getattr(self, name)
            if type(value) is not int or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if self.max_framelets < 4 or self.max_framelet_size < 512 or self.max_frame_size < 2 * KiB:
            raise ValueError("the spec requires at least 4 framelets of 512 bytes in frames of 2 KiB")
        if self.max_headers_size < 512:
            raise ValueError(f"max_headers_size must be at least 512 bytes, got {self.max_headers_size}")


DEFAULT_LIMITS = EpoxyLimits()


def _violation(message: str, code: ProtocolErrorCode = ProtocolErrorCode.PROTOCOL_VIOLATED) -> RemoteProtocolError:
    return RemoteProtocolError(message, error_code=code)


class FrameDecoder:
    """A streaming frame decoder: feed bytes in any pieces, take whole frames out.

    Args:
        limits: what the peer may send.
    """

    def __init__(self, *, limits: EpoxyLimits = DEFAULT_LIMITS) -> None:
        self.limits = limits
        self._buffer = bytearray()
        self._count = 0  # framelets in the current frame; 0 before its count arrived
        self._grammar: tuple[frozenset[FrameletType], ...] = ()
        self._framelets: list[Framelet] = []
        self._frame_size = 0
        self._pending: tuple[FrameletType, int] | None = None  # header read, content awaited

    @property
    def buffered(self) -> int:
        """Bytes received and not yet part of a framelet."""
        return len(self._buffer)

    @property
    def held(self) -> int:
        """Bytes received and held: not yet part of a framelet, and the framelets of the frame being read."""
        return len(self._buffer) + sum(len(framelet.content) for framelet in self._framelets)

    @property
    def in_frame(self) -> bool:
        """True between the first byte of a frame and its last."""
        return bool(self._buffer) or self._count > 0

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        """Add received bytes."""
        self._buffer += data

    def next_frame(self) -> Frame | None:
        """The next complete frame, or None until more bytes arrive.

        Raises:
            RemoteProtocolError: the bytes break the framing, the order rules
                or a limit. The decoder is unusable afterwards.
        """
        buffer = self._buffer
        limits = self.limits
        if not self._count:
            if len(buffer) < 2:
                return None
            count = _U16.unpack_from(buffer)[0]
            if count == 0 or count > _MAX_FRAMELETS:
                raise _violation(f"frame of {count} framelets (0 < count < 65535)")
            if count > limits.max_framelets:
                raise _violation(
                    f"frame of {count} framelets exceeds the limit of {limits.max_framelets}",
                    ProtocolErrorCode.LIMIT_EXCEEDED,
                )
            del buffer[:2]
            self._count = count
            self._frame_size = 2
        while len(self._framelets) < self._count:
            if self._pending is None:
                if len(buffer) < 2:
                    return None
                self._check_type(_U16.unpack_from(buffer)[0])
                if len(buffer) < _FRAMELET_HEADER.size:
                    return None
                raw_type, size = _FRAMELET_HEADER.unpack_from(buffer)
                framelet_type = FrameletType(raw_type)
                if size == 0:
                    raise _violation(f"empty {framelet_type.name} framelet")
                limit = limits.max_headers_size if framelet_type in _DECODED_HERE else limits.max_framelet_size
                if size > limit:
                    raise _violation(
                        f"{framelet_type.name} framelet of {size} bytes exceeds the limit of {limit}",
                        ProtocolErrorCode.LIMIT_EXCEEDED,
                    )
                self._frame_size += _FRAMELET_HEADER.size + size
                if self._frame_size > limits.max_frame_size:
                    raise _violation(
                        f"frame of at least {self._frame_size} bytes exceeds the limit of {limits.max_frame_size}",
                        ProtocolErrorCode.LIMIT_EXCEEDED,
                    )
                del buffer[: _FRAMELET_HEADER.size]
                self._pending = (framelet_type, size)
            framelet_type, size = self._pending
            if len(buffer) < size:
                return None
            self._framelets.append(Framelet(type=framelet_type, content=bytes(buffer[:size])))
            del buffer[:size]
            self._pending = None
        frame = Frame(framelets=tuple(self._framelets))
        self._count = 0
        self._grammar = ()
        self._framelets = []
        return frame

    def _check_type(self, raw_type: int) -> None:
        try:
            framelet_type = FrameletType(raw_type)
        except ValueError:
            raise _violation(f"unknown framelet type 0x{raw_type:04x}") from None
        index = len(self._framelets)
        if index == 0:
            grammar = _GRAMMAR.get((framelet_type, self._count))
            if grammar is None:
                if framelet_type not in _KINDS:
                    raise _violation(f"a frame cannot start with {framelet_type.name}")
                raise _violation(f"a frame starting with {framelet_type.name} cannot have {self._count} framelets")
            self._grammar = grammar
        elif framelet_type not in self._grammar[index]:
            raise _violation(f"{framelet_type.name} cannot be framelet {index + 1} of a {self._count}-framelet frame")

    def check_eof(self) -> None:
        """Call at end of file.

        Raises:
            RemoteProtocolError: the stream ended in the middle of a frame.
        """
        if self.in_frame:
            # (The bytes of a part framelet alone said "0 bytes buffered" for
            # a frame cut between two framelets.)
            if not self._count:
                where = f"{len(self._buffer)} byte of its framelet count"
            elif self._pending is not None:
                where = (
                    f"{len(self._framelets)} of its {self._count} framelets, then {len(self._buffer)}"
                    f" of the next one's {self._pending[1]} bytes"
                )
            else:
                where = f"{len(self._framelets)} of its {self._count} framelets, then {len(self._buffer)} bytes"
            raise _violation(f"connection closed in the middle of a frame (after {where})")


# ---- building frames ---------------------------------------------------------


def config_frame(config: EpoxyConfig | None = None) -> Frame:
    """A Config frame (an ``EpoxyConfig``, Fast Binary serialized)."""
    content = bond.serialize(config if config is not None else EpoxyConfig(), bond.Protocol.FAST)
    return Frame(framelets=(Framelet(type=_T.EPOXY_CONFIG, content=content),))


def message_frame(
    headers: EpoxyHeaders, payload: bytes, *, layer_data: bytes | None = None, is_error: bool = False
) -> Frame:
    """A Message frame; ``payload`` and ``layer_data`` are marshalled already.

    Raises:
        LocalProtocolError: an empty payload or layer data.
    """
    framelets = [Framelet(type=_T.EPOXY_HEADERS, content=bond.serialize(headers, bond.Protocol.FAST))]
    if layer_data is not None:
        framelets.append(Framelet(type=_T.LAYER_DATA, content=layer_data))
    framelets.append(Framelet(type=_T.ERROR_DATA if is_error else _T.PAYLOAD_DATA, content=payload))
    return Frame(framelets=tuple(framelets))


def error_frame(error: ProtocolError) -> Frame:
    """An Error frame (a ``ProtocolError``, Fast Binary serialized)."""
    return Frame(framelets=(Framelet(type=_T.PROTOCOL_ERROR, content=bond.serialize(error, bond.Protocol.FAST)),))
