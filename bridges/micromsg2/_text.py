"""The two lexical rules every MicroMsg2 text follows: FIELD and URL encoding.

Names (extensions, properties, commands, keys) are FIELDs: 7-bit lower-case
ASCII letters, digits and hyphens, never empty. Values are URL encoded. The
spec says no more, so we pin it down (``docs/bridges/micromsg2.md``):

* we encode UTF-8 and escape every byte outside RFC 3986's unreserved set
  (``A-Z a-z 0-9 - . _ ~``), upper-case hex: a space is ``%20``, never ``+``;
* we decode strictly: ``%`` must be followed by two hex digits, only
  printable ASCII other than the separators of the context may appear
  unescaped, ``+`` is a plus, and the result must be UTF-8. Anything else is
  a :class:`~bridges.micromsg2.MalformedTextError`, not a guess.
"""

from __future__ import annotations

import re

from ._errors import MalformedTextError

__all__ = ["is_field", "check_field", "url_encode", "url_decode"]

_FIELD = re.compile(r"[a-z0-9-]+\Z")
_UNRESERVED = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
# Characters that never appear unescaped in a value: they separate things
# somewhere (`;` extensions and properties, `,` arguments, `=` and `:` keys).
_SEPARATORS = frozenset(";,=:%")
_HEX = frozenset("0123456789abcdefABCDEF")


def is_field(text: str) -> bool:
    """Whether ``text`` is a FIELD: non-empty ``[a-z0-9-]``."""
    return _FIELD.match(text) is not None


def check_field(text: str, what: str) -> str:
    """Return ``text`` if it is a FIELD.

    Raises:
        MalformedTextError: it is not (the message names ``what``).
    """
    if not is_field(text):
        raise MalformedTextError(f"{what} {text!r} is not a FIELD (lower-case ASCII letters, digits, '-')")
    return text


def url_encode(text: str) -> str:
    """``text`` URL encoded: UTF-8, every byte but the unreserved ones escaped.

    Raises:
        MalformedTextError: ``text`` is not encodable as UTF-8 (a lone surrogate).
    """
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError:
        raise MalformedTextError(f"{text!r} is not valid Unicode text") from None
    return "".join(chr(byte) if byte in _UNRESERVED else f"%{byte:02X}" for byte in data)


def url_decode(encoded: str) -> str:
    """The text that ``encoded`` URL-encodes, decoded strictly.

    Raises:
        MalformedTextError: a bad escape, an unescaped separator or control
            character, or bytes that are not UTF-8.
    """
    out = bytearray()
    index = 0
    while index < len(encoded):
        char = encoded[index]
        if char == "%":
            escape = encoded[index + 1 : index + 3]
            if len(escape) != 2 or not set(escape) <= _HEX:
                raise MalformedTextError(f"bad URL escape at {index} in {encoded!r}")
            out.append(int(escape, 16))
            index += 3
            continue
        if not " " < char < "\x7f" or char in _SEPARATORS:
            raise MalformedTextError(f"character {char!r} must be URL encoded in {encoded!r}")
        out.append(ord(char))
        index += 1
    try:
        return out.decode("utf-8")
    except UnicodeDecodeError:
        raise MalformedTextError(f"URL-encoded value {encoded!r} is not UTF-8") from None
