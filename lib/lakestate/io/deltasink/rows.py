"""A batch's records (``RECORD_SCHEMA``: JSON key and value texts) as a Delta sink's typed
rows, and back: the columns of ``lakestate.delta_sink``."""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from datetime import date, datetime
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from lakestate.delta_sink import (
    META_COLUMNS,
    META_SCHEMA,
    OFFSET,
    PARTITION,
    TIMESTAMP,
    VALUE,
    DeltaSink,
    column,
    conversion_problem,
    kind_problem,
)
from lakestate.errors import StreamsException
from lakestate.io.deltasink import columnar
from lakestate.io.topic_records import RECORD_SCHEMA


def typed(sink: DeltaSink, records: pa.Table, existing: pa.Schema | None) -> pa.Table:
    """``records`` as the sink's rows: the key's and value's columns typed as the declared
    schema, else as the table's (``existing``) columns, else as Arrow infers them from the
    batch (a column whose values are all null waits for a batch with a value), then the
    meta columns. ``StreamsException`` naming the sink, the key, the field and what to do
    for a value that does not fit its column's type. A batch of scalar keys and values
    is converted on its columns (``columnar``), with the same result."""
    known = _known_types(sink, existing)
    found = columnar.typed_columns(sink, records, known)
    if found is None:
        return typed_by_rows(sink, records, existing)
    return _with_meta(records, *found)


def typed_by_rows(sink: DeltaSink, records: pa.Table, existing: pa.Schema | None) -> pa.Table:
    """``typed``, each record's key and value parsed and checked in Python."""
    keys = [_loads(k) for k in records.column("key").to_pylist()]
    values = [_loads(v) for v in records.column("value").to_pylist()]
    rows = []
    for k, v in zip(keys, values, strict=True):
        try:
            rows.append(sink.row(k, v))
        except ValueError as exc:
            raise StreamsException(str(exc)) from None
    known = _known_types(sink, existing)
    names = list(known)
    for row in rows:
        names.extend(n for n in row if n not in known and n not in names)
    arrays, fields = [], []
    for name in names:
        got = [row.get(name) for row in rows]
        type_ = known.get(name)
        if type_ is None:
            type_ = _inferred(sink, name, got)
            if type_ is None:
                continue
        arrays.append(_column(sink, name, got, type_, keys))
        fields.append(pa.field(name, type_))
    return _with_meta(records, arrays, fields)


def _with_meta(records: pa.Table, arrays: list[pa.Array], fields: list[pa.Field]) -> pa.Table:
    millis = records.column("timestamp").cast(pa.int64())
    arrays = arrays + [
        millis.cast(pa.timestamp("ms", "UTC")).cast(META_SCHEMA.field(TIMESTAMP).type),
        records.column("partition").cast(pa.int32()),
        records.column("offset").cast(pa.int64()),
    ]
    return pa.Table.from_arrays(arrays, schema=pa.schema([*fields, *META_SCHEMA]))


def batch_schema(
    sink: DeltaSink, schemas: Sequence[pa.Schema], existing: pa.Schema | None
) -> pa.Schema:
    """The columns a batch typed in pieces (each task's rows by ``typed`` where they are)
    leaves the table with: ``existing``'s, then each new column in the order the pieces
    (in task order) first have it, typed as Arrow would type the batch's values together
    (an int64 piece and a double piece: double), then the meta columns.
    ``StreamsException`` when the pieces' types do not unify (a string and a number), as
    ``typed`` fails such a batch."""
    known = _known_types(sink, existing)
    found: dict[str, list[pa.DataType]] = {}
    for schema in schemas:
        for f in schema:
            if f.name not in META_COLUMNS and f.name not in known:
                found.setdefault(f.name, []).append(f.type)
    fields = [pa.field(n, t) for n, t in known.items()]
    for name, types in found.items():
        try:
            unified = pa.unify_schemas(
                [pa.schema([pa.field(name, t)]) for t in types], promote_options="permissive"
            )
        except (pa.ArrowException, TypeError, ValueError) as exc:
            kinds = sorted({str(t) for t in types})
            raise StreamsException(
                f"DeltaSink {sink.name!r}: field {name!r} has values of different types in "
                f"one batch ({', '.join(kinds)}: {exc}); give the field one type before the "
                "sink, or declare it (DeltaSink(schema=...))"
            ) from None
        fields.append(unified.field(name))
    return pa.schema([*fields, *META_SCHEMA])


