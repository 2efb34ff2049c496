"""Where tasks stand, read from the progress table and the tables' txns (the run's first
step, *stand*; no local store is opened): a task batch is complete when every table its
progress row names holds it; a task's committed batch is its last complete one, and an
incomplete last batch is replayed first. ``app_pin`` pins every task of an app at its last
complete batch (or an earlier one) for reading state.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from deltalake import DeltaTable
from lakestate.checkpoint import progress
from lakestate.checkpoint.batch import TaskCheckpoint, TaskPlan, split_global_key
from lakestate.checkpoint.layout import AppLayout
from lakestate.checkpoint.progress import TaskProgress
from lakestate.checkpoint.rewind_intent import refuse_if_mid_rewind
from lakestate.io import delta_commits
from lakestate.io.kafka import KafkaCluster, KafkaTopic
from lakestate.task_id import TaskId
from lakestate.warehouse import Warehouse

KAFKA_SCHEME = "kafka://"


@dataclass(frozen=True)
class Recovered:
    committed: dict[TaskId, TaskCheckpoint]
    replays: list[TaskPlan]
    #: per task, the batch of its latest rewind row (absent: never rewound)
    rewound: dict[TaskId, int] = field(default_factory=dict)


def committed_of(row: TaskProgress | None) -> TaskCheckpoint:
    if row is None:
        return TaskCheckpoint()
    return TaskCheckpoint(
        row.batch_id,
        dict(row.offsets),
        row.stream_time,
        row.processor_metadata,
        row.metrics,
        row.run_id,
    )


def is_complete(
    warehouse: Warehouse,
    app: str,
    row: TaskProgress,
    tables: dict[str, object] | None = None,
    cluster: KafkaCluster | None = None,
) -> bool:
    """Whether every table a task batch writes holds it (``tables``: opened tables, by path,
    reused across calls). A Kafka topic it writes (named ``kafka://...``) is asked through
    ``cluster``, the app's; without one (a reader of state, which has no app config) it is
    not checked: the batch's state is in its changelogs, which are."""
    for name in row.tables:
        if name.startswith(KAFKA_SCHEME):
            if cluster is not None:
                sink = KafkaTopic(cluster, name.rsplit("/", 1)[1])
                if sink.holds(app, row.task) < row.batch_id:
                    return False
            continue
        path = warehouse.resolve(name)
        table = None if tables is None else tables.get(path)
        if table is None:
            table = delta_commits.open_table(path)
            if tables is not None:
                tables[path] = table
        if delta_commits.txn_versions(table, app, [row.task])[row.task] < row.batch_id:
            return False
    return True


def where_tasks_stand(layout: AppLayout, tasks: list[TaskId]) -> Recovered:
    """Each task's committed batch, and the incomplete batches to replay."""
    app = layout.app.name
    refuse_if_mid_rewind(layout.warehouse, app)
    history = progress.read(layout.progress_path, tasks, app)
    committed: dict[TaskId, TaskCheckpoint] = {}
    replays: list[TaskPlan] = []
    tables: dict[str, object] = {}
    for task in tasks:
        last = history.last(task)
        if last is None or is_complete(layout.warehouse, app, last, tables, layout.cluster):
            committed[task] = committed_of(last)
            continue
        before = history.batch(task, last.batch_id - 1)
        committed[task] = committed_of(before)
        ranges = _replay_ranges(last, layout.global_topics)
        replays.append(TaskPlan(task, last.batch_id, ranges, last.run_id))
    for table in tables.values():
        delta_commits.release(table)
    return Recovered(committed, replays, dict(history.rewound))


def _replay_ranges(row: TaskProgress, global_topics: tuple[str, ...]) -> dict[str, tuple[int, int]]:
    """The ranges of a batch to replay: the recorded ones, and an empty range at the
    recorded offset for each global topic partition the batch read nothing of (its global
    store already stood there). The runner reads every global range from where the task's
    local store stands (``runner._from_global_starts``): a store restored since holds no
    global data, and must read those partitions again too, up to where the batch saw them."""
    ranges = dict(row.ranges)
    for key, offset in row.offsets.items():
        if key not in ranges and split_global_key(key, global_topics):
            ranges[key] = (offset, offset)
    return ranges


@dataclass(frozen=True)
class AppPin:
    """The batch each task of an app is read at, each task's last progress row, per table
    the sub-topologies whose tasks wrote it (``progress.table_writers``), and the tables
    opened to check the batches complete (by path, at the versions checked)."""

    batches: dict[TaskId, int]
    rows: dict[TaskId, progress.TaskProgress]
    writers: dict[str, set[int]]
    tables: dict[str, DeltaTable] = field(default_factory=dict)


def app_pin(warehouse: Warehouse, app: str, batch: int | None = None) -> AppPin:
    """Each task at its last complete batch, or at ``batch`` if it is further."""
    history, writers = progress.read_all(warehouse, app)
    batches: dict[TaskId, int] = {}
    rows: dict[TaskId, progress.TaskProgress] = {}
    opened: dict[str, DeltaTable] = {}  # tables opened once for every task's completeness
    for task, found in history.rows.items():
        complete = next((r for r in found if is_complete(warehouse, app, r, opened)), None)
        if complete is None:
            continue
        rows[task] = complete
        batches[task] = complete.batch_id if batch is None else min(batch, complete.batch_id)
    if batch is not None and batches and max(r.batch_id for r in rows.values()) < batch:
        raise ValueError(
            f"app {app} has no committed batch {batch} (its tasks are at "
            + ", ".join(f"{t}: {b}" for t, b in sorted(batches.items()))
            + ")"
        )
    return AppPin(batches, rows, writers, opened)
