"""Message values: codes, defaults, validation at construction, immutability."""

from __future__ import annotations

import dataclasses

import pytest

from rstreams.protocol import (
    MAX_ID,
    PROTOCOL_VERSION,
    UNBOUNDED,
    Cancel,
    Goodbye,
    Hello,
    LocalProtocolError,
    MessageType,
    OnComplete,
    OnError,
    OnNext,
    OnNextLastPart,
    OnNextPacked,
    OnNextPart,
    Request,
    Subscribe,
    Subscribed,
)


def test_message_codes_are_the_profile_table() -> None:
    assert {member.name: member.value for member in MessageType} == {
        "HELLO": 0,
        "SUBSCRIBE": 1,
        "REQUEST": 2,
        "CANCEL": 3,
        "SUBSCRIBED": 4,
        "ON_NEXT": 5,
        "ON_COMPLETE": 6,
        "ON_ERROR": 7,
        "ON_NEXT_PACKED": 8,
        "ON_NEXT_PART": 9,
        "ON_NEXT_LAST_PART": 10,
        "GOODBYE": 11,
        # The keepalive extension's (PROTOCOL.md section 8).
        "PING": 12,
        "PONG": 13,
    }


def test_constants() -> None:
    assert PROTOCOL_VERSION == 0
    assert MAX_ID == UNBOUNDED == 2**63 - 1


def test_defaults() -> None:
    assert Hello() == Hello(version=0, extensions=())
    assert Subscribe(publisher="p", subscriber=1).initial_demand == 0
    assert Subscribed(subscriber=1).element_size == 0
    assert Goodbye().reason == ""


def test_messages_are_frozen_values() -> None:
    message = Request(subscriber=1, demand=2)
    with pytest.raises(dataclasses.FrozenInstanceError):
        message.demand = 3  # type: ignore[misc]
    assert message == Request(subscriber=1, demand=2)
    assert hash(message) == hash(Request(subscriber=1, demand=2))
    assert message != Request(subscriber=2, demand=2)


def test_fields_are_keyword_only() -> None:
    with pytest.raises(TypeError):
        Request(1, 2)  # type: ignore[misc]


VALID_IDS = [0, 1, MAX_ID]
INVALID_IDS = [-1, MAX_ID + 1, True, 1.0, "1", None]


@pytest.mark.parametrize("subscriber", VALID_IDS)
def test_valid_ids(subscriber: int) -> None:
    assert Cancel(subscriber=subscriber).subscriber == subscriber
    assert OnNextPart(subscriber=1, element=subscriber, data=b"").element == subscriber


@pytest.mark.parametrize("subscriber", INVALID_IDS, ids=repr)
@pytest.mark.parametrize(
    "make",
    [
        lambda id_: Subscribe(publisher="p", subscriber=id_),
        lambda id_: Request(subscriber=id_, demand=1),
        lambda id_: Cancel(subscriber=id_),
        lambda id_: Subscribed(subscriber=id_),
        lambda id_: OnNext(subscriber=id_, element=b""),
        lambda id_: OnComplete(subscriber=id_),
        lambda id_: OnError(subscriber=id_, error=""),
        lambda id_: OnNextPacked(subscriber=id_, count=0, messages=b""),
        lambda id_: OnNextPart(subscriber=id_, element=0, data=b""),
        lambda id_: OnNextLastPart(subscriber=1, element=id_, data=b""),
    ],
    ids=[
        "Subscribe",
        "Request",
        "Cancel",
        "Subscribed",
        "OnNext",
        "OnComplete",
        "OnError",
        "OnNextPacked",
        "OnNextPart",
        "OnNextLastPart.element",
    ],
)
def test_invalid_ids_are_refused(make, subscriber: object) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(LocalProtocolError):
        make(subscriber)


INVALID_FIELDS = {
    "Hello extensions list": lambda: Hello(extensions=[1]),  # type: ignore[arg-type]
    "Hello bool extension": lambda: Hello(extensions=(True,)),
    "Hello float version": lambda: Hello(version=0.0),  # type: ignore[arg-type]
    "Subscribe bytes publisher": lambda: Subscribe(publisher=b"p", subscriber=1),  # type: ignore[arg-type]
    "Subscribe bool demand": lambda: Subscribe(publisher="p", subscriber=1, initial_demand=True),
    "Request demand above the wire": lambda: Request(subscriber=1, demand=2**64),
    "Request demand below the wire": lambda: Request(subscriber=1, demand=-(2**63) - 1),
    "Subscribed negative size": lambda: Subscribed(subscriber=1, element_size=-1),
    "OnNext str element": lambda: OnNext(subscriber=1, element="x"),  # type: ignore[arg-type]
    "OnNext bytearray element": lambda: OnNext(subscriber=1, element=bytearray(b"x")),  # type: ignore[arg-type]
    "OnError bytes error": lambda: OnError(subscriber=1, error=b"x"),  # type: ignore[arg-type]
    "OnNextPacked negative count": lambda: OnNextPacked(subscriber=1, count=-1, messages=b""),
    "OnNextPacked count above Ids": lambda: OnNextPacked(subscriber=1, count=MAX_ID + 1, messages=b""),
    "OnNextPart str data": lambda: OnNextPart(subscriber=1, element=0, data="x"),  # type: ignore[arg-type]
    "Goodbye bytes reason": lambda: Goodbye(reason=b"bye"),  # type: ignore[arg-type]
}


@pytest.mark.parametrize("make", INVALID_FIELDS.values(), ids=INVALID_FIELDS.keys())
def test_invalid_fields_are_refused(make) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(LocalProtocolError):
        make()


def test_request_demand_covers_the_wire_range() -> None:
    # Non-positive demand is a stream error, not a malformed message (rule 3.9).
    assert Request(subscriber=1, demand=0).demand == 0
    assert Request(subscriber=1, demand=-(2**63)).demand == -(2**63)
    assert Request(subscriber=1, demand=2**64 - 1).demand == 2**64 - 1


def test_goodbye_response_answers_any_goodbye() -> None:
    assert Goodbye(reason="protocol error: x").response() == Goodbye(reason="goodbye")


def test_prechecked_builds_any_number_of_fields_in_order_and_checks_the_count() -> None:
    # The core's messages have up to three fields; a bridge's frames more
    # (MicroMsg2's MessageFrame: five), built by a loop over the setters.
    from rstreams.protocol import prechecked

    @dataclasses.dataclass(frozen=True, slots=True)
    class Five:
        a: int
        b: int
        c: int
        d: int
        e: int

        def __post_init__(self) -> None:
            raise AssertionError("prechecked must skip the checks")

    five = prechecked(Five)(1, 2, 3, 4, 5)
    assert (five.a, five.b, five.c, five.d, five.e) == (1, 2, 3, 4, 5)
    with pytest.raises(TypeError, match="Five takes 5 fields, got 4"):
        prechecked(Five)(1, 2, 3, 4)
