"""The micro-batch runtime: plan, read, process, commit, recover (docs/architecture.md).

A run owns a set of tasks (all of the app's by default). It recovers them (``recovery``),
then runs batches until its limit: plan each task's next offset ranges (no commit), read
them from the log tables and process every task's records, each task staging its
transaction beside its local store (step 1), then commit (``commit.commit_batch``:
progress, tables, local stores). The transport of step 1 is chosen once, at the start of a
run, from the size of its pending input: a small run reads with delta-rs and processes its
tasks one after another in this process (``inprocess.py``) and never starts a JVM; a larger
one reads with Spark and processes its tasks in parallel in Spark's Python workers. Both
run the same per-task function (``process.process_task``) and commit the same way.
Sub-topologies that feed each other through repartition topics advance in the same run:
each batch plans from the ends the previous one left. A task also reads the new records of every global table's topic
(all partitions) and applies them before its inputs (``process.py``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from lakestate import console
from lakestate.app import App
from lakestate.checkpoint.batch import TaskCheckpoint, TaskPlan, global_key, split_global_key
from lakestate.checkpoint.commit import TaskResult, commit_batch
from lakestate.checkpoint.layout import AppLayout, prepare
from lakestate.checkpoint.layout import end_offsets as layout_end_offsets
from lakestate.checkpoint.standing import where_tasks_stand
from lakestate.checkpoint.task_dir import TaskDir
from lakestate.errors import StreamsException
from lakestate.processors.exception_handlers import ExceptionHandlers
from lakestate.processors.metrics import accumulate
from lakestate.restore.recovery import recover
from lakestate.runtime import inprocess, spark_topics
from lakestate.runtime.cutoff import Cutoff, format_timestamp
from lakestate.runtime.failure import message_of
from lakestate.runtime.plan import plan_tasks
from lakestate.runtime.routing import route_column
from lakestate.runtime.task_executor import (
    GLOBAL_INPUT,
    INPUT_COLUMNS,
    BatchContext,
    out_schema,
    process_partition,
    store_kinds,
)
from lakestate.state.base import isolation_for
from lakestate.state.constants import (
    DEFAULT_UNCOMMITTED_MAX_RECORDS,
    UNCOMMITTED_MAX_RECORDS,
)
from lakestate.task_id import TaskId
from lakestate.warehouse import Warehouse
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

log = logging.getLogger("lakestate.engine")

# What a plan is made from: end offsets per topic and partition; per task, the next offset
# its local store holds of each global topic partition.
_Sources = tuple[dict[str, dict[int, int]], dict[TaskId, dict[str, int]]]


@dataclass
class RunResult:
    """What a run did: per batch, each task's batch number; the records processed; whether
    it stopped because no input was left (before the cut, with ``until_timestamp``);
    ``busy``: another run of the app held the instance's lock for the whole wait, and this
    one did nothing. ``transport``: ``in_process`` or ``spark`` (None: no batch to run);
    ``figures``: per batch, its tasks' batch numbers, records in and out, the tasks it
    replayed, and its seconds. ``instance``: the instance the run was; ``warmed``: the
    warmup and standby tasks it brought to their committed batch, with the lag each had.
    ``dead_letters``: the records its batches skipped (log-and-continue) to the app's
    ``dead_letter_topic``; they are not among the output records."""

    batches: list[dict[str, int]] = field(default_factory=list)
    records: int = 0
    caught_up: bool = False
    busy: bool = False
    transport: str | None = None
    figures: list[dict[str, Any]] = field(default_factory=list)
    instance: str | None = None
    warmed: dict[str, int] = field(default_factory=dict)
    dead_letters: int = 0
    dead_letter_topic: str | None = None


def new_run_id() -> str:
    """A run's id: where it ran, and a random part."""
    return f"{os.uname().nodename}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


class SparkStarter:
    """The run's SparkSession, started only when a run has records to process (a run that
    finds nothing new needs no JVM), in the background as soon as it is known to be needed,
    with its Python workers warmed up (lakestate imported in them) while the run recovers
    its local stores and plans."""

    def __init__(self, master: str | None, app_name: str) -> None:
        self.master = master
        self.app_name = app_name
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
            self._session = get_spark(self.master, app_name=self.app_name)
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


