"""The scheduled-run shape on a warehouse on object storage against the same on a local
folder (issue 27 item 6): the dedup app with ~1M ids in state, then rounds of 10k new
records, each round a fresh ``lakestate run --until-caught-up --transport inprocess`` on
each warehouse, interleaved (the order alternates), with where each run's time goes.

Run from the repository root::

    # the issue's figures: 1M ids, 10k new records a round, 4 rounds per side
    .venv/bin/python tests/benchmarks/bench_object_store.py
    # a check at a small size
    .venv/bin/python tests/benchmarks/bench_object_store.py --ids 30000 --new-records 3000 \\
        --rounds 2 --json /tmp/object-store-small.json

The object store is the S3-compatible server the tests start (``tests/integration/
s3_server.py``: moto's S3 server on 127.0.0.1, one request at a time, installed by
``scripts/setup.sh``), reached through the S3 API as any bucket is (``AWS_ENDPOINT_URL`` and
credentials in the environment, inherited by every process); the warehouse is
``s3://bench/warehouse``. The local one is a folder in the temporary directory. Both get the
same input (``bench_dedup``'s generator, the same seed: 5% duplicates, no late records) and
the same app (``apps/dedup_bench.py``); both state directories are local (a run's stores
are on its machine's disk either way).

Every lakestate run goes through ``bench_scheduled.py``'s ``_lakestate`` child (the CLI
with the engine's phase functions wrapped: ``LAKESTATE_HOOKS``), so each run's seconds are
split into start-up, reading the tables' state (layout, progress, recovery, plan), reading
the input, processing, the commits (progress, the tables, the local stores) and exit; the
engine's own figure, its ``batch ...: N records, ..., Xs`` line, is printed beside. Prints
a table: the backlog that builds the state, the rounds with new records, a run with
nothing new, the object store / local ratio of each, the 1-minute load average before and
after each run; then the phases of both sides by median across the rounds, and round by
round the S3 side's steps with the tables' commits, files and log files. Writes
everything to ``--json`` (default ``tests/benchmarks/results/object_store.json``).

``--requests`` counts the S3 side's requests by step and kind (listing, commit file,
checkpoint, data file, put: ``s3_requests.py``, from the test server's request log).
``--maintain-every N`` runs ``lakestate maintain`` (or ``--maintain compact``) on both
warehouses after every N rounds, as a schedule would, each a fresh timed process::

    .venv/bin/python tests/benchmarks/bench_object_store.py --ids 30000 --new-records 3000 \
        --rounds 20 --maintain-every 5 --requests
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import s3_requests
from common import log, sibling

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
DEFAULT_JSON = HERE / "results" / "object_store.json"
BUCKET = "bench"
SIDES = ("local", "s3")

#: The phases of bench_scheduled's MAIN_PHASES summed into the steps the table shows.
STEPS = {
    "start-up, exit (python, imports, lock, prints)": (
        "startup (python, imports)",
        "other in the CLI (lock, prints, between phases)",
        "exit (JVM and interpreter shutdown)",
    ),
    "read the tables' state (app, roles, layout, progress, recovery, plan)": (
        "the warehouse checked (on S3: its bucket reached)",
        "load the app (its module, topology)",
        "the instance's roles and fences (scale-out tables)",
        "prepare (tables, tasks)",
        "where the tasks stand (progress table, txn versions)",
        "recover (local stores checked)",
        "  restore, besides reading and writing",
        "  restore: read the changelog",
        "  restore: write the local store",
        "plan (end offsets)",
    ),
    "read the input (delta-rs)": ("in process: read the task's ranges (delta-rs)",),
    "process": (
        "in process: process_task in the driver",
        "process, other (the rows' results, batch bookkeeping)",
    ),
    "commit: progress (the fence)": ("progress commit",),
    "commit: the tables (sink + changelog)": ("table commits (sink + changelog, concurrent)",),
    "commit: local stores, other": ("local commit", "commit, other"),
}


def median(values: list[float]) -> float | None:
    return round(statistics.median(values), 3) if values else None


def start_store(work: Path) -> Any:
    """The S3 server, its settings in this process's environment (every child inherits
    them), the bucket created."""
    sys.path.insert(0, str(ROOT / "tests" / "integration"))
    from s3_server import start_server

    server = start_server(work / "s3-server")
    os.environ.update(server.env())
    os.environ.pop("AWS_S3_ALLOW_UNSAFE_RENAME", None)  # never needed (docs/architecture.md)
    server.create_bucket(BUCKET)
    log(f"S3 server {server.endpoint} up in {server.start_seconds:.1f}s")
    return server


def fixtures(bs: Any, work: Path, args: argparse.Namespace) -> dict[str, Any]:
    """The dedup app's input on each warehouse: the same generator and seed."""
    total = args.ids + (args.rounds + 2) * args.new_records
    log(f"dedup input: generating {total:,} records (twice: one generator per warehouse)")
    return {
        "local": bs.DedupFixture(work / "local", None, total, args.seed),
        "s3": bs.DedupFixture(work / "s3", None, total, args.seed, f"s3://{BUCKET}/warehouse"),
    }


