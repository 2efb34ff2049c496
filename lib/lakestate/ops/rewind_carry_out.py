"""Carrying out a rewind's plan (ops/rewind.py), steps 2-4, once its intent is recorded:
the rewind rows committed to the progress table (the fence), each table restored, the
intent removed. Each step is skipped when found done, so a rerun after a crash anywhere
completes the rewind."""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import Callable
from typing import Any

from deltalake import CommitProperties, Transaction
from lakestate import console
from lakestate.checkpoint import faults, progress, rewind_intent
from lakestate.checkpoint.changelog import compaction_txn_id
from lakestate.checkpoint.progress import TaskProgress, rewind_txn_id
from lakestate.errors import TaskMigratedException
from lakestate.io import delta_commits, delta_log, topics, txn_ids
from lakestate.io.logtable import ENDS_METADATA_KEY
from lakestate.ops.rewind_history import RewindRefused
from lakestate.ops.rewind_plan import RewindPlan, TableRestore, is_foreign
from lakestate.ops.table_lock import table_lock
from lakestate.task_id import TaskId
from lakestate.warehouse import Warehouse

__all__ = [
    "FAULT_AFTER_INTENT",
    "FAULT_AFTER_PROGRESS",
    "FAULT_AFTER_TABLE",
    "METADATA_KEY",
    "carry_out",
]

#: Fault points (``faults.maybe_fail``): after the intent is written (number: 0); after the
#: progress commit (0); after each table's restore (number: the table's place, from 1).
FAULT_AFTER_INTENT = "rewind:after_intent"
FAULT_AFTER_PROGRESS = "rewind:after_progress"
FAULT_AFTER_TABLE = "rewind:after_table"
#: The key of a rewind's commits' ``userMetadata``.
METADATA_KEY = "lakestate.rewind"


def carry_out(warehouse: Warehouse, plan: RewindPlan, say: Callable[[str], None]) -> None:
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
    """Step 2: the rewind rows in one progress commit with each task's batch txn ``R`` (the
    fence) and its rewind txn; a run that committed a batch first makes it fail, and the
    rewind is forgotten, having changed nothing."""
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
            _rewind_rows(plan, run_id),
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


def _rewind_rows(plan: RewindPlan, run_id: str) -> list[TaskProgress]:
    """Per task its rewind row, batch ``R``: its target batch's offsets, stream time,
    processor metadata and metric totals, no ranges and no tables, and ``rewound_to``."""
    return [
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


def _restore_table(
    warehouse: Warehouse,
    app: str,
    restore: TableRestore,
    rewind_batches: dict[TaskId, int],
    say: Callable[[str], None],
) -> None:
    """Step 3 for one table: RESTORE to the planned version, the commit carrying each
    task's batch txn ``R``, the compaction txns there and a topic's end offsets there."""
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
        _refuse_foreign_commits(path, app, restore, table.version())
        # A topic's RESTORE carries its append txn: an append racing it (from another
        # machine, where the append lock does not reach) conflicts and renumbers after it.
        extra = {txn_ids.topic_append(topic): table.version() + 1} if topic else {}
        table.restore(
            restore.version,
            commit_properties=_restore_commit(app, restore, rewind_batches, extra),
        )
    say(f"restored {restore.path} to version {restore.version}")


def _refuse_foreign_commits(path: str, app: str, restore: TableRestore, newest: int) -> None:
    """RewindRefused when a commit after the planned version, up to ``newest``, is another
    writer's (restoring would drop its records)."""
    for version in range(restore.current_version + 1, newest + 1):
        commit = delta_log.commit_of(path, version)
        if commit is not None and is_foreign(commit, app):
            raise RewindRefused(
                f"{restore.path}: version {version} was written by another writer during "
                f"the rewind; app {app} stays mid-rewind, with this table not restored "
                "(restoring it would drop those records). Move them elsewhere, then run "
                f"`lakestate rewind {app} --resume`"
            )


def _restore_commit(
    app: str, restore: TableRestore, rewind_batches: dict[TaskId, int], extra: dict[str, int]
) -> CommitProperties:
    """The RESTORE commit's txns and ``userMetadata``."""
    txns = [
        Transaction(delta_commits.txn_app_id(app, t), b) for t, b in sorted(rewind_batches.items())
    ]
    txns += [
        Transaction(compaction_txn_id(app, TaskId.parse(t)), c)
        for t, c in sorted(restore.compaction.items())
    ]
    txns += [Transaction(i, v) for i, v in sorted(extra.items())]
    metadata: dict[str, Any] = {
        METADATA_KEY: {"app": app, "version": restore.version},
        "app": app,
        "batches": {str(t): b for t, b in sorted(rewind_batches.items())},
    }
    if restore.ends is not None:
        metadata[ENDS_METADATA_KEY] = restore.ends
    return CommitProperties(
        custom_metadata={"userMetadata": json.dumps(metadata, sort_keys=True)},
        app_transactions=txns,
    )
