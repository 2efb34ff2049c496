"""Profiles of the benchmarked cases (issue 28, item 6): the top functions by own time.

Run from the repository root::

    .venv/bin/python tests/benchmarks/bench_profiles.py                   # 200k records each
    .venv/bin/python tests/benchmarks/bench_profiles.py --records 1000000 --case count

Per case, the benchmarks' own inputs and apps, written with delta-rs into a fresh warehouse,
then one ``lakestate run APP --until-caught-up --transport inprocess`` in a fresh process
under cProfile, its tasks processed in that process (``worker_pool.workers_wanted`` held at
0, so that the profile sees every task's processing; a real run hands a big batch to a
worker process per core, which changes the wall time, not where the CPU time goes):

- ``count``: the demo app (``jobs/demo.py``) over ``bench_threshold``'s events;
- ``dedup``: ``apps/dedup_bench.py`` over ``bench_dedup``'s ids (5% duplicates);
- ``windowed``: ``apps/windows_bench.py`` (1-minute windows, count, suppress until the
  window closes) over ``bench_windows``' clicks;
- ``temporal_join``: ``jobs/orders.py`` (orders as of their time against a versioned
  customers table, ``bench_versioned``'s input; the table's load run is not profiled);
- ``stream_join``: ``apps/stream_join_bench.py`` over ``bench_stream_join``'s two sides
  (records / 2 each).

Printed per case: the run's wall and CPU seconds under the profiler, then the top functions
by own time (``tottime``) with their share of the profiled total and their calls. Then, for
the cases of ``--timed`` (default: all but the stream join, whose 1M + 1M run takes minutes),
a plain timed run at ``--timed-records`` (1M) in a fresh warehouse: the CLI as users run it
(worker processes as the app configures), wall time from spawn to exit, records/s, CPU and
peak RSS of its process tree, the load average before and after (``bench_threshold.run_tree``;
the temporal join's table load is not timed, as in ``bench_versioned``). Results go to
``tests/benchmarks/results/profiles.json`` (``bench_plot.py`` plots the timed figures). Not a
test.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
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
DEFAULT_JSON = HERE / "results" / "profiles.json"
CASES = ("count", "dedup", "windowed", "temporal_join", "stream_join")
APPS = {
    "count": ROOT / "jobs" / "demo.py",
    "dedup": HERE / "apps" / "dedup_bench.py",
    "windowed": HERE / "apps" / "windows_bench.py",
    "temporal_join": ROOT / "jobs" / "orders.py",
    "stream_join": HERE / "apps" / "stream_join_bench.py",
}
TOP = 15


# -- inputs: each benchmark's own generator, written with delta-rs ------------------------------


def write_dedup(wh: Any, n: int, seed: int) -> None:
    import pandas as pd
    import pyarrow as pa
    from deltalake import CommitProperties, write_deltalake
    from lakestate.io import logtable
    from lakestate.io.topic_records import RECORD_SCHEMA

    bd = sibling("bench_dedup")
    parts = bd.make_input(n, bd.Spec(dup_frac=0.05, late_frac=0.0), seed)
    frame = pd.concat([bd.frame(p, 0, p.n) for p in parts], ignore_index=True)
    data = pa.Table.from_pandas(frame, schema=RECORD_SCHEMA, preserve_index=False)
    ends = {p.partition: p.n for p in parts}
    write_deltalake(
        logtable.create_topic(wh, bd.APP.INPUT_TOPIC, len(parts)),
        data,
        mode="append",
        commit_properties=CommitProperties(
            custom_metadata={"userMetadata": logtable.ends_metadata(ends)}
        ),
    )


def write_windowed(wh: Any, n: int, seed: int) -> None:
    bw = sibling("bench_windows")
    wl = bw.make_windows_input(n, 10_000, 60, seed)
    bw.write_topic(None, wh, "clicks", wl, 1)


def versioned_args(n: int, seed: int) -> argparse.Namespace:
    return argparse.Namespace(
        records=n, customers=max(1_000, n // 10), changes=2.0, ooo=0.3, late=0.1, hours=12,
        seed=seed,
    )  # fmt: skip


def prepare(case: str, base: Path, n: int, seed: int, logs: Path) -> None:
    """The case's input in ``base / "wh"`` (and, for the temporal join, its table loaded)."""
    from lakestate.warehouse import Warehouse

    wh = Warehouse(str(base / "wh"))
    if case == "count":
        sibling("bench_threshold").write_topic(base / "wh", n, seed)
    elif case == "dedup":
        write_dedup(wh, n, seed)
    elif case == "windowed":
        write_windowed(wh, n, seed)
    elif case == "stream_join":
        for i, topic in enumerate(sibling("bench_stream_join").TOPICS):
            sibling("bench_stream_join").write_side(wh, topic, n // 2, seed + i)
    elif case == "temporal_join":
        bv = sibling("bench_versioned")
        inp = bv.make_input(versioned_args(n, seed))
        bv.write_topics(None, wh, inp, orders=False)
        from lakestate.io import logtable

        logtable.create_topic(wh, "orders", bv.PARTITIONS)  # empty until the table is loaded
        run(case, base, None, logs, "load")  # the customers' table, not profiled
        bv.write_topics(None, wh, inp, orders=True)


def run(case: str, base: Path, prof: Path | None, logs: Path, name: str) -> dict[str, Any]:
    """``lakestate run`` of the case's app in a fresh process (under cProfile: ``prof``)."""
    cli = ["--warehouse", str(base / "wh"), "run", str(APPS[case]), "--until-caught-up"]
    cli += ["--transport", "inprocess", "--state-dir", str(base / "state")]
    cmd = [sys.executable, __file__, "_child", str(prof or ""), "--", *cli]
    load = round(os.getloadavg()[0], 2)
    started = time.monotonic()
    out = logs / f"{case}-{name}.log"
    with open(out, "w") as f:
        rc = subprocess.run(cmd, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT).returncode
    if rc != 0:
        raise RuntimeError(f"{case} {name} exited {rc}: {out.read_text()[-3000:]}")
    return {"wall_s": round(time.monotonic() - started, 2), "load_before": load}


def timed(case: str, base: Path, n: int, seed: int, logs: Path) -> dict[str, Any]:
    """A plain run of the case at ``n`` records, as users run it, timed from outside."""
    prepare(case, base, n, seed, logs)
    cli = str(Path(sys.executable).parent / "lakestate")
    cmd = [cli, "--warehouse", str(base / "wh"), "run", str(APPS[case]), "--until-caught-up"]
    cmd += ["--transport", "inprocess", "--state-dir", str(base / "state")]
    r = sibling("bench_threshold").run_tree(cmd, f"{case}-timed", logs)
    r.pop("output")
    r.update(records=n, records_per_s=round(n / r["wall_s"]))
    return r


def child(argv: list[str]) -> int:
    """``_child PROF -- CLI...``: the lakestate CLI in this process, its tasks in this
    process too, under cProfile when PROF is given."""
    prof, cli = argv[0], argv[2:]
    from lakestate.cli import main as lakestate_main
    from lakestate.runtime import inprocess

    inprocess.workers_wanted = lambda *a, **k: 0  # every task in this process: profiled
    if not prof:
        return lakestate_main(cli) or 0
    profiler = cProfile.Profile()
    rc = profiler.runcall(lakestate_main, cli)
    profiler.dump_stats(prof)
    return rc or 0


def top_functions(prof: Path, n: int) -> dict[str, Any]:
    """The ``n`` functions with the most own time, each with its share of the total."""
    stats = pstats.Stats(str(prof))
    total = stats.total_tt
    rows = []
    for (file, line, func), (_, calls, tottime, cumtime, _) in stats.stats.items():
        where = file.split("/lib/")[-1].split("site-packages/")[-1]
        rows.append(
            {
                "function": f"{where}:{line}({func})",
                "own_s": round(tottime, 2),
                "share": round(tottime / total, 3) if total else 0.0,
                "calls": calls,
                "cum_s": round(cumtime, 2),
            }
        )
    rows.sort(key=lambda r: -r["own_s"])
    return {"total_s": round(total, 2), "top": rows[:n]}


def report(results: dict[str, Any]) -> None:
    for case, r in results["cases"].items():
        if "top" not in r:
            continue
        print(
            f"\n{case}: {r['records']:,} records, {r['wall_s']} s under cProfile "
            f"(profiled total {r['total_s']} s), load {r['load_before']}"
        )
        print("| function | own s | share | calls |")
        print("|---|---|---|---|")
        for row in r["top"]:
            print(
                f"| `{row['function']}` | {row['own_s']} | {row['share']:.1%} | {row['calls']:,} |"
            )


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["_child"]:
        return child(argv[1:])
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--records", type=int, default=200_000)
    p.add_argument("--case", action="append", choices=CASES, help="default: every case")
    p.add_argument("--seed", type=int, default=28)
    p.add_argument("--top", type=int, default=TOP)
    p.add_argument("--timed", default="count,dedup,windowed,temporal_join")
    p.add_argument("--timed-records", type=int, default=1_000_000)
    p.add_argument("--no-profile", action="store_true", help="timed runs only, added to --json")
    p.add_argument("--json", default=str(DEFAULT_JSON))
    args = p.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="bench-profiles-"))
    logs = work / "logs"
    logs.mkdir()
    results: dict[str, Any] = {
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "cases": {},
    }
    if args.no_profile and Path(args.json).exists():
        results["cases"] = json.loads(Path(args.json).read_text())["cases"]
    try:
        for case in [] if args.no_profile else args.case or CASES:
            base = work / case
            log(f"{case}: writing {args.records:,} records")
            prepare(case, base, args.records, args.seed, logs)
            log(f"{case}: profiling")
            prof = work / f"{case}.prof"
            r = run(case, base, prof, logs, "profiled")
            r.update(records=args.records, **top_functions(prof, args.top))
            results["cases"][case] = r
            Path(args.json).write_text(json.dumps(results, indent=1))
            shutil.rmtree(base)
        for case in [c for c in args.timed.split(",") if c and (not args.case or c in args.case)]:
            log(f"{case}: timed run of {args.timed_records:,} records")
            r = timed(case, work / case, args.timed_records, args.seed, logs)
            log(f"  {r['wall_s']} s, {r['records_per_s']:,} records/s, load {r['load_before']}")
            results["cases"].setdefault(case, {})["timed"] = r
            Path(args.json).write_text(json.dumps(results, indent=1))
            shutil.rmtree(work / case)
    finally:
        report(results)
        Path(args.json).write_text(json.dumps(results, indent=1))
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
