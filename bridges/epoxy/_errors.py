"""Epoxy errors: the ProtocolErrorCode to send, and whose fault it was.

A ``RemoteProtocolError`` means the peer broke Epoxy: the connection has
already queued the Error frame carrying ``error_code`` (when the spec says
to send one) and moved to ``ERROR``. A ``LocalProtocolError`` means this
program asked for something Epoxy forbids (a response to no request, a
message before the handshake); nothing was queued and the connection is
unchanged. :class:`ConversationIdsExhaustedError` is neither: our own ids
ran out, the spec's ``CONVERSATION_IDS_EXHAUSTED`` Error frame is queued
and the connection is in ``ERROR``; open a new one.

The trio side adds how a connection ends (:class:`PeerProtocolError`: the
peer's Error frame; :class:`EpoxyClosed`, :class:`EpoxyConnectionLost`,
:class:`EpoxyTimeout`) and :class:`ErrorResponse`, the one error that ends
a call and not the connection. They live here, trio-free, so that code
catching them need not import the I/O layer.
"""

from __future__ import annotations

from rstreams.protocol import LocalProtocolError as _RStreamsLocalProtocolError
from rstreams.protocol import RemoteProtocolError as _RStreamsRemoteProtocolError

from ..errors import BridgeError
from ._structs import Error, ErrorCode, ProtocolErrorCode

__all__ = [
    "EpoxyError",
    "LocalProtocolError",
    "RemoteProtocolError",
    "ConversationIdsExhaustedError",
    "PeerProtocolError",
    "ErrorResponse",
    "EpoxyClosed",
    "EpoxyConnectionLost",
    "EpoxyTimeout",
]


class EpoxyError(BridgeError):
    """An Epoxy error, with the ProtocolErrorCode that describes it.

    Attributes:
        message: the error text.
        error_code: a :class:`ProtocolErrorCode` (or a raw int received).
    """

    def __init__(self, message: str, *, error_code: int = ProtocolErrorCode.PROTOCOL_VIOLATED) -> None:
        super().__init__(message)
        self.message = message
        self.error_code = error_code

    def __repr__(self) -> str:
        try:
            code = ProtocolErrorCode(self.error_code).name
        except ValueError:
            code = str(self.error_code)
        return f"{type(self).__name__}({self.message!r}, error_code={code})"


class LocalProtocolError(EpoxyError, _RStreamsLocalProtocolError):
    """This side asked for something Epoxy forbids; the connection is unchanged."""


class RemoteProtocolError(EpoxyError, _RStreamsRemoteProtocolError):
    """The peer broke Epoxy; the Error frame is queued and the state is ``ERROR``."""


class ConversationIdsExhaustedError(EpoxyError):
    """Our conversation ids ran out; ``CONVERSATION_IDS_EXHAUSTED`` is queued, the state is ``ERROR``."""

    def __init__(self, message: str) -> None:
        super().__init__(message, error_code=ProtocolErrorCode.CONVERSATION_IDS_EXHAUSTED)


class PeerProtocolError(EpoxyError):
    """The peer sent an Error frame (a ``ProtocolError``): the connection is over.

    ``CONNECTION_REJECTED`` from a server means its application refused us.

    Attributes:
        error_code: the peer's :class:`ProtocolErrorCode` (or a raw int it
            does not name; ``ERROR_IN_ERROR`` when the frame did not decode).
        details: the ``bond.comm.Error`` it attached, or None.
    """

    def __init__(self, error_code: int, details: Error | None = None) -> None:
        try:
            name = ProtocolErrorCode(error_code).name
        except ValueError:
            name = str(error_code)
        message = f"the peer sent ProtocolError {name}"
        if details is not None and details.message:
            message += f": {details.message}"
        super().__init__(message, error_code=error_code)
        self.details = details


class ErrorResponse(EpoxyError):
    """The response to our request was ``ErrorData``: a ``bond.comm.Error``.

    Not a protocol error: the connection stays open. Here ``error_code`` is
    the error's ``bond.comm.ErrorCode`` (``METHOD_NOT_FOUND``, ...), an int32
    as on the wire, not a ``ProtocolErrorCode``.

    Attributes:
        error: the ``bond.comm.Error`` (its ``inner_error`` included).
    """

    def __init__(self, error: Error) -> None:
        try:
            name = ErrorCode(error.error_code).name
        except ValueError:
            name = str(error.error_code)
        text = f"error response {name} ({error.error_code & 0xFFFFFFFF:#010x})"
        if error.message:
            text += f": {error.message}"
        super().__init__(text, error_code=error.error_code)
        self.error = error


class EpoxyClosed(EpoxyError):
    """The connection was closed: by this side, or by the peer closing its side.

    Attributes:
        by_peer: True when the peer closed.
    """

    def __init__(self, message: str, *, by_peer: bool) -> None:
        super().__init__(message, error_code=ProtocolErrorCode.GENERIC_ERROR)
        self.by_peer = by_peer


class EpoxyConnectionLost(EpoxyClosed):
    """The transport failed or closed where Epoxy does not allow it (during the handshake, say)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, by_peer=True)


class EpoxyTimeout(EpoxyError):
    """We gave up waiting for the handshake, or on a peer gone quiet (the
    idle timeout), and sent ``TIMEOUT``."""

    def __init__(self, message: str) -> None:
        super().__init__(message, error_code=ProtocolErrorCode.TIMEOUT)
