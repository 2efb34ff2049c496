"""The plan of a rewind (ops/rewind.py), read before anything changes: the point of the
app's history to go back to, each task's target there, and each table's restore version.

A table is restored to its latest version that holds only batches at or before the target:
found by walking its commits back from the newest and reading their batch txns. The plan
is refused (``RewindRefused``) when a later commit is another writer's, when that
version's files or log are gone, or when no point can be restored (writers of disjoint task
sets interleaved their appends: an earlier point is tried first)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from deltalake import DeltaTable
from lakestate.checkpoint import progress
from lakestate.checkpoint.changelog import compaction_txn_id
from lakestate.checkpoint.progress import TaskProgress
from lakestate.io import delta_commits, delta_log, txn_ids
from lakestate.ops.rewind_history import AppHistory, RewindRefused
from lakestate.task_id import TaskId
from lakestate.warehouse import Warehouse

__all__ = [
    "RewindPlan",
    "TableRestore",
    "TaskTarget",
    "app_tables",
    "is_foreign",
    "plan_rewind",
]


@dataclass(frozen=True)
class TaskTarget:
    """One task: the batch whose state it goes back to (0: none), its batch now, the id of
    its rewind row, and what that row carries."""

    task: TaskId
    batch: int
    current: int
    rewind_batch: int
    offsets: dict[str, int] = field(default_factory=dict)
    stream_time: int | None = None
    processor_metadata: dict[str, int] = field(default_factory=dict)
    metrics: dict[str, Any] = field(default_factory=dict)  # the totals as of ``batch``


@dataclass(frozen=True)
class TableRestore:
    """One table restored: its path (relative to the warehouse), its version when planned,
    the version restored, and what the RESTORE commit records besides the batch txns: a
    topic's end offsets at that version, a changelog's compaction txns there."""

    path: str
    current_version: int
    version: int
    ends: dict[str, int] | None = None
    compaction: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class RewindPlan:
    """What a rewind does: the target (``target_text``, the progress ``progress_version``
    of the point), each task's target, each table's restore. ``noop``: the app is already
    there (nothing to do)."""

    app: str
    target_text: str
    progress_version: int
    tasks: tuple[TaskTarget, ...]
    tables: tuple[TableRestore, ...]
    noop: bool = False

    def describe(self) -> list[str]:
        """The plan in lines a person reads before confirming."""
        if self.noop:
            return [f"app {self.app} is already at {self.target_text}: nothing to rewind"]
        lines = [f"rewind app {self.app} to {self.target_text}:"]
        for t in self.tasks:
            back = f"batch {t.batch}" if t.batch else "before its first batch"
            lines.append(
                f"  task {t.task}: from batch {t.current} back to {back} "
                f"(offsets {_offsets_text(t.offsets)}; recorded as batch {t.rewind_batch})"
            )
        for table in self.tables:
            lines.append(
                f"  restore {table.path}: version {table.current_version} -> {table.version}"
            )
        if not self.tables:
            lines.append("  no table holds a batch past the target")
        return lines

    def to_json(self) -> dict[str, Any]:
        return {
            "app": self.app,
            "target": self.target_text,
            "progress_version": self.progress_version,
            "noop": self.noop,
            "tasks": [
                {
                    "task": str(t.task),
                    "batch": t.batch,
                    "current": t.current,
                    "rewind_batch": t.rewind_batch,
                    "offsets": t.offsets,
                    "stream_time": t.stream_time,
                    "processor_metadata": t.processor_metadata,
                    "metrics": t.metrics,
                }
                for t in self.tasks
            ],
            "tables": [
                {
                    "path": r.path,
                    "current_version": r.current_version,
                    "version": r.version,
                    "ends": r.ends,
                    "compaction": r.compaction,
                }
                for r in self.tables
            ],
        }

    @staticmethod
    def from_json(data: dict[str, Any]) -> RewindPlan:
        return RewindPlan(
            data["app"],
            data["target"],
            data["progress_version"],
            tuple(
                TaskTarget(
                    TaskId.parse(t["task"]),
                    t["batch"],
                    t["current"],
                    t["rewind_batch"],
                    dict(t["offsets"]),
                    t["stream_time"],
                    dict(t["processor_metadata"]),
                    dict(t["metrics"]),
                )
                for t in data["tasks"]
            ),
            tuple(
                TableRestore(
                    r["path"], r["current_version"], r["version"], r["ends"], dict(r["compaction"])
                )
                for r in data["tables"]
            ),
            data["noop"],
        )


class _Interleaved(Exception):
    """No version of a table holds exactly the point's batches."""


