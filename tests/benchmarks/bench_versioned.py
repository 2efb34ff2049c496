"""Benchmark of a stream joined with a versioned table as of each record's time (KIP-914, the
orders app ``jobs/orders.py``) against Spark Structured Streaming's stream-static join
(issue 15, item 10).

Run from the repository root::

    .venv/bin/python tests/benchmarks/bench_versioned.py            # 1M orders, 100k customers
    .venv/bin/python tests/benchmarks/bench_versioned.py --quick    # small sizes: a check

Input (deterministic, ``--seed``), two topics of 2 partitions (Kafka's partitioner on the
customer key), written with delta-rs: ``customers``, every customer's first tier at T0 and
on average ``--changes`` (2) later tier changes over ``--hours`` (12), in time order except
that for ``--ooo`` (30%) of the customers with two changes or more the last arrives before
the one before it (out of order); ``orders``, N orders of random customers, timestamps
rising evenly over the same hours, ``--late`` (10%) of them up to an hour late.

Sides, each a fresh process on ``local[2]`` with the same Spark confs (``lakestate.engine.
spark``'s: 2 shuffle partitions, ``spark.driver.memory`` 3g):

- **lakestate**: ``lakestate run jobs/orders.py --until-caught-up`` twice: first with the
  customers only (loading the version history into the versioned store: timed apart), then,
  after the orders are written, the measured run: 1M orders joined as of their time.
- **SSS, stream-static join**: the orders log table as a Delta stream, left-joined on the
  key with a static DataFrame of the customers log table reduced to each customer's latest
  tier (``max_by(value, timestamp)``: the newest by time, out-of-order changes included),
  to a Delta sink, ``Trigger.AvailableNow``. This is what a Spark user picks for enrichment:
  no watermark, no join state, the static side re-read each micro-batch. It joins the
  latest version, not the one valid at the order's time. (A stream-stream join with
  watermarks and a time-range condition returns every version in the range, not the one
  valid at the order's time: picking that one needs a ranking per order, which a streaming
  append query does not allow, and its state is bounded by the watermark, so late orders
  beyond it are dropped.)

Each side's output is checked against a plain reference (numpy): the tier of the
customer's version with the largest valid-from <= the order's time. Printed: wall time and
records/s of each measured process (JVM start included), the ratio lakestate / SSS
(records/s, target >= 1.0), and how many of the N results each side got right. Results go
to ``tests/benchmarks/results/versioned.json`` with the load average before and after each
process. The engine measured is lib/ as committed at HEAD (``--engine head``, as
``bench_scheduled.py``) or the checkout (``--engine tree``). Not a test: pytest collects
``test_*.py`` only.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
APP_PATH = str(ROOT / "jobs" / "orders.py")
LAKESTATE_CLI = str(ROOT / ".venv" / "bin" / "lakestate")
DEFAULT_JSON = HERE / "results" / "versioned.json"
PARTITIONS = 2
T0_MS = 1_767_258_000_000
HOUR_MS = 3_600_000
TIERS = ("bronze", "silver", "gold", "platinum")
TARGET_RATIO = 1.0


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def loadavg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def bench_scheduled() -> Any:
    """The sibling script (its engine snapshot and partitioner helpers are reused)."""
    name = "bench_scheduled"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, HERE / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


# -- input and reference ------------------------------------------------------------------------


def make_input(args: argparse.Namespace) -> dict[str, Any]:
    """Customers' versions and orders as numpy columns, each in arrival order."""
    import numpy as np
    from lakestate.io.partitioner import partition_for

    rng = np.random.default_rng(args.seed)
    c, n, span = args.customers, args.records, args.hours * HOUR_MS
    texts = np.array([f'"customer-{i}"' for i in range(c)], dtype=object)
    part_of = bench_scheduled().bench_engine().partitions_of(texts.tolist(), PARTITIONS)
    assert all(partition_for(f"customer-{i}", PARTITIONS) == part_of[i] for i in range(0, c, 997))

    # Changes: per customer Poisson(changes), times in (T0, T0 + span), sorted by time.
    per = rng.poisson(args.changes, c)
    key = np.repeat(np.arange(c), per)
    ts = T0_MS + rng.integers(1, span, len(key))
    order = np.argsort(ts, kind="stable")
    key, ts = key[order], ts[order]
    # Out of order: for some customers with >= 2 changes, their last two swap arrival places.
    by_key = np.lexsort((ts, key))  # positions grouped by customer, in time order
    last = np.flatnonzero(np.r_[key[by_key][1:] != key[by_key][:-1], True])
    two = last[(last >= 1) & (key[by_key][np.maximum(last - 1, 0)] == key[by_key][last])]
    chosen = two[rng.random(len(two)) < args.ooo]
    a, b = by_key[chosen - 1], by_key[chosen]
    key[a], key[b], ts[a], ts[b] = key[b], key[a], ts[b], ts[a]
    # The first versions at T0, then the changes in arrival order.
    v_key = np.r_[np.arange(c), key]
    v_ts = np.r_[np.full(c, T0_MS, dtype=np.int64), ts]
    v_tier = rng.integers(0, len(TIERS), len(v_key))

    o_key = rng.integers(0, c, n)
    o_ts = T0_MS + (np.arange(n, dtype=np.int64) * span) // n
    late = rng.random(n) < args.late
    o_ts[late] = np.maximum(T0_MS, o_ts[late] - rng.integers(1, HOUR_MS, int(late.sum())))
    return {
        "texts": texts,
        "part_of": part_of,
        "v_key": v_key,
        "v_ts": v_ts,
        "v_tier": v_tier,
        "o_key": o_key,
        "o_ts": o_ts,
        "o_amount": rng.integers(5, 500, n),
        "out_of_order_changes": len(chosen),
        "late_orders": int(late.sum()),
    }


