"""The in-process transport: a batch read with delta-rs and processed without Spark.

A small run does not need Spark: starting the JVM, Spark's Delta reader and one Spark job
cost seconds whatever the batch's size. Here each task's share of the batch's reads
(``transport.input_reads``) is read through its topics' readers (``Topic.reader``: for a
log table, delta-rs reading only the files of the task's partitions and offset ranges),
in the input rows' columns (``batch_rows.INPUT_SCHEMA``), and each task is processed by
the very function the Spark workers run (``task_executor.process_task``): one task after
another in this process, its input freed before the next is read, or, for a big batch of
several tasks, in worker processes (``worker_pool``), both cores busy, each worker reading
its task's input itself (``TaskReads``: fresh readers of the same ranges). Only the transport
differs, so the chosen transport cannot change what a batch commits
(docs/architecture.md, "A batch, step by step").
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import Future
from dataclasses import dataclass

import pyarrow as pa
from lakestate import console
from lakestate.checkpoint.batch import TaskPlan
from lakestate.checkpoint.layout import AppLayout
from lakestate.io.topics import Topic, TopicReader
from lakestate.runtime.batch_rows import (
    INPUT_SCHEMA,
    OUTCOME_COLUMN,
    RECORD_COLUMNS,
    out_arrow_schema,
)
from lakestate.runtime.task_executor import BatchContext, process_task
from lakestate.runtime.transport import BatchInput, BatchOutput, InputRead
from lakestate.runtime.worker_pool import WorkerPool, result_of, workers_wanted
from lakestate.task_id import TaskId


class InProcessTransport:
    """``transport.Transport`` in this process: no JVM."""

    name = "in_process"

    def __init__(self, layout: AppLayout) -> None:
        self.layout = layout
        self._pool: WorkerPool | None = None

    def start(self) -> None:
        """Nothing to start."""

    def state_owner(self, config: dict) -> str:
        return "driver"  # the worker processes open this instance's state directory

    def close(self) -> None:
        """Stop the worker processes, if a batch started them."""
        if self._pool is not None:
            self._pool.close()

    def run_batch(self, batch: BatchInput) -> BatchOutput:
        """Step 1 for every task of ``batch``, in task order: one after another in this
        process, or, for a batch ``worker_pool.workers_wanted`` deems big enough, in
        worker processes, each reading its task's input itself."""
        tables = BatchReads(self.layout)
        plans = sorted(batch.plans, key=lambda p: p.task)
        busy = sum(1 for p in plans if p.records)
        workers = workers_wanted(self.layout.app.config, busy, batch.records)
        with console.progress(f"batch of {len(plans)} task(s): records", batch.records) as bar:
            if workers:
                outputs = self._in_workers(workers, plans, batch, tables, bar)
            else:
                outputs = []
                for records in _task_inputs(plans, batch, tables):
                    outputs.append(process_inputs(records, batch.ctx))
                    bar.advance(records.num_rows)
        rows = pa.concat_tables(outputs) if outputs else None
        return BatchOutput.of(rows or out_arrow_schema(batch.store_kinds).empty_table())

    def _in_workers(
        self,
        workers: int,
        plans: list[TaskPlan],
        batch: BatchInput,
        tables: BatchReads,
        bar: console.Bar,
    ) -> list[pa.Table]:
        # Each worker reads its task's input itself (``TaskReads``), so the reads run on
        # both cores too and no task's rows are pickled to it; a global topic's rows,
        # which every task reads whole, are read once here and handed over.
        if self._pool is None:
            self._pool = WorkerPool()
        self._pool.start(workers, batch.ctx.app_path)
        waiting: list[tuple[Future[PackedRows | None], str, int]] = []
        for plan in plans:
            reads = TaskReads.of(batch.reads, plan.task, tables)
            if reads.parts:
                future = self._pool.submit(read_and_process, reads, batch.ctx)
                waiting.append((future, str(plan.task), plan.records))
        outputs = [_collect(w, bar) for w in waiting]
        return [rows for rows in outputs if rows is not None]


def _task_inputs(
    plans: list[TaskPlan], batch: BatchInput, tables: BatchReads
) -> Iterator[pa.Table]:
    """Each planned task's input rows, one task at a time, tasks without rows skipped (as
    on Spark, where a task without rows gets no partition)."""
    for plan in plans:
        records = read_inputs(batch.reads, plan.task, tables)
        if records.num_rows:
            yield records


def _collect(
    waiting: tuple[Future[PackedRows | None], str, int], bar: console.Bar
) -> pa.Table | None:
    future, task, count = waiting
    rows = result_of(future, task)
    bar.advance(count)
    return None if rows is None else rows.table()


def process_inputs(records: pa.Table, ctx: BatchContext) -> pa.Table:
    """One task's rows through ``process_task`` (the function the Spark workers run)."""
    return process_task(records, ctx)


def read_inputs(reads: tuple[InputRead, ...], task: TaskId, tables: BatchReads) -> pa.Table:
    """The input rows of ``task`` in the batch whose reads are ``reads``, in
    ``INPUT_SCHEMA``, in no particular order (the task orders them)."""
    parts = []
    for read in reads:
        ranges = read.ranges_of(task)
        if ranges:
            rows = tables.read(read, ranges)
            parts.append(_with_task(rows, task, read.input_index, read.topic))
    return pa.concat_tables(parts) if parts else INPUT_SCHEMA.empty_table()


