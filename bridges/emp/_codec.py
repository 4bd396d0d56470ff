"""EMP's binary encoding: messages to bytes and back, within limits.

Layout (all integers big-endian)::

    envelope   size:u32  header  extension-block*  body
    header     type:u8  flags:u8 (E = 0x80)  unused:u16
    block      size:u32  id:u8  flags:u8 (M = 0x80)  unused:u16  content
    string     length:u16  utf-8

Framing
-------
The spec says the envelope size and the block size *include* their own
4-byte size field; the author's later drafts and Erlang implementation
*exclude* it. :class:`Framing` picks one per connection (default: the
spec). Both framings read and write the same fields otherwise.

Limits
------
The decoder never buffers more than one message's worth of unparsed bytes
beyond what it was fed: the size field is checked against
``max_message_size`` before the message body arrives. Compressed bodies are
inflated incrementally with a cap (``max_body_size``), so a gzip bomb costs
at most that many bytes before it is refused.

Errors
------
Malformed input raises :class:`~bridges.emp.RemoteProtocolError` carrying
the EMP error code the peer should be told: 3 (protocol error) for a broken
envelope, header, body or string, 4 (extension error, with the extension id
and one of :class:`~bridges.emp.ExtensionErrorCode`) for a bad extension
block content or a body that does not decompress.
"""

from __future__ import annotations

import enum
import struct
import zlib
from dataclasses import dataclass

from ._errors import ErrorCode, ExtensionErrorCode, LocalProtocolError, RemoteProtocolError
from ._events import (
    MAX_STRING_SIZE,
    Bye,
    Compression,
    CompressionScheme,
    Data,
    Error,
    Extension,
    ExtensionId,
    Hello,
    Message,
    MessageType,
    Ping,
    Pong,
    RequestResponse,
    UnknownExtension,
)

__all__ = ["Framing", "EmpLimits", "DEFAULT_LIMITS", "encode", "decode", "Decoder"]

KiB = 1024
MiB = 1024 * KiB

_FLAG = 0x80  # E, M and R are the top bit of their byte
_U32 = struct.Struct(">I")
_HEADER = struct.Struct(">BBH")  # type, flags, unused
_BLOCK_HEADER = struct.Struct(">IBBH")  # size, id, flags, unused
_HELLO = struct.Struct(">BBH")  # version, unused
_ERROR = struct.Struct(">BBBB")  # code, extension id, extension code, unused
_REQUEST_RESPONSE = struct.Struct(">BBHQ")  # R + unused, unused, unused, id
_COMPRESSION = struct.Struct(">BBH")  # scheme, unused
_MAX_U32 = 2**32 - 1
_GZIP_WBITS = 16 + zlib.MAX_WBITS  # gzip container (RFC 1952), not zlib or raw


class Framing(enum.Enum):
    """Whether envelope and extension-block sizes count their own size field."""

    #: The spec text: size includes the 4-byte size field (the default).
    SIZE_INCLUDES_FIELD = "includes"
    #: The author's later drafts and reference implementation.
    SIZE_EXCLUDES_FIELD = "excludes"

    @property
    def overhead(self) -> int:
        # What to add to a size read from the wire to get the bytes it spans.
        return 0 if self is Framing.SIZE_INCLUDES_FIELD else 4


@dataclass(frozen=True, slots=True, kw_only=True)
class EmpLimits:
    """Limits on what a peer may send.

    Attributes:
        max_message_size: largest envelope accepted, size field included, in
            bytes. Bounds the decoder's buffer. Default 16 MiB.
        max_body_size: largest body accepted after decompression. Bounds
            what a gzip bomb can cost. Default 16 MiB.
        max_extensions: most extension blocks accepted on one message.
            Default 16.
        max_string_size: longest character string accepted, in UTF-8 bytes
            (the wire format allows 65535). Default 65535.
        max_pending_requests: most requests the peer may have outstanding
            with us (received, not yet answered). Default 65536.
    """

    max_message_size: int = 16 * MiB
    max_body_size: int = 16 * MiB
    max_extensions: int = 16
    max_string_size: int = MAX_STRING_SIZE
    max_pending_requests: int = 65536

    def __post_init__(self) -> None:
        for name in ("max_message_size", "max_body_size", "max_extensions", "max_string_size", "max_pending_requests"):
            value = getattr(self, name)
            if type(value) is not int or value < 0:
                raise ValueError(f"{name} must be a non-negative int, got {value!r}")
        if self.max_message_size < 8:
            raise ValueError("max_message_size must be at least 8 (an envelope and a header)")


