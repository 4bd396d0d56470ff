"""Topic elements that carry a message's properties (``_envelope``): round trips, and any bytes unwrap."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from bridges.micromsg2 import ENVELOPE_MAGIC, decode_properties, encode_properties, unwrap, wrap

KEYS = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-", min_size=1, max_size=8)
VALUES = st.one_of(st.integers(min_value=-(2**63), max_value=2**63 - 1), st.text(max_size=20))
PROPERTIES = st.dictionaries(KEYS, VALUES, max_size=5).map(lambda table: tuple(table.items()))


def test_a_message_without_properties_is_stored_as_sent() -> None:
    assert wrap((), b"plain") == b"plain"
    assert unwrap(b"plain") == ((), b"plain")


def test_the_envelope_layout() -> None:
    element = wrap((("room", "lobby"),), b"hi")
    assert element == ENVELOPE_MAGIC + b"\x00\x0b" + b"room:Tlobby" + b"hi"


@given(PROPERTIES, st.binary(max_size=64))
def test_wrap_then_unwrap_gives_back_the_message(properties: tuple, payload: bytes) -> None:  # type: ignore[type-arg]
    assert unwrap(wrap(properties, payload)) == (decode_properties(encode_properties(properties)), payload)


@given(st.binary(max_size=64))
def test_a_payload_that_looks_like_an_envelope_still_round_trips(tail: bytes) -> None:
    payload = ENVELOPE_MAGIC + tail
    assert unwrap(wrap((), payload)) == ((), payload)


@given(st.binary(max_size=80))
def test_any_element_unwraps_without_error(element: bytes) -> None:
    stored = ENVELOPE_MAGIC + element
    properties, payload = unwrap(stored)
    assert stored.endswith(payload)  # the payload is what follows the envelope, or all of it
    if payload != stored:  # it was an envelope: its properties are valid ones
        assert decode_properties(encode_properties(properties)) == properties
