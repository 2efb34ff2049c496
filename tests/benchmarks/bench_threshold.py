"""Sweep of the in-process threshold (issue 28, item 5) and the stateless ceiling (item 6).

Run from the repository root::

    .venv/bin/python tests/benchmarks/bench_threshold.py                  # 10k ... 5M
    .venv/bin/python tests/benchmarks/bench_threshold.py --quick          # 10k, 100k
    .venv/bin/python tests/benchmarks/bench_threshold.py --sizes 2000000 --sides inprocess

Per size N (``--sizes``): the demo app (``jobs/demo.py``: filter(amount > 0) -> count per
user -> ``event-counts``) over a backlog of N records from empty state (10,000 users, 2
partitions, amounts as the demo's sample events: 1 in 5 zero), written once with delta-rs
and copied, so that every side starts from the same warehouse. Sides, each a fresh
``lakestate run jobs/demo.py --until-caught-up --transport T`` on its own copy:

- ``inprocess``: delta-rs reads, the tasks in this process or its worker processes, no JVM;
- ``spark``: Spark ``local[2]`` reads, the tasks in Spark's Python workers;
- ``ceiling``: the stateless read -> write pass of the same N records with delta-rs (read
  the topic, write it to a new Delta table; a fresh Python process): what no stateful run
  can beat.

The sides run interleaved (the order alternates per size), so that the machine's load,
shared with other jobs, weighs on both alike; each row has the load average (1 min) before
and after. Printed per side: wall time (spawn to exit, JVM start included), records/s, CPU
seconds and peak RSS of the process tree (``bench_windows.TreeSampler``: the CLI, its worker
processes, the JVM and Spark's Python workers), the batches the run made; per size the ratio
inprocess / spark and stateful / ceiling (records/s). The latest count per user of both
stateful sides must be equal (checked, else the run fails). Results go to
``tests/benchmarks/results/threshold.json``. Not a test: pytest collects ``test_*.py``.
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

from common import log, sibling

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
DEMO_APP = str(ROOT / "jobs" / "demo.py")
LAKESTATE_CLI = str(Path(sys.executable).parent / "lakestate")
DEFAULT_JSON = HERE / "results" / "threshold.json"
SIZES = (10_000, 100_000, 500_000, 1_000_000, 2_000_000, 5_000_000)
QUICK_SIZES = (10_000, 100_000)
USERS = 10_000
PARTITIONS = 2
AMOUNTS = (0, 1, 5, 10, 20)
T0_MS = 1_767_258_000_000
TARGET_CEILING = 0.5  # stateful records/s / ceiling records/s, at least


def load1() -> float:
    return round(os.getloadavg()[0], 2)


def write_topic(root: Path, n: int, seed: int) -> None:
    """The demo's ``events`` topic with ``n`` records in one delta-rs commit."""
    import numpy as np
    import pyarrow as pa
    from deltalake import CommitProperties, write_deltalake
    from lakestate.io import logtable
    from lakestate.io.topic_records import RECORD_SCHEMA
    from lakestate.warehouse import Warehouse

    rng = np.random.default_rng(seed)
    texts = np.array([f'"user-{i}"' for i in range(USERS)], dtype=object)
    part_of = sibling("bench_engine").partitions_of(texts.tolist(), PARTITIONS)
    values = np.array(
        [[f'{{"amount":{a},"user":"user-{i}"}}' for a in AMOUNTS] for i in range(USERS)],
        dtype=object,
    )
    user = rng.integers(0, USERS, n)
    amount = rng.integers(0, len(AMOUNTS), n)
    part = part_of[user]
    offset = np.zeros(n, dtype=np.int64)
    for p in range(PARTITIONS):
        mask = part == p
        offset[mask] = np.arange(int(mask.sum()))
    table = pa.table(
        {
            "partition": pa.array(part, pa.int32()),
            "offset": pa.array(offset, pa.int64()),
            "timestamp": pa.array(T0_MS + np.arange(n, dtype=np.int64), pa.int64()),
            "key": pa.array(texts[user].tolist(), pa.string()),
            "value": pa.array(values[user, amount].tolist(), pa.string()),
            "headers": pa.nulls(n, pa.string()),
        },
        schema=RECORD_SCHEMA,
    )
    ends = {p: int((part == p).sum()) for p in range(PARTITIONS)}
    path = logtable.create_topic(Warehouse(str(root)), "events", PARTITIONS)
    write_deltalake(
        path,
        table,
        mode="append",
        commit_properties=CommitProperties(
            custom_metadata={"userMetadata": logtable.ends_metadata(ends)}
        ),
    )


