"""Rewind: an app's state and sinks back to an earlier point of its history, through Delta
time travel, so that its next runs reprocess from there (docs/architecture.md, "Rewind").

**The app's line.** Each task numbers its batches; each progress-table commit with this
app's ``txn`` actions is a *point* of the app's history, at which each task stands at its
last batch committed so far. A rewind appends, per task, a *rewind row* with a new batch id
``R`` (ids stay monotonic: Delta's RESTORE keeps the later ``txn`` actions, so an old id
would be fenced as already held) and ``rewound_to = {"batch": b}``: the task is back in the
state of its batch ``b``. Batches strictly between ``b`` and ``R`` are off the line. A
task's last batch that is incomplete (its progress row committed, some table not) is off
the line too: the rewind supersedes its replay.

**The target.** ``to_batch=N``: the latest point on the line at which every task's batch is
at most ``N``. ``before_stream_time=T``: the latest point at which no task's stream time
has reached ``T`` (Airflow's "the batch before the interval"). The state of a task at a
point is that of its batch there (0: none, from the beginning).

**The tables.** Every table the app writes (changelogs, sink and repartition topics) is
restored to its latest version that holds only batches at or before the target: the
version before the first commit carrying a batch ``txn`` past a task's target batch.
Refused before anything changes when a table has commits after that version that are not
this app's (another writer: a shared sink, ``lakestate produce``), when the files or the
log of that version are gone (VACUUM, log cleanup), or when no version holds exactly the
target in some table (writers of disjoint task sets interleaved: an earlier point is
tried). Compaction commits and OPTIMIZE (no data change) are this app's.

**Crash safety.** Under the app's instance lock: (1) the intent, with the whole plan, is
written atomically (``rewind_intent``); from then on runs and readers refuse the app;
(2) the rewind rows are committed to the progress table with each task's ``txn`` ``R``
(the fence: a run on another instance that commits a batch first makes this step fail and
the rewind stops having changed nothing; one that commits later is refused), plus a
``progress.rewind_txn_id`` txn per task, which makes every local store behind ``R`` restore
from the changelogs (``recovery``); (3) each table is restored to its recorded version, the
RESTORE commit carrying each task's ``txn`` ``R`` (a batch still appending from before the
rewind is then skipped or conflicts) and, for a topic, its end offsets at that version;
(4) the intent is removed. Each step is skipped when it is found done, so a rerun after a
crash anywhere completes the rewind (restoring a table twice is harmless, and is not done).
"""

from __future__ import annotations

import contextlib
import json
import os
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from deltalake import CommitProperties, DeltaTable, Transaction
from lakestate import console
from lakestate.checkpoint import faults, progress, rewind_intent
from lakestate.checkpoint.changelog import compaction_txn_id
from lakestate.checkpoint.progress import TaskProgress, rewind_txn_id
from lakestate.checkpoint.standing import is_complete
from lakestate.errors import StreamsException, TaskMigratedException
from lakestate.io import delta_commits, delta_log, topics, txn_ids
from lakestate.io.logtable import ENDS_METADATA_KEY
from lakestate.ops.table_lock import table_lock
from lakestate.task_id import TaskId
from lakestate.warehouse import Warehouse

__all__ = [
    "FAULT_AFTER_INTENT",
    "FAULT_AFTER_PROGRESS",
    "FAULT_AFTER_TABLE",
    "METADATA_KEY",
    "RewindPlan",
    "RewindRefused",
    "RewindResult",
    "TableRestore",
    "TaskTarget",
    "plan_rewind",
    "rewind",
]

#: Fault points (``faults.maybe_fail``): after the intent is written (number: 0); after the
#: progress commit (0); after each table's restore (number: the table's place, from 1).
FAULT_AFTER_INTENT = "rewind:after_intent"
FAULT_AFTER_PROGRESS = "rewind:after_progress"
FAULT_AFTER_TABLE = "rewind:after_table"
#: The key of a rewind's commits' ``userMetadata``.
METADATA_KEY = "lakestate.rewind"


class RewindRefused(StreamsException):
    """The rewind cannot be done as asked; nothing was changed."""


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


@dataclass(frozen=True)
class RewindResult:
    """What ``rewind`` did: the plan it carried out (``noop``: none was needed; ``declined``:
    the confirmation said no, nothing changed); ``resumed``: the plan of an interrupted
    rewind that this call completed (then ``plan`` is the one asked for, if any)."""

    app: str
    plan: RewindPlan | None
    noop: bool = False
    declined: bool = False
    resumed: RewindPlan | None = None


