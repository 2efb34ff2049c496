"""Recovery on start: where each task stands, and its local store brought there.

Per task, from its progress rows: its last batch is complete when every table the row
names holds it (their ``txn`` version for the task); the task's committed batch is that
one, or the one before when it is not complete, in which case the incomplete batch is
replayed first (``Recovered.replays``: same ranges, so the same rows; tables that hold it
skip it). Then the local store is brought to the committed batch:

- its batch marker and offsets equal the committed ones: go;
- one batch behind with that batch's transaction staged (a crash after the Delta commits,
  before the local commit): apply it;
- behind: catch up from the changelogs' rows after its batch;
- missing, ahead of Delta, behind a compaction, or behind a rewind (its batch is before
  the task's latest rewind row, ``progress.rewind_txn_id``: what it holds may be off the
  app's line, ops/rewind.py): restore from the changelogs.
A warmup's or standby's restore (``warm`` with a budget) is done in pieces across runs
beside the store instead (restore/warmup.py); a complete one left by a crash before
its swap is adopted here. Nothing is wiped when the store is consistent. An app mid-rewind (``rewind_intent``) is
refused before anything is read.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import pyarrow.compute as pc
from lakestate import console
from lakestate.checkpoint import changelog, faults, task_dir
from lakestate.checkpoint.batch import TaskCheckpoint
from lakestate.checkpoint.changelog import CompactedPastError
from lakestate.checkpoint.layout import AppLayout
from lakestate.checkpoint.standing import Recovered, where_tasks_stand
from lakestate.checkpoint.task_dir import TaskDir
from lakestate.restore import warmup
from lakestate.restore.restored import commit_restored, expected_offsets
from lakestate.state.base import IsolationLevel, StateStore, TopicPartition
from lakestate.state.registry import columnar_restore
from lakestate.task_id import TaskId

RESTORE_CHUNK = 100_000  # changelog rows per transaction of a restore
LOAD_CHUNK = 200_000  # entries turned into Python objects at once by a bulk load


def recover(
    layout: AppLayout,
    tasks: list[TaskId],
    state_dir: str,
    isolation: IsolationLevel,
    say: Callable[[str], None],
    recovered: Recovered | None = None,
) -> Recovered:
    """Where the tasks stand (``where_tasks_stand``, unless given), with every local store
    brought to its committed batch."""
    if recovered is None:
        recovered = where_tasks_stand(layout, tasks)
    for task in tasks:
        rewound = recovered.rewound.get(task, 0)
        recover_task(layout, task, recovered.committed[task], state_dir, isolation, say, rewound)
    return recovered


def recover_task(
    layout: AppLayout,
    task: TaskId,
    committed: TaskCheckpoint,
    state_dir: str,
    isolation: IsolationLevel,
    say: Callable[[str], None],
    rewound: int = 0,
) -> None:
    """Bring the owner's local store of ``task`` to ``committed`` (the batch of its latest
    rewind row: ``rewound``); its staged transactions and any warmup restore are dropped."""
    try:
        _bring_to(layout, task, committed, state_dir, isolation, say, rewound)
    finally:
        TaskDir(state_dir, layout.app.name, task).discard_staged()
        # The owner's store is complete now: a warmup restore in progress is moot.
        warmup.discard(state_dir, layout.app.name, task)


def _bring_to(
    layout: AppLayout,
    task: TaskId,
    committed: TaskCheckpoint,
    state_dir: str,
    isolation: IsolationLevel,
    say: Callable[[str], None],
    rewound: int = 0,
    rebuild: Callable[..., int] | None = None,
) -> int:
    """Bring the task's local store to ``committed``; returns the changelog rows (restore)
    or keys (catch-up) it applied. ``rebuild``: what restores a store that cannot be
    brought in place (``restore``'s signature; default ``restore``)."""
    rebuild = rebuild or restore
    app = layout.app.name
    if not TaskDir(state_dir, app, task).exists() and warmup.adopt_if_complete(
        state_dir, app, task, isolation
    ):
        # A crash between a warmup's last piece and its swap left the shadow, complete.
        say(f"task {task}: adopted its complete warmup restore as its local store")
    if not TaskDir(state_dir, app, task).exists():
        if committed.batch_id > 0:
            return rebuild(layout, task, committed, state_dir, isolation, say, "missing")
        return 0
    store = TaskDir(state_dir, app, task).open(isolation)
    try:
        reason, n = _bring_in_place(layout, task, committed, store, state_dir, say, rewound)
    finally:
        store.close()
    if reason is not None:
        return rebuild(layout, task, committed, state_dir, isolation, say, reason)
    return n


def warm(
    layout: AppLayout,
    task: TaskId,
    state_dir: str,
    isolation: IsolationLevel,
    say: Callable[[str], None],
    standing: Recovered | None = None,
    budget: int | None = None,
) -> int:
    """Bring the local store of a task this instance does not own (a warmup or a standby)
    to the task's last complete batch, as read in ``standing`` (read now when None): the
    changelogs' catch-up, or a restore. Never a replay and never a write to Delta (an
    incomplete batch is the owner's to finish), so it is safe while the owner commits: the
    changelogs are append-only and the batch read at the start stays complete. ``budget``
    (None: none): a restore applies at most that many changelog rows, one piece of a
    restore resumed by the next call (``restore/warmup.py``); the store is at the
    batch only once the last piece is in. Returns the rows or keys applied; the task's
    staged transactions are dropped."""
    if standing is None:
        standing = where_tasks_stand(layout, [task])
    rewound = standing.rewound.get(task, 0)
    committed = standing.committed[task]

    def in_pieces(layout, task, committed, state_dir, isolation, say, reason, again=True):
        say(f"task {task}: local store {reason}: restoring it in pieces beside it")
        rows, done = warmup.restore_piece(
            layout, task, committed, state_dir, isolation, say, rewound, budget
        )
        if done and again:  # at the shadow's target batch: catch up to the committed one
            # (once: should the store need a restore again, the next run starts it)
            once = functools.partial(in_pieces, again=False)
            rows += _bring_to(layout, task, committed, state_dir, isolation, say, rewound, once)
        return rows

    try:
        return _bring_to(
            layout,
            task,
            committed,
            state_dir,
            isolation,
            say,
            rewound,
            None if budget is None else in_pieces,
        )
    finally:
        TaskDir(state_dir, layout.app.name, task).discard_staged()


def _bring_in_place(
    layout: AppLayout,
    task: TaskId,
    committed: TaskCheckpoint,
    store: StateStore,
    state_dir: str,
    say: Callable[[str], None],
    rewound: int,
) -> tuple[str | None, int]:
    """Bring an existing store to the committed batch without a restore if it can be done
    (None, and the keys caught up); else why it must be restored."""
    app = layout.app.name
    held_batch = task_dir.local_batch(store) or 0
    if held_batch < rewound:
        # It may hold batches the rewind undid (and a batch staged beside it may carry the
        # id the rewind row took): only the changelogs are on the app's line.
        return f"behind the rewind at batch {rewound}", 0
    # A staged batch is applied only when the progress row of that batch is the one it
    # was processed for (same run): a fenced zombie's staged batch b+1 is never applied
    # over the b+1 another instance committed (different ranges); the store catches up.
    if (
        held_batch == committed.batch_id - 1
        and committed.batch_id in TaskDir(state_dir, app, task).staged_batches()
        and committed.run_id is not None
        and TaskDir(state_dir, app, task).staged_run_id(committed.batch_id) == committed.run_id
    ):
        TaskDir(state_dir, app, task).apply_staged(store, committed.batch_id)
        say(f"task {task}: applied the staged transaction of batch {committed.batch_id}")
        held_batch = committed.batch_id
    if held_batch == committed.batch_id and _same(
        _held(store, layout, task), committed, layout, task
    ):
        return None, 0
    if 0 < held_batch < committed.batch_id:
        try:
            n = _catch_up(layout, task, store, held_batch, committed)
        except CompactedPastError:
            return "behind a compaction", 0
        say(
            f"task {task}: caught up from batch {held_batch} to {committed.batch_id} "
            f"from the changelogs ({n} keys)"
        )
        return None, n
    return ("ahead of Delta" if held_batch > committed.batch_id else "inconsistent"), 0


def _held(store: StateStore, layout: AppLayout, task: TaskId) -> dict[TopicPartition, int]:
    inputs = set(layout.inputs[task.subtopology])
    return {tp: o for tp, o in store.committed_offsets().items() if tp.topic in inputs}


def _same(held, committed: TaskCheckpoint, layout: AppLayout, task: TaskId) -> bool:
    expected = expected_offsets(layout, task, committed)
    keys = set(held) | set(expected)
    return all(held.get(k, 0) == expected.get(k, 0) for k in keys)


def _catch_up(
    layout: AppLayout, task: TaskId, store: StateStore, held: int, committed: TaskCheckpoint
) -> int:
    writes = []
    n = 0
    for name in layout.stores_of(task.subtopology):
        changes = changelog.read_changes(
            layout.changelog_path(name), layout.app.name, task, held, committed.batch_id
        )
        writes.append((name, changes.items()))
        n += len(changes)
    commit_restored(store, layout, task, committed, writes)
    return n


def restore(
    layout: AppLayout,
    task: TaskId,
    committed: TaskCheckpoint,
    state_dir: str,
    isolation: IsolationLevel,
    say: Callable[[str], None],
    reason: str,
) -> int:
    """Rebuild the task's local store from the changelogs as of its committed batch."""
    app = layout.app.name
    local = TaskDir(state_dir, app, task)
    local.wipe()
    store = local.open(isolation)
    total = 0
    try:
        # In chunks; only the last commit (commit_restored) carries the batch marker, so a crash
        # mid-restore leaves a store that the next start restores again.
        for name in layout.stores_of(task.subtopology):
            kind = layout.app.topology.stores[name].kind
            path = layout.changelog_path(name)
            with console.progress(f"restore {app} task {task} {name}: rows") as bar:
                if columnar_restore(kind) is not None:
                    keys, values = changelog.read_live(path, task.partition, committed.batch_id)
                    bar.update(total=len(keys))
                    total += load(store, kind, name, keys, values, committed.batch_id, bar)
                    continue
                state = changelog.read_state(path, task.partition, committed.batch_id)
                entries = list(state.items())
                bar.update(total=len(entries))
                for start in range(0, len(entries), RESTORE_CHUNK):
                    chunk = entries[start : start + RESTORE_CHUNK]
                    with store.new_transaction() as txn:
                        changelog.restore_into(txn, kind, name, chunk)
                        txn.commit()
                    bar.advance(len(chunk))
                    faults.maybe_fail("mid_restore", committed.batch_id)
                total += len(entries)
        commit_restored(store, layout, task, committed, [])
    finally:
        store.close()
    say(
        f"task {task}: restored {total} rows from the changelogs at batch "
        f"{committed.batch_id} (local store {reason})"
    )
    return total


def load(
    store: StateStore,
    kind: str,
    name: str,
    raw_keys: Any,
    raw_values: Any,
    batch_id: int,
    bar: console.Bar | None = None,
) -> int:
    """Fill store ``name`` of a wiped local store from its live changelog rows (Arrow
    arrays, one row per key): the entries the kind derives from them (``restore_columns``),
    sorted, loaded straight into the store (``bulk_load``). Returns the number of rows.
    ``bar``: advanced by the rows as they load."""
    restore_columns = columnar_restore(kind)
    if restore_columns is None:
        raise ValueError(f"store kind {kind!r} restores through transactions only")
    keys, values = restore_columns(raw_keys, raw_values)
    order = pc.sort_indices(keys)  # bytewise, RocksDB's order
    keys, values = keys.take(order), values.take(order)
    # A kind may derive more entries than rows (an index beside its data): the bar counts
    # rows, in proportion.
    per_entry = len(raw_keys) / len(keys) if len(keys) else 0.0
    bar = bar or console.Bar()

    def chunks():
        for start in range(0, len(keys), LOAD_CHUNK):
            chunk = keys.slice(start, LOAD_CHUNK), values.slice(start, LOAD_CHUNK)
            yield chunk[0].to_pylist(), chunk[1].to_pylist()
            bar.advance(len(chunk[0]) * per_entry)

    store.bulk_load(name, chunks())
    faults.maybe_fail("mid_restore", batch_id)
    return len(raw_keys)
