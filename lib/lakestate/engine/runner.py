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
import fcntl
import json
import logging
import math
import os
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from lakestate import console
from lakestate.app import App, load_app
from lakestate.engine import inprocess, instance_run, local
from lakestate.engine.commit import TaskResult, commit_batch
from lakestate.engine.cutoff import Cutoff, format_timestamp
from lakestate.engine.failure import message_of
from lakestate.engine.instances import Instance, instance_of
from lakestate.engine.layout import AppLayout, prepare
from lakestate.engine.layout import end_offsets as layout_end_offsets
from lakestate.engine.local import state_dir_of
from lakestate.engine.plan import Committed, TaskPlan, global_key, plan_tasks, split_global_key
from lakestate.engine.process import (
    GLOBAL_INPUT,
    INPUT_COLUMNS,
    BatchContext,
    out_schema,
    process_partition,
    store_kinds,
)
from lakestate.engine.recovery import recover, where_tasks_stand
from lakestate.engine.routing import route_column
from lakestate.errors import StreamsException, TaskMigratedException
from lakestate.io import logtable
from lakestate.processors.metrics import accumulate
from lakestate.state.base import isolation_for
from lakestate.state.constants import (
    DEFAULT_UNCOMMITTED_MAX_RECORDS,
    UNCOMMITTED_MAX_RECORDS,
)
from lakestate.task_id import TaskId
from lakestate.warehouse import Warehouse

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
    warmup and standby tasks it brought to their committed batch, with the lag each had."""

    batches: list[dict[str, int]] = field(default_factory=list)
    records: int = 0
    caught_up: bool = False
    busy: bool = False
    transport: str | None = None
    figures: list[dict[str, Any]] = field(default_factory=list)
    instance: str | None = None
    warmed: dict[str, int] = field(default_factory=dict)


#: How often a run waiting for another run of its app checks the lock.
LOCK_POLL_S = 0.2


@contextlib.contextmanager
def instance_lock(
    state_dir: str, app: str, wait_s: float = 0.0, say: Callable[[str], None] = print
) -> Iterator[bool]:
    """One run of an app per instance: its local stores are not shared. A run that finds
    the lock held waits for it, polling, up to ``wait_s`` seconds (``math.inf``: as long as
    it takes); it yields True once it holds the lock, False when the other run still holds
    it after the wait (the caller then does nothing)."""
    path = Path(state_dir) / app / ".lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        started = time.monotonic()
        said = False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                waited = time.monotonic() - started
                if waited >= wait_s:
                    say(
                        f"app {app} is still running on this instance{_holder(path)} after "
                        f"{waited:.0f}s of waiting (lock {path}): this run did nothing; the "
                        "running one processes what is new"
                    )
                    yield False
                    return
                if not said:
                    bound = "as long as it takes" if math.isinf(wait_s) else f"up to {wait_s:g}s"
                    say(
                        f"app {app} is running on this instance{_holder(path)}: waiting "
                        f"{bound} for it to finish (lock {path})"
                    )
                    said = True
                time.sleep(min(LOCK_POLL_S, max(0.0, wait_s - waited)))
        if said:
            say(f"the other run of app {app} finished after {time.monotonic() - started:.1f}s")
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        yield True
    finally:
        os.close(fd)


def _holder(path: Path) -> str:
    """`` (pid N)``: the process holding the lock, as it wrote it (empty if unknown)."""
    with contextlib.suppress(OSError, ValueError):
        return f" (pid {int(path.read_text().strip())})"
    return ""


def run_app(
    app_path: str,
    *,
    warehouse: str | None = None,
    state_dir: str | None = None,
    max_batches: int | None = None,
    max_records: int | None = None,
    until_caught_up: bool = False,
    time_budget_s: float | None = None,
    tasks: list[TaskId] | list[str] | None = None,
    master: str | None = None,
    inprocess_max_records: int | None = None,
    lock_wait_s: float | None = None,
    until_timestamp: int | None = None,
    say: Callable[[str], None] = print,
    instance: str | None = None,
) -> RunResult:
    """Run micro-batches of the app in ``app_path``: one by default, up to ``max_batches``,
    or until no input is left (``until_caught_up``); no new batch starts once
    ``time_budget_s`` has passed since the call (waiting for the lock included; a run
    that gets the lock always does its first batch). ``tasks``: the tasks this run owns
    (default: all); runs of disjoint task sets may run side by side, each with its own
    state directory. ``inprocess_max_records``: overrides the app's
    ``lakestate.inprocess.max.records`` (a run with at most that many pending records runs
    without Spark; 0: always Spark).

    Another run of the app on this instance (its lock held): this run waits for it up to
    ``lock_wait_s`` seconds (None: ``time_budget_s``, else no wait; ``math.inf``: as long
    as it takes), then processes what is new; if the other run still holds the lock, this
    one returns ``RunResult(busy=True)`` having done nothing: never an error.

    ``until_timestamp`` (epoch ms, exclusive): process each input partition, in offset
    order, up to its first record stamped at or after it (``engine/cutoff.py``), until
    caught up to that cut unless ``max_batches`` says otherwise: what a backfill of an
    interval ending there processes.

    ``instance``: the app's instance this run is (``engine/instances.py``; None: the first
    configured, or the implicit ``default``). Its state dir (an explicit ``state_dir``
    wins) and Spark master (an explicit ``master`` wins); it processes the tasks it owns
    in force (``tasks`` restricts them further), then brings its warmup and standby tasks
    up to date and reports its stores' lags (``engine/instance_run.py``). A rebalance that
    moves one of its tasks before a batch's progress commit stops the run with
    TaskMigratedException, nothing of the batch committed."""
    started = time.monotonic()
    app = load_app(app_path)
    wh = Warehouse(warehouse)
    member = instance_of(app, instance)
    sdir = member.state_dir if state_dir is None else state_dir_of(state_dir)
    master = member.master if master is None else master
    scaled = instance_run.scaled_out(app, wh)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    if lock_wait_s is None:
        lock_wait_s = time_budget_s or 0.0
    if until_timestamp is not None and max_batches is None:
        until_caught_up = True

    with instance_lock(sdir, app.name, lock_wait_s, say) as held:
        if not held:
            if scaled:
                _report_busy(app, wh, member, tasks, sdir)
            return RunResult(busy=True, instance=member.name)
        spark = SparkStarter(master, f"lakestate-{app.name}")
        try:
            runner = _Runner(spark, app, os.path.abspath(app_path), wh, sdir, max_records, say)
            if inprocess_max_records is not None:
                runner.inprocess_max_records = inprocess.max_records(
                    {inprocess.MAX_RECORDS_CONFIG: inprocess_max_records}
                )
            if until_timestamp is not None:
                runner.cutoff = Cutoff(wh, until_timestamp)
            roles = runner.roles = instance_run.roles_of(runner.layout, member, tasks)
            if scaled:
                say(instance_run.describe(roles))
            limit = max_batches if max_batches is not None else (None if until_caught_up else 1)
            deadline = None if time_budget_s is None else started + time_budget_s
            ended = False
            try:
                with console.progress(f"{app.name}: records", total=None) as bar:
                    runner.bar = bar
                    result = runner.run(roles.active, limit, deadline)
                result.instance = member.name
                if scaled:
                    warmed = instance_run.warm(runner.layout, roles, sdir, runner.isolation, say)
                    result.warmed = {str(t): lag for t, lag in warmed.items()}
                ended = True
            except TaskMigratedException as exc:
                raise instance_run.migrated(runner.layout, roles, exc) from exc
            finally:
                if scaled:
                    _report(runner, roles, ended)
            return result
        finally:
            spark.join()


def _run_id() -> str:
    """A run's id: where it ran, and a random part."""
    return f"{os.uname().nodename}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


