"""Compaction: the older part of a store's changelog folded into one row per live key.

For each task of the sub-topology that owns a store, with ``C`` its last complete batch
(``standing.app_pin``), the rows of batches ``<= C`` are replaced, in one Delta commit per
task, by the task's state as of ``C``: per key its newest row (``batch_id`` stays the
key's last batch), tombstones dropped, ``snapshot_through = C``. Rows of later batches are
not touched, so the state of the task as of any batch ``>= C`` reads the same before and
after: views pinned there and restores answer alike. What compaction loses is the history
before ``C``: a catch-up from a batch before ``C`` raises ``CompactedPastError`` (the
recovery then restores), and a view pinned before ``C`` reads the table version from before
the compaction (``read.time_travel``) until VACUUM removes it.

It runs beside the batches and never makes one fail, wait or retry. delta-rs counts a
predicate-less append as having read every file of its snapshot, so an append conflicts
with any commit that removes a file with ``dataChange=true`` (an overwrite with a
predicate does). The commit here removes and adds with ``dataChange=false``, as OPTIMIZE
does, which appends do not conflict with in either order; its own file is written here
with exact stats, since delta-rs's pyarrow datasets prune on them. What delta-rs does not
catch between two such commits is two compactions removing the same files (1.6.6 lets
both commit: the older snapshot could then bring deleted keys back), so each commit
carries a Delta ``txn`` of its own per task (``compaction_txn_id``, version ``C``): two
compactions of one task conflict, the later retries on the new snapshot (bounded), and
batches, which carry other txn ids, are not affected.

A kill anywhere loses nothing: until the commit the table is unchanged (a parquet file
may be left unreferenced, for VACUUM), after it the task is compacted; a rerun does the
rest. No Spark: delta-rs and pyarrow only. Each task's rewrite holds the table's
maintenance lock (``ops.table_lock``): delta-rs lets an OPTIMIZE and a compaction
of one snapshot both commit, which would keep rows twice.
"""

from __future__ import annotations

import json
import random
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import unquote

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from deltalake import CommitProperties, DeltaTable, Transaction
from deltalake.exceptions import CommitFailedError
from deltalake.transaction import AddAction, RemoveAction
from lakestate import console
from lakestate.checkpoint import faults
from lakestate.checkpoint.changelog import SNAPSHOT_COLUMN, compaction_txn_id
from lakestate.checkpoint.standing import app_pin
from lakestate.errors import StreamsException
from lakestate.io import delta_commits
from lakestate.ops.table_lock import table_lock
from lakestate.task_id import TaskId
from lakestate.warehouse import Warehouse

if TYPE_CHECKING:
    import pyarrow.dataset as ds

__all__ = [
    "FAULT_AFTER_COMMIT",
    "FAULT_BEFORE_COMMIT",
    "METADATA_KEY",
    "CompactionConflictError",
    "CompactionResult",
    "TaskCompaction",
    "compact",
    "compaction_txn_id",
    "snapshot_rows",
]

#: Fault points (``faults.maybe_fail``, batch = the batch compacted through): after the
#: snapshot file is written, before its commit; and after the commit.
FAULT_BEFORE_COMMIT = "compaction:before_commit"
FAULT_AFTER_COMMIT = "compaction:after_commit"
#: The key of compaction commits' ``userMetadata``.
METADATA_KEY = "lakestate.compaction"
MAX_TRIES = 10
BACKOFF_S = 0.05


class CompactionConflictError(StreamsException):
    """Compaction of a task kept conflicting with other compactions of it; nothing of that
    task was changed."""


@dataclass(frozen=True)
class TaskCompaction:
    """One task of one store: the batch it was compacted through (its last complete
    batch), its rows of batches up to there before and after, and whether a commit was
    made (``False``: nothing to gain, the rows were already one snapshot or none)."""

    store: str
    task: TaskId
    through: int
    rows_before: int
    rows_after: int
    committed: bool
    files_removed: int = 0
    tries: int = 1


@dataclass(frozen=True)
class CompactionResult:
    """What ``compact`` did, per store and task."""

    app: str
    tasks: tuple[TaskCompaction, ...]

    @property
    def committed(self) -> list[TaskCompaction]:
        return [t for t in self.tasks if t.committed]


