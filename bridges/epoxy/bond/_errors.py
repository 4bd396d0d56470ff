"""Bond errors and the limits that guard decoding.

Every failure of a decoder is a :class:`BondDecodeError` (or a subclass): a
truncated buffer, a bad varint, a wire type that does not fit the schema, a
missing required field, a limit exceeded. Raw ``IndexError``,
``struct.error`` or ``UnicodeDecodeError`` never escape: the decoders let
the first two happen on the hot path (checking every byte in Python would
double the cost) and translate them at their single entry point.

Encoding a value that does not fit its declared type (an int out of range, a
``str`` where bytes are expected) is a :class:`BondEncodeError`.

These errors do not derive from rstreams' errors: the Bond encodings are
usable on their own. The Epoxy connection turns a decode error into the
``MALFORMED_DATA`` protocol error.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "BondError",
    "BondDecodeError",
    "BondLimitError",
    "BondRequiredFieldError",
    "BondEncodeError",
    "BondLimits",
    "DEFAULT_LIMITS",
]


class BondError(Exception):
    """Base class of every error raised by the Bond encodings."""


class BondDecodeError(BondError):
    """The input is not valid for the protocol or the schema it was read with."""


class BondLimitError(BondDecodeError):
    """The input breaks one of the :class:`BondLimits` (depth, length, size)."""


class BondRequiredFieldError(BondDecodeError):
    """A field declared ``required`` is absent from the input.

    Attributes:
        struct_name: the Python name of the struct class.
        field_name: the missing field's name.
        field_id: the missing field's id.
    """

    def __init__(self, struct_name: str, field_name: str, field_id: int) -> None:
        super().__init__(f"required field {struct_name}.{field_name} (id {field_id}) is missing")
        self.struct_name = struct_name
        self.field_name = field_name
        self.field_id = field_id


class BondEncodeError(BondError, ValueError):
    """A value cannot be encoded with the type its field declares."""


@dataclass(frozen=True, slots=True, kw_only=True)
class BondLimits:
    """Bounds on what a decoder accepts, so that hostile input costs little.

    Beyond these explicit limits, every length read from the input (string,
    blob, container count) is checked against the bytes that remain before
    anything is allocated: each item of a container takes at least one byte,
    so no count can make the decoder allocate more than the input justifies.

    Attributes:
        max_depth: deepest nesting of structs and containers. Bounds the
            Python recursion. Default 64, the default of Bond's C++
            ``RecursionGuard``.
        max_container_length: most items in one list, set or map, decoded
            or skipped (a decoded item is a Python object of tens of bytes
            for one byte on the wire; a skipped one costs as much time to
            walk). Blobs, and skipped lists of bytes, are bounded by the
            input size alone: they are copied or jumped over whole.
            Default 2**20.
        max_skipped_items: most values one input may make the reader skip
            (unknown fields, the fields and items inside them, the extent of
            a ``bonded<T>``), all counted together. Skipping walks the wire
            one value at a time (about half a microsecond each) to make
            nothing, so without a budget of its own an unknown field of one
            framelet was seconds of work for nobody. A container is charged
            its whole count when its header is read, before it is walked,
            so an input over the budget fails at once. Lists of fixed-size
            scalars are jumped over in one step and charged nothing.
            Default 2**14 (about 20 ms of walking at worst, here).
        max_size: largest input accepted, in bytes. Default 64 MiB, above
            Epoxy's 32 MiB framelets.
    """

    max_depth: int = 64
    max_container_length: int = 1 << 20
    max_skipped_items: int = 1 << 14
    max_size: int = 64 * 1024 * 1024

    def __post_init__(self) -> None:
        for name in ("max_depth", "max_container_length", "max_skipped_items", "max_size"):
            value = getattr(self, name)
            if type(value) is not int or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")


DEFAULT_LIMITS = BondLimits()