def run_tree(cmd: list[str], name: str, logs: Path) -> dict[str, Any]:
    """``cmd`` as a fresh process, timed from outside, CPU and peak RSS of its tree."""
    before = load1()
    out_file = logs / f"{name}.log"
    env = dict(os.environ, LAKESTATE_SHUFFLE_PARTITIONS=str(PARTITIONS))
    started = time.monotonic()
    with open(out_file, "w") as out:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
        sampler = sibling("bench_windows").TreeSampler(proc.pid)
        sampler.start()
        rc = proc.wait()
    wall = time.monotonic() - started
    sampled = sampler.stop()
    text = out_file.read_text(errors="replace")
    if rc != 0:
        tail = "\n".join(text.splitlines()[-25:])
        raise RuntimeError(f"{name} exited with {rc}:\n{tail}")
    return {
        "wall_s": round(wall, 2),
        "cpu_s": sampled["cpu_s"],
        "peak_rss_mib": {k: round(v / 2**20) for k, v in sampled["peak"].items()},
        "load_before": before,
        "load_after": load1(),
        "output": text,
    }


def stateful_side(base: Path, transport: str, master: str, logs: Path, n: int) -> dict[str, Any]:
    """A fresh ``lakestate run`` of the demo on the warehouse ``base``."""
    sch = sibling("bench_scheduled")
    cmd = [LAKESTATE_CLI, "--warehouse", str(base / "wh"), "--master", master, "run", DEMO_APP]
    cmd += ["--until-caught-up", "--transport", transport, "--state-dir", str(base / "state")]
    run = run_tree(cmd, f"{n}-{transport}", logs)
    text = run.pop("output")
    found = sch.RUN_LINE.search(text)
    run["records"] = int(found.group(2)) if found else None
    run["batches"] = [
        {"records": int(b[1]), "output": int(b[2]), "s": float(b[3])}
        for b in sch.BATCH_LINE.findall(text)
    ]
    run["first_line"] = text.splitlines()[0] if text else ""
    run["records_per_s"] = round(n / run["wall_s"])
    return run


def child_ceiling(argv: list[str]) -> int:
    """``_ceiling SRC DST``: read the topic at SRC with delta-rs, write it to DST."""
    from deltalake import DeltaTable, write_deltalake

    src, dst = argv
    write_deltalake(dst, DeltaTable(src).to_pyarrow_table(), mode="append")
    return 0


def ceiling_side(base: Path, logs: Path, n: int) -> dict[str, Any]:
    """The stateless read -> write pass of the topic, a fresh process."""
    src, dst = base / "wh" / "topics" / "events", base / "copy"
    run = run_tree([sys.executable, __file__, "_ceiling", str(src), str(dst)], f"{n}-ceiling", logs)
    run.pop("output")
    run["records_per_s"] = round(n / run["wall_s"])
    return run


def latest_counts(base: Path) -> dict[str, int]:
    """The latest count per user in the run's ``event-counts`` topic (offset order)."""
    from deltalake import DeltaTable

    t = DeltaTable(str(base / "wh" / "topics" / "event-counts")).to_pyarrow_table(
        columns=["partition", "offset", "key", "value"]
    )
    t = t.sort_by([("partition", "ascending"), ("offset", "ascending")])
    keys, values = t.column("key").to_pylist(), t.column("value").to_pylist()
    return dict(zip(keys, map(int, values), strict=True))


