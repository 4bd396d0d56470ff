"""Bond's binary encodings in pure Python: Compact Binary v1 and v2, Fast Binary v1.

Sans-I/O and usable on their own (no rstreams, no Epoxy). Three ways in:

* with a schema: declare structs as :class:`Struct` subclasses with
  :func:`field`, then :func:`serialize` / :func:`deserialize` (no header) or
  :func:`marshal` / :func:`unmarshal` (with Bond's 4-byte protocol header);
* without a schema: :func:`read_tree` / :func:`unmarshal_tree` give a
  :class:`StructValue` tree, :func:`to_json` its JSON form (field ids as
  keys, the base struct under ``"base"``), :func:`write_tree` writes one back;
* :func:`transcode` between protocols.

Decoding never allocates more than the input justifies and fails only with
:class:`BondDecodeError` and its subclasses (:class:`BondLimitError`,
:class:`BondRequiredFieldError`); see :class:`BondLimits`.
"""

from ._api import (
    MARSHAL_STEP_ITEMS,
    deserialize,
    deserialize_from,
    marshal,
    marshal_header,
    marshal_steps,
    marshal_tree,
    read_marshal_header,
    read_tree,
    serialize,
    transcode,
    unmarshal,
    unmarshal_tree,
    write_tree,
)
from ._errors import (
    DEFAULT_LIMITS,
    BondDecodeError,
    BondEncodeError,
    BondError,
    BondLimitError,
    BondLimits,
    BondRequiredFieldError,
)
from ._schema import NOTHING, Bonded, FieldInfo, Modifier, Struct, field
from ._tree import FieldValue, ListValue, MapValue, StructValue, TreeValue, to_json
from ._types import (
    BLOB,
    BOOL,
    DOUBLE,
    FLOAT,
    INT8,
    INT16,
    INT32,
    INT64,
    STRING,
    UINT8,
    UINT16,
    UINT32,
    UINT64,
    WSTRING,
    BondDataType,
    BondType,
    Protocol,
    bonded,
    enum,
    list_of,
    map_of,
    nullable,
    set_of,
    struct,
    vector_of,
)

__all__ = [
    # protocols and wire types
    "Protocol",
    "BondDataType",
    # schema
    "Struct",
    "field",
    "Modifier",
    "NOTHING",
    "FieldInfo",
    "Bonded",
    "BondType",
    "BOOL",
    "INT8",
    "INT16",
    "INT32",
    "INT64",
    "UINT8",
    "UINT16",
    "UINT32",
    "UINT64",
    "FLOAT",
    "DOUBLE",
    "STRING",
    "WSTRING",
    "BLOB",
    "list_of",
    "vector_of",
    "set_of",
    "map_of",
    "nullable",
    "bonded",
    "enum",
    "struct",
    # with a schema
    "serialize",
    "deserialize",
    "deserialize_from",
    "marshal",
    "marshal_steps",
    "MARSHAL_STEP_ITEMS",
    "unmarshal",
    "marshal_header",
    "read_marshal_header",
    # without a schema
    "StructValue",
    "FieldValue",
    "ListValue",
    "MapValue",
    "TreeValue",
    "read_tree",
    "unmarshal_tree",
    "write_tree",
    "marshal_tree",
    "transcode",
    "to_json",
    # errors and limits
    "BondError",
    "BondDecodeError",
    "BondLimitError",
    "BondRequiredFieldError",
    "BondEncodeError",
    "BondLimits",
    "DEFAULT_LIMITS",
]
