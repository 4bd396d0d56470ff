"""Serializing and marshalling: the entry points of the Bond encodings.

*Serialized* data is one struct in one protocol, with nothing around it:
the reader must know the protocol. *Marshalled* data starts with a 4-byte
header naming it: the protocol's magic as uint16 little-endian (``43 42``,
"CB", for Compact Binary; ``4d 46``, "MF", for Fast Binary) and its version
as uint16 little-endian. Epoxy's payloads are Compact Binary v1 marshalled:
``43 42 01 00`` then the struct.

:func:`unmarshal` accepts the three headers this package can read
(Compact v1 ``43 42 01 00``, Compact v2 ``43 42 02 00``, Fast v1
``4d 46 01 00``), as Bond's ``Unmarshal`` does for the protocols it is built
with; :func:`marshal` writes Compact v1 unless told otherwise.

Decoding is strict about the end: the struct must end exactly where the
input does (trailing bytes are an error); :func:`deserialize_from` reads
one struct from an offset and returns where it ended, for data that goes on.
"""

from __future__ import annotations

import struct
from collections.abc import Generator
from typing import Any, TypeVar

from ._compact import CompactReader, CompactWriter
from ._errors import DEFAULT_LIMITS, BondDecodeError, BondEncodeError, BondLimitError, BondLimits
from ._fast import FastReader, FastWriter
from ._reader import Reader
from ._schema import Struct
from ._tree import StructValue
from ._types import Protocol
from ._writer import Writer

__all__ = [
    "serialize",
    "deserialize",
    "deserialize_from",
    "marshal",
    "marshal_steps",
    "MARSHAL_STEP_ITEMS",
    "unmarshal",
    "marshal_header",
    "read_marshal_header",
    "read_tree",
    "write_tree",
    "unmarshal_tree",
    "marshal_tree",
    "transcode",
]

S = TypeVar("S", bound=Struct)
Buffer = bytes | bytearray | memoryview

_HEADER = struct.Struct("<HH")
_HEADERS = {protocol: _HEADER.pack(protocol.magic, protocol.version) for protocol in Protocol}
_BY_HEADER = {header: protocol for protocol, header in _HEADERS.items()}


def _view(data: Buffer, limits: BondLimits) -> memoryview:
    view = memoryview(data)
    if view.ndim != 1 or view.format != "B":
        view = view.cast("B")
    if len(view) > limits.max_size:
        raise BondLimitError(f"input of {len(view)} bytes exceeds the limit of {limits.max_size}")
    return view


def _reader(protocol: Protocol, view: memoryview, offset: int, limits: BondLimits) -> Reader:
    if protocol is Protocol.FAST:
        return FastReader(view, offset, limits)
    if not isinstance(protocol, Protocol):
        raise TypeError(f"protocol must be a bond.Protocol, got {protocol!r}")
    return CompactReader(view, offset, limits, v2=protocol is Protocol.COMPACT_V2)


def _writer(protocol: Protocol) -> Writer:
    if protocol is Protocol.FAST:
        return FastWriter()
    if not isinstance(protocol, Protocol):
        raise TypeError(f"protocol must be a bond.Protocol, got {protocol!r}")
    return CompactWriter(v2=protocol is Protocol.COMPACT_V2)


def _run_reader(reader: Reader, read: Any, what: str) -> Any:
    # The single place where the hot path's IndexError / struct.error (a read
    # past the end) become BondDecodeError.
    try:
        return read()
    except (IndexError, struct.error):
        raise BondDecodeError(f"{what} is truncated (input ends at {reader.end} bytes)") from None


def _check_end(reader: Reader, what: str) -> None:
    if reader.pos != reader.end:
        raise BondDecodeError(f"{reader.end - reader.pos} bytes follow the {what} (ending at offset {reader.pos})")


def serialize(value: Struct, protocol: Protocol = Protocol.COMPACT_V1) -> bytes:
    """Serialize a struct (no header).

    Raises:
        BondEncodeError: a field holds a value its type cannot encode.
    """
    writer = _writer(protocol)
    try:
        writer.write_struct(value, type(value))
    except (struct.error, OverflowError) as exc:
        raise BondEncodeError(f"cannot encode {type(value).__name__}: {exc}") from None
    return bytes(writer.out)


def deserialize_from(
    struct_class: type[S],
    data: Buffer,
    protocol: Protocol = Protocol.COMPACT_V1,
    offset: int = 0,
    *,
    limits: BondLimits = DEFAULT_LIMITS,
) -> tuple[S, int]:
    """Read one serialized struct at ``offset``; return it and the offset just after it.

    Raises:
        BondDecodeError: the bytes are not a valid ``struct_class`` (including
            a missing required field, :class:`BondRequiredFieldError`, and a
            broken limit, :class:`BondLimitError`).
    """
    view = _view(data, limits)
    reader = _reader(protocol, view, offset, limits)
    result = _run_reader(reader, lambda: reader.read_struct(struct_class), struct_class.__name__)
    return result, reader.pos


def deserialize(
    struct_class: type[S],
    data: Buffer,
    protocol: Protocol = Protocol.COMPACT_V1,
    *,
    limits: BondLimits = DEFAULT_LIMITS,
) -> S:
    """Deserialize exactly one struct (no header; nothing may follow it).

    Raises:
        BondDecodeError: as :func:`deserialize_from`, or bytes follow the struct.
    """
    view = _view(data, limits)
    reader = _reader(protocol, view, 0, limits)
    result = _run_reader(reader, lambda: reader.read_struct(struct_class), struct_class.__name__)
    _check_end(reader, struct_class.__name__)
    return result  # type: ignore[no-any-return]