def reference(inp: dict[str, Any]) -> dict[str, Any]:
    """The tier valid at each order's time (the version with the largest valid-from <= it;
    of equal valid-froms the last to arrive), and each customer's latest tier."""
    import numpy as np

    v_key, v_ts, v_tier = inp["v_key"], inp["v_ts"], inp["v_tier"]
    comb = v_key.astype(np.int64) * (1 << 40) + (v_ts - T0_MS)
    order = np.lexsort((np.arange(len(comb)), comb))  # ties: arrival order
    comb, tiers = comb[order], v_tier[order]
    o_comb = inp["o_key"].astype(np.int64) * (1 << 40) + (inp["o_ts"] - T0_MS)
    at = np.searchsorted(comb, o_comb, side="right") - 1
    assert (comb[at] >> 40 == inp["o_key"]).all()  # every customer has a version at T0
    last = np.r_[comb[1:] >> 40 != comb[:-1] >> 40, True]
    latest = tiers[last]  # customers 0..c-1 in order
    return {"as_of": tiers[at], "latest": latest}


def write_topics(spark, wh, inp: dict[str, Any], orders: bool) -> dict[str, float]:
    """Append the customers (``orders`` False) or the orders to their topic in one delta-rs
    commit, each partition in arrival order."""
    import numpy as np
    import pyarrow as pa
    from deltalake import CommitProperties, write_deltalake
    from lakestate.io import logtable

    started = time.monotonic()
    if orders:
        topic, key = "orders", inp["o_key"]
        ts = inp["o_ts"]
        values = [
            f'{{"order":"order-{i}","amount":{a}}}' for i, a in enumerate(inp["o_amount"].tolist())
        ]
    else:
        topic, key, ts = "customers", inp["v_key"], inp["v_ts"]
        values = [f'"{TIERS[t]}"' for t in inp["v_tier"].tolist()]
    part = inp["part_of"][key]
    offset = np.zeros(len(key), dtype=np.int64)
    for p in range(PARTITIONS):
        mask = part == p
        offset[mask] = np.arange(int(mask.sum()))
    table = pa.table(
        {
            "partition": pa.array(part, pa.int32()),
            "offset": pa.array(offset, pa.int64()),
            "timestamp": pa.array(ts, pa.int64()),
            "key": pa.array(inp["texts"][key].tolist(), pa.string()),
            "value": pa.array(values, pa.string()),
            "headers": pa.nulls(len(key), pa.string()),
        },
        schema=logtable.LOG_ARROW_SCHEMA,
    )
    ends = {p: int((part == p).sum()) for p in range(PARTITIONS)}
    write_deltalake(
        logtable.create_topic(spark, wh, topic, PARTITIONS),
        table,
        mode="append",
        commit_properties=CommitProperties(
            custom_metadata={"userMetadata": logtable.ends_metadata(ends)}
        ),
    )
    return {"records": len(key), "write_s": round(time.monotonic() - started, 2)}


def read_output(path: str) -> dict[str, str | None]:
    """{order id: tier} of an output table (delta-rs, no Spark)."""
    from deltalake import DeltaTable

    got: dict[str, str | None] = {}
    for value in DeltaTable(path).to_pyarrow_table(columns=["value"]).column("value").to_pylist():
        row = json.loads(value)
        got[row["order"]] = row["tier"]
    return got


def score(got: dict[str, str | None], expected: Any) -> dict[str, int]:
    right = sum(got.get(f"order-{i}") == TIERS[t] for i, t in enumerate(expected.tolist()))
    return {"results": len(got), "right": right, "wrong_or_missing": len(expected) - right}


# -- the measured processes -----------------------------------------------------------------------


