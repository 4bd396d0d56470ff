"""ProtocolLimits: defaults and validation."""

from __future__ import annotations

import dataclasses

import pytest

from rstreams.protocol import DEFAULT_LIMITS, ProtocolLimits


def test_defaults() -> None:
    assert DEFAULT_LIMITS == ProtocolLimits(
        max_message_size=16 * 1024 * 1024,
        max_element_size=32 * 1024 * 1024,
        max_string_size=64 * 1024,
        max_extensions=64,
        split_threshold=64 * 1024,
        part_size=256 * 1024,
        max_remembered_ids=65536,
    )


@pytest.mark.parametrize(
    "name",
    [field.name for field in dataclasses.fields(ProtocolLimits)],
)
@pytest.mark.parametrize("value", [0, -1, 1.5, True, None], ids=repr)
def test_every_limit_must_be_a_positive_int(name: str, value: object) -> None:
    with pytest.raises(ValueError, match=name):
        ProtocolLimits(**{name: value})  # type: ignore[arg-type]


def test_split_parts_must_fit_in_a_message() -> None:
    with pytest.raises(ValueError, match="split_threshold"):
        ProtocolLimits(max_message_size=4096, split_threshold=4096)
    assert ProtocolLimits(max_message_size=4096, split_threshold=4096 - 64).split_threshold == 4032


def test_limits_are_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        DEFAULT_LIMITS.max_message_size = 1  # type: ignore[misc]


def test_copied_writes_take_parts_no_larger_than_the_split_threshold() -> None:
    limits = ProtocolLimits()
    assert limits.part_size > limits.split_threshold
    copied = limits.for_copied_writes()
    assert copied.part_size == limits.split_threshold
    assert dataclasses.replace(copied, part_size=limits.part_size) == limits  # nothing else moves
    small = ProtocolLimits(part_size=16 * 1024)
    assert small.for_copied_writes() is small  # already within the threshold