def rewind(
    warehouse: Warehouse | str | None,
    app: str,
    *,
    to_batch: int | None = None,
    before_stream_time: int | None = None,
    resume: bool = False,
    state_dir: str | None = None,
    lock_wait_s: float = 0.0,
    confirm: Callable[[RewindPlan], bool] | None = None,
    say: Callable[[str], None] = print,
) -> RewindResult:
    """Rewind ``app`` (its name) to ``to_batch`` (the latest point at which no task is past
    its batch N) or ``before_stream_time`` (epoch ms: the latest point at which no task's
    stream time has reached it): restore its tables and record its tasks' target offsets,
    so that its next runs reprocess from there. Exactly one of the two, unless ``resume``
    (complete an interrupted rewind only). An interrupted rewind is always completed first.

    Holds the app's lock on this instance (``state_dir``: its state directory), waiting up
    to ``lock_wait_s`` seconds for a run holding it (``math.inf``: as long as it takes);
    runs of the app on other instances must be stopped: they are fenced, not waited for. ``confirm``
    is called with the plan before anything changes (False: nothing is done). Raises
    RewindRefused before changing anything when it cannot be done; returns ``noop`` when
    the app is already at the target. Crash-safe: after a crash, runs and readers of the
    app refuse until ``rewind(..., resume=True)`` (or the same call) completes it."""
    from lakestate.checkpoint.task_dir import state_dir_of
    from lakestate.runtime.run_lock import instance_lock

    if resume and (to_batch is not None or before_stream_time is not None):
        raise ValueError("resume completes the interrupted rewind: give no target with it")
    if not resume and (to_batch is None) == (before_stream_time is None):
        raise ValueError("give exactly one of to_batch and before_stream_time")
    if to_batch is not None and to_batch < 0:
        raise ValueError(f"to_batch must be at least 0, got {to_batch}")
    wh = warehouse if isinstance(warehouse, Warehouse) else Warehouse(warehouse)
    if app not in wh.list_apps():
        known = ", ".join(wh.list_apps()) or "none"
        raise ValueError(f"no app {app!r} in warehouse {wh.root} (apps: {known})")
    with instance_lock(state_dir_of(state_dir), app, lock_wait_s, say) as held:
        if not held:
            raise StreamsException(
                f"app {app} is running on this instance: it was not rewound (wait for the run "
                "to end, or give the rewind a lock wait)"
            )
        # Every table the app writes stays locked until the rewind is done: no maintenance
        # rewrite and no append on this machine (a produce into a sink, say) comes between
        # the plan's checks and the restores.
        with _tables_locked(wh, app):
            return _rewind_locked(wh, app, to_batch, before_stream_time, resume, confirm, say)


def _rewind_locked(
    wh: Warehouse,
    app: str,
    to_batch: int | None,
    before_stream_time: int | None,
    resume: bool,
    confirm: Callable[[RewindPlan], bool] | None,
    say: Callable[[str], None],
) -> RewindResult:
    resumed = None
    intent = rewind_intent.read(wh, app)
    if intent is not None:
        resumed = RewindPlan.from_json(intent["plan"])
        say(f"completing the interrupted rewind of app {app} to {resumed.target_text}")
        _carry_out(wh, resumed, say)
    elif resume:
        say(f"app {app} is not mid-rewind: nothing to resume")
    if resume:
        return RewindResult(app, None, noop=resumed is None, resumed=resumed)
    plan = plan_rewind(wh, app, to_batch=to_batch, before_stream_time=before_stream_time)
    if plan.noop:
        for line in plan.describe():
            say(line)
        return RewindResult(app, plan, noop=True, resumed=resumed)
    if confirm is not None and not confirm(plan):
        return RewindResult(app, plan, declined=True, resumed=resumed)
    rewind_intent.write(
        wh,
        app,
        {
            "plan": plan.to_json(),
            "target_text": plan.target_text,
            "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
        },
    )
    faults.maybe_fail(FAULT_AFTER_INTENT, 0)
    _carry_out(wh, plan, say)
    return RewindResult(app, plan, resumed=resumed)


@contextlib.contextmanager
def _tables_locked(warehouse: Warehouse, app: str) -> Iterator[None]:
    """Hold the maintenance lock of every table the app writes, and a topic's append lock
    (in path order, each table's maintenance lock first, as compaction takes them)."""
    prefix = warehouse.topics_dir().rstrip("/") + "/"
    with contextlib.ExitStack() as stack:
        for path in _app_tables(warehouse, app):
            stack.enter_context(table_lock(path))
            if path.startswith(prefix):
                stack.enter_context(topics.topic(warehouse, path[len(prefix) :]).append_lock())
        yield