class BatchReads:
    """The batch's topics, each with one reader (``Topic.reader``), and reads of their
    ranges, a global read's rows read once for all the tasks sharing it."""

    def __init__(self, layout: AppLayout) -> None:
        self.layout = layout
        self.opened: dict[str, TopicReader] = {}
        self._topics: dict[str, Topic] = {}  # opening one may read its declaration
        self.global_reads: dict[int, pa.Table] = {}  # id of the InputRead -> its rows

    def read(self, read: InputRead, ranges: dict[int, tuple[int, int]]) -> pa.Table:
        if read.is_global and id(read) in self.global_reads:
            return self.global_reads[id(read)]
        reader = self.opened.get(read.topic)
        if reader is None:
            reader = self.opened[read.topic] = self._topic(read.topic).reader()
        rows = reader.read_range(ranges)
        if read.is_global:
            self.global_reads[id(read)] = rows
        return rows

    def new_reader(self, topic: str) -> TopicReader:
        """A reader of ``topic`` that has read nothing yet (for another process)."""
        return self._topic(topic).reader()

    def _topic(self, name: str) -> Topic:
        topic = self._topics.get(name)
        if topic is None:
            topic = self._topics[name] = self.layout.topic(name)
        return topic


@dataclass(frozen=True)
class TaskRead:
    """One of a task's reads, for a worker process: ``rows`` already read (a global
    topic's), or ``reader``'s ``ranges`` to read."""

    topic: str
    input_index: int
    ranges: dict[int, tuple[int, int]]
    reader: TopicReader | None = None
    rows: pa.Table | None = None

    def read(self) -> pa.Table:
        if self.rows is not None:
            return self.rows
        assert self.reader is not None
        return self.reader.read_range(self.ranges)


@dataclass(frozen=True)
class TaskReads:
    """A task's share of a batch's reads (``read_inputs``'s), picklable."""

    task: TaskId
    parts: tuple[TaskRead, ...]

    @staticmethod
    def of(reads: tuple[InputRead, ...], task: TaskId, tables: BatchReads) -> TaskReads:
        parts = []
        for read in reads:
            ranges = read.ranges_of(task)
            if not ranges:
                continue
            if read.is_global:
                rows = tables.read(read, ranges)
                parts.append(TaskRead(read.topic, read.input_index, ranges, rows=rows))
            else:
                reader = tables.new_reader(read.topic)
                parts.append(TaskRead(read.topic, read.input_index, ranges, reader=reader))
        return TaskReads(task, tuple(parts))

    def read(self) -> pa.Table:
        """The task's input rows, as ``read_inputs`` gives them."""
        parts = [
            _with_task(part.read(), self.task, part.input_index, part.topic)
            for part in self.parts
        ]
        return pa.concat_tables(parts) if parts else INPUT_SCHEMA.empty_table()


def read_and_process(reads: TaskReads, ctx: BatchContext) -> PackedRows | None:
    """In a worker process: the task's input read, then processed (``process_task``);
    None for a task whose ranges held no record (it is skipped, as on Spark)."""
    records = reads.read()
    if not records.num_rows:
        return None
    return PackedRows.of(process_task(records, ctx))


@dataclass(frozen=True)
class PackedRows:
    """A task's rows (``batch_rows``) for the trip back from a worker process, the null
    ``outcome`` of its ``out`` and ``state`` rows as lengths: ``pa.nulls`` of that nested
    struct shares one zeroed buffer among its children, which pickling copies for each
    child (seven times the column's size, 200 MB for 700k rows)."""

    schema: pa.Schema
    columns: tuple[tuple[pa.Array | int, ...], ...]  # per column, its chunks (int: nulls)

    @staticmethod
    def of(rows: pa.Table) -> PackedRows:
        return PackedRows(
            rows.schema,
            tuple(
                tuple(
                    len(chunk)
                    if name == OUTCOME_COLUMN and chunk.null_count == len(chunk)
                    else chunk
                    for chunk in rows.column(name).chunks
                )
                for name in rows.column_names
            ),
        )

    def table(self) -> pa.Table:
        """The rows as they were in the worker."""
        arrays = [
            pa.chunked_array(
                [pa.nulls(c, f.type) if isinstance(c, int) else c for c in chunks], f.type
            )
            for f, chunks in zip(self.schema, self.columns, strict=True)
        ]
        return pa.Table.from_arrays(arrays, schema=self.schema)


def _with_task(rows: pa.Table, task: TaskId, index: int, topic: str) -> pa.Table:
    n = rows.num_rows
    front = [
        pa.repeat(pa.scalar(task.subtopology, pa.int32()), n),
        pa.repeat(pa.scalar(task.partition, pa.int32()), n),
        pa.repeat(pa.scalar(index, pa.int32()), n),
        pa.repeat(pa.scalar(topic, pa.string()), n),
    ]
    return pa.Table.from_arrays(
        front + [rows.column(name) for name in RECORD_COLUMNS], schema=INPUT_SCHEMA
    )


__all__ = [
    "BatchReads",
    "InProcessTransport",
    "PackedRows",
    "TaskReads",
    "process_inputs",
    "read_and_process",
    "read_inputs",
]
