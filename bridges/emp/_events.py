"""The six EMP messages and their extension blocks, as values.

Each message class is one message type of ``specs/emp.md``, named after it in
CamelCase. They are what the codec turns into bytes and back and what
:class:`~bridges.emp.Connection` hands to the application. The header's E
bit and the extension blocks' M bits are not fields: they follow from
``extensions`` being empty or not, and the codec writes and checks them.

Validation happens in ``__post_init__`` so an invalid message cannot exist:
a local caller gets ``LocalProtocolError`` at construction; the decoder
turns the same failure into ``RemoteProtocolError``.

A ``Data`` message carries its body *uncompressed*: a :class:`Compression`
block in ``extensions`` tells the encoder to compress it, and records that
the decoder decompressed it.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Union

from ._errors import ErrorCode, LocalProtocolError

__all__ = [
    "PROTOCOL_VERSION",
    "MAX_REQUEST_ID",
    "MessageType",
    "ExtensionId",
    "CompressionScheme",
    "RequestResponse",
    "Compression",
    "UnknownExtension",
    "Extension",
    "Hello",
    "Bye",
    "Ping",
    "Pong",
    "Error",
    "Data",
    "Message",
    "ConnectionClosed",
    "Event",
]

#: The only EMP version this implementation speaks.
PROTOCOL_VERSION = 1
#: Request identifiers are 64-bit; 0 is reserved.
MAX_REQUEST_ID = 2**64 - 1
#: A character string has a 16-bit length.
MAX_STRING_SIZE = 2**16 - 1


class MessageType(enum.IntEnum):
    """The message type byte of the header."""

    HELLO = 0
    BYE = 1
    PING = 2
    PONG = 3
    ERROR = 4
    DATA = 5


class ExtensionId(enum.IntEnum):
    """Extension ids; the spec gives none, these are the author's implementation's."""

    REQUEST_RESPONSE = 0
    COMPRESSION = 1


class CompressionScheme(enum.IntEnum):
    """Compression schemes of the compression extension."""

    IDENTITY = 0
    GZIP = 1


def _check_byte(name: str, value: object) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= 255:
        raise LocalProtocolError(f"{name} must be an int in [0, 255], got {value!r}")


def _check_bytes(name: str, value: object) -> None:
    if not isinstance(value, bytes):
        raise LocalProtocolError(f"{name} must be bytes, got {type(value).__name__}")


# ---- extension blocks ---------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestResponse:
    """The request-response block: a request (R bit set) or the response to one.

    Attributes:
        request_id: the 64-bit identifier pairing request and response; not 0.
        is_request: True for a request, False for a response.
    """

    request_id: int
    is_request: bool

    def __post_init__(self) -> None:
        if type(self.request_id) is not int or not 1 <= self.request_id <= MAX_REQUEST_ID:
            raise LocalProtocolError(f"request_id must be an int in [1, 2**64), got {self.request_id!r}")
        if type(self.is_request) is not bool:
            raise LocalProtocolError(f"is_request must be a bool, got {self.is_request!r}")


@dataclass(frozen=True, slots=True, kw_only=True)
class Compression:
    """The compression block: the scheme the body is compressed with.

    Attributes:
        scheme: a :class:`CompressionScheme`.
    """

    scheme: CompressionScheme

    def __post_init__(self) -> None:
        if not isinstance(self.scheme, CompressionScheme):
            try:
                object.__setattr__(self, "scheme", CompressionScheme(self.scheme))
            except (ValueError, TypeError):
                raise LocalProtocolError(f"unsupported compression scheme {self.scheme!r}") from None


@dataclass(frozen=True, slots=True, kw_only=True)
class UnknownExtension:
    """An extension block this implementation does not interpret.

    The codec decodes such blocks so that a caller can inspect them; the
    connection refuses them (extension error): an extension it does not
    understand may change what the message means.

    Attributes:
        extension_id: the 8-bit extension id.
        content: the block's content, as received.
    """

    extension_id: int
    content: bytes = b""

    def __post_init__(self) -> None:
        _check_byte("extension_id", self.extension_id)
        _check_bytes("content", self.content)


Extension = Union[RequestResponse, Compression, UnknownExtension]
_EXTENSION_TYPES = (RequestResponse, Compression, UnknownExtension)


def _check_extensions(value: object) -> None:
    if not isinstance(value, tuple) or not all(isinstance(block, _EXTENSION_TYPES) for block in value):
        raise LocalProtocolError(f"extensions must be a tuple of extension blocks, got {value!r}")


# ---- messages -------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Hello:
    """``hello``: the first message of each peer, with its highest version."""

    version: int = PROTOCOL_VERSION
    extensions: tuple[Extension, ...] = ()

    def __post_init__(self) -> None:
        _check_byte("version", self.version)
        _check_extensions(self.extensions)


@dataclass(frozen=True, slots=True, kw_only=True)
class Bye:
    """``bye``: the sender closes the connection, not because of an error."""

    extensions: tuple[Extension, ...] = ()

    def __post_init__(self) -> None:
        _check_extensions(self.extensions)


@dataclass(frozen=True, slots=True, kw_only=True)
class Pong:
    """``pong``: the answer to a ``ping``."""

    extensions: tuple[Extension, ...] = ()

    def __post_init__(self) -> None:
        _check_extensions(self.extensions)


@dataclass(frozen=True, slots=True, kw_only=True)
class Ping:
    """``ping``: a liveness check; the peer answers with ``pong``."""

    extensions: tuple[Extension, ...] = ()

    def __post_init__(self) -> None:
        _check_extensions(self.extensions)

    def response(self) -> Pong:
        """The message the spec says to send back."""
        return Pong()


@dataclass(frozen=True, slots=True, kw_only=True)
class Error:
    """``error``: the sender hit an error and closes the connection.

    Attributes:
        code: an :class:`ErrorCode`, or any other 8-bit code.
        extension_id: the extension concerned when ``code`` is
            ``ErrorCode.EXTENSION``; 0 otherwise.
        extension_code: the extension's own error code; 0 otherwise.
        message: a description, at most 65535 bytes of UTF-8.
    """

    code: int = ErrorCode.UNSPECIFIED
    extension_id: int = 0
    extension_code: int = 0
    message: str = ""
    extensions: tuple[Extension, ...] = ()

    def __post_init__(self) -> None:
        _check_byte("code", self.code)
        _check_byte("extension_id", self.extension_id)
        _check_byte("extension_code", self.extension_code)
        if not isinstance(self.message, str):
            raise LocalProtocolError(f"message must be a str, got {type(self.message).__name__}")
        try:
            size = len(self.message.encode("utf-8"))
        except UnicodeEncodeError:
            raise LocalProtocolError("message is not encodable as UTF-8") from None
        if size > MAX_STRING_SIZE:
            raise LocalProtocolError(f"message is {size} bytes of UTF-8; at most {MAX_STRING_SIZE} fit")
        _check_extensions(self.extensions)


@dataclass(frozen=True, slots=True, kw_only=True)
class Data:
    """``data``: application data, possibly a request or a response.

    Attributes:
        body: the application's bytes, uncompressed.
        extensions: extension blocks, in wire order.
    """

    body: bytes = b""
    extensions: tuple[Extension, ...] = ()

    def __post_init__(self) -> None:
        _check_bytes("body", self.body)
        _check_extensions(self.extensions)
        if sum(isinstance(block, RequestResponse) for block in self.extensions) > 1:
            raise LocalProtocolError("a data message carries at most one request-response block")

    @property
    def request_response(self) -> RequestResponse | None:
        """The request-response block, if this message has one."""
        for block in self.extensions:
            if isinstance(block, RequestResponse):
                return block
        return None

    def response(self, body: bytes = b"", *, compression: CompressionScheme | None = None) -> Data:
        """The response to this request, carrying ``body``.

        Raises:
            LocalProtocolError: this message is not a request.
        """
        block = self.request_response
        if block is None or not block.is_request:
            raise LocalProtocolError("only a request has a response")
        extensions: tuple[Extension, ...] = (RequestResponse(request_id=block.request_id, is_request=False),)
        if compression is not None:
            extensions += (Compression(scheme=compression),)
        return Data(body=body, extensions=extensions)


Message = Union[Hello, Bye, Ping, Pong, Error, Data]


@dataclass(frozen=True, slots=True, kw_only=True)
class ConnectionClosed:
    """The peer closed the transport (the I/O layer fed end of file)."""


Event = Union[Message, ConnectionClosed]
