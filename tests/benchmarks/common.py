"""Helpers shared by the benchmark scripts: the Spark Structured Streaming queries that the
lakestate apps are measured against.

Only the standard library is imported at module level: ``bench_scheduled.py`` runs these
queries in fresh processes, whose start-up is part of what it times, and imports this
module there before Spark starts. The benchmark scripts run as files
(``python tests/benchmarks/<script>.py``), so this directory is first on ``sys.path``.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent

def sibling(name: str) -> Any:
    """A sibling benchmark script as a module (its helpers are reused, not copied)."""
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, HERE / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def log(msg: str) -> None:
    """``msg`` on stdout with the time of day, flushed (runs take minutes)."""
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


#: Structured Streaming's RocksDB state store (the provider a production query would use).
ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"


def _source(spark, topic_path: str, files_per_trigger: int | None):
    reader = spark.readStream.format("delta")
    if files_per_trigger:
        reader = reader.option("maxFilesPerTrigger", files_per_trigger)
    return reader.load(topic_path)


def dedup_query(
    spark,
    topic_path: str,
    out_path: str,
    checkpoint: str,
    files_per_trigger: int | None = None,
    delay: str = "1 hour",
):
    """The counterpart of the dedup app (``apps/dedup_bench.py``), started: the log table
    read as a Delta stream -> the id (the key's JSON text) and the event time ->
    ``withWatermark(delay)`` -> ``dropDuplicatesWithinWatermark(["id"])`` -> a Delta sink,
    ``Trigger.AvailableNow``. The state store provider is the session's
    (``spark.sql.streaming.stateStore.providerClass``, RocksDB in the benchmarks)."""
    from pyspark.sql import functions as F

    parsed = _source(spark, topic_path, files_per_trigger).select(
        F.get_json_object("key", "$").alias("id"),
        F.timestamp_millis("timestamp").alias("event_time"),
        "partition",
        "offset",
        "timestamp",
        "key",
        "value",
    )
    deduped = parsed.withWatermark("event_time", delay).dropDuplicatesWithinWatermark(["id"])
    return (
        deduped.writeStream.format("delta")
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start(out_path)
    )


def count_query(
    spark,
    topic_path: str,
    out_path: str,
    checkpoint: str,
    files_per_trigger: int | None = None,
):
    """The counterpart of the demo app (``jobs/demo.py``: events -> filter(amount > 0) ->
    group_by_key().count() -> event-counts), started: ``where(amount > 0)`` ->
    ``groupBy("key").count()`` in update mode; each micro-batch's updated counts are
    appended to a Delta table in ``foreachBatch`` (as the app appends every update to its
    output topic), idempotently through Delta's ``txnAppId``/``txnVersion`` writer options
    as Delta's documentation recommends for foreachBatch; ``Trigger.AvailableNow``."""
    from pyspark.sql import functions as F

    counts = (
        _source(spark, topic_path, files_per_trigger)
        .where(F.get_json_object("value", "$.amount").cast("long") > 0)
        .groupBy("key")
        .count()
    )
    app_id = f"bench-count-{checkpoint}"

    def write(batch, epoch: int) -> None:
        (
            batch.write.format("delta")
            .mode("append")
            .option("txnAppId", app_id)
            .option("txnVersion", epoch)
            .save(out_path)
        )

    return (
        counts.writeStream.outputMode("update")
        .foreachBatch(write)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )


def windowed_count_query(
    spark,
    topic_path: str,
    out_path: str,
    checkpoint: str,
    files_per_trigger: int | None = None,
    size: str = "1 minute",
    delay: str = "30 seconds",
):
    """The counterpart of the windows app (``apps/windows_bench.py``: tumbling 1-minute
    windows with 30 s grace, ``count``, ``suppress(until_window_closes)``), started: the
    key (the user, the key's JSON text decoded) and the event time ->
    ``withWatermark(delay)`` -> ``groupBy(window(event_time, size), user).count()`` in
    append mode (a window is written once, when the watermark passes its end) -> a Delta
    sink, ``Trigger.AvailableNow``. A window is closed on both sides once the newest event
    time seen is ``delay`` (the grace) past its end; SSS moves its watermark between
    micro-batches only, lakestate per record (and per partition)."""
    from pyspark.sql import functions as F

    counts = (
        _source(spark, topic_path, files_per_trigger)
        .select(
            F.get_json_object("key", "$").alias("user"),
            F.timestamp_millis("timestamp").alias("event_time"),
        )
        .withWatermark("event_time", delay)
        .groupBy(F.window("event_time", size), "user")
        .count()
    )
    return (
        counts.writeStream.format("delta")
        .outputMode("append")
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start(out_path)
    )


QUERIES = {"dedup": dedup_query, "count": count_query, "windowed_count": windowed_count_query}


def await_query(query) -> list[dict[str, Any]]:
    """Wait for an AvailableNow query to stop; its progress reports (RuntimeError if it
    failed)."""
    query.awaitTermination()
    if query.exception() is not None:
        raise RuntimeError(f"Structured Streaming query failed: {query.exception()}")
    return [progress_dict(p) for p in query.recentProgress]


def progress_dict(p: Any) -> dict[str, Any]:
    if isinstance(p, dict):
        return p
    text = getattr(p, "json", None)
    if callable(text):
        text = text()
    return json.loads(text) if isinstance(text, str) else dict(p)
