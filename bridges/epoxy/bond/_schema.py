"""Declaring Bond structs in Python: :class:`Struct`, :func:`field`, :class:`Bonded`.

A struct is a subclass of :class:`Struct` whose annotated attributes are
declared with :func:`field` (Bond's generated code writes the fields of each
level in increasing id order, whatever their order in the ``.bond`` file;
so does this package)::

    class Params(bond.Struct):
        x: int = bond.field(1, bond.INT32)
        y: int = bond.field(2, bond.INT32)
        operation: Operation = bond.field(3, Operation, default=Operation.Add)

Each subclass becomes a keyword-only dataclass (``__init__``, ``__eq__``,
``__repr__``); every field has a default, so ``Params()`` is the all-default
struct, as in Bond. Inheritance is Python inheritance: the nearest base class
that is a :class:`Struct` is the Bond base struct, and its fields are
written first, ended by ``BT_STOP_BASE``.

Defaults
--------
A field without ``default`` gets its type's implicit default (0, ``""``,
empty container, ``None`` for nullable, an all-default struct).
``default=NOTHING`` is Bond's ``= nothing``: the attribute is ``None`` until
set, and then it is always written. Optional fields equal to their default
are omitted on write and restored on read (``omit_default.h`` in Bond: for
containers the default is empty; structs have no default and are always
written). ``required`` fields are always written and must be present on read.

Static typing: attributes are typed by their annotations. The constructor is
seen by mypy as ``__init__(**fields: Any)``: field names are checked at run
time (``TypeError``), not statically, because a custom field specifier that
takes positional ``(id, type)`` cannot be described with
``dataclass_transform`` (mypy requires field specifiers to be keyword-only).
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

from ._errors import DEFAULT_LIMITS, BondEncodeError, BondLimits
from ._types import (
    BLOB_KIND,
    ENUM,
    LIST,
    MAP,
    NULLABLE,
    SCALAR,
    SET,
    BondType,
    EnumType,
    Protocol,
    ScalarType,
    TypeLike,
    as_type,
)

__all__ = ["Struct", "field", "Modifier", "NOTHING", "FieldInfo", "Level", "Bonded"]


class Modifier(enum.Enum):
    """Bond's field modifiers."""

    OPTIONAL = "optional"
    REQUIRED = "required"
    REQUIRED_OPTIONAL = "required_optional"  # always written, not required on read


class _Nothing:
    __slots__ = ()

    def __repr__(self) -> str:
        return "NOTHING"


#: Bond's ``= nothing`` default: the field is ``None`` and omitted until set.
NOTHING: Any = _Nothing()
_UNSET: Any = object()

# How the writer decides that an optional field holds its default: never;
# equal to it; empty (a container or blob); nothing (a ``bond.NOTHING``
# default, or a nullable's null: a nullable holding 0 or "" is not null).
OMIT_NEVER, OMIT_EQUAL, OMIT_EMPTY, OMIT_NOTHING, OMIT_NULL = range(5)


@dataclass(frozen=True, slots=True)
class FieldInfo:
    """One field of a struct, as the codecs see it.

    Attributes:
        id: the 16-bit field id.
        name: the Python attribute name.
        type: the field's Bond type.
        modifier: optional, required or required_optional.
        default: the default value (``None`` for ``= nothing``).
        factory: makes the default, for mutable defaults (else None).
        omit: how the writer recognizes the default (``OMIT_*``).
    """

    id: int
    name: str
    type: BondType
    modifier: Modifier
    default: Any
    factory: Callable[[], Any] | None
    omit: int

    @property
    def required(self) -> bool:
        return self.modifier is Modifier.REQUIRED

    def default_value(self) -> Any:
        """A fresh default value."""
        return self.factory() if self.factory is not None else self.default


@dataclass(frozen=True, slots=True)
class Level:
    """One level of a struct hierarchy: the fields one class declares itself, by increasing id."""

    struct_class: type[Struct]
    fields: tuple[FieldInfo, ...]
    by_id: dict[int, FieldInfo]
    required: tuple[FieldInfo, ...]


class _FieldSpec:
    __slots__ = ("id", "type", "default", "modifier")

    def __init__(self, field_id: int, field_type: BondType, default: Any, modifier: Modifier) -> None:
        self.id = field_id
        self.type = field_type
        self.default = default
        self.modifier = modifier


