"""MessagePack framing: messages to bytes and back, with limits.

Every message is one msgpack array ``[code, field, ...]``; on a byte stream
they simply follow each other. Decoding is msgpack's C ``Unpacker`` (the
fastest thing available to Python) configured with explicit limits, so no
length prefix a peer writes can make us allocate more than the limits allow:

* ``max_buffer_size`` bounds the unparsed bytes held at once (one message
  plus one read);
* ``max_str_len`` / ``max_bin_len`` bound each string and byte field;
* ``max_array_len`` bounds arrays (a message has at most 5 items, a hello's
  extension list ``max_extensions``); maps and ext types never occur in the
  profile, so their limit is 0;
* nesting is bounded twice: msgpack's own parser stack (it raises on deep
  nesting) and the shape check below, which accepts nothing nested deeper
  than a hello's extension list.

Two paths exist on purpose. :func:`message_from_wire` validates one decoded
array into a message object: used for control messages and by tools.
The connection's receive loop handles onNext / onNextPacked inline without
building message objects, and the outbound scheduler writes element runs with
the ``*_header`` helpers here, a few byte-string appends per element.

A third reads only the header of onNextPart / onNextLastPart
(:func:`read_part_header`), so that the connection can take a large part's
payload from the received bytes without msgpack copying it twice (once into
its buffer, once out as ``bytes``). It recognises only what a header of a
well-formed part looks like, and says "not a part" to anything else, which
then goes through the Unpacker like every other message: every error is
still found, and worded, in one place.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import msgpack

from ._errors import LocalProtocolError, RemoteProtocolError
from ._limits import DEFAULT_LIMITS, ProtocolLimits
from ._messages import (
    _MAX_WIRE_INT,
    _MIN_WIRE_INT,
    MAX_ID,
    MAX_TOKEN_SIZE,
    Cancel,
    Extension,
    Goodbye,
    Hello,
    Message,
    MessageType,
    OnComplete,
    OnError,
    OnNext,
    OnNextLastPart,
    OnNextPacked,
    OnNextPart,
    Ping,
    Pong,
    Request,
    Subscribe,
    Subscribed,
    check_publisher_name,
    prechecked,
)

__all__ = [
    "encode",
    "message_from_wire",
    "new_unpacker",
    "MessageDecoder",
    "DecodeError",
    "bin_header",
    "int_bytes",
    "PartHeader",
    "read_part_header",
    "part_header_ids",
    "INCOMPLETE_PART_HEADER",
    "MAX_PART_HEADER_SIZE",
]

# The exceptions msgpack's Unpacker raises for malformed input: FormatError,
# StackError, BufferFull and the limit checks are ValueError or
# UnpackException subclasses; invalid UTF-8 in a str is a UnicodeDecodeError
# (a ValueError).
DecodeError = (ValueError, msgpack.UnpackException)

_packer = msgpack.Packer(use_bin_type=True)


# Small non-negative ints are their own one-byte encoding (positive fixint):
# element sizes and early stream ids, written for every subscribe.
_FIXINTS = tuple(bytes((n,)) for n in range(128))


def int_bytes(value: int) -> bytes:
    """The msgpack encoding of one integer."""
    if 0 <= value < 128:
        return _FIXINTS[value]
    encoded: bytes = _packer.pack(value)
    return encoded


_BIN8_HEADERS = tuple(bytes((0xC4, n)) for n in range(256))


def bin_header(length: int) -> bytes:
    """The msgpack ``bin`` header for ``length`` bytes of payload."""
    if length < 256:
        return _BIN8_HEADERS[length]
    if length < 65536:
        return b"\xc5" + length.to_bytes(2, "big")
    return b"\xc6" + length.to_bytes(4, "big")


# Each message class's code and fields, in wire order: encode() looks the
# message's exact type up here instead of walking an isinstance chain (it runs
# for every control message: a few per subscribe).
_FIELDS: dict[type, tuple[int, Callable[[Any], tuple[object, ...]]]] = {
    OnNext: (MessageType.ON_NEXT, lambda m: (m.subscriber, m.element)),
    Request: (MessageType.REQUEST, lambda m: (m.subscriber, m.demand)),
    Hello: (MessageType.HELLO, lambda m: (m.version, _hello_extensions(m))),
    Subscribe: (MessageType.SUBSCRIBE, lambda m: (m.publisher, m.subscriber, m.initial_demand)),
    Cancel: (MessageType.CANCEL, lambda m: (m.subscriber,)),
    Subscribed: (MessageType.SUBSCRIBED, lambda m: (m.subscriber, m.element_size)),
    OnComplete: (MessageType.ON_COMPLETE, lambda m: (m.subscriber,)),
    OnError: (MessageType.ON_ERROR, lambda m: (m.subscriber, m.error)),
    OnNextPacked: (MessageType.ON_NEXT_PACKED, lambda m: (m.subscriber, m.count, m.messages)),
    OnNextPart: (MessageType.ON_NEXT_PART, lambda m: (m.subscriber, m.element, m.data)),
    OnNextLastPart: (MessageType.ON_NEXT_LAST_PART, lambda m: (m.subscriber, m.element, m.data)),
    Goodbye: (MessageType.GOODBYE, lambda m: (m.reason,)),
    Ping: (MessageType.PING, lambda m: (m.nonce,)),
    Pong: (MessageType.PONG, lambda m: (m.nonce,)),
}
# Plain ints, not MessageType members, so encode() packs them without a
# conversion.
_FIELDS = {cls: (int(code), fields) for cls, (code, fields) in _FIELDS.items()}


def encode(message: Message) -> bytes:
    """Encode one message as its msgpack array.

    Every field is written, defaults included (the golden vectors do so).
    """
    entry = _FIELDS.get(type(message))
    if entry is None:
        raise LocalProtocolError(f"not a protocol message: {message!r}")
    code, fields = entry
    encoded: bytes = _packer.pack((code, *fields(message)))
    return encoded


def encode_subscribe(publisher: str, subscriber: int, initial_demand: int) -> bytes:
    """``encode(Subscribe(...))`` without building the message: the
    connection checks the Id and demand it made itself, and this checks the
    one field the caller gave (a subscribe is sent per round trip)."""
    check_publisher_name(publisher)
    encoded: bytes = _packer.pack((_SUBSCRIBE, publisher, subscriber, initial_demand))
    return encoded


def encode_request(subscriber: int, demand: int) -> bytes:
    """``encode(Request(...))`` for values the connection has checked."""
    encoded: bytes = _packer.pack((_REQUEST, subscriber, demand))
    return encoded


_SUBSCRIBE = int(MessageType.SUBSCRIBE)
_REQUEST = int(MessageType.REQUEST)


def new_unpacker(limits: ProtocolLimits = DEFAULT_LIMITS) -> msgpack.Unpacker:
    """A streaming msgpack Unpacker configured with ``limits``."""
    return msgpack.Unpacker(
        raw=False,
        use_list=False,
        strict_map_key=True,
        # One whole message plus one read can be buffered; the connection
        # checks the size of an incomplete message itself (see Connection).
        max_buffer_size=2 * limits.max_message_size,
        max_str_len=limits.max_string_size,
        max_bin_len=limits.max_message_size,
        max_array_len=max(5, limits.max_extensions),
        max_map_len=0,
        max_ext_len=0,
    )


def _fail(message: str) -> RemoteProtocolError:
    return RemoteProtocolError(message)


def _id(value: object, what: str) -> int:
    if type(value) is not int or not 0 <= value <= MAX_ID:
        raise _fail(f"{what} must be an Id (an int in [0, 2**63)), got {value!r:.40}")
    return value


def _int(value: object, what: str) -> int:
    if type(value) is not int:
        raise _fail(f"{what} must be an int, got {type(value).__name__}")
    return value


def _str(value: object, what: str) -> str:
    if type(value) is not str:
        raise _fail(f"{what} must be a str, got {type(value).__name__}")
    return value


def _bin(value: object, what: str) -> bytes:
    if type(value) is not bytes:
        raise _fail(f"{what} must be bin, got {type(value).__name__}")
    return value


# Each decoder checks one message's fields, in wire order and with wire-level
# wording, then builds the message with its prechecked constructor: the class
# would only repeat the checks. An int msgpack cannot carry (only a caller of
# message_from_wire can pass one) goes to the checking constructor instead,
# which refuses it in the class's own words.
_new_on_next = prechecked(OnNext)
_new_request = prechecked(Request)
_new_subscribe = prechecked(Subscribe)
_new_cancel = prechecked(Cancel)
_new_subscribed = prechecked(Subscribed)
_new_on_complete = prechecked(OnComplete)
_new_on_error = prechecked(OnError)
_new_on_next_part = prechecked(OnNextPart)
_new_on_next_last_part = prechecked(OnNextLastPart)
_new_goodbye = prechecked(Goodbye)


def _decode_on_next(obj: tuple[Any, ...], limits: ProtocolLimits) -> Message:
    return _new_on_next(_id(obj[1], "subscriber"), _bin(obj[2], "element"))


def _decode_request(obj: tuple[Any, ...], limits: ProtocolLimits) -> Message:
    demand = _int(obj[2], "demand")
    subscriber = _id(obj[1], "subscriber")
    if not _MIN_WIRE_INT <= demand <= _MAX_WIRE_INT:
        return Request(subscriber=subscriber, demand=demand)
    return _new_request(subscriber, demand)


def _hello_extensions(hello: Hello) -> list[object]:
    # The bearer extension is the one written with its argument: [2, token].
    return [[extension, hello.token] if extension == Extension.BEARER else extension for extension in hello.extensions]


def _decode_hello(obj: tuple[Any, ...], limits: ProtocolLimits) -> Message:
    # Once per connection: the checking constructor costs nothing that matters.
    version = _int(obj[1], "version")
    extensions = obj[2]
    if type(extensions) is not tuple:
        raise _fail("hello extensions must be an array")
    if len(extensions) > limits.max_extensions:
        raise _fail(f"hello lists {len(extensions)} extensions, limit {limits.max_extensions}")
    ids: list[int] = []
    token: str | None = None
    for extension in extensions:
        if type(extension) is tuple:
            # An extension with arguments: [id, argument...]. Only bearer's
            # is known; others are ignored whole, like unknown ids.
            if not extension:
                raise _fail("hello extension with arguments must start with its id")
            extension_id = _int(extension[0], "extension id")
            if extension_id != Extension.BEARER:
                continue
            if len(extension) != 2 or type(extension[1]) is not str:
                raise _fail("the bearer extension must be [2, token] with a str token")
            if token is not None:
                raise _fail("hello lists the bearer extension twice")
            if len(extension[1].encode("utf-8", "surrogatepass")) > MAX_TOKEN_SIZE:
                raise _fail(f"bearer token longer than {MAX_TOKEN_SIZE} bytes")
            token = extension[1]
            ids.append(extension_id)
        else:
            extension_id = _int(extension, "extension id")
            if extension_id == Extension.BEARER:
                raise _fail("the bearer extension must carry its token: [2, token]")
            ids.append(extension_id)
    return Hello(version=version, extensions=tuple(ids), token=token)


def _decode_subscribe(obj: tuple[Any, ...], limits: ProtocolLimits) -> Message:
    initial = _int(obj[3], "initialDemand") if len(obj) > 3 else 0
    publisher = _str(obj[1], "publisher")
    subscriber = _id(obj[2], "subscriber")
    if not _MIN_WIRE_INT <= initial <= _MAX_WIRE_INT:
        return Subscribe(publisher=publisher, subscriber=subscriber, initial_demand=initial)
    return _new_subscribe(publisher, subscriber, initial)


def _decode_cancel(obj: tuple[Any, ...], limits: ProtocolLimits) -> Message:
    return _new_cancel(_id(obj[1], "subscriber"))


def _decode_subscribed(obj: tuple[Any, ...], limits: ProtocolLimits) -> Message:
    size = _int(obj[2], "elementSize") if len(obj) > 2 else 0
    if not 0 <= size <= limits.max_message_size:
        raise _fail(f"elementSize {size} out of range [0, {limits.max_message_size}]")
    subscriber = _id(obj[1], "subscriber")
    if size > MAX_ID:  # only possible with a max_message_size beyond any real message
        return Subscribed(subscriber=subscriber, element_size=size)
    return _new_subscribed(subscriber, size)


def _decode_on_complete(obj: tuple[Any, ...], limits: ProtocolLimits) -> Message:
    return _new_on_complete(_id(obj[1], "subscriber"))


def _decode_on_error(obj: tuple[Any, ...], limits: ProtocolLimits) -> Message:
    return _new_on_error(_id(obj[1], "subscriber"), _str(obj[2], "error"))


def _decode_on_next_packed(obj: tuple[Any, ...], limits: ProtocolLimits) -> Message:
    count = _int(obj[2], "count")
    if count < 0:
        raise _fail(f"onNextPacked count must not be negative, got {count}")
    # The class also bounds count by MAX_ID, which msgpack ints can exceed.
    return OnNextPacked(subscriber=_id(obj[1], "subscriber"), count=count, messages=_bin(obj[3], "messages"))


def _decode_on_next_part(obj: tuple[Any, ...], limits: ProtocolLimits) -> Message:
    return _new_on_next_part(_id(obj[1], "subscriber"), _id(obj[2], "element"), _bin(obj[3], "data"))


def _decode_on_next_last_part(obj: tuple[Any, ...], limits: ProtocolLimits) -> Message:
    return _new_on_next_last_part(_id(obj[1], "subscriber"), _id(obj[2], "element"), _bin(obj[3], "data"))


def _decode_goodbye(obj: tuple[Any, ...], limits: ProtocolLimits) -> Message:
    return _new_goodbye(_str(obj[1], "reason"))


def _decode_ping(obj: tuple[Any, ...], limits: ProtocolLimits) -> Message:
    return Ping(nonce=_id(obj[1], "ping nonce"))


def _decode_pong(obj: tuple[Any, ...], limits: ProtocolLimits) -> Message:
    return Pong(nonce=_id(obj[1], "pong nonce"))


_Decoder = Callable[[tuple[Any, ...], ProtocolLimits], Message]

# Code -> (minimum, maximum number of fields after the code, decoder): one
# lookup per message instead of a chain of comparisons. Trailing fields with
# a default may be omitted by the sender.
_DECODERS: dict[int, tuple[int, int, _Decoder]] = {
    MessageType.HELLO: (2, 2, _decode_hello),
    MessageType.SUBSCRIBE: (2, 3, _decode_subscribe),
    MessageType.REQUEST: (2, 2, _decode_request),
    MessageType.CANCEL: (1, 1, _decode_cancel),
    MessageType.SUBSCRIBED: (1, 2, _decode_subscribed),
    MessageType.ON_NEXT: (2, 2, _decode_on_next),
    MessageType.ON_COMPLETE: (1, 1, _decode_on_complete),
    MessageType.ON_ERROR: (2, 2, _decode_on_error),
    MessageType.ON_NEXT_PACKED: (3, 3, _decode_on_next_packed),
    MessageType.ON_NEXT_PART: (3, 3, _decode_on_next_part),
    MessageType.ON_NEXT_LAST_PART: (3, 3, _decode_on_next_last_part),
    MessageType.GOODBYE: (1, 1, _decode_goodbye),
    # The keepalive extension's (whether it is in use is the connection's
    # business: the codec only checks the shape).
    MessageType.PING: (1, 1, _decode_ping),
    MessageType.PONG: (1, 1, _decode_pong),
}


def message_from_wire(obj: object, limits: ProtocolLimits = DEFAULT_LIMITS) -> Message:
    """Validate one decoded msgpack object into a message.

    Raises:
        RemoteProtocolError: the object is not a well-formed message of the
            profile (not an array, unknown code, wrong field count or types).
    """
    if type(obj) is not tuple or not obj:
        raise _fail(f"a message must be a non-empty array, got {type(obj).__name__}")
    code = obj[0]
    entry = _DECODERS.get(code) if type(code) is int else None
    if entry is None:
        raise _fail(f"unknown message code {code!r:.20}")
    low, high, decode = entry
    if not low <= len(obj) - 1 <= high:
        raise _fail(f"{MessageType(code).name} takes {low}..{high} fields, got {len(obj) - 1}")
    try:
        return decode(obj, limits)
    except LocalProtocolError as exc:
        # A value the message classes refuse (an out-of-range count, say):
        # coming from the wire, it is the peer's fault.
        raise RemoteProtocolError(exc.message) from None


class MessageDecoder:
    """Bytes in, validated messages out: the codec without the state machine.

    For tools and tests (a raw client, a protocol dump); a connection uses
    :class:`~rstreams.protocol.Connection`, which also enforces the rules.
    """

    def __init__(self, limits: ProtocolLimits = DEFAULT_LIMITS) -> None:
        self._limits = limits
        self._unpacker = new_unpacker(limits)
        self._waiting: deque[memoryview] = deque()
        self._fed = 0
        self._message_end = 0

    def feed(self, data: bytes) -> None:
        """Add received bytes; they are parsed by iterating."""
        view = memoryview(data)
        limit = self._limits.max_message_size
        # Hand the Unpacker at most one message-size at a time, and only once
        # it has parsed what it holds, so its buffer limit can only trip on a
        # message that really is too large.
        for start in range(0, len(view), limit):
            self._waiting.append(view[start : start + limit])

    def __iter__(self) -> Iterator[Message]:
        """Yield each complete message received so far.

        Raises:
            RemoteProtocolError: the bytes are not msgpack, not a message, or
                a message is larger than ``max_message_size``.
        """
        while True:
            try:
                obj = self._unpacker.unpack()
            except msgpack.OutOfData:
                if self._fed - self._message_end > self._limits.max_message_size:
                    raise _fail(f"message larger than the limit of {self._limits.max_message_size} bytes") from None
                if not self._waiting:
                    return
                chunk = self._waiting.popleft()
                try:
                    self._unpacker.feed(chunk)
                except DecodeError as exc:
                    raise _fail(f"undecodable bytes: {exc or type(exc).__name__}") from exc
                self._fed += len(chunk)
                continue
            except DecodeError as exc:
                raise _fail(f"undecodable bytes: {exc or type(exc).__name__}") from exc
            # msgpack's offset also moves through an incomplete message, so
            # the size check measures from the end of the last complete one.
            self._message_end = self._unpacker.tell()
            yield message_from_wire(obj, self._limits)


class PartHeader(NamedTuple):
    """The header of an onNextPart / onNextLastPart: ``[9 or 10,
    subscriber, element, bin]`` up to the bin's first payload byte."""

    length: int  # bytes of the header (0: incomplete, see read_part_header)
    last: bool  # onNextLastPart
    subscriber: int
    element: int
    size: int  # bytes of payload that follow


