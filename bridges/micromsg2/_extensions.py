"""Extensions as the handshake names them: ``name:key=value,key=value;name2``.

An :class:`ExtensionSpec` is one item of a RequiredExtensions or
OptionalExtensions field. The spec writes the batch-ack count three ways
(``count=10``, ``max-count=10``, ``max-count:100``): we accept all three and
emit ``batch-ack:max-count=N``. A trailing ``;`` is accepted and never
emitted; an empty field is an empty list. A property without a value
(``name:flag``) is read as an empty value, except for the ``key:N`` spelling
above, which is read as ``key=N``.
"""

from __future__ import annotations

from dataclasses import dataclass

from ._errors import MalformedTextError
from ._text import check_field, url_decode, url_encode

__all__ = [
    "ACK",
    "BATCH_ACK",
    "JSON",
    "DOTNET",
    "PUBSUB",
    "KNOWN_EXTENSIONS",
    "DEFAULT_BATCH_SIZE",
    "MAX_WINDOW",
    "ExtensionSpec",
    "format_extensions",
    "parse_extensions",
]

ACK = "ack"
BATCH_ACK = "batch-ack"
JSON = "json"
DOTNET = "dotnet"
PUBSUB = "pubsub"
#: Every extension this implementation speaks.
KNOWN_EXTENSIONS = frozenset({ACK, BATCH_ACK, JSON, DOTNET, PUBSUB})
#: batch-ack's window when the handshake gives no count.
DEFAULT_BATCH_SIZE = 10
#: The largest window: with at most 65535 messages unacknowledged, every
#: pending sequence number is distinct, so a cumulative ack is unambiguous.
MAX_WINDOW = 65535
_COUNT_KEYS = ("max-count", "count")


@dataclass(frozen=True, slots=True, kw_only=True)
class ExtensionSpec:
    """One extension of a handshake: its name and its properties, in order.

    Raises:
        MalformedTextError: at construction, for a name or property name
            that is not a FIELD, or a property given twice.
    """

    name: str
    properties: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        check_field(self.name, "extension name")
        keys = [check_field(key, "extension property") for key, _ in self.properties]
        if len(set(keys)) != len(keys):
            raise MalformedTextError(f"a property of extension {self.name!r} is given twice")

    @classmethod
    def batch_ack(cls, window: int = DEFAULT_BATCH_SIZE) -> ExtensionSpec:
        """``batch-ack:max-count=N``."""
        if not 1 <= window <= MAX_WINDOW:
            raise MalformedTextError(f"batch-ack window {window} is not in [1, {MAX_WINDOW}]")
        return cls(name=BATCH_ACK, properties=(("max-count", str(window)),))

    def get(self, key: str) -> str | None:
        """The value of property ``key``, or None."""
        for name, value in self.properties:
            if name == key:
                return value
        return None

    @property
    def window(self) -> int:
        """The ack window this extension sets: 1 for ``ack``, the count for ``batch-ack``.

        Raises:
            MalformedTextError: the count is not an integer in [1, 65535].
            ValueError: the extension is not an ack extension.
        """
        if self.name == ACK:
            return 1
        if self.name != BATCH_ACK:
            raise ValueError(f"{self.name!r} sets no ack window")
        text = next((v for k in _COUNT_KEYS if (v := self.get(k)) is not None), None)
        if text is None:
            return DEFAULT_BATCH_SIZE
        if not text.isdigit() or not 1 <= int(text) <= MAX_WINDOW:
            raise MalformedTextError(f"batch-ack count {text!r} is not an integer in [1, {MAX_WINDOW}]")
        return int(text)

    def __str__(self) -> str:
        if not self.properties:
            return self.name
        properties = ",".join(f"{key}={url_encode(value)}" for key, value in self.properties)
        return f"{self.name}:{properties}"


def format_extensions(extensions: tuple[ExtensionSpec, ...]) -> bytes:
    """The handshake field for ``extensions``: items joined by ``;``."""
    return ";".join(str(extension) for extension in extensions).encode("ascii")


def _parse_one(item: str) -> ExtensionSpec:
    name, colon, rest = item.partition(":")
    properties: list[tuple[str, str]] = []
    if colon:
        for part in rest.split(","):
            key, equals, value = part.partition("=")
            if not equals:
                # `max-count:100`: the spec's third spelling of the count.
                key, colon_again, value = part.partition(":")
                if not colon_again:
                    value = ""
            properties.append((key, url_decode(value)))
    return ExtensionSpec(name=name, properties=tuple(properties))


def parse_extensions(field: bytes) -> tuple[ExtensionSpec, ...]:
    """Parse a RequiredExtensions or OptionalExtensions field.

    Raises:
        MalformedTextError: not ASCII, an empty item, a bad name or value,
            or an extension named twice.
    """
    try:
        text = field.decode("ascii")
    except UnicodeDecodeError:
        raise MalformedTextError("an extension list must be ASCII") from None
    if text.endswith(";"):
        text = text[:-1]
    if not text:
        return ()
    extensions = tuple(_parse_one(item) for item in text.split(";"))
    names = [extension.name for extension in extensions]
    if len(set(names)) != len(names):
        raise MalformedTextError(f"an extension is named twice in {text!r}")
    return extensions
