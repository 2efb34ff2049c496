"""Benchmark of a stream-stream inner join (issue 25, item 8): lakestate's ``KStream.join``
with ``JoinWindows`` against Spark Structured Streaming's stream-stream join with watermarks
on both sides, on the same two topics.

Run from the repository root::

    .venv/bin/python tests/benchmarks/bench_stream_join.py                  # 1M + 1M records
    .venv/bin/python tests/benchmarks/bench_stream_join.py --records 50000   # a quick check

Input (deterministic, ``--seed``): two topics of 2 partitions, ``join-left`` and
``join-right``, N records each, written with delta-rs in one commit per topic. Record ``i``
of a side has value ``i`` (its id), a key among N / 10 keys (``"k-<n>"``, uniform; Kafka's
partitioner on the key, so both sides are co-partitioned), and a timestamp rising evenly over
one hour plus up to 30 s of jitter (out of order by less than the grace). Each key thus has
about 10 records per side in the hour, and a record about 2 partners within the 6 minutes of
the join window on the other side (about 2N joined pairs).

Sides, each a fresh process on ``local[2]`` (the same Spark confs: 2 shuffle partitions):

- **lakestate**: ``lakestate run tests/benchmarks/apps/stream_join_bench.py --until-caught-up
  --transport inprocess`` (the 2N pending records are within ``lakestate.inprocess.max.
  records``, so ``auto`` picks the same: delta-rs reads, processing in the CLI's process, no
  JVM), under ``bench_scheduled``'s timing hooks: ``join(right, pair,
  JoinWindows.of_time_difference_and_grace(6 min, 1 min))`` -> ``join-pairs``.
- **SSS**: both log tables as Delta streams, each ``withWatermark(event time, 1 minute)``
  (the grace), joined on ``key`` and ``right time BETWEEN left time - 6 min AND left time +
  6 min`` (Kafka's inclusive bounds), to a Delta sink, ``Trigger.AvailableNow``, RocksDB
  state store provider (``--sss-state hdfs``: Spark's default in-memory one).

Printed: each side's wall time (process start to exit, JVM start included) and records/s
(2N / wall), CPU seconds of each process tree, the ratio lakestate / SSS (target >= 1.5),
lakestate's wall time (target <= 60 s), the joined pairs of each side and whether the sets of
(key, left id, right id) agree, and the load average (``uptime``) before and after each side.
Results go to ``tests/benchmarks/results/stream_join.json``. Not a test: pytest collects
``test_*.py`` only.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common import log, sibling  # tests/benchmarks/common.py (first on sys.path)

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
APP_PATH = str(HERE / "apps" / "stream_join_bench.py")
DEFAULT_JSON = HERE / "results" / "stream_join.json"
PARTITIONS = 2
T0_MS = 1_767_258_000_000
SPAN_MS = 3_600_000
JITTER_MS = 30_000
RECORDS_PER_KEY = 10
TARGET_RATIO = 1.5
TARGET_WALL_S = 60.0
TOPICS = ("join-left", "join-right")
OUTPUT_TOPIC = "join-pairs"


def uptime() -> str:
    """``uptime``'s line (the load averages of the shared machine)."""
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


# -- input ---------------------------------------------------------------------------------------