def compact(
    warehouse: Warehouse, app: str, store: str | None = None, say: Callable[[str], None] = print
) -> CompactionResult:
    """Compact every changelog of ``app`` (or only ``store``'s): per task of the owning
    sub-topology, its rows of batches up to its last complete batch become one row per
    live key, in one commit per task. Safe while batches run. ValueError for an unknown
    app or store; CompactionConflictError when other compactions kept winning."""
    if app not in warehouse.list_apps():
        known = ", ".join(warehouse.list_apps()) or "none"
        raise ValueError(f"no app {app!r} in warehouse {warehouse.root} (apps: {known})")
    tables = warehouse.list_state_tables(app)
    if store is not None:
        names = [t.store for t in tables]
        if store not in names:
            raise ValueError(
                f"app {app} has no store {store!r} (its stores: {', '.join(names) or 'none'})"
            )
        tables = [t for t in tables if t.store == store]
    # The pin before any changelog snapshot: a batch complete at pin time is then in it.
    pin = app_pin(warehouse, app)
    owners = pin.writers
    done: list[TaskCompaction] = []
    work: list[tuple[str, str, list[tuple[TaskId, int]]]] = []
    for table in tables:
        path = warehouse.changelog_path(app, table.store)
        subs = owners.get(path, set())
        if len(subs) > 1:
            raise StreamsException(
                f"{path}: progress rows of sub-topologies {sorted(subs)} name this changelog; "
                "a store belongs to one sub-topology"
            )
        if not subs:
            say(f"{app}/{table.store}: no batch wrote it yet, nothing to compact")
            continue
        (sub,) = subs
        tasks = [(t, through) for t, through in sorted(pin.batches.items()) if t.subtopology == sub]
        work.append((path, table.store, tasks))
    with console.progress(f"compact {app}: store tasks", sum(len(w[2]) for w in work)) as bar:
        for path, store_name, tasks in work:
            for task, through in tasks:
                result = _compact_task(path, app, store_name, task, through)
                say(_describe(app, result))
                done.append(result)
                bar.advance()
    return CompactionResult(app, tuple(done))


def _describe(app: str, r: TaskCompaction) -> str:
    head = f"{app}/{r.store} task {r.task} through batch {r.through}: "
    if r.committed:
        return (
            head
            + f"{r.rows_before} rows -> {r.rows_after} ({r.files_removed} files replaced"
            + (f", {r.tries} tries" if r.tries > 1 else "")
            + ")"
        )
    if r.rows_before == 0:
        return head + "no rows, nothing to compact"
    return head + f"already one snapshot of {r.rows_before} rows"


def _compact_task(path: str, app: str, store: str, task: TaskId, through: int) -> TaskCompaction:
    """Compact one task, retrying on a new snapshot when another compaction of it won."""
    error: CommitFailedError | None = None
    for attempt in range(1, MAX_TRIES + 1):
        try:
            with table_lock(path):
                table = delta_commits.open_table(path)
                return _compact_once(table, app, store, task, through, attempt)
        except CommitFailedError as exc:
            error = exc
            if attempt < MAX_TRIES:
                time.sleep(min(BACKOFF_S * 2 ** (attempt - 1), 1.0) * (0.5 + random.random()))
    raise CompactionConflictError(
        f"{path}: compaction of task {task} through batch {through} failed {MAX_TRIES} times "
        f"on a conflicting commit; the table is unchanged for it. Last error: {error}"
    ) from error


def _compact_once(
    table: DeltaTable, app: str, store: str, task: TaskId, through: int, attempt: int
) -> TaskCompaction:
    partition = task.partition
    files = _files_with_batches_through(table, partition, through)
    dataset = table.to_pyarrow_dataset()
    columns = [f.name for f in dataset.schema if f.name != "task"]
    file_schema = pa.schema([dataset.schema.field(c) for c in columns])
    rows = _read_files(dataset, partition, [p for p, _ in files], columns, file_schema)
    in_scope = pc.less_equal(rows.column("batch_id"), through)
    old = rows.filter(in_scope)
    unchanged = TaskCompaction(store, task, through, old.num_rows, old.num_rows, False, 0, attempt)
    # Every row up to ``through`` from a compaction already (one through C >= through):
    # they are one snapshot, so there is nothing to gain.
    if old.num_rows == 0 or old.column(SNAPSHOT_COLUMN).null_count == 0:
        return unchanged
    snapshot = snapshot_rows(old, through)
    # Rows of later batches in the files replaced (not written by lakestate's batches,
    # whose files each hold one batch) are carried over as they are.
    data = pa.concat_tables([snapshot, rows.filter(pc.invert(in_scope))]).cast(file_schema)

    actions, written = _replacing_actions(dataset, partition, files, data)
    metadata = {
        METADATA_KEY: {
            "store": store,
            "task": str(task),
            "through": through,
            "rows_before": old.num_rows,
            "rows_after": snapshot.num_rows,
        }
    }
    properties = CommitProperties(
        custom_metadata={"userMetadata": json.dumps(metadata, sort_keys=True)},
        app_transactions=[Transaction(compaction_txn_id(app, task), through)],
    )
    faults.maybe_fail(FAULT_BEFORE_COMMIT, through)
    try:
        table.create_write_transaction(
            actions,
            mode="append",
            schema=table.schema(),
            partition_by=list(table.metadata().partition_columns),
            commit_properties=properties,
        )
    except CommitFailedError:
        # Only a failed commit is sure to reference nothing; after any other error the
        # commit may have landed (e.g. a post-commit hook failed), so the file stays.
        if written is not None:
            _remove_quietly(dataset.filesystem, written)
        raise
    faults.maybe_fail(FAULT_AFTER_COMMIT, through)
    return TaskCompaction(
        store, task, through, old.num_rows, snapshot.num_rows, True, len(files), attempt
    )


