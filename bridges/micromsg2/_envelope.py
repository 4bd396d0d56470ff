"""How a message's properties travel through an rstreams topic.

rstreams elements are bytes, without headers, yet a MicroMsg2 subscriber
to a topic must see the properties each message was sent with (and the
broker filters on them). So a SEND with properties is stored in the topic
as an *envelope*::

    MAGIC (5 bytes: 00 6d 6d 32 70, "\\0mm2p")  length:2  properties  payload

``properties`` is the MESSAGE frame's Properties field, byte for byte, and
``length`` its size (big-endian). A SEND without properties is stored as
its bare payload, so that every other client of the topic (``rstreams sub
tcp://...``) reads exactly what was sent; only a payload that itself starts
with MAGIC is wrapped (with empty properties), so that unwrapping is never
ambiguous for what MicroMsg2 stored. An element that does not start with
MAGIC, or whose envelope does not parse, is a payload without properties.
Pure functions, no I/O.
"""

from __future__ import annotations

from ._errors import MalformedTextError
from ._properties import Properties, decode_properties, encode_properties

__all__ = ["ENVELOPE_MAGIC", "wrap", "unwrap"]

#: The first bytes of an element that carries properties.
ENVELOPE_MAGIC = b"\x00mm2p"
_HEADER = len(ENVELOPE_MAGIC) + 2


def wrap(properties: Properties, payload: bytes) -> bytes:
    """The topic element for a message: the bare payload, or an envelope."""
    if not properties and not payload.startswith(ENVELOPE_MAGIC):
        return payload
    field = encode_properties(properties)
    return ENVELOPE_MAGIC + len(field).to_bytes(2, "big") + field + payload


def unwrap(element: bytes) -> tuple[Properties, bytes]:
    """A topic element's properties and payload (no properties for a bare element)."""
    if not element.startswith(ENVELOPE_MAGIC) or len(element) < _HEADER:
        return (), element
    length = int.from_bytes(element[len(ENVELOPE_MAGIC) : _HEADER], "big")
    if len(element) < _HEADER + length:
        return (), element
    try:
        properties = decode_properties(element[_HEADER : _HEADER + length])
    except MalformedTextError:
        return (), element
    return properties, element[_HEADER + length :]
