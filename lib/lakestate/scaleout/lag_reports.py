"""What each instance's local state holds: the lag reports in ``<warehouse>/apps/<app>/_instances``.

Every run of an instance appends, at its end, a row per task its state dir holds a store
for (and per task it was assigned, store or not): the batch and the input offsets its
store holds, the task's committed batch and its lag then. The rebalance reads each
instance's newest row per task and recomputes the lag against the offsets committed at
rebalance time (``lags``): what the assignor calls a client's lag. Every run appends a
file, so the rebalance compacts the table to each instance's newest report per task once
it holds many (``compact``). Written and read with delta-rs (no JVM).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, write_deltalake
from deltalake.exceptions import CommitFailedError
from lakestate.checkpoint.batch import GLOBAL_SEPARATOR
from lakestate.io import delta_commits
from lakestate.task_id import TaskId
from lakestate.warehouse import Warehouse

__all__ = [
    "ROLES",
    "Report",
    "compact",
    "lag_of",
    "lags",
    "latest_by_instance",
    "reports_path",
    "write",
]

ROLES = ("active", "warmup", "standby", "none")
#: The number of files at which a rebalance compacts the table (``compact``).
COMPACT_FILES = 64

SCHEMA = pa.schema(
    [
        pa.field("instance", pa.string()),
        pa.field("task", pa.string()),
        pa.field("generation", pa.int64()),
        pa.field("role", pa.string()),
        pa.field("local_batch", pa.int64()),
        pa.field("local_offsets", pa.string()),  # JSON {input topic: next offset}
        pa.field("committed_batch", pa.int64()),
        pa.field("lag", pa.int64()),
        pa.field("capacity", pa.int64()),
        pa.field("at_ms", pa.int64()),
        pa.field("run_id", pa.string()),
    ]
)


@dataclass(frozen=True)
class Report:
    """One task's local state on one instance at the end of a run. ``local_batch`` and
    ``local_offsets`` are None when the instance holds no store for the task; ``lag`` (the
    sum over the task's inputs of committed offset - local offset at report time) then too.
    ``generation``: the generation the run ran under (0: none); ``role``: the task's role
    for the instance in it ("active", "warmup", "standby" or "none")."""

    instance: str
    task: TaskId
    generation: int
    role: str
    local_batch: int | None
    local_offsets: dict[str, int] | None
    committed_batch: int
    lag: int | None
    capacity: int
    at_ms: int
    run_id: str

    def row(self) -> dict[str, Any]:
        return {
            "instance": self.instance,
            "task": str(self.task),
            "generation": self.generation,
            "role": self.role,
            "local_batch": self.local_batch,
            "local_offsets": None
            if self.local_offsets is None
            else json.dumps(dict(sorted(self.local_offsets.items()))),
            "committed_batch": self.committed_batch,
            "lag": self.lag,
            "capacity": self.capacity,
            "at_ms": self.at_ms,
            "run_id": self.run_id,
        }

    @staticmethod
    def from_row(row: Mapping[str, Any]) -> Report:
        offsets = row["local_offsets"]
        return Report(
            row["instance"],
            TaskId.parse(row["task"]),
            row["generation"],
            row["role"],
            row["local_batch"],
            None if offsets is None else json.loads(offsets),
            row["committed_batch"],
            row["lag"],
            row["capacity"],
            row["at_ms"],
            row["run_id"],
        )


def reports_path(warehouse: Warehouse, app: str) -> str:
    return warehouse.app_path(app) + "/_instances"


def write(warehouse: Warehouse, app: str, rows: Iterable[Report]) -> int | None:
    """Append ``rows`` in one commit (creating the table first); returns the table
    version (None: no rows, nothing written). ValueError for a row with an unknown role."""
    rows = list(rows)
    if not rows:
        return None
    for r in rows:
        if r.role not in ROLES:
            raise ValueError(f"report of task {r.task} on {r.instance}: unknown role {r.role!r}")
    path = reports_path(warehouse, app)
    delta_commits.create_table(
        path,
        SCHEMA,
        [],
        name=f"{app}__instances",
        description=f"lakestate lag reports of app {app}'s instances: a row per task per run",
    )
    data = pa.Table.from_pylist([r.row() for r in rows], schema=SCHEMA)
    metadata = {"app": app, "reports": len(rows), "run_id": rows[0].run_id}
    # Appends of several instances never conflict: no txn (a report is not a batch).
    table = delta_commits.open_table(path)
    return delta_commits.append(table, data, app, {}, metadata)


def latest_by_instance(warehouse: Warehouse, app: str) -> dict[str, dict[TaskId, Report]]:
    """Each instance's newest report per task (by ``at_ms``, then by commit order); {}
    when no instance reported yet."""
    path = reports_path(warehouse, app)
    if not delta_commits.table_exists(path):
        return {}
    return _newest(delta_commits.open_table(path))


def compact(warehouse: Warehouse, app: str, min_files: int | None = None) -> bool:
    """Rewrite the table as each instance's newest report per task, in one commit, once it
    has ``min_files`` (default ``COMPACT_FILES``) files or more (every run appends one:
    reading them all would slow every rebalance down; 1,000 files take 2 s to read at load
    18); older reports stay readable by time travel until VACUUM.
    Reports appended meanwhile are kept (the commit removes only the files it read).
    Returns whether it compacted; False too when a concurrent compaction won."""
    path = reports_path(warehouse, app)
    if not delta_commits.table_exists(path):
        return False
    table = delta_commits.open_table(path)
    if len(table.file_uris()) < (COMPACT_FILES if min_files is None else min_files):
        return False
    rows = [r.row() for by_task in _newest(table).values() for r in by_task.values()]
    metadata = {"app": app, "compaction": len(rows)}
    try:
        write_deltalake(
            table,
            pa.Table.from_pylist(rows, schema=SCHEMA),
            mode="overwrite",
            commit_properties=CommitProperties(
                custom_metadata={"userMetadata": json.dumps(metadata, sort_keys=True)}
            ),
        )
    except CommitFailedError:
        return False
    return True


def _newest(table: DeltaTable) -> dict[str, dict[TaskId, Report]]:
    data = table.to_pyarrow_dataset().to_table()
    newest: dict[str, dict[TaskId, Report]] = {}
    for raw in data.to_pylist():
        report = Report.from_row(raw)
        held = newest.setdefault(report.instance, {}).get(report.task)
        if held is None or report.at_ms >= held.at_ms:
            newest[report.instance][report.task] = report
    return newest


def lag_of(local_offsets: Mapping[str, int] | None, committed: Mapping[str, int]) -> int | None:
    """A local store's lag behind the committed offsets ``committed`` (a progress row's
    ``offsets``): the sum over the task's input topics of committed - local (a global
    topic's partitions, keyed ``topic@p``, are every task's and do not count). None: no
    store, or a store ahead of Delta on some input (after a rewind: unusable, restored)."""
    if local_offsets is None:
        return None
    lag = 0
    for key, offset in committed.items():
        if GLOBAL_SEPARATOR in key:
            continue
        held = local_offsets.get(key, 0)
        if held > offset:
            return None
        lag += offset - held
    return lag


def lags(
    reports: Mapping[str, Mapping[TaskId, Report]],
    committed_offsets: Mapping[TaskId, Mapping[str, int]],
) -> dict[str, dict[TaskId, int | None]]:
    """Per instance, per task it reported, its lag now (``lag_of`` against
    ``committed_offsets``: per task the offsets of its last complete batch; a task absent
    there has committed nothing): what ``ClientState.lags`` takes."""
    return {
        instance: {
            task: lag_of(r.local_offsets, committed_offsets.get(task, {}))
            for task, r in by_task.items()
        }
        for instance, by_task in reports.items()
    }
