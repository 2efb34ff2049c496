"""Tasks kept on the executor that holds their state, from batch to batch (when Spark's
executors own the stores; docs/architecture.md, "State on Spark's executors").

A Spark task placed where Spark likes (after the shuffle that routes each task's rows,
a reduce task goes wherever a core is free) finds its store elsewhere and catches up or
restores. PySpark exposes no preferred locations, but the JVM's
``SparkContext.makeRDD(Seq[(T, Seq[String])])`` gives each partition its own, and an
executor-level location (``executor_<host>_<id>``) is what a cached block's is: the
scheduler waits up to ``spark.locality.wait`` (3 s by default) for that executor before
it runs the task elsewhere. So a batch is one partition per task, each preferring the
executor ``Placements`` plans for it (where it ran last, read from Spark's status store
after each batch, while that executor is live and under its share of the tasks), and each task reads its own input where it runs (``inprocess.read_inputs``: its
topics' readers, delta-rs on the files and ranges of its partitions) instead of Spark's
scan and shuffle. The output stays on the executors, persisted, for the file writes
(``spark_kept``), which run where the cached blocks are.
"""

from __future__ import annotations

import dataclasses
import logging
import pickle
import time
from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc
from lakestate.checkpoint import faults
from lakestate.io.kafka.cluster import KafkaCluster
from lakestate.runtime.inprocess import BatchReads, read_inputs
from lakestate.runtime.task_executor import BatchContext, loaded_app, process_task
from lakestate.runtime.transport import BatchInput
from lakestate.task_id import TaskId
from pyspark import SparkContext
from pyspark.rdd import RDD
from pyspark.serializers import CPickleSerializer

_log = logging.getLogger("lakestate.spark")

#: How long the driver waits for Spark's status store to list a finished job's tasks
#: (its listener runs behind the job's end).
_STATUS_WAIT_S = 5.0


class Placements:
    """Where each task ran last in this Spark application: its executor's location
    (``executor_<host>_<executor id>``); executor ids are the application's, so a new run
    starts without any, and each batch's plan (``plan``) spreads its tasks over the live
    executors, keeping each where it ran last as long as that executor holds no more than
    its share."""

    def __init__(self) -> None:
        self.where: dict[TaskId, str] = {}
        self.moved = 0  # tasks that ran elsewhere than their last executor, this run

    def plan(self, tasks: Sequence[TaskId], live: dict[str, int]) -> dict[TaskId, str]:
        """Each task's executor for a batch, over ``live`` (location -> cores; none: each
        task where it ran last, if anywhere). Balanced and sticky, as Kafka's assignor:
        every core gets ``len(tasks) // cores`` tasks or one more; as many tasks as that
        allows stay on the executor they ran on last, the others (new, their executor gone
        or full) go to the cores with the fewest. Without the balance, a run whose first
        batch started while one executor had registered kept every task on that one."""
        if not live:
            return {t: self.where[t] for t in tasks if t in self.where}
        cores = [(e, i) for e in sorted(live) for i in range(live[e])]
        base, extra = divmod(len(tasks), len(cores))
        held = dict.fromkeys(cores, 0)
        chosen: dict[TaskId, str] = {}

        def place(task: TaskId, candidates: list[tuple[str, int]], extras: bool = True) -> None:
            nonlocal extra
            below = [c for c in candidates if held[c] < base]
            spare = [c for c in candidates if held[c] == base] if extras and extra else []
            for core in below[:1] or spare[:1]:
                if held[core] == base:
                    extra -= 1
                held[core] += 1
                chosen[task] = core[0]

        # Where they ran last, while that executor has room: first within every core's
        # share, then in the one-more slots (an early task taking a slot above the share
        # while another core of its executor is below it would crowd out a later one).
        for extras in (False, True):
            for task in tasks:
                if task not in chosen and self.where.get(task) in live:
                    place(task, [c for c in cores if c[0] == self.where[task]], extras)
        for task in tasks:
            if task not in chosen:
                fewest = min(held.values())
                place(task, [c for c in cores if held[c] == fewest])
                if self.where.get(task) in live:  # it leaves a warm store: say so
                    _log.info(
                        "moves task %s from %s to %s (%d tasks over %d cores)",
                        task,
                        self.where[task],
                        chosen[task],
                        len(tasks),
                        len(cores),
                    )
        return chosen

    def learn(self, sc: SparkContext, group: str, tasks: Sequence[TaskId]) -> None:
        """Read where the job group ``group``'s tasks (partition j: ``tasks[j]``) ran."""
        ran = _ran_on(sc, group, len(tasks))
        for index, location in ran.items():
            task = tasks[index]
            if self.where.get(task) not in (None, location):
                self.moved += 1
            self.where[task] = location


def live_executors(sc: SparkContext) -> dict[str, int]:
    """The application's executors now (not the driver), as locations -> their cores, from
    Spark's status store (an executor that registered a moment ago may not be listed)."""
    listed = sc._jsc.sc().statusStore().executorList(True)
    live = {}
    for i in range(listed.size()):
        e = listed.apply(i)
        if e.id() != "driver":
            live[f"executor_{e.hostPort().rsplit(':', 1)[0]}_{e.id()}"] = max(1, e.totalCores())
    return live


