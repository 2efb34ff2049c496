"""What users ask of a warehouse: SQL over every log and state table, and an app's status."""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from lakestate.engine import batches, local
from lakestate.io import logtable
from lakestate.state.base import IsolationLevel
from lakestate.warehouse import Warehouse


def view_name(name: str) -> str:
    """The SQL name of a table: ``-`` becomes ``_`` so names need no quoting
    (topic ``event-counts`` is ``event_counts``; store ``counts`` of app ``demo`` is
    ``demo__counts``)."""
    return name.replace("-", "_").replace(".", "_")


def register_views(
    spark: SparkSession, warehouse: Warehouse, batch: int | None = None
) -> dict[str, str]:
    """Register every log table (by topic) and state table (``<app>__<store>``) as a view.

    State tables of an app are pinned to one committed batch (the last one, or ``batch``),
    so a query over several stores sees them as of the same batch. Returns view -> path.
    """
    views: dict[str, str] = {}
    for topic in warehouse.list_topics():
        path = warehouse.topic_path(topic)
        spark.read.format("delta").load(path).createOrReplaceTempView(view_name(topic))
        views[view_name(topic)] = path
    for app in warehouse.list_apps():
        versions: dict[str, int] = {}
        log_path = warehouse.batches_path(app)
        if os.path.isdir(os.path.join(log_path, "_delta_log")):
            commit = _commit(spark, log_path, batch)
            versions = commit.state_versions if commit else {}
        for table in warehouse.list_state_tables(app):
            reader = spark.read.format("delta")
            if table.store in versions:
                reader = reader.option("versionAsOf", versions[table.store])
            name = view_name(f"{app}__{table.store}")
            reader.load(table.path).createOrReplaceTempView(name)
            views[name] = table.path
    return views


def _commit(spark: SparkSession, log_path: str, batch: int | None):
    if batch is None:
        return batches.read_log(spark, log_path).last_commit
    for record in batches.history(spark, log_path, limit=1_000_000):
        if record.batch_id == batch:
            return record
    raise ValueError(f"no committed batch {batch} in {log_path}")


def sql(
    spark: SparkSession, warehouse: Warehouse, query: str, batch: int | None = None
) -> DataFrame:
    register_views(spark, warehouse, batch)
    return spark.sql(query)


@dataclass(frozen=True)
class TaskStatus:
    task: str
    topic: str
    partition: int
    committed_offset: int
    end_offset: int
    stream_time: int | None
    local_offset: int | None

    @property
    def lag(self) -> int:
        return self.end_offset - self.committed_offset


def status(
    spark: SparkSession, warehouse: Warehouse, app: str, state_dir: str
) -> tuple[Any, list[TaskStatus]]:
    """The last committed batch of ``app`` and, per input partition, its offsets and lag."""
    log = batches.read_log(spark, warehouse.batches_path(app))
    commit = log.last_commit
    rows: list[TaskStatus] = []
    if commit is None:
        return None, rows
    for topic, parts in sorted(commit.offsets.items()):
        ends = logtable.end_offsets(spark, warehouse, topic)
        for partition, offset in sorted(parts.items()):
            task = _task_of(commit, partition, topic)
            rows.append(
                TaskStatus(
                    task,
                    topic,
                    partition,
                    offset,
                    ends.get(partition, offset),
                    commit.stream_times.get(task),
                    _local_offset(state_dir, app, task, topic, partition),
                )
            )
    return commit, rows


def _task_of(commit, partition: int, topic: str) -> str:
    sub = commit.stats.get("inputs", {}).get(topic, "?")
    return f"{sub}_{partition}"


def _local_offset(state_dir: str, app: str, task: str, topic: str, partition: int) -> int | None:
    if not local.store_exists(state_dir, app, task):
        return None
    from lakestate.state.base import TopicPartition

    try:
        store = local.open_task_store(state_dir, app, task, IsolationLevel.READ_COMMITTED)
    except Exception:  # held open by a running batch
        return None
    try:
        return store.committed_offset(TopicPartition(topic, partition))
    finally:
        store.close()


def format_time(ms: int | None) -> str:
    if ms is None or ms < 0:
        return "-"
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S")
