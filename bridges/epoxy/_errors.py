"""Epoxy errors: the ProtocolErrorCode to send, and whose fault it was.

A ``RemoteProtocolError`` means the peer broke Epoxy: the connection has
already queued the Error frame carrying ``error_code`` (when the spec says
to send one) and moved to ``ERROR``. A ``LocalProtocolError`` means this
program asked for something Epoxy forbids (a response to no request, a
message before the handshake); nothing was queued and the connection is
unchanged. :class:`ConversationIdsExhaustedError` is neither: our own ids
ran out, the spec's ``CONVERSATION_IDS_EXHAUSTED`` Error frame is queued
and the connection is in ``ERROR``; open a new one.
"""

from __future__ import annotations

from rstreams.protocol import LocalProtocolError as _RStreamsLocalProtocolError
from rstreams.protocol import RemoteProtocolError as _RStreamsRemoteProtocolError

from ..errors import BridgeError
from ._structs import ProtocolErrorCode

__all__ = ["EpoxyError", "LocalProtocolError", "RemoteProtocolError", "ConversationIdsExhaustedError"]


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
