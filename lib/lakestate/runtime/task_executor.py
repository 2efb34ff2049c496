"""Processing one task's share of a batch, in a Spark worker or in the driver (the
transports, ``runtime/transport.py``, both call ``process_task``).

Runs the same Task and processors as the test driver against the task's local store, stages
the resulting transaction beside the store, and returns rows for the driver to commit
(``batch_rows``): ``out`` rows (records for sink and repartition topics, in emission
order), ``state`` rows (the task's state changes, one per changed key, with the store's
typed columns in a struct column per store kind, so that they reach the Delta table without
a JSON round trip) and one ``task`` row, the task's ``TaskOutcome`` (``runtime/outcome.py``).

Global tables: a task's rows also hold the new records of every global table's topic (all
partitions, ``input_index`` ``GLOBAL_INPUT``), which it puts into its global stores, in its
own transaction, before it processes its inputs: the global stores live in the task's local
store, commit with it and have no changelog (the global topic is their record).
"""

from __future__ import annotations

import heapq
import operator
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import islice
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from lakestate.app import KAFKA_CONFIG_ENV, App, load_app
from lakestate.checkpoint.batch import global_key, split_global_key
from lakestate.checkpoint.task_dir import TaskDir
from lakestate.errors import ProcessingException, SerializationException, StreamsException
from lakestate.processors.exception_handlers import RecordFailure
from lakestate.processors.gc_pause import cyclic_gc_paused
from lakestate.processors.task import Task
from lakestate.runtime.batch_rows import (
    GLOBAL_INPUT,
    INPUT_COLUMNS,
    Rows,
    key_serdes_of,
    out_fields,
    output_rows,
    state_rows,
    store_kinds,
)
from lakestate.runtime.executor_stores import ExecutorStores
from lakestate.runtime.outcome import TaskOutcome
from lakestate.runtime.record_decoding import (
    Codec,
    Decoder,
    codecs_of,
    decoded_headers,
    processing_failure,
)
from lakestate.state.base import IsolationLevel, TopicPartition
from lakestate.state.registry import open_view
from lakestate.task_id import TaskId

# Records a task takes at once when its processors take chunks (see Task.process_chunk).
CHUNK_RECORDS = 50_000

_apps: dict[str, tuple[tuple[int | None, int | None, str | None], App]] = {}


@dataclass(frozen=True)
class BatchContext:
    """Everything a worker needs, shipped with the function (small and picklable)."""

    app_path: str
    app_name: str
    batches: dict[str, int]  # task id -> the task's batch
    state_dir: str
    isolation: IsolationLevel
    topic_partitions: dict[str, int]  # output topic -> partition count
    starts: dict[str, dict[str, int]]  # task id -> input topic -> first offset of the batch
    # task id -> the run whose progress row records the batch, staged with it (recovery
    # applies a staged batch only for the row of the same run)
    run_ids: dict[str, str] = field(default_factory=dict)
    #: set when the executors own the stores (a Spark cluster): each task's store is then in
    #: the executor's own state directory, brought to the task's committed batch first
    #: (``state_dir`` is the driver's and unused)
    executor_stores: ExecutorStores | None = None


def loaded_app(path: str) -> App:
    """The app at ``path``, loaded once per process (in the worker itself: its lambdas
    need not be picklable) and again when its file or ``LAKESTATE_KAFKA_CONFIG`` changed:
    a notebook, or a Spark Python worker kept between runs, that runs an edited app
    processes with the edit."""
    stamp = _stamp(path)
    cached = _apps.get(path)
    if cached is not None and cached[0] == stamp:
        return cached[1]
    app = load_app(path)
    _apps[path] = (stamp, app)
    return app


def remember_app(path: str, app: App) -> None:
    """Make ``app`` (the one a run loaded from ``path``) the one this process's tasks run,
    so that the driver's plan and its tasks see one app."""
    _apps[path] = (_stamp(path), app)


def _stamp(path: str) -> tuple[int | None, int | None, str | None]:
    try:
        found = os.stat(path)
        return found.st_mtime_ns, found.st_size, os.environ.get(KAFKA_CONFIG_ENV)
    except OSError:
        return None, None, os.environ.get(KAFKA_CONFIG_ENV)


