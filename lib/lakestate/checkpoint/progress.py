"""The app's progress table: one row per task per batch, the first commit of every batch.

``<warehouse>/apps/<app>/_progress`` (Delta). A batch's row for a task records its plan
(the offset ranges it read), the offsets it reached, its stream time, its record count and
metrics, and the tables the batch writes for it. The row is committed before any other
table of the batch, with the task's ``txn`` (``delta_commits.txn_app_id``, version = the
task's batch), so it is where a batch is fenced: two runs that both processed batch ``b``
of a task cannot both commit it here, and the loser writes nothing anywhere. A batch is
complete when every table its rows name holds it (their ``txn`` version for the task);
until then the next run replays it from this row.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from deltalake.exceptions import TableNotFoundError
from deltalake.schema import Field, PrimitiveType
from lakestate.checkpoint import faults
from lakestate.checkpoint.rewind_intent import refuse_if_mid_rewind
from lakestate.errors import TaskMigratedException
from lakestate.io import delta_commits, txn_ids
from lakestate.task_id import TaskId
from lakestate.warehouse import Warehouse

#: The format of an app's folder that this lakestate reads and writes.
FORMAT = 2
SCHEMA = pa.schema(
    [
        pa.field("task", pa.string()),
        pa.field("batch_id", pa.int64()),
        pa.field("run_id", pa.string()),
        pa.field("at_ms", pa.int64()),
        pa.field("ranges", pa.string()),  # JSON {topic: [start, end]}
        pa.field("offsets", pa.string()),  # JSON {topic: next offset}, all inputs of the task
        pa.field("stream_time", pa.int64()),
        pa.field("records", pa.int64()),
        pa.field("tables", pa.string()),  # JSON [table, ...] written, relative to the warehouse
        # JSON: the task's metrics totals since its first batch, {"nodes": {node: {name:
        # value}}, "stores": {store: {name: value}}} (lakestate.processors.metrics); rows
        # written before metrics were scoped hold the last batch's flat {name: value}
        pa.field("metrics", pa.string()),
        # JSON {key: int}, the task's processor metadata (a column added in place to older
        # tables, where it reads as null: none)
        pa.field("processor_metadata", pa.string()),
        # JSON {"batch": b, "progress_version": v} on a rewind's row (ops/rewind.py): the
        # task's state is that of its batch b (0: none) at progress version v; null on a
        # batch's row (added in place like processor_metadata)
        pa.field("rewound_to", pa.string()),
    ]
)


@dataclass(frozen=True)
class TaskProgress:
    """One batch of one task, as its progress row records it."""

    task: TaskId
    batch_id: int
    run_id: str
    at_ms: int
    ranges: dict[str, tuple[int, int]]
    offsets: dict[str, int]
    stream_time: int
    records: int
    tables: tuple[str, ...] = ()
    metrics: dict[str, Any] = field(default_factory=dict)
    processor_metadata: dict[str, int] = field(default_factory=dict)
    #: On a rewind's row: {"batch": the batch whose state the task is back in (0: none),
    #: "progress_version": the progress table version of the rewind's target}; else None.
    rewound_to: dict[str, int] | None = None

    @property
    def is_rewind(self) -> bool:
        """A rewind's row: no records were processed, no table written; the task's offsets,
        stream time and processor metadata are those of its ``rewound_to`` batch."""
        return self.rewound_to is not None

    def row(self) -> dict[str, Any]:
        return {
            "task": str(self.task),
            "batch_id": self.batch_id,
            "run_id": self.run_id,
            "at_ms": self.at_ms,
            "ranges": json.dumps({t: list(r) for t, r in sorted(self.ranges.items())}),
            "offsets": json.dumps(dict(sorted(self.offsets.items()))),
            "stream_time": self.stream_time,
            "records": self.records,
            "tables": json.dumps(list(self.tables)),
            "metrics": json.dumps(self.metrics, sort_keys=True),
            "processor_metadata": json.dumps(self.processor_metadata, sort_keys=True),
            "rewound_to": None
            if self.rewound_to is None
            else json.dumps(self.rewound_to, sort_keys=True),
        }

    @staticmethod
    def from_row(row: dict[str, Any]) -> TaskProgress:
        return TaskProgress(
            TaskId.parse(row["task"]),
            row["batch_id"],
            row["run_id"],
            row["at_ms"],
            {t: (r[0], r[1]) for t, r in json.loads(row["ranges"]).items()},
            json.loads(row["offsets"]),
            row["stream_time"],
            row["records"],
            tuple(json.loads(row["tables"])),
            json.loads(row["metrics"]),
            json.loads(row.get("processor_metadata") or "{}"),
            json.loads(row["rewound_to"]) if row.get("rewound_to") else None,
        )


def rewind_txn_id(app: str, task: TaskId) -> str:
    """The Delta ``txn`` app id, in the progress table, whose version is the batch of the
    task's latest rewind row (ops/rewind.py): a local store behind it is restored."""
    return txn_ids.rewind(app, task)


