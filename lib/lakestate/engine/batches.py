"""The app's batch log: a Delta table with one ``plan`` row and one ``commit`` row per batch.

A plan row is written before a batch is processed; its commit row after every Delta table of
the batch is written. The last commit row holds everything a restart needs: the committed
offsets of every input partition, each task's stream time and the state tables' versions.
A plan without a commit row is a batch to replay. Each row is written with Delta's txn
action (app id per row kind, version = batch id), so a replayed write is skipped and two runs
cannot both plan the same batch.

Each row's commit also carries the row in its metadata (``userMetadata``, JSON), so on a
local file system ``read_log`` reads the newest commit files back to the last commit row and
needs no Spark job; a commit without such a row (another writer, an older lakestate) falls
back to reading the table.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from delta.tables import DeltaTable
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType, StructField, StructType

from lakestate.engine.plan import BatchPlan, Offsets
from lakestate.errors import TaskMigratedException
from lakestate.io import delta_log

SCHEMA = StructType(
    [
        StructField("batch_id", LongType(), False),
        StructField("kind", StringType(), False),  # "plan" or "commit"
        StructField("run_id", StringType(), False),
        StructField("at_ms", LongType(), False),
        StructField("payload", StringType(), False),
    ]
)
PLAN_TXN_APP = "lakestate-plan"
#: The key, in a batch-log commit's metadata (JSON), of the row the commit wrote.
ROW_METADATA_KEY = "lakestate.batch_log_row"
COMMIT_TXN_APP = "lakestate-commit"


@dataclass(frozen=True)
class CommitRecord:
    """What a committed batch left: cumulative offsets, stream times, state table versions."""

    batch_id: int
    run_id: str
    at_ms: int
    offsets: Offsets = field(default_factory=dict)
    stream_times: dict[str, int] = field(default_factory=dict)
    state_versions: dict[str, int] = field(default_factory=dict)
    stats: dict[str, Any] = field(default_factory=dict)

    def payload(self) -> str:
        return json.dumps(
            {
                "offsets": self.offsets,
                "stream_times": self.stream_times,
                "state_versions": self.state_versions,
                "stats": self.stats,
            },
            sort_keys=True,
        )

    @staticmethod
    def parse(batch_id: int, run_id: str, at_ms: int, payload: str) -> CommitRecord:
        raw = json.loads(payload)
        offsets = {t: {int(p): o for p, o in parts.items()} for t, parts in raw["offsets"].items()}
        return CommitRecord(
            batch_id,
            run_id,
            at_ms,
            offsets,
            raw["stream_times"],
            raw["state_versions"],
            raw.get("stats", {}),
        )


@dataclass(frozen=True)
class BatchLog:
    last_commit: CommitRecord | None
    pending_plan: BatchPlan | None
    pending_run_id: str | None

    @property
    def committed_batch(self) -> int:
        return 0 if self.last_commit is None else self.last_commit.batch_id

    @property
    def committed_offsets(self) -> Offsets:
        return {} if self.last_commit is None else self.last_commit.offsets


def ensure_table(spark: SparkSession, path: str) -> None:
    (
        DeltaTable.createIfNotExists(spark)
        .location(path)
        .addColumns(SCHEMA)
        .comment("lakestate batch log: one plan and one commit row per micro-batch")
        .execute()
    )


def read_log(spark: SparkSession, path: str) -> BatchLog:
    """The last commit row and the plan after it, if any."""
    log = delta_log.local_log(path)
    rows = _rows_from_commits(log) if log is not None else None
    if rows is None:
        table = spark.read.format("delta").load(path)
        newest = table.agg(F.max("batch_id")).first()[0]
        if newest is None:
            return BatchLog(None, None, None)
        # The newest batch and the one before are all a restart needs.
        rows = [
            (r["batch_id"], r["kind"], r["run_id"], r["at_ms"], r["payload"])
            for r in table.where(F.col("batch_id") >= newest - 1).collect()
        ]
    commits = [r for r in rows if r[1] == "commit"]
    last = max(commits, key=lambda r: r[0], default=None)
    last_commit = None if last is None else CommitRecord.parse(last[0], last[2], last[3], last[4])
    committed = 0 if last_commit is None else last_commit.batch_id
    plans = [r for r in rows if r[1] == "plan" and r[0] > committed]
    plan = max(plans, key=lambda r: r[0], default=None)
    if plan is None:
        return BatchLog(last_commit, None, None)
    return BatchLog(last_commit, BatchPlan.from_json(plan[4]), plan[2])


def _commit_row(log: Path, version: int) -> tuple | None | bool:
    """The batch-log row a commit carries in its metadata; None for a commit that changed no
    data (table creation); False when it cannot tell (no such file, or a commit that changed
    data without a row)."""
    commit = delta_log.read_commit(log, version)
    if commit is None:
        return False
    row = commit.metadata_value(ROW_METADATA_KEY)
    if isinstance(row, list) and len(row) == len(SCHEMA.fields):
        return tuple(row)
    return False if commit.changes_data else None


def _rows_from_commits(log: Path) -> list[tuple] | None:
    """The rows of the newest commits back to the last commit row (all rows if there is
    none), from their metadata; None when a commit cannot tell (read the table instead)."""
    versions = delta_log.versions(log)
    rows = []
    for version in versions:
        row = _commit_row(log, version)
        if row is False:
            return None
        if row is not None:
            rows.append(row)
            if row[1] == "commit":
                return rows
    # No commit row: every row there is, if the log still starts at version 0.
    return rows if versions and versions[-1] == 0 else None


def history(spark: SparkSession, path: str, limit: int = 20) -> list[CommitRecord]:
    rows = (
        spark.read.format("delta")
        .load(path)
        .where("kind = 'commit'")
        .orderBy("batch_id", ascending=False)
        .limit(limit)
        .collect()
    )
    return [CommitRecord.parse(r["batch_id"], r["run_id"], r["at_ms"], r["payload"]) for r in rows]


def _append(
    spark: SparkSession, path: str, row: tuple, txn_app: str, batch_id: int, check: bool
) -> bool:
    """Append one row with Delta's txn action. With ``check``, returns False when Delta
    skipped it because the txn version was already committed for ``txn_app`` (another run
    wrote this batch); without, returns True without reading the table's history."""
    df = spark.createDataFrame([row], SCHEMA).coalesce(1)
    # The row itself, for read_log; with the txn app and run id it also tells this write's
    # commit from any other.
    marker = json.dumps({"txn": txn_app, ROW_METADATA_KEY: list(row)})
    try:
        (
            df.write.format("delta")
            .mode("append")
            .option("txnAppId", txn_app)
            .option("txnVersion", batch_id)
            .option("userMetadata", marker)
            .save(path)
        )
    except Exception as exc:  # Delta's concurrent-transaction conflicts come as Py4J errors
        if "Concurrent" in str(exc):
            raise TaskMigratedException(
                f"another run wrote the {txn_app.split('-')[1]} of batch {batch_id} at the "
                f"same time; this run stops without committing"
            ) from exc
        raise
    if not check:
        return True
    # A skipped write leaves no commit: the newest one is then not ours.
    log = delta_log.local_log(path)
    versions = delta_log.versions(log) if log is not None else []
    if versions:
        newest = delta_log.read_commit(log, versions[0])
        return newest is not None and newest.user_metadata == marker
    latest = DeltaTable.forPath(spark, path).history(1).select("userMetadata").first()
    return latest is not None and latest[0] == marker


def write_plan(spark: SparkSession, path: str, plan: BatchPlan, run_id: str) -> None:
    """Record ``plan``; raises TaskMigratedException if another run owns this batch."""
    row = (plan.batch_id, "plan", run_id, _now_ms(), plan.to_json())
    if not _append(spark, path, row, PLAN_TXN_APP, plan.batch_id, check=True):
        raise TaskMigratedException(
            f"batch {plan.batch_id} was planned by another run; this run stops without committing"
        )


def write_commit(spark: SparkSession, path: str, record: CommitRecord) -> None:
    _append(
        spark,
        path,
        (record.batch_id, "commit", record.run_id, record.at_ms, record.payload()),
        COMMIT_TXN_APP,
        record.batch_id,
        # A skipped commit row means this batch's commit row is in the log already (the
        # same plan's, written before a crash): nothing to tell the caller, no read needed.
        check=False,
    )


def _now_ms() -> int:
    return int(time.time() * 1000)