def _replacing_actions(
    dataset: ds.Dataset, partition: int, files: list[tuple[str, int]], data: pa.Table
) -> tuple[list[AddAction | RemoveAction], str | None]:
    """The actions that replace the task's ``files`` with one file of ``data`` (written
    here; none when ``data`` is empty), and that file's path."""
    now = int(time.time() * 1000)
    values = {"task": str(partition)}
    actions: list[AddAction | RemoveAction] = [
        RemoveAction(p, False, now, size, values) for p, size in files
    ]
    written = None
    if data.num_rows:
        written = f"task={partition}/part-00000-{uuid.uuid4()}-c000.snappy.parquet"
        pq.write_table(data, written, filesystem=dataset.filesystem, compression="snappy")
        size = dataset.filesystem.get_file_info(written).size
        actions.insert(0, AddAction(written, size, values, now, False, _stats(data)))
    return actions, written


def _files_with_batches_through(
    table: DeltaTable, partition: int, through: int
) -> list[tuple[str, int]]:
    """(path, size) of the task's files that may hold a row of a batch ``<= through``
    (a file without stats may)."""
    adds = pa.table(table.get_add_actions(flatten=True))
    if adds.num_rows == 0:
        return []
    mine = pc.equal(adds.column("partition.task"), partition)
    if "min.batch_id" in adds.column_names:
        low = adds.column("min.batch_id")
        mine = pc.and_(mine, pc.or_kleene(pc.is_null(low), pc.less_equal(low, through)))
    chosen = adds.filter(mine)
    return list(
        zip(chosen.column("path").to_pylist(), chosen.column("size_bytes").to_pylist(), strict=True)
    )


def _read_files(
    dataset: ds.FileSystemDataset,
    partition: int,
    paths: list[str],
    columns: list[str],
    schema: pa.Schema,
) -> pa.Table:
    fragments = {f.path: f for f in dataset.get_fragments(filter=pc.field("task") == partition)}
    tables = [schema.empty_table()]
    for path in paths:
        fragment = fragments.get(path) or fragments.get(unquote(path))
        if fragment is None:
            raise StreamsException(f"file {path} of the Delta log is not in its dataset")
        tables.append(fragment.to_table(schema=dataset.schema, columns=columns).cast(schema))
    return pa.concat_tables(tables)


def snapshot_rows(rows: pa.Table, through: int) -> pa.Table:
    """The snapshot of a task's changelog rows (all of batches ``<= through``): per
    ``raw_key`` its row with the highest ``batch_id`` (on a tie the later row, as
    ``changelog.latest``), tombstones dropped, ``snapshot_through`` set to ``through``.
    When every key is deleted, the newest tombstone stays: read_changes learns of a
    compaction only from a row, so an empty snapshot would let a catch-up from before
    ``through`` miss the deletes."""
    n = rows.num_rows
    if n == 0:
        return rows
    order = pc.sort_indices(
        rows.append_column("_row", pa.array(np.arange(n))),
        [("raw_key", "ascending"), ("batch_id", "ascending"), ("_row", "ascending")],
    )
    ordered = rows.take(order)
    keys = ordered.column("raw_key").combine_chunks()
    last = np.ones(n, dtype=bool)
    if n > 1:
        last[:-1] = pc.not_equal(keys.slice(0, n - 1), keys.slice(1)).to_numpy(zero_copy_only=False)
    latest = ordered.filter(pa.array(last))
    live = latest.filter(pc.is_valid(latest.column("raw_value")))
    if live.num_rows == 0:
        newest = pc.sort_indices(latest, [("batch_id", "descending")])[0].as_py()
        live = latest.slice(newest, 1)
    index = live.column_names.index(SNAPSHOT_COLUMN)
    stamp = pa.array(np.full(live.num_rows, through, dtype=np.int64))
    return live.set_column(index, live.schema.field(index), stamp)


def _stats(data: pa.Table) -> str:
    """Delta file stats, exact: row and null counts of every column, min/max of the
    integer ones (strings and binaries get none, which only costs skipping)."""
    stats: dict = {"numRecords": data.num_rows, "minValues": {}, "maxValues": {}, "nullCount": {}}
    for name in data.column_names:
        column = data.column(name)
        stats["nullCount"][name] = column.null_count
        if pa.types.is_integer(column.type) and column.null_count < data.num_rows:
            low_high = pc.min_max(column)
            stats["minValues"][name] = low_high["min"].as_py()
            stats["maxValues"][name] = low_high["max"].as_py()
    return json.dumps(stats)


def _remove_quietly(filesystem, path: str) -> None:
    try:
        filesystem.delete_file(path)
    except Exception:  # an unreferenced file is harmless; VACUUM removes it
        pass
