"""``DeltaSink``: a stream written to a Delta table with typed columns (``stream.to(...)``).

A plain description (the DSL, the processors and the I/O layer all take it) and the pure
mapping of a record to a row: the key's column(s), the value's fields, and the columns
every row has (``META_COLUMNS``). ``lakestate.io.deltasink`` declares it in a warehouse
and appends each batch's rows with its tasks' txns.

A row's columns:

- the key: a scalar key in column ``key`` (``DeltaSink(key=...)`` names it; a dict key
  there is a struct), or, with ``key=("a", "b")``, a dict key's fields ``a``, ``b``;
- the value: a dict value's fields, each a column; any other value in column ``value``;
  a null value (a tombstone) leaves them null;
- ``_timestamp``: the record's timestamp (Delta ``timestamp``, UTC);
- ``_partition``, ``_offset``: the record's partition and offset in the sink read as a
  topic, numbered as a log table's (dense per partition, in append order). Exactly-once
  needs no column (a batch's append carries its tasks' Delta txns, so a replay writes
  nothing twice); these order a key's rows (the latest row per key is the highest
  ``_offset`` of its partition) and let the table be read back as a topic.
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import Any

import pyarrow as pa

from lakestate.warehouse import validate_name

TIMESTAMP = "_timestamp"
PARTITION = "_partition"
OFFSET = "_offset"
#: The columns of every row besides the key's and the value's.
META_COLUMNS = (TIMESTAMP, PARTITION, OFFSET)
META_SCHEMA = pa.schema(
    [
        pa.field(TIMESTAMP, pa.timestamp("us", "UTC")),
        pa.field(PARTITION, pa.int32()),
        pa.field(OFFSET, pa.int64()),
    ]
)
#: A non-dict value's column.
VALUE = "value"

#: Type names a ``schema`` mapping may use (or any ``pyarrow.DataType``).
TYPE_NAMES: dict[str, pa.DataType] = {
    "string": pa.string(),
    "str": pa.string(),
    "long": pa.int64(),
    "bigint": pa.int64(),
    "int64": pa.int64(),
    "int": pa.int32(),
    "integer": pa.int32(),
    "int32": pa.int32(),
    "double": pa.float64(),
    "float64": pa.float64(),
    "float": pa.float32(),
    "float32": pa.float32(),
    "bool": pa.bool_(),
    "boolean": pa.bool_(),
    "timestamp": pa.timestamp("us", "UTC"),
    "date": pa.date32(),
    "binary": pa.binary(),
}


@dataclass(frozen=True)
class DeltaSink:
    """A stream's records appended to the Delta table at ``table`` (a URI, or a local path,
    made absolute), as sink topic ``name`` (see the module's docstring for the columns).

    ``schema``: the key's and value's columns (a ``pyarrow.Schema`` or a mapping of column
    to type: a ``TYPE_NAMES`` name or a ``pyarrow.DataType``); a record whose key or value
    does not fit it (a field not in it, a value of another type, a null where the field is
    not nullable) fails in processing (``processing.exception.handler``). None: the
    columns are taken from the first batch, and a later value's new fields become new
    columns (Delta schema evolution). ``key``: the key's column, or the columns of a dict
    key's fields. ``partition_by``: Delta partition column(s) of the table.
    """

    name: str
    table: str
    schema: pa.Schema | Mapping[str, Any] | None = None
    key: str | tuple[str, ...] = "key"
    partition_by: str | tuple[str, ...] = ()

    def __post_init__(self) -> None:
        validate_name("topic", self.name)
        if not isinstance(self.table, str | os.PathLike) or not os.fspath(self.table):
            raise ValueError(f"DeltaSink {self.name!r}: table must be a path, got {self.table!r}")
        table = os.fspath(self.table)
        object.__setattr__(self, "table", table if "://" in table else os.path.abspath(table))
        keys = (self.key,) if isinstance(self.key, str) else tuple(self.key)
        if not keys or not all(isinstance(k, str) and k for k in keys):
            raise ValueError(
                f"DeltaSink {self.name!r}: key must be a column name or a tuple of a dict "
                f"key's fields, got {self.key!r}"
            )
        object.__setattr__(self, "key", keys[0] if isinstance(self.key, str) else keys)
        parts = (self.partition_by,) if isinstance(self.partition_by, str) else self.partition_by
        object.__setattr__(self, "partition_by", tuple(parts))
        if self.schema is not None:
            object.__setattr__(self, "schema", _schema(self.name, self.schema))
        clash = [c for c in self.key_columns if c in META_COLUMNS]
        if clash:
            raise ValueError(f"DeltaSink {self.name!r}: {clash[0]!r} is a column of every row")
        if self.schema is not None:
            names = set(self.schema.names)
            missing = [c for c in (*self.key_columns, *self.partition_by) if c not in names]
            if missing:
                raise ValueError(
                    f"DeltaSink {self.name!r}: the schema has no column {missing[0]!r} (the "
                    f"key's or a partition column); its columns: {', '.join(sorted(names))}"
                )

    @property
    def key_columns(self) -> tuple[str, ...]:
        return (self.key,) if isinstance(self.key, str) else tuple(self.key)

    @property
    def key_fields(self) -> bool:
        """Whether a dict key's fields are columns (``key`` is a tuple)."""
        return not isinstance(self.key, str)

    def row(self, key: Any, value: Any) -> dict[str, Any]:
        """The key's and value's columns of a record (``ValueError`` naming what does not
        fit: a key without the key fields, a value field named like a row's column or with
        another value than the key's field of that name)."""
        row: dict[str, Any] = {}
        if self.key_fields and key is None:
            row.update(dict.fromkeys(self.key_columns))
        elif self.key_fields:
            if not isinstance(key, dict) or any(f not in key for f in self.key_columns):
                raise ValueError(
                    f"DeltaSink {self.name!r}: the key {key!r} is not a dict with the fields "
                    f"{list(self.key_columns)} (DeltaSink key=); select such a key first"
                )
            extra = [f for f in key if f not in self.key_columns]
            if extra:
                raise ValueError(
                    f"DeltaSink {self.name!r}: the key {key!r} has a field {extra[0]!r} "
                    f"not among the key's columns {list(self.key_columns)}; add it to key="
                )
            row.update(key)
        else:
            row[self.key] = key
        fields = value if isinstance(value, dict) else {} if value is None else {VALUE: value}
        for name, v in fields.items():
            if not isinstance(name, str) or name in META_COLUMNS:
                raise ValueError(
                    f"DeltaSink {self.name!r}: the value for key {key!r} has a field "
                    f"{name!r}, a column every row has ({', '.join(META_COLUMNS)}); "
                    "rename the field (map_values) before the sink"
                )
            if name in row and (not self.key_fields or row[name] != v):
                raise ValueError(
                    f"DeltaSink {self.name!r}: the value for key {key!r} has a field "
                    f"{name!r} that is also the key's column, with another value {v!r}; "
                    "rename the field (map_values) or the key's column (DeltaSink key=)"
                )
            row[name] = v
        return row

    def check(self, key: Any, value: Any) -> None:
        """``ValueError`` naming the sink, the key, the field and what to do when the
        record does not fit the declared schema (or ``row`` refuses it)."""
        row = self.row(key, value)
        if self.schema is None:
            return
        names, declared = self._declared
        for name in row:
            if name not in names:
                raise ValueError(
                    f"DeltaSink {self.name!r}: the value for key {key!r} has a field "
                    f"{name!r} that the declared schema does not have; add it to "
                    "DeltaSink(schema=...) or drop it (map_values) before the sink"
                )
        for name, type_, nullable in declared:
            v = row.get(name)
            problem = (
                "is null, but the field is not nullable"
                if v is None and not nullable
                else fit_problem(v, type_)
            )
            if problem:
                raise ValueError(
                    f"DeltaSink {self.name!r}: field {name!r} of the record with key "
                    f"{key!r} {problem} (the declared schema: {type_}); fix the value "
                    "before the sink (map_values), or declare the field's type to fit"
                )

    @functools.cached_property
    def _declared(self) -> tuple[frozenset[str], tuple[tuple[str, pa.DataType, bool], ...]]:
        # Read once: pyarrow builds a new Field object at each iteration of a schema.
        assert self.schema is not None
        fields = tuple((f.name, f.type, f.nullable) for f in self.schema)
        return frozenset(self.schema.names), fields


def fit_problem(value: Any, type_: pa.DataType) -> str | None:
    """Why ``value`` (as the JSON form gives it) is not of ``type_``, or None."""
    if _plainly_fits(value, type_):
        return None
    return kind_problem(value, type_) or conversion_problem(value, type_)


def _plainly_fits(value: Any, type_: pa.DataType) -> bool:
    """Whether ``value`` fits ``type_`` without asking Arrow (a conversion of one value
    costs ~10 µs, and a typed sink checks every record): text as a string, an int within
    an integer type's range, a finite float as a double, a bool as a bool. False: ask."""
    kind = type(value)
    if kind is str:
        return type_ == pa.string() or type_ == pa.large_string()
    if kind is int:
        if not pa.types.is_integer(type_):
            return False
        bits = type_.bit_width - (1 if pa.types.is_signed_integer(type_) else 0)
        low = -(1 << bits) if pa.types.is_signed_integer(type_) else 0
        return low <= value < (1 << bits)
    if kind is float:
        return type_ == pa.float64() and math.isfinite(value)
    if kind is bool:
        return type_ == pa.bool_()
    return False


def kind_problem(value: Any, type_: pa.DataType) -> str | None:
    """Why ``value``'s Python type is not one ``type_`` takes (JSON's forms: a whole
    float as an integer, no bool as a number, a non-finite float only as a float), or None.
    Arrow's conversion would accept some of these silently, so they are checked first."""
    if value is None:
        return None
    if pa.types.is_integer(type_):
        ok = isinstance(value, int) or (isinstance(value, float) and value.is_integer())
        ok = ok and not isinstance(value, bool)
    elif pa.types.is_floating(type_):
        ok = isinstance(value, int | float) and not isinstance(value, bool)
    elif pa.types.is_boolean(type_):
        ok = isinstance(value, bool)
    elif pa.types.is_string(type_) or pa.types.is_large_string(type_):
        ok = isinstance(value, str)
    else:
        ok = True  # timestamps, dates, structs, lists: as ``column`` converts them
    if ok and isinstance(value, float) and not math.isfinite(value):
        ok = pa.types.is_floating(type_)
    return None if ok else f"is {value!r} ({type(value).__name__}), not {type_}"


def conversion_problem(value: Any, type_: pa.DataType) -> str | None:
    """Why ``column`` cannot convert ``value`` to ``type_`` (out of range, a bad
    timestamp text, a struct's field), or None."""
    if value is None:
        return None
    try:
        column([value], type_)
    except (ValueError, TypeError, OverflowError, pa.ArrowException) as exc:
        return f"is {value!r}, which is not {type_}: {exc}"
    return None


def column(values: list[Any], type_: pa.DataType) -> pa.Array:
    """``values`` (as the JSON form gives them) as an Arrow array of ``type_``: a timestamp
    from ISO-8601 text or epoch milliseconds, a date from ISO text."""
    if pa.types.is_timestamp(type_):
        values = [_datetime(v) for v in values]
    elif pa.types.is_date(type_):
        values = [date.fromisoformat(v) if isinstance(v, str) else v for v in values]
    return pa.array(values, type_)


def _datetime(v: Any) -> Any:
    if isinstance(v, str):
        found = datetime.fromisoformat(v)
        return found if found.tzinfo else found.replace(tzinfo=UTC)
    if isinstance(v, int) and not isinstance(v, bool):
        return datetime.fromtimestamp(v / 1000, UTC)
    return v


def _schema(name: str, given: Any) -> pa.Schema:
    if isinstance(given, pa.Schema):
        return given
    if not isinstance(given, Mapping) or not given:
        raise ValueError(
            f"DeltaSink {name!r}: schema must be a pyarrow.Schema or a mapping of column to "
            f"type, got {given!r}"
        )
    fields = []
    for column_name, t in given.items():
        found = t if isinstance(t, pa.DataType) else TYPE_NAMES.get(str(t).lower())
        if found is None:
            raise ValueError(
                f"DeltaSink {name!r}: column {column_name!r} has type {t!r}; use a "
                f"pyarrow.DataType or one of {', '.join(TYPE_NAMES)}"
            )
        fields.append(pa.field(column_name, found))
    return pa.schema(fields)


__all__ = [
    "META_COLUMNS",
    "META_SCHEMA",
    "TYPE_NAMES",
    "DeltaSink",
    "column",
    "conversion_problem",
    "fit_problem",
    "kind_problem",
]