def _in_order(columns: dict[str, list]) -> list[int]:
    """Row indices of one task's records: each input in offset order; across inputs, the
    input whose next record has the lowest timestamp goes first (ties: input order), like
    Kafka's PartitionGroup."""
    offsets, inputs, timestamps = columns["offset"], columns["input_index"], columns["timestamp"]
    if inputs and inputs.count(inputs[0]) == len(inputs) and _ascending(offsets):
        return list(range(len(offsets)))  # one input, read in offset order: as it stands
    by_input: dict[int, list[int]] = {}
    for i, index in enumerate(inputs):
        by_input.setdefault(index, []).append(i)
    queues = [sorted(rows, key=offsets.__getitem__) for _, rows in sorted(by_input.items())]
    if len(queues) == 1:
        return queues[0]
    order = []
    heap = [(timestamps[q[0]], inputs[q[0]], 0, n) for n, q in enumerate(queues) if q]
    heapq.heapify(heap)
    while heap:
        _, _, pos, n = heapq.heappop(heap)
        order.append(queues[n][pos])
        if pos + 1 < len(queues[n]):
            nxt = queues[n][pos + 1]
            heapq.heappush(heap, (timestamps[nxt], inputs[nxt], pos + 1, n))
    return order


def _ascending(values: list[int]) -> bool:
    """Whether ``values`` never decrease (one C-level pass)."""
    return all(map(operator.le, values, islice(values, 1, None)))


def process_partition(
    batches: Iterator[pa.RecordBatch], ctx: BatchContext
) -> Iterator[pa.RecordBatch]:
    """Process the records of one Spark partition: every task they belong to, one task
    at a time, in task order (a partition usually holds one task)."""
    received = list(batches)
    table = pa.Table.from_batches(received) if received else None
    if table is None or table.num_rows == 0:
        return  # an empty partition (Spark may pass no batch at all)
    sub_column, task_column = table.column("sub"), table.column("task")
    tasks = sorted(set(zip(sub_column.to_pylist(), task_column.to_pylist(), strict=True)))
    for sub, partition in tasks:
        if len(tasks) == 1:
            records = table
        else:
            mask = pc.and_(pc.equal(sub_column, sub), pc.equal(task_column, partition))
            records = table.filter(mask)
        yield from process_task(records, ctx).to_batches()


def process_task(records: pa.Table, ctx: BatchContext) -> pa.Table:
    """Process the batch's records of one task (all rows share ``sub`` and ``task``), with
    the cyclic garbage collector paused (see processors/gc_pause.py)."""
    with cyclic_gc_paused():
        return _process_task(records, ctx)


def _process_task(records: pa.Table, ctx: BatchContext) -> pa.Table:
    sub = records.column("sub")[0].as_py()
    partition = records.column("task")[0].as_py()
    is_global = pc.equal(records.column("input_index"), GLOBAL_INPUT)
    updates = records.filter(is_global)
    records = records.filter(pc.invert(is_global))
    columns = {name: records.column(name).to_pylist() for name in INPUT_COLUMNS[2:]}
    del records  # the columns above are what is needed: free the Arrow buffers early
    task_id = str(TaskId(sub, partition))
    app = loaded_app(ctx.app_path)
    state_dir = ctx.state_dir
    if ctx.executor_stores is not None:
        state_dir = ctx.executor_stores.bring(app, TaskId(sub, partition), ctx.isolation)
    local = TaskDir(state_dir, ctx.app_name, task_id)
    store = local.open(ctx.isolation)
    try:
        _check_starts(store, ctx, app, task_id, partition)
        task, global_views = _open_task(app, sub, partition, store)
        reached, processed, global_reached = _process_all(task, app, global_views, updates, columns)
        del updates, columns
        return _hand_over(task, store, local, app, ctx, (reached, global_reached, processed))
    finally:
        store.close()


def _check_starts(store, ctx: BatchContext, app: App, task_id: str, partition: int) -> None:
    """The task's local store stands where its batch starts (recovery ran), or an error."""
    global_topics = [g.topic for g in app.topology.global_tables]
    held = store.committed_offsets()
    for topic, start in ctx.starts[task_id].items():
        split = split_global_key(topic, global_topics)
        tp = TopicPartition(*split) if split else TopicPartition(topic, partition)
        if held.get(tp, 0) != start:
            raise StreamsException(
                f"local store of task {task_id} holds offset {held.get(tp, 0)} of "
                f"{topic!r}, but batch {ctx.batches[task_id]} starts at {start}: recovery "
                "must run before processing"
            )


def _open_task(app: App, sub: int, partition: int, store) -> tuple[Task, dict[str, Any]]:
    """The batch's Task on ``store``, and its global stores' views."""
    task: Task | None = None
    # The global stores read and write the task's open transaction (bound late: the task,
    # made below, opens it).
    global_views = {
        g.store: open_view(
            g.store,
            app.topology.stores[g.store].kind,
            app.topology.stores[g.store].options,
            lambda: task.transaction,
            app.topology.stores[g.store].serdes,
        )
        for g in app.topology.global_tables
    }
    task = Task(app.topology, sub, partition, store, app.config, app.name, global_views)
    return task, global_views


