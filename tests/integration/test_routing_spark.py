"""The route arithmetic agrees with Spark's own hash partitioning."""

from __future__ import annotations

import pytest
from lakestate.runtime.routing import spark_hash_int
from lakestate.runtime.spark_transport import route_column
from pyspark.sql import functions as F

pytestmark = pytest.mark.integration


def test_python_hash_equals_spark_hash(spark) -> None:
    rows = spark.range(-50, 50).select("id", F.hash(F.col("id").cast("int")).alias("h")).collect()
    assert {r["id"]: r["h"] for r in rows} == {i: spark_hash_int(i) for i in range(-50, 50)}


def test_each_task_lands_in_a_partition_of_its_own(spark) -> None:
    tasks = [(0, p) for p in range(5)] + [(1, p) for p in range(3)]
    df = spark.createDataFrame([(s, p) for s, p in tasks for _ in range(10)], "sub int, task int")
    placed = (
        df.repartition(len(tasks), route_column(tasks))
        .select("sub", "task", F.spark_partition_id().alias("pid"))
        .distinct()
        .collect()
    )
    assert {(r["sub"], r["task"]): r["pid"] for r in placed} == {
        task: slot for slot, task in enumerate(tasks)
    }