# -- planning -------------------------------------------------------------------------------


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
    if to_batch is not None:
        target_text = f"batch {to_batch}"

        def holds(row: TaskProgress | None) -> bool:
            return row is None or row.batch_id <= to_batch
    else:
        assert before_stream_time is not None
        when = datetime.fromtimestamp(before_stream_time / 1000, UTC)
        target_text = f"stream time before {when.isoformat(timespec='milliseconds')}"

        def holds(row: TaskProgress | None) -> bool:
            return row is None or row.stream_time is None or row.stream_time < before_stream_time

    history = _History.read(warehouse, app)
    if not history.rows:
        return RewindPlan(app, target_text, -1, (), (), noop=True)
    head = history.head()
    tables = _app_tables(warehouse, app)
    interleaved: list[str] = []
    for version, state in history.points(
        lambda s: all(holds(history.row(t, b)) for t, b in s.items())
    ):
        if all(history.canon(t, state.get(t, 0)) == history.canon(t, head[t]) for t in head):
            return RewindPlan(app, target_text, version, (), (), noop=True)
        targets = {t: state.get(t, 0) for t in head}
        rewind_batches = {t: history.last_batch(t) + 1 for t in head}
        try:
            restores = [
                r
                for path in tables
                if (r := _table_restore(warehouse, app, path, targets)) is not None
            ]
        except _Interleaved as exc:
            interleaved.append(str(exc))
            continue
        tasks = []
        for task in sorted(head):
            row = history.row(task, targets[task])
            tasks.append(
                TaskTarget(
                    task,
                    targets[task],
                    head[task],
                    rewind_batches[task],
                    dict(row.offsets) if row else {},
                    row.stream_time if row else None,
                    dict(row.processor_metadata) if row else {},
                    dict(row.metrics) if row else {},
                )
            )
        if interleaved:
            target_text += (
                " (the latest point every table can be restored to: a later one holds "
                f"batches on both sides of it in {interleaved[0]})"
            )
        return RewindPlan(app, target_text, version, tuple(tasks), tuple(restores))
    raise RewindRefused(f"app {app}: no point of its history can be restored ({interleaved})")


