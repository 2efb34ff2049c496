"""A warmup's restore in bounded pieces, resumable across runs.

Kafka Streams' restore consumer interleaves restoration with processing, a bounded poll at
a time, and resumes from the changelog offset it reached. A warmup or standby store that
must be restored (``recovery.warm``) is built the same way, so that no run of the instance
is longer than a normal one: a *shadow* store beside the task's, ``<app>/<task>.warmup/db``,
restored toward a target batch N (the task's last complete batch when the shadow was
started), one piece per run. A piece is the next at most ``budget`` of the task's live
changelog rows as of N (per key its latest row), the task's stores in name order and each
store in raw key order, applied by the kinds' ``restore_entries`` in ONE transaction
together with the cursor (``CURSOR_KEY`` in the meta namespace: N's ``TaskCheckpoint``, the
store and raw key reached, the compaction and rewind versions seen at the start), so a
crash anywhere leaves a cursor consistent with the entries. The last piece commits with
N's offsets, stream time, processor metadata and batch marker and drops the cursor
(``restored.commit_restored``); then the shadow replaces the task's store (``adopt``: the old
store removed, the shadow renamed in its place, under the instance's lock) and the usual
catch-up brings it from N to the committed batch.

A shadow is continued while N can still be read as it was: no compaction of the task
through a batch after N (its rows up to N would be folded away), no new rewind row, N not
after the committed batch; else it is dropped and started again toward the committed
batch. The shadow is not the task's store: the instance's lag report does not count it
(the task's store is reported as it stands, or not held), so no rebalance takes the task
for caught up before the shadow is complete and caught up. An owner's recovery never
restores in pieces (its store must be complete before it processes): it adopts a
complete shadow when its store is missing and drops any other.
"""

from __future__ import annotations

import os
import pickle
import shutil
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from lakestate.checkpoint import changelog, faults, task_dir
from lakestate.checkpoint.batch import TaskCheckpoint
from lakestate.checkpoint.layout import AppLayout
from lakestate.checkpoint.task_dir import TaskDir
from lakestate.io import delta_commits
from lakestate.restore.restored import commit_restored
from lakestate.state.base import IsolationLevel, StateStore
from lakestate.state.constants import META_NAMESPACE
from lakestate.state.rocksdb import rocksdb_store
from lakestate.task_id import TaskId

CURSOR_KEY = b"warmup-cursor"
SHADOW_SUFFIX = ".warmup"


@dataclass(frozen=True)
class Cursor:
    """Where a shadow stands: restoring toward ``target`` (batch N's ``TaskCheckpoint``), every
    store before ``store`` done and ``store`` done through raw key ``after`` (None: not
    started); ``compacted`` (per store, the task's compaction txn version) and ``rewound``
    (its latest rewind row's batch) as seen at the start; ``rows`` applied so far."""

    target: TaskCheckpoint
    compacted: dict[str, int]
    rewound: int
    store: str
    after: bytes | None = None
    rows: int = 0


def shadow_dir(state_dir: str | Path, app: str, task: TaskId) -> Path:
    return Path(state_dir) / app / f"{task}{SHADOW_SUFFIX}"


def _exists(state_dir: str | Path, app: str, task: TaskId) -> bool:
    return (shadow_dir(state_dir, app, task) / "db" / "CURRENT").exists()


def _open(state_dir: str | Path, app: str, task: TaskId, isolation: IsolationLevel) -> StateStore:
    return rocksdb_store(f"{app}/{task}", shadow_dir(state_dir, app, task) / "db", isolation)


def _cursor(store: StateStore) -> Cursor | None:
    raw = store.get(META_NAMESPACE, CURSOR_KEY)
    return None if raw is None else pickle.loads(raw)


def in_progress(state_dir: str | Path, app: str, task: TaskId) -> bool:
    """Whether a shadow of the task exists (started, not yet adopted)."""
    return shadow_dir(state_dir, app, task).exists()


def discard(state_dir: str | Path, app: str, task: TaskId) -> None:
    shutil.rmtree(shadow_dir(state_dir, app, task), ignore_errors=True)


def adopt_if_complete(
    state_dir: str | Path, app: str, task: TaskId, isolation: IsolationLevel
) -> bool:
    """Put a complete shadow (batch marker, no cursor) in place of the task's store;
    whether it did. The old store goes first: a crash between leaves no task store and a
    complete shadow, which the next recovery adopts (``recovery._bring_to``)."""
    if not _exists(state_dir, app, task):
        return False
    store = _open(state_dir, app, task, isolation)
    try:
        complete = _cursor(store) is None and task_dir.local_batch(store) is not None
    finally:
        store.close()
    if not complete:
        return False
    TaskDir(state_dir, app, task).wipe()
    faults.maybe_fail("mid_warmup_swap", 0)
    os.replace(shadow_dir(state_dir, app, task), TaskDir(state_dir, app, task).path)
    return True


