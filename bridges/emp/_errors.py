"""EMP errors: the spec's error codes, and protocol errors split by fault.

Every EMP protocol error carries the fields of the EMP ``error`` message that
describes it (code, extension id, extension error code, message), so the
connection can tell the peer exactly what went wrong. A
``RemoteProtocolError`` means the peer broke the protocol: the connection has
already queued that ``error`` message and moved to ``ERROR``. A
``LocalProtocolError`` means this program asked for something EMP forbids;
nothing was queued and the connection is unchanged.
"""

from __future__ import annotations

import enum

from rstreams.protocol import LocalProtocolError as _RStreamsLocalProtocolError
from rstreams.protocol import RemoteProtocolError as _RStreamsRemoteProtocolError

from ..errors import BridgeError

__all__ = [
    "ErrorCode",
    "ExtensionErrorCode",
    "EmpError",
    "LocalProtocolError",
    "RemoteProtocolError",
    "UnsupportedVersionError",
    "PeerError",
    "EmpClosed",
    "EmpConnectionLost",
    "EmpTimeout",
]


class ErrorCode(enum.IntEnum):
    """The error codes of the spec's table (``error`` message, first byte)."""

    UNSPECIFIED = 0
    IO = 1
    TIMEOUT = 2
    PROTOCOL = 3
    EXTENSION = 4


class ExtensionErrorCode(enum.IntEnum):
    """Extension error codes this implementation sends with ``ErrorCode.EXTENSION``.

    The spec leaves them to each extension and defines none; these are ours
    (see ``docs/bridges/emp.md``). They are shared by both extensions.
    """

    UNSUPPORTED_EXTENSION = 0  # an extension id we do not know
    MALFORMED_BLOCK = 1  # content of the wrong length for its extension
    NOT_ALLOWED_HERE = 2  # an extension block on a message other than data
    UNSUPPORTED_SCHEME = 3  # compression: unknown scheme
    BAD_COMPRESSED_BODY = 4  # compression: the body does not decompress
    BODY_TOO_LARGE = 5  # compression: the body decompresses past the limit
    DUPLICATE_BLOCK = 6  # request-response: more than one block
    RESERVED_REQUEST_ID = 7  # request-response: id 0


class EmpError(BridgeError):
    """An EMP error, with what an EMP ``error`` message would say about it.

    Attributes:
        message: the error text.
        code: the EMP error code (:class:`ErrorCode`, or any 8-bit value).
        extension_id: the extension concerned when ``code`` is
            ``ErrorCode.EXTENSION``, else 0.
        extension_code: the extension's own error code, else 0.
    """

    def __init__(
        self,
        message: str,
        *,
        code: int = ErrorCode.PROTOCOL,
        extension_id: int = 0,
        extension_code: int = 0,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.extension_id = extension_id
        self.extension_code = extension_code

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({self.message!r}, code={self.code!r},"
            f" extension_id={self.extension_id}, extension_code={self.extension_code})"
        )


class LocalProtocolError(EmpError, _RStreamsLocalProtocolError):
    """This side asked for something EMP forbids; the connection is unchanged."""


class RemoteProtocolError(EmpError, _RStreamsRemoteProtocolError):
    """The peer broke EMP; the matching ``error`` message is queued and the state is ``ERROR``."""


class UnsupportedVersionError(RemoteProtocolError):
    """The peer's hello named a version this side does not speak.

    Attributes:
        peer_version: the version the peer announced.
    """

    def __init__(self, message: str, *, peer_version: int) -> None:
        super().__init__(message, code=ErrorCode.PROTOCOL)
        self.peer_version = peer_version


class PeerError(EmpError):
    """The peer sent an EMP ``error`` message and closed the connection.

    Every stream and call of the connection ends with this error. Its
    attributes are the fields of the ``error`` message as received (``code``
    may be outside :class:`ErrorCode`).
    """

    def __str__(self) -> str:
        try:
            name = ErrorCode(self.code).name.lower()
        except ValueError:
            name = "unknown"
        text = f"peer sent error {self.code} ({name})"
        if self.code == ErrorCode.EXTENSION:
            text += f", extension {self.extension_id} code {self.extension_code}"
        return f"{text}: {self.message}" if self.message else text


class EmpClosed(EmpError):
    """The connection has ended: by ``bye`` from either side, or by closing.

    Raised by operations that cannot complete on an ended connection (a call
    awaiting its response, a send). A stream of inbound data does not raise
    it for a ``bye``: it just ends.

    Attributes:
        by_peer: True when the peer ended the connection.
    """

    def __init__(self, message: str, *, by_peer: bool, code: int = ErrorCode.UNSPECIFIED) -> None:
        super().__init__(message, code=code)
        self.by_peer = by_peer


class EmpConnectionLost(EmpClosed):
    """The transport ended without ``bye`` or ``error`` (a plain close, or a broken socket)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, by_peer=True, code=ErrorCode.IO)


class EmpTimeout(EmpError):
    """A network operation timed out: no hello, or no pong, in time (EMP error 2)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, code=ErrorCode.TIMEOUT)