DEFAULT_LIMITS = EmpLimits()


# ---- encoding -----------------------------------------------------------


def compress_body(scheme: CompressionScheme, body: bytes) -> bytes:
    """``body`` compressed with ``scheme``, as :func:`encode` would send it.

    A pure function of its input that holds no lock of ours: a server may
    call it off the event loop (``trio.to_thread.run_sync``; zlib releases
    the GIL) and pass the result to ``encode(..., compressed_body=...)``.
    Gzip of a 4 MiB response took 170 ms, one step of every connection.
    """
    return _compress(scheme, body)


def _compress(scheme: CompressionScheme, body: bytes) -> bytes:
    if scheme is CompressionScheme.IDENTITY:
        return body
    # zlib's gzip container has mtime 0 and no file name: the output depends
    # only on the input, so encoding is deterministic.
    compressor = zlib.compressobj(6, zlib.DEFLATED, _GZIP_WBITS)
    return compressor.compress(body) + compressor.flush()


def _encode_extension_content(block: Extension) -> tuple[int, bytes]:
    if isinstance(block, RequestResponse):
        flags = _FLAG if block.is_request else 0
        return ExtensionId.REQUEST_RESPONSE, _REQUEST_RESPONSE.pack(flags, 0, 0, block.request_id)
    if isinstance(block, Compression):
        return ExtensionId.COMPRESSION, _COMPRESSION.pack(block.scheme, 0, 0)
    return block.extension_id, block.content


def _encode_string(text: str) -> bytes:
    raw = text.encode("utf-8")
    return len(raw).to_bytes(2, "big") + raw


def _encode_body(message: Message, compressed_body: bytes | None) -> bytes:
    if isinstance(message, Data):
        if compressed_body is not None:
            return compressed_body
        body = message.body
        for block in message.extensions:
            if isinstance(block, Compression):
                body = _compress(block.scheme, body)
        return body
    if isinstance(message, Hello):
        return _HELLO.pack(message.version, 0, 0)
    if isinstance(message, Error):
        return _ERROR.pack(message.code, message.extension_id, message.extension_code, 0) + _encode_string(message.message)
    return b""


_TYPES: dict[type, MessageType] = {
    Hello: MessageType.HELLO,
    Bye: MessageType.BYE,
    Ping: MessageType.PING,
    Pong: MessageType.PONG,
    Error: MessageType.ERROR,
    Data: MessageType.DATA,
}


def encode(
    message: Message, *, framing: Framing = Framing.SIZE_INCLUDES_FIELD, compressed_body: bytes | None = None
) -> bytes:
    """Encode one message, envelope included.

    ``compressed_body``: a ``Data`` message's body already compressed by
    :func:`compress_body` with its scheme (sent as is).

    Raises:
        LocalProtocolError: the message does not fit a 32-bit size.
    """
    message_type = _TYPES[type(message)]
    extensions = message.extensions
    parts = [b"", _HEADER.pack(message_type, _FLAG if extensions else 0, 0)]
    last = len(extensions) - 1
    for index, block in enumerate(extensions):
        extension_id, content = _encode_extension_content(block)
        size = _BLOCK_HEADER.size + len(content) - framing.overhead
        if size > _MAX_U32:
            raise LocalProtocolError(f"extension block of {size} bytes does not fit a 32-bit size")
        parts.append(_BLOCK_HEADER.pack(size, extension_id, _FLAG if index < last else 0, 0))
        parts.append(content)
    parts.append(_encode_body(message, compressed_body))
    size = 4 + sum(len(part) for part in parts) - framing.overhead
    if size > _MAX_U32:
        raise LocalProtocolError(f"message of {size} bytes does not fit a 32-bit size")
    parts[0] = _U32.pack(size)
    return b"".join(parts)


# ---- decoding -----------------------------------------------------------


def _protocol_error(message: str) -> RemoteProtocolError:
    return RemoteProtocolError(message, code=ErrorCode.PROTOCOL)


def _extension_error(message: str, extension_id: int, extension_code: ExtensionErrorCode) -> RemoteProtocolError:
    return RemoteProtocolError(
        message, code=ErrorCode.EXTENSION, extension_id=extension_id, extension_code=extension_code
    )