def plan_rewind(
    warehouse: Warehouse,
    app: str,
    *,
    to_batch: int | None = None,
    before_stream_time: int | None = None,
) -> RewindPlan:
    """The plan of a rewind (reads only). RewindRefused when it cannot be done."""
    target_text, holds = _target(to_batch, before_stream_time)
    history = AppHistory.read(warehouse, app)
    if not history.rows:
        return RewindPlan(app, target_text, -1, (), (), noop=True)
    head = history.head()
    tables = app_tables(warehouse, app)
    interleaved: list[str] = []
    for version, state in history.points(
        lambda s: all(holds(history.row(t, b)) for t, b in s.items())
    ):
        if all(history.canon(t, state.get(t, 0)) == history.canon(t, head[t]) for t in head):
            return RewindPlan(app, target_text, version, (), (), noop=True)
        targets = {t: state.get(t, 0) for t in head}
        try:
            restores = [
                r
                for path in tables
                if (r := _table_restore(warehouse, app, path, targets)) is not None
            ]
        except _Interleaved as exc:
            interleaved.append(str(exc))
            continue
        if interleaved:
            target_text += (
                " (the latest point every table can be restored to: a later one holds "
                f"batches on both sides of it in {interleaved[0]})"
            )
        tasks = _task_targets(history, head, targets)
        return RewindPlan(app, target_text, version, tasks, tuple(restores))
    raise RewindRefused(f"app {app}: no point of its history can be restored ({interleaved})")


def _target(
    to_batch: int | None, before_stream_time: int | None
) -> tuple[str, Callable[[TaskProgress | None], bool]]:
    """The target as a person reads it, and whether a task's row (None: no batch) is at or
    before it."""
    if to_batch is not None:

        def holds(row: TaskProgress | None) -> bool:
            return row is None or row.batch_id <= to_batch

        return f"batch {to_batch}", holds
    assert before_stream_time is not None
    when = datetime.fromtimestamp(before_stream_time / 1000, UTC)

    def before(row: TaskProgress | None) -> bool:
        return row is None or row.stream_time is None or row.stream_time < before_stream_time

    return f"stream time before {when.isoformat(timespec='milliseconds')}", before


def _task_targets(
    history: AppHistory, head: dict[TaskId, int], targets: dict[TaskId, int]
) -> tuple[TaskTarget, ...]:
    """Each task's target: its batch there and what its rewind row (a batch id past every
    one it used) carries, taken from that batch's row."""
    found = []
    for task in sorted(head):
        row = history.row(task, targets[task])
        found.append(
            TaskTarget(
                task,
                targets[task],
                head[task],
                history.last_batch(task) + 1,
                dict(row.offsets) if row else {},
                row.stream_time if row else None,
                dict(row.processor_metadata) if row else {},
                dict(row.metrics) if row else {},
            )
        )
    return tuple(found)