class Runner:
    def __init__(
        self,
        spark: SparkStarter,
        app: App,
        app_path: str,
        wh: Warehouse,
        state_dir: str,
        max_records: int | None,
        say: Callable[[str], None],
    ) -> None:
        self.spark = spark
        self.app = app
        self.app_path = app_path
        self.state_dir = state_dir
        self.say = say
        self.isolation = isolation_for(app.config)
        bound = int(app.config.get(UNCOMMITTED_MAX_RECORDS, DEFAULT_UNCOMMITTED_MAX_RECORDS))
        self.max_records = min(bound, max_records) if max_records else bound
        self.inprocess_max_records = inprocess.max_records(app.config)
        self.in_process = False  # chosen at the start of each run (``_choose_transport``)
        self.bar = console.Bar()  # the run's progress: records processed of those pending
        self.run_id = new_run_id()
        #: the owner fences a batch's progress commit checks and carries, for its fresh
        #: tasks (an instance's run: its tasks' planned owner epochs, ``scaleout.task_roles``)
        self.fences: Callable[[list[TaskId]], Mapping[str, int]] | None = None
        self.layout: AppLayout = prepare(app, wh)
        self.wh = wh
        #: ``run_app(until_timestamp=...)``: the inputs' ends are cut (``runtime/cutoff.py``).
        self.cutoff: Cutoff | None = None
        #: where records skipped by log-and-continue go (None: every failure fails its batch)
        self.dead_letter_topic = ExceptionHandlers.from_config(
            app.config, app.name
        ).dead_letter_topic

    def run(self, tasks: list[TaskId], limit: int | None, deadline: float | None) -> RunResult:
        result = RunResult(dead_letter_topic=self.dead_letter_topic)
        standing = where_tasks_stand(self.layout, tasks)
        committed = dict(standing.committed)
        replays = standing.replays
        # The first plan, made before anything else: a run with nothing new ends here. Its
        # end offsets and global starts also size the run for the transport.
        sources = self._sources(tasks, committed)
        planned = None if replays else self._plan(tasks, committed, sources=sources)
        if planned == []:
            result.caught_up = True
            self.say(self._caught_up())
            return result
        self._choose_transport(tasks, committed, sources)
        result.transport = "in_process" if self.in_process else "spark"
        if not self.in_process:
            self.spark.start()  # while the local stores recover
        recover(self.layout, tasks, self.state_dir, self.isolation, self.say, standing)
        if self.layout.global_topics:
            # Global data is read from where each (now recovered) local store stands: a
            # restored store holds none, and reads its global topics again from offset 0.
            planned = None
            starts = self._global_starts([p.task for p in replays])
            replays = [
                _from_global_starts(p, starts.get(p.task, {}), self.layout.global_topics)
                for p in replays
            ]
        while limit is None or len(result.batches) < limit:
            if deadline is not None and result.batches and time.monotonic() >= deadline:
                self.say("time budget spent: no new batch")
                break
            if replays:
                plans, replayed = replays, {p.task for p in replays}
                replays = []
                self.say(
                    "replaying the recorded batches of "
                    + ", ".join(f"task {p.task} (batch {p.batch_id})" for p in plans)
                )
            else:
                plans = planned if planned is not None else self._plan(tasks, committed)
                planned, replayed = None, set()
                if not plans:
                    result.caught_up = True
                    self.say(self._caught_up())
                    break
            batch_started = time.monotonic()
            results = self._run_batch(plans, committed, replayed)
            for r in results:
                committed[r.task] = TaskCheckpoint(
                    r.batch_id, dict(r.offsets), r.stream_time, r.processor_metadata, r.metrics
                )
            result.batches.append({str(r.task): r.batch_id for r in results})
            result.records += sum(r.records for r in results)
            figures = _figures(
                results, replayed, time.monotonic() - batch_started, self.dead_letter_topic
            )
            result.figures.append(figures)
            result.dead_letters += figures["dead_letters"]
            self.bar.advance(sum(r.records for r in results))
        return result

    def _choose_transport(
        self, tasks: list[TaskId], committed: dict[TaskId, TaskCheckpoint], sources: _Sources
    ) -> None:
        """In this process or in Spark, for the whole run (replays included), from the run's
        pending input: every task's records from where it committed (so a batch to replay
        counts) to the ends, global topics included. Either transport gives the same rows."""
        plans = self._plan(tasks, committed, unbounded=True, sources=sources)
        pending = sum(p.records for p in plans)
        limit = self.inprocess_max_records
        self.in_process = 0 < limit and pending <= limit
        self.bar.update(total=pending)
        where = "in this process, no Spark" if self.in_process else "in Spark"
        self.say(
            f"transport: {where} ({pending} records pending; "
            f"{inprocess.MAX_RECORDS_CONFIG} {limit})"
        )

    def _plan(
        self,
        tasks: list[TaskId],
        committed: dict[TaskId, TaskCheckpoint],
        unbounded: bool = False,
        sources: _Sources | None = None,
    ) -> list[TaskPlan]:
        """The next batch's plans (``unbounded``: everything to the ends, in one), from
        ``sources`` when given (read now otherwise)."""
        ends, starts = sources or self._sources(tasks, committed)
        return plan_tasks(
            tasks,
            self.layout.inputs,
            committed,
            ends,
            None if unbounded else self.max_records,
            self.layout.global_topics,
            starts,
        )

    def _caught_up(self) -> str:
        if self.cutoff is None:
            return "caught up: no new input"
        return (
            "caught up to the cut: no input left before the first record stamped at or after "
            f"{format_timestamp(self.cutoff.until_timestamp)} in each partition"
        )

    def _sources(self, tasks: list[TaskId], committed: dict[TaskId, TaskCheckpoint]) -> _Sources:
        """What a plan is made from: each input and global topic's end offsets (the inputs'
        cut by ``self.cutoff`` from where the tasks stand), and where each task's local
        store stands in its global topics."""
        subs = {t.subtopology for t in tasks}
        ends = {
            topic: layout_end_offsets(self.layout, topic)
            for sub in sorted(subs)
            for topic in [*self.layout.inputs[sub], *self.layout.global_topics]
        }
        if self.cutoff is not None:
            for sub in sorted(subs):
                for topic in self.layout.inputs[sub]:
                    starts: dict[int, int] = {}
                    for task in tasks:
                        if task.subtopology == sub:
                            offset = committed.get(task, TaskCheckpoint()).offset(topic)
                            starts[task.partition] = min(offset, starts.get(task.partition, offset))
                    ends[topic] = self.cutoff.ends(topic, ends[topic], starts)
        return ends, self._global_starts(tasks)

    def _global_starts(self, tasks: list[TaskId]) -> dict[TaskId, dict[str, int]]:
        """Per task, the next offset of each global topic partition its local store holds
        (none for a store that does not exist yet)."""
        starts: dict[TaskId, dict[str, int]] = {}
        if not self.layout.global_topics:
            return starts
        for task in tasks:
            if not TaskDir(self.state_dir, self.app.name, task).exists():
                continue
            store = TaskDir(self.state_dir, self.app.name, task).open(self.isolation)
            try:
                starts[task] = {
                    global_key(tp.topic, tp.partition): offset
                    for tp, offset in store.committed_offsets().items()
                    if tp.topic in self.layout.global_topics
                }
            finally:
                store.close()
        return starts

    def _read(self, plans: list[TaskPlan]) -> DataFrame:
        frames = []
        for sub, topics in self.layout.inputs.items():
            of_sub = [p for p in plans if p.task.subtopology == sub]
            for index, topic in enumerate(topics):
                ranges = {p.task.partition: p.ranges[topic] for p in of_sub if topic in p.ranges}
                if not ranges:
                    continue
                # Unordered: each task orders its records by offset (process._in_order).
                df = spark_topics.read_range(
                    self.spark(), self.layout.topic(topic), ranges, ordered=False
                )
                frames.append(
                    df.select(
                        F.lit(sub).cast("int").alias("sub"),
                        F.col("partition").alias("task"),
                        F.lit(index).cast("int").alias("input_index"),
                        F.lit(topic).alias("topic"),
                        *INPUT_COLUMNS[4:],
                    )
                )
        frames += self._read_global(plans)
        df = frames[0]
        for other in frames[1:]:
            df = df.unionByName(other)
        return df

    def _read_global(self, plans: list[TaskPlan]) -> list[DataFrame]:
        """The global topics' records each task reads: one read per global topic and set of
        ranges (tasks usually share theirs), its rows copied to each task reading them."""
        frames = []
        for topic in self.layout.global_topics:
            readers: dict[tuple, list[TaskId]] = {}
            for plan in plans:
                ranges = plan.global_ranges(topic)
                if ranges:
                    readers.setdefault(tuple(sorted(ranges.items())), []).append(plan.task)
            for ranges_key, tasks in readers.items():
                df = spark_topics.read_range(
                    self.spark(), self.layout.topic(topic), dict(ranges_key), ordered=False
                )
                task_structs = [
                    F.struct(F.lit(t.subtopology).alias("sub"), F.lit(t.partition).alias("task"))
                    for t in tasks
                ]
                frames.append(
                    df.withColumn("reader", F.explode(F.array(*task_structs))).select(
                        F.col("reader.sub").cast("int").alias("sub"),
                        F.col("reader.task").cast("int").alias("task"),
                        F.lit(GLOBAL_INPUT).cast("int").alias("input_index"),
                        F.lit(topic).alias("topic"),
                        *INPUT_COLUMNS[4:],
                    )
                )
        return frames

    def _run_batch(
        self, plans: list[TaskPlan], committed: dict[TaskId, TaskCheckpoint], replayed: set[TaskId]
    ) -> list[TaskResult]:
        started = time.time()
        ctx = BatchContext(
            self.app_path,
            self.app.name,
            {str(p.task): p.batch_id for p in plans},
            self.state_dir,
            self.isolation,
            dict(self.layout.outputs),
            {str(p.task): {topic: r[0] for topic, r in p.ranges.items()} for p in plans},
            {str(p.task): p.run_id or self.run_id for p in plans},
        )
        try:
            if self.in_process:
                rows = inprocess.run_batch(self.layout, plans, ctx, store_kinds(self.app))
            else:
                rows = self._process_in_spark(plans, ctx)
        except Exception as exc:
            raise StreamsException(
                f"app {self.app.name}: batch of tasks "
                f"{', '.join(str(p.task) for p in plans)} failed and committed nothing: "
                f"{message_of(exc)}"
            ) from exc  # the whole trace goes to the log file
        results = self._results(plans, committed, rows)
        fresh = [p.task for p in plans if p.task not in replayed]
        fences = None if self.fences is None else self.fences(fresh)
        commit_batch(
            self.layout,
            self.run_id,
            results,
            rows,
            replayed,
            self.state_dir,
            self.isolation,
            fences,
        )
        figures = _figures(results, replayed, 0.0, self.dead_letter_topic)
        dead = figures["dead_letters"]
        self.say(
            "batch "
            + ", ".join(f"{r.task}:{r.batch_id}" for r in results)
            + f": {figures['records']} records, {figures['output_records']} output records, "
            + (f"{dead} skipped to dead-letter topic {self.dead_letter_topic}, " if dead else "")
            + f"{time.time() - started:.1f}s"
        )
        return results

    def _process_in_spark(self, plans: list[TaskPlan], ctx: BatchContext) -> pa.Table:
        """Step 1 in Spark's Python workers: the processing output, collected as Arrow."""
        # One Spark partition per task, so that tasks run in parallel (grouping by task
        # would hash tasks into shared partitions that AQE may coalesce further).
        keys = sorted((p.task.subtopology, p.task.partition) for p in plans)
        frame = (
            self._read(plans)
            .repartition(len(keys), route_column(keys))
            .mapInArrow(_partition_function(ctx), out_schema(store_kinds(self.app)))
        )
        return frame.toArrow()

    def _results(
        self, plans: list[TaskPlan], committed: dict[TaskId, TaskCheckpoint], rows: pa.Table
    ) -> list[TaskResult]:
        infos = rows.filter(pc.equal(rows.column("kind"), "task"))
        by_task = {
            TaskId(s, p): json.loads(i)
            for s, p, i in zip(
                infos.column("sub").to_pylist(),
                infos.column("task").to_pylist(),
                infos.column("info").to_pylist(),
                strict=True,
            )
        }
        results = []
        for plan in plans:
            info = by_task[plan.task]
            reached = info["reached"]
            before = committed.get(plan.task, TaskCheckpoint())
            offsets = dict(before.offsets)
            offsets.update(reached)
            results.append(
                TaskResult(
                    plan.task,
                    plan.batch_id,
                    {t: (plan.ranges[t][0], end) for t, end in reached.items()},
                    offsets,
                    info["stream_time"],
                    info["processed"],
                    # The totals since the task's first batch: a replay starts from the
                    # same previous row, so it gets the totals it recorded.
                    accumulate(before.metrics, info["metrics"]),
                    {
                        topic: {int(p): n for p, n in per.items()}
                        for topic, per in info["output_partitions"].items()
                    },
                    tuple(info["stores"]),
                    info["processor_metadata"],
                )
            )
        return results


