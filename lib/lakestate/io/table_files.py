"""Data files written into a Delta table's location by whoever holds the rows (a Spark
executor), committed later by someone else (the driver) as Delta ``add`` actions.

A file is named uniquely (a fresh UUID per write), so two attempts at the same rows (a
retried Spark task) never overwrite each other: the driver commits the files of the
attempt Spark reports as the task's, and a failed attempt's files stay unreferenced (a
VACUUM removes them, as it does any uncommitted writer's). The file's metadata (``DataFile``)
is all that travels back: path relative to the table, size, rows, partition values and the
Delta statistics readers prune by (``numRecords``, ``nullCount``, and ``minValues`` /
``maxValues`` of its integer columns: offsets, timestamps, batch ids) and, for a table whose
columns the writer chose (a Delta sink's, typed where the rows are), the file's Arrow schema.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date, datetime
from urllib.parse import quote

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from deltalake.transaction import AddAction

from lakestate import object_store


@dataclass(frozen=True)
class DataFile:
    """A Parquet file written under a table's location, not yet committed."""

    path: str  # relative to the table's root, e.g. ``partition=3/part-<uuid>.parquet``
    size: int
    rows: int
    partitions: str  # JSON: Delta's partition values, column -> text (or null)
    stats: str  # Delta's statistics JSON
    schema: bytes = b""  # the file's Arrow schema (IPC), partition columns included; b"": unsaid

    @property
    def partition_value(self) -> int:
        """The value of a table partitioned by one integer column (a log table's
        ``partition``, a changelog's ``task``)."""
        (value,) = json.loads(self.partitions).values()
        return int(value)

    def arrow_schema(self) -> pa.Schema:
        """The file's columns with its partition columns (``schema``, which must be set)."""
        return pa.ipc.read_schema(pa.py_buffer(self.schema))

    def add_action(self) -> AddAction:
        """The Delta ``add`` action that commits this file."""
        return AddAction(
            self.path,
            self.size,
            json.loads(self.partitions),
            int(time.time() * 1000),
            True,
            self.stats,
        )


def _filesystem(table_root: str) -> tuple[pafs.FileSystem, str]:
    """The file system of the table at ``table_root`` and the root's path in it."""
    if object_store.is_s3(table_root):
        return object_store.filesystem(), object_store.bucket_key(table_root)
    return pafs.LocalFileSystem(), table_root.removeprefix("file://").rstrip("/")


def write_file(
    table_root: str, partition_column: str, partition_value: int, data: pa.Table
) -> DataFile:
    """Write ``data`` (the table's columns but its partition column, the table's types) as
    one new Parquet file of partition ``partition_value``; returns its metadata."""
    return write_partitioned(table_root, {partition_column: str(partition_value)}, data)


def write_partitioned(
    table_root: str,
    partitions: Mapping[str, str | None],
    data: pa.Table,
    schema: pa.Schema | None = None,
) -> DataFile:
    """Write ``data`` (the table's columns but its partition columns) as one new Parquet
    file of the partition whose values (Delta's texts, ``partition_text``) are
    ``partitions`` (none: an unpartitioned table); ``schema``: the file's Arrow schema to
    hand back (``DataFile.schema``)."""
    fs, root = _filesystem(table_root)
    folder = "/".join(
        f"{c}={quote(v, safe='') if v is not None else '__HIVE_DEFAULT_PARTITION__'}"
        for c, v in partitions.items()
    )
    name = f"part-{uuid.uuid4().hex}.parquet"
    relative = f"{folder}/{name}" if folder else name
    fs.create_dir(f"{root}/{folder}" if folder else root, recursive=True)
    pq.write_table(data, f"{root}/{relative}", filesystem=fs, compression="snappy")
    size = fs.get_file_info(f"{root}/{relative}").size
    saved = schema.serialize().to_pybytes() if schema is not None else b""
    return DataFile(
        relative, size, data.num_rows, json.dumps(dict(partitions)), _stats(data), saved
    )


def partition_text(value: object) -> str | None:
    """A partition value as Delta writes it in ``partitionValues``."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, datetime):
        return value.strftime("%Y-%m-%d %H:%M:%S.%f")
    if isinstance(value, date):
        return value.isoformat()
    return str(value)


def _stats(data: pa.Table) -> str:
    """Delta's per-file statistics of ``data`` (its flat columns)."""
    stats: dict = {"numRecords": data.num_rows, "minValues": {}, "maxValues": {}, "nullCount": {}}
    for name in data.column_names:
        column = data.column(name)
        if pa.types.is_nested(column.type):
            continue  # Delta's stats of a struct are nested: none is as good
        stats["nullCount"][name] = column.null_count
        if pa.types.is_integer(column.type) and column.null_count < len(column):
            bounds = pc.min_max(column)
            stats["minValues"][name] = bounds["min"].as_py()
            stats["maxValues"][name] = bounds["max"].as_py()
    return json.dumps(stats)


__all__ = ["DataFile", "partition_text", "write_file", "write_partitioned"]
