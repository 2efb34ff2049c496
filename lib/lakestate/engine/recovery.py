"""Recovery on start: bring every local task store to the last committed batch.

Per task, compare the offsets the local store holds with the last commit's:
its offsets equal to the committed ones → go; the committed batch's transaction staged on
disk → apply it (the crash came between the Delta commits and the local commit); behind
otherwise → catch up from the state tables' Change Data Feed, from the last batch the store
committed (its batch marker); no store, or ahead of Delta → restore from the state tables.
Nothing is wiped on a crash that left a consistent store.
"""

from __future__ import annotations

from collections.abc import Callable

from pyspark.sql import SparkSession

from lakestate.engine import batches, local, state_tables
from lakestate.engine.batches import BatchLog, CommitRecord
from lakestate.engine.layout import AppLayout
from lakestate.state.base import IsolationLevel, StateStore, TopicPartition
from lakestate.state.registry import restore_entry

RESTORE_CHUNK = 50_000


def recover(
    spark: SparkSession,
    layout: AppLayout,
    log: BatchLog,
    state_dir: str,
    isolation: IsolationLevel,
    say: Callable[[str], None],
) -> None:
    app = layout.app.name
    commit = log.last_commit
    committed = log.committed_batch
    for sub, partition in layout.tasks():
        task_id = f"{sub}_{partition}"
        expected = {} if commit is None else _task_offsets(layout, commit, sub, partition)
        if not local.store_exists(state_dir, app, task_id):
            if expected:
                _restore(
                    spark, layout, commit, state_dir, sub, partition, isolation, say, "missing"
                )
            local.discard_staged(state_dir, app, task_id)
            continue
        store = local.open_task_store(state_dir, app, task_id, isolation)
        try:
            if not _same(_held(store, layout, sub), expected) and local.has_staged(
                state_dir, app, task_id, committed
            ):
                local.apply_staged(store, state_dir, app, task_id, committed)
                say(f"task {task_id}: applied the staged transaction of batch {committed}")
            held = _held(store, layout, sub)
            if _same(held, expected):
                continue
            held_batch = local.local_batch(store)
            behind = all(held.get(tp, 0) <= offset for tp, offset in expected.items())
            if held_batch is not None and 0 < held_batch < committed and behind:
                _catch_up(spark, layout, store, commit, held_batch, sub, partition, say)
            else:
                store.close()
                reason = "behind without a usable batch marker" if behind else "ahead of Delta"
                _restore(spark, layout, commit, state_dir, sub, partition, isolation, say, reason)
        finally:
            store.close()
            local.discard_staged(state_dir, app, task_id)


def _held(store: StateStore, layout: AppLayout, sub: int) -> dict[TopicPartition, int]:
    inputs = set(layout.inputs[sub])
    return {tp: o for tp, o in store.committed_offsets().items() if tp.topic in inputs}


def _same(held: dict[TopicPartition, int], expected: dict[TopicPartition, int]) -> bool:
    keys = set(held) | set(expected)
    return all(held.get(k, 0) == expected.get(k, 0) for k in keys)


def _task_offsets(layout: AppLayout, commit: CommitRecord, sub: int, partition: int):
    offsets = {}
    for topic in layout.inputs[sub]:
        offset = commit.offsets.get(topic, {}).get(partition)
        if offset is not None:
            offsets[TopicPartition(topic, partition)] = offset
    return offsets


def _finish(
    store: StateStore, layout, commit: CommitRecord, sub: int, partition: int, writes: list
) -> None:
    """Commit ``writes`` with the committed batch's offsets, stream time and batch marker."""
    with store.new_transaction() as txn:
        for namespace, key, value in writes:
            kind = layout.app.topology.stores[namespace].kind
            restore_entry(kind, txn, namespace, key, value)
        stream_time = commit.stream_times.get(f"{sub}_{partition}")
        if stream_time is not None:
            txn.set_stream_time(stream_time)
        namespace, key, value = local.batch_marker(commit.batch_id)
        txn.put(namespace, key, value)
        txn.commit(_task_offsets(layout, commit, sub, partition))


def _catch_up(
    spark,
    layout: AppLayout,
    store: StateStore,
    commit: CommitRecord,
    held: int,
    sub: int,
    partition: int,
    say,
) -> None:
    held_commit = _commit_of(spark, layout, held)
    writes = []
    for name in layout.stores_of(sub):
        path = layout.state_path(name)
        changes = state_tables.read_task_changes(
            spark, path, partition, held_commit.state_versions[name], commit.state_versions[name]
        )
        writes.extend((name, key, value) for key, value in changes)
    _finish(store, layout, commit, sub, partition, writes)
    say(
        f"task {sub}_{partition}: caught up from batch {held} to {commit.batch_id} "
        f"from the change data feed ({len(writes)} keys)"
    )


def _commit_of(spark, layout: AppLayout, batch_id: int) -> CommitRecord:
    for record in batches.history(spark, layout.batches_path, limit=1_000_000):
        if record.batch_id == batch_id:
            return record
    raise LookupError(f"no commit record for batch {batch_id}")


def _restore(
    spark,
    layout: AppLayout,
    commit: CommitRecord | None,
    state_dir: str,
    sub: int,
    partition: int,
    isolation: IsolationLevel,
    say,
    reason: str,
) -> None:
    app = layout.app.name
    task_id = f"{sub}_{partition}"
    local.wipe(state_dir, app, task_id)
    store = local.open_task_store(state_dir, app, task_id, isolation)
    try:
        if commit is None:
            return  # nothing committed yet: an empty store is the committed state
        total = 0
        for name in layout.stores_of(sub):
            kind = layout.app.topology.stores[name].kind
            rows = state_tables.read_task_rows(
                spark, layout.state_path(name), partition, commit.state_versions[name]
            )
            # Restore in chunks; only the last commit carries the batch marker, so a crash
            # mid-restore leaves a store that the next start restores again.
            for start in range(0, len(rows), RESTORE_CHUNK):
                with store.new_transaction() as txn:
                    for key, value in rows[start : start + RESTORE_CHUNK]:
                        restore_entry(kind, txn, name, bytes(key), bytes(value))
                    txn.commit()
            total += len(rows)
        _finish(store, layout, commit, sub, partition, [])
        say(
            f"task {task_id}: restored {total} rows from Delta at batch {commit.batch_id} "
            f"(local store {reason})"
        )
    finally:
        store.close()
