"""A log table itself: whether it exists, creating it, its partition count and columns.

The partition count is fixed when the topic is created and kept in the table property
``lakestate.partitions``. Log tables are plain Delta (no deletion vectors, no Change Data
Feed), so that any Delta reader and writer can use them: the engine appends through
delta-rs. The partition count is cached in-process, each entry checked against the Delta
log's first commit file before use (a table dropped and re-created has a new one).
"""

from __future__ import annotations

import os
import threading
import zlib
from pathlib import Path

from deltalake.exceptions import TableNotFoundError

from lakestate.errors import StreamsException
from lakestate.io import delta_commits, delta_log
from lakestate.io.topic_records import RECORD_SCHEMA
from lakestate.warehouse import Warehouse

PARTITIONS_PROPERTY = "lakestate.partitions"

# Plain Delta: no deletion vectors or Change Data Feed, so that any Delta reader and writer
# (delta-rs included: the engine appends through it) can use the table.
_TABLE_PROPERTIES = {
    "delta.enableChangeDataFeed": "false",
    "delta.enableDeletionVectors": "false",
}

#: Identifies one table at a path: its first commit file's inode, mtime, size, checksum.
Identity = tuple[int, int, int, int]
_partitions_cache: dict[str, tuple[Identity, int]] = {}
_cache_guard = threading.Lock()


def local_log(warehouse: Warehouse, path: str) -> Path | None:
    """The table's ``_delta_log`` folder on a local warehouse, else None."""
    return delta_log.local_log(path) if warehouse.is_local else None


def first_commit_identity(log: Path) -> Identity | None:
    """Identifies one table at a path: its first commit file (stat, and a checksum of its
    content, which holds the table's id). None if there is none."""
    first = log / f"{0:020d}.json"
    try:
        st = os.stat(first)
        content = first.read_bytes()
    except OSError:  # no table, or its first commit was cleaned up after a checkpoint
        return None
    return (st.st_ino, st.st_mtime_ns, st.st_size, zlib.crc32(content))


def exists(warehouse: Warehouse, path: str) -> bool:
    """Whether the log table at ``path`` exists."""
    if warehouse.is_local and not (Path(path.removeprefix("file://")) / "_delta_log").is_dir():
        return False
    return delta_commits.table_exists(path)


def create(warehouse: Warehouse, topic: str, path: str, partitions: int, exist_ok: bool) -> None:
    """Create the log table of ``topic`` (the caller holds its append lock): a no-op if it
    exists with ``partitions`` (``exist_ok``), else ``ValueError``."""
    if isinstance(partitions, bool) or not isinstance(partitions, int) or partitions < 1:
        raise ValueError(f"topic {topic!r}: partitions must be an int >= 1, got {partitions!r}")
    if exists(warehouse, path):
        existing = _read_partitions(path)
        if existing != partitions:
            raise ValueError(
                f"topic {topic!r} already exists with {existing} partitions, not {partitions}"
            )
        if not exist_ok:
            raise ValueError(f"topic {topic!r} already exists")
        return
    try:
        # One commit holds the schema and the partition count (a custom table property,
        # which delta-rs accepts with raise_if_key_not_exists=False): no JVM needed.
        delta_commits.create_log_table(
            path,
            RECORD_SCHEMA,
            description=f"lakestate log table of topic {topic}",
            configuration={PARTITIONS_PROPERTY: str(partitions), **_TABLE_PROPERTIES},
        )
    except Exception:
        if not exists(warehouse, path):
            raise
        # Lost a creation race to another writer: fine if it made the same topic.
        created = _read_partitions(path)
        if created != partitions or not exist_ok:
            raise ValueError(
                f"topic {topic!r} already exists with {created} partitions"
                + (f", not {partitions}" if created != partitions else "")
            ) from None


def _read_partitions(path: str) -> int:
    table = delta_commits.open_table(path)
    raw = table.metadata().configuration.get(PARTITIONS_PROPERTY)
    delta_commits.release(table)
    if raw is None:
        raise ValueError(f"{path} is not a lakestate log table (no {PARTITIONS_PROPERTY})")
    return int(raw)


def partitions(warehouse: Warehouse, topic: str, path: str) -> int:
    """The partition count of the log table of ``topic`` (``ValueError`` if it does not
    exist)."""
    log = local_log(warehouse, path)
    identity = first_commit_identity(log) if log is not None else None
    if identity is not None:
        with _cache_guard:
            cached = _partitions_cache.get(path)
        if cached is not None and cached[0] == identity:
            return cached[1]
    try:  # one open (on an object store an existence check first would be a second)
        n = _read_partitions(path)
    except TableNotFoundError:
        raise ValueError(f"topic {topic!r} does not exist in {warehouse.root}") from None
    if identity is not None:
        with _cache_guard:
            _partitions_cache[path] = (identity, n)
    return n


def check_columns(topic: str, path: str) -> None:
    """``StreamsException`` unless the table at ``path`` has a log table's columns."""
    table = delta_commits.open_table(path)
    columns = {f.name for f in table.schema().fields}
    delta_commits.release(table)
    missing = [f.name for f in RECORD_SCHEMA if f.name not in columns]
    if missing:
        raise StreamsException(
            f"topic {topic!r} at {path} is not a log table: it has no column "
            f"{', '.join(missing)} (expected "
            f"{', '.join(f'{f.name} {f.type}' for f in RECORD_SCHEMA)})"
        )
