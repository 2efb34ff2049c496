"""Benchmark of the micro-batch engine against plain Spark, measured in one run.

Run from the repository root::

    .venv/bin/python tests/benchmarks/bench_engine.py            # N = 1,000,000 input records
    .venv/bin/python tests/benchmarks/bench_engine.py --quick    # N = 100,000, smaller state: a fast check
    .venv/bin/python tests/benchmarks/bench_engine.py --records 300000

What it measures (all on one SparkSession, ``local[2]`` by default, production confs from
``lakestate.runtime.spark_session.get_spark``), printed as a table and written to
``tests/benchmarks/results/engine.json``:

1. **Engine throughput**: the demo app (``jobs/demo.py``: events -> filter(amount > 0) ->
   group_by_key().count() -> event-counts) over N input records in 2 partitions with 10k
   keys, ``run_app(until_caught_up=True)`` with the app's default bounds (or ``--max-records``
   per task): input records per second of wall time (prepare, recovery, every batch and
   commit included).
2. **Plain Spark** on the same log table in the same run: read -> filter amount > 0
   (``get_json_object``) -> groupBy(key).count() -> Delta overwrite; its records/s and the
   ratio engine/plain (target >= 0.5). The engine's result is checked against it.
3. **State size**: per-batch seconds at the same batch size (50k records) on a state of 10k
   keys versus 1M keys (keys drawn from the 1M), ratio target <= 1.5; plus a control on
   the 1M-key state with keys drawn from 10k of them (state size alone, same number of
   changed keys as the 10k case). The three run interleaved, one batch each per round
   (``run_app(max_batches=1)``), so that they see the same load on a shared machine. Each
   batch is broken down into planning / process / progress commit / table commits (sink
   and changelog appends, concurrent) / local commit (the engine's functions are wrapped
   for timing; nothing in lib/ is changed).
4. **Memory**: peak RSS of the process tree (driver Python + JVM + Python workers), sampled
   every 100 ms, overall and per phase; and ``statestore.uncommitted.max.bytes``.
5. **Profile** of one engine batch: cProfile of the driver, cProfile of the worker function
   (``process_task``, run in this process on a copy of the task's store, on the same
   records), and Spark stage times from the event log.

Input log tables are written directly with Spark (dense offsets per partition, each key in
the partition ``lakestate.io.partitioner.partition_for`` gives it), not through
``append_records``. Everything lives in a temporary directory that is removed at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import json
import os
import platform
import pstats
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import psutil
from common import log  # tests/benchmarks/common.py (first on sys.path)

ROOT = Path(__file__).resolve().parents[2]
APP_PATH = str(ROOT / "jobs" / "demo.py")
APP_NAME = "demo"
INPUT_TOPIC = "events"
OUTPUT_TOPIC = "event-counts"
STORE = "event-counts-store"
DEFAULT_JSON = ROOT / "tests" / "benchmarks" / "results" / "engine.json"
PARTITIONS = 2
T0_MS = 1_700_000_000_000
AMOUNTS = (0, 1, 5, 10, 20)  # as in jobs/demo.py's sample_events: 1 in 5 is filtered out
POSITIVE_AMOUNTS = (1, 5, 10, 20)
# The runner's line per batch: "batch 0_0:3, 0_1:3: 50000 records, 40000 output records, 4.2s"
BATCH_LINE = re.compile(r"batch ([\d_:, ]+): (\d+) records, (\d+) output records, ([0-9.]+)s")
TARGET_RATIO_PLAIN = 0.5
TARGET_RATIO_STATE = 1.5


# -- memory --------------------------------------------------------------------------------


class MemorySampler(threading.Thread):
    """Samples the RSS of this process and all its descendants every ``interval`` seconds:
    the driver (this Python process), the JVM (spark-submit's java child) and the Python
    workers (children of the JVM's pyspark.daemon). RSS of forked workers counts shared
    pages once per process, so the sum is an upper bound."""

    def __init__(self, interval: float = 0.1) -> None:
        super().__init__(name="memory-sampler", daemon=True)
        self.interval = interval
        self.phase = "setup"
        self.peaks: dict[str, dict[str, int]] = {}
        self.samples = 0
        self._halt = threading.Event()
        self._me = psutil.Process()
        self._children: dict[int, psutil.Process] = {}
        self.other_names: set[str] = set()
        self.load: dict[str, list[float]] = {}  # phase -> 1-minute load averages seen

    def sample(self) -> dict[str, int]:
        parts = {"driver": self._me.memory_info().rss, "jvm": 0, "workers": 0, "other": 0}
        try:
            children = self._me.children(recursive=True)
        except psutil.Error:
            children = []
        for child in children:
            proc = self._children.setdefault(child.pid, child)  # keeps name() cached
            try:
                rss = proc.memory_info().rss
                name = proc.name().lower()
            except psutil.Error:
                continue
            if name == "java":
                parts["jvm"] += rss
            elif name.startswith("python"):
                parts["workers"] += rss
            else:
                parts["other"] += rss
                self.other_names.add(name)
        # "other": short-lived helpers the JVM spawns (Hadoop's local file system runs chmod,
        # readlink, getconf...); until they exec, vfork children share (and report) the JVM's
        # memory, so they are kept out of the total.
        parts["total"] = parts["driver"] + parts["jvm"] + parts["workers"]
        return parts

    def run(self) -> None:
        while not self._halt.is_set():
            try:
                s = self.sample()
            except Exception:  # a process vanished mid-sample: skip this one
                s = None
            if self.samples % 10 == 0:  # once a second
                self.load.setdefault(self.phase, []).append(os.getloadavg()[0])
            if s is not None:
                self.samples += 1
                for key in (self.phase, "all"):
                    peak = self.peaks.setdefault(key, {})
                    for part, value in s.items():
                        peak[part] = max(peak.get(part, 0), value)
                    if s["total"] >= peak.get("_at_total", 0):
                        peak["_at_total"] = s["total"]
                        peak["_split"] = {k: v for k, v in s.items() if k != "total"}
            self._halt.wait(self.interval)

    def stop(self) -> None:
        self._halt.set()
        self.join(timeout=2)

    @contextlib.contextmanager
    def in_phase(self, phase: str) -> Iterator[None]:
        previous, self.phase = self.phase, phase
        try:
            yield
        finally:
            self.phase = previous


def tree_cpu_seconds() -> float:
    """CPU seconds (user + system) used so far by this process and its descendants: the
    driver, the JVM and the Python workers (workers that exited are counted in their
    parent's children times). Less sensitive than wall time to other load on the machine."""
    me = psutil.Process()
    try:
        procs = [me, *me.children(recursive=True)]
    except psutil.Error:
        procs = [me]
    total = 0.0
    for proc in procs:
        try:
            t = proc.cpu_times()
        except psutil.Error:
            continue
        total += t.user + t.system + t.children_user + t.children_system
    return total


# -- where the engine spends a batch ---------------------------------------------------------


class PhaseTimer:
    """Wraps the engine's phase functions (module attributes the runner and the commit look
    up at call time) to time them per batch and to label their Spark jobs (job description,
    for the event log). Functions that do not exist (the engine is changing) are skipped.

    Planning a batch (``_plan``: the inputs' end offsets, no commit) happens before
    ``_run_batch`` and is not in the seconds the runner reports: it is attributed to the
    batch it plans. Once per run: ``prepare``, ``recover``, and the last ``plan`` that
    finds no input. A batch's commit (``commit_batch``) is the progress commit, then the
    table commits (``_run_all``: the sink and changelog appends, run concurrently, so
    ``sink_append`` and ``changelog_append`` overlap and may sum to more than
    ``table_commits``), then the local stores' commit (``local_apply``)."""

    PRE_BATCH = ("plan",)
    COMMIT_PARTS = ("progress_commit", "table_commits", "local_apply")
    OVERLAPPING = ("sink_append", "changelog_append")

    def __init__(self) -> None:
        self.current: dict[str, float] | None = None
        self.pending: dict[str, float] = {}
        self.batches: list[dict[str, float]] = []
        self.run_level: dict[str, float] = {}
        self.installed: list[str] = []
        self.missing: list[str] = []
        self._lock = threading.Lock()

    def install(self) -> None:
        from lakestate.checkpoint import commit, progress, task_dir
        from lakestate.runtime import runner

        targets = [
            (runner.Runner, "_run_batch", "batch"),
            (runner, "commit_batch", "commit"),
            (runner.Runner, "_plan", "plan"),
            (runner, "recover", "recover"),
            (runner, "ensure_layout", "prepare"),
            (progress, "record", "progress_commit"),
            (commit, "_run_all", "table_commits"),
            (commit, "_append_topic", "sink_append"),
            (commit, "_append_changelog", "changelog_append"),
            (task_dir.TaskDir, "apply_staged", "local_apply"),
        ]
        for owner, attr, label in targets:
            name = f"{getattr(owner, '__name__', owner)}.{attr}"
            original = getattr(owner, attr, None)
            if original is None or not callable(original):
                self.missing.append(name)
                continue
            setattr(owner, attr, self._wrap(original, label))
            self.installed.append(name)

    def _add(self, label: str, elapsed: float) -> None:
        with self._lock:
            if self.current is not None:
                self.current[label] = self.current.get(label, 0.0) + elapsed
            elif label in self.PRE_BATCH:
                self.pending[label] = self.pending.get(label, 0.0) + elapsed
            else:
                self.run_level[label] = self.run_level.get(label, 0.0) + elapsed

    def _wrap(self, fn: Callable[..., Any], label: str) -> Callable[..., Any]:
        timer = self

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            from pyspark import SparkContext

            sc = SparkContext._active_spark_context
            on_driver = threading.current_thread() is threading.main_thread()
            previous = sc.getLocalProperty("spark.job.description") if sc and on_driver else None
            if sc is not None and on_driver:
                description = "process (read + mapInArrow)" if label == "batch" else label
                sc.setLocalProperty("spark.job.description", description)
            if label == "batch":
                with timer._lock:
                    timer.current, timer.pending = timer.pending, {}
                cpu_started = tree_cpu_seconds()
            started = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                elapsed = time.perf_counter() - started
                if sc is not None and on_driver:
                    sc.setLocalProperty("spark.job.description", previous)
                if label == "batch":
                    with timer._lock:
                        record = timer.current or {}
                        record["batch"] = elapsed
                        record["cpu"] = tree_cpu_seconds() - cpu_started
                        timer.batches.append(record)
                        timer.current = None
                else:
                    timer._add(label, elapsed)

        wrapper.__wrapped__ = fn  # type: ignore[attr-defined]
        wrapper.__name__ = getattr(fn, "__name__", label)
        return wrapper

    def take(self) -> tuple[list[dict[str, float]], dict[str, float]]:
        """Batches and run-level phase times recorded since the last call."""
        for label, seconds in self.pending.items():  # the plan that found no more input
            self.run_level[f"final_{label}"] = self.run_level.get(label, 0.0) + seconds
        self.pending = {}
        out, self.batches = self.batches, []
        run, self.run_level = self.run_level, {}
        return out, run


def breakdown(batch: dict[str, float]) -> dict[str, float]:
    """One batch's seconds by phase. ``batch``: _run_batch (what the runner reports);
    ``process``: _run_batch before commit_batch (read, mapInArrow in the Python workers,
    staging, toArrow of the rows); the commit's parts (the sink and changelog appends run
    concurrently within ``table_commits``); ``plan`` before it; ``cycle``: all of it."""
    total = batch.get("batch", 0.0)
    commit = batch.get("commit", 0.0)
    out = {"plan": batch.get("plan", 0.0)}
    out["process"] = total - commit if commit else total
    parts = 0.0
    for key in PhaseTimer.COMMIT_PARTS:
        if key in batch:
            out[key] = batch[key]
            parts += batch[key]
    for key in PhaseTimer.OVERLAPPING:
        if key in batch:
            out[key] = batch[key]
    if commit:
        out["commit_other"] = max(commit - parts, 0.0)
    out["batch"] = total
    out["cycle"] = total + out["plan"]
    if "cpu" in batch:
        out["batch_cpu"] = batch["cpu"]
    return {k: round(v, 3) for k, v in out.items()}


# -- input generation -------------------------------------------------------------------------


def partitions_of(json_keys: list[str], num_partitions: int) -> np.ndarray:
    """``partition_for`` of every key (given as its canonical JSON text), vectorized."""
    from lakestate.io.partitioner import partitions_of_texts

    return np.asarray(partitions_of_texts(json_keys, num_partitions), dtype=np.int32)


def write_keymap(spark, path: str, n_keys: int) -> dict[int, int]:
    """Parquet file of (partition, idx, key): key ``"user-<i>"`` (JSON text) for i < n_keys,
    its partition, and its index among the keys of that partition. Returns keys per
    partition."""
    from lakestate.io.partitioner import partition_for

    keys = [f'"user-{i}"' for i in range(n_keys)]
    parts = partitions_of(keys, PARTITIONS)
    step = max(1, n_keys // 500)
    for i in range(0, n_keys, step):  # the vectorized hash must agree with the engine's
        expected = partition_for(json.loads(keys[i]), PARTITIONS)
        if parts[i] != expected:
            raise AssertionError(f"murmur2 mismatch for {keys[i]}: {parts[i]} != {expected}")
    pdf = pd.DataFrame({"partition": parts, "key": keys})
    pdf["idx"] = pdf.groupby("partition").cumcount().astype("int64")
    spark.createDataFrame(pdf).coalesce(1).write.mode("overwrite").parquet(path)
    return {int(p): int(c) for p, c in pdf.groupby("partition").size().items()}


def write_events(
    spark,
    topic_path: str,
    keymap_path: str,
    counts: dict[int, int],
    starts: dict[int, int],
    key_pool: dict[int, int],
    seed: int,
    *,
    sequential: bool = False,
    amounts: tuple[int, ...] = AMOUNTS,
) -> None:
    """Append ``counts[p]`` records to partition p of the log table, offsets from
    ``starts[p]``; keys drawn from the first ``key_pool[p]`` keys of partition p (at random,
    or each in turn with ``sequential``); values ``{"amount":A,"user":KEY}``."""
    from lakestate.io import logtable
    from pyspark.sql import functions as F

    frames = []
    for p, n in sorted(counts.items()):
        if n <= 0:
            continue
        base = spark.range(n).select(
            F.lit(p).cast("int").alias("partition"),
            (F.col("id") + F.lit(starts[p])).alias("offset"),
        )
        if sequential:
            idx = F.col("offset") % F.lit(key_pool[p])
        else:
            idx = F.pmod(F.xxhash64("partition", "offset", F.lit(seed)), F.lit(key_pool[p]))
        frames.append(base.withColumn("idx", idx))
    df = frames[0]
    for other in frames[1:]:
        df = df.unionByName(other)
    keymap = spark.read.parquet(keymap_path)
    pick = F.pmod(F.xxhash64("partition", "offset", F.lit(seed + 1)), F.lit(len(amounts))) + 1
    amount = F.element_at(F.array(*[F.lit(a) for a in amounts]), pick.cast("int"))
    out = df.join(keymap, ["partition", "idx"]).select(
        F.col("partition").cast("int"),
        F.col("offset").cast("long"),
        (F.lit(T0_MS) + F.col("offset") * 10).cast("long").alias("timestamp"),
        F.col("key"),
        F.concat(
            F.lit('{"amount":'), amount.cast("string"), F.lit(',"user":'), F.col("key"), F.lit("}")
        ).alias("value"),
        F.lit(None).cast("string").alias("headers"),
    )
    ends = {p: starts[p] + counts.get(p, 0) for p in starts}
    (
        out.repartition(PARTITIONS, "partition")
        .write.format("delta")
        .mode("append")
        .option("userMetadata", logtable.ends_metadata(ends))  # as lakestate's appends do
        .save(topic_path)
    )


class Topic:
    """The benchmark's input topic in one warehouse, with the end offsets it wrote."""

    def __init__(self, spark, warehouse, keymap_path: str, keys_per_partition: dict[int, int]):
        from lakestate.io import logtable

        self.spark = spark
        self.warehouse = warehouse
        self.path = logtable.create_topic(warehouse, INPUT_TOPIC, PARTITIONS)
        self.keymap_path = keymap_path
        self.keys = keys_per_partition
        self.ends = dict.fromkeys(range(PARTITIONS), 0)
        self.seed = 0

    def append(
        self,
        total: int,
        *,
        pool: int | None = None,
        sequential: bool = False,
        amounts: tuple[int, ...] = AMOUNTS,
    ) -> None:
        """``total`` records, split evenly over the partitions (batches stay full), keys from
        ``pool`` keys in all (default: every key)."""
        counts = {p: total // PARTITIONS + (1 if p < total % PARTITIONS else 0) for p in self.ends}
        key_pool = {
            p: min(self.keys[p], max(1, (pool or sum(self.keys.values())) // PARTITIONS))
            for p in self.ends
        }
        self.seed += 2
        write_events(
            self.spark,
            self.path,
            self.keymap_path,
            counts,
            dict(self.ends),
            key_pool,
            self.seed,
            sequential=sequential,
            amounts=amounts,
        )
        for p, n in counts.items():
            self.ends[p] += n


# -- runs -----------------------------------------------------------------------------------


class Say:
    """Collects what the runner says; keeps the per-batch lines."""

    def __init__(self, echo: bool) -> None:
        self.echo = echo
        self.lines: list[str] = []
        self.batches: list[dict[str, float]] = []

    def __call__(self, msg: str) -> None:
        self.lines.append(msg)
        m = BATCH_LINE.search(msg)
        if m:
            self.batches.append(
                {
                    "batch": m.group(1),
                    "records": int(m.group(2)),
                    "outputs": int(m.group(3)),
                    "seconds": float(m.group(4)),
                }
            )
        if self.echo:
            log(f"  engine: {msg}")


def run_engine(
    warehouse: str, state_dir: str, master: str, timer: PhaseTimer, echo: bool = True, **kw: Any
) -> dict[str, Any]:
    from lakestate import run_app

    say = Say(echo)
    cpu = tree_cpu_seconds()
    started = time.perf_counter()
    result = run_app(
        APP_PATH, warehouse=warehouse, state_dir=state_dir, master=master, say=say, **kw
    )
    wall = time.perf_counter() - started
    cpu = tree_cpu_seconds() - cpu
    timed, run_level = timer.take()
    batches = []
    for i, said in enumerate(say.batches):
        entry = dict(said)
        if i < len(timed):
            entry["phases"] = breakdown(timed[i])
        batches.append(entry)
    return {
        "wall_s": round(wall, 3),
        "cpu_s": round(cpu, 3),
        "records": result.records,
        "batches": batches,
        "run_level_s": {k: round(v, 3) for k, v in run_level.items()},
        "caught_up": result.caught_up,
    }


def plain_spark(spark, topic_path: str, out_path: str) -> tuple[float, float]:
    """The demo app as one plain Spark job; returns its wall and CPU seconds."""
    from pyspark.sql import functions as F

    cpu = tree_cpu_seconds()
    started = time.perf_counter()
    counts = (
        spark.read.format("delta")
        .load(topic_path)
        .where(F.get_json_object("value", "$.amount").cast("long") > 0)
        .groupBy("key")
        .count()
    )
    counts.write.format("delta").mode("overwrite").save(out_path)
    return time.perf_counter() - started, tree_cpu_seconds() - cpu


def check_result(spark, warehouse, plain_path: str) -> int:
    """Keys whose count differs between the engine's state (the store's latest row per key,
    ``inspect.state_frame``) and plain Spark's result."""
    from lakestate.read.spark_engine import state_frame
    from pyspark.sql import functions as F

    state = state_frame(spark, warehouse, APP_NAME, STORE).select(
        "key", F.col("value").cast("long").alias("engine")
    )
    plain = spark.read.format("delta").load(plain_path).select("key", F.col("count").alias("plain"))
    return (
        state.join(plain, "key", "full_outer")
        .where(
            F.col("engine").isNull() | F.col("plain").isNull() | (F.col("engine") != F.col("plain"))
        )
        .count()
    )


def summarize(runs: list[dict[str, Any]], batch: int, pool: int) -> dict[str, Any]:
    """One state's measured batches (one run_app(max_batches=1) each) in one record."""
    batches = [b for run in runs for b in run["batches"]]
    seconds = [b["seconds"] for b in batches]
    out: dict[str, Any] = {
        "batch_records": batch,
        "key_pool": pool,
        "batches": batches,
        "per_batch_s": seconds,
        "run_wall_s": [run["wall_s"] for run in runs],
        "run_level_s": [run["run_level_s"] for run in runs],
        "median_batch_s": round(statistics.median(seconds), 3) if seconds else None,
        "min_batch_s": min(seconds) if seconds else None,
    }
    if batches and all("phases" in b for b in batches):
        keys = dict.fromkeys(k for b in batches for k in b["phases"])
        out["median_phases_s"] = {
            k: round(statistics.median(b["phases"].get(k, 0.0) for b in batches), 3) for k in keys
        }
    return out


def measure_interleaved(
    cases: list[tuple[str, str, Topic, str, int]],
    master: str,
    timer: PhaseTimer,
    batch: int,
    rounds: int,
    sampler: MemorySampler,
) -> dict[str, dict[str, Any]]:
    """Per-batch seconds of each case (name, label, topic, state dir, key pool): ``rounds``
    rounds, each running one batch of ``batch`` records per case (run_app(max_batches=1)),
    in an order rotated every round, so that every case sees the same machine load (this
    machine is shared). Cases on one topic get their records appended in the order they
    run; every batch is full."""
    order = [[cases[(i + r) % len(cases)] for i in range(len(cases))] for r in range(rounds)]
    for round_cases in order:
        for _name, _label, topic, _sd, pool in round_cases:
            topic.append(batch, pool=pool)
    log(f"state size: {rounds} rounds of {len(cases)} batches of {batch:,} records")
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name, *_ in cases}
    for r, round_cases in enumerate(order):
        for name, label, topic, sd, _pool in round_cases:
            with sampler.in_phase(f"state-{name}"):
                run = run_engine(
                    topic.warehouse.root,
                    sd,
                    master,
                    timer,
                    echo=False,
                    max_records=batch // PARTITIONS,
                    max_batches=1,
                )
            runs[name].append(run)
            b = run["batches"][0] if run["batches"] else {}
            log(f"  round {r + 1} {label}: batch {b.get('seconds')}s (run {run['wall_s']:.1f}s)")
    return {name: summarize(runs[name], batch, pool) for name, _l, _t, _s, pool in cases}


# -- profile --------------------------------------------------------------------------------


def top_stats(profile: cProfile.Profile, sort: str, limit: int, only_lakestate: bool) -> list:
    stats = pstats.Stats(profile)
    rows = []
    for (filename, line, name), (_cc, ncalls, tottime, cumtime, _callers) in stats.stats.items():
        if only_lakestate and "lakestate" not in filename:
            continue
        short = filename
        for marker in ("/lib/lakestate/", "/site-packages/", "/lib/python3"):
            if marker in filename:
                short = filename.split(marker, 1)[1]
                break
        rows.append(
            {
                "function": f"{short}:{line}({name})",
                "ncalls": ncalls,
                "tottime_s": round(tottime, 3),
                "cumtime_s": round(cumtime, 3),
            }
        )
    key = "cumtime_s" if sort == "cumulative" else "tottime_s"
    rows.sort(key=lambda r: r[key], reverse=True)
    return rows[:limit]


def profile_worker(spark, topic: Topic, state_dir: str, records: int) -> dict[str, Any]:
    """cProfile of ``process_task`` run in this process on partition 0's next ``records``
    records, against a copy of task 0_0's local store (what one Spark worker does for one
    task of a batch, minus Arrow transfer)."""
    from lakestate.app import load_app
    from lakestate.checkpoint.task_dir import TaskDir
    from lakestate.io import topics
    from lakestate.runtime import spark_topics
    from lakestate.runtime.task_executor import INPUT_COLUMNS, BatchContext, process_task
    from lakestate.state.base import IsolationLevel, TopicPartition, isolation_for
    from pyspark.sql import functions as F

    app = load_app(APP_PATH)
    isolation = isolation_for(app.config)
    copy_dir = tempfile.mkdtemp(prefix="worker-profile-", dir=Path(state_dir).parent)
    try:
        src = TaskDir(state_dir, APP_NAME, "0_0").path
        dst = TaskDir(copy_dir, APP_NAME, "0_0").path
        shutil.copytree(src, dst)
        store = TaskDir(copy_dir, APP_NAME, "0_0").open(IsolationLevel.READ_COMMITTED)
        try:
            start = store.committed_offsets().get(TopicPartition(INPUT_TOPIC, 0), 0)
            keys_in_store = sum(1 for _ in store.iterate(STORE))
        finally:
            store.close()
        source = topics.topic(topic.warehouse, INPUT_TOPIC)
        df = spark_topics.read_range(spark, source, {0: (start, start + records)})
        pdf = df.select(
            F.lit(0).cast("int").alias("sub"),
            F.col("partition").alias("task"),
            F.lit(0).cast("int").alias("input_index"),
            F.lit(INPUT_TOPIC).alias("topic"),
            *INPUT_COLUMNS[4:],
        ).toArrow()
        ctx = BatchContext(
            APP_PATH,
            APP_NAME,
            {"0_0": 10**9},  # a batch no real batch has: the staged file goes to the copy only
            copy_dir,
            isolation,
            {OUTPUT_TOPIC: PARTITIONS},
            {"0_0": {INPUT_TOPIC: start}},
        )
        process_task(pdf.slice(0, 100), ctx)  # load the app, warm imports (not profiled)
        shutil.rmtree(dst)
        shutil.copytree(src, dst)
        profile = cProfile.Profile()
        started = time.perf_counter()
        out = profile.runcall(process_task, pdf, ctx=ctx)
        seconds = time.perf_counter() - started
        profile.disable()
        return {
            "records": pdf.num_rows,
            "keys_in_store": keys_in_store,
            "output_rows": out.num_rows,
            "seconds_profiled": round(seconds, 3),
            "us_per_record_profiled": round(seconds / max(pdf.num_rows, 1) * 1e6, 1),
            "top_tottime": top_stats(profile, "tottime", 20, False),
            "top_cumulative_lakestate": top_stats(profile, "cumulative", 20, True),
            "unprofiled_seconds": _unprofiled(process_task, pdf, ctx, src, dst),
        }
    finally:
        shutil.rmtree(copy_dir, ignore_errors=True)


def _unprofiled(process_task, pdf, ctx, src, dst) -> float:
    """The same call without the profiler (cProfile roughly doubles pure-Python time)."""
    shutil.rmtree(dst)
    shutil.copytree(src, dst)
    started = time.perf_counter()
    process_task(pdf, ctx=ctx)
    return round(time.perf_counter() - started, 3)


def profile_driver(
    topic: Topic, state_dir: str, master: str, timer: PhaseTimer, batch: int
) -> dict[str, Any]:
    """cProfile of the driver for one engine batch (run_app(max_batches=1))."""
    profile = cProfile.Profile()
    started_ms = int(time.time() * 1000)
    t = time.perf_counter()
    run = profile.runcall(
        run_engine,
        topic.warehouse.root,
        state_dir,
        master,
        timer,
        max_records=batch // PARTITIONS,
        max_batches=1,
    )
    wall = time.perf_counter() - t
    ended_ms = int(time.time() * 1000)
    return {
        "run": run,
        "wall_s": round(wall, 3),
        "window_ms": [started_ms, ended_ms],
        "top_cumulative_lakestate": top_stats(profile, "cumulative", 25, True),
        "top_tottime": top_stats(profile, "tottime", 12, False),
    }


def _lines(files: list[Path]) -> Iterator[list[str]]:
    for f in files:
        with open(f, encoding="utf-8", errors="replace") as handle:
            yield handle.readlines()


def stage_times(event_dir: str, window_ms: tuple[int, int]) -> dict[str, Any]:
    """Spark stages completed within ``window_ms``, from the event log: per stage its
    duration, tasks and executor run time, and the sum per job description (engine phase)."""
    # Spark 4 writes rolling event logs: a directory eventlog_v2_<app>/ of events_<n>_<app>
    # files (plus an appstatus marker); older layouts write one file per app.
    files = [
        f
        for f in Path(event_dir).rglob("*")
        if f.is_file() and not f.name.startswith(("appstatus", "."))
    ]
    if not files:
        return {"note": "no event log"}

    def order(f: Path) -> tuple[int, str]:
        m = re.match(r"events_(\d+)_", f.name)
        return (int(m.group(1)) if m else 0, f.name)

    descriptions: dict[int, str] = {}
    stages = []
    for lines in _lines(sorted(files, key=order)):
        for line in lines:
            if '"Event":"SparkListenerStage' not in line:
                continue
            try:
                ev = json.loads(line)
            except ValueError:  # the last line may be half written
                continue
            info = ev.get("Stage Info", {})
            sid = info.get("Stage ID")
            if ev["Event"] == "SparkListenerStageSubmitted":
                props = ev.get("Properties") or {}
                descriptions[sid] = props.get("spark.job.description") or "(no phase)"
            elif ev["Event"] == "SparkListenerStageCompleted":
                sub, done = info.get("Submission Time"), info.get("Completion Time")
                if sub is None or done is None or not window_ms[0] <= sub <= window_ms[1]:
                    continue
                run_ms = 0
                for acc in info.get("Accumulables", []):
                    if acc.get("Name") == "internal.metrics.executorRunTime":
                        run_ms = int(acc.get("Value", 0))
                stages.append(
                    {
                        "stage": sid,
                        "phase": descriptions.get(sid, "(no phase)"),
                        "name": info.get("Stage Name", ""),
                        "tasks": info.get("Number of Tasks"),
                        "duration_s": round((done - sub) / 1000, 3),
                        "executor_run_s": round(run_ms / 1000, 3),
                    }
                )
    per_phase: dict[str, dict[str, float]] = {}
    detail: dict[str, dict[str, float]] = {}
    for s in stages:
        for table, key in ((per_phase, engine_phase(s["phase"])), (detail, s["phase"])):
            p = table.setdefault(key, {"stages": 0, "duration_s": 0.0, "executor_run_s": 0.0})
            p["stages"] += 1
            p["duration_s"] = round(p["duration_s"] + s["duration_s"], 3)
            p["executor_run_s"] = round(p["executor_run_s"] + s["executor_run_s"], 3)
    stages.sort(key=lambda s: s["duration_s"], reverse=True)
    return {
        "stages": len(stages),
        "stage_seconds": round(sum(s["duration_s"] for s in stages), 3),
        "per_phase": per_phase,
        "per_description": detail,
        "top_stages": stages[:12],
    }


def engine_phase(description: str) -> str:
    """The engine phase of a job description: Delta prefixes its own ("Delta: <ours>: ...",
    "<ours> - MERGE operation - ...")."""
    text = description
    while text.startswith("Delta: "):
        text = text[len("Delta: ") :]
    return re.split(r": | - ", text, maxsplit=1)[0]


# -- report ---------------------------------------------------------------------------------


def mb(n: int | None) -> str:
    return "-" if n is None else f"{n / 2**20:,.0f} MiB"


def rate(n: float, s: float) -> float:
    return n / s if s > 0 else float("nan")


def environment() -> dict[str, Any]:
    from importlib import metadata

    def git(*args: str) -> str:
        try:
            return subprocess.run(
                ["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=10
            ).stdout.strip()
        except Exception:
            return ""

    return {
        "cpus": os.cpu_count(),
        "memory_total": psutil.virtual_memory().total,
        "python": platform.python_version(),
        "pyspark": metadata.version("pyspark"),
        "delta_spark": metadata.version("delta-spark"),
        "git_commit": git("rev-parse", "--short", "HEAD"),
        "git_dirty_files": len([x for x in git("status", "--porcelain").splitlines() if x]),
    }


def print_table(rows: list[tuple[str, str, str]]) -> None:
    w0 = max(len(r[0]) for r in rows)
    w1 = max(len(r[1]) for r in rows)
    print()
    print(f"{'metric'.ljust(w0)}  {'value'.rjust(w1)}  target")
    print("-" * (w0 + w1 + 20))
    for name, value, target in rows:
        print(f"{name.ljust(w0)}  {value.rjust(w1)}  {target}")
    print()


def verdict(ok: bool | None) -> str:
    return "" if ok is None else ("ok" if ok else "MISSED")


# -- main -----------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--records", type=int, help="N input records for the throughput run")
    p.add_argument("--quick", action="store_true", help="N=100k, 100k-key state, small batches")
    p.add_argument("--keys", type=int, default=10_000, help="keys of the throughput input")
    p.add_argument("--state-keys", type=int, help="keys of the big state (default 1M; quick 100k)")
    p.add_argument("--batch-records", type=int, help="records per measured batch (default 50k)")
    p.add_argument("--measure-batches", type=int, help="measured batches per state (default 3)")
    p.add_argument(
        "--max-records", type=int, help="engine max_records per task (default: the app's bounds)"
    )
    p.add_argument("--master", default="local[2]")
    p.add_argument("--driver-memory", help="spark.driver.memory (default: Spark's, 1g)")
    p.add_argument(
        "--conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra Spark conf for the session (repeatable), e.g. to try an engine setting",
    )
    p.add_argument("--skip-state", action="store_true", help="skip the 1M-key state runs")
    p.add_argument("--skip-profile", action="store_true")
    p.add_argument("--keep", action="store_true", help="keep the temporary directory")
    p.add_argument("--json", default=str(DEFAULT_JSON), help="where to write the results")
    args = p.parse_args(argv)
    args.records = args.records or (100_000 if args.quick else 1_000_000)
    args.state_keys = args.state_keys or (100_000 if args.quick else 1_000_000)
    args.batch_records = args.batch_records or (20_000 if args.quick else 50_000)
    args.measure_batches = args.measure_batches or 3
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    # Killed (SIGTERM): unwind, so that the temporary directory is removed and the results
    # so far are written.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    # applyInPandas with a functools.partial (the engine's process_task): harmless.
    warnings.filterwarnings("ignore", message="Cannot infer the eval type from type hints")
    began = time.perf_counter()
    sampler = MemorySampler()
    sampler.start()
    tmp = Path(tempfile.mkdtemp(prefix="lakestate-bench-"))
    results: dict[str, Any] = {
        "args": {k: v for k, v in vars(args).items() if k != "json"},
        "environment": environment(),
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    timer = PhaseTimer()
    spark = None
    try:
        from lakestate.runtime.spark_session import get_spark, stop_spark
        from lakestate.state.constants import (
            DEFAULT_UNCOMMITTED_MAX_BYTES,
            DEFAULT_UNCOMMITTED_MAX_RECORDS,
        )
        from lakestate.warehouse import Warehouse

        events_dir = tmp / "events"
        events_dir.mkdir()
        extra = {
            "spark.eventLog.enabled": "true",
            "spark.eventLog.dir": events_dir.as_uri(),
            "spark.eventLog.compress": "false",
            "spark.sql.execution.arrow.pyspark.enabled": "true",
        }
        if args.driver_memory:
            extra["spark.driver.memory"] = args.driver_memory
        for item in args.conf:
            key, sep, value = item.partition("=")
            if not sep:
                raise SystemExit(f"--conf {item!r}: expected KEY=VALUE")
            extra[key.strip()] = value.strip()
        log(f"starting Spark ({args.master}); temporary directory {tmp}")
        t = time.perf_counter()
        spark = get_spark(args.master, app_name="lakestate-bench", extra_conf=extra)
        results["spark_start_s"] = round(time.perf_counter() - t, 2)
        results["spark_conf"] = {
            k: spark.conf.get(k, None)
            for k in (
                "spark.master",
                "spark.sql.shuffle.partitions",
                "spark.driver.memory",
                "spark.sql.adaptive.enabled",
                "spark.sql.adaptive.coalescePartitions.enabled",
                *[item.partition("=")[0].strip() for item in args.conf],
            )
        }
        timer.install()
        results["instrumented"] = {"wrapped": timer.installed, "missing": timer.missing}

        # 1 + 2: throughput, engine vs plain Spark, same input --------------------------------
        with sampler.in_phase("generate"):
            wh1 = Warehouse(tmp / "wh-small")
            sd1 = str(tmp / "state-small")
            t = time.perf_counter()
            keys1 = write_keymap(spark, str(tmp / "keys-small.parquet"), args.keys)
            topic1 = Topic(spark, wh1, str(tmp / "keys-small.parquet"), keys1)
            topic1.append(args.records)
            gen_s = time.perf_counter() - t
            log(f"wrote {args.records:,} records ({args.keys:,} keys) in {gen_s:.1f}s")
        plain_path = str(tmp / "plain-counts")
        with sampler.in_phase("plain"):
            plain_1, plain_cpu_1 = plain_spark(spark, topic1.path, plain_path)
            log(f"plain Spark #1: {plain_1:.2f}s ({plain_cpu_1:.1f} CPU s)")
        with sampler.in_phase("engine-throughput"):
            log(f"engine: {args.records:,} records, max_records={args.max_records} per task")
            engine = run_engine(
                wh1.root,
                sd1,
                args.master,
                timer,
                until_caught_up=True,
                max_records=args.max_records,
            )
            log(
                f"engine: {engine['records']:,} records in {engine['wall_s']:.1f}s "
                f"({engine['cpu_s']:.1f} CPU s)"
            )
        with sampler.in_phase("plain"):
            plain_2, plain_cpu_2 = plain_spark(spark, topic1.path, plain_path)
            log(f"plain Spark #2: {plain_2:.2f}s ({plain_cpu_2:.1f} CPU s)")
        mismatched = check_result(spark, wh1, plain_path)
        plain_best = min(plain_1, plain_2)
        engine_rps = rate(engine["records"], engine["wall_s"])
        batch_sum = sum(b["seconds"] for b in engine["batches"])
        results["throughput"] = {
            "records": args.records,
            "keys": args.keys,
            "input_write_s": round(gen_s, 2),
            "engine": engine,
            "engine_records_per_s": round(engine_rps),
            "engine_records_per_batch_s": round(rate(engine["records"], batch_sum)),
            "plain_s": [round(plain_1, 3), round(plain_2, 3)],
            "plain_cpu_s": [round(plain_cpu_1, 3), round(plain_cpu_2, 3)],
            "plain_records_per_s": round(rate(args.records, plain_best)),
            "ratio_engine_plain": round(engine_rps / rate(args.records, plain_best), 4),
            # CPU seconds per record, plain over engine: the same ratio, less sensitive to
            # other processes on the machine (both use all cores they can get).
            "ratio_engine_plain_cpu": round(min(plain_cpu_1, plain_cpu_2) / engine["cpu_s"], 4),
            "engine_cpu_us_per_record": round(engine["cpu_s"] / max(engine["records"], 1) * 1e6),
            "plain_cpu_us_per_record": round(
                min(plain_cpu_1, plain_cpu_2) / max(args.records, 1) * 1e6, 1
            ),
            "keys_differing_from_plain": mismatched,
        }
        log(
            f"engine vs plain: {results['throughput']['ratio_engine_plain']:.3f}; "
            f"{mismatched} keys differ"
        )

        # 3: per-batch time, 10k-key state vs 1M-key state -----------------------------------
        state: dict[str, Any] = {}
        cases = [("small", f"state {args.keys:,} keys", topic1, sd1, args.keys)]
        if not args.skip_state:
            wh2 = Warehouse(tmp / "wh-big")
            sd2 = str(tmp / "state-big")
            with sampler.in_phase("generate"):
                t = time.perf_counter()
                keys2 = write_keymap(spark, str(tmp / "keys-big.parquet"), args.state_keys)
                topic2 = Topic(spark, wh2, str(tmp / "keys-big.parquet"), keys2)
                # Every key once, every amount positive: every key ends up in the state.
                topic2.append(
                    sum(keys2.values()) // PARTITIONS * PARTITIONS,
                    sequential=True,
                    amounts=POSITIVE_AMOUNTS,
                )
                log(
                    f"wrote {sum(keys2.values()):,} records (one per key) in "
                    f"{time.perf_counter() - t:.1f}s"
                )
            with sampler.in_phase("state-build"):
                build = run_engine(
                    wh2.root,
                    sd2,
                    args.master,
                    timer,
                    until_caught_up=True,
                    max_records=max(args.max_records or 0, args.state_keys // (2 * PARTITIONS)),
                )
                build["records_per_s"] = round(rate(build["records"], build["wall_s"]))
                state["build"] = build
                log(f"state build: {build['records']:,} records in {build['wall_s']:.1f}s")
            cases += [
                ("big", f"state {args.state_keys:,} keys", topic2, sd2, args.state_keys),
                (
                    "big_hot_small",
                    f"state {args.state_keys:,} keys, keys from {args.keys:,}",
                    topic2,
                    sd2,
                    args.keys,
                ),
            ]
        state.update(
            measure_interleaved(
                cases, args.master, timer, args.batch_records, args.measure_batches, sampler
            )
        )
        if "big" in state:
            small = state["small"]["median_batch_s"]
            state["ratio_big_small"] = round(state["big"]["median_batch_s"] / small, 3)
            state["ratio_big_small_min"] = round(
                state["big"]["min_batch_s"] / state["small"]["min_batch_s"], 3
            )
            state["ratio_big_hot_small"] = round(
                state["big_hot_small"]["median_batch_s"] / small, 3
            )
            cpu = {
                k: state[k].get("median_phases_s", {}).get("batch_cpu")
                for k in ("small", "big", "big_hot_small")
            }
            if cpu["small"] and cpu["big"]:
                state["ratio_big_small_cpu"] = round(cpu["big"] / cpu["small"], 3)
                state["ratio_big_hot_small_cpu"] = round(cpu["big_hot_small"] / cpu["small"], 3)
            cycle = {
                k: v.get("median_phases_s", {}).get("cycle")
                for k, v in state.items()
                if isinstance(v, dict)
            }
            if cycle.get("small") and cycle.get("big"):
                state["ratio_big_small_cycle"] = round(cycle["big"] / cycle["small"], 3)
        results["state_size"] = state

        # 5: profile one batch --------------------------------------------------------------
        if not args.skip_profile:
            with sampler.in_phase("profile"):
                log("profile: worker function on a copy of task 0_0's store")
                topic1.append(args.batch_records)
                try:
                    worker = profile_worker(spark, topic1, sd1, args.batch_records // PARTITIONS)
                except Exception as exc:  # the engine's internals are changing
                    worker = {
                        "error": f"{type(exc).__name__}: {exc}",
                        "traceback": traceback.format_exc(),
                    }
                log("profile: driver, one engine batch")
                driver = profile_driver(topic1, sd1, args.master, timer, args.batch_records)
                time.sleep(1.0)  # let the event log catch up
                driver["spark_stages"] = stage_times(str(events_dir), tuple(driver["window_ms"]))
                results["profile"] = {"worker": worker, "driver": driver}

        sampler.phase = "teardown"
        # 4: memory ---------------------------------------------------------------------------
        results["config"] = {
            "statestore.uncommitted.max.bytes": DEFAULT_UNCOMMITTED_MAX_BYTES,
            "statestore.uncommitted.max.records": DEFAULT_UNCOMMITTED_MAX_RECORDS,
        }
        results["total_s"] = round(time.perf_counter() - began, 1)
        stop_spark()
        spark = None
    finally:
        sampler.stop()
        results["memory"] = {
            "samples": sampler.samples,
            "interval_s": sampler.interval,
            "peak": sampler.peaks.get("all", {}),
            "per_phase": sampler.peaks,
            "other_process_names": sorted(sampler.other_names),
        }
        results["load_average_1m"] = {
            phase: {"max": round(max(v), 2), "mean": round(statistics.mean(v), 2)}
            for phase, v in sampler.load.items()
            if v
        }
        if spark is not None:
            with contextlib.suppress(Exception):
                from lakestate.runtime.spark_session import stop_spark

                stop_spark()
        if args.keep:
            log(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
        out = Path(args.json)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(results, indent=2, default=str) + "\n")
    report(results, args)
    log(f"results written to {out}")
    return 0


def report(r: dict[str, Any], args: argparse.Namespace) -> None:
    rows: list[tuple[str, str, str]] = []
    tp = r.get("throughput")
    if tp:
        e = tp["engine"]
        rows += [
            (
                f"engine records/s (N={tp['records']:,}, {tp['keys']:,} keys, "
                f"{len(e['batches'])} batches)",
                f"{tp['engine_records_per_s']:,}",
                "",
            ),
            ("  engine wall s (prepare+recover+batches)", f"{e['wall_s']:.1f}", ""),
            ("  engine records/s within batches", f"{tp['engine_records_per_batch_s']:,}", ""),
            (
                "  engine CPU us per input record (driver+JVM+workers)",
                f"{tp.get('engine_cpu_us_per_record', 0):,}",
                "",
            ),
            ("plain Spark records/s (best of 2)", f"{tp['plain_records_per_s']:,}", ""),
            (
                "  plain Spark CPU us per input record",
                f"{tp.get('plain_cpu_us_per_record', 0):,}",
                "",
            ),
            ("  plain Spark s (run 1, run 2)", ", ".join(f"{s:.2f}" for s in tp["plain_s"]), ""),
            (
                "ratio engine / plain",
                f"{tp['ratio_engine_plain']:.3f}",
                f">= {TARGET_RATIO_PLAIN} {verdict(tp['ratio_engine_plain'] >= TARGET_RATIO_PLAIN)}",
            ),
            (
                "  ratio by CPU time (robust to machine load)",
                f"{tp.get('ratio_engine_plain_cpu', float('nan')):.3f}",
                "",
            ),
            ("keys differing engine vs plain", str(tp["keys_differing_from_plain"]), "0"),
        ]
    st = r.get("state_size") or {}

    def cycle(run: dict[str, Any]) -> str:
        c = run.get("median_phases_s", {}).get("cycle")
        return "" if c is None else f"(with planning: {c:.2f} s)"

    if "small" in st:
        b = args.batch_records
        rows.append(
            (
                f"batch s, {b:,} recs, state {args.keys:,} keys (median)",
                f"{st['small']['median_batch_s']:.2f}",
                cycle(st["small"]),
            )
        )
    if "big" in st:
        rows += [
            (
                f"state build records/s ({st['build']['records']:,} new keys)",
                f"{st['build']['records_per_s']:,}",
                "",
            ),
            (
                f"batch s, state {args.state_keys:,} keys, keys from all (median)",
                f"{st['big']['median_batch_s']:.2f}",
                cycle(st["big"]),
            ),
            (
                f"batch s, state {args.state_keys:,} keys, keys from {args.keys:,} (median)",
                f"{st['big_hot_small']['median_batch_s']:.2f}",
                cycle(st["big_hot_small"]),
            ),
            (
                "ratio big state / small state",
                f"{st['ratio_big_small']:.2f}",
                f"<= {TARGET_RATIO_STATE} {verdict(st['ratio_big_small'] <= TARGET_RATIO_STATE)}",
            ),
            ("  same, fastest batch of each", f"{st['ratio_big_small_min']:.2f}", ""),
            (
                "  same, by CPU seconds per batch",
                f"{st.get('ratio_big_small_cpu', float('nan')):.2f}",
                "",
            ),
            ("  control: same changed keys, big state", f"{st['ratio_big_hot_small']:.2f}", ""),
        ]
        if "ratio_big_small_cycle" in st:
            rows.append(
                ("  ratio with planning included", f"{st['ratio_big_small_cycle']:.2f}", "")
            )
    mem = r.get("memory", {}).get("peak", {})
    if mem:
        split = mem.get("_split", {})
        rows += [
            ("peak RSS, process tree", mb(mem.get("_at_total")), ""),
            (
                "  at peak: driver / JVM / workers",
                " / ".join(mb(split.get(k)) for k in ("driver", "jvm", "workers")),
                "",
            ),
            (
                "  max each: driver / JVM / workers",
                " / ".join(mb(mem.get(k)) for k in ("driver", "jvm", "workers")),
                "",
            ),
        ]
    cfg = r.get("config")
    if cfg:
        rows.append(
            (
                "statestore.uncommitted.max.bytes (default)",
                mb(cfg["statestore.uncommitted.max.bytes"]),
                "",
            )
        )
    if "total_s" in r:
        rows.append(("benchmark wall time", f"{r['total_s']:.0f} s", ""))
    load = r.get("load_average_1m", {})
    if load:
        top = max(v["max"] for v in load.values())
        cpus = r.get("environment", {}).get("cpus") or 1
        note = f"busy machine (> {cpus} cpus): timings inflated" if top > cpus else ""
        rows.append(("machine load average (1 min), max", f"{top:.1f}", note))
    print_table(rows)

    def phases(title: str, run: dict[str, Any]) -> None:
        if not run or not run.get("batches") or "phases" not in run["batches"][0]:
            return
        print(title)
        keys = list(dict.fromkeys(k for b in run["batches"] for k in b["phases"]))
        widths = [max(len(k), 7) for k in keys]
        print(
            "  "
            + f"{'records':>9}  "
            + "  ".join(k.rjust(w) for k, w in zip(keys, widths, strict=True))
        )
        for b in run["batches"]:
            cells = [
                f"{b['phases'].get(k, 0):.2f}".rjust(w) for k, w in zip(keys, widths, strict=True)
            ]
            print("  " + f"{b['records']:>9,}  " + "  ".join(cells))

    print("Per-batch seconds by phase (process = read + mapInArrow + toArrow):")
    if tp:
        phases(" throughput run", tp["engine"])
    for key, title in (
        ("small", " small state"),
        ("build", " big-state build"),
        ("big", " big state"),
        ("big_hot_small", " big state, hot keys"),
    ):
        if key in st:
            phases(title, st[key])
    print()
    memory = r.get("memory", {}).get("per_phase", {})
    if memory:
        print("Peak RSS per phase (total; driver / JVM / workers at that peak):")
        for phase, peak in memory.items():
            if phase == "all":
                continue
            split = peak.get("_split", {})
            lavg = r.get("load_average_1m", {}).get(phase, {}).get("mean")
            print(
                f"  {phase:<18} {mb(peak.get('_at_total')):>10}   "
                + " / ".join(mb(split.get(k)) for k in ("driver", "jvm", "workers"))
                + ("" if lavg is None else f"   (load {lavg:.1f})")
            )
        print()
    prof = r.get("profile")
    if prof:
        w = prof["worker"]
        if "error" in w:
            print(f"Worker profile failed: {w['error']}")
        else:
            print(
                f"Worker (process_task) on {w['records']:,} records: "
                f"{w['unprofiled_seconds']:.2f}s unprofiled "
                f"({w['unprofiled_seconds'] / max(w['records'], 1) * 1e6:.0f} us/record), "
                f"{w['seconds_profiled']:.2f}s under cProfile; top by own time:"
            )
            for row in w["top_tottime"][:12]:
                print(f"  {row['tottime_s']:>7.3f}s {row['ncalls']:>9}  {row['function']}")
            print("  lakestate functions by cumulative time (profiled):")
            for row in w["top_cumulative_lakestate"][:14]:
                print(f"  {row['cumtime_s']:>7.3f}s {row['ncalls']:>9}  {row['function']}")
        d = prof["driver"]
        print(
            f"\nDriver, one batch ({d['wall_s']:.1f}s wall incl. prepare/recover); "
            "lakestate functions by cumulative time:"
        )
        for row in d["top_cumulative_lakestate"][:15]:
            print(f"  {row['cumtime_s']:>7.3f}s {row['ncalls']:>6}  {row['function']}")
        sp = d.get("spark_stages", {})
        if sp.get("per_phase"):
            print(
                f"\nSpark stages of that run: {sp['stages']} stages, {sp['stage_seconds']:.1f}s "
                f"summed, of {d['wall_s']:.1f}s wall (the rest: driver-side planning, Delta "
                "log replay and commit protocol, py4j). By engine phase:"
            )
            for phase, v in sorted(sp["per_phase"].items(), key=lambda kv: -kv[1]["duration_s"]):
                print(
                    f"  {v['duration_s']:>7.2f}s {v['stages']:>3} stages "
                    f"(executor run {v['executor_run_s']:.2f}s)  {phase}"
                )
            print("Longest stages:")
            for s in sp["top_stages"][:8]:
                print(
                    f"  {s['duration_s']:>7.2f}s {s['tasks']:>4} tasks  [{s['phase']}] {s['name']}"
                )
        print()


if __name__ == "__main__":
    sys.exit(main())
