"""One commit of a source Delta table, as its ``_delta_log/<version>.json`` records it:
the data files it added, whether it removed rows, its operation and time.

Read from the commit file itself (local or any file system pyarrow reaches): what a
stream reads of a version is exactly the files that version added, in the order its
commit lists them, so a run that reads version v again reads the same rows in the same
order.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from lakestate.errors import StreamsException


@dataclass(frozen=True)
class AddedFile:
    """A data file a commit added with ``dataChange``: rows appended."""

    path: str  # as the commit names it (relative to the table, URL-encoded, or a URI)
    partition_values: tuple[tuple[str, str | None], ...]
    modification_time: int


@dataclass(frozen=True)
class SourceCommit:
    """What a stream needs of one commit: the files it appended, whether it removed rows
    (a remove, or change-data file, with ``dataChange``: DELETE, UPDATE, MERGE, an
    overwrite; OPTIMIZE's are ``dataChange=false`` and not a change), its operation and
    time (epoch ms)."""

    version: int
    added: tuple[AddedFile, ...]
    removes_rows: bool
    operation: str
    timestamp: int


def _fs(table: str) -> tuple[pafs.FileSystem, str]:
    if "://" in table and not table.startswith("file://"):
        return pafs.FileSystem.from_uri(table)
    return pafs.LocalFileSystem(), table.removeprefix("file://")


def read_commit(table: str, version: int) -> SourceCommit:
    """Version ``version``'s commit of the table at ``table``; ``StreamsException`` when its
    commit file is gone (cleaned up after the log's retention)."""
    fs, root = _fs(table)
    path = f"{root.rstrip('/')}/_delta_log/{version:020d}.json"
    try:
        with fs.open_input_stream(path) as f:
            text = f.read().decode("utf-8")
    except (FileNotFoundError, OSError):
        raise StreamsException(
            f"Delta table {table}: the commit file of version {version} is gone ({path}), "
            "removed after the log's retention (delta.logRetentionDuration) before the "
            "stream read it. Declare the source again under a new name starting at a later "
            "version, or keep the log longer."
        ) from None
    added: list[AddedFile] = []
    removes = False
    operation = "UNKNOWN"
    timestamp = 0
    for line in text.splitlines():
        if not line.strip():
            continue
        action = json.loads(line)
        if "commitInfo" in action:
            info = action["commitInfo"]
            operation = str(info.get("operation", operation))
            timestamp = int(info.get("timestamp", timestamp) or 0)
        elif "add" in action and action["add"].get("dataChange", True):
            add = action["add"]
            values = add.get("partitionValues") or {}
            added.append(
                AddedFile(
                    add["path"], tuple(sorted(values.items())), int(add.get("modificationTime", 0))
                )
            )
        for kind in ("remove", "cdc"):
            if kind in action and action[kind].get("dataChange", True):
                removes = True
    if not timestamp and added:
        timestamp = max(a.modification_time for a in added)
    return SourceCommit(version, tuple(added), removes, operation, timestamp)


def read_file(table: str, added: AddedFile, schema: pa.Schema) -> pa.Table:
    """The rows of an added file, with its partition columns (typed as ``schema``, the
    table's, has them) appended."""
    fs, root = _fs(table)
    name = unquote(added.path)
    if "://" in name:
        fs, name = pafs.FileSystem.from_uri(name)
    else:
        name = f"{root.rstrip('/')}/{name}"
    rows = pq.read_table(name, filesystem=fs)
    for column, text in added.partition_values:
        kind = schema.field(column).type if column in schema.names else pa.string()
        values = pa.array([text] * rows.num_rows, pa.string()).cast(kind)
        rows = rows.append_column(pa.field(column, kind), values)
    return rows


__all__ = ["AddedFile", "SourceCommit", "read_commit", "read_file"]
