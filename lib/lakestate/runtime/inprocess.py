"""The in-process transport: a batch read with delta-rs and processed in the driver.

A small run does not need Spark: starting the JVM, Spark's Delta reader and one Spark job
cost seconds whatever the batch's size. Here each task's input rows are read from the log
tables with delta-rs (only the files of the task's partitions and offset ranges), in the
same columns the Spark path gives its workers (``process.INPUT_COLUMNS``), and each task is
processed by the very function the Spark workers run (``process.process_task``), one task
after another. The result has the Spark path's columns (``process.out_fields``), and goes
through the same ``_results`` and ``commit_batch``: only the transport differs, so the
chosen transport cannot change what a batch commits (docs/architecture.md, "Transport").
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pyarrow as pa
from lakestate import console
from lakestate.checkpoint.batch import TaskPlan
from lakestate.checkpoint.layout import AppLayout
from lakestate.errors import StreamsException
from lakestate.io.topics import TopicReader
from lakestate.runtime.task_executor import (
    GLOBAL_INPUT,
    INPUT_COLUMNS,
    BatchContext,
    out_fields,
    process_task,
)

#: App config key: a run whose whole pending input (every owned task's records from its
#: committed offsets to the ends, global topics included) is at most this many records is
#: processed in the driver, without starting Spark; 0: always Spark.
MAX_RECORDS_CONFIG = "lakestate.inprocess.max.records"
DEFAULT_MAX_RECORDS = 2_000_000

# The log table's columns, as the Spark path reads them.
_LOG_COLUMNS = INPUT_COLUMNS[4:]
_INPUT_SCHEMA = pa.schema(
    [
        pa.field("sub", pa.int32()),
        pa.field("task", pa.int32()),
        pa.field("input_index", pa.int32()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", pa.int64()),
        pa.field("key", pa.string()),
        pa.field("value", pa.string()),
        pa.field("headers", pa.string()),
    ]
)


def max_records(config: Mapping[str, Any]) -> int:
    """The app's in-process threshold (``MAX_RECORDS_CONFIG``), checked."""
    value = config.get(MAX_RECORDS_CONFIG, DEFAULT_MAX_RECORDS)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise StreamsException(f"{MAX_RECORDS_CONFIG} must be an int >= 0, got {value!r}")
    return value


def run_batch(
    layout: AppLayout, plans: list[TaskPlan], ctx: BatchContext, kinds: list[str]
) -> pa.Table:
    """Step 1 of the commit for every task of ``plans``, in this process: the rows the
    Spark path's ``mapInArrow`` would return (columns ``out_fields(kinds)``)."""
    tables = _Tables(layout)
    outputs = []
    total = sum(p.records for p in plans)
    with console.progress(f"batch of {len(plans)} task(s): records", total) as bar:
        for plan in sorted(plans, key=lambda p: p.task):
            records = read_inputs(layout, plan, tables)
            if records.num_rows == 0:
                continue  # as on Spark, where a task without rows gets no partition
            outputs.append(process_inputs(records, ctx))
            bar.advance(records.num_rows)
            del records
    schema = pa.schema([pa.field(name, type_) for name, type_ in out_fields(kinds)])
    return pa.concat_tables(outputs) if outputs else schema.empty_table()


def process_inputs(records: pa.Table, ctx: BatchContext) -> pa.Table:
    """One task's rows through ``process_task`` (the function the Spark workers run)."""
    return process_task(records, ctx)


def read_inputs(layout: AppLayout, plan: TaskPlan, tables: _Tables | None = None) -> pa.Table:
    """The input rows of one task's batch, in ``INPUT_COLUMNS``: its ranges of each input
    topic (``input_index``: the topic's place among the sub-topology's inputs) and of each
    global topic's partitions (``GLOBAL_INPUT``), in no particular order (the task orders
    them)."""
    tables = tables or _Tables(layout)
    sub, partition = plan.task.subtopology, plan.task.partition
    parts = []
    for index, topic in enumerate(layout.inputs[sub]):
        if topic in plan.ranges:
            rows = tables.read(topic, {partition: plan.ranges[topic]})
            parts.append(_with_task(rows, sub, partition, index, topic))
    for topic in layout.global_topics:
        ranges = plan.global_ranges(topic)
        if ranges:
            rows = tables.read(topic, ranges)
            parts.append(_with_task(rows, sub, partition, GLOBAL_INPUT, topic))
    return pa.concat_tables(parts) if parts else _INPUT_SCHEMA.empty_table()


class _Tables:
    """The batch's topics, each with one reader (``Topic.reader``), and reads of their
    ranges, the global topics' reads shared by the tasks reading the same ranges."""

    def __init__(self, layout: AppLayout) -> None:
        self.layout = layout
        self.opened: dict[str, TopicReader] = {}
        self.global_reads: dict[tuple, pa.Table] = {}

    def read(self, topic: str, ranges: dict[int, tuple[int, int]]) -> pa.Table:
        shared = topic in self.layout.global_topics
        key = (topic, tuple(sorted(ranges.items())))
        if shared and key in self.global_reads:
            return self.global_reads[key]
        reader = self.opened.get(topic)
        if reader is None:
            reader = self.opened[topic] = self.layout.topic(topic).reader()
        rows = reader.read_range(ranges)
        if shared:
            self.global_reads[key] = rows
        return rows


def _with_task(rows: pa.Table, sub: int, task: int, index: int, topic: str) -> pa.Table:
    n = rows.num_rows
    front = [
        pa.repeat(pa.scalar(sub, pa.int32()), n),
        pa.repeat(pa.scalar(task, pa.int32()), n),
        pa.repeat(pa.scalar(index, pa.int32()), n),
        pa.repeat(pa.scalar(topic, pa.string()), n),
    ]
    return pa.Table.from_arrays(
        front + [rows.column(name) for name in _LOG_COLUMNS], schema=_INPUT_SCHEMA
    )


__all__ = [
    "DEFAULT_MAX_RECORDS",
    "MAX_RECORDS_CONFIG",
    "max_records",
    "process_inputs",
    "read_inputs",
    "run_batch",
]
