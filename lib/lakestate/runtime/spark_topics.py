"""Spark's reading of topics: a topic's records as a Spark DataFrame (the Spark transport's
reads, ``consume --engine spark``, the demo).

Columns as ``topic_records.RECORD_SCHEMA`` (``SPARK_RECORD_SCHEMA``: key, value and
headers as JSON text; ``collect_records`` decodes them). A log table is read by Spark's
Delta reader; another kind (a Kafka topic) is read by its own reader in the driver and
handed to Spark as a DataFrame.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from functools import cache, reduce
from typing import Any

import pyarrow as pa
from lakestate.io.logtable import LogTableTopic
from lakestate.io.topic_records import (
    RECORD_SCHEMA,
    Ranges,
    TopicRecord,
    check_ranges,
    decode_json,
)
from lakestate.io.topics import Topic
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

__all__ = [
    "collect_records",
    "iter_records",
    "read_range",
    "read_topic",
    "spark_record_schema",
]


@cache
def spark_record_schema() -> Any:
    """``topic_records.RECORD_SCHEMA`` as a Spark schema (Spark's own Arrow type mapping:
    no second type map to keep in step)."""
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(RECORD_SCHEMA)


def _load(spark: SparkSession, topic: Topic) -> DataFrame:
    if isinstance(topic, LogTableTopic):
        return spark.read.format("delta").load(topic.path)
    raise NotImplementedError(f"Spark cannot read topic {topic.name!r} of kind {topic.kind}")


def _through_driver(spark: SparkSession, rows: pa.Table) -> DataFrame:
    """Records another kind's reader read in the driver (a Kafka topic's: the driver's
    consumer reads them), as a DataFrame."""
    return spark.createDataFrame(rows, schema=spark_record_schema())


def read_topic(
    spark: SparkSession, topic: Topic, partitions: Iterable[int] | None = None
) -> DataFrame:
    """All records of ``topic`` (of ``partitions`` only, when given), ordered by partition
    and offset."""
    if not isinstance(topic, LogTableTopic):
        tables = list(topic.read_partitions(partitions))
        rows = pa.concat_tables(tables) if tables else RECORD_SCHEMA.empty_table()
        return _through_driver(spark, rows).orderBy("partition", "offset")
    df = _load(spark, topic)
    if partitions is not None:
        df = df.where(F.col("partition").isin(sorted(set(partitions))))
    return df.orderBy("partition", "offset")


def read_range(
    spark: SparkSession, topic: Topic, ranges: Ranges, ordered: bool = True
) -> DataFrame:
    """Records with ``start <= offset < end`` of each partition in ``ranges``
    (``{partition: (start, end)}``), ordered by partition and offset. ``ordered=False``: in
    no particular order, for a reader that orders them itself (a global sort costs a
    sampling job and a shuffle)."""
    conditions: list[Column] = [
        (F.col("partition") == p)
        & (F.col("offset") >= F.lit(start))
        & (F.col("offset") < F.lit(end))
        for p, (start, end) in check_ranges(topic.name, ranges).items()
        if start < end
    ]
    if not isinstance(topic, LogTableTopic):
        df = _through_driver(spark, topic.reader().read_range(ranges))
        return df.orderBy("partition", "offset") if ordered else df
    condition = reduce(lambda a, b: a | b, conditions) if conditions else F.lit(False)
    df = _load(spark, topic).where(condition)
    return df.orderBy("partition", "offset") if ordered else df


def iter_records(df: DataFrame) -> Iterator[TopicRecord]:
    """The rows of a topic's DataFrame as ``TopicRecord``s, in the DataFrame's order,
    fetched one Spark partition at a time."""
    for row in df.toLocalIterator():
        yield _to_record(row)


def collect_records(df: DataFrame) -> list[TopicRecord]:
    """The rows of a topic's DataFrame as a list of ``TopicRecord``s, in order."""
    return [_to_record(row) for row in df.collect()]


def _to_record(row: Any) -> TopicRecord:
    return TopicRecord(
        partition=row["partition"],
        offset=row["offset"],
        timestamp=row["timestamp"],
        key=decode_json(row["key"]),
        value=decode_json(row["value"]),
        headers=decode_json(row["headers"]),
    )