def run_child(cmd: list[str], name: str, logs: Path) -> dict[str, Any]:
    before = loadavg()
    started = time.monotonic()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    wall = time.monotonic() - started
    (logs / f"{name}.log").write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-25:])
        raise RuntimeError(f"{name} exited with {proc.returncode}:\n{tail}")
    return {
        "wall_s": round(wall, 2),
        "load_before": before,
        "load_after": loadavg(),
        "output": proc.stdout,
    }


def lakestate_run(wh_root: str, state: Path, master: str, name: str, logs: Path):
    """A fresh ``lakestate run``; with the batches it printed (records, seconds)."""
    cmd = [LAKESTATE_CLI, "--warehouse", wh_root, "--master", master, "run", APP_PATH]
    cmd += ["--until-caught-up", "--state-dir", str(state)]
    run = run_child(cmd, name, logs)
    batches = bench_scheduled().BATCH_LINE.findall(run.pop("output"))
    run["batches"] = [{"records": int(b[1]), "s": float(b[3])} for b in batches]
    return run


def child_sss(argv: list[str]) -> int:
    """``_sss``: the stream-static join as a fresh process, until the orders are processed."""
    p = argparse.ArgumentParser(prog="bench_versioned.py _sss")
    for name in ("--customers", "--orders", "--out", "--checkpoint", "--master"):
        p.add_argument(name, required=True)
    args = p.parse_args(argv)
    import common
    from lakestate.engine.spark import get_spark, stop_spark
    from pyspark.sql import functions as F

    stamps = {"started": time.monotonic()}
    spark = get_spark(args.master, app_name="sss-stream-static-join")
    stamps["spark_started"] = time.monotonic()
    latest = (
        spark.read.format("delta")
        .load(args.customers)
        .groupBy("key")
        .agg(F.max_by("value", "timestamp").alias("tier"))
    )
    orders = spark.readStream.format("delta").load(args.orders)
    enriched = orders.join(latest, "key", "left").select(
        "key",
        "timestamp",
        F.to_json(
            F.struct(
                F.get_json_object("value", "$.order").alias("order"),
                F.get_json_object("value", "$.amount").cast("long").alias("amount"),
                F.get_json_object("tier", "$").alias("tier"),
            )
        ).alias("value"),
    )
    query = (
        enriched.writeStream.format("delta")
        .option("checkpointLocation", args.checkpoint)
        .trigger(availableNow=True)
        .start(args.out)
    )
    query.awaitTermination()
    if query.exception() is not None:
        raise RuntimeError(f"query failed: {query.exception()}")
    stamps["query_done"] = time.monotonic()
    durations = [p["durationMs"] for p in common.await_query(query)]
    stop_spark()
    print(
        json.dumps(
            {
                "spark_start_s": stamps["spark_started"] - stamps["started"],
                "query_s": stamps["query_done"] - stamps["spark_started"],
                "micro_batches": durations,
            }
        )
    )
    return 0


# -- main ------------------------------------------------------------------------------------------


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="small sizes: a check in a few minutes")
    p.add_argument("--records", type=int, help="orders (1M; quick 50k)")
    p.add_argument("--customers", type=int, help="keys of the versioned table (100k; quick 5k)")
    p.add_argument("--changes", type=float, default=2.0, help="tier changes per customer (mean)")
    p.add_argument("--ooo", type=float, default=0.3, help="share of customers out of order")
    p.add_argument("--late", type=float, default=0.1, help="share of orders up to 1 h late")
    p.add_argument("--hours", type=int, default=12, help="hours the timestamps span (< 1 day)")
    p.add_argument("--engine", choices=("head", "tree"), default="head")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--master", default="local[2]")
    p.add_argument("--driver-memory", default="3g")
    p.add_argument("--keep", action="store_true", help="keep the temporary directory")
    p.add_argument("--json", default=str(DEFAULT_JSON))
    args = p.parse_args(argv)
    if args.records is None:
        args.records = 50_000 if args.quick else 1_000_000
    if args.customers is None:
        args.customers = 5_000 if args.quick else 100_000
    return args


