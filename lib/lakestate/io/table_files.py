"""Data files written into a Delta table's location by whoever holds the rows (a Spark
executor), committed later by someone else (the driver) as Delta ``add`` actions.

A file is named uniquely (a fresh UUID per write), so two attempts at the same rows (a
retried Spark task) never overwrite each other: the driver commits the files of the
attempt Spark reports as the task's, and a failed attempt's files stay unreferenced (a
VACUUM removes them, as it does any uncommitted writer's). The file's metadata (``DataFile``)
is all that travels back: path relative to the table, size, rows, partition values and the
Delta statistics readers prune by (``numRecords``, ``nullCount``, and ``minValues`` /
``maxValues`` of its integer columns: offsets, timestamps, batch ids).
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass

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
    partition_column: str
    partition_value: int
    stats: str  # Delta's statistics JSON

    def add_action(self) -> AddAction:
        """The Delta ``add`` action that commits this file."""
        return AddAction(
            self.path,
            self.size,
            {self.partition_column: str(self.partition_value)},
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
    fs, root = _filesystem(table_root)
    relative = f"{partition_column}={partition_value}/part-{uuid.uuid4().hex}.parquet"
    fs.create_dir(f"{root}/{partition_column}={partition_value}", recursive=True)
    pq.write_table(data, f"{root}/{relative}", filesystem=fs, compression="snappy")
    size = fs.get_file_info(f"{root}/{relative}").size
    return DataFile(relative, size, data.num_rows, partition_column, partition_value, _stats(data))


def _stats(data: pa.Table) -> str:
    """Delta's per-file statistics of ``data``."""
    stats: dict = {"numRecords": data.num_rows, "minValues": {}, "maxValues": {}, "nullCount": {}}
    for name in data.column_names:
        column = data.column(name)
        stats["nullCount"][name] = column.null_count
        if pa.types.is_integer(column.type) and column.null_count < len(column):
            bounds = pc.min_max(column)
            stats["minValues"][name] = bounds["min"].as_py()
            stats["maxValues"][name] = bounds["max"].as_py()
    return json.dumps(stats)


__all__ = ["DataFile", "write_file"]