def _hand_over(
    task: Task,
    store,
    local: TaskDir,
    app: App,
    ctx: BatchContext,
    progress: tuple[dict[str, int], dict[str, int], int],
) -> pa.Table:
    """Step 1 of the commit (checkpoint/commit.py): the task's transaction staged durably
    beside its store (``local``); its output, changelog and ``task`` rows returned.
    ``progress``: the offsets reached per input and per global partition, and the records
    processed."""
    reached, global_reached, processed = progress
    sub, partition = task.task_id.subtopology, task.task_id.partition
    task_id = str(task.task_id)
    global_topics = [g.topic for g in app.topology.global_tables]
    offsets = {TopicPartition(t, partition): o for t, o in reached.items()}
    for key, o in global_reached.items():
        offsets[TopicPartition(*split_global_key(key, global_topics))] = o
    for offset_tp, offset in store.committed_offsets().items():
        offsets.setdefault(offset_tp, offset)
    prepared = task.prepare_commit(offsets)
    writes = prepared.transaction.changes_by_namespace()
    rows = Rows(out_fields(store_kinds(app)))
    # The rows first: an entry the changelog cannot hold fails the batch before it is staged.
    stores = tuple(state_rows(rows, app, writes, sub, partition))
    counts = output_rows(
        rows, prepared.output, sub, partition, ctx.topic_partitions, key_serdes_of(app)
    )
    local.stage(ctx.batches[task_id], writes, prepared.offsets, ctx.run_ids.get(task_id))
    task.close()
    outcome = TaskOutcome(
        reached={**reached, **global_reached},
        stream_time=task.stream_time,
        records=processed,
        metrics=task.metrics,
        output_partitions=counts,
        stores=stores,
        processor_metadata=dict(task.processor_metadata),
    )
    rows.add(1, kind="task", sub=sub, task=partition, seq=0, outcome=outcome.encode())
    return rows.table()


def _process_all(
    task: Task, app: App, global_views: dict[str, Any], updates: pa.Table, columns: dict
) -> tuple[dict[str, int], int, dict[str, int]]:
    """The global updates, then the task's records; returns the offsets reached per input,
    the records processed and the offsets reached per global partition.

    A record that fails is handled as its handler says (processors/exception_handlers.py):
    log-and-fail raises its one-line error (the batch commits nothing). Log-and-continue
    skips it as if it never arrived: one that could not be decoded touched nothing and is
    skipped where it stands; one that failed in processing may have written state, forwarded
    output or moved in-memory processor state, so the task aborts its transaction (back to
    the batch's start: the engine opens a task per batch) and processes the batch again
    with every failed record skipped. From the batch's second failure on, that second pass
    ends the batch at the failed record (the next batch starts after it), so that no
    batch is gone through more than three times: the cost stays linear in the records, not
    in their number times the failures (tests/integration/test_dead_letters_engine.py). The dead letters are emitted once the batch went
    through."""
    failures: dict[int, RecordFailure] = {}
    order = _in_order(columns)
    codecs = {} if app is None else codecs_of(app)  # (unit tests run without an app)
    while True:
        global_reached = _apply_global_updates(app, global_views, updates)
        reached, processed, failed = _process_records(task, columns, order, failures, codecs)
        if failed is None:
            break
        row, failure = failed
        failures[row] = failure
        task.abort()
        if len(failures) > 1:
            order = order[: order.index(row) + 1]  # the failed record is the batch's last
    if failures:
        position = {row: n for n, row in enumerate(order)}
        kept = [row for row in failures if row in position]
        for row in sorted(kept, key=position.__getitem__):
            task.dead_letter(failures[row], decoded_headers(columns["headers"][row]))
    return reached, processed, global_reached


def _apply_global_updates(app: App, views: dict[str, Any], updates: pa.Table) -> dict[str, int]:
    """Put the batch's records of the global tables' topics into the task's global stores
    (each topic's partitions in turn, each in offset order; a null key is skipped, a null
    value deletes, as Kafka's global store update); returns the next offset reached per
    ``global_key``. A global record that cannot be decoded always fails the batch (a dead
    letter per task reading it would repeat it; the record stays in its topic)."""
    if updates.num_rows == 0:
        return {}
    columns = {name: updates.column(name).to_pylist() for name in INPUT_COLUMNS[2:]}
    topics, partitions, offsets = columns["topic"], columns["partition"], columns["offset"]
    decode = Decoder(columns, codecs_of(app))
    reached: dict[str, int] = {}
    for g in app.topology.global_tables:
        rows = sorted(
            (i for i, topic in enumerate(topics) if topic == g.topic),
            key=lambda i: (partitions[i], offsets[i]),
        )
        view = views[g.store]
        for i, record in zip(rows, decode.many(rows), strict=True):
            if record.key is not None:
                view.put(record.key, record.value, record.timestamp)
            reached[global_key(g.topic, partitions[i])] = offsets[i] + 1
    return reached