#: :func:`read_part_header`'s answer to a prefix of a part's header.
INCOMPLETE_PART_HEADER = PartHeader(0, False, 0, 0, 0)
#: The longest header :func:`read_part_header` reads: fixarray, code, two
#: uint64 and a bin32 header.
MAX_PART_HEADER_SIZE = 1 + 1 + 9 + 9 + 5

#: The first byte of every part (and of a few other messages).
FIXARRAY_4 = 0x94
#: The codes of the two part messages, as they appear on the wire.
PART_CODE = int(MessageType.ON_NEXT_PART)
LAST_PART_CODE = int(MessageType.ON_NEXT_LAST_PART)
_PART_CODES = (PART_CODE, LAST_PART_CODE)
# msgpack's unsigned int and bin headers: tag -> bytes of the length or value.
_UINT_SIZES = {0xCC: 1, 0xCD: 2, 0xCE: 4, 0xCF: 8}
_BIN_SIZES = {0xC4: 1, 0xC5: 2, 0xC6: 4}


def read_part_header(data: bytes | memoryview, max_message_size: int) -> PartHeader | None:
    """Read the header of an onNextPart or onNextLastPart at the start of
    ``data`` (at least :data:`MAX_PART_HEADER_SIZE` bytes, or all there is;
    a one-dimensional view of bytes is read as they are).

    Returns the header; :data:`INCOMPLETE_PART_HEADER` if ``data`` is a
    prefix of one and more bytes will tell; None for anything else: another
    message, or a part whose header is not the usual well-formed one (ids
    that are not Ids, a data field that is not bin, a message over
    ``max_message_size``). None means "let the Unpacker decide", which is
    also how such a part's error is found.
    """
    fields = read_message_header(data, FIXARRAY_4, _PART_CODES, 2, max_message_size)
    if fields is None:
        return None
    if fields is INCOMPLETE_FIELDS:
        return INCOMPLETE_PART_HEADER
    subscriber, element = fields.ids
    return PartHeader(fields.end, data[1] == LAST_PART_CODE, subscriber, element, fields.size)