def _offsets_text(offsets: dict[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(offsets.items())) or "from the start"


class _History:
    """An app's progress rows and the order of its points (from the progress table's log)."""

    def __init__(
        self, warehouse: Warehouse, app: str, rows: dict[tuple[TaskId, int], TaskProgress]
    ):
        self.warehouse = warehouse
        self.app = app
        self.rows = rows
        by_task: dict[TaskId, list[int]] = {}
        for task, batch in rows:
            by_task.setdefault(task, []).append(batch)
        # Off the line: batches strictly inside a rewind's (target, rewind batch).
        gaps = {
            task: [
                (r.rewound_to["batch"], r.batch_id)
                for (t, _), r in rows.items()
                if t == task and r.is_rewind
            ]
            for task in by_task
        }
        self.line: dict[TaskId, list[int]] = {}
        opened: dict[str, object] = {}
        for task, batches in by_task.items():
            line = sorted(b for b in batches if not any(lo < b < hi for lo, hi in gaps[task]))
            # An incomplete last batch (a crash mid-commit) is superseded, not replayed.
            if line and not is_complete(warehouse, app, rows[(task, line[-1])], opened):
                line.pop()
            self.line[task] = line
        self._on_line = {(t, b) for t, line in self.line.items() for b in line}

    @staticmethod
    def read(warehouse: Warehouse, app: str) -> _History:
        path = warehouse.progress_path(app)
        if not delta_commits.table_exists(path):
            return _History(warehouse, app, {})
        data = delta_commits.open_table(path).to_pyarrow_table()
        rows = {}
        for raw in data.to_pylist():
            row = TaskProgress.from_row(raw)
            rows[(row.task, row.batch_id)] = row
        return _History(warehouse, app, rows)

    def row(self, task: TaskId, batch: int) -> TaskProgress | None:
        return self.rows.get((task, batch)) if batch else None

    def head(self) -> dict[TaskId, int]:
        """Each task's last batch on the line (0: none)."""
        return {t: (line[-1] if line else 0) for t, line in self.line.items()}

    def last_batch(self, task: TaskId) -> int:
        """The task's highest batch id anywhere (on the line or not)."""
        return max(b for t, b in self.rows if t == task)

    def canon(self, task: TaskId, batch: int) -> int:
        """The batch whose state ``batch`` of ``task`` is (a rewind row's: its target's)."""
        row = self.row(task, batch)
        while row is not None and row.is_rewind:
            batch = row.rewound_to["batch"]
            row = self.row(task, batch)
        return batch

    def points(
        self, holds: Callable[[dict[TaskId, int]], bool]
    ) -> Iterator[tuple[int, dict[TaskId, int]]]:
        """The points at which ``holds(state)`` (newest first; it holds at every point before
        one where it holds): (progress version, each task's batch there). Walks the
        progress table's commits back from its newest; the last is the beginning (every
        task at 0). RewindRefused when the log needed was cleaned up."""
        prefix = txn_ids.batch_prefix(self.app)
        path = self.warehouse.progress_path(self.app)
        log = delta_log.local_log(path)
        if log is None:
            raise RewindRefused(f"rewind needs a local warehouse, not {self.warehouse.root}")
        stacks = {t: list(line) for t, line in self.line.items()}
        versions = delta_log.versions(log)
        found = False
        first = None
        for index, version in enumerate(versions):
            commit = delta_log.read_commit(log, version)
            expected = versions[0] - index
            if commit is None or version != expected:
                raise RewindRefused(
                    f"{path}: the log of version {expected} is gone (Delta log cleanup), so "
                    "the app's history before it cannot be rewound to"
                )
            pairs = [
                (TaskId.parse(app_id[len(prefix) :]), batch)
                for app_id, batch in commit.txns
                if app_id.startswith(prefix)
            ]
            pairs = [(t, b) for t, b in pairs if (t, b) in self._on_line]
            if not pairs:
                continue
            state = {t: (s[-1] if s else 0) for t, s in stacks.items()}
            if found or holds(state):
                found = True
                yield version, state
            for task, batch in pairs:
                if not stacks[task] or stacks[task][-1] != batch:
                    raise StreamsException(
                        f"{path}: version {version} commits batch {batch} of task {task} out "
                        "of order; the app's history cannot be read"
                    )
                stacks[task].pop()
            first = version
        if any(stacks.values()):
            raise RewindRefused(f"{path}: the log does not hold every batch of the app's line")
        if first is not None:
            yield first - 1, dict.fromkeys(stacks, 0)


def _app_tables(warehouse: Warehouse, app: str) -> list[str]:
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
    log = delta_log.local_log(path)
    if log is None:
        raise RewindRefused(f"rewind needs a local warehouse, not {warehouse.root}")
    prefix = txn_ids.batch_prefix(app)
    past: list[int] = []
    foreign: list[int] = []
    within_above: int | None = None
    version = current
    # Back from the newest commit until every task with a batch past its target has shown a
    # commit at or before it (per task, batches only grow with the versions).
    while version >= 0 and pending:
        commit = delta_log.read_commit(log, version)
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
        elif _is_foreign(commit, app):
            foreign.append(version)
        version -= 1
    if not past:
        return None
    restore_to = min(past) - 1
    others = sorted(v for v in foreign if v > restore_to)
    if others:
        raise RewindRefused(
            f"{name}: version {others[0]} (of {len(others)} after the target) was written by "
            f"another writer, not app {app}; restoring to version {restore_to} would drop its "
            "records. Move them elsewhere first (or choose a later target)"
        )
    try:
        old = DeltaTable(path.removeprefix("file://"), version=restore_to)
    except Exception as exc:
        raise RewindRefused(f"{name}: version {restore_to} cannot be read ({exc})") from None
    missing = [u for u in old.file_uris() if not os.path.exists(u.removeprefix("file://"))]
    if missing:
        raise RewindRefused(
            f"{name}: {len(missing)} files of version {restore_to} were vacuumed (e.g. "
            f"{missing[0]}): it cannot be restored. VACUUM keeps the versions of its retention "
            "(lakestate maintain --retention-hours)"
        )
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


def _is_foreign(commit: delta_log.Commit, app: str) -> bool:
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


# -- carrying it out ------------------------------------------------------------------------


def _carry_out(warehouse: Warehouse, plan: RewindPlan, say: Callable[[str], None]) -> None:
    """Steps 2-4 of a rewind whose intent is recorded; each skipped when found done."""
    app = plan.app
    _record_rewind_rows(warehouse, plan, say)
    faults.maybe_fail(FAULT_AFTER_PROGRESS, 0)
    rewind_batches = {t.task: t.rewind_batch for t in plan.tasks}
    with console.progress(f"rewind {app}: restore tables", total=len(plan.tables)) as bar:
        for index, table in enumerate(plan.tables, start=1):
            _restore_table(warehouse, app, table, rewind_batches, say)
            bar.advance(1)
            faults.maybe_fail(FAULT_AFTER_TABLE, index)
    rewind_intent.remove(warehouse, app)
    say(
        f"app {app} rewound to {plan.target_text}: {len(plan.tasks)} task(s), "
        f"{len(plan.tables)} table(s) restored; its next run processes from there"
    )


def _record_rewind_rows(warehouse: Warehouse, plan: RewindPlan, say: Callable[[str], None]) -> None:
    app = plan.app
    path = warehouse.progress_path(app)
    progress.ensure_table(path, app)
    table = delta_commits.open_table(path)
    tasks = [t.task for t in plan.tasks]
    held = delta_commits.txn_versions(table, app, tasks)
    mine = {t.task: table.transaction_version(rewind_txn_id(app, t.task)) or 0 for t in plan.tasks}
    if all(mine[t.task] >= t.rewind_batch for t in plan.tasks):
        return  # committed before a crash
    taken = [t for t in plan.tasks if held[t.task] >= t.rewind_batch]
    run_id = f"rewind-{uuid.uuid4().hex[:8]}"
    rows = [
        TaskProgress(
            t.task,
            t.rewind_batch,
            run_id,
            progress.now_ms(),
            {},
            dict(t.offsets),
            t.stream_time,
            0,
            (),
            dict(t.metrics),
            dict(t.processor_metadata),
            {"batch": t.batch, "progress_version": plan.progress_version},
        )
        for t in plan.tasks
    ]
    metadata = {
        "app": app,
        "run_id": run_id,
        "batches": {str(t.task): t.rewind_batch for t in plan.tasks},
        METADATA_KEY: {"target": plan.target_text, "progress_version": plan.progress_version},
    }
    try:
        if taken:
            raise TaskMigratedException(f"batch {taken[0].rewind_batch} of task {taken[0].task}")
        progress.record(
            path,
            app,
            rows,
            metadata,
            {rewind_txn_id(app, t.task): t.rewind_batch for t in plan.tasks},
        )
    except TaskMigratedException as exc:
        # Before this commit no table was touched: the rewind is undone by forgetting it.
        rewind_intent.remove(warehouse, app)
        raise RewindRefused(
            f"app {app}: a run committed a batch while the rewind started ({exc}); the rewind "
            "changed nothing. Stop the app's runs (pause its DAG) and rewind again"
        ) from None
    say(
        "recorded the rewind: "
        + ", ".join(f"task {t.task} batch {t.rewind_batch} = batch {t.batch}" for t in plan.tasks)
    )


def _restore_table(
    warehouse: Warehouse,
    app: str,
    restore: TableRestore,
    rewind_batches: dict[TaskId, int],
    say: Callable[[str], None],
) -> None:
    path = warehouse.resolve(restore.path)
    prefix = warehouse.topics_dir().rstrip("/") + "/"
    topic = path[len(prefix) :] if path.startswith(prefix) else None
    with (
        table_lock(path),
        topics.topic(warehouse, topic).append_lock() if topic else contextlib.nullcontext(),
    ):
        table = delta_commits.open_table(path)
        held = delta_commits.txn_versions(table, app, list(rewind_batches))
        if all(held[t] >= b for t, b in rewind_batches.items()):
            return  # restored before a crash
        log = delta_log.local_log(path)
        for version in range(restore.current_version + 1, table.version() + 1):
            commit = delta_log.read_commit(log, version) if log is not None else None
            if commit is not None and _is_foreign(commit, app):
                raise RewindRefused(
                    f"{restore.path}: version {version} was written by another writer during "
                    f"the rewind; app {app} stays mid-rewind, with this table not restored "
                    "(restoring it would drop those records). Move them elsewhere, then run "
                    f"`lakestate rewind {app} --resume`"
                )
        txns = [
            Transaction(delta_commits.txn_app_id(app, t), b)
            for t, b in sorted(rewind_batches.items())
        ]
        txns += [
            Transaction(compaction_txn_id(app, TaskId.parse(t)), c)
            for t, c in sorted(restore.compaction.items())
        ]
        metadata: dict[str, Any] = {
            METADATA_KEY: {"app": app, "version": restore.version},
            "app": app,
            "batches": {str(t): b for t, b in sorted(rewind_batches.items())},
        }
        if restore.ends is not None:
            metadata[ENDS_METADATA_KEY] = restore.ends
        table.restore(
            restore.version,
            commit_properties=CommitProperties(
                custom_metadata={"userMetadata": json.dumps(metadata, sort_keys=True)},
                app_transactions=txns,
            ),
        )
    say(f"restored {restore.path} to version {restore.version}")
