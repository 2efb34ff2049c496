"""The commit protocol of a batch: the steps, in order, in one place.

A batch is a set of task batches: task ``t`` processes its next offset ranges as its batch
``b_t`` (each task numbers its own batches). The steps (the engine's runner calls
``commit_batch`` after step 1; the test driver goes through the same task phases, see
``processors/task.py``: ``prepare_commit`` then ``complete_commit``):

1. Prepare: each task's worker processes its records against its local store, stages its
   transaction durably beside the store (data, offsets, stream time) and hands over its
   output rows, changelog rows and a ``TaskResult``.
2. Record progress: one commit to the app's progress table, a row per task with its plan,
   offsets, stream time, metrics totals (so status reads the last row only) and the tables
   it writes, and a Delta ``txn`` per task (version: its batch). This is the fence: if another run committed one of these task batches, this
   commit fails and the run stops having written nothing. (A task being replayed already
   has its row: it is skipped here.)
3. Commit the tables: one append per sink topic, repartition topic and changelog, at once,
   each carrying the ``txn`` of every task whose rows it holds and the batch's identity in
   its metadata. A table that already holds a task's batch (a replay) gets none of that
   task's rows. When all have succeeded the batch is complete. A Kafka sink topic is one
   more table: each task batch's records in a Kafka transaction that also commits the
   batch as its marker (``io/kafka/appends.py``; docs/architecture.md, "Kafka topics").
   When Spark's executors own the state, a log table's or changelog's rows stay on them:
   they are written as files before step 2 and step 3 commits the files
   (``executor_writes.py``).
4. Complete: each task's local store applies its staged transaction (data, offsets, stream
   time and batch marker in one RocksDB write batch).

Then, for an app with a Kafka cluster, the batch's next offsets of its Kafka source topics
are mirrored to the consumer group ``application.id`` (a mirror: never read back).

A crash between steps is repaired by the next run (``recovery.py``): after step 2 the
batch is replayed from its progress rows (same ranges, same state, so the same rows), and
tables that hold it skip it; after step 3 the staged transaction is applied (or the store
catches up from the changelog). Before step 2 nothing durable happened: the batch is
planned afresh.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from lakestate.checkpoint import changelog, executor_writes, faults, progress
from lakestate.checkpoint.executor_writes import RowsElsewhere, as_records
from lakestate.checkpoint.layout import AppLayout
from lakestate.checkpoint.task_dir import TaskDir
from lakestate.errors import StreamsException, TaskMigratedException
from lakestate.io import delta_commits
from lakestate.io.deltasink import DeltaSinkTopic
from lakestate.io.kafka import KafkaTopic
from lakestate.io.kafka import admin as kafka_admin
from lakestate.io.logtable import LogTableTopic
from lakestate.state.base import IsolationLevel
from lakestate.task_id import TaskId

_log = logging.getLogger(__name__)

# Tables of one batch committed at once (step 3).
COMMIT_THREADS = 4


class BatchRefused(TaskMigratedException):
    """The batch's progress commit failed (another run committed one of its task batches
    first, or a fence moved): nothing of the batch was committed, its staged transactions
    are discarded."""


@dataclass(frozen=True)
class TaskResult:
    """What a task's worker hands over in step 1."""

    task: TaskId
    batch_id: int
    ranges: dict[str, tuple[int, int]]
    offsets: dict[str, int]  # every input's next offset after the batch
    stream_time: int
    records: int
    # The task's metrics totals after the batch: its previous progress row's plus the
    # batch's counts, its values replacing theirs (lakestate.processors.metrics.accumulate).
    metrics: dict[str, Any] = field(default_factory=dict)
    outputs: dict[str, dict[int, int]] = field(default_factory=dict)  # topic -> partition -> n
    stores: tuple[str, ...] = ()  # stores with changelog rows
    processor_metadata: dict[str, int] = field(default_factory=dict)


def tables_of(layout: AppLayout, result: TaskResult) -> tuple[str, ...]:
    """The tables a task's batch writes, relative to the warehouse: topics it output to,
    changelogs it changed."""
    wh = layout.warehouse
    topics = [
        _table_name(layout, t) for t, per in sorted(result.outputs.items()) if any(per.values())
    ]
    stores = [layout.changelog_path(s) for s in sorted(result.stores)]
    return tuple(wh.relative(p) for p in topics + stores)


