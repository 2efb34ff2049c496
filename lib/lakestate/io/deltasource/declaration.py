"""A Delta source as a warehouse declares it: ``<warehouse>/sources/<name>/declaration``, a
one-row Delta table holding the ``DeltaSource`` and the version its stream starts at,
resolved once when it is first declared ("latest" and a time become a version then), so
every run numbers the same rows with the same offsets.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from datetime import UTC, datetime

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

from lakestate.delta_source import DeltaSource
from lakestate.errors import StreamsException
from lakestate.io import delta_commits
from lakestate.warehouse import Warehouse

SCHEMA = pa.schema(
    [
        pa.field("name", pa.string(), nullable=False),
        pa.field("table", pa.string(), nullable=False),
        pa.field("key", pa.list_(pa.string()), nullable=False),
        pa.field("timestamp", pa.string()),
        pa.field("partitions", pa.int32(), nullable=False),
        pa.field("start_version", pa.int64(), nullable=False),
        pa.field("skip_change_commits", pa.bool_(), nullable=False),
    ]
)


@dataclass(frozen=True)
class Declared:
    """A declared source: its ``DeltaSource`` (``starting`` as the version it resolved to)."""

    source: DeltaSource
    start_version: int

    def to_table(self) -> pa.Table:
        s = self.source
        row = {
            "name": [s.name],
            "table": [s.table],
            "key": [list(s.key_columns)],
            "timestamp": [s.timestamp],
            "partitions": [s.partitions],
            "start_version": [self.start_version],
            "skip_change_commits": [s.skip_change_commits],
        }
        return pa.table(row, schema=SCHEMA)

    @classmethod
    def from_row(cls, r: dict) -> Declared:
        key = tuple(r["key"])
        source = DeltaSource(
            r["name"],
            r["table"],
            key[0] if len(key) == 1 else key,
            r["timestamp"],
            r["partitions"],
            r["start_version"],
            r["skip_change_commits"],
        )
        return cls(source, r["start_version"])


def path(warehouse: Warehouse, name: str) -> str:
    return warehouse.source_path(name) + "/declaration"


def read(warehouse: Warehouse, name: str) -> Declared | None:
    """Source ``name``'s declaration, or None."""
    where = path(warehouse, name)
    if warehouse.is_local and not _has_log(where):
        return None
    if not delta_commits.table_exists(where):
        return None
    rows = delta_commits.open_table(where).to_pyarrow_table().to_pylist()
    return Declared.from_row(rows[0]) if rows else None


def _has_log(where: str) -> bool:
    return os.path.isdir(os.path.join(where.removeprefix("file://"), "_delta_log"))


def start_version(source: DeltaSource) -> int:
    """The version ``source.starting`` names, of its table as it is now."""
    try:
        table = DeltaTable(source.table.removeprefix("file://"))
    except Exception as exc:  # delta-rs' TableNotFoundError and friends
        raise StreamsException(
            f"DeltaSource {source.name!r}: no Delta table at {source.table} ({exc})"
        ) from None
    latest = table.version()
    s = source.starting
    if s == "earliest":
        return 0
    if s == "latest":
        return latest + 1
    if isinstance(s, datetime):
        ms = int((s if s.tzinfo else s.replace(tzinfo=UTC)).timestamp() * 1000)
        at = [h["version"] for h in table.history() if int(h["timestamp"]) >= ms]
        return min(at, default=latest + 1)
    if s > latest + 1:
        raise StreamsException(
            f"DeltaSource {source.name!r}: starting version {s} is past the table's next "
            f"version {latest + 1}"
        )
    return int(s)


def declare(warehouse: Warehouse, source: DeltaSource) -> Declared:
    """Declare ``source`` in ``warehouse`` (its start resolved now), or check it against
    its declaration: the table, key, timestamp and partition count of a declared source
    never change (offsets would move); ``skip_change_commits`` may (it skips commits the
    stream has not reached). ``StreamsException`` for a changed declaration, or a topic
    of that name that is a log table already."""
    found = read(warehouse, source.name)
    if found is None:
        if delta_commits.table_exists(warehouse.topic_path(source.name)):
            raise StreamsException(
                f"DeltaSource {source.name!r}: the warehouse has a log-table topic of that "
                "name already; name the source differently"
            )
        declared = Declared(source, start_version(source))
        try:
            _write(warehouse, declared, "error")
        except Exception:
            # Two first runs at once: the first declaration stands (its start version).
            if read(warehouse, source.name) is None:
                raise
            return declare(warehouse, source)
        return declared
    was = found.source
    fixed = ("table", "key", "timestamp", "partitions")
    changed = [f for f in fixed if getattr(was, f) != getattr(source, f)]
    if changed:
        raise StreamsException(
            f"DeltaSource {source.name!r} is declared with "
            + ", ".join(f"{f}={getattr(was, f)!r}" for f in changed)
            + ", now given "
            + ", ".join(f"{f}={getattr(source, f)!r}" for f in changed)
            + ": a source's offsets depend on them, so they never change; declare a new "
            "source under another name (and reset the app) to read the table differently"
        )
    if was.skip_change_commits != source.skip_change_commits:
        found = Declared(
            replace(was, skip_change_commits=source.skip_change_commits), found.start_version
        )
        _write(warehouse, found, "overwrite")
    return found


def _write(warehouse: Warehouse, declared: Declared, mode: str) -> None:
    write_deltalake(
        path(warehouse, declared.source.name).removeprefix("file://"),
        declared.to_table(),
        mode=mode,  # type: ignore[arg-type]
        description="lakestate: a Delta table read as a topic",
    )


__all__ = ["Declared", "declare", "path", "read", "start_version"]
