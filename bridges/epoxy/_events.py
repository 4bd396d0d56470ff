"""What an Epoxy connection reports, as values.

:class:`~bridges.epoxy.Connection` turns received frames into these events.
Payloads stay opaque at this layer: ``payload`` and ``layer_data`` are the
framelets' bytes, Compact Binary v1 marshalled by a well-behaved peer; the
``decode`` helpers unmarshal them with a struct class (and accept any
marshalling header Bond's ``Unmarshal`` does).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar, Union

from . import bond
from ._errors import LocalProtocolError
from ._structs import EpoxyConfig, Error

__all__ = [
    "ConfigReceived",
    "Request",
    "Response",
    "Event",
    "ProtocolErrorReceived",
    "ConnectionClosed",
    "EpoxyEvent",
    "MAX_CONVERSATION_ID",
]

#: Conversation ids are uint64.
MAX_CONVERSATION_ID = 2**64 - 1
S = TypeVar("S", bound=bond.Struct)


def is_conversation_id(value: object) -> bool:
    """Whether ``value`` can be a conversation id (a uint64), or the bound of ours."""
    return type(value) is int and 0 <= value <= MAX_CONVERSATION_ID


def _check_message(conversation_id: object, payload: object, layer_data: object) -> None:
    if not is_conversation_id(conversation_id):
        raise LocalProtocolError(f"conversation_id must be a uint64, got {conversation_id!r}")
    if not isinstance(payload, bytes):
        raise LocalProtocolError(f"payload must be bytes, got {type(payload).__name__}")
    if layer_data is not None and not isinstance(layer_data, bytes):
        raise LocalProtocolError(f"layer_data must be bytes or None, got {type(layer_data).__name__}")


class _Message:
    # What Request, Response and Event share (a mixin: slotted dataclasses
    # cannot inherit fields and stay frozen and keyword-only cheaply).
    __slots__ = ()
    payload: bytes
    layer_data: bytes | None

    def decode(self, struct_class: type[S], *, limits: bond.BondLimits = bond.DEFAULT_LIMITS) -> S:
        """Unmarshal the payload as ``struct_class``, within ``limits``.

        Raises:
            BondDecodeError: the payload is not a marshalled ``struct_class``
                (``BondLimitError``: it breaks ``limits``).
        """
        return bond.unmarshal(struct_class, self.payload, limits=limits)

    def decode_layer_data(self, struct_class: type[S]) -> S | None:
        """Unmarshal the layer data as ``struct_class``; None without layer data.

        Raises:
            BondDecodeError: the layer data is not a marshalled ``struct_class``.
        """
        return None if self.layer_data is None else bond.unmarshal(struct_class, self.layer_data)


@dataclass(frozen=True, slots=True, kw_only=True)
class ConfigReceived:
    """The peer's ``EpoxyConfig`` arrived.

    On a client, the handshake is over and the connection is open. On a
    server, call :meth:`~bridges.epoxy.Connection.accept` or
    :meth:`~bridges.epoxy.Connection.reject`.
    """

    config: EpoxyConfig


@dataclass(frozen=True, slots=True, kw_only=True)
class Request(_Message):
    """A request: answer with ``send_response`` or ``send_error_response`` and its ``conversation_id``."""

    conversation_id: int
    service_name: str
    method_name: str
    payload: bytes
    layer_data: bytes | None = None

    def __post_init__(self) -> None:
        _check_message(self.conversation_id, self.payload, self.layer_data)


@dataclass(frozen=True, slots=True, kw_only=True)
class Response(_Message):
    """The response to one of our requests: a payload, or an error (``is_error``).

    ``service_name`` and ``method_name`` are what the response's headers
    say (usually empty: the spec does not require them in a response).
    """

    conversation_id: int
    payload: bytes
    is_error: bool = False
    service_name: str = ""
    method_name: str = ""
    layer_data: bytes | None = None

    def __post_init__(self) -> None:
        _check_message(self.conversation_id, self.payload, self.layer_data)

    def decode_error(self) -> Error:
        """Unmarshal an error response's payload as ``bond.comm.Error``.

        Raises:
            LocalProtocolError: this response is not an error.
            BondDecodeError: the payload is not a marshalled ``Error``.
        """
        if not self.is_error:
            raise LocalProtocolError("this response carries a payload, not an error")
        return bond.unmarshal(Error, self.payload)


@dataclass(frozen=True, slots=True, kw_only=True)
class Event(_Message):
    """An event: a one-way message; no response is allowed."""

    conversation_id: int
    service_name: str
    method_name: str
    payload: bytes
    layer_data: bytes | None = None

    def __post_init__(self) -> None:
        _check_message(self.conversation_id, self.payload, self.layer_data)


@dataclass(frozen=True, slots=True, kw_only=True)
class ProtocolErrorReceived:
    """The peer sent an Error frame: the connection is in ``ERROR``; close it.

    Attributes:
        error_code: the peer's :class:`~bridges.epoxy.ProtocolErrorCode` (or
            a raw int it does not name); ``ERROR_IN_ERROR`` when the Error
            frame itself could not be decoded.
        details: the error's ``details``, when it had any that decode.
    """

    error_code: int
    details: Error | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ConnectionClosed:
    """The peer closed its side of the transport (the I/O layer fed end of file)."""


EpoxyEvent = Union[ConfigReceived, Request, Response, Event, ProtocolErrorReceived, ConnectionClosed]
