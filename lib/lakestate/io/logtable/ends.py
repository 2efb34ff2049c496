"""A log table's end offsets: ``max(offset) + 1`` per partition, 0 for an empty one.

Records are never deleted from a log table (a partition emptied by a delete would number
from 0 again). Every append records the end offsets it leaves in its commit's metadata
(Delta ``commitInfo.userMetadata``, JSON under ``ENDS_METADATA_KEY``), so that they are
read from the newest commit file (on an object store: a listing and a read; past commits
that change no data, e.g. OPTIMIZE) instead of by a scan of the whole topic; a commit by
another writer that changed data falls back to the scan. The end offsets are also cached in-process, each
entry checked against the Delta log's files before use (the table version; the identity
of its first commit).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from lakestate.io import delta_commits, delta_log
from lakestate.io.logtable.table import Identity, first_commit_identity, local_log
from lakestate.warehouse import Warehouse

if TYPE_CHECKING:
    from deltalake import DeltaTable

#: The key, in an append's commit metadata (JSON), of the end offsets the append leaves.
ENDS_METADATA_KEY = "lakestate.end_offsets"
# Commit files read back, at most, to find the newest recorded end offsets.
_ENDS_LOOKBACK = 100

# path -> ((identity of the table, version), end offsets at that version).
_ends_cache: dict[str, tuple[tuple[Identity, int], dict[int, int]]] = {}
_cache_guard = threading.Lock()


def clear_cache() -> None:
    """Forget every cached end offset (as a new process would start)."""
    with _cache_guard:
        _ends_cache.clear()


def _local_version(log: Path) -> int | None:
    """The latest version of a local table, from its commit files' names."""
    found = delta_log.versions(log)
    return found[0] if found else None


def read_ends(
    warehouse: Warehouse, path: str, num_partitions: int
) -> tuple[dict[int, int], int | None]:
    """The end offsets, and the table version they are the end offsets of (None when not
    known: remote warehouse, or the table changed while they were read)."""
    log = local_log(warehouse, path)
    if log is None:
        return _remote_ends(path, num_partitions), None
    identity = first_commit_identity(log)
    seen = _local_version(log) if identity is not None else None
    if seen is not None:
        with _cache_guard:
            cached = _ends_cache.get(path)
        if cached is not None and cached[0] == (identity, seen):
            return dict(cached[1]), seen
    ends = None
    if seen is not None:
        ends = _recorded_ends(lambda v: delta_log.read_commit(log, v), seen, num_partitions)
    if ends is None:
        ends = _scan_end_offsets(path, num_partitions)
    if seen is not None and _local_version(log) == seen:
        _remember(path, identity, seen, ends)
        return ends, seen
    return ends, None


def ends_at(
    warehouse: Warehouse, path: str, table: DeltaTable, num_partitions: int
) -> dict[int, int]:
    """The end offsets at the version of the snapshot ``table`` (an append numbers from
    them and commits on that snapshot, so that a racing append conflicts): from the commit
    files (on an object store: those of the snapshot's version and before) or the cache
    when they are of that version, else by a scan of the snapshot."""
    if local_log(warehouse, path) is not None:
        ends, seen = read_ends(warehouse, path, num_partitions)
        if seen is not None and seen == table.version():
            return ends
    else:
        # On an object store the scan reads every data file over the network (a topic
        # gains files every run): the snapshot's own commit files tell, usually in one
        # read. Commit files never change, so they are the snapshot's whatever commits since.
        version = table.version()
        ends = _recorded_ends(lambda v: delta_log.commit_of(path, v), version, num_partitions)
        if ends is not None:
            return ends
    return scan_end_offsets(table, num_partitions)


def _scan_end_offsets(path: str, num_partitions: int) -> dict[int, int]:
    return scan_end_offsets(delta_commits.open_table(path), num_partitions)


def scan_end_offsets(table: DeltaTable, num_partitions: int) -> dict[int, int]:
    """End offsets by a scan of the snapshot's two number columns (delta-rs and Arrow):
    ``max(offset) + 1`` per partition."""
    ends = dict.fromkeys(range(num_partitions), 0)
    columns = table.to_pyarrow_table(columns=["partition", "offset"])
    if columns.num_rows:
        found = columns.group_by("partition").aggregate([("offset", "max")])
        for p, last in zip(
            found.column("partition").to_pylist(),
            found.column("offset_max").to_pylist(),
            strict=True,
        ):
            ends[p] = last + 1
    return ends


def _remote_ends(path: str, num_partitions: int) -> dict[int, int]:
    """The end offsets of a table on an object store: from its newest commit files (one
    listing and, usually, one read), else by a scan. A scan reads every data file's two
    number columns over the network, and a topic gains files every run."""
    versions = delta_log.commit_versions(path)
    ends = None
    if versions:
        ends = _recorded_ends(lambda v: delta_log.commit_of(path, v), versions[0], num_partitions)
    return _scan_end_offsets(path, num_partitions) if ends is None else ends


def _recorded_ends(
    read: Callable[[int], delta_log.Commit | None], version: int, num_partitions: int
) -> dict[int, int] | None:
    """The end offsets at ``version`` from the commit files alone (``read``: a version's
    commit): those the newest append recorded (``ENDS_METADATA_KEY``) if no later commit
    changed data, zeros if no commit ever did. None when the files cannot tell (a commit by
    another writer that changed data, a commit file cleaned up, more than
    ``_ENDS_LOOKBACK`` commits to read)."""
    for v in range(version, max(-1, version - _ENDS_LOOKBACK), -1):
        commit = read(v)
        if commit is None:
            return None
        recorded = commit.metadata_value(ENDS_METADATA_KEY)
        if isinstance(recorded, dict):
            return {p: int(recorded.get(str(p), 0)) for p in range(num_partitions)}
        if commit.changes_data:
            return None
    return dict.fromkeys(range(num_partitions), 0) if version < _ENDS_LOOKBACK else None


def ends_metadata(ends: Mapping[int, int]) -> str:
    """The commit metadata that records ``ends`` (partition -> end offset after the commit):
    for writers that append to a log table themselves (e.g. with Spark, as DataFrameWriter
    option ``userMetadata``), so that readers need not scan the table for its end offsets."""
    return json.dumps({ENDS_METADATA_KEY: ends_value(ends)})


def ends_value(ends: Mapping[int, int]) -> dict[str, int]:
    """``ends`` as recorded under ``ENDS_METADATA_KEY``."""
    return {str(p): n for p, n in sorted(ends.items())}


def _remember(path: str, identity: Identity | None, version: int, ends: dict[int, int]) -> None:
    if identity is not None:
        with _cache_guard:
            _ends_cache[path] = ((identity, version), dict(ends))


def remember_ends(warehouse: Warehouse, path: str, version: int, ends: Mapping[int, int]) -> None:
    """Note the end offsets an append of the caller's left at table ``version``."""
    log = local_log(warehouse, path)
    identity = first_commit_identity(log) if log is not None else None
    _remember(path, identity, version, dict(ends))
