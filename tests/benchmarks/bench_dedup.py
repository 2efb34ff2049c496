"""Benchmark of KIP-655 deduplication (``deduplicate_by_key``): the test driver, the engine,
and Spark Structured Streaming's ``dropDuplicatesWithinWatermark`` on the same input.

Run from the repository root::

    .venv/bin/python tests/benchmarks/bench_dedup.py            # N = 1,000,000 input records
    .venv/bin/python tests/benchmarks/bench_dedup.py --quick    # N = 100,000: a fast check
    .venv/bin/python tests/benchmarks/bench_dedup.py --records 300000

The app is ``tests/benchmarks/apps/dedup_bench.py``: dedup-events -> deduplicate_by_key(1 hour)
-> dedup-unique; the key of every record is its deduplication id.

Input (the same generator for every part; exact counts are in the JSON): per partition, in
offset order, timestamps spread evenly over 50 minutes (less than the 1-hour interval, so
every id stays alive); 20% of the records repeat the id of an earlier record of their
partition (duplicates), 1% are *late* (timestamp older than stream time - 1 hour by 1 to 20
minutes; half with a fresh id, half repeating an earlier id), 5% of the others are out of
order by up to 2 minutes. With N = 1M: ~795k distinct ids, all alive at the end.

What it measures, printed as a table and written to ``tests/benchmarks/results/dedup.json``:

1. **Driver**: records/s of the app through ``lakestate.testing.TopologyTestDriver``
   (in-memory backend) on 200k records piped as one list (``pipe_record_list``; target >=
   300k records/s), and piped one ``pipe_input`` call at a time; the same list through a
   pass-through topology (``stream -> to``, no operator: the driver's own cost), and a bare
   Python loop of the least work per record (``bare_loop``); the output checked
   against a reference implementation of the KIP-655 semantics, and a cProfile of the
   driver per record (top functions by own time, lakestate functions by cumulative time).
   Also the engine's worker function (``process_task``, RocksDB store, one task, no Spark)
   on the first records of partition 0: the per-record cost inside the engine.
2. **Engine** on ``local[2]``: N records in 2 partitions, ``run_app(until_caught_up=True,
   max_records=500k per task)``: records/s of wall time; records forwarded, duplicates
   dropped and late records forwarded (sink count, and the metrics in the app's progress
   rows), checked against the reference; per-batch seconds by phase.
3. **Spark Structured Streaming** in the same session, same input table:
   ``readStream.format("delta")`` -> parse id and event time -> ``withWatermark(1 hour)``
   -> ``dropDuplicatesWithinWatermark(["id"])`` -> Delta sink, ``trigger(availableNow)``,
   RocksDB state store provider. By default its micro-batches are as many as the engine's
   batches (``maxFilesPerTrigger`` over an input written in equal commits); its records/s,
   rows kept, rows dropped by the watermark, and the ratio engine / SSS (target >= 1.0).
   Late records: SSS drops rows behind the watermark of the previous micro-batch; lakestate
   forwards a late record when the store holds no duplicate of it within the interval.

Memory (RSS of the process tree) and the load average are sampled throughout: other jobs
on the machine inflate every timing, so the load is printed with the results. Everything
lives in a temporary directory that is removed at the end (``--keep`` keeps it).
Helpers (memory sampler, phase timer, table printing) come from
``tests/benchmarks/bench_engine.py``.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import heapq
import importlib.util
import json
import os
import shutil
import sys
import tempfile
import time
import traceback
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import common  # tests/benchmarks/common.py (this directory is first on sys.path)
import numpy as np
import pandas as pd
import pyarrow as pa

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
APP_PATH = str(HERE / "apps" / "dedup_bench.py")
DEFAULT_JSON = HERE / "results" / "dedup.json"
PARTITIONS = 2
T0_MS = 1_700_000_000_000
INTERVAL_MS = 3_600_000  # the app's interval; SSS's watermark delay
SPAN_MS = 50 * 60_000  # timestamps of a partition spread over 50 minutes (< interval)
OOO_MAX_MS = 120_000  # out-of-order records: up to 2 minutes back
LATE_MIN_MS, LATE_MAX_MS = 60_000, 20 * 60_000  # late: 1-20 min older than time - interval
WARM_RECORDS = 100  # the first records of a partition are plain new ids
ROCKSDB_PROVIDER = common.ROCKSDB_PROVIDER
TARGET_DRIVER = 300_000
TARGET_RATIO_SSS = 1.0

NEW, DUP, LATE_NEW, LATE_DUP = 0, 1, 2, 3
ROLE_NAMES = ("new", "dup", "late_new", "late_dup")
ROLE_TAGS = ("n", "d", "ln", "ld")  # value {"o": offset, "r": tag}
TAG_ROLE = {t: ROLE_NAMES[i] for i, t in enumerate(ROLE_TAGS)}

METRIC_FORWARDED = "dedup-records-forwarded"
METRIC_DROPPED = "dedup-duplicates-dropped"
METRIC_LATE = "dedup-late-records-forwarded"
METRIC_SIZE = "dedup-store-size"


def _load_bench_engine():
    """``tests/benchmarks/bench_engine.py`` as a module (its helpers are reused, not copied)."""
    spec = importlib.util.spec_from_file_location("bench_engine", HERE / "bench_engine.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("bench_engine", module)
    spec.loader.exec_module(module)
    return module


be = _load_bench_engine()
log = be.log


def _app_module():
    spec = importlib.util.spec_from_file_location("dedup_bench_app", APP_PATH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


APP = _app_module()


# -- input generation -------------------------------------------------------------------------


@dataclass
class Spec:
    dup_frac: float = 0.20
    late_frac: float = 0.01
    ooo_frac: float = 0.05


@dataclass
class Part:
    """One partition's records in offset order. ``slot``: the id of each record as an index
    into the partition's fresh ids (0, 1, 2... in order of first appearance)."""

    partition: int
    role: np.ndarray  # int8, NEW/DUP/LATE_NEW/LATE_DUP
    ooo: np.ndarray  # bool: out of order (not late)
    slot: np.ndarray  # int64
    ts: np.ndarray  # int64, epoch ms
    fresh: int  # number of distinct ids
    ids: np.ndarray | None = None  # slot -> id number (the key is "id-<number>")

    @property
    def n(self) -> int:
        return len(self.role)

    def id_numbers(self) -> np.ndarray:
        return self.slot if self.ids is None else self.ids[self.slot]