def read_message_header(
    data: bytes | memoryview, fixarray: int, codes: tuple[int, ...], id_count: int, max_message_size: int
) -> HeaderFields | None:
    """The header fields of a message ``[code, Id x id_count, bin]`` at the
    start of ``data``: its first byte ``fixarray``, its code one of
    ``codes``. What the onNext run reader and the part reader share.

    Returns the fields; :data:`INCOMPLETE_FIELDS` if ``data`` is a prefix of
    such a header; None for anything else, a message over
    ``max_message_size`` included (the Unpacker decides on those).
    """
    available = len(data)
    if not available or data[0] != fixarray:
        return None
    if available < 2:
        return INCOMPLETE_FIELDS
    if data[1] not in codes:
        return None
    fields = read_ids_and_bin(data, 2, id_count)
    if fields is None or fields is INCOMPLETE_FIELDS:
        return fields
    if fields.end + fields.size > max_message_size:
        return None
    return fields


class HeaderFields(NamedTuple):
    """The fields after a message's code in the header of a part or an
    onNext: its Ids, then a bin header."""

    ids: tuple[int, ...]
    end: int  # where the bin's payload starts
    size: int  # bytes of payload


#: :func:`read_ids_and_bin`'s answer to a prefix of the fields.
INCOMPLETE_FIELDS = HeaderFields((), 0, 0)


