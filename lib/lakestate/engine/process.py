"""Processing one task's share of a batch, inside a Spark worker.

Runs the same Task and processors as the test driver against the task's local store, stages
the resulting transaction beside the store, and returns rows for the driver to commit:
``out`` rows (records for sink and repartition topics, in emission order), ``state`` rows
(the task's state changes, one per changed key, with the store's typed columns) and one
``task`` row (offsets reached, stream time, metrics).
"""

from __future__ import annotations

import heapq
import json
from dataclasses import dataclass
from typing import Any

import pandas as pd

from lakestate.app import App, load_app
from lakestate.engine import local
from lakestate.errors import ProcessingException, StreamsException
from lakestate.io.partitioner import partition_for
from lakestate.processors.task import Task
from lakestate.records import Record
from lakestate.state.base import IsolationLevel, TopicPartition
from lakestate.state.constants import RESERVED_NAMESPACES
from lakestate.state.registry import is_index_only, view_class
from lakestate.state.serde import json_text

OUT_COLUMNS = [
    "kind",
    "sub",
    "task",
    "seq",
    "topic",
    "partition",
    "timestamp",
    "key",
    "value",
    "headers",
    "store",
    "raw_key",
    "raw_value",
    "row_json",
    "info",
]
OUT_SCHEMA = (
    "kind string, sub int, task int, seq long, topic string, partition int, timestamp long, "
    "key string, value string, headers string, store string, raw_key binary, "
    "raw_value binary, row_json string, info string"
)

_apps: dict[str, App] = {}


@dataclass(frozen=True)
class BatchContext:
    """Everything a worker needs, shipped with the function (small and picklable)."""

    app_path: str
    app_name: str
    batch_id: int
    state_dir: str
    isolation: IsolationLevel
    topic_partitions: dict[str, int]  # output topic -> partition count
    starts: dict[str, dict[str, int]]  # task id -> input topic -> first offset of the batch


def _app(path: str) -> App:
    # Load the app module in the worker itself: its lambdas need not be picklable.
    app = _apps.get(path)
    if app is None:
        app = _apps[path] = load_app(path)
    return app


def _decode(text: Any, what: str, row: Any) -> Any:
    if text is None or (isinstance(text, float) and pd.isna(text)):
        return None
    try:
        return json.loads(text)
    except (TypeError, ValueError) as exc:
        raise ProcessingException(
            f"{what} is not valid JSON in topic {row.topic!r} partition {row.partition} "
            f"offset {row.offset}: {exc}; the batch commits nothing"
        ) from None


def _in_order(records: pd.DataFrame):
    """Records of one task: each input in offset order; across inputs, the input whose next
    record has the lowest timestamp goes first (ties: input order), like Kafka's
    PartitionGroup."""
    queues = []
    for _, group in records.groupby("input_index", sort=True):
        queues.append(list(group.sort_values("offset").itertuples(index=False)))
    heap = [(q[0].timestamp, q[0].input_index, 0, i) for i, q in enumerate(queues) if q]
    heapq.heapify(heap)
    while heap:
        _, _, pos, i = heapq.heappop(heap)
        yield queues[i][pos]
        if pos + 1 < len(queues[i]):
            nxt = queues[i][pos + 1]
            heapq.heappush(heap, (nxt.timestamp, nxt.input_index, pos + 1, i))


def process_task(records: pd.DataFrame, ctx: BatchContext) -> pd.DataFrame:
    """Process the batch's records of one task (all rows share ``sub`` and ``task``)."""
    sub = int(records["sub"].iloc[0])
    partition = int(records["task"].iloc[0])
    task_id = f"{sub}_{partition}"
    app = _app(ctx.app_path)
    store = local.open_task_store(ctx.state_dir, ctx.app_name, task_id, ctx.isolation)
    try:
        held = store.committed_offsets()
        for topic, start in ctx.starts[task_id].items():
            if held.get(TopicPartition(topic, partition), 0) != start:
                raise StreamsException(
                    f"local store of task {task_id} holds offset "
                    f"{held.get(TopicPartition(topic, partition), 0)} of {topic!r}, but batch "
                    f"{ctx.batch_id} starts at {start}: recovery must run before processing"
                )
        task = Task(app.topology, sub, partition, store, app.config, app.name)
        reached: dict[str, int] = {}
        processed = 0
        for row in _in_order(records):
            record = Record(
                _decode(row.key, "key", row),
                _decode(row.value, "value", row),
                int(row.timestamp),
                _decode(row.headers, "headers", row),
            )
            task.process(row.topic, int(row.offset), record)
            reached[row.topic] = int(row.offset) + 1
            processed += 1
            if task.commit_needed():
                break  # KIP-892: the uncommitted bound forces the commit here
        offsets = {TopicPartition(t, partition): o for t, o in reached.items()}
        for offset_tp, offset in store.committed_offsets().items():
            offsets.setdefault(offset_tp, offset)
        task.transaction.set_stream_time(task.stream_time)
        writes = list(task.transaction.changes())
        local.stage(ctx.state_dir, ctx.app_name, task_id, ctx.batch_id, writes, offsets)
        rows = _output_rows(task, sub, partition, ctx)
        rows.extend(_state_rows(app, writes, sub, partition))
        outputs: dict[str, int] = {}
        for topic, _ in task.pending_output():
            outputs[topic] = outputs.get(topic, 0) + 1
        info = {
            "outputs": outputs,
            "reached": reached,
            "processed": processed,
            "stream_time": task.stream_time,
            "metrics": task.metrics,
        }
        rows.append(_row("task", sub, partition, 0, info=json.dumps(info)))
        task.close()
    finally:
        store.close()
    return pd.DataFrame(rows, columns=OUT_COLUMNS)


def _row(kind: str, sub: int, task: int, seq: int, **values: Any) -> tuple:
    data = {"kind": kind, "sub": sub, "task": task, "seq": seq, **values}
    return tuple(data.get(c) for c in OUT_COLUMNS)


def _output_rows(task: Task, sub: int, partition: int, ctx: BatchContext) -> list[tuple]:
    rows = []
    for seq, (topic, record) in enumerate(task.pending_output()):
        rows.append(
            _row(
                "out",
                sub,
                partition,
                seq,
                topic=topic,
                partition=partition_for(record.key, ctx.topic_partitions[topic]),
                timestamp=record.timestamp,
                key=json_text(record.key),
                value=json_text(record.value),
                headers=None if record.headers is None else json_text(record.headers),
            )
        )
    return rows


def _state_rows(app: App, writes: list, sub: int, partition: int) -> list[tuple]:
    rows = []
    for seq, (namespace, raw_key, raw_value) in enumerate(writes):
        if namespace in RESERVED_NAMESPACES:
            continue
        spec = app.topology.stores[namespace]
        if is_index_only(spec.kind, raw_key):
            continue  # a local-only entry (e.g. a dedup store's time index): no Delta row
        typed = None
        if raw_value is not None:
            typed = json.dumps(view_class(spec.kind).changelog_row(raw_key, raw_value))
        rows.append(
            _row(
                "state",
                sub,
                partition,
                seq,
                store=namespace,
                raw_key=raw_key,
                raw_value=raw_value,
                row_json=typed,
            )
        )
    return rows