@dataclass(frozen=True)
class History:
    """The last two progress rows of each task that has any (newest first); ``rewound``:
    per task, the batch of its latest rewind row (when read with ``app``; none: absent)."""

    rows: dict[TaskId, list[TaskProgress]]
    rewound: dict[TaskId, int] = field(default_factory=dict)

    def last(self, task: TaskId) -> TaskProgress | None:
        found = self.rows.get(task)
        return found[0] if found else None

    def batch(self, task: TaskId, batch_id: int) -> TaskProgress | None:
        for row in self.rows.get(task, []):
            if row.batch_id == batch_id:
                return row
        return None


def table_writers(warehouse: Warehouse, app: str) -> dict[str, set[int]]:
    """Per table (its path) an app's batches wrote, the sub-topologies whose tasks wrote it,
    from every progress row (a task's last batch names a table only if it wrote to it)."""
    path = warehouse.progress_path(app)
    if not delta_commits.table_exists(path):
        return {}
    rows = delta_commits.open_table(path).to_pyarrow_table(columns=["task", "tables"])
    return _writers(warehouse, rows)


def _writers(warehouse: Warehouse, rows: pa.Table) -> dict[str, set[int]]:
    writers: dict[str, set[int]] = {}
    pairs = set(
        zip(rows.column("task").to_pylist(), rows.column("tables").to_pylist(), strict=True)
    )
    for task, tables in pairs:
        sub = TaskId.parse(task).subtopology
        for name in json.loads(tables):
            writers.setdefault(warehouse.resolve(name), set()).add(sub)
    return writers


# Per progress table path: the files read last by read_all and what they held.
_READ_ALL: dict[str, tuple[list[str], History, dict[str, set[int]]]] = {}


def read_all(warehouse: Warehouse, app: str) -> tuple[History, dict[str, set[int]]]:
    """``read`` of every task and ``table_writers``, from one scan of the table (none when
    it does not exist); MidRewindError while the app is mid-rewind (its tables and progress
    may disagree). The table's rows are those of its data files, which are written
    once under unique names, so a process scans a set of files once: a later call that
    finds the same files answers from memory."""
    refuse_if_mid_rewind(warehouse, app)
    path = warehouse.progress_path(app)
    try:
        table = delta_commits.open_table(path)
    except TableNotFoundError:
        return History({}), {}
    files = sorted(table.file_uris())
    held = _READ_ALL.get(path)
    if held is not None and held[0] == files:
        return held[1], held[2]
    data = table.to_pyarrow_dataset().to_table()
    history, writers = _history(data, None), _writers(warehouse, data)
    _READ_ALL[path] = (files, history, writers)
    return history, writers


def ensure_table(path: str, app: str) -> None:
    if delta_commits.table_exists(path):
        _add_missing_columns(path)
        return
    delta_commits.create_table(
        path,
        SCHEMA,
        [],
        name=f"{app}__progress",
        description=f"lakestate progress of app {app} (format {FORMAT}): a row per task per batch",
    )