def _versions(layout: AppLayout, task: TaskId) -> dict[str, tuple[object, int]]:
    """Per store of the task, its changelog table (one snapshot) and the task's compaction
    txn version in it (0: never compacted)."""
    app = layout.app.name
    found = {}
    for name in sorted(layout.stores_of(task.subtopology)):
        table = delta_commits.open_table(layout.changelog_path(name))
        version = table.transaction_version(changelog.compaction_txn_id(app, task)) or 0
        found[name] = (table, version)
    return found


def _stale(
    cursor: Cursor, committed: TaskCheckpoint, rewound: int, compacted: dict[str, int]
) -> str:
    """Why a shadow's target can no longer be read as it was ("" when it can)."""
    n = cursor.target.batch_id
    if set(cursor.compacted) != set(compacted):
        return "the task's stores changed"
    if rewound != cursor.rewound:
        return f"the task was rewound (at batch {rewound})"
    if n > committed.batch_id:
        return f"its target batch {n} is after the committed batch {committed.batch_id}"
    past = [s for s, v in compacted.items() if v > n]
    if past:
        return f"store {past[0]} was compacted through batch {compacted[past[0]]}, after {n}"
    return ""


def restore_piece(
    layout: AppLayout,
    task: TaskId,
    committed: TaskCheckpoint,
    state_dir: str,
    isolation: IsolationLevel,
    say: Callable[[str], None],
    rewound: int,
    budget: int,
) -> tuple[int, bool]:
    """Apply the next piece (at most ``max(budget, 1)`` changelog rows) of the task's
    shadow restore, starting one toward ``committed`` when there is none or the one there
    is stale; returns the rows applied and whether the shadow is complete and adopted as
    the task's store (at its target batch: the caller catches it up)."""
    app = layout.app.name
    budget = max(budget, 1)
    if adopt_if_complete(state_dir, app, task, isolation):
        return 0, True
    tables = _versions(layout, task)
    compacted = {name: version for name, (_, version) in tables.items()}
    cursor = None
    if _exists(state_dir, app, task):
        store = _open(state_dir, app, task, isolation)
        try:
            cursor = _cursor(store)
        finally:
            store.close()
        why = (
            "it has no cursor" if cursor is None else _stale(cursor, committed, rewound, compacted)
        )
        if why:
            say(f"task {task}: dropped its warmup restore in progress ({why}); starting again")
            discard(state_dir, app, task)
            cursor = None
    elif in_progress(state_dir, app, task):
        discard(state_dir, app, task)  # created, never written: nothing to keep
    if cursor is None:
        cursor = Cursor(committed, compacted, rewound, next(iter(tables)))
    store = _open(state_dir, app, task, isolation)
    try:
        rows, done = _apply_piece(layout, task, store, cursor, tables, budget)
    finally:
        store.close()
    target = cursor.target.batch_id
    if not done:
        say(
            f"task {task}: warmup restore toward batch {target}: {rows} rows this run "
            f"(at most {budget}), continued next run"
        )
        return rows, False
    adopt_if_complete(state_dir, app, task, isolation)
    say(
        f"task {task}: restored {cursor.rows + rows} rows from the changelogs at batch "
        f"{target} in pieces (warmup restore complete, {rows} rows this run)"
    )
    return rows, True


def _apply_piece(
    layout: AppLayout,
    task: TaskId,
    store: StateStore,
    cursor: Cursor,
    tables: dict[str, tuple[object, int]],
    budget: int,
) -> tuple[int, bool]:
    """One transaction: the next ``budget`` keys after the cursor (their live rows) and the
    cursor moved past them; the last one with the target batch's offsets and marker.
    Returns (keys examined, done)."""
    n = cursor.target.batch_id
    names = list(tables)
    writes: list[tuple[str, list[tuple[bytes, bytes]]]] = []
    left = budget
    at, after = cursor.store, cursor.after
    for name in names[names.index(cursor.store) :]:
        if left == 0:  # the budget ended with the store before: this one starts next
            at, after = name, None
            break
        keys, values, last, examined = changelog.read_live_after(
            layout.changelog_path(name),
            task.partition,
            n,
            after if name == cursor.store else None,
            left,
            tables[name][0],
        )
        if len(keys):
            writes.append((name, list(zip(keys.to_pylist(), values.to_pylist(), strict=True))))
        left -= examined
        if last is not None:  # this store has more: the next piece goes on after ``last``
            at, after = name, last
            break
        at, after = None, None  # this store is done
    rows = budget - left
    if at is None:  # every store done: the last piece, with the target batch's marker
        faults.maybe_fail("mid_warmup_piece", n)
        faults.maybe_fail("mid_restore", n)  # as a one-shot restore's: before the marker
        commit_restored(store, layout, task, cursor.target, writes, ((META_NAMESPACE, CURSOR_KEY),))
        return rows, True
    moved = replace(cursor, store=at, after=after, rows=cursor.rows + rows)
    with store.new_transaction() as txn:
        for name, entries in writes:
            changelog.restore_into(txn, layout.app.topology.stores[name].kind, name, entries)
        faults.maybe_fail("mid_warmup_piece", n)
        txn.put(META_NAMESPACE, CURSOR_KEY, pickle.dumps(moved, pickle.HIGHEST_PROTOCOL))
        txn.commit()
    return rows, False
