"""Elements to Spark rows and back, and the options that say how.

Kept free of pyspark imports at module level (only types are named), so that
the decoding rules can be tested without a JVM.
"""

from __future__ import annotations

import datetime
import decimal
import json
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import msgpack

__all__ = [
    "SourceOptions",
    "SinkOptions",
    "BadElement",
    "RAW_SCHEMA",
    "TOPIC_RAW_SCHEMA",
    "row_decoder",
    "encode_rows",
]

#: The schema without ``.schema(...)`` and without a ``format`` option.
RAW_SCHEMA = "value BINARY, offset LONG"
#: The same, reading a partitioned topic (``topic`` option): offsets count
#: within a partition, so the partition is a column too.
TOPIC_RAW_SCHEMA = "value BINARY, partition INT, offset LONG"

FORMATS = ("raw", "msgpack", "json")


class BadElement(ValueError):
    """An element that the chosen format cannot decode (``badElements=fail``)."""


def _option(options: Mapping[str, str], key: str, default: str | None = None) -> str | None:
    # Spark hands Python sources a case-insensitive dict; a plain dict (tests,
    # helpers) gets the same treatment here.
    for name, value in options.items():
        if name.lower() == key.lower():
            return str(value)
    return default


def _int_option(options: Mapping[str, str], key: str, default: int, minimum: int) -> int:
    raw = _option(options, key)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"option {key}={raw!r} is not an integer") from None
    if value < minimum:
        raise ValueError(f"option {key}={value} is below {minimum}")
    return value


def _float_option(options: Mapping[str, str], key: str, default: float) -> float:
    raw = _option(options, key)
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"option {key}={raw!r} is not a number") from None
    if not value >= 0:
        raise ValueError(f"option {key}={raw!r} must be >= 0")
    return value


def _bool_option(options: Mapping[str, str], key: str, default: bool) -> bool:
    raw = _option(options, key)
    if raw is None:
        return default
    if raw.lower() in ("true", "1", "yes"):
        return True
    if raw.lower() in ("false", "0", "no"):
        return False
    raise ValueError(f"option {key}={raw!r}: use true or false")


@dataclass(frozen=True, slots=True)
class SourceOptions:
    """The source's options (``docs/spark.md`` lists them with their defaults)."""

    url: str
    publisher: str  # "" when reading a topic
    format: str = "raw"
    max_rows_per_batch: int = 1000
    buffer_rows: int = 2000
    replay: bool = False
    starting_offset: int = 0
    poll_timeout: float = 0.5
    quiet_period: float = 2.0
    available_now_timeout: float = 60.0
    replay_timeout: float = 30.0
    bad_elements: str = "fail"
    num_partitions: int = 1
    topic: str | None = None
    starting_offsets: str = "earliest"

    @property
    def raw_schema(self) -> str:
        """The schema of ``format=raw`` in this mode."""
        return TOPIC_RAW_SCHEMA if self.topic is not None else RAW_SCHEMA

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SourceOptions:
        url = _option(options, "url")
        publisher = _option(options, "publisher")
        topic = _option(options, "topic")
        if not url or bool(publisher) == bool(topic):
            raise ValueError(
                'the rstreams source needs .option("url", "tcp://HOST:PORT") and either .option("publisher", NAME) '
                'or, for a partitioned topic read by the executors in parallel, .option("topic", NAME)'
            )
        starting = (_option(options, "startingOffsets", "earliest") or "earliest").lower()
        if starting not in ("earliest", "latest"):
            raise ValueError(f"option startingOffsets={starting!r}: use earliest or latest")
        format = (_option(options, "format", "raw") or "raw").lower()
        if format not in FORMATS:
            raise ValueError(f"option format={format!r}: use one of {', '.join(FORMATS)}")
        max_rows = _int_option(options, "maxRowsPerBatch", 1000, 1)
        buffer_rows = _int_option(options, "bufferRows", 2 * max_rows, 1)
        if buffer_rows < 2 * max_rows:
            # Spark commits a batch only after planning the next one, so the
            # buffer must hold the uncommitted batch and a whole new one.
            raise ValueError(f"option bufferRows={buffer_rows} must be at least 2 x maxRowsPerBatch={max_rows}")
        bad = (_option(options, "badElements", "fail") or "fail").lower()
        if bad not in ("fail", "skip"):
            raise ValueError(f"option badElements={bad!r}: use fail or skip")
        return cls(
            url=url,
            publisher=publisher or "",
            topic=topic or None,
            starting_offsets=starting,
            format=format,
            max_rows_per_batch=max_rows,
            buffer_rows=buffer_rows,
            replay=_bool_option(options, "replay", False),
            starting_offset=_int_option(options, "startingOffset", 0, 0),
            poll_timeout=_float_option(options, "pollTimeout", 0.5),
            quiet_period=_float_option(options, "quietPeriod", 2.0),
            available_now_timeout=_float_option(options, "availableNowTimeout", 60.0),
            replay_timeout=_float_option(options, "replayTimeout", 30.0),
            bad_elements=bad,
            num_partitions=_int_option(options, "numPartitions", 1, 1),
        )