def _table_name(layout: AppLayout, topic: str) -> str:
    """How a progress row names a topic its batch writes: a log table by its path, a Kafka
    topic by its location (``kafka://<bootstrap servers>/<topic>``), a Delta sink by its
    table's."""
    found = layout.topic(topic)
    if isinstance(found, KafkaTopic | DeltaSinkTopic):
        return found.location
    return layout.warehouse.topic_path(topic)


def commit_batch(
    layout: AppLayout,
    run_id: str,
    results: list[TaskResult],
    rows: pa.Table,
    replayed: set[TaskId],
    state_dir: str | None,
    isolation: IsolationLevel,
    fences: Mapping[str, int] | None = None,
    elsewhere: RowsElsewhere | None = None,
) -> None:
    """Steps 2-4 for the task batches ``results`` (step 1 done); ``rows`` is the processing
    output (kind ``out`` and ``state`` rows of every task). ``fences``: txn versions the
    progress commit checks and carries (``progress.record``). A progress commit that fails
    (TaskMigratedException: another run got there first, or a fence moved) discards the
    batch's staged transactions: nothing of the batch is left anywhere. ``state_dir``
    None: the stores are the Spark executors' (runtime/executor_stores.py), which do step 4
    at the start of each task's next batch, and drop a staged transaction whose progress
    row is not theirs. ``elsewhere``: the rows of the log-table topics and changelogs are
    not in ``rows`` but where they were made, which writes them as files before step 2
    (``executor_writes``); step 3 commits those files."""
    app = layout.app.name
    batches = {r.task: r.batch_id for r in results}
    identity = {
        "app": app,
        "run_id": run_id,
        "batches": {str(t): b for t, b in sorted(batches.items())},
    }
    outputs = _outputs_by_topic(layout, results, rows)
    with _written_elsewhere(layout, results, outputs, batches, identity, elsewhere) as commits:
        for topic, (topic_rows, _) in outputs.items():
            if f"after_sink:{topic}" not in commits:
                layout.topic(topic).check_append(as_records(topic_rows, topic_rows.column("pseq")))
        writes = _table_writes(layout, results, outputs, rows, batches, identity)
        writes = [(point, commits.get(point, write)) for point, write in writes]
        _steps_2_and_3(layout, run_id, results, replayed, state_dir, fences, identity, writes)

    # 4. Complete: the local stores commit.
    if state_dir is not None:
        _complete(state_dir, app, results, isolation)

    # After the commit: the offsets mirrored to Kafka for the usual lag tools.
    _mirror_offsets(layout, results)


def _steps_2_and_3(
    layout: AppLayout,
    run_id: str,
    results: list[TaskResult],
    replayed: set[TaskId],
    state_dir: str | None,
    fences: Mapping[str, int] | None,
    identity: dict,
    writes: list[tuple[str, Callable[[], None] | None]],
) -> None:
    """Record progress (the fence), then the tables' ``writes`` (``_table_writes``)."""
    batches = {r.task: r.batch_id for r in results}
    first = min(batches.values())
    faults.maybe_fail("before_progress", first)

    # 2. Record progress (the fence).
    fresh = [r for r in results if r.task not in replayed]
    if fresh:
        try:
            _record(layout, run_id, results, replayed, identity, progress.now_ms(), fences)
        except TaskMigratedException as exc:
            for r in results:
                if state_dir is not None:
                    TaskDir(state_dir, layout.app.name, r.task).discard_staged()
            raise BatchRefused(str(exc)) from exc
    faults.maybe_fail("after_progress", first)

    # 3. Commit the tables, at once.
    _run_all(writes, first)
    faults.maybe_fail("after_tables", first)


