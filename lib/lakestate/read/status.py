"""Where every task of an app stands (``lakestate status``), read without a JVM.

Every task of every sub-topology is listed: those the app's topology names (when given;
else as the app's last run recorded them in the warehouse: checkpoint/recorded_layout.py)
and those its progress rows name, each sub-topology with as many tasks as its inputs have
partitions, so a task that never committed shows too (committed offset 0, lag = end
offset). Per task: its last complete batch and when it was committed, the batch a crashed
run left incomplete (the next run replays it), its stream time, per input (and global
topic partition) the committed offset, the end offset, the lag and the offset this
instance's local store holds, and its metrics' totals (``lakestate.processors.metrics``).

Everything is read through delta-rs and the Delta logs (progress rows, end offsets from
the log tables' commit metadata), RocksDB and, for an app's Kafka topics, the cluster's
read_committed end offsets: no Spark.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from lakestate.checkpoint import progress, recorded_layout, task_dir
from lakestate.checkpoint.batch import GLOBAL_SEPARATOR, global_key
from lakestate.checkpoint.recorded_layout import RecordedLayout
from lakestate.checkpoint.standing import is_complete
from lakestate.checkpoint.task_dir import TaskDir
from lakestate.io import topics
from lakestate.io.kafka import KafkaCluster
from lakestate.processors.metrics import TASK, is_document, task_level
from lakestate.state.base import IsolationLevel, TopicPartition
from lakestate.task_id import TaskId
from lakestate.topology.graph import Topology, internal_topic_name
from lakestate.warehouse import Warehouse


@dataclass(frozen=True)
class InputStatus:
    """One input partition of a task (a global topic's partitions too): the next offset
    its last complete batch reached (0: none), the topic's end offset, and the offset this
    instance's local store holds (None: no local store, or a run holds it open)."""

    topic: str
    partition: int
    committed: int
    end: int
    local: int | None = None

    @property
    def lag(self) -> int:
        return max(0, self.end - self.committed)

    def to_json(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "partition": self.partition,
            "committed": self.committed,
            "end": self.end,
            "lag": self.lag,
            "local_offset": self.local,
        }


@dataclass(frozen=True)
class TaskStatus:
    """One task: its last complete batch (0: none) and when it was committed, the
    incomplete batch the next run replays (None: none), stream time (None: none yet), its
    inputs, the batch its local store holds, its metrics' totals: a document with a
    ``task`` level (Kafka's task-level ``dropped-records``) beside ``nodes`` and
    ``stores``, and per store the keys this instance's local store holds (RocksDB's
    ``estimate-num-keys`` of the store's column family: no scan, approximate, a store
    kind's index entries included)."""

    task: TaskId
    batch: int
    committed_at_ms: int | None
    stream_time: int | None
    inputs: tuple[InputStatus, ...]
    metrics: dict[str, Any] = field(default_factory=dict)
    pending_batch: int | None = None
    local_batch: int | None = None
    local_store_keys: dict[str, int] = field(default_factory=dict)

    @property
    def lag(self) -> int:
        return sum(i.lag for i in self.inputs)

    def to_json(self) -> dict[str, Any]:
        return {
            "task": str(self.task),
            "subtopology": self.task.subtopology,
            "partition": self.task.partition,
            "last_batch": self.batch,
            "last_commit_at": self.committed_at_ms,
            "pending_batch": self.pending_batch,
            "stream_time": self.stream_time,
            "local_batch": self.local_batch,
            "local_store_keys": self.local_store_keys,
            "inputs": [i.to_json() for i in self.inputs],
            "metrics": self.metrics,
        }


@dataclass(frozen=True)
class AppStatus:
    """The app's tasks, and the sub-topologies whose tasks are not known yet (none of their
    input topics exists: a repartition topic is created by the app's first run)."""

    app: str
    tasks: list[TaskStatus]
    unresolved: list[int] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "app": self.app,
            "tasks": [t.to_json() for t in self.tasks],
            "unresolved_subtopologies": self.unresolved,
        }


