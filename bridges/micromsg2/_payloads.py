"""The payload of COMMAND and ERROR frames: ``name;key=value,key=value``.

The name and keys are FIELDs and the values are URL encoded
(:mod:`._text`). Our choices where the spec is silent: a payload without
arguments is just ``name`` (``name;`` is accepted too); a key may appear
once; arguments keep their order. Commands are ASCII on the wire: a payload
that is not is malformed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ._errors import MalformedTextError
from ._text import check_field, url_decode, url_encode

__all__ = ["NamedArguments"]


@dataclass(frozen=True, slots=True, kw_only=True)
class NamedArguments:
    """A command or error payload: a name and ordered, unique key/value arguments.

    Raises:
        MalformedTextError: at construction, for a name or key that is not a
            FIELD, or a key given twice.
    """

    name: str
    arguments: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        check_field(self.name, "command name")
        keys = [check_field(key, "argument name") for key, _ in self.arguments]
        if len(set(keys)) != len(keys):
            raise MalformedTextError(f"an argument of {self.name!r} is given twice")

    @classmethod
    def of(cls, name: str, arguments: Mapping[str, str] | None = None) -> NamedArguments:
        """Build from a name and a mapping (its order is kept)."""
        return cls(name=name, arguments=tuple((arguments or {}).items()))

    def get(self, key: str) -> str | None:
        """The value of argument ``key``, or None."""
        for name, value in self.arguments:
            if name == key:
                return value
        return None

    def encode(self) -> bytes:
        """The payload bytes."""
        if not self.arguments:
            return self.name.encode("ascii")
        arguments = ",".join(f"{key}={url_encode(value)}" for key, value in self.arguments)
        return f"{self.name};{arguments}".encode("ascii")

    @classmethod
    def decode(cls, payload: bytes) -> NamedArguments:
        """Parse a payload.

        Raises:
            MalformedTextError: it does not follow ``name;key=value,...``.
        """
        try:
            text = payload.decode("ascii")
        except UnicodeDecodeError:
            raise MalformedTextError("a command payload must be ASCII") from None
        name, separator, rest = text.partition(";")
        arguments: list[tuple[str, str]] = []
        if rest:
            for item in rest.split(","):
                key, equals, value = item.partition("=")
                if not equals:
                    raise MalformedTextError(f"argument {item!r} of {name!r} has no '='")
                arguments.append((key, url_decode(value)))
        return cls(name=name, arguments=tuple(arguments))
