"""Benchmark of lakestate as it is scheduled (a fresh ``lakestate run`` per interval) against
Spark Structured Streaming restarted on its checkpoint, and of the engine's state-size,
backlog, SQL and restore figures (engine issue, item 11).

Run from the repository root::

    .venv/bin/python tests/benchmarks/bench_scheduled.py                # every case, full sizes
    .venv/bin/python tests/benchmarks/bench_scheduled.py --quick        # small sizes: a check
    .venv/bin/python tests/benchmarks/bench_scheduled.py --case a --case d
    # issue 27 item 6a: the 1M backlog through the Spark transport against SSS on the same
    # master, dedup and the demo count, three runs per side interleaved, fresh processes
    .venv/bin/python tests/benchmarks/bench_scheduled.py --case c --transport spark \
        --backlog-repeat 3 --json tests/benchmarks/results/scheduled-spark-backlog.json
    # the same check at a small size (two runs per side)
    .venv/bin/python tests/benchmarks/bench_scheduled.py --case c --transport spark \
        --state-keys 30000 --backlog-repeat 2 --json /tmp/scheduled-spark-small.json

Both sides run on ``local[2]`` with the same Spark confs (``lakestate.runtime.spark_session``'s,
``spark.sql.shuffle.partitions`` = 2 through ``LAKESTATE_SHUFFLE_PARTITIONS``,
``spark.driver.memory`` = 3g, the RocksDB state store provider for Structured Streaming, SSS
below) in the same run. Each case
prints a table of both sides, the ratio and the target; everything is written to
``tests/benchmarks/results/scheduled.json`` with the machine's load averages before and
after every measured command (other jobs on a shared machine inflate absolute times).

Apps: the dedup app (``tests/benchmarks/apps/dedup_bench.py``, KIP-655
``deduplicate_by_key(1 hour)``; input from ``bench_dedup``'s generator with 5% duplicates
and no late records, so ~95% of the records bring a new id) and the demo app
(``jobs/demo.py``: events -> filter(amount > 0) -> group_by_key().count(); input from
``bench_engine``'s writer). Their SSS counterparts are in ``common.py``:
``dropDuplicatesWithinWatermark(["id"])`` with a 1-hour watermark to a Delta sink, and
``groupBy("key").count()`` in update mode appending each micro-batch's updates to a Delta
table in ``foreachBatch``; both ``Trigger.AvailableNow`` on the RocksDB state store.

a. **Scheduled run**: each app with ~1M keys in state (``--state-keys``), then rounds of 10k
   new records (``--new-records``): per round ``lakestate run APP --until-caught-up`` as a
   fresh process (the CLI) and the SSS query restarted on its checkpoint as a fresh
   process, in alternating order; then runs with nothing new on each side. Whole commands
   are timed from outside (``time.monotonic`` around ``subprocess.run``); medians are
   compared. Target: lakestate <= 0.8x SSS's wall time in each case. One more round runs
   lakestate under timing hooks (``_lakestate`` below: the same CLI with the engine's
   phase functions wrapped) to show where its time goes; the SSS child reports its own.
b. **State size**: in this process (``run_app(max_batches=1)``, one batch per state per
   round, order rotated): 50k-record batches of the demo app over 10k keys in state versus
   the ~1M-key state of case a. Target <= 1.2x in each of three rounds.
c. **Backlog**: the runs that build case a's state are the backlog runs: ``--state-keys``
   records (1M) through each app from empty state, and through the SSS query from an empty
   checkpoint, each a fresh process. Target: lakestate >= 1.0x SSS's records/s; where the
   time goes outside processing is printed for both.
   ``--case c`` without a runs only the backlogs, ``--backlog-repeat`` times per side,
   interleaved, each from empty state on a fresh copy of the input; ``--transport spark``
   sends every lakestate run through the Spark transport on ``--master`` (the CLI's own
   choice on a local master is in process at any size).
d. **SQL**: the demo app's store after 100 batches (``--sql-batches``; 10k records each
   after case a's) and a compaction (``lakestate.ops.compaction.compact``, when it is
   committed; without, and said so, otherwise): a latest-state query through
   ``inspect.state_frame`` (and through ``inspect.sql``, which registers every view) versus
   the same query over a plain Delta table holding the store's rows. Target <= 2x.
e. **Restore**: each task of the demo app wiped and restored from its changelog
   (``recovery.restore``, timed per task, read and write split); and a fresh ``lakestate
   run`` of the dedup app after its state directory is deleted (its ``restored N rows``
   lines and the recovery's time). Target >= 300k rows/s.

The engine measured is lib/ as committed at HEAD (``--engine head``, the default: extracted
into the temporary directory and put first on ``PYTHONPATH`` for every process, so that
others' uncommitted edits in this shared checkout are not measured half-way), or the
checkout as it is (``--engine tree``). Everything lives in a temporary directory that is
removed at the end (``--keep`` keeps it).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from common import log  # tests/benchmarks/common.py (first on sys.path)

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
DEFAULT_JSON = HERE / "results" / "scheduled.json"
LAKESTATE_CLI = str(Path(sys.executable).parent / "lakestate")
DEDUP_APP = str(HERE / "apps" / "dedup_bench.py")
DEMO_APP = str(ROOT / "jobs" / "demo.py")
PARTITIONS = 2
SHUFFLE_PARTITIONS = "2"
SPAWNED_AT_ENV = "BENCH_SPAWNED_AT"

TARGET_SCHEDULED = 0.8  # lakestate wall / SSS wall, at most
TARGET_STATE = 1.2  # big state / small state batch seconds, at most
TARGET_BACKLOG = 1.0  # lakestate records/s / SSS records/s, at least
TARGET_SQL = 2.0  # lakestate query / plain Delta query, at most
TARGET_RESTORE = 300_000  # rows/s, at least

RUN_LINE = re.compile(r"ran (\d+) batch\(es\), (\d+) records")
TRANSPORT_LINE = re.compile(r"transport: (in Spark|in this process, no Spark) \(([^)\n]*)")
RESTORED_LINE = re.compile(r"task (\S+): restored (\d+) rows")
LATEST_QUERY = (
    "SELECT count(*) AS keys, sum(CAST(value AS BIGINT)) AS total, "
    "max(CAST(value AS BIGINT)) AS top FROM {table}"
)


def loadavg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def median(values: list[float]) -> float | None:
    return round(statistics.median(values), 3) if values else None


def ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a and b else None


# -- fresh processes (children) -----------------------------------------------------------------
#
# ``_lakestate -- ARGS``: the lakestate CLI (``lakestate.cli.main(ARGS)``) with the engine's
# phase functions wrapped to record when each ran; ``_sss``: one SSS query on its
# checkpoint. Each writes a JSON report; the parent reads it after the process exited.

# (module, class or None, attribute, label); those missing in the engine are skipped.
LAKESTATE_HOOKS = [
    ("lakestate.runtime.spark_session", None, "get_spark", "spark_start"),
    ("lakestate.runtime.spark_session", None, "stop_spark", "spark_stop"),
    ("lakestate.runtime.spark_transport", "SparkStarter", "__call__", "spark_wait"),
    ("lakestate.runtime.spark_transport", "SparkStarter", "join", "spark_join"),
    ("lakestate.runtime.spark_transport", None, "_warm_python_workers", "warm_workers"),
    ("lakestate.warehouse", "Warehouse", "check", "warehouse_check"),
    ("lakestate.scaleout.instance_run", None, "_load", "load_app"),
    ("lakestate.scaleout.task_roles", None, "scaled_out", "roles"),
    ("lakestate.scaleout.task_roles", None, "roles_of", "roles"),
    ("lakestate.scaleout.task_roles", "Roles", "fences", "roles"),
    ("lakestate.runtime.runner", None, "ensure_layout", "prepare"),
    ("lakestate.runtime.runner", None, "where_tasks_stand", "where_tasks_stand"),
    ("lakestate.runtime.runner", None, "recover", "recover"),
    ("lakestate.restore.recovery", None, "restore", "restore"),
    ("lakestate.checkpoint.changelog", None, "read_state", "restore_read"),
    ("lakestate.checkpoint.changelog", None, "restore_into", "restore_write"),
    ("lakestate.checkpoint.changelog", None, "read_live", "restore_read"),
    ("lakestate.restore.recovery", None, "load", "restore_write"),
    ("lakestate.runtime.runner", "Runner", "_plan", "plan"),
    ("lakestate.runtime.runner", "Runner", "_run_batch", "batch"),
    ("lakestate.runtime.spark_transport", "SparkTransport", "_read", "read_frame"),
    ("pyspark.sql.classic.dataframe", "DataFrame", "toArrow", "execute"),
    ("lakestate.runtime.spark_transport", None, "on_driver", "located_job"),
    ("lakestate.runtime.spark_located", "Placements", "learn", "placements"),
    ("lakestate.runtime.spark_kept", "LocatedRowsElsewhere", "write_files", "executor_files"),
    ("lakestate.runtime.inprocess", None, "read_inputs", "inprocess_read"),
    ("lakestate.runtime.inprocess", None, "process_inputs", "inprocess_process"),
    ("lakestate.runtime.runner", None, "commit_batch", "commit"),
    ("lakestate.checkpoint.progress", None, "record", "progress_commit"),
    ("lakestate.checkpoint.commit", None, "_run_all", "table_commits"),
    ("lakestate.checkpoint.commit", None, "_append_topic", "sink_append"),
    ("lakestate.checkpoint.commit", None, "_append_changelog", "changelog_append"),
    ("lakestate.checkpoint.commit", None, "_complete", "local_apply"),
]


def install_hooks(
    hooks: list[tuple[str, str | None, str, str]],
    events: list[dict[str, Any]],
    missing: list[str] | None = None,
) -> Callable[[], None]:
    """Wrap each hooked function to append ``{label, start, end, thread}`` (monotonic
    seconds) to ``events`` (a hook whose function does not exist is listed in
    ``missing``); returns a function that puts the originals back."""
    import importlib

    lock = threading.Lock()
    undo = []

    def wrap(fn: Callable[..., Any], label: str) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            start = time.monotonic()
            try:
                return fn(*args, **kwargs)
            finally:
                event = {
                    "label": label,
                    "start": start,
                    "end": time.monotonic(),
                    "thread": threading.current_thread().name,
                }
                with lock:
                    events.append(event)

        wrapper.__wrapped__ = fn  # type: ignore[attr-defined]
        return wrapper

    for module_name, class_name, attr, label in hooks:
        owner: Any = importlib.import_module(module_name)
        if class_name:
            owner = getattr(owner, class_name, None)
        original = None if owner is None else vars(owner).get(attr)
        if not callable(original):
            if missing is not None:
                missing.append(f"{module_name}.{class_name + '.' if class_name else ''}{attr}")
            continue
        setattr(owner, attr, wrap(original, label))
        undo.append((owner, attr, original))

    def restore() -> None:
        for owner, attr, original in reversed(undo):
            setattr(owner, attr, original)

    return restore


def child_lakestate(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="bench_scheduled.py _lakestate")
    p.add_argument("--events", required=True)
    p.add_argument("cli", nargs=argparse.REMAINDER)
    args = p.parse_args(argv)
    cli = args.cli[1:] if args.cli[:1] == ["--"] else args.cli
    events: list[dict[str, Any]] = []
    missing: list[str] = []
    install_hooks(LAKESTATE_HOOKS, events, missing)
    from lakestate.cli import main as lakestate_main

    main_start = time.monotonic()
    try:
        return lakestate_main(cli)
    finally:
        report = {
            "main_start": main_start,
            "main_end": time.monotonic(),
            "events": events,
            "missing_hooks": missing,
        }
        Path(args.events).write_text(json.dumps(report))


def child_sss(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="bench_scheduled.py _sss")
    p.add_argument("--query", choices=("dedup", "count"), required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--master", default="local[2]")
    p.add_argument("--report", required=True)
    args = p.parse_args(argv)
    stamps = {"started": time.monotonic()}
    import common
    from lakestate.runtime.spark_session import get_spark, stop_spark

    stamps["imported"] = time.monotonic()
    spark = get_spark(args.master, app_name=f"sss-{args.query}")
    stamps["spark_started"] = time.monotonic()
    provider = spark.conf.get("spark.sql.streaming.stateStore.providerClass")
    query = common.QUERIES[args.query](spark, args.topic, args.out, args.checkpoint)
    stamps["query_started"] = time.monotonic()
    progress = common.await_query(query)
    stamps["query_done"] = time.monotonic()
    stop_spark()
    stamps["spark_stopped"] = time.monotonic()
    Path(args.report).write_text(
        json.dumps({"stamps": stamps, "provider": provider, "progress": progress}, default=str)
    )
    return 0


# -- the parent's view of a fresh process --------------------------------------------------------


class Commands:
    """Runs and times the fresh processes of both sides; keeps their output in ``logs``."""

    def __init__(self, work: Path, master: str, transport: str | None = None) -> None:
        self.work = work
        self.master = master
        self.transport = transport  # lakestate run's --transport (None: the CLI's default)
        self.logs = work / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.count = 0

    def _run(self, cmd: list[str], name: str) -> dict[str, Any]:
        self.count += 1
        out_file = self.logs / f"{self.count:03d}-{name}.log"
        before = loadavg()
        env = dict(os.environ)
        started = time.monotonic()
        env[SPAWNED_AT_ENV] = repr(started)
        with open(out_file, "w") as out:
            proc = subprocess.run(
                cmd, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=ROOT, check=False
            )
        ended = time.monotonic()
        text = out_file.read_text(errors="replace")
        if proc.returncode != 0:
            tail = "\n".join(text.splitlines()[-25:])
            raise RuntimeError(f"{name} exited with {proc.returncode}:\n{tail}")
        return {
            "wall_s": round(ended - started, 3),
            "spawned_at": started,
            "ended_at": ended,
            "load_before": before,
            "load_after": loadavg(),
            "output": text,
        }

    def lakestate(self, fx: Fixture, instrumented: bool = False) -> dict[str, Any]:
        """``lakestate run APP --until-caught-up`` as a fresh process (instrumented: through
        ``_lakestate``, the same CLI with timing hooks)."""
        args = [
            "--warehouse",
            fx.wh.root,
            "--master",
            self.master,
            "run",
            fx.app_path,
            "--until-caught-up",
            "--state-dir",
            fx.state_dir,
            *(["--transport", self.transport] if self.transport else []),
        ]
        events = self.logs / f"events-{self.count + 1:03d}.json"
        if instrumented:
            cmd = [sys.executable, __file__, "_lakestate", "--events", str(events), "--", *args]
        else:
            cmd = [LAKESTATE_CLI, *args]
        run = self._run(cmd, f"lakestate-{fx.name}")
        text = run.pop("output")
        found = RUN_LINE.search(text)
        run["batches"] = int(found.group(1)) if found else None
        run["records"] = int(found.group(2)) if found else None
        said = TRANSPORT_LINE.search(text)
        run["transport"] = f"{said.group(1)} ({said.group(2)})" if said else None
        run["batch_s"] = [
            float(m.group(4)) for m in (BATCH_LINE.search(line) for line in text.splitlines()) if m
        ]
        restored = RESTORED_LINE.findall(text)
        if restored:
            run["restored_rows"] = {task: int(n) for task, n in restored}
        run["instrumented"] = instrumented
        if instrumented:
            run["phases"] = lakestate_phases(json.loads(events.read_text()), run)
        return run

    def sss(self, fx: Fixture) -> dict[str, Any]:
        """The SSS query of ``fx`` restarted on its checkpoint as a fresh process."""
        report = self.logs / f"sss-{self.count + 1:03d}.json"
        cmd = [
            sys.executable,
            __file__,
            "_sss",
            "--query",
            fx.query,
            "--topic",
            fx.topic_path,
            "--out",
            str(fx.sss_out),
            "--checkpoint",
            str(fx.sss_checkpoint),
            "--master",
            self.master,
            "--report",
            str(report),
        ]
        run = self._run(cmd, f"sss-{fx.name}")
        run.pop("output")
        data = json.loads(report.read_text())
        run["records"] = sum(b.get("numInputRows", 0) for b in data["progress"])
        run["micro_batches"] = [summary_of_progress(b) for b in data["progress"]]
        run["provider"] = data["provider"]
        run["phases"] = sss_phases(data, run)
        return run


BATCH_LINE = re.compile(r"batch ([\d_:, ]+): (\d+) records, (\d+) output records, ([0-9.]+)s")


def summary_of_progress(p: dict[str, Any]) -> dict[str, Any]:
    op = (p.get("stateOperators") or [{}])[0]
    return {
        "batch": p.get("batchId"),
        "input_rows": p.get("numInputRows", 0),
        "duration_ms": p.get("durationMs") or {},
        "state_rows_total": op.get("numRowsTotal"),
        "state_rows_updated": op.get("numRowsUpdated"),
        "state_commit_ms": op.get("commitTimeMs"),
        "state_memory_bytes": op.get("memoryUsedBytes"),
        "state_custom": {
            k: v
            for k, v in (op.get("customMetrics") or {}).items()
            if k.startswith("rocksdb") and ("Time" in k or "Bytes" in k)
        },
    }


# How a lakestate process's time is shown: the main thread's time by the innermost hooked
# function it was in (nested calls subtracted from their callers), in this order.
MAIN_PHASES = [
    ("startup", "startup (python, imports)"),
    ("spark_start", "spark start (JVM, jars)"),
    ("spark_wait", "waiting for Spark to be up (it starts in the background)"),
    ("warehouse_check", "the warehouse checked (on S3: its bucket reached)"),
    ("load_app", "load the app (its module, topology)"),
    ("roles", "the instance's roles and fences (scale-out tables)"),
    ("prepare", "prepare (tables, tasks)"),
    ("where_tasks_stand", "where the tasks stand (progress table, txn versions)"),
    ("recover", "recover (local stores checked)"),
    ("restore", "  restore, besides reading and writing"),
    ("restore_read", "  restore: read the changelog"),
    ("restore_write", "  restore: write the local store"),
    ("plan", "plan (end offsets)"),
    ("read_frame", "read: the input's DataFrame (Delta snapshot of the log table)"),
    ("execute", "process: scan, route, Python workers (mapInArrow), rows to the driver"),
    ("located_job", "process on the executors: each task reads its input, processes"),
    ("placements", "  where the tasks ran (Spark's status store)"),
    ("executor_files", "the executors write the output and changelog files"),
    ("inprocess_read", "in process: read the task's ranges (delta-rs)"),
    ("inprocess_process", "in process: process_task in the driver"),
    ("batch", "process, other (the rows' results, batch bookkeeping)"),
    ("progress_commit", "progress commit"),
    ("table_commits", "table commits (sink + changelog, concurrent)"),
    ("local_apply", "local commit"),
    ("commit", "commit, other"),
    ("spark_join", "waiting for the background start and warm-up to end"),
    ("spark_stop", "spark stop"),
    ("other", "other in the CLI (lock, prints, between phases)"),
    ("exit", "exit (JVM and interpreter shutdown)"),
]


def exclusive_seconds(events: list[dict[str, Any]], thread: str) -> tuple[dict[str, float], float]:
    """Seconds per label of ``thread``'s events, each without the events nested in it, and
    the seconds of its outermost events."""
    mine = sorted(
        (e for e in events if e["thread"] == thread), key=lambda e: (e["start"], -e["end"])
    )
    own: dict[str, float] = {}
    outer = 0.0
    stack: list[dict[str, Any]] = []
    for e in mine:
        while stack and stack[-1]["end"] <= e["start"]:
            stack.pop()
        d = e["end"] - e["start"]
        own[e["label"]] = own.get(e["label"], 0.0) + d
        if stack:
            own[stack[-1]["label"]] -= d
        else:
            outer += d
        stack.append(e)
    return own, outer


def lakestate_phases(report: dict[str, Any], run: dict[str, Any]) -> dict[str, float]:
    """Seconds of a lakestate process by phase (``MAIN_PHASES``), from its hooks' events,
    plus what ran in the background beside them (``_`` keys)."""
    events = report["events"]
    own, outer = exclusive_seconds(events, "MainThread")
    own["startup"] = report["main_start"] - run["spawned_at"]
    own["other"] = report["main_end"] - report["main_start"] - outer
    own["exit"] = run["ended_at"] - report["main_end"]
    out = {name: round(own.get(label, 0.0), 3) for label, name in MAIN_PHASES}

    def background(label: str) -> float:
        return round(
            sum(
                e["end"] - e["start"]
                for e in events
                if e["label"] == label and e["thread"] != "MainThread"
            ),
            3,
        )

    out["_background_spark_start"] = background("spark_start")
    out["_background_worker_warm_up"] = background("warm_workers")
    out["_batches"] = sum(1 for e in events if e["label"] == "batch")
    out["_restore"] = round(
        sum(e["end"] - e["start"] for e in events if e["label"] == "restore"), 3
    )
    out["_recover"] = round(
        sum(e["end"] - e["start"] for e in events if e["label"] == "recover"), 3
    )
    out["_missing_hooks"] = report.get("missing_hooks", [])
    return out


def sss_phases(data: dict[str, Any], run: dict[str, Any]) -> dict[str, float]:
    """Seconds of an SSS process by phase: start-up, Spark's start, defining and starting
    the query, its micro-batches (split by its own durationMs: addBatch is the processing
    and the sink's write; the rest are offsets, planning, WAL and commits), the time
    around them (the restart: state store and source initialisation), stop, exit."""
    s = data["stamps"]
    durations = [p.get("durationMs") or {} for p in data["progress"]]
    trigger = sum(d.get("triggerExecution", 0) for d in durations) / 1000
    add = sum(d.get("addBatch", 0) for d in durations) / 1000
    run_s = s["query_done"] - s["query_started"]
    out = {
        "startup (python, imports)": s["imported"] - run["spawned_at"],
        "spark start (JVM, jars)": s["spark_started"] - s["imported"],
        "query definition and start": s["query_started"] - s["spark_started"],
        "micro-batches: addBatch (process, state, sink)": add,
        "micro-batches: other (offsets, planning, WAL, commit)": trigger - add,
        "query run outside micro-batches": run_s - trigger,
        "spark stop": s["spark_stopped"] - s["query_done"],
        "exit (JVM and interpreter shutdown)": run["ended_at"] - s["spark_stopped"],
    }
    return {k: round(v, 3) for k, v in out.items()}


# -- fixtures: one warehouse per app, its input and its SSS checkpoint ------------------------------


class Fixture:
    name: str
    app_path: str
    app_name: str
    store: str
    query: str

    def __init__(self, work: Path, warehouse: str | None = None) -> None:
        from lakestate.warehouse import Warehouse

        base = work / self.name
        # ``warehouse``: elsewhere than under ``work`` (an ``s3://`` one: bench_object_store)
        self.wh = Warehouse(warehouse or base / "wh")
        self.state_dir = str(base / "state")
        self.sss_out = base / "sss" / "out"
        self.sss_checkpoint = base / "sss" / "checkpoint"
        self.topic_path = ""
        self.appended = 0
        self.built = False
        self.build_failed = False

    def append(self, n: int) -> None:
        raise NotImplementedError


class DedupFixture(Fixture):
    """The dedup app's input: ``bench_dedup``'s generator over ``total`` records (5%
    duplicates, no late records, 5% out of order by up to 2 minutes, timestamps spread
    over 50 minutes so that no id expires), appended in slices with delta-rs."""

    name = "dedup"
    app_path = DEDUP_APP
    query = "dedup"

    def __init__(
        self, work: Path, spark, total: int, seed: int, warehouse: str | None = None
    ) -> None:
        super().__init__(work, warehouse)
        from lakestate.io import logtable

        bd = bench_dedup()
        self.app_name = bd.APP.APP_NAME
        self.store = bd.APP.STORE
        self.output_topic = bd.APP.OUTPUT_TOPIC
        self.topic_path = logtable.create_topic(self.wh, bd.APP.INPUT_TOPIC, PARTITIONS)
        self.parts = bd.make_input(total, bd.Spec(dup_frac=0.05, late_frac=0.0), seed)
        self.pos = [0] * PARTITIONS

    def append(self, n: int) -> None:
        import pandas as pd
        import pyarrow as pa
        from deltalake import CommitProperties, write_deltalake
        from lakestate.io import logtable
        from lakestate.io.topic_records import RECORD_SCHEMA

        bd = bench_dedup()
        frames = []
        for p, part in enumerate(self.parts):
            take = n // PARTITIONS + (1 if p < n % PARTITIONS else 0)
            hi = min(part.n, self.pos[p] + take)
            if hi - self.pos[p] < take:
                raise ValueError(f"dedup input exhausted: partition {p} has {part.n} records")
            frames.append(bd.frame(part, self.pos[p], hi))
            self.pos[p] = hi
        data = pa.Table.from_pandas(
            pd.concat(frames, ignore_index=True),
            schema=RECORD_SCHEMA,
            preserve_index=False,
        )
        ends = {p: self.pos[p] for p in range(PARTITIONS)}
        metadata = {"userMetadata": logtable.ends_metadata(ends)}
        write_deltalake(
            self.topic_path,
            data,
            mode="append",
            commit_properties=CommitProperties(custom_metadata=metadata),
        )
        self.appended += n

    def distinct_ids(self) -> int:
        import numpy as np

        return sum(len(np.unique(part.slot[: self.pos[p]])) for p, part in enumerate(self.parts))


class DemoFixture(Fixture):
    """The demo app's input: ``bench_engine``'s writer; ``keys`` users ("user-<i>"), each
    once in the base (every amount positive: every key ends up in the state), then random
    users with amounts as in the demo's sample events (1 in 5 zero, filtered out)."""

    name = "demo"
    app_path = DEMO_APP
    query = "count"

    def __init__(self, work: Path, spark, keys: int) -> None:
        super().__init__(work)
        be = bench_engine()
        self.app_name = be.APP_NAME
        self.store = be.STORE
        self.output_topic = be.OUTPUT_TOPIC
        keymap = str(work / self.name / "keys.parquet")
        per_partition = be.write_keymap(spark, keymap, keys)
        self.keys = sum(per_partition.values())
        self.topic = be.Topic(spark, self.wh, keymap, per_partition)
        self.topic_path = self.topic.path

    def append_base(self) -> int:
        be = bench_engine()
        n = self.keys // PARTITIONS * PARTITIONS
        self.topic.append(n, sequential=True, amounts=be.POSITIVE_AMOUNTS)
        self.appended += n
        return n

    def append(self, n: int) -> None:
        self.topic.append(n)
        self.appended += n


_modules: dict[str, Any] = {}


def _load(name: str) -> Any:
    """A sibling benchmark script as a module (its helpers are reused, not copied)."""
    if name not in _modules:
        import importlib.util

        if name in sys.modules:
            _modules[name] = sys.modules[name]
        else:
            spec = importlib.util.spec_from_file_location(name, HERE / f"{name}.py")
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module
            spec.loader.exec_module(module)
            _modules[name] = module
    return _modules[name]


def bench_engine() -> Any:
    return _load("bench_engine")


def bench_dedup() -> Any:
    bench_engine()  # bench_dedup loads it under this name
    return _load("bench_dedup")


# -- the cases --------------------------------------------------------------------------------------


class Bench:
    def __init__(self, args: argparse.Namespace, work: Path, results: dict[str, Any]) -> None:
        self.args = args
        self.work = work
        self.results = results
        self.commands = Commands(work, args.master, args.transport)
        self._spark = None
        self._timer = None
        self.dedup: DedupFixture | None = None
        self.demo: DemoFixture | None = None

    # shared setup

    @property
    def spark(self):
        if self._spark is None:
            from lakestate.runtime.spark_session import get_spark

            log(f"starting this process's Spark ({self.args.master}) for set-up and cases b, d, e")
            self._spark = get_spark(self.args.master, app_name="bench-scheduled")
            self.results["spark_conf"] = {
                k: self._spark.conf.get(k, None)
                for k in (
                    "spark.master",
                    "spark.sql.shuffle.partitions",
                    "spark.driver.memory",
                    "spark.sql.streaming.stateStore.providerClass",
                    "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled",
                )
            }
        return self._spark

    @property
    def timer(self):
        """bench_engine's phase timer, installed in this process (cases b and d)."""
        if self._timer is None:
            self._timer = bench_engine().PhaseTimer()
            self._timer.install()
        return self._timer

    def stop(self) -> None:
        if self._spark is not None:
            from lakestate.runtime.spark_session import stop_spark

            stop_spark()
            self._spark = None

    def dedup_fixture(self) -> DedupFixture:
        if self.dedup is None:
            a = self.args
            total = a.state_keys + (a.rounds + 3) * a.new_records
            log(f"dedup input: generating {total:,} records")
            self.dedup = DedupFixture(self.work, self.spark, total, a.seed)
        return self.dedup

    def demo_fixture(self) -> DemoFixture:
        if self.demo is None:
            log(f"demo input: {self.args.state_keys:,} keys")
            self.demo = DemoFixture(self.work, self.spark, self.args.state_keys)
        return self.demo

    def build(self, fx: Fixture, with_sss: bool) -> dict[str, Any]:
        """The backlog runs (case c): the base input through a fresh lakestate process
        (instrumented) and, ``with_sss``, through the SSS query from an empty checkpoint."""
        out: dict[str, Any] = {}
        if fx.built:
            return out
        if fx.build_failed:
            raise RuntimeError(f"the {fx.name} app's state could not be built (see above)")
        fx.build_failed = True  # until it succeeds
        out.update(self.write_base(fx))
        n = out["records"]
        out["lakestate"] = self.commands.lakestate(fx, instrumented=True)
        log(f"  lakestate: {n:,} records in {out['lakestate']['wall_s']:.1f}s")
        if with_sss:
            out["sss"] = self.commands.sss(fx)
            log(f"  SSS: {out['sss']['records']:,} records in {out['sss']['wall_s']:.1f}s")
        fx.built, fx.build_failed = True, False
        return out

    def write_base(self, fx: Fixture) -> dict[str, Any]:
        """Case c's input: the base records (``--state-keys``) appended to ``fx``'s topic."""
        t = time.monotonic()
        if isinstance(fx, DemoFixture):
            n = fx.append_base()
        else:
            n = self.args.state_keys
            fx.append(n)
        seconds = round(time.monotonic() - t, 2)
        log(f"{fx.name}: wrote {n:,} records in {seconds:.1f}s; backlog runs")
        return {"input_write_s": seconds, "records": n}

    # c alone

    def backlog(self, fx: Fixture) -> dict[str, Any]:
        """Case c without a: the base input from empty state through a fresh lakestate
        process and a fresh SSS process, ``--backlog-repeat`` times each, interleaved (the
        order alternates), each repeat on a fresh copy of the input (lakestate: the
        warehouse as written, an empty state directory; SSS: an empty checkpoint)."""
        res: dict[str, Any] = {"load_start": loadavg(), **self.write_base(fx)}
        template = self.work / f"{fx.name}-input"
        shutil.copytree(fx.wh.root, template)
        runs: dict[str, list[dict[str, Any]]] = {"lakestate": [], "sss": []}
        for r in range(self.args.backlog_repeat):
            if r:
                shutil.rmtree(fx.wh.root)
                shutil.copytree(template, fx.wh.root)
                shutil.rmtree(fx.state_dir, ignore_errors=True)
                # the Spark executors' stores of this warehouse (executor-owned state)
                from lakestate.runtime.executor_stores import executor_state_dir

                shutil.rmtree(executor_state_dir(fx.wh.root), ignore_errors=True)
                fx.sss_out = fx.sss_out.with_name(f"out-{r}")
                fx.sss_checkpoint = fx.sss_checkpoint.with_name(f"checkpoint-{r}")
            for side in ("lakestate", "sss") if r % 2 == 0 else ("sss", "lakestate"):
                run = (
                    self.commands.lakestate(fx, instrumented=True)
                    if side == "lakestate"
                    else self.commands.sss(fx)
                )
                runs[side].append(run)
                log(
                    f"{fx.name} backlog {r + 1}: {side} {run['records']:,} records in "
                    f"{run['wall_s']:.1f}s (load {run['load_before'][0]:.1f} -> "
                    f"{run['load_after'][0]:.1f})"
                )
        fx.built = True
        res["runs"] = runs
        for side, side_runs in runs.items():  # the fastest run of each side is compared
            res[side] = min(side_runs, key=lambda x: x["wall_s"])
        res["check"] = self.check(fx)
        res["load_end"] = loadavg()
        return res

    # a + c

    def scheduled(self, fx: Fixture) -> dict[str, Any]:
        a = self.args
        res: dict[str, Any] = {"load_start": loadavg()}
        res["backlog"] = self.build(fx, with_sss=True)
        new: dict[str, list[dict[str, Any]]] = {"lakestate": [], "sss": []}
        for r in range(a.rounds):
            fx.append(a.new_records)
            order = ("lakestate", "sss") if r % 2 == 0 else ("sss", "lakestate")
            for side in order:
                run = self.commands.lakestate(fx) if side == "lakestate" else self.commands.sss(fx)
                new[side].append(run)
                log(
                    f"{fx.name} round {r + 1}, {a.new_records:,} new: {side} {run['wall_s']:.1f}s "
                    f"({run['records']} records; load {run['load_before'][0]:.1f})"
                )
        res["new_records"] = a.new_records
        res["new"] = new
        # One more round, lakestate under timing hooks: where its time goes.
        fx.append(a.new_records)
        res["new_instrumented"] = {
            "lakestate": self.commands.lakestate(fx, instrumented=True),
            "sss": self.commands.sss(fx),
        }
        log(
            f"{fx.name} instrumented round: lakestate "
            f"{res['new_instrumented']['lakestate']['wall_s']:.1f}s, "
            f"SSS {res['new_instrumented']['sss']['wall_s']:.1f}s"
        )
        idle: dict[str, list[dict[str, Any]]] = {"lakestate": [], "sss": []}
        for r in range(a.idle_rounds):
            order = ("sss", "lakestate") if r % 2 == 0 else ("lakestate", "sss")
            for side in order:
                run = self.commands.lakestate(fx) if side == "lakestate" else self.commands.sss(fx)
                idle[side].append(run)
                log(f"{fx.name} nothing new, run {r + 1}: {side} {run['wall_s']:.1f}s")
        res["idle"] = idle
        res["idle_instrumented"] = {"lakestate": self.commands.lakestate(fx, instrumented=True)}
        res["load_end"] = loadavg()
        for key, runs in (("new", new), ("idle", idle)):
            ls = median([x["wall_s"] for x in runs["lakestate"]])
            ss = median([x["wall_s"] for x in runs["sss"]])
            res[f"{key}_median_s"] = {"lakestate": ls, "sss": ss}
            res[f"{key}_ratio"] = ratio(ls, ss)
        res["check"] = self.check(fx)
        return res

    def check(self, fx: Fixture) -> dict[str, Any]:
        """Both sides' results agree: the dedup sinks hold one record per distinct id; the
        demo's latest counts sum to the same total on both sides."""
        from lakestate.read.spark_engine import state_frame
        from pyspark.sql import functions as F

        spark = self.spark
        try:
            if isinstance(fx, DedupFixture):
                ls = spark.read.format("delta").load(fx.wh.topic_path(fx.output_topic)).count()
                ss = spark.read.format("delta").load(str(fx.sss_out)).count()
                want = fx.distinct_ids()
                return {"lakestate": ls, "sss": ss, "expected": want, "ok": ls == ss == want}
            state = state_frame(spark, fx.wh, fx.app_name, fx.store)
            ls = state.agg(F.count("*"), F.sum(F.col("value").cast("long"))).first()
            ss = (
                spark.read.format("delta")
                .load(str(fx.sss_out))
                .groupBy("key")
                .agg(F.max("count").alias("count"))
                .agg(F.count("*"), F.sum("count"))
                .first()
            )
            return {
                "lakestate_keys_total": [ls[0], ls[1]],
                "sss_keys_total": [ss[0], ss[1]],
                "ok": list(ls) == list(ss),
            }
        except Exception as exc:
            return {"error": f"{type(exc).__name__}: {exc}"}

    # b

    def state_size(self) -> dict[str, Any]:
        """Per-batch seconds, 10k keys in state versus case a's ~1M (bench_engine's
        measure_interleaved: in this process, one batch per state per round)."""
        a = self.args
        be = bench_engine()
        from lakestate.warehouse import Warehouse

        big = self.demo_fixture()
        self.build(big, with_sss=False)
        res: dict[str, Any] = {"load_start": loadavg()}
        spark = self.spark
        small_wh = Warehouse(self.work / "small" / "wh")
        small_sd = str(self.work / "small" / "state")
        keymap = str(self.work / "small" / "keys.parquet")
        small = be.Topic(spark, small_wh, keymap, be.write_keymap(spark, keymap, a.small_keys))
        small.append(
            sum(small.keys.values()) // 2 * 2, sequential=True, amounts=be.POSITIVE_AMOUNTS
        )
        # Builds the small state, and warms this process's Python workers, so that neither
        # state's first measured batch pays for their start.
        be.run_engine(
            small_wh.root, small_sd, a.master, self.timer, echo=False, until_caught_up=True
        )
        be.run_engine(
            big.wh.root, big.state_dir, a.master, self.timer, echo=False, until_caught_up=True
        )
        cases = [
            ("small", f"{a.small_keys:,} keys", small, small_sd, a.small_keys),
            ("big", f"{big.keys:,} keys", big.topic, big.state_dir, big.keys),
            # Control: the big state, records drawn from as few keys as the small state's,
            # so that as many keys change per batch (state size alone).
            (
                "big_hot",
                f"{big.keys:,} keys, records of {a.small_keys:,} of them",
                big.topic,
                big.state_dir,
                a.small_keys,
            ),
        ]
        measured = be.measure_interleaved(
            cases, a.master, self.timer, a.batch_records, a.state_rounds, _NoSampler()
        )
        big.appended += 2 * a.batch_records * a.state_rounds
        res.update(measured)

        def seconds(case: str, phase: str) -> list[float | None]:
            # The phase timer's seconds (the runner's line rounds to 0.1 s).
            return [x.get("phases", {}).get(phase) for x in measured[case]["batches"]]

        def ratios(case: str, phase: str) -> list[float | None]:
            return [
                round(b / s, 3) if s and b else None
                for s, b in zip(seconds("small", phase), seconds(case, phase), strict=False)
            ]

        res["batch_s"] = {case: seconds(case, "batch") for case in ("small", "big", "big_hot")}
        res["ratios"] = ratios("big", "batch")
        res["ratios_with_planning"] = ratios("big", "cycle")
        res["ratios_cpu"] = ratios("big", "batch_cpu")
        res["ratios_control"] = ratios("big_hot", "batch")
        res["load_end"] = loadavg()
        return res

    # d

    def sql(self) -> dict[str, Any]:
        a = self.args
        be = bench_engine()
        from lakestate.checkpoint import progress
        from lakestate.io import delta_commits

        fx = self.demo_fixture()
        self.build(fx, with_sss=False)
        spark = self.spark
        res: dict[str, Any] = {"load_start": loadavg()}
        history = progress.read(fx.wh.progress_path(fx.app_name))
        done = max((rows[0].batch_id for rows in history.rows.values()), default=0)
        more = max(0, a.sql_batches - done)
        res["batches_before"] = done
        if more:
            log(f"sql: {more} more batches of {a.sql_batch_records:,} records (in this process)")
            fx.append(more * a.sql_batch_records)
            run = be.run_engine(
                fx.wh.root,
                fx.state_dir,
                a.master,
                self.timer,
                echo=False,
                until_caught_up=True,
                max_records=a.sql_batch_records // PARTITIONS,
            )
            seconds = [b["seconds"] for b in run["batches"]]
            res["batches_run"] = {
                "batches": len(run["batches"]),
                "wall_s": run["wall_s"],
                "median_batch_s": median(seconds),
            }
        history = progress.read(fx.wh.progress_path(fx.app_name))
        res["batches"] = {str(t): rows[0].batch_id for t, rows in history.rows.items()}
        changelog = fx.wh.changelog_path(fx.app_name, fx.store)

        def changelog_rows() -> dict[str, int]:
            table = delta_commits.open_table(changelog)
            return {
                "rows": table.to_pyarrow_dataset().count_rows(),
                "files": len(table.file_uris()),
            }

        plain = str(self.work / "plain-state")
        from lakestate.read.spark_engine import state_frame

        t = time.monotonic()
        state_frame(spark, fx.wh, fx.app_name, fx.store).select("key", "value", "ts").write.format(
            "delta"
        ).mode("overwrite").save(plain)
        res["plain_table"] = {"write_s": round(time.monotonic() - t, 2)}
        plain_table = delta_commits.open_table(plain)
        res["plain_table"].update(
            rows=plain_table.to_pyarrow_dataset().count_rows(), files=len(plain_table.file_uris())
        )
        res["query"] = LATEST_QUERY.format(table="<table>")
        res["uncompacted"] = {"changelog": changelog_rows(), **self.queries(fx, plain)}
        compacted = compaction_committed()
        res["compaction_committed"] = compacted
        if compacted:
            from lakestate import compact

            t = time.monotonic()
            result = compact(fx.wh, fx.app_name, say=lambda _msg: None)
            res["compaction"] = {
                "seconds": round(time.monotonic() - t, 2),
                "tasks": len(result.committed),
                "rows_before": sum(x.rows_before for x in result.tasks),
                "rows_after": sum(x.rows_after for x in result.tasks),
            }
            log(f"sql: compaction {res['compaction']}")
            res["compacted"] = {"changelog": changelog_rows(), **self.queries(fx, plain)}
        else:
            log("sql: lakestate.ops.compaction is not committed yet: measured without it")
        res["load_end"] = loadavg()
        return res

    def queries(self, fx: Fixture, plain: str) -> dict[str, Any]:
        """The latest-state query three ways, ``--sql-reps`` times each in turn (after one
        warm-up each): through ``state_frame`` (pin the tasks, read the changelog, latest
        row per key), through ``inspect.sql`` (what ``lakestate sql`` runs: every topic and
        store of the warehouse registered as a view, then the query), and over the plain
        Delta table."""
        from lakestate.read.spark_engine import sql as lakestate_sql
        from lakestate.read.spark_engine import state_frame
        from lakestate.read.views import view_name

        spark = self.spark
        view = view_name(f"{fx.app_name}__{fx.store}")

        def via_frame():
            state_frame(spark, fx.wh, fx.app_name, fx.store).createOrReplaceTempView("bench_state")
            return spark.sql(LATEST_QUERY.format(table="bench_state")).collect()

        def via_sql():
            return lakestate_sql(spark, fx.wh, LATEST_QUERY.format(table=view)).collect()

        def on_plain():
            spark.read.format("delta").load(plain).createOrReplaceTempView("bench_plain")
            return spark.sql(LATEST_QUERY.format(table="bench_plain")).collect()

        ways = {"state_frame": via_frame, "lakestate_sql": via_sql, "plain": on_plain}
        seconds: dict[str, list[float]] = {k: [] for k in ways}
        answers: dict[str, Any] = {}
        for name, fn in ways.items():
            answers[name] = [list(r) for r in fn()]
        for rep in range(self.args.sql_reps):
            names = list(ways) if rep % 2 == 0 else list(reversed(ways))
            for name in names:
                t = time.monotonic()
                ways[name]()
                seconds[name].append(round(time.monotonic() - t, 3))
        out: dict[str, Any] = {"seconds": seconds, "answers": answers}
        out["median_s"] = {k: median(v) for k, v in seconds.items()}
        out["ratio"] = ratio(out["median_s"]["state_frame"], out["median_s"]["plain"])
        out["ratio_lakestate_sql"] = ratio(
            out["median_s"]["lakestate_sql"], out["median_s"]["plain"]
        )
        out["same_answer"] = answers["state_frame"] == answers["plain"] == answers["lakestate_sql"]
        log(f"sql: medians {out['median_s']} (same answer: {out['same_answer']})")
        return out

    # e

    def restore(self) -> dict[str, Any]:
        res: dict[str, Any] = {"load_start": loadavg()}
        fx = self.demo_fixture()
        self.build(fx, with_sss=False)
        res["demo_in_process"] = self.restore_in_process(fx)
        dedup = self.dedup
        if dedup is not None and dedup.built:
            res["dedup_in_process"] = self.restore_in_process(dedup)
            # The same wiped, in a fresh lakestate run (Spark starts beside the restore). New
            # records: a run that finds nothing new does not open its stores.
            dedup.append(self.args.new_records)
            shutil.rmtree(Path(dedup.state_dir) / dedup.app_name, ignore_errors=True)
            run = self.commands.lakestate(dedup, instrumented=True)
            rows = sum(run.get("restored_rows", {}).values())
            recover = run["phases"]["_recover"]
            run["rows"] = rows
            run["rows_per_s_of_recover"] = round(rows / recover) if recover else None
            res["dedup_fresh_process"] = run
            log(f"restore: dedup, fresh process: {rows:,} rows, recovery {recover:.2f}s")
        res["load_end"] = loadavg()
        return res

    def restore_in_process(self, fx: Fixture) -> dict[str, Any]:
        """Each task of ``fx``'s app wiped and restored from its changelog in this process
        (``recovery.restore``), timed, with the changelog read and the local store writes
        apart."""
        from lakestate.app import load_app
        from lakestate.checkpoint.layout import ensure_layout
        from lakestate.checkpoint.standing import where_tasks_stand
        from lakestate.restore import recovery
        from lakestate.state.base import isolation_for

        app = load_app(fx.app_path)
        layout = ensure_layout(app, fx.wh)
        tasks = layout.tasks()
        where = where_tasks_stand(layout, tasks)
        per_task = []
        for task in tasks:
            events: list[dict[str, Any]] = []
            undo = install_hooks(
                [
                    ("lakestate.checkpoint.changelog", None, "read_state", "read"),
                    ("lakestate.checkpoint.changelog", None, "restore_into", "write"),
                    ("lakestate.checkpoint.changelog", None, "read_live", "read"),
                    ("lakestate.restore.recovery", None, "load", "write"),
                ],
                events,
            )
            try:
                t = time.monotonic()
                rows = recovery.restore(
                    layout,
                    task,
                    where.committed[task],
                    fx.state_dir,
                    isolation_for(app.config),
                    lambda _msg: None,
                    "wiped by the benchmark",
                )
                seconds = time.monotonic() - t
            finally:
                undo()
            read = sum(e["end"] - e["start"] for e in events if e["label"] == "read")
            write = sum(e["end"] - e["start"] for e in events if e["label"] == "write")
            per_task.append(
                {
                    "task": str(task),
                    "batch": where.committed[task].batch_id,
                    "rows": rows,
                    "seconds": round(seconds, 3),
                    "read_changelog_s": round(read, 3),
                    "write_local_store_s": round(write, 3),
                    "other_s": round(seconds - read - write, 3),
                    "rows_per_s": round(rows / seconds),
                }
            )
            log(f"restore: {fx.name} task {task}: {rows:,} rows in {seconds:.2f}s")
        from lakestate.io import delta_commits

        changelog = fx.wh.changelog_path(fx.app_name, fx.store)
        rows = sum(t["rows"] for t in per_task)
        seconds = sum(t["seconds"] for t in per_task)
        return {
            "tasks": per_task,
            "rows": rows,
            "changelog_rows": delta_commits.open_table(changelog).to_pyarrow_dataset().count_rows(),
            "seconds": round(seconds, 3),
            "rows_per_s": round(rows / seconds) if seconds else None,
        }


class _NoSampler:
    """Stands in for bench_engine's MemorySampler (memory is not measured here)."""

    @contextlib.contextmanager
    def in_phase(self, _phase: str):
        yield


def lib_changes() -> list[str]:
    """The engine's uncommitted changes in this checkout (``git status`` of lib/): other
    engineers work in it, and the fresh processes run what is there."""
    try:
        out = subprocess.run(
            ["git", "status", "--porcelain", "--", "lib"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout
    except Exception:
        return []
    return [line.strip() for line in out.splitlines() if line.strip()]


def snapshot_engine(work: Path, which: str) -> dict[str, Any]:
    """The engine to measure. ``head``: lib/ as committed at HEAD, extracted into ``work``
    and put first on the path of this process and of every process it starts (through
    ``PYTHONPATH``, which Spark passes on to its Python workers), so that what others are
    editing in this checkout while the benchmark runs is not measured half-way; ``tree``:
    the checkout's lib/ as it is (the venv's editable install)."""
    import io
    import tarfile

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()

    head = git("rev-parse", "HEAD")
    if which == "tree":
        return {"engine": "working tree", "head": head, "lib_changes": lib_changes()}
    dest = work / "engine"
    dest.mkdir(parents=True)
    archive = subprocess.run(
        ["git", "archive", "--format=tar", head, "lib"], cwd=ROOT, capture_output=True, check=True
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(dest, filter="data")
    lib = str(dest / "lib")
    sys.path.insert(0, lib)
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (lib, os.environ.get("PYTHONPATH")) if p)
    # Spark's jar cache of the checkout (the snapshot has no pyproject.toml to find it by).
    os.environ.setdefault("LAKESTATE_IVY_DIR", str(ROOT / ".cache" / "ivy"))
    return {
        "engine": f"lib/ of HEAD {head[:12]}",
        "head": head,
        "lib_changes_not_measured": lib_changes(),
    }


def compaction_committed() -> bool:
    """Whether ``lakestate.ops.compaction`` is in git history (not just in the tree)."""
    try:
        out = subprocess.run(
            ["git", "log", "--oneline", "-1", "--", "lib/lakestate/ops/compaction.py"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout.strip()
    except Exception:
        return False
    return bool(out)


# -- report ---------------------------------------------------------------------------------------


def verdict(ok: bool | None) -> str:
    return "-" if ok is None else ("met" if ok else "MISSED")


def fmt(v: Any, spec: str = ".2f") -> str:
    if v is None:
        return "-"
    if isinstance(v, str):
        return v
    return format(v, spec)


def print_table(title: str, rows: list[tuple[str, Any, Any, Any, str, str]]) -> None:
    header = ("", "lakestate", "baseline", "ratio", "target", "")
    cells = [header] + [(r[0], fmt(r[1]), fmt(r[2]), fmt(r[3], ".3f"), r[4], r[5]) for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(6)]
    print(f"\n{title}")
    for i, c in enumerate(cells):
        print(
            "  "
            + c[0].ljust(widths[0])
            + "".join("  " + c[j].rjust(widths[j]) for j in (1, 2, 3))
            + "  "
            + c[4].ljust(widths[4])
            + "  "
            + c[5]
        )
        if i == 0:
            print("  " + "-" * (sum(widths) + 10))


def print_phases(title: str, phases: dict[str, Any], wall: float) -> None:
    print(f"  {title} ({wall:.2f}s wall):")
    for k, v in phases.items():
        if not k.startswith("_") and (v or k.startswith(("startup", "exit"))):
            print(f"    {v:>7.2f}s  {k}")
    extra = [
        f"{k[1:].replace('_', ' ')} {v:.2f}s"
        for k, v in phases.items()
        if k.startswith("_background") and v
    ]
    if extra:
        print(f"    in the background, overlapping the above: {', '.join(extra)}")


def report_scheduled(app: str, r: dict[str, Any], load: str) -> None:
    rows = []
    for key, label in (("new", f"{r['new_records']:,} new records"), ("idle", "nothing new")):
        m = r[f"{key}_median_s"]
        q = r[f"{key}_ratio"]
        rows.append(
            (
                f"{label}: wall s, median of {len(r[key]['lakestate'])}",
                m["lakestate"],
                m["sss"],
                q,
                f"<= {TARGET_SCHEDULED}",
                verdict(None if q is None else q <= TARGET_SCHEDULED),
            )
        )
        walls = {side: ", ".join(f"{x['wall_s']:.1f}" for x in r[key][side]) for side in r[key]}
        rows.append(("  each run", walls["lakestate"], walls["sss"], None, "", ""))
    print_table(f"a. scheduled run, {app} app vs SSS (baseline), fresh processes; {load}", rows)
    ins = r["new_instrumented"]
    print_phases(
        f"lakestate, {r['new_records']:,} new records, under timing hooks",
        ins["lakestate"]["phases"],
        ins["lakestate"]["wall_s"],
    )
    print_phases("SSS, the same round", ins["sss"]["phases"], ins["sss"]["wall_s"])
    idle = r["idle_instrumented"]["lakestate"]
    print_phases("lakestate, nothing new, under timing hooks", idle["phases"], idle["wall_s"])
    print(f"  check: {r['check']}")


def report_backlog(app: str, b: dict[str, Any], load: str) -> None:
    ls, ss = b["lakestate"], b.get("sss") or {}
    ls_rate = ls["records"] / ls["wall_s"] if ls.get("records") else None
    ss_rate = ss["records"] / ss["wall_s"] if ss.get("records") else None
    r = ratio(ls_rate, ss_rate)
    rows = [
        ("records", f"{ls.get('records') or 0:,}", f"{ss.get('records') or 0:,}", None, "", ""),
        ("wall s (fresh process)", ls["wall_s"], ss.get("wall_s"), None, "", ""),
        (
            "records/s",
            f"{ls_rate:,.0f}" if ls_rate else None,
            f"{ss_rate:,.0f}" if ss_rate else None,
            r,
            f">= {TARGET_BACKLOG}",
            verdict(None if r is None else r >= TARGET_BACKLOG),
        ),
    ]
    # Every run of each side (case c alone repeats them): wall s (1-minute load before -> after)
    each = {
        side: ", ".join(
            f"{x['wall_s']:.1f} ({x['load_before'][0]:.1f}->{x['load_after'][0]:.1f})"
            for x in (b.get("runs", {}).get(side) or [x for x in (b.get(side),) if x])
        )
        for side in ("lakestate", "sss")
    }
    rows.append(
        ("  each run: wall s (load before->after)", each["lakestate"], each["sss"], None, "", "")
    )
    runs = b.get("runs") or {}
    pairs = list(zip(runs.get("lakestate", []), runs.get("sss", []), strict=False))
    if len(pairs) > 1:  # records/s ratio of each interleaved pair: less exposed to the load
        each_ratio = ", ".join(f"{s_['wall_s'] / l_['wall_s']:.2f}" for l_, s_ in pairs)
        rows.append(("  records/s ratio of each pair", each_ratio, "", None, "", ""))
    transport = ls.get("transport") or "the CLI's choice"
    print_table(
        f"c. backlog, {app} app (transport: {transport}) vs SSS (baseline), from empty state, "
        f"the fastest run of each side; {load}",
        rows,
    )
    if b.get("check"):
        print(f"  check: {b['check']}")
    print_phases("lakestate: where the time goes", ls["phases"], ls["wall_s"])
    if ss:
        print_phases("SSS: where the time goes", ss["phases"], ss["wall_s"])


def report_state(r: dict[str, Any], load: str) -> None:
    rows = []
    secs = r["batch_s"]
    for i, q in enumerate(r["ratios"]):
        rows.append(
            (
                f"round {i + 1}: batch s, {r['big']['key_pool']:,} keys (lakestate) vs "
                f"{r['small']['key_pool']:,} keys (baseline)",
                secs["big"][i],
                secs["small"][i],
                q,
                f"<= {TARGET_STATE}",
                verdict(None if q is None else q <= TARGET_STATE),
            )
        )
    for key, label in (
        ("ratios_with_planning", "ratios with planning included"),
        ("ratios_cpu", "ratios of CPU seconds (driver + JVM + workers)"),
        ("ratios_control", f"control: {r['big_hot']['key_pool']:,} keys changing in the big state"),
    ):
        rows.append((label, ", ".join(fmt(x, ".2f") for x in r[key]), "", None, "", ""))
    print_table(
        f"b. state size: {r['small']['batch_records']:,}-record batches of the demo app, in "
        f"this process; {load}",
        rows,
    )


def report_sql(r: dict[str, Any], load: str) -> None:
    rows = []
    for key, label in (("uncompacted", "not compacted"), ("compacted", "compacted")):
        if key not in r:
            continue
        q = r[key]
        m = q["median_s"]
        rows.append(
            (
                f"{label} ({q['changelog']['rows']:,} changelog rows, "
                f"{q['changelog']['files']} files): state_frame + query, s",
                m["state_frame"],
                m["plain"],
                q["ratio"],
                f"<= {TARGET_SQL}",
                verdict(q["ratio"] <= TARGET_SQL)
                if key == "compacted" or "compacted" not in r
                else "",
            )
        )
        rows.append(
            (
                "  through inspect.sql (the views it names)",
                m["lakestate_sql"],
                m["plain"],
                q["ratio_lakestate_sql"],
                "",
                "",
            )
        )
        rows.append(("  same answer", str(q["same_answer"]), "", None, "", ""))
    note = "" if r["compaction_committed"] else " (compaction not committed yet: not compacted)"
    print_table(
        f"d. SQL, latest state of the demo store after batch {max(r['batches'].values())} "
        f"vs a plain Delta table of {r['plain_table']['rows']:,} rows{note}; {load}",
        rows,
    )


def report_restore(r: dict[str, Any], load: str) -> None:
    rows = []
    for app in ("demo", "dedup"):
        d = r.get(f"{app}_in_process")
        if not d:
            continue
        rows.append(
            (
                f"{app}, each task wiped, recovery.restore in this process: {d['rows']:,} rows "
                f"(changelog {d['changelog_rows']:,} rows), rows/s",
                d["rows_per_s"],
                None,
                None,
                f">= {TARGET_RESTORE:,}",
                verdict(d["rows_per_s"] >= TARGET_RESTORE),
            )
        )
        for t in d["tasks"]:
            rows.append(
                (
                    f"  task {t['task']}: {t['rows']:,} rows in {t['seconds']:.2f}s "
                    f"(read {t['read_changelog_s']:.2f}, write {t['write_local_store_s']:.2f}, "
                    f"open, RocksDB commit, close {t['other_s']:.2f})",
                    t["rows_per_s"],
                    None,
                    None,
                    "",
                    "",
                )
            )
    f = r.get("dedup_fresh_process")
    if f:
        ok = f["rows_per_s_of_recover"] is not None and f["rows_per_s_of_recover"] >= TARGET_RESTORE
        ph = f["phases"]
        rows.append(
            (
                f"dedup, state dir deleted, fresh lakestate run ({f['wall_s']:.1f}s): "
                f"{f['rows']:,} rows, rows/s of its recovery ({ph['_recover']:.2f}s: read "
                f"{ph['  restore: read the changelog']:.2f}, write "
                f"{ph['  restore: write the local store']:.2f}; Spark starting beside it)",
                f["rows_per_s_of_recover"],
                None,
                None,
                f">= {TARGET_RESTORE:,}",
                verdict(ok),
            )
        )
    print_table(
        f"e. restore; {load}", [(k, fmt(v, ",.0f"), w, x, t, o) for k, v, w, x, t, o in rows]
    )


# Phases of an instrumented lakestate run that are Spark's under this design: its start
# (overlapping recovery), the Delta read of the input, and the one processing job.
# A point read of a RocksDB key not in memory, 1M keys (measured apart, 2026-11-24).
RANDOM_READ_S = 2e-6
SPARK_WAIT = "waiting for Spark to be up (it starts in the background)"
SPARK_READ = "read: the input's DataFrame (Delta snapshot of the log table)"
SPARK_JOB = "process: scan, route, Python workers (mapInArrow), rows to the driver"
LOCATED_JOB = "process on the executors: each task reads its input, processes"
EXECUTOR_FILES = "the executors write the output and changelog files"
INPROCESS_READ = "in process: read the task's ranges (delta-rs)"
INPROCESS_PROCESS = "in process: process_task in the driver"
PREPARE = "prepare (tables, tasks)"


def report_floors(results: dict[str, Any]) -> None:
    """For every target not met: the floor the measured phases put under it in this design,
    whether that floor rules the target out, and what would change it."""
    cases = results.get("cases", {})
    lines: list[str] = []
    for app, r in sorted(cases.get("a", {}).items()):
        q = r.get("new_ratio")
        if q is None or q <= TARGET_SCHEDULED:
            continue
        ins = r["new_instrumented"]
        ph, sss = ins["lakestate"]["phases"], ins["sss"]["wall_s"]
        if SPARK_WAIT not in ph:  # the in-process transport: no JVM to put a floor under
            lines.append(
                f"a. {app}: {ins['lakestate']['wall_s']:.1f}s in process (no JVM) against SSS's "
                f"{sss:.1f}s: not a floor of the design; its phases above say where it went."
            )
            continue
        floor = ph[SPARK_WAIT] + ph[SPARK_READ] + ph[SPARK_JOB]
        lines.append(
            f"a. {app}: Spark's start {ph[SPARK_WAIT]:.1f}s + the Delta read {ph[SPARK_READ]:.1f}s "
            f"+ the one processing job {ph[SPARK_JOB]:.1f}s = {floor:.1f}s = "
            f"{floor / sss:.2f}x SSS's run ({sss:.1f}s) against a target of {TARGET_SCHEDULED}x: "
            + (
                "ruled out while every run starts a JVM and runs a Spark job. "
                if floor / sss > TARGET_SCHEDULED
                else "not ruled out by the floor: the rest is overhead to remove. "
            )
            + "What would change it: a higher lakestate.inprocess.max.records (this run went "
            "to Spark; a run at or under it starts no JVM)."
        )
    for app, b in sorted(cases.get("c", {}).items()):
        ls, ss = b.get("lakestate") or {}, b.get("sss") or {}
        if not ls.get("records") or not ss.get("records"):
            continue
        q = (ls["records"] / ls["wall_s"]) / (ss["records"] / ss["wall_s"])
        if q >= TARGET_BACKLOG:
            continue
        ph = ls["phases"]
        if ph.get(INPROCESS_PROCESS):  # the in-process transport (its hook ran)
            floor = ph[INPROCESS_READ] + ph[INPROCESS_PROCESS]
            best = (ls["records"] / floor) / (ss["records"] / ss["wall_s"])
            spark = ph.get(SPARK_WAIT, 0.0) + ph.get(PREPARE, 0.0)
            lines.append(
                f"c. {app}: in process (no Spark job): the delta-rs read {ph[INPROCESS_READ]:.1f}s "
                f"+ process_task in the driver {ph[INPROCESS_PROCESS]:.1f}s (CPython per record, "
                f"the tasks one after another) = {floor:.1f}s for {ls['records']:,} records: at "
                f"best {best:.2f}x SSS's records/s against a target of {TARGET_BACKLOG}x: "
                + (
                    "ruled out while one process runs the tasks one after another. What would "
                    "change it: the tasks processed in parallel, a process per core (each has "
                    "its own store and input); columnar operators."
                    if best < TARGET_BACKLOG
                    else f"not ruled out by the floor. The rest is mostly the app's first run "
                    f"creating its tables through Spark ({spark:.1f}s waiting for Spark and "
                    "preparing), which a later run does not pay. What would change it: tables "
                    "created with delta-rs, no JVM on a first run either."
                )
            )
            continue
        if ph.get(LOCATED_JOB):  # the executors own the stores: their own reads and files
            floor = ph[SPARK_WAIT] + ph[LOCATED_JOB] + ph.get(EXECUTOR_FILES, 0.0)
            best = (ls["records"] / floor) / (ss["records"] / ss["wall_s"])
            lines.append(
                f"c. {app}: Spark's start {ph[SPARK_WAIT]:.1f}s + the processing job on the "
                f"executors {ph[LOCATED_JOB]:.1f}s + their file writes "
                f"{ph.get(EXECUTOR_FILES, 0.0):.1f}s = {floor:.1f}s for {ls['records']:,} "
                f"records: at best {best:.2f}x SSS's records/s against a target of "
                f"{TARGET_BACKLOG}x: "
                + (
                    "ruled out while each record goes through CPython processors, two tasks "
                    "on two cores."
                    if best < TARGET_BACKLOG
                    else "not ruled out by the floor: the rest is overhead to remove."
                )
            )
            continue
        floor = ph[SPARK_WAIT] + ph[SPARK_JOB]
        best = (ls["records"] / floor) / (ss["records"] / ss["wall_s"])
        lines.append(
            f"c. {app}: Spark's start {ph[SPARK_WAIT]:.1f}s + the processing job "
            f"{ph[SPARK_JOB]:.1f}s (CPython per record in the workers, rows to the driver) = "
            f"{floor:.1f}s for {ls['records']:,} records: at best {best:.2f}x SSS's records/s "
            f"against a target of {TARGET_BACKLOG}x: "
            + (
                "ruled out while each record goes through CPython processors and back to the "
                "driver. "
                if best < TARGET_BACKLOG
                else "not ruled out by the floor: the rest is overhead to remove. "
            )
            + f"Besides, Spark's Delta snapshot of the input took {ph.get(SPARK_READ, 0.0):.1f}s. "
            "What would change it: the executors owning the stores (the default, "
            "lakestate.spark.state.owner auto): the tasks reading their own input with "
            "delta-rs where they run (runtime/spark_located.py) instead of Spark's snapshot, "
            "scan and shuffle; the output kept on the executors instead of collected to the "
            "driver. (On a local master a run goes in process at any size by default.)"
        )
    b = cases.get("b")
    if b and any(q is None or q > TARGET_STATE for q in b["ratios"]):
        args = results.get("args", {})
        n, big, small = args["batch_records"], args["state_keys"], args["small_keys"]
        # Keys a batch changes: n records drawn uniformly from each state's keys.
        changed_big = big * (1 - (1 - 1 / big) ** n)
        changed_small = small * (1 - (1 - 1 / small) ** n)
        small_s = min(x for x in b["batch_s"]["small"] if x)
        reads = (changed_big - changed_small) * RANDOM_READ_S
        lines.append(
            f"b. the big state's batches change {changed_big:,.0f} keys against "
            f"{changed_small:,.0f} (the same {n:,} records drawn from {big:,} keys instead of "
            f"{small:,}), and a batch does per changed key what the design asks (a store read "
            "and write, a staged entry, a changelog row). The control, the same records "
            f"drawn from {small:,} keys of the big state, gives "
            f"{', '.join(fmt(x, '.2f') for x in b['ratios_control'])}: what the state's size "
            "alone costs. The floor: a point read of a key not in memory costs about "
            f"{RANDOM_READ_S * 1e6:.0f} us on 1M keys (measured apart, 2026-11-24), so the extra "
            f"keys' reads alone add {reads:.2f}s to the small state's {small_s:.2f}s batch: "
            f"at least {(small_s + reads) / small_s:.2f}x before their writes and changelog rows"
            + (
                ", which rules the target out for batches that change more keys. "
                if (small_s + reads) / small_s > TARGET_STATE
                else ". "
            )
            + "What would change it: nothing in this design (a changelog row per changed key "
            "is its definition); the control is the state-size figure."
        )
    d = cases.get("d")
    q = (d or {}).get("compacted", {}).get("ratio")
    if q is not None and q > TARGET_SQL:
        m = d["compacted"]["median_s"]
        lines.append(
            f"d. the view {m['state_frame']:.2f}s against the plain table {m['plain']:.2f}s: "
            "what remains is Spark planning and running the view's plan over the snapshot."
        )
    e = cases.get("e") or {}
    for app in ("demo", "dedup"):
        x = e.get(f"{app}_in_process")
        if not x or x["rows_per_s"] >= TARGET_RESTORE:
            continue
        write = sum(t["write_local_store_s"] for t in x["tasks"])
        read = sum(t["read_changelog_s"] for t in x["tasks"])
        lines.append(
            f"e. {app}: reading {read:.2f}s, writing the local store {write:.2f}s (an id entry, "
            f"a time-index entry and the count per id), the rest {x['seconds'] - read - write:.2f}s: "
            f"writing alone gives {x['rows'] / write:,.0f} rows/s, so not a floor of the design. "
            "What would change it: restoring the tasks in parallel (one per core)."
        )
    if lines:
        print("\nTargets not met: the measured floor, and what would change it")
        for line in lines:
            print("  " + line)


def load_text(r: dict[str, Any]) -> str:
    a, b = r.get("load_start"), r.get("load_end")
    if not a or not b:
        return ""
    return f"load average {a[0]:.1f}/{a[1]:.1f}/{a[2]:.1f} -> {b[0]:.1f}/{b[1]:.1f}/{b[2]:.1f}"


def report(results: dict[str, Any]) -> None:
    cases = results.get("cases", {})
    for app in ("dedup", "demo"):
        r = cases.get("a", {}).get(app)
        if r:
            report_scheduled(app, r, load_text(r))
    for app in ("dedup", "demo"):
        r = cases.get("c", {}).get(app)
        if r and r.get("lakestate"):
            report_backlog(app, r, load_text(cases.get("a", {}).get(app, r)))
    if cases.get("b"):
        report_state(cases["b"], load_text(cases["b"]))
    if cases.get("d"):
        report_sql(cases["d"], load_text(cases["d"]))
    if cases.get("e"):
        report_restore(cases["e"], load_text(cases["e"]))
    report_floors(results)
    for name, err in results.get("errors", {}).items():
        print(f"\nERROR in case {name}: {err['error']}")
    print()


# -- main -----------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--case",
        action="append",
        choices=("a", "b", "c", "d", "e", "all"),
        help="the cases to run (repeatable; default all; a includes c, whose state build it "
        "is; c alone runs only the backlogs)",
    )
    p.add_argument("--quick", action="store_true", help="small sizes: a check in a few minutes")
    p.add_argument("--state-keys", type=int, help="keys (ids) in state, and case c's records (1M)")
    p.add_argument("--new-records", type=int, help="records per scheduled run (10k)")
    p.add_argument("--rounds", type=int, help="scheduled runs with new records per side (4)")
    p.add_argument("--idle-rounds", type=int, help="runs with nothing new per side (3)")
    p.add_argument("--small-keys", type=int, help="case b: keys of the small state (10k)")
    p.add_argument("--batch-records", type=int, help="case b: records per batch (50k)")
    p.add_argument("--state-rounds", type=int, help="case b: rounds (3)")
    p.add_argument("--sql-batches", type=int, help="case d: the store's batches (100)")
    p.add_argument("--sql-batch-records", type=int, help="case d: records per batch (10k)")
    p.add_argument("--sql-reps", type=int, help="case d: timed queries per way (5)")
    p.add_argument(
        "--engine",
        choices=("head", "tree"),
        default="head",
        help="measure lib/ as committed at HEAD (default) or the checkout as it is",
    )
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--master", default="local[2]", help="Spark's master, both sides")
    p.add_argument(
        "--transport",
        choices=("auto", "inprocess", "spark"),
        help="lakestate run's --transport in every lakestate run (default: not given, the "
        "CLI's choice; spark: through Spark on --master, as SSS is)",
    )
    p.add_argument(
        "--backlog-repeat",
        type=int,
        default=1,
        help="case c alone (without a): backlog runs per side, interleaved, each from empty state",
    )
    p.add_argument(
        "--driver-memory",
        default="3g",
        help="spark.driver.memory of every process, both sides (default 3g: with Spark's "
        "1g the demo app's first batch of 1M new keys fails, its 1M output and 1M changelog "
        "rows collected to the driver at once)",
    )
    p.add_argument("--keep", action="store_true", help="keep the temporary directory")
    p.add_argument("--json", default=str(DEFAULT_JSON), help="where to write the results")
    args = p.parse_args(argv)
    q = args.quick
    defaults = {
        "state_keys": 50_000 if q else 1_000_000,
        "new_records": 5_000 if q else 10_000,
        "rounds": 2 if q else 4,
        "idle_rounds": 1 if q else 3,
        "small_keys": 2_000 if q else 10_000,
        "batch_records": 10_000 if q else 50_000,
        "state_rounds": 2 if q else 3,
        "sql_batches": 12 if q else 100,
        "sql_batch_records": 2_000 if q else 10_000,
        "sql_reps": 2 if q else 5,
    }
    for key, value in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    cases = set(args.case or ["all"])
    args.cases = ["a", "b", "c", "d", "e"] if "all" in cases else sorted(cases)
    return args


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["_lakestate"]:
        code = child_lakestate(argv[1:])
        # The exit of lakestate.cli.entrypoint, what a user's command does: flush, then
        # os._exit (an interpreter teardown after delta-rs/pyarrow reads can abort with
        # "terminate called without an active exception", apache/arrow#34314; seen here
        # on the S3 warehouse, exit -6 after a run that had committed).
        import logging

        sys.stdout.flush()
        sys.stderr.flush()
        logging.shutdown()
        os._exit(code)
    if argv[:1] == ["_sss"]:
        return child_sss(argv[1:])
    if argv[:1] == ["--report"]:
        path = Path(argv[1]) if len(argv) > 1 else DEFAULT_JSON
        report(json.loads(path.read_text()))
        return 0
    args = parse_args(argv)
    import signal
    import warnings

    import common

    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    warnings.filterwarnings("ignore", message="Cannot infer the eval type from type hints")
    # The same confs on both sides: every process here starts Spark through
    # lakestate.runtime.spark_session.get_spark, which reads these.
    os.environ["LAKESTATE_SHUFFLE_PARTITIONS"] = SHUFFLE_PARTITIONS
    os.environ["LAKESTATE_DRIVER_MEMORY"] = args.driver_memory
    os.environ["LAKESTATE_SPARK_CONF"] = json.dumps(
        {"spark.sql.streaming.stateStore.providerClass": common.ROCKSDB_PROVIDER}
    )
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    began = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="lakestate-bench-scheduled-"))
    engine = snapshot_engine(work, args.engine)  # before anything imports lakestate
    import lakestate

    engine["imported_from"] = str(Path(lakestate.__file__).parent)
    results: dict[str, Any] = {
        "args": {k: v for k, v in vars(args).items() if k != "json"},
        "engine": engine,
        "environment": bench_engine().environment(),
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "load_start": loadavg(),
        "targets": {
            "a_scheduled_wall_ratio_max": TARGET_SCHEDULED,
            "b_state_ratio_max": TARGET_STATE,
            "c_backlog_rate_ratio_min": TARGET_BACKLOG,
            "d_sql_ratio_max": TARGET_SQL,
            "e_restore_rows_per_s_min": TARGET_RESTORE,
        },
        "cases": {},
        "errors": {},
    }
    out = Path(args.json)

    def save() -> None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(results, indent=2, default=str) + "\n")

    bench = Bench(args, work, results)
    log(f"cases {', '.join(args.cases)}; engine: {engine['engine']}; temporary directory {work}")
    try:
        for case in args.cases:
            if case == "c" and "a" in args.cases:
                continue  # measured with a
            log(f"== case {case} (load average {'/'.join(str(x) for x in loadavg())})")
            try:
                if case == "a":
                    a: dict[str, Any] = {}
                    c: dict[str, Any] = {}
                    results["cases"]["a"], results["cases"]["c"] = a, c
                    for fx in (bench.dedup_fixture(), bench.demo_fixture()):
                        a[fx.name] = bench.scheduled(fx)
                        c[fx.name] = a[fx.name].pop("backlog")
                        save()
                        report_scheduled(fx.name, a[fx.name], load_text(a[fx.name]))
                elif case == "c":  # alone: only the backlogs, --backlog-repeat times
                    results["cases"]["c"] = c = {}
                    for fx in (bench.dedup_fixture(), bench.demo_fixture()):
                        c[fx.name] = bench.backlog(fx)
                        save()
                        report_backlog(fx.name, c[fx.name], load_text(c[fx.name]))
                elif case == "b":
                    results["cases"]["b"] = bench.state_size()
                elif case == "d":
                    results["cases"]["d"] = bench.sql()
                elif case == "e":
                    results["cases"]["e"] = bench.restore()
            except Exception as exc:
                results["errors"][case] = {
                    "error": f"{type(exc).__name__}: {exc}",
                    "traceback": traceback.format_exc(),
                }
                log(f"case {case} FAILED: {type(exc).__name__}: {exc}")
            save()
    finally:
        bench.stop()
        results["load_end"] = loadavg()
        results["total_s"] = round(time.monotonic() - began, 1)
        if args.keep:
            log(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
        save()
    report(results)
    log(f"results written to {out}")
    return 0 if not results["errors"] else 1


if __name__ == "__main__":
    sys.exit(main())