def _ran_on(sc: SparkContext, group: str, count: int) -> dict[int, str]:
    """Partition index -> the location of the executor whose attempt succeeded, for the
    jobs of ``group`` (empty where the status store has not listed them in time)."""
    store, tracker = sc._jsc.sc().statusStore(), sc.statusTracker()
    deadline = time.monotonic() + _STATUS_WAIT_S
    found: dict[int, str] = {}
    while True:
        for job in tracker.getJobIdsForGroup(group):
            info = tracker.getJobInfo(job)
            for stage in info.stageIds if info else ():
                listed = store.taskList(stage, 0, 100_000)
                for i in range(listed.size()):
                    t = listed.apply(i)
                    if t.status() == "SUCCESS":
                        found[t.index()] = f"executor_{t.host()}_{t.executorId()}"
        if len(found) >= count or time.monotonic() > deadline:
            return found
        time.sleep(0.1)


def located_tasks(sc: SparkContext, tasks: Sequence[TaskId], placements: Placements) -> RDD:
    """One partition per task (partition j: ``tasks[j]``), each preferring the executor
    ``placements`` plans for it."""
    jvm = _JvmHandles.of(sc)
    planned = placements.plan(tasks, live_executors(sc))
    pairs = jvm.array_list()
    for task in tasks:
        where = [planned[task]] if task in planned else []
        pairs.add(jvm.tuple2(bytearray(pickle.dumps(task)), jvm.seq_of(where)))
    rdd = sc._jsc.sc().makeRDD(jvm.as_scala(pairs).toSeq(), jvm.bytes_tag)
    return RDD(jvm.java_rdd(rdd, jvm.bytes_tag), sc, CPickleSerializer())


class _JvmHandles:
    """The JVM classes ``located_tasks`` calls, looked up once per JVM, and the Scala
    ``Seq`` of each list of locations made once: every name py4j resolves and every
    object it makes is a round trip to the JVM (a batch of two tasks took 80-90 ms to
    make, at load 11-15, with them looked up and made afresh)."""

    _found: tuple[object, _JvmHandles] | None = None

    def __init__(self, jvm) -> None:
        self.as_scala = jvm.scala.jdk.javaapi.CollectionConverters.asScala
        self.array_list = jvm.java.util.ArrayList
        self.tuple2 = jvm.scala.Tuple2
        self.bytes_tag = jvm.scala.reflect.ClassTag.apply(jvm.java.lang.Class.forName("[B"))
        self.java_rdd = jvm.org.apache.spark.api.java.JavaRDD
        self._seqs: dict[tuple[str, ...], object] = {}

    @classmethod
    def of(cls, sc: SparkContext) -> _JvmHandles:
        if cls._found is None or cls._found[0] is not sc._jvm:
            cls._found = (sc._jvm, cls(sc._jvm))
        return cls._found[1]

    def seq_of(self, locations: list[str]) -> object:
        """``locations`` as a Scala ``Seq[String]`` (made once per distinct list)."""
        key = tuple(locations)
        found = self._seqs.get(key)
        if found is None:
            where = self.array_list()
            for location in key:
                where.add(location)
            found = self._seqs[key] = self.as_scala(where).toSeq()
        return found


def processed(sc: SparkContext, batch: BatchInput, placements: Placements, group: str) -> RDD:
    """The batch's tasks processed where their stores are, their output tables (one per
    task) left in the returned RDD (not computed yet)."""
    tasks = sorted(p.task for p in batch.plans if p.records)
    sc.setJobGroup(group, "lakestate batch", interruptOnCancel=False)
    return located_tasks(sc, tasks, placements).mapPartitions(_task_function(batch))


def _task_function(batch: BatchInput):
    """The function each partition runs: its task's input read here, then processed."""
    reads, ctx = batch.reads, batch.ctx

    def run(tasks):
        faults.kill_executor(min(ctx.batches.values()))  # tests only: see faults.py
        for task in tasks:
            records = read_inputs(reads, task, BatchReads(_layout(ctx)))
            if records.num_rows:
                yield process_task(records, ctx)

    return run


def _layout(ctx: BatchContext):
    """The app's layout in an executor: the App loaded here, and its Kafka cluster (a
    Kafka input is read by the executor's own consumer, as the driver's would)."""
    assert ctx.executor_stores is not None
    app = loaded_app(ctx.app_path)
    cluster = KafkaCluster.from_config(app.config)
    return dataclasses.replace(ctx.executor_stores.layout_facts, app=app, cluster=cluster)


def on_driver(rdd: RDD, kept: frozenset[str]) -> pa.Table | None:
    """The rows the driver takes: the tasks' outcome rows and the rows of the topics not
    ``kept`` (Kafka sinks)."""
    wanted = sorted(kept)

    def select(table: pa.Table) -> pa.Table:
        kind = table.column("kind")
        elsewhere = pc.is_in(table.column("topic"), value_set=pa.array(wanted, pa.string()))
        keep = pc.or_(pc.equal(kind, "task"), pc.and_(pc.equal(kind, "out"), pc.invert(elsewhere)))
        return table.filter(keep)

    tables = rdd.map(select).collect()
    return pa.concat_tables(tables) if tables else None


__all__ = ["Placements", "live_executors", "located_tasks", "on_driver", "processed"]
