"""Writing a batch's output records to their topics, once.

Records get dense offsets after each partition's current end, in the order the tasks
emitted them (by sub-topology, task, emission sequence): each task numbers its records
within each output partition (``pseq``) and reports how many it wrote there, so a record's
offset is the partition's end, plus the records of the tasks before it, plus its ``pseq``
(no sort of the batch's output). They go in one Delta append carrying the batch's txn
action, so a replayed batch is skipped by a topic that already holds it.
"""

from __future__ import annotations

from collections.abc import Mapping

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from lakestate.engine.layout import AppLayout
from lakestate.io import logtable

TXN_APP_PREFIX = "lakestate-sink-"


def append_output(
    spark: SparkSession,
    layout: AppLayout,
    topic: str,
    rows: DataFrame,
    counts: Mapping[tuple[int, int], Mapping[int, int]],
    app: str,
    batch_id: int,
) -> None:
    """Append ``rows`` (the batch's kind=out rows of one topic, not empty) to ``topic``.
    ``counts``: per task ``(sub, partition)``, the records it wrote to each partition."""
    per_partition: dict[int, int] = {}
    for per_task in counts.values():
        for p, n in per_task.items():
            per_partition[p] = per_partition.get(p, 0) + n

    def build(ends: Mapping[int, int]) -> DataFrame:
        bases = []
        next_offset = dict(ends)
        for (sub, task), per_task in sorted(counts.items()):
            for p, n in sorted(per_task.items()):
                bases.append((sub, task, p, next_offset[p]))
                next_offset[p] += n
        bases_df = spark.createDataFrame(bases, "sub int, task int, partition int, base long")
        return rows.join(F.broadcast(bases_df), ["sub", "task", "partition"]).select(
            F.col("partition").cast("int"),
            (F.col("base") + F.col("pseq")).cast("long").alias("offset"),
            F.col("timestamp").cast("long"),
            "key",
            "value",
            "headers",
        )

    logtable.append_frame(
        spark,
        layout.warehouse,
        topic,
        build,
        per_partition,
        txn_app_id=TXN_APP_PREFIX + app,
        txn_version=batch_id,
    )