def field(
    id: int,  # noqa: A002 - Bond's own word
    type: TypeLike,  # noqa: A002
    *,
    default: Any = _UNSET,
    modifier: Modifier = Modifier.OPTIONAL,
) -> Any:
    """Declare a struct field (used as the value of an annotated class attribute).

    Args:
        id: the field id, 0 to 65535, unique within the class.
        type: a Bond type (``bond.INT32``, ``bond.list_of(bond.STRING)``, a
            Struct class, an IntEnum class...).
        default: the default value of a scalar, string or enum field, or
            :data:`NOTHING`. Containers and structs cannot have other defaults.
        modifier: :class:`Modifier`; default optional.

    Returns:
        A placeholder that the :class:`Struct` subclass turns into a dataclass field.
    """
    if not isinstance(id, int) or not 0 <= id <= 0xFFFF:
        raise TypeError(f"field id must be an int in [0, 65535], got {id!r}")
    if not isinstance(modifier, Modifier):
        raise TypeError(f"modifier must be a Modifier, got {modifier!r}")
    return _FieldSpec(id, as_type(type), default, modifier)


def _field_info(owner: str, name: str, spec: _FieldSpec) -> FieldInfo:
    field_type = spec.type
    kind = field_type.kind
    if spec.default is NOTHING:
        return FieldInfo(spec.id, name, field_type, spec.modifier, None, None, OMIT_NOTHING)
    if spec.default is _UNSET:
        default = field_type.implicit_default() if kind in (SCALAR, ENUM, BLOB_KIND, NULLABLE) else None
        if kind in (SCALAR, ENUM):
            return FieldInfo(spec.id, name, field_type, spec.modifier, default, None, OMIT_EQUAL)
        if kind == BLOB_KIND:
            return FieldInfo(spec.id, name, field_type, spec.modifier, default, None, OMIT_EMPTY)
        if kind == NULLABLE:
            return FieldInfo(spec.id, name, field_type, spec.modifier, default, None, OMIT_NULL)
        omit = OMIT_EMPTY if kind in (LIST, SET, MAP) else OMIT_NEVER
        return FieldInfo(spec.id, name, field_type, spec.modifier, None, field_type.implicit_default, omit)
    if kind not in (SCALAR, ENUM):
        raise TypeError(f"{owner}.{name}: a {field_type.name} field can only default to empty or NOTHING")
    default = spec.default
    if isinstance(field_type, EnumType) and isinstance(default, int):
        default = field_type.members.get(int(default), default)
    _check_default(owner, name, field_type, default)
    if field_type.name in ("float", "double"):
        default = float(default)  # type: ignore[arg-type]  # ``= 18`` in the IDL reads back as 18.0
    return FieldInfo(spec.id, name, field_type, spec.modifier, default, None, OMIT_EQUAL)


def _check_default(owner: str, name: str, field_type: BondType, default: object) -> None:
    if isinstance(field_type, ScalarType):
        expected: Any = {
            "bool": bool,
            "float": (int, float),
            "double": (int, float),
            "string": str,
            "wstring": str,
        }.get(field_type.name, int)
    else:
        expected = int
    if not isinstance(default, expected):
        raise TypeError(f"{owner}.{name}: default {default!r} does not fit {field_type.name}")


class Struct:
    """Base class of Bond structs declared in Python (see the module docstring).

    Class attributes set on each subclass:
        __bond_fields__: the fields the class declares itself, in order.
        __bond_base__: the Bond base struct class, or None.
        __bond_levels__: the hierarchy, base-most first, as :class:`Level`.
    """

    __bond_fields__: ClassVar[tuple[FieldInfo, ...]] = ()
    __bond_base__: ClassVar[type[Struct] | None] = None
    __bond_levels__: ClassVar[tuple[Level, ...]] = ()

    if TYPE_CHECKING:

        def __init__(self, **fields: Any) -> None: ...

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        owner = cls.__name__
        base: type[Struct] | None = None
        for klass in cls.__mro__[1:]:
            if klass is Struct:
                break
            if issubclass(klass, Struct):
                base = klass
                break
        inherited = {info.name for level in (base.__bond_levels__ if base else ()) for info in level.fields}
        infos: list[FieldInfo] = []
        for name, annotation in cls.__dict__.get("__annotations__", {}).items():
            if isinstance(annotation, str) and annotation.replace("typing.", "").startswith("ClassVar"):
                continue
            spec = cls.__dict__.get(name)
            if not isinstance(spec, _FieldSpec):
                raise TypeError(f"{owner}.{name} must be declared with bond.field(id, type)")
            if name in inherited:
                raise TypeError(f"{owner}.{name} hides a field of its base struct")
            info = _field_info(owner, name, spec)
            infos.append(info)
            if info.factory is not None:
                setattr(cls, name, dataclasses.field(default_factory=info.factory))
            else:
                setattr(cls, name, info.default)
        ids = [info.id for info in infos]
        if len(set(ids)) != len(ids):
            raise TypeError(f"{owner} declares a field id twice: {sorted(ids)}")
        cls.__bond_fields__ = tuple(infos)
        cls.__bond_base__ = base
        level = Level(
            struct_class=cls,
            fields=tuple(sorted(infos, key=lambda info: info.id)),
            by_id={info.id: info for info in infos},
            required=tuple(info for info in infos if info.required),
        )
        cls.__bond_levels__ = (base.__bond_levels__ if base else ()) + (level,)
        dataclasses.dataclass(cls, kw_only=True, eq=True, repr=True)


