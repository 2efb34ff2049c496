"""An instance's run: the tasks it owns, the fence its commits carry, its warmups, its report.

A run is the run of one instance (``scaleout/instances.py``; the implicit ``default`` when an
app configures none). Before its batches it reads each task's owner epoch (the ownership
fence in ``_progress``, ``scaleout/ownership.py``) and the owner in force at that epoch: its
active tasks are those owned by this instance, and those never assigned (epoch 0, as
before scale-out). Every progress commit of the run carries the epochs it planned with as
fences (``progress.record``): a rebalance that moved one of its tasks meanwhile makes the
commit fail, and the run stops with ``TaskMigratedException`` (``migrated``), having
committed nothing. After its batches, the warmup and standby tasks the latest generation
gives the instance are brought to their last complete batch from the changelogs
(``recovery.warm``: never a replay, never a write to Delta), within
``lakestate.warmup.max.records`` of lag per run; then the stores of tasks it has had no role
for since ``state.cleanup.delay.ms`` are deleted (``clean_up``). At its end (a busy run's
too) the run reports, per task it holds a store for or was assigned, where its store stands
(``scaleout/lag_reports.py``): what the next rebalance reads.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from lakestate import console
from lakestate.app import App
from lakestate.assign import history
from lakestate.checkpoint import task_dir
from lakestate.checkpoint.commit import BatchRefused
from lakestate.checkpoint.layout import AppLayout
from lakestate.checkpoint.progress import now_ms
from lakestate.checkpoint.standing import where_tasks_stand
from lakestate.checkpoint.task_dir import TaskDir
from lakestate.errors import StreamsException, TaskMigratedException
from lakestate.io import delta_commits
from lakestate.restore import recovery, warmup
from lakestate.scaleout import lag_reports, ownership, state_cleanup
from lakestate.scaleout.instances import (
    INSTANCES_KEY,
    Instance,
    cleanup_delay_ms,
    warmup_max_records,
)
from lakestate.state.base import IsolationLevel
from lakestate.task_id import TaskId
from lakestate.warehouse import Warehouse

__all__ = [
    "Roles",
    "clean_up",
    "describe",
    "migrated",
    "report",
    "roles_of",
    "scaled_out",
    "warm",
]

#: A run's view of its local stores, saved under the lock for a busy run's report.
LOCAL_VIEW_FILE = ".local.json"


@dataclass(frozen=True)
class Roles:
    """What one run of ``instance`` does: ``active``, the tasks it processes, each planned
    at its owner epoch in ``epochs``; ``warm``, the warmup and standby tasks the latest
    generation (``generation``; 0: none) gives it; ``roles``: each task's role for the
    instance in that generation ("active", "warmup", "standby"; absent: none)."""

    instance: Instance
    generation: int
    active: list[TaskId]
    epochs: dict[TaskId, int]
    warm: list[TaskId] = field(default_factory=list)
    roles: dict[TaskId, str] = field(default_factory=dict)

    def fences(self, app: str, tasks: Iterable[TaskId]) -> dict[str, int]:
        """The txns a progress commit of ``tasks`` checks and carries."""
        return ownership.owner_txns(app, {t: self.epochs[t] for t in tasks})


def scaled_out(app: App, warehouse: Warehouse) -> bool:
    """Whether the app uses instances: configured, or assigned by a rebalance. An app
    that does not runs as before scale-out (no reports)."""
    if INSTANCES_KEY in app.config:
        return True
    return delta_commits.table_exists(history.assignment_path(warehouse, app.name))


def roles_of(
    layout: AppLayout, instance: Instance, requested: Iterable[TaskId | str] | None
) -> Roles:
    """The run's roles: its active tasks (owned by ``instance`` at their owner epoch, or
    never assigned), restricted to ``requested`` when given (StreamsException for a task
    the app lacks, or one another instance owns), and its warmups and standbys."""
    app = layout.app.name
    every = layout.tasks()
    epochs, owners = _owners(layout, every)
    owned = [t for t in every if epochs[t] == 0 or owners[t] == instance.name]
    active = owned
    if requested is not None:
        wanted = sorted({t if isinstance(t, TaskId) else TaskId.parse(t) for t in requested})
        unknown = [str(t) for t in wanted if t not in every]
        if unknown:
            raise StreamsException(
                f"app {app} has no task {', '.join(unknown)} "
                f"(its tasks: {', '.join(str(t) for t in every)})"
            )
        foreign = [t for t in wanted if t not in owned]
        if foreign:
            t = foreign[0]
            raise StreamsException(
                f"app {app}: task {t} is owned by instance {owners[t]} (owner epoch "
                f"{epochs[t]}), not by {instance.name}: this run cannot process it "
                "(--tasks names tasks of the instance's own)"
            )
        active = wanted
    # Every owned task is the instance's active one, processed by this run or not.
    generation, roles, warm = 0, {t: "active" for t in owned}, []
    latest = history.latest(layout.warehouse, app)  # None without an _assignment table
    if latest is not None:
        generation = latest.number
        for t in every:
            if t in roles:
                continue
            if instance.name in latest.assignment.warmup.get(t, ()):
                roles[t] = "warmup"
            elif instance.name in latest.assignment.standby.get(t, ()):
                roles[t] = "standby"
        warm = sorted(t for t, role in roles.items() if role != "active")
    return Roles(instance, generation, active, {t: epochs[t] for t in active}, warm, roles)


def describe(roles: Roles) -> str:
    """One line: the instance, its generation and its tasks by role."""
    by_role: dict[str, list[str]] = {}
    for task, role in sorted(roles.roles.items()):
        by_role.setdefault(role, []).append(str(task))
    held = "; ".join(f"{role} {', '.join(tasks)}" for role, tasks in sorted(by_role.items()))
    return (
        f"instance {roles.instance.name} (generation {roles.generation or 'none'}): "
        f"{held or 'no tasks'}"
    )


def _owners(
    layout: AppLayout, tasks: list[TaskId]
) -> tuple[dict[TaskId, int], dict[TaskId, str | None]]:
    """Each task's owner epoch and its owner at that epoch, from one consistent view: the
    epochs are read before and after the owners, until they agree (a fence landing in
    between would pair an owner with the wrong epoch)."""
    app = layout.app.name
    epochs = ownership.owner_epochs(layout.progress_path, app, tasks)
    while True:
        if not any(epochs.values()):
            return epochs, dict.fromkeys(tasks)
        owners = ownership.owners_in_force(layout.warehouse, app, tasks, epochs)
        again = ownership.owner_epochs(layout.progress_path, app, tasks)
        if again == epochs:
            return epochs, owners
        epochs = again


def migrated(layout: AppLayout, roles: Roles, exc: TaskMigratedException) -> TaskMigratedException:
    """The error a run stops with when a batch's progress commit was refused
    (``commit.BatchRefused``) because a fence moved: naming the task that moved, this
    instance, the epoch the run planned with, the epoch now and the new owner; ``exc``
    itself otherwise (another run committed the batch first, or a table's commit lost to
    another run's replay of a batch)."""
    if not isinstance(exc, BatchRefused):
        return exc
    app = layout.app.name
    planned = roles.epochs
    now = ownership.owner_epochs(layout.progress_path, app, list(planned))
    moved = sorted(t for t in planned if now[t] != planned[t])
    if not moved:  # another run committed the batch first: its own message says so
        return exc
    owners = ownership.owners_in_force(layout.warehouse, app, moved, now)
    t = moved[0]
    others = f" (and {len(moved) - 1} more of its tasks)" if len(moved) > 1 else ""
    return TaskMigratedException(
        f"app {app}: task {t} migrated{others}: instance {roles.instance.name} planned its "
        f"batch at owner epoch {planned[t]}, the task's owner epoch is now {now[t]} (owner: "
        f"{owners[t] or 'any instance'}); this run committed nothing, discarded its staged "
        "work and stops (the next run follows the new assignment)"
    )


def warm(
    layout: AppLayout,
    roles: Roles,
    state_dir: str,
    isolation: IsolationLevel,
    say: Callable[[str], None],
) -> dict[TaskId, int]:
    """Bring the run's warmup and standby tasks' local stores toward their last complete
    batch (``recovery.warm``) within ``lakestate.warmup.max.records`` changelog rows or
    lag records per run: a catch-up costs the keys it applied and is not split; a store
    that must be restored is restored in pieces of the budget left, resumed by the next
    runs (``restore/warmup.py``), so a warmup run is never much longer than a
    normal one. The first task with a lag always proceeds (a restore by one piece); a
    later one waits when its lag would pass the budget. Tasks whose restore is under way
    go after the others, so every warm task gets started. Returns the lag each task that
    proceeded had."""
    if not roles.warm:
        return {}
    budget = warmup_max_records(layout.app)
    standing = where_tasks_stand(layout, roles.warm)
    app = layout.app.name
    order = sorted(roles.warm, key=lambda t: (warmup.in_progress(state_dir, app, t), t))
    lags = {}
    for task in order:
        held = _local_offsets(state_dir, layout, task, isolation)
        committed = standing.committed[task].offsets
        lag = lag_reports.lag_of(held, committed)
        lags[task] = _inputs_total(committed) if lag is None else lag
    warmed: dict[TaskId, int] = {}
    spent = 0
    with console.progress(f"{app}: warmup lag", total=sum(lags.values())) as bar:
        for task in order:
            # The first task with a lag always proceeds (else a lag above the bound would
            # never be caught up); a task without one costs nothing.
            if lags[task] and spent and spent + lags[task] > budget:
                say(
                    f"task {task} ({roles.roles[task]}): lag {lags[task]} waits for the next "
                    f"run (lakestate.warmup.max.records {budget}, {spent} spent)"
                )
                continue
            spent += recovery.warm(
                layout, task, state_dir, isolation, say, standing, max(budget - spent, 1)
            )
            warmed[task] = lags[task]
            bar.advance(lags[task])
    if warmed:
        pending = [t for t in warmed if warmup.in_progress(state_dir, app, t)]
        say(
            f"warmed {len(warmed)} task(s) of instance {roles.instance.name}: "
            f"{', '.join(f'{t} (lag {n})' for t, n in warmed.items())}; "
            + (
                f"restore continued next run: {', '.join(map(str, pending))}"
                if pending
                else "all at their last complete batch"
            )
        )
    return warmed


def clean_up(
    layout: AppLayout, roles: Roles, state_dir: str, say: Callable[[str], None]
) -> list[TaskId]:
    """Delete the local stores and shadows of tasks the latest generation has given this
    instance no role for since ``state.cleanup.delay.ms`` (``scaleout/state_cleanup.py``).
    Nothing before a first generation: until then every run owns every task. Returns the
    tasks whose stores it deleted, which the run's report then says it holds no more."""
    if roles.generation == 0:
        return []
    keep = set(roles.active) | set(roles.warm) | set(roles.roles)
    return state_cleanup.clean_up(
        state_dir,
        layout.app.name,
        layout.tasks(),
        keep,
        cleanup_delay_ms(layout.app),
        now_ms(),
        say,
    )


def _inputs_total(offsets: dict[str, int]) -> int:
    """The records a store without state must catch up: every input record committed."""
    return sum(o for key, o in offsets.items() if "@" not in key)


def _local_offsets(
    state_dir: str, layout: AppLayout, task: TaskId, isolation: IsolationLevel
) -> dict[str, int] | None:
    view = _read_local(state_dir, layout, task, isolation)
    return None if view is None else view[1]


def _read_local(
    state_dir: str, layout: AppLayout, task: TaskId, isolation: IsolationLevel
) -> tuple[int, dict[str, int]] | None:
    """The batch and input offsets the task's local store holds (None: no store). Only
    under the instance's lock: a store is opened read-write."""
    app = layout.app.name
    # A store being restored in pieces beside it (a warmup's shadow) is not held yet: the
    # old store may say anything, and a rebalance must not take it for caught up.
    if not TaskDir(state_dir, app, task).exists() or warmup.in_progress(state_dir, app, task):
        return None
    store = TaskDir(state_dir, app, task).open(isolation)
    try:
        inputs = set(layout.inputs[task.subtopology])
        offsets = {tp.topic: o for tp, o in store.committed_offsets().items() if tp.topic in inputs}
        return task_dir.local_batch(store) or 0, offsets
    finally:
        store.close()


def _held_tasks(state_dir: str, layout: AppLayout) -> list[TaskId]:
    """The app's tasks this state dir holds a store for."""
    return [t for t in layout.tasks() if TaskDir(state_dir, layout.app.name, t).exists()]


def report(
    layout: AppLayout,
    roles: Roles,
    state_dir: str,
    isolation: IsolationLevel | None,
    run_id: str,
    deleted: Iterable[TaskId] = (),
) -> list[lag_reports.Report]:
    """Write the run's lag report: a row per task the instance holds a store for or was
    assigned. ``isolation`` None: a busy run, which does not hold the lock and reports the
    local view the last run that held it saved; else the stores are read now (the caller
    holds the lock) and that view saved. ``deleted``: tasks whose stores the run deleted
    (``clean_up``), reported as held no more so that no rebalance counts an older
    report of them."""
    app = layout.app.name
    view_path = Path(state_dir) / app / LOCAL_VIEW_FILE
    if isolation is None:
        view = _load_view(view_path)
    else:
        view = {}
        for t in _held_tasks(state_dir, layout):
            found = _read_local(state_dir, layout, t, isolation)
            if found is not None:
                view[t] = found
        _save_view(view_path, view)
    tasks = sorted(set(view) | set(roles.roles) | set(deleted))
    standing = where_tasks_stand(layout, tasks)
    at = now_ms()
    rows = []
    for t in tasks:
        committed = standing.committed[t]
        local_batch, offsets = view.get(t, (None, None))
        rows.append(
            lag_reports.Report(
                roles.instance.name,
                t,
                roles.generation,
                roles.roles.get(t, "none"),
                local_batch,
                offsets,
                committed.batch_id,
                lag_reports.lag_of(offsets, committed.offsets),
                roles.instance.capacity,
                at,
                run_id,
            )
        )
    lag_reports.write(layout.warehouse, app, rows)
    return rows


def _save_view(path: Path, view: dict[TaskId, tuple[int, dict[str, int]]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({str(t): [b, o] for t, (b, o) in sorted(view.items())}))
    os.replace(tmp, path)


def _load_view(path: Path) -> dict[TaskId, tuple[int, dict[str, int]]]:
    try:
        raw = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return {TaskId.parse(t): (b, o) for t, (b, o) in raw.items()}
