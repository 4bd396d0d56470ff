"""The table-driven decoder against the plain reference decoder it replaced.

``message_from_wire`` looks each code up in a table and builds the message
with a constructor that skips the class's own checks (the decoder made them
already). This reference is the straightforward version: a chain of code
comparisons and the checking constructors. On any input, valid or not, both
must give the same message or the same error, word for word.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers import SMALL_LIMITS
from rstreams.protocol import (
    MAX_TOKEN_SIZE,
    MAX_ID,
    Cancel,
    Goodbye,
    Hello,
    LocalProtocolError,
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
    ProtocolLimits,
    RemoteProtocolError,
    Request,
    Subscribe,
    Subscribed,
    message_from_wire,
)

_ARITY = {
    MessageType.HELLO: (2, 2),
    MessageType.SUBSCRIBE: (2, 3),
    MessageType.REQUEST: (2, 2),
    MessageType.CANCEL: (1, 1),
    MessageType.SUBSCRIBED: (1, 2),
    MessageType.ON_NEXT: (2, 2),
    MessageType.ON_COMPLETE: (1, 1),
    MessageType.ON_ERROR: (2, 2),
    MessageType.ON_NEXT_PACKED: (3, 3),
    MessageType.ON_NEXT_PART: (3, 3),
    MessageType.ON_NEXT_LAST_PART: (3, 3),
    MessageType.GOODBYE: (1, 1),
    MessageType.PING: (1, 1),
    MessageType.PONG: (1, 1),
}


def _fail(message: str) -> RemoteProtocolError:
    return RemoteProtocolError(message)


def _id(value: Any, what: str) -> int:
    if type(value) is not int or not 0 <= value <= MAX_ID:
        raise _fail(f"{what} must be an Id (an int in [0, 2**63)), got {value!r:.40}")
    return value


def _int(value: Any, what: str) -> int:
    if type(value) is not int:
        raise _fail(f"{what} must be an int, got {type(value).__name__}")
    return value


def _str(value: Any, what: str) -> str:
    if type(value) is not str:
        raise _fail(f"{what} must be a str, got {type(value).__name__}")
    return value


def _bin(value: Any, what: str) -> bytes:
    if type(value) is not bytes:
        raise _fail(f"{what} must be bin, got {type(value).__name__}")
    return value


def reference_decode(obj: Any, limits: ProtocolLimits) -> Message:
    try:
        return _reference_decode(obj, limits)
    except LocalProtocolError as exc:
        raise RemoteProtocolError(exc.message) from None


def _reference_decode(obj: Any, limits: ProtocolLimits) -> Message:  # noqa: C901 - the reference is the long version
    if type(obj) is not tuple or not obj:
        raise _fail(f"a message must be a non-empty array, got {type(obj).__name__}")
    code = obj[0]
    if type(code) is not int or code not in _ARITY:
        raise _fail(f"unknown message code {code!r:.20}")
    low, high = _ARITY[MessageType(code)]
    if not low <= len(obj) - 1 <= high:
        raise _fail(f"{MessageType(code).name} takes {low}..{high} fields, got {len(obj) - 1}")
    if code == MessageType.ON_NEXT:
        return OnNext(subscriber=_id(obj[1], "subscriber"), element=_bin(obj[2], "element"))
    if code == MessageType.REQUEST:
        demand = _int(obj[2], "demand")
        return Request(subscriber=_id(obj[1], "subscriber"), demand=demand)
    if code == MessageType.HELLO:
        version = _int(obj[1], "version")
        extensions = obj[2]
        if type(extensions) is not tuple:
            raise _fail("hello extensions must be an array")
        if len(extensions) > limits.max_extensions:
            raise _fail(f"hello lists {len(extensions)} extensions, limit {limits.max_extensions}")
        ids: list[int] = []
        tokens: list[str] = []
        for extension in extensions:
            if type(extension) is not tuple:
                ids.append(_int(extension, "extension id"))
                if ids[-1] == 2:
                    raise _fail("the bearer extension must carry its token: [2, token]")
                continue
            # [id, arguments...]: only the bearer extension (2) has some.
            if len(extension) == 0:
                raise _fail("hello extension with arguments must start with its id")
            if _int(extension[0], "extension id") != 2:
                continue
            if len(extension) != 2 or type(extension[1]) is not str:
                raise _fail("the bearer extension must be [2, token] with a str token")
            if tokens:
                raise _fail("hello lists the bearer extension twice")
            if len(extension[1].encode("utf-8", "surrogatepass")) > MAX_TOKEN_SIZE:
                raise _fail(f"bearer token longer than {MAX_TOKEN_SIZE} bytes")
            tokens.append(extension[1])
            ids.append(2)
        return Hello(version=version, extensions=tuple(ids), token=tokens[0] if tokens else None)
    if code == MessageType.SUBSCRIBE:
        initial = _int(obj[3], "initialDemand") if len(obj) > 3 else 0
        return Subscribe(publisher=_str(obj[1], "publisher"), subscriber=_id(obj[2], "subscriber"), initial_demand=initial)
    if code == MessageType.CANCEL:
        return Cancel(subscriber=_id(obj[1], "subscriber"))
    if code == MessageType.SUBSCRIBED:
        size = _int(obj[2], "elementSize") if len(obj) > 2 else 0
        if not 0 <= size <= limits.max_message_size:
            raise _fail(f"elementSize {size} out of range [0, {limits.max_message_size}]")
        return Subscribed(subscriber=_id(obj[1], "subscriber"), element_size=size)
    if code == MessageType.ON_COMPLETE:
        return OnComplete(subscriber=_id(obj[1], "subscriber"))
    if code == MessageType.ON_ERROR:
        return OnError(subscriber=_id(obj[1], "subscriber"), error=_str(obj[2], "error"))
    if code == MessageType.ON_NEXT_PACKED:
        count = _int(obj[2], "count")
        if count < 0:
            raise _fail(f"onNextPacked count must not be negative, got {count}")
        return OnNextPacked(subscriber=_id(obj[1], "subscriber"), count=count, messages=_bin(obj[3], "messages"))
    if code == MessageType.ON_NEXT_PART:
        return OnNextPart(subscriber=_id(obj[1], "subscriber"), element=_id(obj[2], "element"), data=_bin(obj[3], "data"))
    if code == MessageType.ON_NEXT_LAST_PART:
        return OnNextLastPart(
            subscriber=_id(obj[1], "subscriber"), element=_id(obj[2], "element"), data=_bin(obj[3], "data")
        )
    if code == MessageType.PING:
        return Ping(nonce=_id(obj[1], "ping nonce"))
    if code == MessageType.PONG:
        return Pong(nonce=_id(obj[1], "pong nonce"))
    return Goodbye(reason=_str(obj[1], "reason"))


# Ints at every boundary the checks have, including ones msgpack cannot carry
# (message_from_wire is public and takes any Python object).
_edge_ints = st.sampled_from(
    [0, 1, 2, 8, -1, MAX_ID, MAX_ID + 1, 2**64 - 1, 2**64, -(2**63), -(2**63) - 1, 2**70, 4096, 4097]
)
_fields = st.one_of(
    _edge_ints,
    st.integers(),
    st.text(max_size=5),
    st.binary(max_size=5),
    st.booleans(),
    st.none(),
    st.floats(allow_nan=False),
    st.lists(st.one_of(_edge_ints, st.text(max_size=2)), max_size=3).map(tuple),
    st.lists(st.integers(), max_size=3),
)
_codes = st.one_of(st.integers(-1, 15), st.sampled_from([True, 1.0, "1", None]))
_ids = st.one_of(st.integers(0, MAX_ID), _edge_ints)
_valid_fields = {
    "id": _ids,
    "int": st.one_of(st.integers(-(2**63), 2**64 - 1), _edge_ints),
    "str": st.text(max_size=5),
    "bin": st.binary(max_size=5),
    "exts": st.lists(st.integers(0, 9), max_size=3).map(tuple),
}
_SHAPES = {
    MessageType.HELLO: ["int", "exts"],
    MessageType.SUBSCRIBE: ["str", "id", "int"],
    MessageType.REQUEST: ["id", "int"],
    MessageType.CANCEL: ["id"],
    MessageType.SUBSCRIBED: ["id", "int"],
    MessageType.ON_NEXT: ["id", "bin"],
    MessageType.ON_COMPLETE: ["id"],
    MessageType.ON_ERROR: ["id", "str"],
    MessageType.ON_NEXT_PACKED: ["id", "int", "bin"],
    MessageType.ON_NEXT_PART: ["id", "id", "bin"],
    MessageType.ON_NEXT_LAST_PART: ["id", "id", "bin"],
    MessageType.GOODBYE: ["str"],
    MessageType.PING: ["id"],
    MessageType.PONG: ["id"],
}


@st.composite
def _near_valid(draw: st.DrawFn) -> tuple[object, ...]:
    """A message of the right shape, sometimes one field short or wrong."""
    code = draw(st.sampled_from(sorted(_SHAPES)))
    fields = [draw(_valid_fields[kind]) for kind in _SHAPES[code]]
    fields = fields[: draw(st.integers(len(fields) - 1, len(fields)))]
    broken = draw(st.integers(0, 5))
    if broken < len(fields):
        fields[broken] = draw(_fields)
    return (int(code), *fields)


_objects = st.one_of(
    _near_valid(),
    st.tuples(_codes).flatmap(lambda code: st.lists(_fields, max_size=5).map(lambda rest: (*code, *rest))),
    _fields,
)
_limits = st.sampled_from([SMALL_LIMITS, ProtocolLimits(), ProtocolLimits(max_message_size=2**65, split_threshold=1024)])


def _outcome(decode: Any, obj: object, limits: ProtocolLimits) -> tuple[str, object]:
    try:
        message = decode(obj, limits)
    except RemoteProtocolError as exc:
        return "error", exc.message
    return type(message).__name__, message


@settings(max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(obj=_objects, limits=_limits)
def test_the_decoder_agrees_with_the_reference(obj: object, limits: ProtocolLimits) -> None:
    assert _outcome(message_from_wire, obj, limits) == _outcome(reference_decode, obj, limits)


@settings(max_examples=500, deadline=None)
@given(obj=_objects, limits=_limits)
def test_decoded_messages_are_ones_the_checking_constructors_accept(obj: object, limits: ProtocolLimits) -> None:
    try:
        message = message_from_wire(obj, limits)
    except RemoteProtocolError:
        return
    fields = {name: getattr(message, name) for name in type(message).__slots__}  # type: ignore[union-attr]
    assert type(message)(**fields) == message