S = TypeVar("S", bound=Struct)


class Bonded(Generic[S]):
    """A ``bonded<T>`` value: a struct kept serialized until someone needs it.

    Bond's ``bonded<T>`` lets a message carry a struct without decoding it,
    possibly of a class derived from ``T`` (``nullable<bonded<Error>>`` may
    hold an ``InternalServerError``). A Bonded made by a decoder holds the
    struct's bytes and the protocol they are in: writing it back in the same
    protocol copies those bytes unchanged (unknown and derived fields
    included); writing it in another protocol transcodes them field by field
    (as Bond does, nothing is omitted or reordered). A Bonded made from a
    value (``Bonded(error)``) serializes that value.

    Two Bondeds are equal when their bytes are identical in the same
    protocol, or else when they decode to equal values of the declared type.
    """

    __slots__ = ("_value", "_data", "_protocol", "_struct_class", "_limits")

    def __init__(self, value: S) -> None:
        if not isinstance(value, Struct):
            raise TypeError(f"Bonded wraps a Struct instance, not {type(value).__name__}")
        self._value: S | None = value
        self._data: bytes | None = None
        self._protocol: Protocol | None = None
        self._struct_class: type[S] = type(value)
        self._limits = DEFAULT_LIMITS

    @classmethod
    def from_data(
        cls, struct_class: type[S], data: bytes, protocol: Protocol, *, limits: BondLimits = DEFAULT_LIMITS
    ) -> Bonded[S]:
        """A Bonded over ``data``: one struct serialized (not marshalled) in ``protocol``."""
        self: Bonded[S] = cls.__new__(cls)
        self._value = None
        self._data = bytes(data)
        self._protocol = protocol
        self._struct_class = struct_class
        self._limits = limits
        return self

    @property
    def data(self) -> bytes | None:
        """The serialized struct, or None when made from a value."""
        return self._data

    @property
    def protocol(self) -> Protocol | None:
        """The protocol of :attr:`data`, or None when made from a value."""
        return self._protocol

    @property
    def struct_class(self) -> type[S]:
        """The declared struct class (for a value: its class)."""
        return self._struct_class

    @property
    def value(self) -> S:
        """The struct, decoded with the declared class (once, then cached).

        Raises:
            BondDecodeError: the bytes do not decode.
        """
        if self._value is None:
            self._value = self.deserialize(self._struct_class)
        return self._value

    def deserialize(self, struct_class: type[S]) -> S:
        """Decode as ``struct_class`` (the declared class, or one derived from it).

        Raises:
            BondDecodeError: the bytes do not decode as ``struct_class``.
        """
        if self._data is None:
            assert self._value is not None
            if isinstance(self._value, struct_class):
                return self._value
            from ._api import deserialize, serialize

            return deserialize(struct_class, serialize(self._value, Protocol.COMPACT_V1), Protocol.COMPACT_V1)
        from ._api import deserialize

        assert self._protocol is not None
        return deserialize(struct_class, self._data, self._protocol, limits=self._limits)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Bonded):
            return NotImplemented
        if self._data is not None and self._data == other._data and self._protocol is other._protocol:
            return True
        return bool(self.value == other.value)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        if self._data is None:
            return f"Bonded({self._value!r})"
        assert self._protocol is not None
        return f"Bonded.from_data({self._struct_class.__name__}, <{len(self._data)} bytes>, {self._protocol.value!r})"


def check_struct_value(value: object, struct_class: type) -> None:
    """Raise BondEncodeError unless ``value`` is an instance of ``struct_class``."""
    if not isinstance(value, struct_class):
        raise BondEncodeError(f"expected a {struct_class.__name__}, got {type(value).__name__}")
