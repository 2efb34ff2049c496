"""Writing a batch's output records to their topics, once.

Records get dense offsets after each partition's current end, in the order the tasks
emitted them (by sub-topology, task, emission sequence), and go in one Delta append
carrying the batch's txn action, so a replayed batch is skipped by a topic that already
holds it.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from lakestate.engine.layout import AppLayout, end_offsets
from lakestate.io import logtable

TXN_APP_PREFIX = "lakestate-sink-"


def append_output(
    spark: SparkSession, layout: AppLayout, topic: str, rows: DataFrame, app: str, batch_id: int
) -> None:
    """Append ``rows`` (the batch's kind=out rows of one topic, not empty) to ``topic``."""
    warehouse = layout.warehouse
    with logtable._append_lock(warehouse, topic):
        ends = end_offsets(spark, layout, topic)
        ends_df = spark.createDataFrame(list(ends.items()), "partition int, end_offset long")
        order = Window.partitionBy("partition").orderBy("sub", "task", "seq")
        numbered = (
            rows.join(F.broadcast(ends_df), "partition")
            .withColumn("offset", F.row_number().over(order) - 1 + F.col("end_offset"))
            .select(
                F.col("partition").cast("int"),
                F.col("offset").cast("long"),
                F.col("timestamp").cast("long"),
                "key",
                "value",
                "headers",
            )
        )
        (
            numbered.write.format("delta")
            .mode("append")
            .option("txnAppId", TXN_APP_PREFIX + app)
            .option("txnVersion", batch_id)
            .save(warehouse.topic_path(topic))
        )
