"""The micro-batch runtime: plan, read, process, commit, recover (DESIGN.md, "Execution").

One batch: (1) plan the offset ranges per task and record the plan; (2) read them from the
log tables; (3) process every task's records in Spark, in parallel across tasks, each task
staging its transaction beside its local store; (4) commit: every output topic and state
table gets one idempotent Delta commit tagged with the batch, then the batch's commit row
(offsets, stream times, state versions) goes to the batch log, and only then do the local
stores commit. A crash at any point is repaired by the next run: a planned batch without a
commit row is replayed with the same plan, Delta skips the writes it already holds, and
recovery brings each local store to the committed batch.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import os
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from lakestate.app import App, load_app
from lakestate.engine import batches, faults, local, sinks, state_tables
from lakestate.engine.batches import CommitRecord
from lakestate.engine.layout import AppLayout, prepare
from lakestate.engine.layout import end_offsets as layout_end_offsets
from lakestate.engine.plan import BatchPlan, plan_batch
from lakestate.engine.process import (
    INPUT_COLUMNS,
    BatchContext,
    out_schema,
    process_partition,
    store_kinds,
)
from lakestate.engine.recovery import recover
from lakestate.engine.routing import route_column
from lakestate.errors import StreamsException
from lakestate.io import logtable
from lakestate.state.base import isolation_for
from lakestate.state.constants import (
    DEFAULT_UNCOMMITTED_MAX_RECORDS,
    UNCOMMITTED_MAX_RECORDS,
)
from lakestate.warehouse import Warehouse

STATE_DIR_ENV = "LAKESTATE_STATE_DIR"
# Delta commits of one batch (sinks, state tables) that run at once.
COMMIT_THREADS = 4
DEFAULT_STATE_DIR = "state"


@dataclass
class RunResult:
    batches: list[int] = field(default_factory=list)
    records: int = 0
    caught_up: bool = False


def state_dir_of(state_dir: str | None) -> str:
    return str(Path(state_dir or os.environ.get(STATE_DIR_ENV) or DEFAULT_STATE_DIR).resolve())


@contextlib.contextmanager
def instance_lock(state_dir: str, app: str) -> Iterator[None]:
    """One run of an app per instance: its local stores are not shared."""
    path = Path(state_dir) / app / ".lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise StreamsException(
                f"app {app} is already running on this instance (lock {path} is held); "
                "this run stops without processing or committing anything"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        yield
    finally:
        os.close(fd)


def run_app(
    app_path: str,
    *,
    warehouse: str | None = None,
    state_dir: str | None = None,
    max_batches: int | None = None,
    max_records: int | None = None,
    until_caught_up: bool = False,
    master: str | None = None,
    say: Callable[[str], None] = print,
) -> RunResult:
    """Run micro-batches of the app in ``app_path``: one by default, up to ``max_batches``,
    or until no input is left (``until_caught_up``)."""
    app = load_app(app_path)
    if app.topology.global_tables:
        raise StreamsException(
            f"app {app.name}: global tables are not supported by the Spark engine yet"
        )
    wh = Warehouse(warehouse)
    sdir = state_dir_of(state_dir)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from lakestate.engine.spark import get_spark

    with instance_lock(sdir, app.name):
        spark = get_spark(master, app_name=f"lakestate-{app.name}")
        runner = _Runner(spark, app, os.path.abspath(app_path), wh, sdir, max_records, say)
        limit = max_batches if max_batches is not None else (None if until_caught_up else 1)
        return runner.run(limit)


class _Runner:
    def __init__(
        self,
        spark: SparkSession,
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
        self.run_id = f"{os.uname().nodename}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.layout: AppLayout = prepare(spark, app, wh)
        self.wh = wh

    def run(self, limit: int | None) -> RunResult:
        result = RunResult()
        log = batches.read_log(self.spark, self.layout.batches_path)
        recover(self.spark, self.layout, log, self.state_dir, self.isolation, self.say)
        while limit is None or len(result.batches) < limit:
            if log.pending_plan is not None:
                plan = log.pending_plan
                self.say(f"batch {plan.batch_id}: replaying the plan of run {log.pending_run_id}")
            else:
                plan = self._plan(log)
                if plan.records == 0:
                    result.caught_up = True
                    self.say(f"caught up at batch {log.committed_batch}: no new input")
                    break
                batches.write_plan(self.spark, self.layout.batches_path, plan, self.run_id)
                faults.maybe_fail("after_plan", plan.batch_id)
            commit = self._run_batch(plan, log)
            # This run holds the instance lock and owns the batch (write_plan checked), so
            # the log's next state is known without reading it back.
            log = batches.BatchLog(commit, None, None)
            processed = commit.stats["records"]
            result.batches.append(plan.batch_id)
            result.records += processed
        return result

    def _plan(self, log) -> BatchPlan:
        ends = {
            topic: layout_end_offsets(self.spark, self.layout, topic)
            for topics in self.layout.inputs.values()
            for topic in topics
        }
        return plan_batch(
            log.committed_batch + 1,
            self.layout.inputs,
            self.layout.task_counts,
            log.committed_offsets,
            ends,
            self.max_records,
        )

    def _read(self, plan: BatchPlan) -> DataFrame:
        frames = []
        for sub, topics in self.layout.inputs.items():
            tasks = [t for t in plan.tasks if t.subtopology == sub]
            for index, topic in enumerate(topics):
                ranges = {t.partition: t.ranges[topic] for t in tasks if topic in t.ranges}
                if not ranges:
                    continue
                # Unordered: each task orders its records by offset (process._in_order).
                df = logtable.read_range(self.spark, self.wh, topic, ranges, ordered=False)
                frames.append(
                    df.select(
                        F.lit(sub).cast("int").alias("sub"),
                        F.col("partition").alias("task"),
                        F.lit(index).cast("int").alias("input_index"),
                        F.lit(topic).alias("topic"),
                        *INPUT_COLUMNS[4:],
                    )
                )
        df = frames[0]
        for other in frames[1:]:
            df = df.unionByName(other)
        return df

    def _run_batch(self, plan: BatchPlan, log) -> CommitRecord:
        started = time.time()
        starts = {t.task_id: {topic: r[0] for topic, r in t.ranges.items()} for t in plan.tasks}
        ctx = BatchContext(
            self.app_path,
            self.app.name,
            plan.batch_id,
            self.state_dir,
            self.isolation,
            dict(self.layout.outputs),
            starts,
        )
        # One Spark partition per task, so that tasks run in parallel (grouping by task
        # would hash tasks into shared partitions that AQE may coalesce further).
        tasks = sorted({(t.subtopology, t.partition) for t in plan.tasks})
        result = (
            self._read(plan)
            .repartition(len(tasks), route_column(tasks))
            .mapInArrow(_partition_function(ctx), out_schema(store_kinds(self.app)))
            .persist(StorageLevel.MEMORY_AND_DISK)
        )
        try:
            try:
                task_rows = (
                    result.where(F.col("kind") == "task").select("sub", "task", "info").collect()
                )
            except Exception as exc:
                raise StreamsException(
                    f"app {self.app.name} batch {plan.batch_id} failed and committed nothing: "
                    f"{_python_error(exc)}"
                ) from None
            commit = self._commit(plan, log, result, task_rows, started)
        finally:
            result.unpersist()
        self.say(
            f"batch {plan.batch_id}: {commit.stats['records']} records, "
            f"{commit.stats['outputs']} output records, {commit.stats['seconds']:.1f}s"
        )
        return commit

    def _commit(self, plan: BatchPlan, log, result: DataFrame, task_rows, started) -> CommitRecord:
        import json

        batch_id = plan.batch_id
        infos = {(r["sub"], r["task"]): json.loads(r["info"]) for r in task_rows}
        outputs = result.where(F.col("kind") == "out")
        per_topic: dict[str, dict[tuple[int, int], dict[int, int]]] = {}
        for task_key, info in infos.items():
            for topic, per_partition in info["output_partitions"].items():
                per_topic.setdefault(topic, {})[task_key] = {
                    int(p): n for p, n in per_partition.items()
                }
        n_out = sum(sum(info["outputs"].values()) for info in infos.values())
        # Every table's commit is independent of the others (each carries the batch's txn
        # and is skipped on replay), so they run at once: most of a Delta commit's time is
        # planning and log work in the driver. The batch is committed only once all are.
        writes: list[tuple[str, Callable[[], None] | None]] = []
        for topic in sorted(self.layout.outputs):
            append = None
            if per_topic.get(topic):
                append = functools.partial(
                    sinks.append_output,
                    self.spark,
                    self.layout,
                    topic,
                    outputs.where(F.col("topic") == topic),
                    per_topic[topic],
                    self.app.name,
                    batch_id,
                )
            writes.append((f"after_sink:{topic}", append))
        state_rows = result.where(F.col("kind") == "state")
        for sub in sorted(self.layout.inputs):
            tasks = [p for (s, p) in infos if s == sub]
            if not tasks:
                continue
            for store in self.layout.stores_of(sub):
                write = functools.partial(
                    state_tables.write_changes,
                    self.spark,
                    self.layout.state_path(store),
                    self.app.topology.stores[store].kind,
                    state_rows.where((F.col("store") == store) & (F.col("sub") == sub)),
                    batch_id,
                    tasks,
                    self.app.name,
                    state_tables.write_mode(
                        infos[(sub, t)]["state_writes"].get(store) for t in tasks
                    ),
                )
                writes.append((f"after_state:{store}", write))
        _run_all(writes, batch_id)
        versions = {
            store: state_tables.table_version(self.spark, self.wh, self.layout.state_path(store))
            for sub in sorted(self.layout.inputs)
            for store in self.layout.stores_of(sub)
        }
        offsets = {t: dict(p) for t, p in log.committed_offsets.items()}
        stream_times = dict(log.last_commit.stream_times) if log.last_commit else {}
        records = 0
        for (sub, partition), info in infos.items():
            for topic, reached in info["reached"].items():
                offsets.setdefault(topic, {})[partition] = reached
            stream_times[f"{sub}_{partition}"] = info["stream_time"]
            records += info["processed"]
        commit = CommitRecord(
            batch_id,
            self.run_id,
            int(time.time() * 1000),
            offsets,
            stream_times,
            versions,
            {
                "records": records,
                "outputs": n_out,
                "inputs": {t: sub for sub, ts in self.layout.inputs.items() for t in ts},
                "seconds": round(time.time() - started, 3),
                "tasks": {f"{s}_{p}": i["metrics"] for (s, p), i in infos.items()},
            },
        )
        batches.write_commit(self.spark, self.layout.batches_path, commit)
        faults.maybe_fail("after_batch_commit", batch_id)  # = before the local commit
        for index, (sub, partition) in enumerate(sorted(infos)):
            task_id = f"{sub}_{partition}"
            store = local.open_task_store(self.state_dir, self.app.name, task_id, self.isolation)
            try:
                local.apply_staged(store, self.state_dir, self.app.name, task_id, batch_id)
            finally:
                store.close()
            if index == 0:
                faults.maybe_fail("mid_local_commit", batch_id)
        return commit


def _run_all(writes: list[tuple[str, Callable[[], None] | None]], batch_id: int) -> None:
    """Run the Delta writes of a batch concurrently, each followed by its fault point; wait
    for all, then raise the first failure (a batch with a failed write is not committed:
    the next run replays it, and tables that hold it skip it)."""

    def run(point: str, write: Callable[[], None] | None) -> None:
        if write is not None:
            write()
        faults.maybe_fail(point, batch_id)

    with ThreadPoolExecutor(max_workers=COMMIT_THREADS, thread_name_prefix="commit") as pool:
        futures = [pool.submit(run, point, write) for point, write in writes]
    for future in futures:
        future.result()


def _partition_function(ctx: BatchContext):
    """The function for mapInArrow (a plain function: Spark inspects it)."""

    def process(batches):
        return process_partition(batches, ctx)

    return process


def _python_error(exc: Exception) -> str:
    """The last line of a Python worker's traceback, which names what went wrong."""
    text = str(exc)
    for marker in ("ProcessingException: ", "SerializationException: ", "StreamsException: "):
        if marker in text:
            return text.split(marker, 1)[1].split("\n", 1)[0]
    return text.strip().splitlines()[-1] if text.strip() else repr(exc)


__all__ = ["RunResult", "load_app", "run_app"]
