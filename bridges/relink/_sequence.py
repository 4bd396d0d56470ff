"""32-bit wrapping message sequence numbers.

Messages on a channel have an implicit sequence number: the first is 0, each
next one adds 1, and 2**32 - 1 wraps to 0. Nothing on the wire carries the
number of a message; both sides count. Acknowledgements and transaction
operations name a sequence number, and whether it is acceptable is a
*modular range* question: is it within so many steps after a base?
``distance(base, sequence)`` answers it the way the Go implementation does
(``int(sequence - base)`` on uint32 values): always a non-negative step count
below 2**32, so a number "before" the base looks like a huge distance and
fails any sane upper bound.

"Nothing yet" is the number before 0, ``NONE = 2**32 - 1``: a channel that has
received or consumed nothing reports that number, as Go does.
"""

from __future__ import annotations

__all__ = ["MODULUS", "MASK", "NONE", "advance", "distance", "in_window"]

MODULUS = 2**32
MASK = MODULUS - 1
#: The sequence number "before the first message": what nothing-yet looks like.
NONE = MASK


def advance(sequence: int, steps: int = 1) -> int:
    """``sequence`` moved ``steps`` forward (or back, if negative), wrapping."""
    return (sequence + steps) & MASK


def distance(base: int, sequence: int) -> int:
    """How many steps forward from ``base`` to ``sequence``, in [0, 2**32)."""
    return (sequence - base) & MASK


def in_window(base: int, sequence: int, low: int, high: int) -> bool:
    """Is ``sequence`` between ``low`` and ``high`` steps after ``base``, inclusive?"""
    return low <= distance(base, sequence) <= high