def measure_size(n: int, args: argparse.Namespace, work: Path, flip: bool) -> dict[str, Any]:
    """Every side of size ``n``, interleaved (``flip``: the other order)."""
    logs = work / "logs"
    seed_dir = work / f"{n}-seed"
    log(f"{n:,} records: writing the topic")
    write_topic(seed_dir / "wh", n, args.seed)
    sides = [s for s in args.sides if s != "ceiling"]
    if flip:
        sides.reverse()
    if "ceiling" in args.sides:
        sides.insert(1 if flip else len(sides), "ceiling")
    row: dict[str, Any] = {"records": n, "order": sides}
    for side in sides:
        base = work / f"{n}-{side}"
        shutil.copytree(seed_dir, base)
        log(f"{n:,} records: {side} (load {load1()})")
        if side == "ceiling":
            row[side] = ceiling_side(base, logs, n)
        else:
            row[side] = stateful_side(base, side, args.master, logs, n)
            row[side]["counts"] = latest_counts(base)
        r = row[side]
        log(
            f"  {r['wall_s']} s, {r['records_per_s']:,} records/s, peak RSS "
            f"{r['peak_rss_mib']['total']} MiB, load {r['load_before']} -> {r['load_after']}"
        )
    stateful = [s for s in ("inprocess", "spark") if s in row]
    if len(stateful) == 2:
        same = row["inprocess"]["counts"] == row["spark"]["counts"]
        if not same:
            raise AssertionError(f"{n}: the latest counts per user differ between transports")
        row["counts_equal"] = same
    for s in stateful:
        row[s]["users"] = len(row[s].pop("counts"))
    shutil.rmtree(seed_dir)
    for side in sides:
        shutil.rmtree(work / f"{n}-{side}", ignore_errors=True)
    return row


def ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a and b else None


def report(rows: list[dict[str, Any]]) -> None:
    print()
    head = "| records | side | wall s | records/s | CPU s | peak RSS MiB | load | batches |"
    print(head)
    print("|" + "---|" * 8)
    for row in rows:
        for side in row["order"]:
            r = row[side]
            batches = len(r.get("batches", [])) or ""
            print(
                f"| {row['records']:,} | {side} | {r['wall_s']} | {r['records_per_s']:,} | "
                f"{r['cpu_s']['total']} | {r['peak_rss_mib']['total']} | "
                f"{r['load_before']} -> {r['load_after']} | {batches} |"
            )
    print()
    print(
        "| records | inprocess / spark (records/s) | memory spark / inprocess | "
        f"inprocess / ceiling (target >= {TARGET_CEILING}) |"
    )
    print("|---|---|---|---|")
    for row in rows:
        rate = {s: row[s]["records_per_s"] for s in ("inprocess", "spark", "ceiling") if s in row}
        mem = {s: row[s]["peak_rss_mib"]["total"] for s in ("inprocess", "spark") if s in row}
        row["ratios"] = {
            "inprocess_over_spark": ratio(rate.get("inprocess"), rate.get("spark")),
            "spark_memory_over_inprocess": ratio(mem.get("spark"), mem.get("inprocess")),
            "inprocess_over_ceiling": ratio(rate.get("inprocess"), rate.get("ceiling")),
        }
        q = row["ratios"]
        print(
            f"| {row['records']:,} | {q['inprocess_over_spark']} | "
            f"{q['spark_memory_over_inprocess']} | {q['inprocess_over_ceiling']} |"
        )


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sizes", help="comma-separated record counts (default 10k ... 5M)")
    p.add_argument("--quick", action="store_true", help=f"sizes {QUICK_SIZES}")
    p.add_argument(
        "--sides", default="inprocess,spark,ceiling", help="of inprocess, spark, ceiling"
    )
    p.add_argument("--master", default="local[2]")
    p.add_argument("--seed", type=int, default=28)
    p.add_argument("--json", default=str(DEFAULT_JSON))
    p.add_argument("--keep", action="store_true", help="keep the work directory")
    p.add_argument("--flip", action="store_true", help="start with the other order")
    args = p.parse_args(argv)
    if args.sizes:
        args.sizes = [int(s.replace("_", "")) for s in args.sizes.split(",")]
    else:
        args.sizes = list(QUICK_SIZES if args.quick else SIZES)
    args.sides = args.sides.split(",")
    return args


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["_ceiling"]:
        return child_ceiling(argv[1:])
    args = parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="bench-threshold-"))
    (work / "logs").mkdir()
    rows: list[dict[str, Any]] = []
    results = {
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "head": subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT
        ).stdout.strip(),
        "cores": os.cpu_count(),
        "memory_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
        "rows": rows,
    }
    try:
        for i, n in enumerate(args.sizes):
            rows.append(measure_size(n, args, work, flip=bool(i % 2) != args.flip))
            Path(args.json).write_text(json.dumps(results, indent=1))
    finally:
        report(rows)
        results["ended"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        Path(args.json).write_text(json.dumps(results, indent=1))
        log(f"results: {args.json}; logs: {work / 'logs'}")
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