def _decompress(scheme: CompressionScheme, body: bytes, limit: int) -> bytes:
    if scheme is CompressionScheme.IDENTITY:
        return body
    bad = ExtensionErrorCode.BAD_COMPRESSED_BODY
    inflater = zlib.decompressobj(_GZIP_WBITS)
    out = bytearray()
    pending = body
    try:
        while True:
            # Ask for one byte more than allowed: getting it proves the body
            # is too large without inflating any further.
            out += inflater.decompress(pending, limit + 1 - len(out))
            if len(out) > limit:
                raise _extension_error(
                    f"body decompresses to more than {limit} bytes",
                    ExtensionId.COMPRESSION,
                    ExtensionErrorCode.BODY_TOO_LARGE,
                )
            pending = inflater.unconsumed_tail
            if inflater.eof or not pending:
                break
    except zlib.error as exc:
        raise _extension_error(f"body does not decompress: {exc}", ExtensionId.COMPRESSION, bad) from None
    if not inflater.eof:
        raise _extension_error("gzip body is truncated", ExtensionId.COMPRESSION, bad)
    if inflater.unused_data:
        raise _extension_error("bytes follow the gzip member", ExtensionId.COMPRESSION, bad)
    return bytes(out)


def _decode_extension(extension_id: int, content: bytes) -> Extension:
    malformed = ExtensionErrorCode.MALFORMED_BLOCK
    if extension_id == ExtensionId.REQUEST_RESPONSE:
        if len(content) != _REQUEST_RESPONSE.size:
            raise _extension_error(
                f"request-response block content is {len(content)} bytes, not {_REQUEST_RESPONSE.size}",
                extension_id,
                malformed,
            )
        flags, _, _, request_id = _REQUEST_RESPONSE.unpack(content)
        if request_id == 0 and not flags & _FLAG:
            # The spec: a response whose id matches no pending request is a
            # protocol error, and no request is ever pending under id 0.
            raise _protocol_error("response to request id 0, which is reserved and never pending")
        if request_id == 0:
            raise _extension_error(
                "request identifier 0 is reserved", extension_id, ExtensionErrorCode.RESERVED_REQUEST_ID
            )
        return RequestResponse(request_id=request_id, is_request=bool(flags & _FLAG))
    if extension_id == ExtensionId.COMPRESSION:
        if len(content) != _COMPRESSION.size:
            raise _extension_error(
                f"compression block content is {len(content)} bytes, not {_COMPRESSION.size}",
                extension_id,
                malformed,
            )
        scheme = content[0]
        if scheme not in CompressionScheme.__members__.values():
            raise _extension_error(
                f"unsupported compression scheme {scheme}", extension_id, ExtensionErrorCode.UNSUPPORTED_SCHEME
            )
        return Compression(scheme=CompressionScheme(scheme))
    return UnknownExtension(extension_id=extension_id, content=content)


def _decode_string(raw: memoryview, limits: EmpLimits) -> str:
    if len(raw) < 2:
        raise _protocol_error("character string is missing its length")
    size = int.from_bytes(raw[:2], "big")
    if size != len(raw) - 2:
        raise _protocol_error(f"character string of {size} bytes in a field of {len(raw) - 2}")
    if size > limits.max_string_size:
        raise _protocol_error(f"character string of {size} bytes exceeds the limit of {limits.max_string_size}")
    try:
        return bytes(raw[2:]).decode("utf-8")
    except UnicodeDecodeError:
        raise _protocol_error("character string is not valid UTF-8") from None