def _report_busy(
    app: App, wh: Warehouse, member: Instance, tasks: list[TaskId] | list[str] | None, sdir: str
) -> None:
    """A busy run's lag report: what the last run that held the lock saw of the stores.
    Never an error (a busy run is not one): e.g. a rewind holding the lock leaves the app
    mid-rewind, unreadable until it ends; the report is then logged as not written."""
    try:
        layout = prepare(app, wh)
        roles = instance_run.roles_of(layout, member, tasks)
        instance_run.report(layout, roles, sdir, None, _run_id())
    except Exception:
        log.warning("the lag report of a busy run was not written", exc_info=True)


def _report(runner: _Runner, roles: instance_run.Roles, ended: bool) -> None:
    """The run's lag report, under the lock. After a run that failed, a report that fails
    too (e.g. the app is mid-rewind) is logged, not raised: the run's own error is the one
    to see."""
    try:
        instance_run.report(runner.layout, roles, runner.state_dir, runner.isolation, runner.run_id)
    except Exception:
        if ended:
            raise
        log.warning("the lag report of a failed run was not written", exc_info=True)


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
        from lakestate.engine.spark import get_spark

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
        import lakestate.engine.process  # noqa: F401

        yield from rows

    with contextlib.suppress(Exception):
        n = spark.sparkContext.defaultParallelism
        spark.sparkContext.parallelize(range(n), n).mapPartitions(touch).count()