def write_side(wh: Any, topic: str, n: int, seed: int) -> dict[str, Any]:
    """Append ``n`` records (ids 0..n-1) to ``topic`` in one delta-rs commit."""
    import numpy as np
    import pyarrow as pa
    from deltalake import CommitProperties, write_deltalake
    from lakestate.io import logtable
    from lakestate.io.topic_records import RECORD_SCHEMA

    rng = np.random.default_rng(seed)
    keys = max(1, n // RECORDS_PER_KEY)
    texts = np.array([f'"k-{i}"' for i in range(keys)], dtype=object)
    part_of = sibling("bench_scheduled").bench_engine().partitions_of(texts.tolist(), PARTITIONS)
    key = rng.integers(0, keys, n)
    ts = T0_MS + (np.arange(n, dtype=np.int64) * SPAN_MS) // n + rng.integers(0, JITTER_MS, n)
    part = np.asarray(part_of)[key]
    offset = np.zeros(n, dtype=np.int64)
    for p in range(PARTITIONS):
        mask = part == p
        offset[mask] = np.arange(int(mask.sum()))
    table = pa.table(
        {
            "partition": pa.array(part, pa.int32()),
            "offset": pa.array(offset, pa.int64()),
            "timestamp": pa.array(ts, pa.int64()),
            "key": pa.array(texts[key].tolist(), pa.string()),
            "value": pa.array([str(i) for i in range(n)], pa.string()),
            "headers": pa.nulls(n, pa.string()),
        },
        schema=RECORD_SCHEMA,
    )
    ends = {p: int((part == p).sum()) for p in range(PARTITIONS)}
    path = logtable.create_topic(wh, topic, PARTITIONS)
    write_deltalake(
        path,
        table,
        mode="append",
        commit_properties=CommitProperties(
            custom_metadata={"userMetadata": logtable.ends_metadata(ends)}
        ),
    )
    return {"path": path, "records": n, "keys": keys}


def lakestate_pairs(path: str) -> set[tuple[str, int, int]]:
    """(key text, left id, right id) of the app's output topic (delta-rs, no Spark)."""
    from deltalake import DeltaTable

    t = DeltaTable(path).to_pyarrow_table(columns=["key", "value"])
    return {
        (k, *json.loads(v))
        for k, v in zip(t.column("key").to_pylist(), t.column("value").to_pylist(), strict=True)
    }


def sss_pairs(path: str) -> set[tuple[str, int, int]]:
    from deltalake import DeltaTable

    t = DeltaTable(path).to_pyarrow_table(columns=["key", "left", "right"])
    return set(
        zip(
            t.column("key").to_pylist(),
            t.column("left").to_pylist(),
            t.column("right").to_pylist(),
            strict=True,
        )
    )


# -- the measured processes ----------------------------------------------------------------------


def run_side(cmd: list[str], name: str, logs: Path) -> dict[str, Any]:
    """``bench_versioned.run_child`` (fresh process, CPU of its tree sampled), with
    ``uptime`` before and after."""
    before = uptime()
    run = sibling("bench_versioned").run_child(cmd, name, logs)
    run["uptime_before"], run["uptime_after"] = before, uptime()
    return run


def lakestate_side(wh_root: str, work: Path, master: str, logs: Path) -> dict[str, Any]:
    """A fresh ``lakestate run`` (bench_versioned's ``_lakestate`` child: the CLI under
    ``bench_scheduled``'s timing hooks)."""
    sch = sibling("bench_scheduled")
    events = logs / "lakestate-events.json"
    cmd = [sys.executable, str(HERE / "bench_versioned.py"), "_lakestate"]
    cmd += ["--events", str(events), "--", "--warehouse", wh_root, "--master", master]
    cmd += ["run", APP_PATH, "--until-caught-up", "--transport", "inprocess"]
    cmd += ["--state-dir", str(work / "state")]
    run = run_side(cmd, "lakestate", logs)
    text = run.pop("output")
    run["batches"] = [
        {"records": int(b[1]), "output": int(b[2]), "s": float(b[3])}
        for b in sch.BATCH_LINE.findall(text)
    ]
    run["first_line"] = text.splitlines()[0] if text else ""
    run["phases"] = sch.lakestate_phases(json.loads(events.read_text()), run)
    return run


def child_sss(argv: list[str]) -> int:
    """``_sss``: the stream-stream join with watermarks as a fresh process, until both
    topics are processed (AvailableNow)."""
    p = argparse.ArgumentParser(prog="bench_stream_join.py _sss")
    for name in ("--left", "--right", "--out", "--checkpoint", "--master", "--report"):
        p.add_argument(name, required=True)
    p.add_argument("--state", choices=("rocksdb", "hdfs"), default="rocksdb")
    args = p.parse_args(argv)
    import common
    from lakestate.runtime.spark_session import get_spark, stop_spark
    from pyspark.sql import functions as F

    started = time.monotonic()
    spark = get_spark(args.master, app_name="sss-stream-stream-join")
    if args.state == "rocksdb":
        spark.conf.set("spark.sql.streaming.stateStore.providerClass", common.ROCKSDB_PROVIDER)
    spark_started = time.monotonic()

    def side(path: str, name: str):
        return (
            spark.readStream.format("delta")
            .load(path)
            .select(
                F.col("key").alias(f"{name}_key"),
                F.col("value").cast("long").alias(name),
                F.timestamp_millis("timestamp").alias(f"{name}_time"),
            )
            .withWatermark(f"{name}_time", "1 minute")
        )

    left, right = side(args.left, "left"), side(args.right, "right")
    joined = left.join(
        right,
        F.expr(
            "left_key = right_key AND right_time >= left_time - INTERVAL 6 MINUTES "
            "AND right_time <= left_time + INTERVAL 6 MINUTES"
        ),
    ).select(F.col("left_key").alias("key"), "left", "right")
    query = (
        joined.writeStream.format("delta")
        .option("checkpointLocation", args.checkpoint)
        .trigger(availableNow=True)
        .start(args.out)
    )
    progress = common.await_query(query)
    done = time.monotonic()
    stop_spark()
    report = {
        "spark_start_s": round(spark_started - started, 2),
        "query_s": round(done - spark_started, 2),
        "micro_batches": [p.get("durationMs", {}) for p in progress],
    }
    Path(args.report).write_text(json.dumps(report))
    return 0


def sss_side(paths: dict[str, str], work: Path, args, logs: Path) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "_sss", "--left", paths["join-left"]]
    cmd += ["--right", paths["join-right"], "--out", str(work / "sss-out")]
    cmd += ["--checkpoint", str(work / "sss-cp"), "--master", args.master]
    cmd += ["--report", str(logs / "sss-report.json"), "--state", args.sss_state]
    run = run_side(cmd, "sss", logs)
    run.pop("output")
    run["phases"] = json.loads((logs / "sss-report.json").read_text())
    return run


