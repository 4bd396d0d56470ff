"""The wire messages of rstreams wire profile v0, as values.

Each class is one message of the profile (``docs/PROTOCOL.md``), named after
the draft's message in CamelCase. They are what the codec turns into bytes and
back, and what :class:`~rstreams.protocol.Connection` hands to the application
for control traffic. Elements are the exception: on the hot path the
connection never builds one object per element; it delivers runs of them as
:class:`Elements` (see ``_batch.py``).

Validation happens in ``__post_init__`` so an invalid message cannot exist: a
local caller gets ``LocalProtocolError`` at construction; the decoder turns the
same failure into ``RemoteProtocolError``.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, TypeVar, Union

from ._errors import LocalProtocolError

if TYPE_CHECKING:
    from ._batch import ElementBatch

__all__ = [
    "PROTOCOL_VERSION",
    "MAX_ID",
    "UNBOUNDED",
    "MessageType",
    "Extension",
    "MAX_TOKEN_SIZE",
    "check_publisher_name",
    "check_token",
    "Hello",
    "Subscribe",
    "Request",
    "Cancel",
    "Subscribed",
    "OnNext",
    "OnComplete",
    "OnError",
    "OnNextPacked",
    "OnNextPart",
    "OnNextLastPart",
    "Goodbye",
    "Ping",
    "Pong",
    "Elements",
    "InvalidRequest",
    "Message",
    "Event",
]

#: The only protocol version this implementation speaks.
PROTOCOL_VERSION = 0
#: Ids (subscriber and split-element ids) are unsigned and below 2**63.
MAX_ID = 2**63 - 1
#: Cumulative demand saturates here; a stream with this much demand is unbounded.
UNBOUNDED = 2**63 - 1
# The largest integer msgpack can carry; demand up to here is accepted and
# saturates to UNBOUNDED (Reactive Streams rule 3.17).
_MAX_WIRE_INT = 2**64 - 1
_MIN_WIRE_INT = -(2**63)


class MessageType(enum.IntEnum):
    """Message codes: item 0 of every message array."""

    HELLO = 0
    SUBSCRIBE = 1
    REQUEST = 2
    CANCEL = 3
    SUBSCRIBED = 4
    ON_NEXT = 5
    ON_COMPLETE = 6
    ON_ERROR = 7
    ON_NEXT_PACKED = 8
    ON_NEXT_PART = 9
    ON_NEXT_LAST_PART = 10
    GOODBYE = 11
    # Added by the keepalive extension: sent only once both hellos list it.
    PING = 12
    PONG = 13


class Extension(enum.IntEnum):
    """Extension ids a hello may list (docs/PROTOCOL.md, section 8).

    An extension is in use on a connection once both hellos list it; a
    peer ignores ids it does not know, so announcing one is always safe.
    """

    #: ping / pong and dead-peer detection.
    KEEPALIVE = 1
    #: a bearer token for the server's authentication hook (section 9): the
    #: one extension with an argument, written ``[2, token]`` in the list.
    BEARER = 2

#: Longest bearer token a hello may carry, in UTF-8 bytes: room for a signed
#: JWT with generous claims, small beside a hello's other limits.
MAX_TOKEN_SIZE = 8192


def _check_id(name: str, value: object) -> None:
    if type(value) is not int or not 0 <= value <= MAX_ID:
        raise LocalProtocolError(f"{name} must be an int in [0, 2**63), got {value!r}")


def _check_int(name: str, value: object, low: int = _MIN_WIRE_INT, high: int = _MAX_WIRE_INT) -> None:
    if type(value) is not int or not low <= value <= high:
        raise LocalProtocolError(f"{name} must be an int in [{low}, {high}], got {value!r}")


def _check_str(name: str, value: object) -> None:
    if type(value) is not str:
        raise LocalProtocolError(f"{name} must be a str, got {type(value).__name__}")
    if not (value.isascii() or _encodes_as_utf8(value)):
        # Lone surrogates (os.fsdecode's stand-ins for bytes that are not
        # UTF-8) have no UTF-8 form: refused here, typed, rather than by
        # msgpack when the message is written.
        raise LocalProtocolError(f"{name} must be UTF-8 text, got lone surrogates in {value!r}")


def check_token(token: object) -> None:
    """The rule for a bearer token a hello carries: a ``str`` of UTF-8 text
    (lone surrogates, which msgpack would refuse later, untyped, have no
    UTF-8 form) of at most :data:`MAX_TOKEN_SIZE` bytes. Used by
    :class:`Hello`, and by whoever takes a token before a hello is made
    (``SessionConfig``, the command line), so that they say it first.

    Raises:
        LocalProtocolError: it is not one.
    """
    if type(token) is not str:
        raise LocalProtocolError("token must be a str")
    try:
        size = len(token.encode("utf-8"))
    except UnicodeEncodeError:
        raise LocalProtocolError("token must be UTF-8 text (it holds lone surrogates)") from None
    if size > MAX_TOKEN_SIZE:
        raise LocalProtocolError(f"token longer than {MAX_TOKEN_SIZE} bytes")


def check_publisher_name(name: object) -> None:
    """The rule for a publisher name, which every subscribe (built as a
    message or encoded directly) and every subscription follows: a ``str``
    with a UTF-8 form (routing matches it exactly, so nothing is replaced).

    Raises:
        LocalProtocolError: it is not one.
    """
    # (_check_str's rule, written out: a subscribe is sent per round trip.)
    if type(name) is not str or not (name.isascii() or _encodes_as_utf8(name)):
        _check_str("publisher", name)


def _encodes_as_utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def sendable_text(text: str) -> str:
    """``text`` as a message may carry it: unchanged when it has a UTF-8
    form, else with each character that has none (a lone surrogate, as
    ``os.fsdecode`` leaves for undecodable bytes) written as a backslash
    escape. For the texts the application hands over to be read by people
    (an exception's message for onError, a goodbye's reason), so that such
    a text never fails the connection that carries it. (Anything but a
    ``str`` is returned as it is, for the message's own check to refuse.)"""
    if type(text) is not str or text.isascii() or _encodes_as_utf8(text):
        return text
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


#: What a text cut to fit its message ends with.
CUT_TEXT_MARK = "... (cut)"


def text_within(text: str, max_bytes: int) -> str:
    """``text`` (as :func:`sendable_text` makes it) cut to at most
    ``max_bytes`` of UTF-8, ending with :data:`CUT_TEXT_MARK` when cut.

    An onError or goodbye text is often the peer's own (an unknown publisher
    name, up to the string limit itself): quoted whole after
    ``no such publisher: ``, a name of the largest size made a text the
    peer's decoder refuses, which closed its whole session."""
    text = sendable_text(text)
    if type(text) is not str or len(text) * 4 <= max_bytes:
        return text  # (fits whatever its characters)
    encoded = text.encode("utf-8")
    if len(encoded) <= max_bytes:
        return text
    keep = max(0, max_bytes - len(CUT_TEXT_MARK))
    return encoded[:keep].decode("utf-8", "ignore") + CUT_TEXT_MARK


def _check_bytes(name: str, value: object) -> None:
    if type(value) is not bytes:
        raise LocalProtocolError(f"{name} must be bytes, got {type(value).__name__}")


_M = TypeVar("_M")


def prechecked(cls: type[_M]) -> Callable[..., _M]:
    """A constructor for the message or event class ``cls`` that skips ``__post_init__``.

    Only where every field was checked already, at least as strictly as the
    class does. The receive path: the decoder checks every field of a
    received message itself, with wire-level wording, so checking again here
    would only double the cost of each control message received (a few per
    subscribe); the connection builds an :class:`Elements` per run of
    elements, whose frozen dataclass ``__init__`` alone costs more than the
    run. (The bridges use it the same way: for what their decoders made,
    and for messages a machine checked as they were handed to it and keeps
    to write.) Fields are passed positionally, in declaration order.
    Everyone else constructs messages normally: an invalid message still
    cannot be made by mistake.
    """
    # One constructor per field count, with the slot setters bound: a loop
    # over the fields would cost about as much as the checks it skips.
    setters = tuple(getattr(cls, field.name).__set__ for field in fields(cls))  # type: ignore[arg-type]
    new = object.__new__
    if len(setters) == 1:
        (set_a,) = setters

        def construct1(a: object) -> _M:
            message = new(cls)
            set_a(message, a)
            return message

        return construct1
    if len(setters) == 2:
        set_a, set_b = setters

        def construct2(a: object, b: object) -> _M:
            message = new(cls)
            set_a(message, a)
            set_b(message, b)
            return message

        return construct2
    if len(setters) == 3:
        set_a, set_b, set_c = setters

        def construct3(a: object, b: object, c: object) -> _M:
            message = new(cls)
            set_a(message, a)
            set_b(message, b)
            set_c(message, c)
            return message

        return construct3

    # More fields (a bridge's frames): a loop, still far less than the
    # checks of as many fields.
    def construct(*values: object) -> _M:
        if len(values) != len(setters):
            raise TypeError(f"{cls.__name__} takes {len(setters)} fields, got {len(values)}")
        message = new(cls)
        for set_field, value in zip(setters, values):
            set_field(message, value)
        return message

    return construct


@dataclass(frozen=True, slots=True, kw_only=True)
class Hello:
    """First message in each direction: the protocol version and extensions."""

    version: int = PROTOCOL_VERSION
    extensions: tuple[int, ...] = ()
    #: The bearer extension's argument (a credential: never in repr or logs);
    #: set exactly when ``extensions`` lists ``Extension.BEARER``.
    token: str | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        _check_int("version", self.version)
        if type(self.extensions) is not tuple:
            raise LocalProtocolError("extensions must be a tuple of ints")
        for extension in self.extensions:
            _check_int("extension id", extension)
        if (self.token is not None) != (Extension.BEARER in self.extensions):
            raise LocalProtocolError("a hello carries a token exactly when it lists the bearer extension")
        if self.token is not None:
            check_token(self.token)


@dataclass(frozen=True, slots=True, kw_only=True)
class Subscribe:
    """Ask the peer's publisher ``publisher`` for a stream with our Id ``subscriber``."""

    publisher: str
    subscriber: int
    initial_demand: int = 0

    def __post_init__(self) -> None:
        check_publisher_name(self.publisher)
        _check_id("subscriber", self.subscriber)
        _check_int("initial_demand", self.initial_demand)


@dataclass(frozen=True, slots=True, kw_only=True)
class Request:
    """Add ``demand`` to the stream ``subscriber`` (values <= 0 are a stream error, rule 3.9)."""

    subscriber: int
    demand: int

    def __post_init__(self) -> None:
        _check_id("subscriber", self.subscriber)
        _check_int("demand", self.demand)


@dataclass(frozen=True, slots=True, kw_only=True)
class Cancel:
    """Stop the stream ``subscriber``; needs no reply."""

    subscriber: int

    def __post_init__(self) -> None:
        _check_id("subscriber", self.subscriber)


@dataclass(frozen=True, slots=True, kw_only=True)
class Subscribed:
    """The publisher accepted; ``element_size > 0`` fixes every element's size."""

    subscriber: int
    element_size: int = 0

    def __post_init__(self) -> None:
        _check_id("subscriber", self.subscriber)
        _check_int("element_size", self.element_size, 0, MAX_ID)


@dataclass(frozen=True, slots=True, kw_only=True)
class OnNext:
    """One element."""

    subscriber: int
    element: bytes

    def __post_init__(self) -> None:
        _check_id("subscriber", self.subscriber)
        _check_bytes("element", self.element)


@dataclass(frozen=True, slots=True, kw_only=True)
class OnComplete:
    """The stream ended normally; nothing follows for this Id."""

    subscriber: int

    def __post_init__(self) -> None:
        _check_id("subscriber", self.subscriber)


@dataclass(frozen=True, slots=True, kw_only=True)
class OnError:
    """The stream failed with ``error``; nothing follows for this Id."""

    subscriber: int
    error: str

    def __post_init__(self) -> None:
        _check_id("subscriber", self.subscriber)
        _check_str("error", self.error)


@dataclass(frozen=True, slots=True, kw_only=True)
class OnNextPacked:
    """``count`` fixed-size elements back to back in ``messages``."""

    subscriber: int
    count: int
    messages: bytes

    def __post_init__(self) -> None:
        _check_id("subscriber", self.subscriber)
        _check_int("count", self.count, 0, MAX_ID)
        _check_bytes("messages", self.messages)


@dataclass(frozen=True, slots=True, kw_only=True)
class OnNextPart:
    """A non-final part of the split element ``element``."""

    subscriber: int
    element: int
    data: bytes

    def __post_init__(self) -> None:
        _check_id("subscriber", self.subscriber)
        _check_id("element", self.element)
        _check_bytes("data", self.data)


@dataclass(frozen=True, slots=True, kw_only=True)
class OnNextLastPart:
    """The final part of the split element ``element``; the element counts now."""

    subscriber: int
    element: int
    data: bytes

    def __post_init__(self) -> None:
        _check_id("subscriber", self.subscriber)
        _check_id("element", self.element)
        _check_bytes("data", self.data)


@dataclass(frozen=True, slots=True, kw_only=True)
class Goodbye:
    """The last message in a direction; ends every stream of the connection."""

    reason: str = ""

    def __post_init__(self) -> None:
        _check_str("reason", self.reason)

    def response(self) -> Goodbye:
        """The goodbye that answers this one (rule 10)."""
        return Goodbye(reason="goodbye")


@dataclass(frozen=True, slots=True, kw_only=True)
class Ping:
    """Keepalive extension: are you there? Answered with :meth:`response`."""

    nonce: int

    def __post_init__(self) -> None:
        _check_id("nonce", self.nonce)

    def response(self) -> Pong:
        """The pong that answers this ping."""
        return Pong(nonce=self.nonce)


@dataclass(frozen=True, slots=True, kw_only=True)
class Pong:
    """Keepalive extension: the answer to the ping with the same ``nonce``."""

    nonce: int

    def __post_init__(self) -> None:
        _check_id("nonce", self.nonce)


# Connection-level events that are not single wire messages.


@dataclass(frozen=True, slots=True, kw_only=True)
class Elements:
    """A run of elements received for our subscription ``subscriber``.

    Consecutive onNext, onNextPacked and joined split messages of one stream
    arrive as one event, so the cost per element stays a few list operations.
    """

    subscriber: int
    elements: ElementBatch


@dataclass(frozen=True, slots=True, kw_only=True)
class InvalidRequest:
    """The peer sent request(n <= 0) for our publication ``subscriber``.

    The connection has already queued onError for that stream (rule 3.9) and
    forgotten it; the application should stop the publisher.
    """

    subscriber: int
    demand: int


Message = Union[
    Hello,
    Subscribe,
    Request,
    Cancel,
    Subscribed,
    OnNext,
    OnComplete,
    OnError,
    OnNextPacked,
    OnNextPart,
    OnNextLastPart,
    Goodbye,
    Ping,
    Pong,
]

Event = Union[
    Hello,
    Subscribe,
    Request,
    Cancel,
    Subscribed,
    Elements,
    OnComplete,
    OnError,
    Goodbye,
    InvalidRequest,
    Ping,
    Pong,
]