def interleaved(
    commands: Any, fx: dict[str, Any], n: int | None, order: tuple[str, ...], requests: Any
) -> dict[str, dict[str, Any]]:
    """``n`` new records appended on both warehouses (None: nothing new), then one run per
    warehouse in ``order``, each a fresh instrumented process (``requests``: the S3
    server's request log, counted by phase for the S3 side's run; or None)."""
    if n:
        for side in SIDES:
            fx[side].append(n)
    out = {}
    for side in order:
        if requests:
            requests.take()  # the input's appends and the other side's run
        run = commands.lakestate(fx[side], instrumented=True)
        if requests and side == "s3":
            events = commands.logs / f"events-{commands.count:03d}.json"
            run["requests"] = s3_requests.by_phase(requests.take(), events, requests.labels)
        out[side] = run
        log(
            f"  {side}: {run['records'] or 0:,} records in {run['wall_s']:.2f}s "
            f"(engine's batches {sum(run['batch_s']):.2f}s; load {run['load_before'][0]:.1f} "
            f"-> {run['load_after'][0]:.1f}; {run.get('transport')})"
        )
    return out


def steps_of(phases: dict[str, float]) -> dict[str, float]:
    """A run's phases summed into ``STEPS``."""
    return {step: round(sum(phases.get(p, 0.0) for p in names), 3) for step, names in STEPS.items()}


def maintenance(commands: Any, fx: dict[str, Any], what: str, order: tuple[str, ...]) -> dict:
    """``lakestate compact APP`` or ``lakestate maintain APP`` (compaction, OPTIMIZE,
    VACUUM) on each warehouse in ``order``, as a schedule would run it between rounds; each
    a fresh process, timed."""
    out = {}
    for side in order:
        cmd = [bs_cli(), "--warehouse", fx[side].wh.root, what, fx[side].app_path]
        run = commands._run(cmd, f"{what}-{side}")
        said = run.pop("output").strip().splitlines()
        run["said"] = said[-1] if said else ""
        out[side] = run
        log(f"  {what} {side}: {run['wall_s']:.2f}s ({run['said']})")
    return out


def bs_cli() -> str:
    return str(Path(sys.executable).parent / "lakestate")


def measure(bs: Any, work: Path, args: argparse.Namespace, requests: Any) -> dict[str, Any]:
    commands = bs.Commands(work, args.master, args.transport)
    fx = fixtures(bs, work, args)
    res: dict[str, Any] = {"load_start": bs.loadavg()}
    t = {}
    for side in SIDES:
        started = time.monotonic()
        fx[side].append(args.ids)
        t[side] = round(time.monotonic() - started, 2)
    res["input_write_s"] = t
    log(f"input: {args.ids:,} records written (local {t['local']}s, s3 {t['s3']}s); backlog")
    res["backlog"] = interleaved(commands, fx, None, SIDES, requests)
    res["rounds"] = []
    for r in range(args.rounds):
        log(f"round {r + 1}: {args.new_records:,} new records")
        order = SIDES if r % 2 else tuple(reversed(SIDES))
        res["rounds"].append(interleaved(commands, fx, args.new_records, order, requests))
        res["rounds"][-1]["tables"] = s3_requests.table_sizes(Path(fx["local"].wh.root))
        if args.maintain_every and (r + 1) % args.maintain_every == 0:
            res["rounds"][-1]["maintenance"] = maintenance(commands, fx, args.maintain, order)
    log("nothing new")
    res["idle"] = interleaved(commands, fx, None, SIDES, requests)
    res["check"] = check(fx)
    res["load_end"] = bs.loadavg()
    return res


def check(fx: dict[str, Any]) -> dict[str, Any]:
    """Each warehouse's output holds one record per distinct id."""
    from lakestate.io import delta_commits

    out = {}
    for side in SIDES:
        path = fx[side].wh.topic_path(fx[side].output_topic)
        out[side] = delta_commits.open_table(path).to_pyarrow_dataset().count_rows()
    out["expected"] = fx["local"].distinct_ids()
    out["ok"] = out["local"] == out["s3"] == out["expected"]
    return out


def ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}" if a and b else "-"


def print_rows(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> None:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    for i, row in enumerate([header, *rows]):
        cells = [row[0].ljust(widths[0])] + [
            c.rjust(w) for c, w in zip(row[1:], widths[1:], strict=True)
        ]
        print("  " + "  ".join(cells))
        if i == 0:
            print("  " + "-" * (sum(widths) + 2 * (len(widths) - 1)))


def run_cell(run: dict[str, Any]) -> str:
    return f"{run['wall_s']:.2f} ({run['load_before'][0]:.1f}->{run['load_after'][0]:.1f})"


def report(res: dict[str, Any]) -> None:
    a = res["args"]
    rounds = res["rounds"]
    print(
        f"\nScheduled runs of the dedup app, {a['ids']:,} ids in state, object store (moto's "
        f"S3 server, s3://{BUCKET}/warehouse) against a local folder; transport "
        f"{a['transport']}; fresh processes, interleaved; wall s (1-minute load before->after)"
    )
    rows = [("backlog, from empty state", *(run_cell(res["backlog"][s]) for s in SIDES))]
    rows[0] += (ratio(res["backlog"]["s3"]["wall_s"], res["backlog"]["local"]["wall_s"]),)
    for i, r in enumerate(rounds):
        cells = tuple(run_cell(r[s]) for s in SIDES)
        rows.append((f"round {i + 1}: {a['new_records']:,} new", *cells, ""))
    med = {s: median([r[s]["wall_s"] for r in rounds]) for s in SIDES}
    rows.append(
        (
            f"median of {len(rounds)} rounds",
            *(f"{med[s]:.2f}" for s in SIDES),
            ratio(med["s3"], med["local"]),
        )
    )
    eng = {s: median([sum(r[s]["batch_s"]) for r in rounds]) for s in SIDES}
    rows.append(
        (
            "  the engine's batch line (median)",
            *(f"{eng[s]:.2f}" for s in SIDES),
            ratio(eng["s3"], eng["local"]),
        )
    )
    idle = res["idle"]
    rows.append(
        (
            "nothing new",
            *(run_cell(idle[s]) for s in SIDES),
            ratio(idle["s3"]["wall_s"], idle["local"]["wall_s"]),
        )
    )
    print_rows(("", "local folder", "object store", "s3 / local"), rows)
    report_steps(res)
    report_rounds(res)


def report_rounds(res: dict[str, Any]) -> None:
    """Round by round: each side's wall, the S3 side's steps (seconds, and requests with
    ``--requests``), the tables' commits and files, and maintenance runs."""
    print("\nRound by round (S3 side's steps: seconds / requests; tables of the local side):")
    short = {step: step.split(" (")[0].replace("commit: ", "") for step in STEPS}
    header = ("round", "local", "s3", *short.values(), "requests", "tables: commits/files/log")
    rows = []
    for i, r in enumerate(res["rounds"]):
        s3 = r["s3"]
        steps = steps_of(s3["phases"])
        req = s3.get("requests") or {}
        cells = []
        for step, names in STEPS.items():
            n = sum(req.get(name, {}).get("requests", 0) for name in names)
            cells.append(f"{steps[step]:.2f}" + (f"/{n}" if req else ""))
        tables = r.get("tables") or {}
        sizes = (
            f"{sum(t['version'] + 1 for t in tables.values())}/"
            f"{sum(t['files'] for t in tables.values())}/"
            f"{sum(t['log_files'] for t in tables.values())}"
        )
        total = sum(v["requests"] for v in req.values()) if req else 0
        rows.append((str(i + 1), f"{r['local']['wall_s']:.2f}", f"{s3['wall_s']:.2f}", *cells,
                     str(total) if req else "-", sizes))  # fmt: skip
        if "maintenance" in r:
            m = r["maintenance"]
            rows.append(("  maint.", f"{m['local']['wall_s']:.2f}", f"{m['s3']['wall_s']:.2f}",
                         *[""] * len(STEPS), "", m["s3"]["said"][:40]))  # fmt: skip
    print_rows(header, rows)
    last = res["rounds"][-1] if res["rounds"] else {}
    if last.get("s3", {}).get("requests"):
        print("\nThe last round's requests by phase (S3 side):")
        for phase, row in last["s3"]["requests"].items():
            kinds = ", ".join(f"{k} {row[k]}" for k in s3_requests.KINDS if k in row)
            print(
                f"  {phase.strip()}: {row['requests']} ({row['seconds']:.2f}s in the server): {kinds}"
            )
    if last.get("tables"):
        print("\nThe tables after the last round (local side): version / files / _delta_log files")
        for path, t in last["tables"].items():
            print(f"  {path}: {t['version']} / {t['files']} / {t['log_files']}")


def report_steps(res: dict[str, Any]) -> None:
    """Where the rounds' time goes on each side, by step and by phase."""
    rounds = res["rounds"]
    print(f"\nWhere a round's time goes (seconds, median of {len(rounds)} rounds, by step):")
    steps = {s: [steps_of(r[s]["phases"]) for r in rounds] for s in SIDES}
    step_rows = []
    for step in STEPS:
        m = {s: median([x[step] for x in steps[s]]) for s in SIDES}
        step_rows.append(
            (step, f"{m['local']:.3f}", f"{m['s3']:.3f}", f"{m['s3'] - m['local']:+.3f}")
        )
    print_rows(("step", "local folder", "object store", "difference"), step_rows)
    print("\nThe phases in full (median of the rounds; bench_scheduled's MAIN_PHASES):")
    names = [k for k in rounds[0]["local"]["phases"] if not k.startswith("_")] if rounds else []
    full = []
    for name in names:
        m = {s: median([r[s]["phases"].get(name, 0.0) for r in rounds]) for s in SIDES}
        if m["local"] or m["s3"]:
            full.append(
                (
                    name.strip(),
                    f"{m['local']:.3f}",
                    f"{m['s3']:.3f}",
                    f"{m['s3'] - m['local']:+.3f}",
                )
            )
    print_rows(("phase", "local folder", "object store", "difference"), full)
    b = res["backlog"]
    print(
        "\nbacklog by step (s): "
        + "; ".join(
            f"{s}: "
            + ", ".join(f"{k.split(' (')[0]} {v:.2f}" for k, v in steps_of(b[s]["phases"]).items())
            for s in SIDES
        )
    )
    print(f"check: {res['check']}")
    ls, le = res["load_start"], res["load_end"]
    print(
        f"load average {ls[0]:.1f}/{ls[1]:.1f}/{ls[2]:.1f} -> {le[0]:.1f}/{le[1]:.1f}/{le[2]:.1f}\n"
    )


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ids", type=int, default=1_000_000, help="ids in state: the backlog (1M)")
    p.add_argument("--new-records", type=int, default=10_000, help="records per round (10k)")
    p.add_argument("--rounds", type=int, default=4, help="rounds with new records (4)")
    p.add_argument(
        "--transport", default="inprocess", choices=("auto", "inprocess", "spark"),
        help="lakestate run's --transport (inprocess: the issue's shape)",
    )  # fmt: skip
    p.add_argument("--master", default="local[2]", help="Spark's master (--transport spark)")
    p.add_argument(
        "--engine", choices=("head", "tree"), default="head", help="as bench_scheduled's"
    )
    p.add_argument("--seed", type=int, default=42)
    p.add_argument(
        "--maintain-every", type=int, default=0, metavar="N",
        help="run --maintain on both warehouses after every N rounds (0: never)",
    )  # fmt: skip
    p.add_argument(
        "--maintain", choices=("compact", "maintain"), default="maintain",
        help="lakestate compact (changelogs) or maintain (compact, OPTIMIZE, VACUUM)",
    )  # fmt: skip
    p.add_argument(
        "--requests", action="store_true",
        help="count the S3 side's requests by step (the S3 server's request log)",
    )  # fmt: skip
    p.add_argument("--keep", action="store_true", help="keep the temporary directory")
    p.add_argument("--json", default=str(DEFAULT_JSON), help="where to write the results")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    bs = sibling("bench_scheduled")
    work = Path(tempfile.mkdtemp(prefix="lakestate-bench-object-store-"))
    os.environ["LAKESTATE_LOG_DIR"] = str(work / "lakestate-logs")
    engine = bs.snapshot_engine(work, args.engine)  # before anything imports lakestate
    results: dict[str, Any] = {
        "args": {k: v for k, v in vars(args).items() if k != "json"},
        "engine": engine,
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    requests = None
    if args.requests:
        log_path = work / "s3-requests.log"
        os.environ[s3_requests.REQUEST_LOG_ENV] = str(log_path)
        requests = s3_requests.RequestLog(log_path, dict(bs.MAIN_PHASES))
    server = start_store(work)
    try:
        results.update(measure(bs, work, args, requests))
    finally:
        server.stop()
        out = Path(args.json)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(results, indent=2, default=str) + "\n")
        if args.keep:
            log(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    report(results)
    log(f"results written to {args.json}")
    return 0 if results["check"]["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