def make_part(partition: int, n: int, spec: Spec, seed: int) -> Part:
    rng = np.random.default_rng(seed)
    role = np.zeros(n, dtype=np.int8)
    warm = min(n, WARM_RECORDS)
    positions = rng.permutation(np.arange(warm, n))
    n_late = round(n * spec.late_frac)
    n_dup = round(n * spec.dup_frac)
    late = positions[:n_late]
    role[positions[n_late : n_late + n_dup]] = DUP
    role[late[: n_late // 2]] = LATE_NEW
    role[late[n_late // 2 :]] = LATE_DUP
    fresh = (role == NEW) | (role == LATE_NEW)
    slot = np.full(n, -1, dtype=np.int64)
    slot[fresh] = np.arange(int(fresh.sum()))
    # A repeat takes the id of an earlier non-late new record, uniformly (warm ones included).
    pool = np.flatnonzero(role == NEW)
    repeats = np.flatnonzero((role == DUP) | (role == LATE_DUP))
    before = np.searchsorted(pool, repeats)  # >= WARM_RECORDS
    slot[repeats] = slot[pool[(rng.random(len(repeats)) * before).astype(np.int64)]]
    base = T0_MS + (np.arange(n, dtype=np.int64) * SPAN_MS) // max(n, 1)
    ts = base.copy()
    ooo = (role <= DUP) & (rng.random(n) < spec.ooo_frac)
    ooo[:warm] = False
    ts[ooo] -= rng.integers(1, OOO_MAX_MS + 1, int(ooo.sum()))
    is_late = role >= LATE_NEW
    ts[is_late] -= INTERVAL_MS + rng.integers(LATE_MIN_MS, LATE_MAX_MS + 1, int(is_late.sum()))
    return Part(partition, role, ooo, slot, ts, int(fresh.sum()))


def assign_ids(parts: list[Part]) -> None:
    """Give every partition's fresh ids numbers whose key ``"id-<number>"`` Kafka's
    partitioner sends to that partition (``partitions_of_texts``, spot-checked against
    ``lakestate.io.partitioner.partition_for``)."""
    from lakestate.io.partitioner import partition_for

    needed = {p.partition: p.fresh for p in parts}
    m = int(sum(needed.values()) * 1.1) + 1000
    while True:
        keys = [f'"id-{i}"' for i in range(m)]
        of = be.partitions_of(keys, PARTITIONS)
        pools = {p: np.flatnonzero(of == p) for p in needed}
        if all(len(pools[p]) >= k for p, k in needed.items()):
            break
        m = int(m * 1.2)
    for i in range(0, m, max(1, m // 300)):
        if partition_for(f"id-{i}", PARTITIONS) != of[i]:
            raise AssertionError(f"murmur2 mismatch for id-{i}")
    for part in parts:
        part.ids = pools[part.partition][: part.fresh].astype(np.int64)


def make_input(records: int, spec: Spec, seed: int) -> list[Part]:
    counts = [records // PARTITIONS + (1 if p < records % PARTITIONS else 0) for p in range(2)]
    parts = [make_part(p, n, spec, seed + 17 * p) for p, n in enumerate(counts)]
    assign_ids(parts)
    return parts


def summary(parts: list[Part]) -> dict[str, Any]:
    out: dict[str, Any] = {"records": sum(p.n for p in parts)}
    for i, name in enumerate(ROLE_NAMES):
        out[name] = int(sum(int((p.role == i).sum()) for p in parts))
    out["out_of_order"] = int(sum(int(p.ooo.sum()) for p in parts))
    out["distinct_ids"] = int(sum(p.fresh for p in parts))
    out["duplicates"] = out["records"] - out["distinct_ids"]
    return out


def reference(part: Part, interval: int = INTERVAL_MS) -> tuple[np.ndarray, np.ndarray, int]:
    """What KIP-655's ``deduplicate_by_key`` does (docs/guide.md "Deduplication"): a record is
    dropped when the store holds its id with |ts - stored ts| <= interval; ids older than
    stream time - interval are purged; a late record (older than stream time - interval)
    that is forwarded is not stored. Returns (forwarded, late) flags per record and the
    number of ids held at the end."""
    kept = np.zeros(part.n, dtype=bool)
    late = np.zeros(part.n, dtype=bool)
    store: dict[int, int] = {}
    heap: list[tuple[int, int]] = []
    stream_time = -1
    for i, (ident, ts) in enumerate(zip(part.slot.tolist(), part.ts.tolist(), strict=True)):
        if ts > stream_time:
            stream_time = ts
        cutoff = stream_time - interval
        while heap and heap[0][0] < cutoff:
            old_ts, old_id = heapq.heappop(heap)
            if store.get(old_id) == old_ts:
                del store[old_id]
        held = store.get(ident)
        if held is not None and abs(held - ts) <= interval:
            continue
        kept[i] = True
        if ts < cutoff:
            late[i] = True
            continue
        store[ident] = ts
        heapq.heappush(heap, (ts, ident))
    return kept, late, len(store)


def expected(parts: list[Part]) -> dict[str, Any]:
    forwarded = dropped = late_forwarded = size = 0
    per_role = dict.fromkeys(ROLE_NAMES, 0)
    for part in parts:
        kept, late, held = reference(part)
        forwarded += int(kept.sum())
        dropped += int((~kept).sum())
        late_forwarded += int(late.sum())
        size += held
        for i, name in enumerate(ROLE_NAMES):
            per_role[name] += int((kept & (part.role == i)).sum())
    return {
        "forwarded": forwarded,
        "duplicates_dropped": dropped,
        "late_forwarded": late_forwarded,
        "store_size": size,
        "kept_by_role": per_role,
    }


def frame(part: Part, lo: int, hi: int) -> pd.DataFrame:
    """Rows ``lo:hi`` of a partition as log-table rows (key and value as JSON text)."""
    ids = part.id_numbers()[lo:hi].tolist()
    roles = part.role[lo:hi].tolist()
    offsets = range(lo, hi)
    return pd.DataFrame(
        {
            "partition": np.full(hi - lo, part.partition, dtype=np.int32),
            "offset": np.arange(lo, hi, dtype=np.int64),
            "timestamp": part.ts[lo:hi],
            "key": [f'"id-{i}"' for i in ids],
            "value": [
                f'{{"o":{o},"r":"{ROLE_TAGS[r]}"}}' for o, r in zip(offsets, roles, strict=True)
            ],
            "headers": [None] * (hi - lo),
        }
    )


def write_input(spark, path: str, parts: list[Part], chunk_records: int, scratch: Path) -> int:
    """Append the records to the log table at ``path`` in commits of ``chunk_records``
    (split over the partitions, in offset order), one file per partition per commit, so
    that ``maxFilesPerTrigger`` sets SSS's micro-batch size. Each chunk goes through a
    Parquet file written with pyarrow (no large Spark tasks). Returns the commits written."""
    import pyarrow.parquet as pq
    from lakestate.io.logtable import ends_metadata
    from lakestate.runtime.spark_topics import spark_record_schema

    arrow_schema = pa.schema(
        [
            ("partition", pa.int32()),
            ("offset", pa.int64()),
            ("timestamp", pa.int64()),
            ("key", pa.string()),
            ("value", pa.string()),
            ("headers", pa.string()),
        ]
    )
    scratch.mkdir(parents=True, exist_ok=True)
    per_part = max(1, chunk_records // PARTITIONS)
    longest = max(p.n for p in parts)
    commits = 0
    for lo in range(0, longest, per_part):
        pdf = pd.concat(
            [frame(p, lo, min(p.n, lo + per_part)) for p in parts if lo < p.n],
            ignore_index=True,
        )
        file = scratch / f"chunk-{commits:05d}.parquet"
        pq.write_table(pa.Table.from_pandas(pdf, schema=arrow_schema, preserve_index=False), file)
        df = spark.read.schema(spark_record_schema()).parquet(str(file)).coalesce(1)
        ends = {p.partition: min(p.n, lo + per_part) for p in parts}
        # The end offsets in the commit, as lakestate's own appends record them.
        df.write.format("delta").mode("append").option("userMetadata", ends_metadata(ends)).save(
            path
        )
        file.unlink()
        commits += 1
    return commits


# -- 1: the test driver and the worker function -------------------------------------------------


def driver_inputs(part: Part) -> tuple[list, list, list]:
    keys = [f"id-{i}" for i in part.id_numbers().tolist()]
    values = [
        {"o": o, "r": ROLE_TAGS[r]} for o, r in zip(range(part.n), part.role.tolist(), strict=True)
    ]
    return keys, values, part.ts.tolist()


def run_driver(
    keys: list,
    values: list,
    stamps: list,
    profile: cProfile.Profile | None = None,
    one_by_one: bool = False,
    topology: Any = None,
):
    """Pipes the records through TopologyTestDriver: as one list (``pipe_record_list``, the
    TestRecords built before the clock starts) or one ``pipe_input`` call per record; through
    the app's topology, or ``topology`` (same input and output topics)."""
    from lakestate.testing import TestRecord, TopologyTestDriver

    topology = APP.app.topology if topology is None else topology
    with TopologyTestDriver(topology, {"application.id": APP.app.name}) as driver:
        topic = driver.create_input_topic(APP.INPUT_TOPIC)
        records = (
            None
            if one_by_one
            else [TestRecord(k, v, ts) for k, v, ts in zip(keys, values, stamps, strict=True)]
        )
        if profile is not None:
            profile.enable()
        started = time.perf_counter()
        if records is None:
            pipe = topic.pipe_input
            for key, value, ts in zip(keys, values, stamps, strict=True):
                pipe(key, value, ts)
        else:
            topic.pipe_record_list(records)
        seconds = time.perf_counter() - started
        if profile is not None:
            profile.disable()
        out = driver.create_output_topic(APP.OUTPUT_TOPIC).read_records_to_list()
        return seconds, len(out), driver.metrics()


def _rate(seconds: float, records: int) -> dict[str, Any]:
    return {
        "seconds": round(seconds, 3),
        "records_per_s": round(records / seconds),
        "us_per_record": round(seconds / records * 1e6, 2),
    }


def bare_loop(keys: list, values: list, stamps: list) -> tuple[float, int]:
    """The least per-record work of the driver's job, as one plain Python loop with the
    cyclic collector off: TestRecords in and out, a dict of id -> ts and a heap of (ts, id)
    for the store and its time index (no transaction, no purge), the key and value encoded
    as the sink must. What it forwards is not checked (the driver's output is)."""
    import gc
    import heapq

    import orjson
    from lakestate.records import Record
    from lakestate.testing import TestRecord

    encode_key = json.JSONEncoder(sort_keys=True, ensure_ascii=False, separators=(",", ":")).encode
    records = [TestRecord(k, v, ts) for k, v, ts in zip(keys, values, stamps, strict=True)]
    gc.disable()
    try:
        started = time.perf_counter()
        held: dict[Any, int] = {}
        index: list[tuple[int, Any]] = []
        out = []
        stream_time = 0
        for r in records:
            key, value, ts = r.key, r.value, r.timestamp
            stream_time = max(stream_time, ts)
            seen = held.get(key)
            if seen is not None and abs(seen - ts) <= INTERVAL_MS:
                continue
            record = Record(key, value, ts, None)
            encode_key(key), orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
            if ts >= stream_time - INTERVAL_MS:
                held[key] = ts
                heapq.heappush(index, (ts, key))
            out.append(TestRecord(record.key, record.value, record.timestamp, None))
        return time.perf_counter() - started, len(out)
    finally:
        gc.enable()


def per_record(rows: list[dict[str, Any]], records: int) -> list[dict[str, Any]]:
    for row in rows:
        for key in ("tottime_s", "cumtime_s"):
            row[key.replace("_s", "_us_per_record")] = round(row[key] / records * 1e6, 2)
    return rows


def measure_driver(args: argparse.Namespace) -> dict[str, Any]:
    part = make_part(0, args.driver_records, Spec(), seed=args.seed + 1000)
    keys, values, stamps = driver_inputs(part)
    want = expected([part])
    log(f"driver: {part.n:,} records through TopologyTestDriver (memory backend)")
    seconds, outputs, metrics = run_driver(keys, values, stamps)
    result: dict[str, Any] = {
        "records": part.n,
        "seconds": round(seconds, 3),
        "records_per_s": round(part.n / seconds),
        "us_per_record": round(seconds / part.n * 1e6, 2),
        "outputs": outputs,
        "metrics": metrics,
        "expected": want,
        "matches_reference": (
            outputs == want["forwarded"]
            and metrics.get(METRIC_DROPPED, 0) == want["duplicates_dropped"]
            and metrics.get(METRIC_LATE, 0) == want["late_forwarded"]
        ),
    }
    log(f"driver: {result['records_per_s']:,} records/s ({result['us_per_record']} us/record)")
    one_s, one_outputs, one_metrics = run_driver(keys, values, stamps, one_by_one=True)
    result["one_by_one"] = {
        **_rate(one_s, part.n),
        "same_as_list": one_outputs == outputs and one_metrics == metrics,
    }
    log(f"driver, pipe_input per record: {result['one_by_one']['records_per_s']:,} records/s")
    # The driver's own cost, no operator: the same list through stream -> to.
    import lakestate as ls

    builder = ls.StreamsBuilder()
    builder.stream(APP.INPUT_TOPIC).to(APP.OUTPUT_TOPIC)
    pass_s, pass_outputs, _ = run_driver(keys, values, stamps, topology=builder.build())
    result["passthrough"] = {**_rate(pass_s, part.n), "outputs": pass_outputs}
    log(f"driver, pass-through (no operator): {result['passthrough']['records_per_s']:,} records/s")
    bare_s, bare_outputs = bare_loop(keys, values, stamps)
    result["bare_loop"] = {**_rate(bare_s, part.n), "outputs": bare_outputs}
    log(f"driver floor, a bare Python loop: {result['bare_loop']['records_per_s']:,} records/s")
    n = min(args.profile_records, part.n)
    log(f"driver: cProfile on {n:,} records")
    profile = cProfile.Profile()
    prof_s, _, _ = run_driver(keys[:n], values[:n], stamps[:n], profile)
    result["profile"] = {
        "records": n,
        "seconds_profiled": round(prof_s, 3),
        "top_tottime": per_record(be.top_stats(profile, "tottime", 25, False), n),
        "top_cumulative_lakestate": per_record(be.top_stats(profile, "cumulative", 25, True), n),
        "calls_per_record": round(_total_calls(profile) / n, 1),
    }
    return result


def _total_calls(profile: cProfile.Profile) -> int:
    import pstats

    return pstats.Stats(profile).total_calls


def measure_worker(args: argparse.Namespace, part: Part, tmp: Path) -> dict[str, Any]:
    """``process_task`` (what one Spark worker runs for one task of a batch) on the first
    records of ``part``, against a fresh RocksDB store: the engine's per-record cost
    without Spark (no Arrow transfer, no commit)."""
    from lakestate.runtime.task_executor import BatchContext, process_task
    from lakestate.state.base import isolation_for

    n = min(args.worker_records, part.n)
    pdf = frame(part, 0, n)
    pdf.insert(0, "topic", APP.INPUT_TOPIC)
    pdf.insert(0, "input_index", np.int32(0))
    pdf.insert(0, "task", np.int32(part.partition))
    pdf.insert(0, "sub", np.int32(0))
    table = pa.Table.from_pandas(pdf, preserve_index=False)
    task_id = f"0_{part.partition}"

    def run(profile: cProfile.Profile | None, records: pa.Table = table) -> tuple[float, int]:
        state_dir = tempfile.mkdtemp(prefix="worker-", dir=tmp)
        try:
            ctx = BatchContext(
                APP_PATH,
                APP.APP_NAME,
                {task_id: 1},
                state_dir,
                isolation_for(APP.app.config),
                {APP.OUTPUT_TOPIC: PARTITIONS},
                {task_id: {APP.INPUT_TOPIC: 0}},
            )
            started = time.perf_counter()
            out = (
                process_task(records, ctx)
                if profile is None
                else profile.runcall(process_task, records, ctx)
            )
            return time.perf_counter() - started, out.num_rows
        finally:
            shutil.rmtree(state_dir, ignore_errors=True)

    log(f"worker: process_task on {n:,} records of partition {part.partition} (RocksDB)")
    run(None, table.slice(0, 1000))  # warm: the app module, imports
    seconds, rows = run(None)
    profile = cProfile.Profile()
    prof_s, _ = run(profile)
    result = {
        "records": n,
        "seconds": round(seconds, 3),
        "records_per_s": round(n / seconds),
        "us_per_record": round(seconds / n * 1e6, 2),
        "output_rows": rows,
        "profile": {
            "seconds_profiled": round(prof_s, 3),
            "top_tottime": per_record(be.top_stats(profile, "tottime", 20, False), n),
            "top_cumulative_lakestate": per_record(
                be.top_stats(profile, "cumulative", 20, True), n
            ),
        },
    }
    log(f"worker: {result['records_per_s']:,} records/s ({result['us_per_record']} us/record)")
    return result


# -- 2: the engine ------------------------------------------------------------------------------


def run_engine(warehouse: str, state_dir: str, args, timer) -> dict[str, Any]:
    from lakestate import run_app

    say = be.Say(echo=True)
    started = time.perf_counter()
    result = run_app(
        APP_PATH,
        warehouse=warehouse,
        state_dir=state_dir,
        master=args.master,
        until_caught_up=True,
        max_records=args.max_records,
        say=say,
    )
    wall = time.perf_counter() - started
    timed, run_level = timer.take()
    batches = []
    for i, said in enumerate(say.batches):
        entry = dict(said)
        if i < len(timed):
            entry["phases"] = be.breakdown(timed[i])
        batches.append(entry)
    return {
        "wall_s": round(wall, 3),
        "records": result.records,
        "records_per_s": round(result.records / wall) if wall else None,
        "batches": batches,
        "run_level_s": {k: round(v, 3) for k, v in run_level.items()},
        "caught_up": result.caught_up,
    }


def kept_by_role(spark, path: str) -> dict[str, int]:
    from pyspark.sql import functions as F

    rows = (
        spark.read.format("delta")
        .load(path)
        .groupBy(F.get_json_object("value", "$.r").alias("r"))
        .count()
        .collect()
    )
    out = dict.fromkeys(ROLE_NAMES, 0)
    for row in rows:
        out[TAG_ROLE.get(row["r"], str(row["r"]))] = row["count"]
    return out


def engine_metrics(wh) -> dict[str, Any]:
    """Dedup metrics from the app's progress table (a row per task per batch, carrying the
    task's totals since its first batch): each task's last row summed over tasks (the store
    size, a gauge, as of its last batch); per batch, what the tasks' counts grew by."""
    from lakestate.io import delta_commits
    from lakestate.processors.metrics import flat

    rows = delta_commits.open_table(wh.progress_path(APP.APP_NAME)).to_pyarrow_table().to_pylist()
    rows.sort(key=lambda r: (r["batch_id"], r["task"]))
    last: dict[str, dict[str, float]] = {}  # task -> its totals as of its latest row
    by_batch: dict[int, dict[str, float]] = {}
    for row in rows:
        batch = by_batch.setdefault(row["batch_id"], {})
        now = flat(json.loads(row["metrics"] or "{}"))
        before = last.get(row["task"], {})
        for name, value in now.items():
            if name != METRIC_SIZE:
                batch[name] = batch.get(name, 0) + value - before.get(name, 0)
        last[row["task"]] = now
    totals: dict[str, float] = {}
    for now in last.values():
        for name, value in now.items():
            totals[name] = totals.get(name, 0) + value
    per_batch = [{"batch_id": b, **m} for b, m in sorted(by_batch.items())]
    return {"totals": totals, "per_batch": per_batch}


# -- 3: Spark Structured Streaming --------------------------------------------------------------


def run_sss(spark, topic_path: str, out_path: str, checkpoint: str, files_per_trigger: int):
    """``common.dedup_query`` on the RocksDB state store, run to its end; its wall seconds
    and progress reports."""
    spark.conf.set("spark.sql.streaming.stateStore.providerClass", ROCKSDB_PROVIDER)
    started = time.perf_counter()
    query = common.dedup_query(spark, topic_path, out_path, checkpoint, files_per_trigger)
    progress = common.await_query(query)
    return time.perf_counter() - started, progress


def sss_batches(progress: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for p in progress:
        ops = p.get("stateOperators") or [{}]
        op = ops[0]
        out.append(
            {
                "batch": p.get("batchId"),
                "input_rows": p.get("numInputRows", 0),
                "duration_ms": (p.get("durationMs") or {}).get("triggerExecution"),
                "add_batch_ms": (p.get("durationMs") or {}).get("addBatch"),
                "watermark": (p.get("eventTime") or {}).get("watermark"),
                "state_rows_total": op.get("numRowsTotal"),
                "state_rows_updated": op.get("numRowsUpdated"),
                "dropped_by_watermark": op.get("numRowsDroppedByWatermark", 0),
                "state_memory_bytes": op.get("memoryUsedBytes"),
                "state_commit_ms": op.get("commitTimeMs"),
            }
        )
    return out


# -- main ---------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--records", type=int, help="N input records for engine and SSS (1M)")
    p.add_argument("--quick", action="store_true", help="N=100k, driver 50k: a fast check")
    p.add_argument("--driver-records", type=int, help="records through the driver (200k)")
    p.add_argument("--profile-records", type=int, help="records under cProfile (50k)")
    p.add_argument("--worker-records", type=int, help="records for process_task (100k)")
    p.add_argument("--max-records", type=int, default=500_000, help="engine, per task")
    p.add_argument("--chunk-records", type=int, help="records per input commit (N/20)")
    p.add_argument(
        "--sss-batch-records",
        type=int,
        help="records per SSS micro-batch (default: N / the engine's number of batches)",
    )
    p.add_argument(
        "--sss-late-batches",
        type=int,
        default=10,
        help="also run SSS in this many micro-batches (its watermark drops late rows only "
        "from the third micro-batch on); 0: skip",
    )
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--master", default="local[2]")
    p.add_argument("--skip-driver", action="store_true")
    p.add_argument("--skip-engine", action="store_true")
    p.add_argument("--skip-sss", action="store_true")
    p.add_argument("--keep", action="store_true", help="keep the temporary directory")
    p.add_argument("--json", default=str(DEFAULT_JSON), help="where to write the results")
    args = p.parse_args(argv)
    args.records = args.records or (100_000 if args.quick else 1_000_000)
    args.driver_records = args.driver_records or (50_000 if args.quick else 200_000)
    args.profile_records = args.profile_records or (20_000 if args.quick else 50_000)
    args.worker_records = args.worker_records or (20_000 if args.quick else 100_000)
    args.chunk_records = args.chunk_records or max(PARTITIONS, args.records // 20)
    return args


def loadavg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    warnings.filterwarnings("ignore", message="Cannot infer the eval type from type hints")
    began = time.perf_counter()
    sampler = be.MemorySampler()
    sampler.start()
    tmp = Path(tempfile.mkdtemp(prefix="lakestate-bench-dedup-"))
    results: dict[str, Any] = {
        "args": {k: v for k, v in vars(args).items() if k != "json"},
        "environment": be.environment(),
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "load_average": {"start": loadavg()},
        "input_spec": {
            "partitions": PARTITIONS,
            "interval_ms": INTERVAL_MS,
            "span_ms": SPAN_MS,
            "out_of_order_max_ms": OOO_MAX_MS,
            "late_by_ms": [LATE_MIN_MS, LATE_MAX_MS],
            **vars(Spec()),
        },
        "errors": {},
    }

    @contextlib.contextmanager
    def phase(name: str):
        before = loadavg()
        log(f"== {name} (load average {before[0]:.1f} / {before[1]:.1f} / {before[2]:.1f})")
        with sampler.in_phase(name):
            try:
                yield
            except Exception as exc:
                results["errors"][name] = {
                    "error": f"{type(exc).__name__}: {exc}",
                    "traceback": traceback.format_exc(),
                }
                log(f"{name} FAILED: {type(exc).__name__}: {exc}")
        results["load_average"][name] = {"start": before, "end": loadavg()}

    try:
        with phase("generate-arrays"):
            t = time.perf_counter()
            parts = make_input(args.records, Spec(), args.seed)
            results["input"] = summary(parts)
            results["expected_lakestate"] = expected(parts)
            results["input"]["generate_arrays_s"] = round(time.perf_counter() - t, 2)
            log(f"input: {results['input']}")
            log(f"expected (reference): {results['expected_lakestate']}")

        # 1: the driver and the worker function, before Spark starts ----------------------
        if not args.skip_driver:
            with phase("driver"):
                results["driver"] = measure_driver(args)
            with phase("worker"):
                results["worker"] = measure_worker(args, parts[0], tmp)

        if not (args.skip_engine and args.skip_sss):
            spark_phases(args, parts, results, phase, tmp)

        compare(results)
        results["total_s"] = round(time.perf_counter() - began, 1)
    finally:
        sampler.stop()
        results["load_average"]["end"] = loadavg()
        results["load_average_1m_per_phase"] = {
            phase_name: {"max": round(max(v), 2), "mean": round(sum(v) / len(v), 2)}
            for phase_name, v in sampler.load.items()
            if v
        }
        results["memory"] = {
            "peak": sampler.peaks.get("all", {}),
            "per_phase": sampler.peaks,
        }
        if args.keep:
            log(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
        out = Path(args.json)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(results, indent=2, default=str) + "\n")
    report(results)
    log(f"results written to {out}")
    return 0


def spark_phases(args, parts: list[Part], results: dict[str, Any], phase, tmp: Path) -> None:
    """Parts 2 and 3: write the input, run the engine, run SSS; stops Spark at the end."""
    spark = None
    try:
        from lakestate.io import logtable
        from lakestate.read.spark_engine import state_frame
        from lakestate.runtime.spark_session import get_spark, stop_spark
        from lakestate.warehouse import Warehouse

        with phase("spark-start"):
            t = time.perf_counter()
            extra = {
                "spark.sql.execution.arrow.pyspark.enabled": "true",
                "spark.sql.streaming.stateStore.providerClass": ROCKSDB_PROVIDER,
            }
            spark = get_spark(args.master, app_name="lakestate-bench-dedup", extra_conf=extra)
            results["spark_start_s"] = round(time.perf_counter() - t, 2)
            results["spark_conf"] = {
                k: spark.conf.get(k, None)
                for k in (
                    "spark.master",
                    "spark.sql.shuffle.partitions",
                    "spark.driver.memory",
                    "spark.sql.streaming.stateStore.providerClass",
                )
            }
        if spark is None:
            return
        timer = be.PhaseTimer()
        timer.install()

        wh = Warehouse(tmp / "wh")
        with phase("generate"):
            t = time.perf_counter()
            topic_path = logtable.create_topic(wh, APP.INPUT_TOPIC, PARTITIONS)
            commits = write_input(spark, topic_path, parts, args.chunk_records, tmp / "chunks")
            results["input"]["write_s"] = round(time.perf_counter() - t, 2)
            results["input"]["commits"] = commits
            results["input"]["files"] = commits * PARTITIONS
            log(
                f"wrote {args.records:,} records in {commits} commits in {time.perf_counter() - t:.1f}s"
            )
        if "commits" not in results["input"]:
            return

        engine_batches = None
        if not args.skip_engine:
            with phase("engine"):
                log(f"engine: {args.records:,} records, max_records={args.max_records:,} per task")
                engine = run_engine(wh.root, str(tmp / "state"), args, timer)
                log(f"engine: {engine['records']:,} records in {engine['wall_s']:.1f}s")
                engine_batches = len(engine["batches"])
                results["engine"] = engine
        if "engine" in results:
            with phase("engine-check"):
                out_path = wh.topic_path(APP.OUTPUT_TOPIC)
                engine["sink_records"] = spark.read.format("delta").load(out_path).count()
                engine["kept_by_role"] = kept_by_role(spark, out_path)
                engine["metrics"] = engine_metrics(wh)
                engine["state_table_rows"] = state_frame(spark, wh, APP.APP_NAME, APP.STORE).count()
                want = results["expected_lakestate"]
                totals = engine["metrics"]["totals"]
                engine["matches_reference"] = (
                    engine["sink_records"] == want["forwarded"]
                    and totals.get(METRIC_DROPPED) == want["duplicates_dropped"]
                    and totals.get(METRIC_LATE) == want["late_forwarded"]
                    and engine["kept_by_role"] == want["kept_by_role"]
                )
                log(
                    f"engine: sink {engine['sink_records']:,} (expected {want['forwarded']:,}), "
                    f"metrics {totals}"
                )

        if not args.skip_sss:
            mirrored = args.sss_batch_records or (
                -(-args.records // engine_batches) if engine_batches else args.records
            )
            runs = [("sss", mirrored)]
            small = -(-args.records // args.sss_late_batches) if args.sss_late_batches else 0
            if small and small < mirrored:
                runs.append(("sss_small_batches", small))
            for name, batch_records in runs:
                with phase(name):
                    results[name] = sss_phase(spark, topic_path, tmp / name, batch_records, args)
                if name in results:
                    with phase(f"{name}-check"):
                        sss_check(spark, results[name])
    finally:
        if spark is not None:
            with contextlib.suppress(Exception):
                stop_spark()


def sss_phase(spark, topic_path: str, where: Path, batch_records: int, args) -> dict[str, Any]:
    """One SSS run over the whole input, ``batch_records`` per micro-batch (rounded to
    whole input commits)."""
    chunks = max(1, round(batch_records / args.chunk_records))
    files = chunks * PARTITIONS
    log(
        f"SSS: dropDuplicatesWithinWatermark, maxFilesPerTrigger={files} "
        f"(~{chunks * args.chunk_records:,} records per micro-batch)"
    )
    out_path = str(where / "out")
    wall, progress = run_sss(spark, topic_path, out_path, str(where / "checkpoint"), files)
    batches = sss_batches(progress)
    sss: dict[str, Any] = {
        "wall_s": round(wall, 3),
        "records": sum(b["input_rows"] for b in batches),
        "max_files_per_trigger": files,
        "batch_records_target": chunks * args.chunk_records,
        "data_batches": sum(1 for b in batches if b["input_rows"]),
        "batches": batches,
        "dropped_by_watermark": sum(b["dropped_by_watermark"] or 0 for b in batches),
        "out_path": out_path,
    }
    sss["records_per_s"] = round(sss["records"] / wall) if wall else None
    log(f"SSS: {sss['records']:,} records in {wall:.1f}s ({len(batches)} micro-batches)")
    return sss


def sss_check(spark, sss: dict[str, Any]) -> None:
    kept = spark.read.format("delta").load(sss["out_path"])
    sss["kept"] = kept.count()
    sss["kept_distinct_ids"] = kept.select("id").distinct().count()
    sss["kept_by_role"] = kept_by_role(spark, sss["out_path"])
    log(f"SSS: kept {sss['kept']:,}: {sss['kept_by_role']}")


def compare(r: dict[str, Any]) -> None:
    """Late records on each side, and the throughput ratio."""
    e, inp = r.get("engine"), r.get("input", {})
    late_total = inp.get("late_new", 0) + inp.get("late_dup", 0)
    late: dict[str, Any] = {"late_records_in_input": late_total}
    if e and "kept_by_role" in e:
        kept = e["kept_by_role"]["late_new"] + e["kept_by_role"]["late_dup"]
        late["lakestate"] = {
            "kept_late_new": e["kept_by_role"]["late_new"],
            "kept_late_dup": e["kept_by_role"]["late_dup"],
            "kept": kept,
            "dropped_as_duplicates": late_total - kept,
            "metric_late_forwarded": e["metrics"]["totals"].get(METRIC_LATE),
        }
    for name in ("sss", "sss_small_batches"):
        s = r.get(name)
        if not s or "kept_by_role" not in s:
            continue
        kept = s["kept_by_role"]["late_new"] + s["kept_by_role"]["late_dup"]
        late[name] = {
            "kept_late_new": s["kept_by_role"]["late_new"],
            "kept_late_dup": s["kept_by_role"]["late_dup"],
            "kept": kept,
            "dropped_by_watermark": s["dropped_by_watermark"],
            "dropped_as_duplicates": late_total - kept - s["dropped_by_watermark"],
        }
        if e and e.get("records_per_s") and s.get("records_per_s"):
            key = "ratio_engine_sss" if name == "sss" else f"ratio_engine_{name}"
            r[key] = round(e["records_per_s"] / s["records_per_s"], 4)
    r["late"] = late


# -- report -------------------------------------------------------------------------------------


def report(r: dict[str, Any]) -> None:
    rows: list[tuple[str, str, str]] = []
    ok = be.verdict
    d = r.get("driver")
    if d:
        rows += [
            (
                f"driver records/s ({d['records']:,} records, pipe_record_list, memory)",
                f"{d['records_per_s']:,}",
                f">= {TARGET_DRIVER:,} {ok(d['records_per_s'] >= TARGET_DRIVER)}",
            ),
            ("  driver us/record", f"{d['us_per_record']}", f"<= {1e6 / TARGET_DRIVER:.1f}"),
            ("  driver output = reference", str(d["matches_reference"]), "True"),
        ]
        one = d.get("one_by_one")
        if one:
            rows += [
                ("  driver records/s, one pipe_input per record", f"{one['records_per_s']:,}", ""),
                ("  same output and metrics as the list", str(one["same_as_list"]), "True"),
            ]
        bare = d.get("bare_loop")
        if bare:
            rows.append(
                (
                    "  a bare Python loop of the least per-record work (see bare_loop)",
                    f"{bare['records_per_s']:,}",
                    f"({bare['us_per_record']} us/record)",
                )
            )
        passthrough = d.get("passthrough")
        if passthrough:
            rows.append(
                (
                    "  driver records/s, pass-through (stream -> to, no operator)",
                    f"{passthrough['records_per_s']:,}",
                    f"({passthrough['us_per_record']} us/record)",
                )
            )
    w = r.get("worker")
    if w:
        rows.append(
            (
                f"worker process_task records/s ({w['records']:,}, RocksDB)",
                f"{w['records_per_s']:,}",
                f"({w['us_per_record']} us/record)",
            )
        )
    e = r.get("engine")
    if e:
        rows += [
            (
                f"engine records/s (N={e['records']:,}, {len(e['batches'])} batches)",
                f"{e['records_per_s']:,}",
                "",
            ),
            ("  engine wall s", f"{e['wall_s']:.1f}", ""),
        ]
        if "sink_records" in e:
            t = e["metrics"]["totals"]
            x = r.get("expected_lakestate", {})
            rows += [
                ("  forwarded (sink count)", f"{e['sink_records']:,}", f"ref {x['forwarded']:,}"),
                (
                    "  duplicates dropped (metric)",
                    f"{int(t.get(METRIC_DROPPED, 0)):,}",
                    f"ref {x['duplicates_dropped']:,}",
                ),
                (
                    "  late records forwarded (metric)",
                    f"{int(t.get(METRIC_LATE, 0)):,}",
                    f"ref {x['late_forwarded']:,}",
                ),
                (
                    "  ids held: store gauge / live keys in the changelog view",
                    f"{int(t.get(METRIC_SIZE, 0)):,} / {e['state_table_rows']:,}",
                    f"ref {x['store_size']:,}",
                ),
                ("  engine output = reference", str(e["matches_reference"]), "True"),
            ]
    labels = {"sss": "SSS", "sss_small_batches": "SSS, smaller micro-batches"}
    for name, label in labels.items():
        s = r.get(name)
        if not s:
            continue
        rows += [
            (
                f"{label} records/s ({s['data_batches']} data micro-batches of "
                f"~{s['batch_records_target']:,})",
                f"{s['records_per_s']:,}",
                "",
            ),
            (f"  {label} wall s", f"{s['wall_s']:.1f}", ""),
        ]
        if "kept" in s:
            rows += [
                (
                    f"  {label} rows kept (distinct ids)",
                    f"{s['kept']:,} ({s['kept_distinct_ids']:,})",
                    "",
                ),
                (f"  {label} rows dropped by watermark", f"{s['dropped_by_watermark']:,}", ""),
            ]
        key = "ratio_engine_sss" if name == "sss" else f"ratio_engine_{name}"
        if key in r:
            target = f">= {TARGET_RATIO_SSS} {ok(r[key] >= TARGET_RATIO_SSS)}"
            rows.append((f"ratio engine / {label}", f"{r[key]:.3f}", target))
    late = r.get("late", {})
    sides = [k for k in ("lakestate", "sss", "sss_small_batches") if late.get(k)]
    if sides:
        rows.append(("late records in input", f"{late['late_records_in_input']:,}", ""))
        for side in sides:
            v = late[side]
            extra = f"; by watermark {v['dropped_by_watermark']:,}" if side != "lakestate" else ""
            rows.append(
                (
                    f"  {labels.get(side, side)}: late kept (fresh id / repeated id)",
                    f"{v['kept']:,} ({v['kept_late_new']:,} / {v['kept_late_dup']:,})",
                    f"dropped as duplicates {v['dropped_as_duplicates']:,}{extra}",
                )
            )
    if "total_s" in r:
        rows.append(("benchmark wall time", f"{r['total_s']:.0f} s", ""))
    mem = r.get("memory", {}).get("peak", {})
    if mem:
        rows.append(("peak RSS, process tree", be.mb(mem.get("_at_total")), ""))
    loads = r.get("load_average_1m_per_phase", {})
    if loads:
        top = max(v["max"] for v in loads.values())
        cpus = r.get("environment", {}).get("cpus") or 1
        note = f"busy machine (> {cpus} cpus): timings inflated" if top > cpus else ""
        rows.append(("machine load average (1 min), max", f"{top:.1f}", note))
    if rows:
        be.print_table(rows)
    s = r.get("sss")
    if s and "kept_by_role" in s:
        print(
            "Note: within a micro-batch SSS keeps an arbitrary one of the rows of an id (not the\n"
            "lowest offset), so its kept 'dup'/'late_dup' rows stand in for an original of the\n"
            f"same batch (SSS kept by role: {s['kept_by_role']}). Late rows with a fresh id are\n"
            "the unambiguous comparison of late handling. SSS drops rows behind the watermark\n"
            "only from its third micro-batch on (see 'dropped by watermark' per micro-batch\n"
            "below: the late-row filter of micro-batch k uses the watermark of k-1, which is\n"
            "computed from the rows up to k-2), so a run in as few micro-batches as the engine's\n"
            "batches may drop none; lakestate decides per record against its stream time.\n"
        )
    for name, err in r.get("errors", {}).items():
        print(f"ERROR in {name}: {err['error']}")
    if loads:
        print("Load average (1 min) per phase, mean / max:")
        for name, v in loads.items():
            print(f"  {name:<16} {v['mean']:>5.1f} / {v['max']:.1f}")
        print()
    if e and e.get("batches"):
        print("Engine batches (seconds by phase; process = read + mapInArrow + toArrow):")
        keys = list(dict.fromkeys(k for b in e["batches"] for k in b.get("phases", {})))
        print("  " + f"{'records':>9} {'outputs':>9}  " + "  ".join(f"{k:>10}" for k in keys))
        for b in e["batches"]:
            cells = "  ".join(f"{b.get('phases', {}).get(k, 0):>10.2f}" for k in keys)
            print(f"  {b['records']:>9,} {b['outputs']:>9,}  {cells}")
        if e.get("run_level_s"):
            print(
                "  once per run: " + ", ".join(f"{k} {v:.2f}s" for k, v in e["run_level_s"].items())
            )
        print()
    for name, label in labels.items():
        s = r.get(name)
        if not s or not s.get("batches"):
            continue
        print(f"{label} micro-batches:")
        for b in s["batches"]:
            print(
                f"  batch {b['batch']}: {b['input_rows']:>9,} rows, {b['duration_ms'] or 0:>7,} ms, "
                f"watermark {b['watermark']}, dropped by watermark {b['dropped_by_watermark']}, "
                f"state rows {b['state_rows_total']}"
            )
        print()
    for title, block in (("Driver", d), ("Worker (process_task, RocksDB)", w)):
        if not block:
            continue
        prof = block["profile"]
        n = prof.get("records", block["records"])
        print(
            f"{title} cProfile on {n:,} records ({prof['seconds_profiled']:.2f}s profiled, "
            f"{block['us_per_record']} us/record unprofiled"
            + (f", {prof['calls_per_record']} calls/record" if "calls_per_record" in prof else "")
            + "); top by own time, us/record:"
        )
        for row in prof["top_tottime"][:15]:
            print(f"  {row['tottime_us_per_record']:>7.2f} {row['ncalls']:>9}  {row['function']}")
        print("  lakestate functions by cumulative time, us/record:")
        for row in prof["top_cumulative_lakestate"][:15]:
            print(f"  {row['cumtime_us_per_record']:>7.2f} {row['ncalls']:>9}  {row['function']}")
        print()


if __name__ == "__main__":
    sys.exit(main())
