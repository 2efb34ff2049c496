"""Who owns a task now: the ownership fence in the app's progress table.

A task's **owner epoch** is the version of the Delta ``txn`` ``owner_txn_id(app, task)``
(``lakestate-owner/<app>/<task>``) in ``_progress``: the generation (``_assignment``) in
which the task's current active instance got it; 0 when never assigned, and then any run
may own it (an app without generations runs as before scale-out).

A rebalance that writes generation ``g`` then *fences* it: one commit to ``_progress``
with no rows, carrying ``owner_txn_id(app, t) = g`` for every task whose active changed.
A generation is in force once its fence landed. Every progress commit of a run carries
the owner txns of its tasks at the epochs it planned with (``owner_txns``, passed as
``progress.record``'s ``fences``), after checking that the snapshot it commits on holds
those epochs. A fence and a batch's commit of the same task therefore cannot both land
unnoticed: delta-rs fails the later of two concurrent commits carrying the same txn app id
("Concurrent transaction", whatever the versions), and a commit that starts after the fence
sees the new epoch. The loser is the run, which commits nothing (TaskMigratedException).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

import pyarrow as pa
from deltalake import DeltaTable
from lakestate.checkpoint import progress
from lakestate.errors import StreamsException, TaskMigratedException
from lakestate.io import delta_commits, txn_ids
from lakestate.task_id import TaskId
from lakestate.warehouse import Warehouse

if TYPE_CHECKING:
    from lakestate.checkpoint.layout import AppLayout

__all__ = [
    "owner_epochs",
    "owner_txn_id",
    "owner_txns",
    "owners_in_force",
    "write_fence",
]

#: How many times a fence commit is retried after a concurrent commit of the same txns.
FENCE_ATTEMPTS = 50


def owner_txn_id(app: str, task: TaskId) -> str:
    """The Delta txn app id, in ``_progress``, whose version is the task's owner epoch."""
    return txn_ids.owner(app, task)


def _table(progress_table_or_path: DeltaTable | str) -> DeltaTable:
    if isinstance(progress_table_or_path, DeltaTable):
        return progress_table_or_path
    return delta_commits.open_table(progress_table_or_path)


def _path(layout_or_path: AppLayout | str) -> str:
    return layout_or_path if isinstance(layout_or_path, str) else layout_or_path.progress_path


def owner_epochs(
    progress_table_or_path: DeltaTable | str, app: str, tasks: Iterable[TaskId]
) -> dict[TaskId, int]:
    """Each task's owner epoch in the progress table's snapshot (0: never fenced; also when
    the table does not exist yet)."""
    tasks = list(tasks)
    if isinstance(progress_table_or_path, str) and not delta_commits.table_exists(
        progress_table_or_path
    ):
        return dict.fromkeys(tasks, 0)
    table = _table(progress_table_or_path)
    epochs = {t: delta_commits.txn_version(table, owner_txn_id(app, t)) for t in tasks}
    if table is not progress_table_or_path:
        delta_commits.release(table)
    return epochs


def owner_txns(app: str, epochs: Mapping[TaskId, int]) -> dict[str, int]:
    """The txns a run's progress commit carries for its tasks' planned owner epochs
    (``progress.record(..., fences=...)``, which checks them and carries them). Epoch 0
    too: a first fence landing while the run commits must conflict with it as well."""
    return {owner_txn_id(app, t): e for t, e in sorted(epochs.items())}


def write_fence(
    layout_or_path: AppLayout | str,
    app: str,
    epochs: Mapping[TaskId, int],
    generation: int | None = None,
) -> int | None:
    """Put every task of ``epochs`` at its owner epoch in one commit to ``_progress`` (no
    rows); tasks already at that epoch or later are left out (idempotent: a fence finished
    twice writes once). Retried on a concurrent commit of the same txns (re-reading the
    epochs). Returns the progress table version written (None: nothing to write).
    ``layout_or_path``: an AppLayout, or the progress table's path (created if missing)."""
    path = _path(layout_or_path)
    progress.ensure_table(path, app)
    empty = pa.Table.from_pylist([], schema=progress.SCHEMA)
    last: Exception | None = None
    for attempt in range(FENCE_ATTEMPTS):
        table = delta_commits.open_table(path)
        held = owner_epochs(table, app, epochs)
        todo = {t: e for t, e in epochs.items() if held[t] < e}
        if not todo:
            return None
        metadata = {
            "app": app,
            "fence": {str(t): e for t, e in sorted(todo.items())},
            "generation": generation,
        }
        try:
            return delta_commits.append(table, empty, app, {}, metadata, owner_txns(app, todo))
        except TaskMigratedException as exc:  # a batch's commit or another fence won: again
            last = exc
            time.sleep(min(0.05 * (attempt + 1), 1.0))
    raise StreamsException(
        f"app {app}: the ownership fence of {len(epochs)} tasks did not land after "
        f"{FENCE_ATTEMPTS} attempts, each losing to a concurrent commit ({last}); run the "
        "rebalance again: it finishes the fence"
    )


def owners_in_force(
    warehouse: Warehouse,
    app: str,
    tasks: Iterable[TaskId],
    epochs: Mapping[TaskId, int] | None = None,
) -> dict[TaskId, str | None]:
    """Per task, the instance that owns it now: the active of generation e_t in
    ``_assignment``, e_t its owner epoch (``epochs`` when the caller read them already);
    None when e_t is 0 (never assigned: any run owns it)."""
    from lakestate.assign import history

    tasks = list(tasks)
    if epochs is None:
        epochs = owner_epochs(warehouse.progress_path(app), app, tasks)
    found = history.generations(warehouse, app, {epochs[t] for t in tasks if epochs[t]})
    owners: dict[TaskId, str | None] = {}
    for task in tasks:
        epoch = epochs[task]
        if epoch == 0:
            owners[task] = None
            continue
        if epoch not in found:
            raise StreamsException(
                f"app {app}: task {task}'s owner epoch is {epoch}, but _assignment holds no "
                f"generation {epoch}: the app's tables disagree"
            )
        owners[task] = found[epoch].assignment.active.get(task)
    return owners