def read_ids_and_bin(data: bytes | memoryview, position: int, count: int) -> HeaderFields | None:
    """Read ``count`` Ids (msgpack unsigned ints up to ``MAX_ID``, in any
    of their forms) and then a bin header, from ``position`` in ``data``:
    the part of a header that :func:`read_part_header` and the run
    reader's ``read_on_next_header`` share.

    Returns the fields; :data:`INCOMPLETE_FIELDS` if ``data`` ends first;
    None if a field is not of that form (the Unpacker decides on it).
    """
    available = len(data)
    ids = []
    for _ in range(count):
        if position >= available:
            return INCOMPLETE_FIELDS
        tag = data[position]
        if tag < 0x80:  # positive fixint
            ids.append(tag)
            position += 1
            continue
        size = _UINT_SIZES.get(tag)
        if size is None:
            return None
        end = position + 1 + size
        if end > available:
            return INCOMPLETE_FIELDS
        value = int.from_bytes(data[position + 1 : end], "big")
        if value > MAX_ID:
            return None
        ids.append(value)
        position = end
    if position >= available:
        return INCOMPLETE_FIELDS
    size = _BIN_SIZES.get(data[position])
    if size is None:
        return None
    end = position + 1 + size
    if end > available:
        return INCOMPLETE_FIELDS
    return HeaderFields(tuple(ids), end, int.from_bytes(data[position + 1 : end], "big"))


def part_header_ids(data: bytes | memoryview) -> bytes:
    """The two ids of a part's header as encoded (subscriber, element), from
    a header :func:`read_part_header` read at the start of ``data``: with
    the code before them and a bin header after, they make the header of
    another part of the same element (``Connection.receive_buffers``)."""
    end = 2
    for _ in (0, 1):
        tag = data[end]
        end += 1 if tag < 0x80 else 1 + _UINT_SIZES[tag]
    return bytes(data[2:end])