@dataclass(frozen=True, slots=True)
class SinkOptions:
    """The sink's options."""

    url: str
    topic: str
    format: str = "json"
    tag_rows: bool = True
    idempotent: bool = True

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SinkOptions:
        url = _option(options, "url")
        topic = _option(options, "topic")
        if not url or not topic:
            raise ValueError('the rstreams sink needs .option("url", "tcp://HOST:PORT") and .option("topic", NAME)')
        format = (_option(options, "format", "json") or "json").lower()
        if format not in ("json", "msgpack"):
            raise ValueError(f"sink option format={format!r}: use json or msgpack")
        return cls(
            url=url,
            topic=topic,
            format=format,
            tag_rows=_bool_option(options, "tagRows", True),
            idempotent=_bool_option(options, "idempotent", True),
        )


# ---- decoding (source) ------------------------------------------------------


def _decode_function(format: str) -> Callable[[bytes], Any]:
    if format == "msgpack":
        return lambda data: msgpack.unpackb(data, raw=False)
    if format == "json":
        return json.loads
    return lambda data: data


def _to_timestamp(value: Any) -> Any:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return datetime.datetime.fromtimestamp(value, tz=datetime.timezone.utc)
    if isinstance(value, str):
        return datetime.datetime.fromisoformat(value)
    return value


def row_decoder(format: str, fields: list[tuple[str, str]], bad_elements: str) -> Callable[[bytes, int], tuple[Any, ...] | None]:
    """A function from (element, offset) to a row tuple, or None to skip it.

    Args:
        format: "raw" gives ``(value, offset)``; "msgpack" / "json" decode a
            map (fields by name) or an array (fields by position).
        fields: ``(name, type name)`` of the schema, in order; a field
            named ``offset`` that the element does not carry gets the offset.
        bad_elements: "fail" raises :class:`BadElement`; "skip" returns None.
    """
    if format == "raw":
        return lambda element, offset: (bytes(element), offset)
    decode = _decode_function(format)
    names = [name for name, _ in fields]
    timestamp_positions = [i for i, (_, type_name) in enumerate(fields) if type_name == "timestamp"]
    float_positions = [i for i, (_, type_name) in enumerate(fields) if type_name in ("double", "float")]

    def convert(element: bytes, offset: int) -> tuple[Any, ...] | None:
        try:
            value = decode(element)
            if isinstance(value, dict):
                row = [value.get(name, offset if name == "offset" else None) for name in names]
            elif isinstance(value, list):
                if len(value) > len(names):
                    raise ValueError(f"an array of {len(value)} items for {len(names)} columns")
                row = list(value) + [offset if name == "offset" else None for name in names[len(value) :]]
            elif len(names) == 1:
                row = [value]
            else:
                raise ValueError(f"a {type(value).__name__}, not a map or an array")
            for i in timestamp_positions:
                row[i] = _to_timestamp(row[i])
            for i in float_positions:
                number = row[i]
                if isinstance(number, int) and not isinstance(number, bool):
                    row[i] = float(number)
        except (ValueError, TypeError, msgpack.UnpackException, msgpack.ExtraData) as error:
            if bad_elements == "skip":
                return None
            raise BadElement(f"element at offset {offset} is not a valid {format} row: {error}") from None
        return tuple(row)

    return convert


# ---- encoding (sink) ----------------------------------------------------------


def _plain(value: Any, for_json: bool) -> Any:
    if isinstance(value, datetime.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=datetime.timezone.utc)
        return value.timestamp()
    if isinstance(value, datetime.date):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return float(value)
    if isinstance(value, (bytes, bytearray)) and for_json:
        return bytes(value).hex()
    if isinstance(value, dict):
        return {str(k): _plain(v, for_json) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v, for_json) for v in value]
    return value


def encode_rows(
    rows: Iterable[Mapping[str, Any]], *, format: str, tag: tuple[int, int] | None
) -> Iterator[bytes]:
    """Encode row dicts as elements; with ``tag=(batch, partition)`` add
    ``_batch``, ``_partition`` and ``_row`` so consumers can drop duplicates."""
    for_json = format == "json"
    for index, row in enumerate(rows):
        value = {str(key): _plain(item, for_json) for key, item in row.items()}
        if tag is not None:
            value["_batch"], value["_partition"], value["_row"] = tag[0], tag[1], index
        if for_json:
            yield json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()
        else:
            yield msgpack.packb(value, use_bin_type=True)
