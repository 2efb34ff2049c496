"""Delta state tables: one per store, the durable, SQL-queryable copy of the state.

Columns: ``task`` (the partition of the task that owns the row), the store kind's typed
columns (e.g. ``key``, ``value``, ``ts`` for key-value stores; keys and values as JSON
text, as in log tables), ``batch_id`` (the batch that last wrote the row) and the entry's
exact bytes ``raw_key``/``raw_value``, from which the local store is restored. Partitioned
by task. Change Data Feed is on: a local store that fell behind catches up from it.

Each batch changes a table in one commit carrying Delta's txn action, so a replayed batch
is skipped: an append when every change is a key the table does not hold, a MERGE without an
insert clause when every change is a key it holds, else a full MERGE (a MERGE takes the txn
through the session confs ``spark.databricks.delta.write.txnAppId/txnVersion``).
The typed columns reach Spark as one struct column per store kind (``process.state_column``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from delta.tables import DeltaTable
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from lakestate.engine.process import STATE_APPEND, STATE_MERGE, STATE_UPDATE, state_column
from lakestate.io import logtable
from lakestate.state.registry import view_class
from lakestate.warehouse import Warehouse

TXN_APP = "lakestate-state"
TXN_APP_CONF = "spark.databricks.delta.write.txnAppId"
TXN_VERSION_CONF = "spark.databricks.delta.write.txnVersion"
USER_METADATA_CONF = "spark.databricks.delta.commitInfo.userMetadata"
SHUFFLE_PARTITIONS_CONF = "spark.sql.shuffle.partitions"
TABLE_PROPERTIES = {
    "delta.enableChangeDataFeed": "true",
    "delta.enableDeletionVectors": "true",
}


def typed_schema(kind: str) -> StructType:
    ddl = ", ".join(f"`{name}` {type_}" for name, type_ in view_class(kind).STATE_COLUMNS)
    return StructType.fromDDL(ddl)


def ensure_table(spark: SparkSession, path: str, store: str, kind: str) -> None:
    builder = DeltaTable.createIfNotExists(spark).location(path).addColumn("task", "INT")
    for name, type_ in view_class(kind).STATE_COLUMNS:
        builder = builder.addColumn(name, type_)
    builder = (
        builder.addColumn("batch_id", "BIGINT")
        .addColumn("raw_key", "BINARY")
        .addColumn("raw_value", "BINARY")
        .partitionedBy("task")
        .comment(f"lakestate state store {store} ({kind})")
        .property("lakestate.store.kind", kind)
    )
    for key, value in TABLE_PROPERTIES.items():
        builder = builder.property(key, value)
    builder.execute()


def table_version(spark: SparkSession, warehouse: Warehouse, path: str) -> int:
    return logtable.table_version(spark, warehouse, path)


def write_mode(task_modes: Iterable[str | None]) -> str:
    """How a batch writes a store's table, from each task's verdict on its rows
    (``process._state_rows``; None for a task without rows): the tasks' common mode, or
    STATE_MERGE when they differ; STATE_APPEND (an empty append) when no task has rows."""
    modes = {m for m in task_modes if m is not None}
    if not modes:
        return STATE_APPEND
    return modes.pop() if len(modes) == 1 else STATE_MERGE


def write_changes(
    spark: SparkSession,
    path: str,
    kind: str,
    changes: DataFrame,
    batch_id: int,
    tasks: list[int],
    app: str,
    mode: str,
) -> None:
    """Write one batch's changes in one idempotent Delta commit, as ``mode`` says
    (``write_mode``): an append, a MERGE that only updates and deletes, or a full MERGE."""
    if mode == STATE_APPEND:
        append_changes(spark, path, kind, changes, batch_id, app)
    else:
        # A session of its own: MERGE takes its txn through session confs.
        merge_changes(
            spark.newSession(), path, kind, changes, batch_id, tasks, app, mode != STATE_UPDATE
        )


def merge_changes(
    spark: SparkSession,
    path: str,
    kind: str,
    changes: DataFrame,
    batch_id: int,
    tasks: list[int],
    app: str,
    inserts: bool = True,
) -> None:
    """Apply one batch's changes (rows: task, raw_key, raw_value and the kind's typed struct
    column, see ``process.state_column``; raw_value null = delete) in one idempotent MERGE.
    ``inserts=False``: every change is a key the table holds, so the MERGE has no insert
    clause (Delta then joins the changes with the table's rows instead of outer-joining)."""
    source, columns = _table_rows(kind, changes, batch_id)
    assignments = {c: F.col(f"s.`{c}`") for c in columns}
    # The task list lets Delta prune to the partitions this batch touched.
    task_list = ", ".join(str(t) for t in sorted(tasks)) or "NULL"
    condition = f"t.task IN ({task_list}) AND t.task = s.task AND t.raw_key = s.raw_key"
    conf = spark.conf
    shuffle_partitions = conf.get(SHUFFLE_PARTITIONS_CONF)
    # The table is partitioned by task: more shuffle partitions than tasks would only
    # write more, smaller files per task, and a MERGE on fewer runs faster.
    conf.set(SHUFFLE_PARTITIONS_CONF, str(max(1, min(int(shuffle_partitions), len(tasks)))))
    conf.set(TXN_APP_CONF, TXN_APP)
    conf.set(TXN_VERSION_CONF, str(batch_id))
    conf.set(USER_METADATA_CONF, _user_metadata(app, batch_id))
    try:
        merge = (
            DeltaTable.forPath(spark, path)
            .alias("t")
            .merge(source.alias("s"), condition)
            .whenMatchedDelete("s.raw_value IS NULL")
            .whenMatchedUpdate(set=assignments)
        )
        if inserts:
            merge = merge.whenNotMatchedInsert("s.raw_value IS NOT NULL", values=assignments)
        merge.execute()
    finally:
        conf.set(SHUFFLE_PARTITIONS_CONF, shuffle_partitions)
        conf.unset(TXN_APP_CONF)
        conf.unset(TXN_VERSION_CONF)
        conf.unset(USER_METADATA_CONF)


def append_changes(
    spark: SparkSession, path: str, kind: str, changes: DataFrame, batch_id: int, app: str
) -> None:
    """Apply one batch's changes, every one a key the table does not hold, in one idempotent
    append: the rows a MERGE would insert, without its join against the whole table."""
    rows, _ = _table_rows(kind, changes, batch_id)
    (
        rows.write.format("delta")
        .mode("append")
        .option("txnAppId", TXN_APP)
        .option("txnVersion", batch_id)
        .option("userMetadata", _user_metadata(app, batch_id))
        .save(path)
    )


def _table_rows(kind: str, changes: DataFrame, batch_id: int) -> tuple[DataFrame, list[str]]:
    """The table's rows for ``changes``, and the table's columns."""
    typed = typed_schema(kind)
    struct = state_column(kind)
    rows = changes.select(
        "task",
        *[F.col(f"`{struct}`.`{f.name}`").alias(f.name) for f in typed.fields],
        F.lit(batch_id).cast("bigint").alias("batch_id"),
        "raw_key",
        "raw_value",
    )
    return rows, ["task", *[f.name for f in typed.fields], "batch_id", "raw_key", "raw_value"]


def _user_metadata(app: str, batch_id: int) -> str:
    return json.dumps({"app": app, "batch_id": batch_id})


def read_task_rows(spark: SparkSession, path: str, task: int, version: int) -> list[tuple]:
    """(raw_key, raw_value) of every row of ``task`` at table ``version``."""
    df = spark.read.format("delta").option("versionAsOf", version).load(path)
    return [
        (r[0], r[1])
        for r in df.where(F.col("task") == task).select("raw_key", "raw_value").toLocalIterator()
    ]


def read_task_changes(
    spark: SparkSession, path: str, task: int, after_version: int, to_version: int
) -> list[tuple]:
    """The net change per key of ``task`` between two versions, from the Change Data Feed:
    (raw_key, raw_value) with raw_value None for keys deleted."""
    if to_version <= after_version:
        return []
    cdf = (
        spark.read.format("delta")
        .option("readChangeFeed", "true")
        .option("startingVersion", after_version + 1)
        .option("endingVersion", to_version)
        .load(path)
        .where((F.col("task") == task) & (F.col("_change_type") != "update_preimage"))
    )
    latest: dict[bytes, tuple[int, int, bytes | None]] = {}
    for r in cdf.select(
        "raw_key", "raw_value", "_change_type", "_commit_version"
    ).toLocalIterator():
        rank = (r["_commit_version"], 0 if r["_change_type"] == "delete" else 1)
        value = None if r["_change_type"] == "delete" else bytes(r["raw_value"])
        key = bytes(r["raw_key"])
        if key not in latest or rank >= latest[key][:2]:
            latest[key] = (*rank, value)
    return [(k, v[2]) for k, v in latest.items()]