def _from_global_starts(
    plan: TaskPlan, starts: dict[str, int], global_topics: tuple[str, ...]
) -> TaskPlan:
    """A replayed plan reading its global topics from where the task's local store stands
    (a restored store: from 0) up to the recorded ends: its global stores then hold what
    they held in the recorded batch, so the batch gives the same rows."""
    ranges = {}
    for key, (start, end) in plan.ranges.items():
        if split_global_key(key, global_topics):
            start = starts.get(key, 0)
        if end > start:
            ranges[key] = (start, end)
    return TaskPlan(plan.task, plan.batch_id, ranges, plan.run_id)


def _figures(
    results: list[TaskResult], replayed: set[TaskId], seconds: float, dead_letter_topic: str | None
) -> dict[str, Any]:
    """One batch's figures, as ``RunResult.figures`` and ``lakestate run --json`` give them:
    the records skipped to the dead-letter topic are counted apart from the output."""
    out = dead = 0
    for r in results:
        for topic, per in r.outputs.items():
            n = sum(per.values())
            if topic == dead_letter_topic:
                dead += n
            else:
                out += n
    return {
        "tasks": {str(r.task): r.batch_id for r in results},
        "records": sum(r.records for r in results),
        "output_records": out,
        "dead_letters": dead,
        "replayed": sorted(str(t) for t in replayed),
        "seconds": round(seconds, 3),
    }


def _partition_function(ctx: BatchContext):
    """The function for mapInArrow (a plain function: Spark inspects it)."""

    def process(batches):
        return process_partition(batches, ctx)

    return process


__all__ = ["RunResult", "Runner", "SparkStarter", "new_run_id"]