def app_status(
    warehouse: Warehouse,
    app: str,
    state_dir: str | None,
    topology: Topology | None = None,
    cluster: KafkaCluster | None = None,
    kafka_topics: frozenset[str] = frozenset(),
) -> AppStatus:
    """The status of every task of ``app`` (of ``topology``'s sub-topologies when given, and
    of those its progress rows name). ``state_dir``: this instance's local stores; None for a
    reader that has none (the Airflow plugin on the api-server): no local figures.
    ``kafka_topics``: the app's topics that are Kafka ``cluster``'s (its end offsets are
    read_committed ends, so a lag is the one its consumer group shows)."""
    history, _ = progress.read_all(warehouse, app)
    recorded = None if topology is not None else recorded_layout.read(warehouse.layout_path(app))
    inputs, global_topics = _inputs(app, topology, recorded, history)
    read = [t for ts in inputs.values() for t in ts] + global_topics
    partitions, ends = _topic_ends(warehouse, read, cluster, kafka_topics)
    tasks = sorted(
        {TaskId(sub, p) for sub, ts in inputs.items() for p in range(_count(ts, partitions))}
        | set(history.rows)
    )
    stores = _stores(warehouse, app, topology, recorded)
    opened: dict[str, object] = {}  # tables opened once for every task's completeness
    found = []
    for task in tasks:
        rows = history.rows.get(task, [])
        pending = None
        if rows and not is_complete(warehouse, app, rows[0], opened):
            pending = rows[0].batch_id
            rows = rows[1:]
        row = rows[0] if rows else None
        keys = _input_keys(task, row, inputs, global_topics, partitions)
        offsets = {} if row is None else row.offsets
        held, local_batch, keys_held = _local(state_dir, app, task, stores)
        found.append(
            TaskStatus(
                task,
                0 if row is None else row.batch_id,
                None if row is None else row.at_ms,
                None if row is None or row.stream_time < 0 else row.stream_time,
                tuple(
                    InputStatus(
                        topic,
                        p,
                        offsets.get(global_key(topic, p) if topic in global_topics else topic, 0),
                        ends.get(topic, {}).get(p, 0),
                        held.get(TopicPartition(topic, p)),
                    )
                    for topic, p in keys
                ),
                {} if row is None else _with_task_level(row.metrics),
                pending,
                local_batch,
                keys_held,
            )
        )
    unresolved = sorted(sub for sub, ts in inputs.items() if _count(ts, partitions) == 0)
    return AppStatus(app, found, unresolved)


def _input_keys(
    task: TaskId,
    row: progress.TaskProgress | None,
    inputs: Mapping[int, list[str]],
    global_topics: list[str],
    partitions: Mapping[str, int],
) -> list[tuple[str, int]]:
    """The (topic, partition) pairs ``task`` reads: its inputs', the global topics', and
    those its last complete progress ``row`` names."""
    keys = [(t, task.partition) for t in inputs.get(task.subtopology, [])]
    keys += [(t, p) for t in global_topics for p in range(partitions.get(t, 0))]
    if row is not None:  # inputs a topology left out (not given, or changed since)
        for key in row.offsets:
            topic, partition = _key_parts(key)
            where = (topic, task.partition if partition is None else partition)
            if where not in keys:
                keys.append(where)
    return keys


def _inputs(
    app: str,
    topology: Topology | None,
    recorded: RecordedLayout | None,
    history: progress.History,
) -> tuple[dict[int, list[str]], list[str]]:
    """Per sub-topology its input topics (real names), and the global topics: the
    topology's when given, else as the app's last run recorded them, and those its
    progress rows name."""
    inputs: dict[int, list[str]] = {}
    global_topics: list[str] = []
    if recorded is not None:
        inputs = {s: list(ts) for s, ts in recorded.inputs.items()}
        global_topics = list(recorded.global_topics)
    if topology is not None:
        for sub in topology.subtopologies:
            inputs[sub.id] = list(sub.source_topics) + [
                internal_topic_name(app, s) for s in sub.repartition_sources
            ]
        global_topics = [g.topic for g in topology.global_tables]
    for task, rows in history.rows.items():
        for key in rows[0].offsets:
            topic, partition = _key_parts(key)
            if partition is not None:
                if topic not in global_topics:
                    global_topics.append(topic)
            elif topic not in inputs.setdefault(task.subtopology, []):
                inputs[task.subtopology].append(topic)
    return inputs, global_topics


