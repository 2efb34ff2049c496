"""Changelog tables: a store's durable copy, as Kafka Streams' changelog topics are.

One append-only Delta table per store, ``<warehouse>/apps/<app>/changelog/<store>``,
partitioned by ``task`` (the partition of the task that owns the row). Each batch appends,
per task, one row per key it changed: the new value, or a tombstone (``raw_value`` null,
typed columns null) for a delete. Columns:

=====================  ============================================================
``task``               the task's partition (a store belongs to one sub-topology)
``batch_id``           the task's batch that wrote the row
the kind's columns     ``StoreKind.STATE_COLUMNS``, e.g. ``key, value, ts`` (JSON text)
``raw_key, raw_value`` the local store's exact bytes (restores use them)
``snapshot_through``   null for a batch's row; for a row compaction wrote, the batch it
                       compacted through (its ``batch_id`` stays the key's last batch)
=====================  ============================================================

No MERGE, no deletion vectors, no Change Data Feed: the table is its own change feed, and
any Delta reader reads it. The state of a task as of its batch ``N`` is, per key, the row
with the highest ``batch_id <= N``, unless that row is a tombstone. A batch's append
writes one file per task; a restore or catch-up reads one task's partition.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from lakestate.io import delta_commits, txn_ids
from lakestate.state.registry import view_class
from lakestate.task_id import TaskId

# The Arrow type of each Spark SQL type the engine carries: in STATE_COLUMNS, and in a
# batch's rows (the Spark transport's schemas are its inverse).
ARROW_TYPES = {
    "STRING": pa.string(),
    "BIGINT": pa.int64(),
    "INT": pa.int32(),
    "DOUBLE": pa.float64(),
    "BOOLEAN": pa.bool_(),
    "BINARY": pa.binary(),
}
SNAPSHOT_COLUMN = "snapshot_through"


class CompactedPastError(Exception):
    """A catch-up from a batch that compaction has folded into a snapshot (its tombstones
    are gone): restore instead."""


def compaction_txn_id(app: str, task: TaskId) -> str:
    """The Delta ``txn`` app id of ``task``'s compactions in each changelog of ``app``
    (version: the batch last compacted through). Unlike the batches' id it is not a
    fence for anything but other compactions."""
    return txn_ids.compaction(app, task)


def typed_fields(kind: str) -> list[pa.Field]:
    fields = []
    for name, sql_type in view_class(kind).STATE_COLUMNS:
        arrow_type = ARROW_TYPES.get(sql_type.upper())
        if arrow_type is None:
            raise ValueError(
                f"store kind {kind!r}: column {name!r} has type {sql_type!r}, which the engine "
                f"cannot carry (known: {', '.join(ARROW_TYPES)})"
            )
        fields.append(pa.field(name, arrow_type))
    return fields


def schema(kind: str) -> pa.Schema:
    return pa.schema(
        [
            pa.field("task", pa.int32()),
            pa.field("batch_id", pa.int64()),
            *typed_fields(kind),
            pa.field("raw_key", pa.binary()),
            pa.field("raw_value", pa.binary()),
            pa.field(SNAPSHOT_COLUMN, pa.int64()),
        ]
    )


def struct_column(kind: str) -> str:
    """The processing output's column that carries a ``kind`` store's typed columns."""
    return "state_" + re.sub(r"\W", "_", kind)


def ensure_table(path: str, store: str, kind: str) -> None:
    delta_commits.create_table(
        path,
        schema(kind),
        ["task"],
        name=store,
        description=f"lakestate changelog of store {store} (kind {kind})",
    )


def batch_rows(kind: str, state_rows: pa.Table, batch_of_task: dict[int, int]) -> pa.Table:
    """The changelog rows of one batch: ``state_rows`` are the processing output's rows of
    this store (columns task, raw_key, raw_value and the kind's struct column), each task's
    rows stamped with its batch."""
    tasks = state_rows.column("task").to_pylist()
    batch_ids = pa.array([batch_of_task[t] for t in tasks], pa.int64())
    struct = state_rows.column(struct_column(kind)).combine_chunks()
    columns = {
        "task": state_rows.column("task").cast(pa.int32()),
        "batch_id": batch_ids,
    }
    for f in typed_fields(kind):
        columns[f.name] = pc.struct_field(struct, f.name).cast(f.type)
    columns["raw_key"] = state_rows.column("raw_key")
    columns["raw_value"] = state_rows.column("raw_value")
    columns[SNAPSHOT_COLUMN] = pa.nulls(len(tasks), pa.int64())
    return pa.table(columns, schema=schema(kind))


def _task_rows(path: str, partition: int, through: int, columns: list[str], table=None) -> pa.Table:
    dataset = (table or delta_commits.open_table(path)).to_pyarrow_dataset()
    condition = (pc.field("task") == partition) & (pc.field("batch_id") <= through)
    return dataset.to_table(columns=columns, filter=condition)


def latest(rows: pa.Table) -> dict[bytes, bytes | None]:
    """Per key, the value of its row with the highest batch_id (None: a tombstone)."""
    order = pc.sort_indices(rows, [("batch_id", "ascending")])
    rows = rows.take(order)
    state: dict[bytes, bytes | None] = {}
    for key, value in zip(
        rows.column("raw_key").to_pylist(), rows.column("raw_value").to_pylist(), strict=True
    ):
        state[key] = value
    return state


def read_state(path: str, partition: int, through: int) -> dict[bytes, bytes]:
    """The live entries of task ``partition`` as of its batch ``through``: a restore."""
    rows = _task_rows(path, partition, through, ["batch_id", "raw_key", "raw_value"])
    return {k: v for k, v in latest(rows).items() if v is not None}


def read_live(path: str, partition: int, through: int, table=None) -> tuple[pa.Array, pa.Array]:
    """``read_state`` as two Arrow arrays, raw keys and raw values, without Python objects
    per row: the same rows (per key, the last of its rows in a stable sort by batch_id).
    ``table``: the opened table to read (a snapshot the caller also checked)."""
    rows = _task_rows(path, partition, through, ["batch_id", "raw_key", "raw_value"], table)
    return _live(rows)


def read_live_after(
    path: str, partition: int, through: int, after: bytes | None, limit: int, table=None
) -> tuple[pa.Array, pa.Array, bytes | None, int]:
    """``read_live`` of the first ``limit`` keys after ``after`` (None: from the first) in
    raw key order, sorted by raw key: (keys, values, the last key examined or None when no
    key is left after these, how many keys were examined). A key whose latest row is a
    tombstone is examined but not returned. Only those keys' rows are turned into
    entries, so a piece of a large store costs its scan, not the whole store's."""
    condition = (pc.field("task") == partition) & (pc.field("batch_id") <= through)
    if after is not None:
        condition = condition & (pc.field("raw_key") > after)
    dataset = (table or delta_commits.open_table(path)).to_pyarrow_dataset()
    rows = dataset.to_table(columns=["batch_id", "raw_key", "raw_value"], filter=condition)
    distinct = pc.unique(rows.column("raw_key"))
    distinct = distinct.take(pc.sort_indices(distinct))  # bytewise: RocksDB's order
    last = None
    if len(distinct) > limit:
        last = distinct[limit - 1]
        rows = rows.filter(pc.less_equal(rows.column("raw_key"), last))
        last = last.as_py()
    keys, values = _live(rows)
    order = pc.sort_indices(keys)
    return keys.take(order), values.take(order), last, min(len(distinct), limit)


def _live(rows: pa.Table) -> tuple[pa.Array, pa.Array]:
    """Per key of ``rows`` (batch_id, raw_key, raw_value) its latest row, unless a
    tombstone: (raw keys, raw values)."""
    rows = rows.take(pc.sort_indices(rows, [("batch_id", "ascending")]))
    keys = rows.column("raw_key").combine_chunks()
    position = pa.table({"key": keys, "position": np.arange(len(keys), dtype=np.int64)})
    last = position.group_by("key", use_threads=False).aggregate([("position", "max")])
    last = last.column("position_max").combine_chunks()
    values = rows.column("raw_value").combine_chunks().take(last)
    keys = keys.take(last)
    live = values.is_valid()
    return keys.filter(live), values.filter(live)


def read_changes(
    path: str, app: str, task: TaskId, after: int, through: int
) -> dict[bytes, bytes | None]:
    """The net change per key of ``task`` from its batch ``after`` (exclusive) to
    ``through``: a catch-up. Raises CompactedPastError when compaction folded batches after
    ``after`` into a snapshot (their deletes are gone): the table's compaction txn for the
    task says how far it compacted."""
    table = delta_commits.open_table(path)
    compacted = table.transaction_version(compaction_txn_id(app, task))
    rows = _task_rows(path, task.partition, through, ["batch_id", "raw_key", "raw_value"], table)
    if compacted is not None and compacted > after:
        raise CompactedPastError(
            f"{path}: task {task} was compacted through batch {compacted}, after {after}"
        )
    newer = rows.filter(pc.greater(rows.column("batch_id"), after))
    return latest(newer)


def restore_into(txn, kind: str, store: str, entries: Iterable[tuple[bytes, bytes | None]]) -> int:
    """Apply changelog entries (one per key) to a local store's transaction; returns how
    many."""
    entries = list(entries)
    view_class(kind).restore_entries(txn, store, entries)
    return len(entries)
