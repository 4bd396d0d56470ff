"""Runs of onNext: many messages of one stream parsed in a few C-level steps.

A publisher of small elements writes onNext after onNext for one stream, and
when the elements have one size (a fixed-size stream, or a pattern of equal
records) every message is the same header followed by its element::

    93 05 <subscriber> c4 <size> <element>     (fixarray 3, code 5, Id, bin)

msgpack's Unpacker turns each message into a tuple that the connection then
checks field by field: about 0.3 µs an 8-byte element here, most of what a
client spends on it. This module only parses; it decides nothing. It reads
the first message's header in Python (:func:`read_on_next_header`), and
:class:`RunReader` finds how many of the messages that follow repeat that
header byte for byte (each header byte compared across all the messages
with one strided slice; where that fails, one possessive regular
expression match finds the first message that differs, with no
backtracking and no state per message) and slices their elements out with
one ``struct`` format (``<header>x<size>s`` repeated), so a run of
thousands costs a handful of calls, about 30 ns an 8-byte element.

Anything else, a message with another header included, ends the run where
it starts; the caller hands it to the Unpacker, which finds and words every
error, and the connection applies the same rules to a run as to a message
(see "Runs of onNext" in ``_connection``).
"""

from __future__ import annotations

import re
import struct
from typing import NamedTuple

from ._codec import INCOMPLETE_FIELDS, read_message_header
from ._messages import MessageType

__all__ = [
    "FIXARRAY_3",
    "ON_NEXT_CODE",
    "INCOMPLETE_ON_NEXT_HEADER",
    "MAX_ON_NEXT_HEADER_SIZE",
    "OnNextHeader",
    "RunReader",
    "read_on_next_header",
]

#: The first two bytes of an onNext (and the first of a few other messages).
FIXARRAY_3 = 0x93
ON_NEXT_CODE = int(MessageType.ON_NEXT)
_ON_NEXT_CODES = (ON_NEXT_CODE,)
#: The longest header read: fixarray, code, a uint64 Id and a bin32 header.
MAX_ON_NEXT_HEADER_SIZE = 1 + 1 + 9 + 5


class OnNextHeader(NamedTuple):
    """The header of one onNext: ``[5, subscriber, bin]`` up to the bin's
    first payload byte."""

    header: bytes  # the header's bytes (empty: incomplete)
    subscriber: int
    size: int  # bytes of the element
    length: int  # bytes of the whole message: header and element


#: :func:`read_on_next_header`'s answer to a prefix of a header.
INCOMPLETE_ON_NEXT_HEADER = OnNextHeader(b"", 0, 0, 0)


def read_on_next_header(data: bytes | memoryview, max_message_size: int) -> OnNextHeader | None:
    """Read the header of an onNext at the start of ``data``.

    Returns the header; :data:`INCOMPLETE_ON_NEXT_HEADER` if ``data`` is a
    prefix of one; None for anything else: another message, or an onNext
    whose header is not the usual well-formed one (an Id that is not an Id,
    an element that is not bin, a message over ``max_message_size``), which
    the Unpacker decides on.
    """
    fields = read_message_header(data, FIXARRAY_3, _ON_NEXT_CODES, 1, max_message_size)
    if fields is None:
        return None
    if fields is INCOMPLETE_FIELDS:
        return INCOMPLETE_ON_NEXT_HEADER
    end = fields.end
    return OnNextHeader(bytes(data[:end]), fields.ids[0], fields.size, end + fields.size)


# Elements sliced by one struct call at most (its format holds this many
# pairs); a run is cut into blocks of powers of two up to this.
_MAX_BLOCK = 1024
# Headers whose compiled forms are kept: a stream's header changes only
# with its element size, so a few cover the streams of a connection; a
# stream of elements of every size never gets this far (see take).
_MAX_FORMS = 16


class _RunForm:
    """The compiled forms of one header: the run's pattern and the structs
    that slice ``2**k`` messages' elements."""

    __slots__ = ("run", "structs", "item")

    def __init__(self, header: OnNextHeader) -> None:
        self.run = re.compile(b"(?:" + re.escape(header.header) + b".{%d})*+" % header.size, re.DOTALL)
        self.item = f"{len(header.header)}x{header.size}s"
        self.structs: dict[int, struct.Struct] = {}

    def block(self, count: int) -> struct.Struct:
        unpacker = self.structs.get(count)
        if unpacker is None:
            unpacker = self.structs[count] = struct.Struct("<" + self.item * count)
        return unpacker


class RunReader:
    """Takes the elements of a run of onNext messages that repeat one header.

    One per connection: it keeps the compiled forms of the last few headers
    it met (a pattern and a few structs each, built once per header).
    """

    def __init__(self) -> None:
        self._forms: dict[bytes, _RunForm] = {}

    def take(self, data: bytes | memoryview, header: OnNextHeader, max_count: int) -> list[bytes]:
        """The elements of the complete messages at the start of ``data``
        that are ``header`` (read from its start) followed by an element;
        at most ``max_count`` of them. ``data`` must hold the first message
        whole (it is taken without looking further)."""
        length = header.length
        count = min(max_count, len(data) // length)
        start = len(header.header)
        if count < 2 or data[length : length + start] != header.header:
            # One message: no run worth a pattern (a stream of elements of
            # many sizes stops here every time).
            return [bytes(data[start:length])]
        form = self._forms.get(header.header)
        if form is None:
            if len(self._forms) >= _MAX_FORMS:
                del self._forms[next(iter(self._forms))]
            form = self._forms[header.header] = _RunForm(header)
        end = count * length
        prefix = header.header
        # Every message a run: each byte of the header, read across the
        # messages with one strided slice, is that byte every time. Where
        # that is not so, the pattern finds the first message that differs.
        if not all(data[index:end:length] == prefix[index : index + 1] * count for index in range(start)):
            matched = form.run.match(data, 0, end)
            assert matched is not None  # (``*+`` matches the empty run too)
            count = matched.end() // length
        elements: list[bytes] = []
        position = 0
        while count:
            block = _MAX_BLOCK if count >= _MAX_BLOCK else 1 << (count.bit_length() - 1)
            elements += form.block(block).unpack_from(data, position)
            position += block * length
            count -= block
        return elements
