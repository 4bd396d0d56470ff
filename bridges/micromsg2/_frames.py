"""The MicroMsg2 handshake and frames, as values.

These are what :mod:`._codec` turns into bytes and back. Validation happens
in ``__post_init__`` so an invalid frame cannot exist: a local caller gets
:class:`~bridges.micromsg2.LocalProtocolError` at construction, and the
decoder turns the same failure into a ``RemoteProtocolError``.

A frame with none of the COMMAND, EXTENSION and ERROR flags is a MESSAGE
(server to client) or a SEND (client to server): the layout is the same,
so one class, :class:`MessageFrame`, is both. LARGE_PAYLOAD is not a field:
the encoder sets it when the payload is over 255 bytes (and only then), the
decoder accepts it on any frame. CONTINUED is :attr:`MessageFrame.continued`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Union

from ._errors import LocalProtocolError, MalformedTextError
from ._extensions import ExtensionSpec
from ._payloads import NamedArguments
from ._properties import Properties, make_properties

__all__ = [
    "PROTOCOL_VERSION",
    "MAX_SEQUENCE",
    "FrameFlags",
    "Handshake",
    "MessageFrame",
    "CommandFrame",
    "ErrorFrame",
    "ExtensionFrame",
    "Frame",
]

#: The version this implementation speaks: 1.0.
PROTOCOL_VERSION = (1, 0)
#: Sequence numbers run 1..65535 and wrap to 1; 0 is never used.
MAX_SEQUENCE = 65535


class FrameFlags(enum.IntFlag):
    """The bits of a frame's first byte."""

    COMMAND = 1
    EXTENSION = 2
    ERROR = 4
    LARGE_PAYLOAD = 8
    CONTINUED = 16


def _check_range(name: str, value: int, low: int, high: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise LocalProtocolError(f"{name} must be an integer in [{low}, {high}], not {value!r}")


def check_sequence(sequence: int) -> None:
    """A MESSAGE frame's sequence number, 1..MAX_SEQUENCE: the rule for a
    frame built here and for one the decoder reads (which builds it
    without the frame's checks). Raises LocalProtocolError."""
    _check_range("sequence number", sequence, 1, MAX_SEQUENCE)


@dataclass(frozen=True, slots=True, kw_only=True)
class Handshake:
    """One handshake message (the three steps all have this layout).

    Attributes:
        major, minor: the version; ours is 1.0.
        flags: the reserved flags byte (we send 0).
        identity: an opaque ASCII string of at most 255 bytes.
        required: the RequiredExtensions field.
        optional: the OptionalExtensions field.
    """

    major: int = PROTOCOL_VERSION[0]
    minor: int = PROTOCOL_VERSION[1]
    flags: int = 0
    identity: str = ""
    required: tuple[ExtensionSpec, ...] = ()
    optional: tuple[ExtensionSpec, ...] = ()

    def __post_init__(self) -> None:
        _check_range("major version", self.major, 0, 255)
        _check_range("minor version", self.minor, 0, 255)
        _check_range("handshake flags", self.flags, 0, 255)
        if not self.identity.isascii() or len(self.identity) > 255:
            raise LocalProtocolError(f"identity {self.identity!r} is not ASCII of at most 255 bytes")
        names = [extension.name for extension in self.required + self.optional]
        if len(set(names)) != len(names):
            raise LocalProtocolError(f"an extension is listed twice in {names}")

    @property
    def extensions(self) -> tuple[ExtensionSpec, ...]:
        """Required then optional: in a final handshake, what the indexes count."""
        return self.required + self.optional


@dataclass(frozen=True, slots=True, kw_only=True)
class MessageFrame:
    """A MESSAGE or SEND frame (or one part of a message split by CONTINUED).

    Attributes:
        sequence: 1..65535.
        destination: a queue or topic name, UTF-8 of at most 255 bytes.
        properties: typed properties, used by filters.
        payload: the message body (or this part of it).
        continued: more frames of the same message follow.
    """

    sequence: int
    destination: str
    properties: Properties = ()
    payload: bytes = b""
    continued: bool = False

    def __post_init__(self) -> None:
        check_sequence(self.sequence)
        try:
            size = len(self.destination.encode("utf-8"))
        except UnicodeEncodeError:
            raise LocalProtocolError(f"destination {self.destination!r} is not valid Unicode text") from None
        if size > 255:
            raise LocalProtocolError("a destination is at most 255 bytes of UTF-8")
        try:
            make_properties(self.properties)
        except MalformedTextError as exc:
            raise LocalProtocolError(exc.message) from None
        if not isinstance(self.payload, bytes):
            raise LocalProtocolError("a payload is bytes")


@dataclass(frozen=True, slots=True, kw_only=True)
class CommandFrame:
    """A COMMAND frame: ``name;key=value,...`` (pubsub's subscribe, completed...)."""

    command: NamedArguments


@dataclass(frozen=True, slots=True, kw_only=True)
class ErrorFrame:
    """An ERROR frame: ``error;message=M`` or ``error;destination=D,message=M``."""

    error: NamedArguments


@dataclass(frozen=True, slots=True, kw_only=True)
class ExtensionFrame:
    """An EXTENSION frame: the extension's one-based index and its payload.

    An ack or batch-ack is a 2-byte sequence number; a dotnet frame is the
    type name.
    """

    extension_id: int
    payload: bytes = b""

    def __post_init__(self) -> None:
        _check_range("extension id", self.extension_id, 1, 255)


Frame = Union[MessageFrame, CommandFrame, ErrorFrame, ExtensionFrame]