# -- the parent ----------------------------------------------------------------------------------


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--records", type=int, default=1_000_000, help="records per side (1M)")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--master", default="local[2]")
    p.add_argument("--driver-memory", default="3g")
    p.add_argument("--sss-state", choices=("rocksdb", "hdfs"), default="rocksdb")
    p.add_argument("--no-sss", action="store_true", help="lakestate only (profiling runs)")
    p.add_argument("--keep", action="store_true", help="keep the temporary directory")
    p.add_argument("--json", default=str(DEFAULT_JSON))
    return p.parse_args(argv)


def report(r: dict[str, Any]) -> None:
    n = r["input"]["records_per_side"]
    print(
        f"\n{n} + {n} records, {r['input']['keys']} keys per side; inner join, 6 min, grace 1 min"
    )
    print(f"{'side':<40} {'wall s':>8} {'records/s':>10} {'pairs':>9}   CPU s: driver+JVM+workers")
    for name, label in (("lakestate", "lakestate run (in process)"), ("sss", "SSS stream-stream")):
        side = r.get(name)
        if not side:
            continue
        c = side.get("cpu_s") or {}
        print(
            f"{label:<40} {side['wall_s']:>8} {side['records_per_s']:>10} {side['pairs']:>9}   "
            f"{c.get('driver', 0):.1f} + {c.get('jvm', 0):.1f} + {c.get('workers', 0):.1f}"
        )
    lk = r["lakestate"]
    print(f"lakestate: {lk['first_line']}")
    print(f"lakestate: {len(lk['batches'])} batch(es): {lk['batches']}")
    sibling("bench_scheduled").print_phases("lakestate run by phase", lk["phases"], lk["wall_s"])
    if "sss" in r:
        ph = r["sss"]["phases"]
        print(
            f"SSS: Spark start {ph['spark_start_s']} s, query {ph['query_s']} s, "
            f"{len(ph['micro_batches'])} micro-batch(es)"
        )
        print(f"ratio lakestate / SSS (records/s): {r['ratio']} (target >= {TARGET_RATIO})")
        print(f"joined pairs agree (sets of (key, left, right)): {r['pairs_agree']}")
        if not r["pairs_agree"]:
            print(f"  only lakestate: {r['only_lakestate']}, only SSS: {r['only_sss']}")
    print(f"lakestate wall: {lk['wall_s']} s (target <= {TARGET_WALL_S:.0f} s)")
    for name in ("lakestate", "sss"):
        if name in r:
            print(
                f"uptime before/after {name}: {r[name]['uptime_before']} / {r[name]['uptime_after']}"
            )


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["_sss"]:
        return child_sss(argv[1:])
    args = parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="lakestate-bench-stream-join-"))
    os.environ.update(
        LAKESTATE_SHUFFLE_PARTITIONS="2",
        LAKESTATE_DRIVER_MEMORY=args.driver_memory,
        PYSPARK_PYTHON=sys.executable,
        PYSPARK_DRIVER_PYTHON=sys.executable,
    )
    from lakestate.warehouse import Warehouse

    results: dict[str, Any] = {"args": vars(args), "uptime_start": uptime()}
    logs = work / "logs"
    logs.mkdir()
    try:
        wh = Warehouse(str(work / "wh"))
        written = {t: write_side(wh, t, args.records, args.seed + i) for i, t in enumerate(TOPICS)}
        results["input"] = {"records_per_side": args.records, "keys": written["join-left"]["keys"]}
        log(f"lakestate: {uptime()}")
        lk = lakestate_side(wh.root, work, args.master, logs)
        got = lakestate_pairs(str(work / "wh" / "topics" / OUTPUT_TOPIC))
        lk.update(records_per_s=round(2 * args.records / lk["wall_s"]), pairs=len(got))
        results["lakestate"] = lk
        if not args.no_sss:
            log(f"SSS: {uptime()}")
            paths = {t: w["path"] for t, w in written.items()}
            sss = sss_side(paths, work, args, logs)
            theirs = sss_pairs(str(work / "sss-out"))
            sss.update(records_per_s=round(2 * args.records / sss["wall_s"]), pairs=len(theirs))
            results["sss"] = sss
            results["ratio"] = round(lk["records_per_s"] / sss["records_per_s"], 3)
            results["pairs_agree"] = got == theirs
            results["only_lakestate"] = sorted(got - theirs)[:5]
            results["only_sss"] = sorted(theirs - got)[:5]
    finally:
        results["uptime_end"] = uptime()
        if args.keep:
            log(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(results, indent=2, default=str) + "\n")
    report(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
