"""Texts a connection sends for people (onError, goodbye) fit the string limit
its peer decodes with: a name of the largest size, quoted after ``no such
publisher: ``, had made an onError the peer's decoder refused, closing its
whole session."""

from __future__ import annotations

import hypothesis
import hypothesis.strategies as st

from helpers import ConnectionPair
from rstreams.protocol import DEFAULT_LIMITS, OnError
from rstreams.protocol._messages import CUT_TEXT_MARK, sendable_text, text_within


@hypothesis.settings(max_examples=300, deadline=None)
@hypothesis.given(text=st.text(max_size=300), max_bytes=st.integers(min_value=len(CUT_TEXT_MARK), max_value=400))
def test_a_text_within_fits_and_keeps_what_it_can(text: str, max_bytes: int) -> None:
    got = text_within(text, max_bytes)
    assert len(got.encode("utf-8")) <= max_bytes
    whole = sendable_text(text)
    if len(whole.encode("utf-8")) <= max_bytes:
        assert got == whole
    else:
        assert got.endswith(CUT_TEXT_MARK) and whole.startswith(got[: -len(CUT_TEXT_MARK)])


@hypothesis.settings(max_examples=20, deadline=None)
@hypothesis.given(size=st.integers(min_value=DEFAULT_LIMITS.max_string_size - 40, max_value=DEFAULT_LIMITS.max_string_size), wide=st.booleans())
def test_an_on_error_quoting_the_largest_name_is_one_the_peer_takes(size: int, wide: bool) -> None:
    pair = ConnectionPair()
    pair.open()
    name = ("é" * (size // 2)) if wide else ("x" * size)
    subscriber = pair.client.subscribe(name, 1)
    pair.send(pair.client)
    pair.server.fail(subscriber, f"no such publisher: {name}")
    [event] = pair.send(pair.server)  # (the client's decoder, default limits: no protocol error)
    assert isinstance(event, OnError) and event.error.startswith("no such publisher: ")