def _offsets_text(offsets: dict[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(offsets.items())) or "from the start"


def app_tables(warehouse: Warehouse, app: str) -> list[str]:
    """Every table the app writes: its changelogs, and the topics its batches wrote."""
    paths = {t.path for t in warehouse.list_state_tables(app)}
    paths |= {p for p in progress.table_writers(warehouse, app) if delta_commits.table_exists(p)}
    return sorted(paths)


def _table_restore(
    warehouse: Warehouse, app: str, path: str, targets: dict[TaskId, int]
) -> TableRestore | None:
    """The restore of one table to its latest version holding only batches at or before
    ``targets`` (None: it holds none past them)."""
    table = delta_commits.open_table(path)
    current = table.version()
    pending = {
        t
        for t, b in targets.items()
        if (table.transaction_version(delta_commits.txn_app_id(app, t)) or 0) > b
    }
    if not pending:
        return None
    name = warehouse.relative(path)
    found = _restore_version(warehouse, app, path, current, targets, pending)
    if found is None:
        return None
    restore_to, foreign = found
    others = sorted(v for v in foreign if v > restore_to)
    if others:
        raise RewindRefused(
            f"{name}: version {others[0]} (of {len(others)} after the target) was written by "
            f"another writer, not app {app}; restoring to version {restore_to} would drop its "
            "records. Move them elsewhere first (or choose a later target)"
        )
    old = _readable_version(name, path, restore_to)
    ends = None
    if path.startswith(warehouse.topics_dir().rstrip("/") + "/"):
        ends = _end_offsets(old)
    compaction = {}
    if path in {t.path for t in warehouse.list_state_tables(app)}:
        for task in targets:
            then = old.transaction_version(compaction_txn_id(app, task)) or 0
            if (table.transaction_version(compaction_txn_id(app, task)) or 0) != then:
                compaction[str(task)] = then
    return TableRestore(name, current, restore_to, ends, compaction)


def _restore_version(
    warehouse: Warehouse,
    app: str,
    path: str,
    current: int,
    targets: dict[TaskId, int],
    pending: set[TaskId],
) -> tuple[int, list[int]] | None:
    """The version before the first commit carrying a batch past its task's target, and
    the versions another writer committed (None: no commit is past the targets). Walks back
    from version ``current`` until every task in ``pending`` (those with a batch past its
    target) has shown a commit at or before it (per task, batches only grow with the
    versions). _Interleaved when a commit holds batches on both sides of the targets."""
    name = warehouse.relative(path)
    prefix = txn_ids.batch_prefix(app)
    past: list[int] = []
    foreign: list[int] = []
    within_above: int | None = None
    version = current
    while version >= 0 and pending:
        commit = delta_log.commit_of(path, version)
        if commit is None:
            raise RewindRefused(
                f"{name}: the log of version {version} is gone (Delta log cleanup): it cannot "
                "be rewound that far"
            )
        batches = {
            TaskId.parse(i[len(prefix) :]): b for i, b in commit.txns if i.startswith(prefix)
        }
        if batches:
            beyond = [b > targets.get(t, 0) for t, b in batches.items()]
            if all(beyond):
                if within_above is not None:
                    raise _Interleaved(f"{name} version {within_above}")
                past.append(version)
            elif any(beyond):
                raise _Interleaved(f"{name} version {version}")
            else:
                within_above = version if within_above is None else within_above
                pending -= set(batches)
        elif is_foreign(commit, app):
            foreign.append(version)
        version -= 1
    if not past:
        return None
    return min(past) - 1, foreign


def _readable_version(name: str, path: str, version: int) -> DeltaTable:
    """The table at ``version``; RewindRefused when it cannot be read or its files were
    vacuumed."""
    try:
        old = delta_commits.open_table(path, version)
    except Exception as exc:
        raise RewindRefused(f"{name}: version {version} cannot be read ({exc})") from None
    missing = delta_commits.missing_files(old)
    if missing:
        raise RewindRefused(
            f"{name}: {len(missing)} files of version {version} were vacuumed (e.g. "
            f"{missing[0]}): it cannot be restored. VACUUM keeps the versions of its retention "
            "(lakestate maintain --retention-hours)"
        )
    return old


def is_foreign(commit: delta_log.Commit, app: str) -> bool:
    """Whether a commit changed data and is not this app's (no batch or compaction txn of
    it): another writer's. OPTIMIZE and the table's creation change no data."""
    ours = (txn_ids.batch_prefix(app), txn_ids.compaction_prefix(app))
    return commit.changes_data and not any(i.startswith(ours) for i, _ in commit.txns)


def _end_offsets(table: DeltaTable) -> dict[str, int]:
    """A log table's end offsets (partition -> max offset + 1) at the version opened."""
    columns = table.to_pyarrow_table(columns=["partition", "offset"])
    if not columns.num_rows:
        return {}
    found = columns.group_by("partition").aggregate([("offset", "max")])
    return {
        str(p): last + 1
        for p, last in zip(
            found.column("partition").to_pylist(),
            found.column("offset_max").to_pylist(),
            strict=True,
        )
    }