class _Runner:
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
        self.run_id = _run_id()
        #: the instance's roles (``instance_run.roles_of``): its tasks' planned owner epochs
        self.roles: instance_run.Roles | None = None
        self.layout: AppLayout = prepare(app, wh)
        self.wh = wh
        #: ``run_app(until_timestamp=...)``: the inputs' ends are cut (``engine/cutoff.py``).
        self.cutoff: Cutoff | None = None

    def run(self, tasks: list[TaskId], limit: int | None, deadline: float | None) -> RunResult:
        result = RunResult()
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
                committed[r.task] = Committed(
                    r.batch_id, dict(r.offsets), r.stream_time, r.processor_metadata, r.metrics
                )
            result.batches.append({str(r.task): r.batch_id for r in results})
            result.records += sum(r.records for r in results)
            result.figures.append(_figures(results, replayed, time.monotonic() - batch_started))
            self.bar.advance(sum(r.records for r in results))
        return result

    def _choose_transport(
        self, tasks: list[TaskId], committed: dict[TaskId, Committed], sources: _Sources
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
        committed: dict[TaskId, Committed],
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

    def _sources(self, tasks: list[TaskId], committed: dict[TaskId, Committed]) -> _Sources:
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
                            offset = committed.get(task, Committed()).offset(topic)
                            starts[task.partition] = min(
                                offset, starts.get(task.partition, offset)
                            )
                    ends[topic] = self.cutoff.ends(topic, ends[topic], starts)
        return ends, self._global_starts(tasks)

    def _global_starts(self, tasks: list[TaskId]) -> dict[TaskId, dict[str, int]]:
        """Per task, the next offset of each global topic partition its local store holds
        (none for a store that does not exist yet)."""
        starts: dict[TaskId, dict[str, int]] = {}
        if not self.layout.global_topics:
            return starts
        for task in tasks:
            if not local.store_exists(self.state_dir, self.app.name, task):
                continue
            store = local.open_task_store(self.state_dir, self.app.name, task, self.isolation)
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
                df = logtable.read_range(self.spark(), self.wh, topic, ranges, ordered=False)
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
                df = logtable.read_range(
                    self.spark(), self.wh, topic, dict(ranges_key), ordered=False
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
        self, plans: list[TaskPlan], committed: dict[TaskId, Committed], replayed: set[TaskId]
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
        fences = None if self.roles is None else self.roles.fences(self.app.name, fresh)
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
        n_out = sum(n for r in results for per in r.outputs.values() for n in per.values())
        self.say(
            "batch "
            + ", ".join(f"{r.task}:{r.batch_id}" for r in results)
            + f": {sum(r.records for r in results)} records, {n_out} output records, "
            f"{time.time() - started:.1f}s"
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
        self, plans: list[TaskPlan], committed: dict[TaskId, Committed], rows: pa.Table
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
            before = committed.get(plan.task, Committed())
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


def _figures(results: list[TaskResult], replayed: set[TaskId], seconds: float) -> dict[str, Any]:
    """One batch's figures, as ``RunResult.figures`` and ``lakestate run --json`` give them."""
    return {
        "tasks": {str(r.task): r.batch_id for r in results},
        "records": sum(r.records for r in results),
        "output_records": sum(n for r in results for per in r.outputs.values() for n in per.values()),
        "replayed": sorted(str(t) for t in replayed),
        "seconds": round(seconds, 3),
    }


def _partition_function(ctx: BatchContext):
    """The function for mapInArrow (a plain function: Spark inspects it)."""

    def process(batches):
        return process_partition(batches, ctx)

    return process


__all__ = ["RunResult", "load_app", "run_app"]