@contextlib.contextmanager
def _written_elsewhere(
    layout: AppLayout,
    results: list[TaskResult],
    outputs: dict[str, tuple[pa.Table, dict[TaskId, dict[int, int]]]],
    batches: dict[TaskId, int],
    identity: dict,
    elsewhere: RowsElsewhere | None,
) -> Iterator[dict[str, Callable[[], None]]]:
    """With ``elsewhere``: the log-table topics' and changelogs' files written where the
    rows are, the topics' append locks held while the block runs; yields each such
    table's commit, by its fault point. Without: nothing."""
    if elsewhere is None:
        yield {}
        return
    counts = {
        topic: per_task
        for topic, (_, per_task) in outputs.items()
        if isinstance(layout.topic(topic), LogTableTopic | DeltaSinkTopic)
    }
    stores: dict[str, dict[TaskId, int]] = {}
    for r in results:
        for store in r.stores:
            stores.setdefault(store, {})[r.task] = r.batch_id
    with executor_writes.planned(layout, counts, stores, batches) as plan:
        files = elsewhere.write_files(plan.writes)
        yield executor_writes.commits(layout, plan, files, elsewhere, identity)


def _complete(
    state_dir: str, app: str, results: list[TaskResult], isolation: IsolationLevel
) -> None:
    """Step 4: each task's local store applies the transaction it staged."""
    first = min(r.batch_id for r in results)
    for index, r in enumerate(sorted(results, key=lambda r: r.task)):
        local = TaskDir(state_dir, app, r.task)
        store = local.open(isolation)
        try:
            local.apply_staged(store, r.batch_id)
        finally:
            store.close()
        if index == 0:
            faults.maybe_fail("mid_local_commit", first)


def _outputs_by_topic(
    layout: AppLayout, results: list[TaskResult], rows: pa.Table
) -> dict[str, tuple[pa.Table, dict[TaskId, dict[int, int]]]]:
    """Each output topic some task wrote to: its ``out`` rows, and per task the records
    written to each of its partitions."""
    found = {}
    out = _where(rows, pc.equal(rows.column("kind"), "out"))
    for topic in sorted(layout.outputs):
        counts = {
            r.task: r.outputs[topic] for r in results if any(r.outputs.get(topic, {}).values())
        }
        if counts:
            found[topic] = (_where(out, pc.equal(out.column("topic"), topic)), counts)
    return found


def _table_writes(
    layout: AppLayout,
    results: list[TaskResult],
    outputs: dict[str, tuple[pa.Table, dict[TaskId, dict[int, int]]]],
    rows: pa.Table,
    batches: dict[TaskId, int],
    identity: dict,
) -> list[tuple[str, Callable[[], None] | None]]:
    """Step 3's writes, each with the fault point after it: one per output topic (None: no
    task wrote to it) and one per store, in name order."""
    writes: list[tuple[str, Callable[[], None] | None]] = []
    for topic in sorted(layout.outputs):
        write = None
        if topic in outputs:
            topic_rows, counts = outputs[topic]
            write = _bind(_append_topic, layout, topic, topic_rows, counts, batches, identity)
        writes.append((f"after_sink:{topic}", write))
    state = _where(rows, pc.equal(rows.column("kind"), "state"))
    for store in sorted({s for r in results for s in r.stores}):
        store_tasks = {r.task: r.batch_id for r in results if store in r.stores}
        store_rows = _where(state, pc.equal(state.column("store"), store))
        write = _bind(_append_changelog, layout, store, store_rows, store_tasks, identity)
        writes.append((f"after_changelog:{store}", write))
    return writes


def _mirror_offsets(layout: AppLayout, results: list[TaskResult]) -> None:
    """Commit the batch's next offsets of its Kafka source topics to the consumer group
    ``application.id``, as Kafka Streams' consumer would. A mirror only: the progress table
    is the source of truth, and a mirror that fails (the cluster away) is left to the next
    batch's, with a warning."""
    if layout.cluster is None:
        return
    offsets: dict[str, dict[int, int]] = {}
    for r in results:
        for topic in layout.inputs[r.task.subtopology]:
            if topic in layout.kafka_topics and topic in r.offsets:
                offsets.setdefault(topic, {})[r.task.partition] = r.offsets[topic]
    try:
        kafka_admin.commit_group_offsets(layout.cluster, layout.app.application_id, offsets)
    except StreamsException as exc:
        _log.warning("app %s: offsets not mirrored to Kafka: %s", layout.app.name, exc)


def _record(
    layout: AppLayout,
    run_id: str,
    results: list[TaskResult],
    replayed: set[TaskId],
    identity: dict,
    at: int,
    fences: Mapping[str, int] | None,
) -> None:
    """Step 2: the progress rows of the task batches not being replayed."""
    progress.record(
        layout.progress_path,
        layout.app.name,
        [
            progress.TaskProgress(
                r.task,
                r.batch_id,
                run_id,
                at,
                r.ranges,
                r.offsets,
                r.stream_time,
                r.records,
                tables_of(layout, r),
                r.metrics,
                r.processor_metadata,
            )
            for r in results
            if r.task not in replayed
        ],
        identity,
        fences=fences,
    )


