"""The Spark transport: a batch read by Spark and processed in Spark's Python workers.

Spark reads the batch's reads (``transport.input_reads``) from their topics
(``spark_topics.read_range``), gives each task a partition of its own (``route_column``:
``runtime/routing.py`` chooses the routes), and ``mapInArrow`` runs
``task_executor.process_partition`` in the Python workers, tasks in parallel; the
processing output comes back to the driver with ``toArrow``. When the executors own the
state, a batch is instead one partition per task placed on the executor its task ran on
last, reading its own input there (``spark_located.py``), and only the tasks' outcomes
and a Kafka sink's rows come back; the rest is written as files by the executors
(``spark_kept.py``). The session starts only when a run chose Spark, in the background
while the run recovers its local stores (``SparkStarter``).

With ``spark_session.py`` (which it starts Spark with), ``spark_topics.py`` (its reads),
``spark_located.py`` and ``spark_kept.py`` (the executors' own tasks and output), the only
runtime modules that import pyspark: the runner imports this one only once a run chose
Spark, so a run in this process imports no pyspark.
"""

from __future__ import annotations

import contextlib
import threading
import uuid
from collections.abc import Sequence

import pyarrow as pa
from lakestate.checkpoint import faults
from lakestate.checkpoint.changelog import ARROW_TYPES
from lakestate.checkpoint.executor_writes import kept_topics
from lakestate.checkpoint.layout import AppLayout
from lakestate.errors import StreamsException
from lakestate.object_store import is_s3
from lakestate.runtime.batch_rows import INPUT_SCHEMA, RECORD_COLUMNS, out_arrow_schema, out_fields
from lakestate.runtime.executor_stores import state_owner
from lakestate.runtime.outcome import outcomes_of
from lakestate.runtime.routing import TASK_KEY_STRIDE, routes
from lakestate.runtime.spark_kept import KeptFrames, LocatedRowsElsewhere
from lakestate.runtime.spark_located import Placements, on_driver, processed
from lakestate.runtime.spark_session import configured_master
from lakestate.runtime.spark_topics import read_range
from lakestate.runtime.task_executor import BatchContext, process_partition
from lakestate.runtime.transport import BatchInput, BatchOutput, InputRead
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

# The Spark SQL type of each Arrow type a batch's rows use (the inverse of the one map).
_SQL_TYPES = {arrow_type: sql for sql, arrow_type in ARROW_TYPES.items()}


class SparkStarter:
    """The run's SparkSession, started only when a run has records to process in Spark (a
    run that finds nothing new needs no JVM), in the background as soon as it is known to
    be needed, with its Python workers warmed up (lakestate imported in them) while the
    run recovers its local stores and plans."""

    def __init__(self, master: str | None, app_name: str, s3: bool = False) -> None:
        self.master = master
        self.app_name = app_name
        self.s3 = s3  # the warehouse is on a bucket: Spark with S3A
        self._session: SparkSession | None = None
        self._error: BaseException | None = None
        self._started = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start Spark in the background (once)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="spark-start", daemon=True)
            self._thread.start()

    def __call__(self) -> SparkSession:
        """The session, waiting for it to be up."""
        self.start()
        self._started.wait()
        if self._session is None:
            raise StreamsException(f"Spark did not start: {self._error}") from self._error
        return self._session

    def join(self) -> None:
        if self._thread is not None:
            self._thread.join()

    def _run(self) -> None:
        from lakestate.runtime.spark_session import get_spark

        try:
            self._session = get_spark(self.master, app_name=self.app_name, s3=self.s3)
        except BaseException as exc:  # reported to the caller of __call__
            self._error = exc
        finally:
            self._started.set()
        if self._session is not None:
            _warm_python_workers(self._session)


def _warm_python_workers(spark: SparkSession) -> None:
    """Start Spark's Python workers and import lakestate in them."""

    def touch(rows):
        import lakestate.runtime.task_executor  # noqa: F401

        yield from rows

    with contextlib.suppress(Exception):
        n = spark.sparkContext.defaultParallelism
        spark.sparkContext.parallelize(range(n), n).mapPartitions(touch).count()


