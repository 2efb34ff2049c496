"""Converting an app folder from lakestate's first state format to the second.

Format 1 kept a batch log (``apps/<app>/_batches``: plan and commit rows) and one
MERGE-written state table per store (``apps/<app>/state/<store>``: the current rows). Format
2 keeps a progress table and append-only changelogs (``docs/architecture.md``). The last
committed batch ``N`` of format 1 becomes batch ``N`` of every task: each store's rows at
that batch become its changelog's first rows (one snapshot per task, ``snapshot_through =
N``), and each task gets a progress row with its committed offsets and stream time. Local
stores need nothing: they hold batch ``N`` with the same offsets. The old tables are moved
aside (``_v1_batches``, ``_v1_state``), not deleted.

Idempotent, so a crash mid-way is repaired by running it again: changelogs and progress rows
that already hold a task's batch (their ``txn``) are skipped.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable

from lakestate.app import App
from lakestate.checkpoint import changelog, progress
from lakestate.errors import StreamsException
from lakestate.io import delta_commits, topics
from lakestate.task_id import TaskId
from lakestate.topology.graph import internal_topic_name
from lakestate.warehouse import Warehouse
from pyspark.sql import SparkSession
from pyspark.sql import functions as F


def convert(
    spark: SparkSession, warehouse: Warehouse, app: App, say: Callable[[str], None] = print
) -> int:
    """Convert ``app``'s folder to format 2; returns the batch it was converted at (0 when
    it had none)."""
    batch, payload = _last_old_commit(spark, warehouse, app)
    offsets = payload.get("offsets", {})
    stream_times = payload.get("stream_times", {})
    versions = payload.get("state_versions", {})
    progress.ensure_table(warehouse.progress_path(app.name), app.name)
    progress_rows = []
    for sub in app.topology.subtopologies:
        inputs = list(sub.source_topics) + [
            internal_topic_name(app.name, s) for s in sub.repartition_sources
        ]
        partitions = max(topics.topic(warehouse, t).partitions() for t in inputs)
        tasks = [TaskId(sub.id, p) for p in range(partitions)]
        tables = []
        for store in sub.stores:
            kind = app.topology.stores[store].kind
            path = warehouse.changelog_path(app.name, store)
            changelog.ensure_table(path, store, kind)
            tables.append(warehouse.relative(path))
            if batch:
                _convert_store(
                    spark, warehouse, app.name, store, kind, versions.get(store), tasks, batch
                )
        if batch:
            progress_rows += _progress_rows(tasks, inputs, offsets, stream_times, batch, tables)
    _record_progress(warehouse, app.name, progress_rows, batch)
    app_dir = warehouse.app_path(app.name)
    for name, aside in (("state", "_v1_state"), ("_batches", "_v1_batches")):
        if os.path.isdir(os.path.join(app_dir, name)):
            os.replace(os.path.join(app_dir, name), os.path.join(app_dir, aside))
    say(
        f"app {app.name}: converted to format {progress.FORMAT} at batch {batch} "
        f"({len(progress_rows)} tasks); the old tables are in {app_dir}/_v1_batches and _v1_state"
    )
    return batch


def _last_old_commit(spark: SparkSession, warehouse: Warehouse, app: App) -> tuple[int, dict]:
    """The last batch committed in format 1 (0: none) and its commit's payload; refused
    when a later batch was planned but not committed."""
    old_log = warehouse.old_format_path(app.name)
    if not os.path.isdir(os.path.join(old_log, "_delta_log")):
        raise StreamsException(f"app {app.name}: nothing to convert (no {old_log})")
    rows = spark.read.format("delta").load(old_log).collect()
    commits = [r for r in rows if r["kind"] == "commit"]
    last = max(commits, key=lambda r: r["batch_id"], default=None)
    batch = 0 if last is None else last["batch_id"]
    pending = [r["batch_id"] for r in rows if r["kind"] == "plan" and r["batch_id"] > batch]
    if pending:
        raise StreamsException(
            f"app {app.name}: batch {max(pending)} was planned but not committed in the old "
            "format; finish it with the lakestate version that planned it, then convert"
        )
    # Format 1's commit rows carry their payload as JSON text: read here, at the boundary.
    return batch, json.loads(last["payload"]) if last is not None else {}


def _progress_rows(
    tasks: list[TaskId],
    inputs: list[str],
    offsets: dict,
    stream_times: dict,
    batch: int,
    tables: list[str],
) -> list[progress.TaskProgress]:
    """Each task's progress row at ``batch``, from format 1's offsets and stream times (none
    for a task that never processed a record)."""
    rows = []
    for task in tasks:
        task_offsets = {
            t: offsets[t][str(task.partition)]
            for t in inputs
            if str(task.partition) in offsets.get(t, {})
        }
        if not task_offsets:
            continue
        rows.append(
            progress.TaskProgress(
                task,
                batch,
                "convert",
                progress.now_ms(),
                {},
                task_offsets,
                stream_times.get(str(task), -1),
                0,
                tuple(tables),
                {},
            )
        )
    return rows


def _record_progress(
    warehouse: Warehouse, app: str, rows: list[progress.TaskProgress], batch: int
) -> None:
    """The progress rows not recorded yet (a conversion run again skips the tasks whose
    progress table already holds ``batch``)."""
    if not rows:
        return
    table = delta_commits.open_table(warehouse.progress_path(app))
    held = delta_commits.txn_versions(table, app, [r.task for r in rows])
    todo = [r for r in rows if held[r.task] < batch]
    if todo:
        progress.record(warehouse.progress_path(app), app, todo, {"converted_from": 1})


def _convert_store(
    spark: SparkSession,
    warehouse: Warehouse,
    app: str,
    store: str,
    kind: str,
    version: int | None,
    tasks: list[TaskId],
    batch: int,
) -> None:
    path = warehouse.changelog_path(app, store)
    table = delta_commits.open_table(path)
    todo = {
        t: batch
        for t, held in delta_commits.txn_versions(table, app, tasks).items()
        if held < batch
    }
    if not todo:
        return
    old = os.path.join(warehouse.app_path(app), "state", store)
    reader = spark.read.format("delta")
    if version is not None:
        reader = reader.option("versionAsOf", version)
    partitions = sorted(t.partition for t in todo)
    names = [f.name for f in changelog.schema(kind)]
    frame = (
        reader.load(old)
        .where(F.col("task").isin(partitions))
        .withColumn("batch_id", F.lit(batch).cast("bigint"))
        .withColumn(changelog.SNAPSHOT_COLUMN, F.lit(batch).cast("bigint"))
        .select(*names)
    )
    data = frame.toArrow().cast(changelog.schema(kind))
    delta_commits.append(table, data, app, todo, {"converted_from": 1})