def _known_types(sink: DeltaSink, existing: pa.Schema | None) -> dict[str, pa.DataType]:
    known: dict[str, pa.DataType] = {}
    if sink.schema is not None:
        known.update((f.name, f.type) for f in sink.schema)
    if existing is not None:
        for f in existing:
            if f.name not in META_COLUMNS:
                known.setdefault(f.name, f.type)
    return known


def _inferred(sink: DeltaSink, name: str, got: list[Any]) -> pa.DataType | None:
    try:
        type_ = pa.array(got).type
    except (pa.ArrowException, TypeError, ValueError, OverflowError) as exc:
        kinds = sorted({type(v).__name__ for v in got if v is not None})
        raise StreamsException(
            f"DeltaSink {sink.name!r}: field {name!r} has values of different types in one "
            f"batch ({', '.join(kinds)}: {exc}); give the field one type before the sink, "
            "or declare it (DeltaSink(schema=...))"
        ) from None
    return None if pa.types.is_null(type_) else type_


def _column(
    sink: DeltaSink, name: str, got: list[Any], type_: pa.DataType, keys: list[Any]
) -> pa.Array:
    """``got`` as the column of ``type_``: each value's Python type checked, then the
    column converted at once; only a conversion that fails is redone value by value, to
    name the record it fails at."""
    for k, v in zip(keys, got, strict=True):
        _refuse(sink, name, k, kind_problem(v, type_))
    try:
        return column(got, type_)
    except (ValueError, TypeError, OverflowError, pa.ArrowException) as exc:
        for k, v in zip(keys, got, strict=True):
            _refuse(sink, name, k, conversion_problem(v, type_))
        raise StreamsException(
            f"DeltaSink {sink.name!r} (table {sink.table}): field {name!r} does not "
            f"convert to {type_} ({exc}); fix the values before the sink (map_values), "
            "or write to a new sink table"
        ) from None


def _refuse(sink: DeltaSink, name: str, key: Any, problem: str | None) -> None:
    if problem:
        raise StreamsException(
            f"DeltaSink {sink.name!r} (table {sink.table}): field {name!r} of the "
            f"record with key {key!r} {problem}, the column's type; the batch is retried "
            "by every run until it fits: fix the value before the sink (map_values), "
            "or write to a new sink table"
        )


def records(sink: DeltaSink, rows: pa.Table) -> pa.Table:
    """The sink's ``rows`` read back as records (``RECORD_SCHEMA``): the key (a dict of the
    key's fields, with ``key=(...)``), the value (column ``value`` alone: that column; else
    a dict of the non-null fields; every field null: a null value), the timestamp in
    milliseconds, no headers."""
    key_columns = sink.key_columns
    value_columns = [n for n in rows.column_names if n not in META_COLUMNS and n not in key_columns]
    data = {
        n: rows.column(n).to_pylist() if n in rows.column_names else [None] * rows.num_rows
        for n in (*key_columns, *value_columns)
    }
    keys, values = [], []
    for i in range(rows.num_rows):
        if sink.key_fields:
            keys.append(_dumps({n: data[n][i] for n in key_columns}))
        else:
            keys.append(_dumps(data[sink.key][i]))
        fields = {n: data[n][i] for n in value_columns if data[n][i] is not None}
        if value_columns == [VALUE]:
            values.append(_dumps(fields[VALUE]) if fields else None)
        else:
            values.append(_dumps(fields) if fields else None)
    millis = pc.cast(rows.column(TIMESTAMP).cast(pa.timestamp("ms", "UTC")), pa.int64())
    return pa.table(
        {
            "partition": rows.column(PARTITION).cast(pa.int32()),
            "offset": rows.column(OFFSET).cast(pa.int64()),
            "timestamp": millis,
            "key": pa.array(keys, pa.string()),
            "value": pa.array(values, pa.string()),
            "headers": pa.nulls(rows.num_rows, pa.string()),
        },
        schema=pa.schema([pa.field(f.name, f.type) for f in RECORD_SCHEMA]),
    )


def _loads(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def _dumps(value: Any) -> str | None:
    return None if value is None else json.dumps(value, default=_plain)


def _plain(value: Any) -> Any:
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    raise TypeError(f"{type(value).__name__} is not JSON")


__all__ = ["batch_schema", "records", "typed", "typed_by_rows"]