class SparkTransport:
    """``transport.Transport`` on Spark: Spark on ``master`` (None: ``get_spark``'s
    default), its application named ``app_name``, reading the topics of ``layout``."""

    name = "spark"

    def __init__(self, master: str | None, app_name: str, layout: AppLayout) -> None:
        self.spark = SparkStarter(master, app_name, is_s3(layout.warehouse.root))
        self.layout = layout
        self._kept = KeptFrames()  # the last batch's output kept on the executors
        self.placements = Placements()  # where each task ran last (executors own the state)

    def start(self) -> None:
        self.spark.start()

    def close(self) -> None:
        self._kept.release()
        self.spark.join()

    def state_owner(self, config: dict) -> str:
        """``executor_stores.state_owner`` for this run's Spark master (the one configured,
        or under spark-submit the running session's) and the app's global tables."""
        master = configured_master(self.spark.master) or self.spark().sparkContext.master
        return state_owner(config, master, bool(self.layout.global_topics))

    def run_batch(self, batch: BatchInput) -> BatchOutput:
        """Step 1 in Spark's Python workers: the processing output, collected as Arrow."""
        # One Spark partition per task, so that tasks run in parallel (grouping by task
        # would hash tasks into shared partitions that AQE may coalesce further).
        if batch.ctx.executor_stores is not None:
            return self._located(batch)
        keys = sorted((p.task.subtopology, p.task.partition) for p in batch.plans)
        frame = (
            self._read(batch.reads)
            .repartition(len(keys), route_column(keys))
            .mapInArrow(_partition_function(batch.ctx), out_schema(batch.store_kinds))
        )
        return BatchOutput.of(frame.toArrow())

    def _located(self, batch: BatchInput) -> BatchOutput:
        """Step 1 where the stores are (``spark_located``): each task on the executor it
        ran on last, its output kept there; the driver takes the outcome rows."""
        sc = self.spark().sparkContext
        group = f"lakestate-batch-{uuid.uuid4().hex}"
        tasks = sorted(p.task for p in batch.plans if p.records)
        rdd = self._kept.keep(processed(sc, batch, self.placements, group))
        rows = on_driver(rdd, kept_topics(self.layout))
        self.placements.learn(sc, group, tasks)
        rows = rows if rows is not None else out_arrow_schema(batch.store_kinds).empty_table()
        return BatchOutput(rows, outcomes_of(rows), LocatedRowsElsewhere(rdd))

    def _read(self, reads: tuple[InputRead, ...]) -> DataFrame:
        """The batch's input rows, in ``INPUT_SCHEMA``'s columns, in no particular order
        (each task orders its records by offset: ``task_executor._in_order``)."""
        frames = [self._read_one(read) for read in reads]
        df = frames[0]
        for other in frames[1:]:
            df = df.unionByName(other)
        return df

    def _read_one(self, read: InputRead) -> DataFrame:
        """One read's rows for its readers: an input's go to the task of their partition;
        a global topic's, read once, are copied to each of its readers."""
        df = read_range(self.spark(), self.layout.topic(read.topic), read.ranges, ordered=False)
        if read.is_global:
            readers = F.array(
                *(
                    F.struct(F.lit(t.subtopology).alias("sub"), F.lit(t.partition).alias("task"))
                    for t in read.readers
                )
            )
            df = df.withColumn("reader", F.explode(readers))
            sub, task = F.col("reader.sub"), F.col("reader.task")
        else:
            sub, task = F.lit(read.readers[0].subtopology), F.col("partition")
        front = {"sub": sub, "task": task, "input_index": F.lit(read.input_index)}
        front["topic"] = F.lit(read.topic)
        return df.select(
            *(_cast(column, name) for name, column in front.items()),
            *(_cast(F.col(name), name) for name in RECORD_COLUMNS),
        )


def _cast(column: Column, name: str) -> Column:
    """``column`` as input column ``name``, of its ``INPUT_SCHEMA`` type."""
    return column.cast(_SQL_TYPES[INPUT_SCHEMA.field(name).type]).alias(name)


def out_schema(kinds: Sequence[str]) -> str:
    """``batch_rows.out_fields(kinds)`` as the Spark DDL schema of the processing output."""
    return ", ".join(f"`{name}` {_ddl(type_)}" for name, type_ in out_fields(kinds))


def _ddl(type_: pa.DataType) -> str:
    """The Spark DDL of Arrow type ``type_`` (structs, lists and maps of the mapped types)."""
    if pa.types.is_struct(type_):
        return "struct<" + ", ".join(f"`{f.name}`: {_ddl(f.type)}" for f in type_) + ">"
    if pa.types.is_map(type_):
        return f"map<{_ddl(type_.key_type)}, {_ddl(type_.item_type)}>"
    if pa.types.is_list(type_):
        return f"array<{_ddl(type_.value_type)}>"
    return _SQL_TYPES[type_]


def route_column(tasks: Sequence[tuple[int, int]]) -> Column:
    """The int column to ``repartition(len(tasks), ...)`` by: task ``tasks[j]`` (a
    ``(sub, partition)`` pair, as in the ``sub``/``task`` columns) goes to partition j
    (``routing.routes``)."""
    pairs = []
    for (sub, partition), route in zip(tasks, routes(len(tasks)), strict=True):
        pairs += [F.lit(sub * TASK_KEY_STRIDE + partition), F.lit(route)]
    task_key = F.col("sub").cast("long") * TASK_KEY_STRIDE + F.col("task")
    return F.create_map(*pairs)[task_key].cast("int")


def _partition_function(ctx: BatchContext):
    """The function for mapInArrow (a plain function: Spark inspects it)."""

    def process(batches):
        faults.kill_executor(min(ctx.batches.values()))  # tests only: see faults.py
        return process_partition(batches, ctx)

    return process


__all__ = ["SparkStarter", "SparkTransport", "out_schema", "route_column"]