def report(results: dict[str, Any]) -> None:
    n = results["input"]["orders"]
    lk, sss = results["lakestate"], results["sss"]
    print(f"\n{n} orders joined to {results['input']['customers']} customers' versions")
    print(f"{'side':<34} {'wall s':>8} {'records/s':>10} {'right':>9} {'of':>9}")
    print(
        f"{'lakestate, customers load':<34} {lk['load']['wall_s']:>8} "
        f"{results['input']['versions'] / lk['load']['wall_s']:>10.0f}"
    )
    for name, side in (("lakestate, orders (versioned join)", lk), ("SSS stream-static join", sss)):
        run = side["run"]
        print(
            f"{name:<34} {run['wall_s']:>8} {run['records_per_s']:>10.0f} "
            f"{side['score']['right']:>9} {n:>9}"
        )
    for name, run in (("customers load", lk["load"]), ("orders", lk["run"])):
        batches = run.get("batches", [])
        print(
            f"lakestate {name}: {len(batches)} batch(es), {sum(b['s'] for b in batches):.1f} s "
            f"of {run['wall_s']} s in batches (the rest: start, Spark start, recovery, planning)"
        )
    phases = sss["run"].get("phases", {})
    if phases:
        print(
            f"SSS: Spark start {phases['spark_start_s']:.1f} s, query {phases['query_s']:.1f} s "
            f"({len(phases['micro_batches'])} micro-batch(es))"
        )
    print(f"ratio lakestate / SSS (records/s): {results['ratio']} (target >= {TARGET_RATIO})")
    print(f"results right if joined with the latest tier: {results['right_if_latest']} of {n}")
    print(f"load average: start {results['load_start']}, end {results['load_end']}")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["_sss"]:
        return child_sss(argv[1:])
    args = parse_args(argv)
    began = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="lakestate-bench-versioned-"))
    engine = bench_scheduled().snapshot_engine(work, args.engine)  # before lakestate imports
    os.environ.update(
        LAKESTATE_SHUFFLE_PARTITIONS="2",
        LAKESTATE_DRIVER_MEMORY=args.driver_memory,
        PYSPARK_PYTHON=sys.executable,
        PYSPARK_DRIVER_PYTHON=sys.executable,
    )
    from lakestate.engine.spark import get_spark, stop_spark
    from lakestate.warehouse import Warehouse

    results: dict[str, Any] = {
        "args": {k: v for k, v in vars(args).items() if k != "json"},
        "engine": engine,
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "load_start": loadavg(),
        "target_ratio_min": TARGET_RATIO,
    }
    logs = work / "logs"
    logs.mkdir()
    try:
        log(f"engine: {engine['engine']}; temporary directory {work}")
        inp = make_input(args)
        ref = reference(inp)
        right_if_latest = int((ref["latest"][inp["o_key"]] == ref["as_of"]).sum())
        results["input"] = {
            "orders": args.records,
            "customers": args.customers,
            "versions": len(inp["v_key"]),
            "out_of_order_changes": inp["out_of_order_changes"],
            "late_orders": inp["late_orders"],
        }
        results["right_if_latest"] = right_if_latest
        log(f"input: {results['input']}")
        wh = Warehouse(str(work / "wh"))
        spark = get_spark(args.master, app_name="bench-versioned-setup")
        results["write_customers"] = write_topics(spark, wh, inp, orders=False)
        from lakestate.io import logtable

        orders_path = logtable.create_topic(spark, wh, "orders", PARTITIONS)
        customers_path = logtable.create_topic(spark, wh, "customers", PARTITIONS)
        stop_spark()
        state = work / "state"
        log(f"lakestate: loading {len(inp['v_key'])} versions (load {loadavg()})")
        load = lakestate_run(wh.root, state, args.master, "lakestate-customers", logs)
        load["records_per_s"] = round(len(inp["v_key"]) / load["wall_s"])
        spark = get_spark(args.master, app_name="bench-versioned-setup")
        results["write_orders"] = write_topics(spark, wh, inp, orders=True)
        stop_spark()
        log(f"lakestate: joining {args.records} orders (load {loadavg()})")
        run = lakestate_run(wh.root, state, args.master, "lakestate-orders", logs)
        run["records_per_s"] = round(args.records / run["wall_s"])
        got = read_output(str(work / "wh" / "topics" / "enriched-orders"))
        results["lakestate"] = {"load": load, "run": run, "score": score(got, ref["as_of"])}
        log(f"SSS: stream-static join of {args.records} orders (load {loadavg()})")
        out = str(work / "sss-out")
        cmd = [sys.executable, __file__, "_sss", "--customers", customers_path]
        cmd += ["--orders", orders_path, "--out", out, "--checkpoint", str(work / "sss-cp")]
        run = run_child([*cmd, "--master", args.master], "sss", logs)
        run["phases"] = json.loads(run.pop("output").strip().splitlines()[-1])
        run["records_per_s"] = round(args.records / run["wall_s"])
        results["sss"] = {"run": run, "score": score(read_output(out), ref["as_of"])}
        results["ratio"] = round(
            results["lakestate"]["run"]["records_per_s"] / run["records_per_s"], 3
        )
    finally:
        results["load_end"] = loadavg()
        results["total_s"] = round(time.monotonic() - began, 1)
        if args.keep:
            log(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(results, indent=2, default=str) + "\n")
    report(results)
    log(f"results written to {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