def _decode_message(content: memoryview, framing: Framing, limits: EmpLimits) -> Message:
    # ``content`` is the envelope without its size field.
    if len(content) < _HEADER.size:
        raise _protocol_error(f"message of {len(content) + 4} bytes has no room for a header")
    type_byte, flags, _ = _HEADER.unpack_from(content)
    try:
        message_type = MessageType(type_byte)
    except ValueError:
        raise _protocol_error(f"unknown message type {type_byte}") from None
    position = _HEADER.size
    extensions: list[Extension] = []
    more = bool(flags & _FLAG)
    while more:
        if len(extensions) >= limits.max_extensions:
            raise _protocol_error(f"more than {limits.max_extensions} extension blocks")
        if len(content) - position < _BLOCK_HEADER.size:
            raise _protocol_error("extension block header overruns the message")
        size, extension_id, block_flags, _ = _BLOCK_HEADER.unpack_from(content, position)
        span = size + framing.overhead
        if span < _BLOCK_HEADER.size or span > len(content) - position:
            raise _protocol_error(f"extension block size {size} does not fit the message")
        block = bytes(content[position + _BLOCK_HEADER.size : position + span])
        extension = _decode_extension(extension_id, block)
        if isinstance(extension, RequestResponse) and any(isinstance(e, RequestResponse) for e in extensions):
            raise _extension_error(
                "more than one request-response block", extension_id, ExtensionErrorCode.DUPLICATE_BLOCK
            )
        extensions.append(extension)
        position += span
        more = bool(block_flags & _FLAG)
    body = content[position:]
    if message_type is MessageType.DATA:
        raw = bytes(body)
        if len(raw) > limits.max_body_size:
            raise _protocol_error(f"body of {len(raw)} bytes exceeds the limit of {limits.max_body_size}")
        # Blocks were applied in order by the sender: undo them in reverse.
        for extension in reversed(extensions):
            if isinstance(extension, Compression):
                raw = _decompress(extension.scheme, raw, limits.max_body_size)
        return Data(body=raw, extensions=tuple(extensions))
    if message_type is MessageType.HELLO:
        if len(body) != _HELLO.size:
            raise _protocol_error(f"hello body is {len(body)} bytes, not {_HELLO.size}")
        return Hello(version=body[0], extensions=tuple(extensions))
    if message_type is MessageType.ERROR:
        if len(body) < _ERROR.size:
            raise _protocol_error(f"error body of {len(body)} bytes is too short")
        code, extension_id, extension_code, _ = _ERROR.unpack_from(body)
        text = _decode_string(body[_ERROR.size :], limits)
        return Error(
            code=code,
            extension_id=extension_id,
            extension_code=extension_code,
            message=text,
            extensions=tuple(extensions),
        )
    if len(body):
        raise _protocol_error(f"{message_type.name.lower()} message has a body of {len(body)} bytes")
    if message_type is MessageType.BYE:
        return Bye(extensions=tuple(extensions))
    if message_type is MessageType.PING:
        return Ping(extensions=tuple(extensions))
    return Pong(extensions=tuple(extensions))


class Decoder:
    """A streaming decoder: feed bytes in any pieces, take whole messages out.

    Args:
        framing: how sizes are counted.
        limits: what the peer may send.
    """

    def __init__(self, *, framing: Framing = Framing.SIZE_INCLUDES_FIELD, limits: EmpLimits = DEFAULT_LIMITS) -> None:
        self.framing = framing
        self.limits = limits
        self._buffer = bytearray()

    @property
    def buffered(self) -> int:
        """Bytes received and not yet parsed into a message."""
        return len(self._buffer)

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        """Add received bytes."""
        self._buffer += data

    def next_message(self) -> Message | None:
        """The next complete message, or None until more bytes arrive.

        Raises:
            RemoteProtocolError: the bytes are not a valid message, or break a
                limit. The decoder is unusable afterwards.
        """
        buffer = self._buffer
        if len(buffer) < 4:
            return None
        size = _U32.unpack_from(buffer)[0]
        span = size + self.framing.overhead
        if span < 4 + _HEADER.size:
            raise _protocol_error(f"message size {size} is too small for a header")
        if span > self.limits.max_message_size:
            raise _protocol_error(f"message of {span} bytes exceeds the limit of {self.limits.max_message_size}")
        if len(buffer) < span:
            return None
        # One copy per message, so that no view into the buffer outlives this
        # call (a bytearray with live views cannot grow or shrink).
        content = memoryview(bytes(buffer[4:span]))
        del buffer[:span]
        return _decode_message(content, self.framing, self.limits)

    def check_eof(self) -> None:
        """Call at end of file.

        Raises:
            RemoteProtocolError: the stream ended in the middle of a message.
        """
        if self._buffer:
            raise _protocol_error(f"connection closed in the middle of a message ({len(self._buffer)} bytes)")


def decode(data: bytes, *, framing: Framing = Framing.SIZE_INCLUDES_FIELD, limits: EmpLimits = DEFAULT_LIMITS) -> Message:
    """Decode exactly one message.

    Raises:
        RemoteProtocolError: ``data`` is not exactly one valid message.
    """
    decoder = Decoder(framing=framing, limits=limits)
    decoder.feed(data)
    message = decoder.next_message()
    if message is None:
        raise _protocol_error("incomplete message")
    decoder.check_eof()
    return message