def _topic_ends(
    warehouse: Warehouse,
    names: list[str],
    cluster: KafkaCluster | None,
    kafka_topics: frozenset[str],
) -> tuple[dict[str, int], dict[str, dict[int, int]]]:
    """Per topic its partition count (0: not created yet) and end offsets."""

    def topic(name: str, partitions: int | None = None) -> topics.Topic:
        on = cluster if name in kafka_topics else None
        return topics.topic(warehouse, name, partitions, cluster=on)

    partitions = {t: _partitions(topic(t)) for t in dict.fromkeys(names)}
    ends = {t: topic(t, n).end_offsets() if n else {} for t, n in partitions.items()}
    return partitions, ends


def _partitions(found: topics.Topic) -> int:
    """A topic's partition count; 0 when it does not exist (yet: a repartition topic is
    created by the app's first run)."""
    return found.partitions() if found.exists() else 0


def _count(topics: list[str], partitions: Mapping[str, int]) -> int:
    """A sub-topology's task count: the most partitions of its inputs (as the engine's
    layout counts them)."""
    return max((partitions.get(t, 0) for t in topics), default=0)


def _key_parts(key: str) -> tuple[str, int | None]:
    """A key of a progress row's offsets: an input topic's name (partition None: the
    task's), or a global topic's partition (``plan.global_key``)."""
    topic, sep, number = key.rpartition(GLOBAL_SEPARATOR)
    return (topic, int(number)) if sep and number.isdigit() else (key, None)


def _with_task_level(metrics: Mapping[str, Any]) -> dict[str, Any]:
    """The row's metrics with Kafka's task-level figures beside the nodes' and stores' (a
    flat map of a row written before metrics were scoped shows as the task level)."""
    if not is_document(metrics):
        return {TASK: dict(metrics)}
    return {TASK: task_level(metrics), **metrics}


def _stores(
    warehouse: Warehouse, app: str, topology: Topology | None, recorded: RecordedLayout | None
) -> list[str]:
    """The app's task stores: the topology's (global stores included, which live in each
    task's local store), else those with a changelog and those the last run recorded."""
    if topology is not None:
        return sorted(topology.stores)
    found = {t.store for t in warehouse.list_state_tables(app)}
    if recorded is not None:
        found.update(s for stores in recorded.stores.values() for s in stores)
    return sorted(found)


def _local(
    state_dir: str | None, app: str, task: TaskId, stores: list[str]
) -> tuple[dict[TopicPartition, int], int | None, dict[str, int]]:
    """The offsets, the batch and the keys per store that this instance's local store of
    ``task`` holds (none when it has no store, or a run holds it open)."""
    if state_dir is None or not TaskDir(state_dir, app, task).exists():
        return {}, None, {}
    try:
        store = TaskDir(state_dir, app, task).open(IsolationLevel.READ_COMMITTED)
    except Exception:  # held open by a running batch
        return {}, None, {}
    try:
        keys = {name: store.estimate_num_keys(name) for name in stores}
        held = {name: n for name, n in keys.items() if n is not None}
        return store.committed_offsets(), task_dir.local_batch(store), held
    finally:
        store.close()


def check_app(warehouse: Warehouse, app: str, topology: Topology | None = None) -> None:
    """ValueError, naming the warehouse looked at and how to point at another, when
    ``app``'s status has nothing to go by there: no warehouse at its root, or (the app named
    without its ``topology``) no such app in it."""
    point = (
        "run from the folder that holds it, or point at it with --warehouse DIR or "
        "LAKESTATE_WAREHOUSE (the default is ./warehouse)"
    )
    if warehouse.is_local and not os.path.isdir(warehouse.root.removeprefix("file://")):
        raise ValueError(
            f"no warehouse at {warehouse.root} (app {app}'s status is read there): {point}"
        )
    if topology is not None or app in warehouse.list_apps():
        return
    apps = ", ".join(warehouse.list_apps()) or "none"
    raise ValueError(
        f"app {app} has not run in warehouse {warehouse.root} (its apps: {apps}). If it ran "
        f"in another warehouse, {point}; before its first run, give its module (e.g. "
        f"jobs/{app}.py) to list the tasks it will have"
    )


def format_time(ms: int | None) -> str:
    """Epoch ms as ``YYYY-MM-DD HH:MM:SS`` (UTC); ``-`` for none."""
    if ms is None or ms < 0:
        return "-"
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S")


__all__ = ["AppStatus", "InputStatus", "TaskStatus", "app_status", "check_app", "format_time"]