def _add_missing_columns(path: str) -> None:
    """Add the columns of SCHEMA a table made by an earlier lakestate lacks (nullable, so
    its rows read as having none); a metadata-only Delta commit, done once."""
    table = delta_commits.open_table(path)
    have = set(table.schema().to_arrow().names)
    missing = [f for f in SCHEMA if f.name not in have]
    if missing:
        table.alter.add_columns([Field(f.name, PrimitiveType("string"), True) for f in missing])
    delta_commits.release(table)


def read(path: str, tasks: list[TaskId] | None = None, app: str | None = None) -> History:
    """The newest two rows of every task (of ``tasks`` only, when given; with ``app`` too,
    only the files that can hold them are read, found by each task's txn version and the
    files' statistics, so a run's start does not read the whole history)."""
    table = delta_commits.open_table(path)
    condition = None
    if tasks and app is not None:
        newest = delta_commits.txn_versions(table, app, tasks)
        condition = pc.field("batch_id") >= max(0, min(newest.values()) - 1)
    data = table.to_pyarrow_dataset().to_table(filter=condition)
    history = _history(data, tasks)
    if tasks and app is not None:
        for task in tasks:
            rewound = delta_commits.txn_version(table, rewind_txn_id(app, task))
            if rewound:
                history.rewound[task] = rewound
    delta_commits.release(table)
    return history


def _history(data: pa.Table, tasks: list[TaskId] | None) -> History:
    rows: dict[TaskId, list[TaskProgress]] = {}
    wanted = None if tasks is None else {str(t) for t in tasks}
    for raw in data.to_pylist():
        if wanted is not None and raw["task"] not in wanted:
            continue
        row = TaskProgress.from_row(raw)
        rows.setdefault(row.task, []).append(row)
    for found in rows.values():
        found.sort(key=lambda r: r.batch_id, reverse=True)
        del found[2:]
    return History(rows)


class FenceMoved(TaskMigratedException):
    """The progress table's version of a fence txn is not the one the run expected:
    ``moved`` maps each such txn id to its version now."""

    def __init__(self, message: str, moved: dict[str, int]) -> None:
        super().__init__(message)
        self.moved = moved


def record(
    path: str,
    app: str,
    rows: list[TaskProgress],
    metadata: dict[str, Any],
    extra_txns: dict[str, int] | None = None,
    fences: Mapping[str, int] | None = None,
) -> int:
    """Commit the rows of one batch, each with its task's txn (and ``extra_txns``); returns
    the table version. TaskMigratedException when another run committed one of these task
    batches first.

    ``fences`` (txn id -> version): the versions the table must hold for those txn ids
    (absent reads as 0), else FenceMoved and nothing is committed; the commit carries them
    too, so a commit of one of them landing meanwhile fails this one ("Concurrent
    transaction", TaskMigratedException). The caller gives them their meaning (an owner
    epoch: ``scaleout/ownership.py``)."""
    table = delta_commits.open_table(path)
    held = delta_commits.txn_versions(table, app, [r.task for r in rows])
    taken = [r for r in rows if held[r.task] >= r.batch_id]
    if taken:
        raise TaskMigratedException(
            f"batch {taken[0].batch_id} of task {taken[0].task} of app {app} was committed by "
            "another run; this run stops without committing"
        )
    fences = dict(fences or {})
    moved = {
        txn: now
        for txn, expected in sorted(fences.items())
        if (now := delta_commits.txn_version(table, txn)) != expected
    }
    if moved:
        txn, now = next(iter(moved.items()))
        raise FenceMoved(
            f"app {app}: fence {txn} is at {now}, not {fences[txn]} as this run planned; "
            "this run stops without committing",
            moved,
        )
    data = pa.Table.from_pylist([r.row() for r in rows], schema=SCHEMA)
    batches = {r.task: r.batch_id for r in rows}
    faults.maybe_fail("progress_checked", min(batches.values()))
    version = delta_commits.append(
        table, data, app, batches, metadata, {**(extra_txns or {}), **fences}
    )
    delta_commits.release(table)
    return version


def now_ms() -> int:
    return int(time.time() * 1000)
