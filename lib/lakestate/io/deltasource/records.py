"""The records of one version of a source Delta table: the rows its commit appended, each
given its partition (Kafka's murmur2 of its key, as a log table's record) and its offset
within the version's rows of that partition, in ``RECORD_SCHEMA``'s columns.

A row's key is its key column's value (a dict of them for several), its value a dict of
all its columns (typed: a number stays a number; a timestamp or date becomes ISO-8601
text, a decimal its exact text, bytes base64), its timestamp the event-time column's (epoch
ms) or, without one, the commit's.
"""

from __future__ import annotations

import base64
import math
from datetime import UTC, date, datetime, time
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from lakestate.delta_source import DeltaSource
from lakestate.errors import StreamsException
from lakestate.io.deltasource.commits import SourceCommit, read_file
from lakestate.io.partitioner import canonical_json, partitions_of_texts
from lakestate.io.topic_records import RECORD_SCHEMA


def change_error(source: DeltaSource, commit: SourceCommit) -> StreamsException:
    """The error of a commit that deletes or rewrites rows, with the two choices."""
    return StreamsException(
        f"DeltaSource {source.name!r}: version {commit.version} of the Delta table "
        f"{source.table} is a {commit.operation} commit that deletes or rewrites rows (it "
        "removes data files with dataChange=true); a stream over a table reads appended "
        "rows only, so it stops here. Choose: declare the source with "
        "skip_change_commits=True to skip such commits whole (their rewritten rows are not "
        "read again, as Spark's skipChangeCommits), or keep failing and read the table from "
        "a later version under a new source name (starting=<version>)."
    )


def version_records(source: DeltaSource, commit: SourceCommit, schema: pa.Schema) -> pa.Table:
    """The records of ``commit``'s appended rows, offsets counted from 0 per partition in
    the commit's order (its files as listed, each file's rows in order); none for a commit
    that appends nothing or (``skip_change_commits``) that deletes or rewrites rows;
    ``StreamsException`` for the latter otherwise."""
    if commit.removes_rows:
        if source.skip_change_commits:
            return RECORD_SCHEMA.empty_table()
        raise change_error(source, commit)
    files = [read_file(source.table, added, schema) for added in commit.added]
    files = [f for f in files if f.num_rows]
    if not files:
        return RECORD_SCHEMA.empty_table()
    rows = pa.concat_tables(files, promote_options="default")
    return _records(source, commit, rows)


def _records(source: DeltaSource, commit: SourceCommit, rows: pa.Table) -> pa.Table:
    missing = [c for c in source.key_columns if c not in rows.column_names]
    if missing:
        raise StreamsException(
            f"DeltaSource {source.name!r}: version {commit.version} of {source.table} has "
            f"no key column {', '.join(map(repr, missing))} (its columns: "
            f"{', '.join(rows.column_names)})"
        )
    values = [_jsonable(r) for r in rows.to_pylist()]
    keys = [_key(source, v) for v in values]
    key_texts = [None if k is None else canonical_json(k) for k in keys]
    partitions = partitions_of_texts(key_texts, source.partitions)
    offsets = []
    seen = [0] * source.partitions
    for p in partitions:
        offsets.append(seen[p])
        seen[p] += 1
    return pa.table(
        {
            "partition": pa.array(partitions, pa.int32()),
            "offset": pa.array(offsets, pa.int64()),
            "timestamp": _timestamps(source, commit, rows),
            "key": pa.array(key_texts, pa.string()),
            "value": pa.array([canonical_json(v) for v in values], pa.string()),
            "headers": pa.nulls(rows.num_rows, pa.string()),
        },
        schema=RECORD_SCHEMA,
    )


def _key(source: DeltaSource, value: dict[str, Any]) -> Any:
    if isinstance(source.key, str):
        return value[source.key]
    return {c: value[c] for c in source.key_columns}


def _timestamps(source: DeltaSource, commit: SourceCommit, rows: pa.Table) -> pa.Array:
    """Epoch ms per row: the event-time column's, or the commit's for none or a NULL."""
    if source.timestamp is None:
        return pa.array([commit.timestamp] * rows.num_rows, pa.int64())
    if source.timestamp not in rows.column_names:
        raise StreamsException(
            f"DeltaSource {source.name!r}: version {commit.version} of {source.table} has "
            f"no timestamp column {source.timestamp!r} (its columns: "
            f"{', '.join(rows.column_names)})"
        )
    column = rows.column(source.timestamp)
    kind = column.type
    if pa.types.is_timestamp(kind):
        if kind.tz is None:  # Delta's timestamp_ntz: read as UTC
            column = pc.cast(column, pa.timestamp(kind.unit, "UTC"))
        ms = pc.cast(pc.cast(column, pa.timestamp("ms", "UTC")), pa.int64())
    elif pa.types.is_date(kind):
        days = pc.cast(pc.cast(column, pa.date32()), pa.int32())
        ms = pc.multiply(pc.cast(days, pa.int64()), 86_400_000)
    elif pa.types.is_integer(kind):
        ms = pc.cast(column, pa.int64())
    else:
        raise StreamsException(
            f"DeltaSource {source.name!r}: timestamp column {source.timestamp!r} of "
            f"{source.table} is {kind}; it must be a timestamp, a date or epoch milliseconds"
        )
    return pc.fill_null(ms, commit.timestamp).combine_chunks()


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, datetime):
        return (value if value.tzinfo else value.replace(tzinfo=UTC)).isoformat()
    if isinstance(value, date | time):
        return value.isoformat()
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, float) and not math.isfinite(value):  # NaN, inf are not JSON
        return None
    return value


__all__ = ["change_error", "version_records"]