def _process_records(
    task: Task,
    columns: dict[str, list],
    order: list[int],
    failures: dict[int, RecordFailure],
    codecs: dict[str, Codec],
) -> tuple[dict[str, int], int, tuple[int, RecordFailure] | None]:
    """Run the rows of ``order`` through the task until done or a commit is needed
    (KIP-892: the uncommitted bound forces the commit there), skipping the rows of
    ``failures`` (they count as processed: their offsets are behind the batch). A task that
    reads a topic through a chain of chunk-capable processors takes each run of that topic's
    records in chunks (the other inputs' records stand between runs), which shrink near the
    bound so that it is checked about as often as record by record would.
    Returns the offset reached per input topic, the number of records processed, and the
    row that failed in processing and its failure, if one did and its handler continues
    (the caller then undoes the attempt and starts again); a row that cannot be decoded is
    added to ``failures`` here. Log-and-fail raises the failure's error."""
    topics, offsets = columns["topic"], columns["offset"]
    decode = Decoder(columns, codecs, task, failures)
    reached: dict[str, int] = {}
    processed = 0
    position = 0
    single_topic = len(set(topics)) == 1
    while position < len(order):
        topic = topics[order[position]]
        if task.can_process_chunks(topic):
            # A chunk is a run of one topic's records (the inputs interleave by timestamp).
            end = min(position + _chunk_length(task), len(order))
            if not single_topic:
                end = _run_end(topics, order, position, end)
            rows = order[position:end]
            good, records = decode.good(rows)
            chunk_offsets = [offsets[i] for i in good]
            if task.process_chunk(topic, chunk_offsets, records):
                reached[topic] = offsets[rows[-1]] + 1
                processed += len(rows)
                position += len(rows)
                if task.commit_needed():
                    break
                continue
            # A record of the chunk failed: one by one, up to it, raises its error.
            steps = _one_by_one(rows, good, records)
        else:
            i = order[position]
            good, records = decode.good([i])
            steps = [(i, records[0] if good else None)]
        for i, record in steps:
            offset = offsets[i]
            if record is not None:
                try:
                    task.process(topic, offset, record)
                except (ProcessingException, SerializationException) as exc:
                    failure = _handled(task, exc, columns, i, record, decode)
                    return reached, processed, (i, failure)
            reached[topic] = offset + 1
            processed += 1
            position += 1
            if record is not None and task.commit_needed():
                return reached, processed, None
    return reached, processed, None


def _run_end(topics: list, order: list[int], position: int, end: int) -> int:
    """Where the run of one topic's records starting at ``position`` ends (at most ``end``)."""
    topic = topics[order[position]]
    run = position + 1
    while run < end and topics[order[run]] == topic:
        run += 1
    return run


def _one_by_one(rows: list[int], good: list[int], records: list) -> list[tuple[int, Any]]:
    """A failed chunk's rows with their decoded records, to be taken one by one; the rows
    that were skipped go with None (passed over on the way)."""
    todo = zip(good, records, strict=True)
    done = set(good)
    return [(i, None) if i not in done else next(todo) for i in rows]


def _handled(
    task: Task,
    exc: ProcessingException | SerializationException,
    columns: dict[str, list],
    i: int,
    record: Any,
    decode: Decoder,
) -> RecordFailure:
    """Row ``i``'s processing failure when the task's handler continues; else ``exc``
    raised again."""
    failure = processing_failure(task, exc, columns, i, record, decode.codec(i))
    if not task.continues(failure):
        # The one line a person reads also says what to do about it.
        exc.args = (f"{exc}; {task.handlers.advice(failure.kind)}",)
        raise exc
    return failure


def _chunk_length(task: Task) -> int:
    """Records for the next chunk: up to CHUNK_RECORDS, fewer as the open transaction
    nears statestore.uncommitted.max.* (a record adds a few entries and some bytes)."""
    txn = task.transaction
    room_entries = task.max_uncommitted_records - txn.approximate_num_uncommitted_entries()
    room_bytes = task.max_uncommitted_bytes - txn.approximate_num_uncommitted_bytes()
    return max(1, min(CHUNK_RECORDS, room_entries // 4, room_bytes // 1024))