def marshal_header(protocol: Protocol = Protocol.COMPACT_V1) -> bytes:
    """The 4-byte marshalling header of ``protocol``."""
    return _HEADERS[protocol]


def read_marshal_header(data: Buffer) -> Protocol:
    """The protocol named by the marshalling header at the start of ``data``.

    Raises:
        BondDecodeError: no header, or one this package cannot read.
    """
    header = bytes(memoryview(data)[:4])
    protocol = _BY_HEADER.get(header)
    if protocol is None:
        if len(header) < 4:
            raise BondDecodeError(f"marshalled data of {len(header)} bytes has no 4-byte header")
        magic, version = _HEADER.unpack(header)
        raise BondDecodeError(f"unsupported marshalling header: magic 0x{magic:04x}, version {version}")
    return protocol


def marshal(value: Struct, protocol: Protocol = Protocol.COMPACT_V1) -> bytes:
    """Marshal a struct: the protocol's header, then the struct serialized in it.

    Raises:
        BondEncodeError: a field holds a value its type cannot encode.
    """
    return _HEADERS[protocol] + serialize(value, protocol)


#: Items of a struct's list written per step by :func:`marshal_steps`: a few
#: milliseconds of writing (a blob of ``list<blob>`` takes about 1 µs).
MARSHAL_STEP_ITEMS = 4096


def marshal_steps(
    value: Struct, protocol: Protocol = Protocol.COMPACT_V1, *, items_per_step: int = MARSHAL_STEP_ITEMS
) -> Generator[None, None, bytes]:
    """Marshal a struct in steps: a generator that yields between them and returns the bytes.

    The bytes are exactly :func:`marshal`'s. The struct's own lists and
    sets are written ``items_per_step`` items a step, so that the caller
    can let others run between steps (a trio caller checkpoints at each
    yield); everything else, nested lists included, is written in the step
    it falls in. Drive it with ``next()`` until ``StopIteration``, whose
    ``value`` is the bytes.

    Raises:
        BondEncodeError: a field holds a value its type cannot encode (from
            the step that meets it).
        ValueError: ``items_per_step`` is not positive.
    """
    if type(items_per_step) is not int or items_per_step < 1:
        raise ValueError(f"items_per_step must be a positive int, got {items_per_step!r}")
    writer = _writer(protocol)
    writer.out += _HEADERS[protocol]
    try:
        yield from writer.write_struct_steps(value, type(value), items_per_step)
    except (struct.error, OverflowError) as exc:
        raise BondEncodeError(f"cannot encode {type(value).__name__}: {exc}") from None
    return bytes(writer.out)


def unmarshal(struct_class: type[S], data: Buffer, *, limits: BondLimits = DEFAULT_LIMITS) -> S:
    """Unmarshal a struct in any of the protocols of :func:`read_marshal_header`.

    Raises:
        BondDecodeError: a bad header, or as :func:`deserialize`.
    """
    view = _view(data, limits)  # the size first: an input too big is not looked at
    protocol = read_marshal_header(view)
    reader = _reader(protocol, view, 4, limits)
    result = _run_reader(reader, lambda: reader.read_struct(struct_class), struct_class.__name__)
    _check_end(reader, struct_class.__name__)
    return result  # type: ignore[no-any-return]


def read_tree(
    data: Buffer, protocol: Protocol = Protocol.COMPACT_V1, *, limits: BondLimits = DEFAULT_LIMITS
) -> StructValue:
    """Read one serialized struct without a schema (nothing may follow it).

    Raises:
        BondDecodeError: the bytes are not one valid struct.
    """
    view = _view(data, limits)
    reader = _reader(protocol, view, 0, limits)
    result = _run_reader(reader, reader.read_tree_struct, "struct")
    _check_end(reader, "struct")
    return result  # type: ignore[no-any-return]


def unmarshal_tree(data: Buffer, *, limits: BondLimits = DEFAULT_LIMITS) -> tuple[Protocol, StructValue]:
    """Read marshalled data without a schema; return its protocol and the tree.

    Raises:
        BondDecodeError: a bad header, or the bytes are not one valid struct.
    """
    protocol = read_marshal_header(data)
    view = _view(data, limits)
    reader = _reader(protocol, view, 4, limits)
    result = _run_reader(reader, reader.read_tree_struct, "struct")
    _check_end(reader, "struct")
    return protocol, result


def write_tree(value: StructValue, protocol: Protocol = Protocol.COMPACT_V1) -> bytes:
    """Serialize a tree: every field it holds, in its order, with its wire types.

    Raises:
        BondEncodeError: a value does not fit the wire type it is filed under.
    """
    writer = _writer(protocol)
    try:
        writer.write_tree_struct(value)
    except (struct.error, OverflowError) as exc:
        raise BondEncodeError(f"cannot encode the tree: {exc}") from None
    except (TypeError, ValueError) as exc:
        if isinstance(exc, BondEncodeError):
            raise
        raise BondEncodeError(f"cannot encode the tree: {exc}") from None
    return bytes(writer.out)


def marshal_tree(value: StructValue, protocol: Protocol = Protocol.COMPACT_V1) -> bytes:
    """Marshal a tree: the protocol's header, then :func:`write_tree`."""
    return _HEADERS[protocol] + write_tree(value, protocol)


def transcode(
    data: Buffer, source: Protocol, target: Protocol, *, limits: BondLimits = DEFAULT_LIMITS
) -> bytes:
    """Re-serialize one struct from ``source`` to ``target`` without a schema.

    Every field is kept, in wire order, as Bond's own transcoding does.

    Raises:
        BondDecodeError: ``data`` is not one valid struct in ``source``.
    """
    return write_tree(read_tree(data, source, limits=limits), target)
