"""The Bond structs of the Epoxy wire format, and ``bond.comm.Error``.

``EpoxyConfig``, ``EpoxyHeaders`` and ``ProtocolError`` are framelet
contents, Fast Binary v1 *serialized* (no header); ``Error`` travels in
``ErrorData`` framelets, Compact Binary v1 *marshalled*, like payloads.
Field ids, types and defaults are the spec's (``specs/bond-epoxy.md``) and,
for ``Error`` and its codes, Bond's C# ``Comm.bond``.

Bond enums are int32. ``bond.comm.ErrorCode`` has values written in hex
above 0x7fffffff (``0xA0BD0000``); Bond's generated C# casts them
(``unchecked((int)0xA0BD0000)``), so on the wire they are negative int32s.
:class:`ErrorCode` holds those int32 values; :func:`ErrorCode.from_hex`
documents the mapping.
"""

from __future__ import annotations

import enum

from . import bond
from .bond import Modifier, field

__all__ = [
    "EpoxyConfig",
    "EpoxyMessageType",
    "EpoxyHeaders",
    "ProtocolErrorCode",
    "ProtocolError",
    "ErrorCode",
    "Error",
]


class EpoxyConfig(bond.Struct):
    """``bond.comm.epoxy.EpoxyConfig``: empty for now; serializes to ``00``."""


class EpoxyMessageType(enum.IntEnum):
    """``bond.comm.epoxy.EpoxyMessageType``."""

    REQUEST = 1
    RESPONSE = 2
    EVENT = 3


class EpoxyHeaders(bond.Struct):
    """``bond.comm.epoxy.EpoxyHeaders``: what a message frame is about."""

    conversation_id: int = field(0, bond.UINT64)
    message_type: EpoxyMessageType = field(1, EpoxyMessageType, modifier=Modifier.REQUIRED)
    service_name: str = field(2, bond.STRING)
    method_name: str = field(3, bond.STRING)


class ProtocolErrorCode(enum.IntEnum):
    """``bond.comm.epoxy.ProtocolErrorCode``: why a connection is being torn down."""

    GENERIC_ERROR = 0
    INTERNAL_ERROR = 1
    NOT_SUPPORTED = 2
    PROTOCOL_VIOLATED = 3
    MALFORMED_DATA = 4
    LIMIT_EXCEEDED = 5
    CLIENT_BAD_HANDSHAKE = 6
    SERVER_BAD_HANDSHAKE = 7
    BAD_CONVERSATION_ID = 8
    CONVERSATION_IDS_EXHAUSTED = 9
    TIMEOUT = 10
    CONNECTION_REJECTED = 11
    #: Stands for a malformed ProtocolError received; never sent.
    ERROR_IN_ERROR = 0xFFFF


def _int32(value: int) -> int:
    return value - (1 << 32) if value >= 1 << 31 else value


class ErrorCode(enum.IntEnum):
    """``bond.comm.ErrorCode``, as the int32 values that go on the wire."""

    OK = 0
    INTERNAL_SERVER_ERROR = _int32(0xA0BD0000)
    METHOD_NOT_FOUND = _int32(0xA0BD0001)
    INVALID_INVOCATION = _int32(0xA0BD0002)
    TRANSPORT_ERROR = _int32(0xA0BD0003)
    CONNECTION_SHUT_DOWN = _int32(0xA0BD0004)
    MULTIPLE_ERRORS_OCCURRED = _int32(0xA0BD0005)

    @classmethod
    def from_hex(cls, value: int) -> int:
        """The int32 for a code written as unsigned hex (``0xA0BD0001`` -> ``-1598226431``)."""
        return _int32(value)


class Error(bond.Struct):
    """``bond.comm.Error``: the error of an error response, and a ProtocolError's details."""

    error_code: int = field(0, bond.INT32, modifier=Modifier.REQUIRED)
    message: str = field(1, bond.STRING)
    inner_error: bond.Bonded[Error] | None = field(2, bond.nullable(bond.bonded(lambda: Error)))


class ProtocolError(bond.Struct):
    """``bond.comm.epoxy.ProtocolError``: the content of an Error frame."""

    error_code: ProtocolErrorCode = field(0, ProtocolErrorCode)
    details: bond.Bonded[Error] | None = field(1, bond.nullable(bond.bonded(Error)))