def _bind(fn: Callable[..., None], *args: Any) -> Callable[[], None]:
    return lambda: fn(*args)


def _not_held(table, app: str, batches: Mapping[TaskId, int]) -> dict[TaskId, int]:
    """The task batches ``table`` does not hold yet."""
    held = delta_commits.txn_versions(table, app, list(batches))
    return {t: b for t, b in batches.items() if held[t] < b}


def _where(rows: pa.Table, mask: pa.ChunkedArray) -> pa.Table:
    """``rows.filter(mask)``, without the copy when every row is kept (one output topic,
    one store: the usual batch)."""
    return rows if pc.all(mask, skip_nulls=False).as_py() else rows.filter(mask)


def _task_mask(rows: pa.Table, tasks: set[TaskId]) -> pa.Array:
    subs = rows.column("sub").to_numpy(zero_copy_only=False)
    parts = rows.column("task").to_numpy(zero_copy_only=False)
    mask = np.zeros(len(subs), dtype=bool)
    for t in tasks:
        mask |= (subs == t.subtopology) & (parts == t.partition)
    return pa.array(mask)


def _append_changelog(
    layout: AppLayout, store: str, rows: pa.Table, batches: dict[TaskId, int], identity: dict
) -> None:
    app = layout.app.name
    path = layout.changelog_path(store)
    table = delta_commits.open_table(path)
    todo = _not_held(table, app, batches)
    if todo:
        if len(todo) < len(batches):
            rows = rows.filter(_task_mask(rows, set(todo)))
        kind = layout.app.topology.stores[store].kind
        data = changelog.batch_rows(kind, rows, {t.partition: b for t, b in todo.items()})
        delta_commits.append(table, data, app, todo, identity)
    delta_commits.release(table)


def _append_topic(
    layout: AppLayout,
    topic: str,
    rows: pa.Table,
    counts: dict[TaskId, dict[int, int]],
    batches: dict[TaskId, int],
    identity: dict,
) -> None:
    """Append the batch's records of ``topic``: after each partition's end, in task order,
    each task's records in the order it emitted them (``pseq`` numbers them per partition)."""

    def build(todo: dict[TaskId, int], ends: dict[int, int]) -> pa.Table:
        selected = rows if len(todo) == len(counts) else rows.filter(_task_mask(rows, set(todo)))
        bases = executor_writes.offset_bases({t: counts[t] for t in todo}, ends)
        where = [
            selected.column(c).to_numpy(zero_copy_only=False).astype(np.int64)
            for c in ("sub", "task", "partition")
        ]
        # Each row's base, looked up once per distinct (sub, task, partition), not per row:
        # the three (ints >= 0) as one int, in mixed radix (np.unique of a 1-d int array).
        key = where[0]
        for column in where[1:]:
            key = key * (int(column.max(initial=0)) + 1) + column
        _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
        per_key = [bases[tuple(int(c[i]) for c in where)] for i in first.tolist()]
        base = np.array(per_key, dtype=np.int64)[inverse.reshape(-1)]
        offsets = base + selected.column("pseq").to_numpy(zero_copy_only=False)
        return as_records(selected, pa.array(offsets, pa.int64()))

    tasks = {t: batches[t] for t in counts}
    layout.topic(topic).append_batch(layout.app.name, tasks, build, identity)


def _run_all(writes: list[tuple[str, Callable[[], None] | None]], batch_id: int) -> None:
    """Run the writes at once, each followed by its fault point; wait for all, then raise
    the first failure (the batch stays incomplete: the next run replays it). Under fault
    injection they run one after another, so that a kill after table X leaves exactly the
    tables before X written."""

    def run(point: str, write: Callable[[], None] | None) -> None:
        if write is not None:
            write()
        faults.maybe_fail(point, batch_id)

    workers = 1 if faults.active() else COMMIT_THREADS
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="commit") as pool:
        futures = [pool.submit(run, point, write) for point, write in writes]
    for future in futures:
        future.result()
