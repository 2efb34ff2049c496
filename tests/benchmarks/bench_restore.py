"""Benchmark of restoring a wiped task store from its changelog (bench_scheduled's case e),
for the dedup app with ~1M ids in state, comparing two engines side by side: lib/ of a git
revision (``--base``, default HEAD) and another (``--new``; default: the checkout as it is).

Run from the repository root::

    .venv/bin/python tests/benchmarks/bench_restore.py             # 1M ids, 3 rounds
    .venv/bin/python tests/benchmarks/bench_restore.py --quick     # 50k ids, 1 round

The state is built once, as bench_scheduled's case c builds it (``--ids`` records of the
dedup app from empty state through a fresh ``lakestate run``; no SSS). Then, per round and
per engine (their order alternating):

1. **In process**: a fresh process with that engine first on its path wipes each task's
   store and restores it (``recovery.restore``), timed per task with the changelog read
   (``changelog.read_state``) apart; then it reads every key and value of every column
   family of the restored store and prints their SHA-256, which must be the same for both
   engines (the restored stores are byte-for-byte equal).
2. **Fresh run**: new records appended (``--fresh-records``), the app's state directory
   deleted, and ``lakestate run --until-caught-up`` timed with the timing hooks of the base
   revision's bench_scheduled: rows restored per second of its recovery (Spark starts
   beside it).

The machine's load averages are recorded with every figure. Results go to
``tests/benchmarks/results/restore.json``.
"""

from __future__ import annotations

import argparse
import hashlib
import inspect
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
DEFAULT_JSON = HERE / "results" / "restore.json"
TARGET_RESTORE = 300_000  # rows/s, at least


def _scheduled(directory: Path) -> Any:
    """bench_scheduled (and its siblings) from ``directory``: a committed snapshot, so that
    uncommitted edits of the benchmarks in this shared checkout are not run."""
    sys.path.insert(0, str(directory))
    import bench_scheduled

    return bench_scheduled


# -- the child: one engine's restore of every task, in process ----------------------------------


def child_restore(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="bench_restore.py _restore")
    p.add_argument("--app", required=True)
    p.add_argument("--warehouse", required=True)
    p.add_argument("--state-dir", required=True)
    p.add_argument("--report", required=True)
    args = p.parse_args(argv)
    import lakestate
    from lakestate.app import load_app
    from lakestate.checkpoint import changelog
    from lakestate.checkpoint import layout as app_layout
    from lakestate.checkpoint.standing import where_tasks_stand
    from lakestate.checkpoint.task_dir import TaskDir
    from lakestate.restore import recovery
    from lakestate.state.base import isolation_for
    from lakestate.warehouse import Warehouse

    def no_spark():
        raise RuntimeError("the benchmark's topics exist: no Spark needed")

    app = load_app(args.app)
    # layout.prepare was renamed ensure_layout (2026-11-28); an engine before 2026-11-24's
    # delta-rs topic creation takes a Spark getter first.
    prepare = getattr(app_layout, "ensure_layout", None) or app_layout.prepare
    older = "spark" in inspect.signature(prepare).parameters
    wh = Warehouse(args.warehouse)
    layout = prepare(no_spark, app, wh) if older else prepare(app, wh)
    tasks = layout.tasks()
    where = where_tasks_stand(layout, tasks)
    read_seconds = [0.0]
    read_state = changelog.read_state

    def timed_read_state(*a: Any, **k: Any) -> Any:
        t = time.monotonic()
        try:
            return read_state(*a, **k)
        finally:
            read_seconds[0] += time.monotonic() - t

    changelog.read_state = timed_read_state
    read_live = getattr(changelog, "read_live", None)
    if read_live is not None:

        def timed_read_live(*a: Any, **k: Any) -> Any:
            t = time.monotonic()
            try:
                return read_live(*a, **k)
            finally:
                read_seconds[0] += time.monotonic() - t

        changelog.read_live = timed_read_live
    per_task = []
    for task in tasks:
        read_seconds[0] = 0.0
        load = [round(x, 2) for x in os.getloadavg()]
        t = time.monotonic()
        rows = recovery.restore(
            layout,
            task,
            where.committed[task],
            args.state_dir,
            isolation_for(app.config),
            lambda _msg: None,
            "wiped by the benchmark",
        )
        seconds = time.monotonic() - t
        store = TaskDir(args.state_dir, app.name, task).open(isolation_for(app.config))
        try:
            digest, entries = _digest(store)
        finally:
            store.close()
        per_task.append(
            {
                "task": str(task),
                "rows": rows,
                "seconds": round(seconds, 3),
                "read_changelog_s": round(read_seconds[0], 3),
                "rows_per_s": round(rows / seconds),
                "load_before": load,
                "entries": entries,
                "sha256": digest,
            }
        )
    report = {"engine": str(Path(lakestate.__file__).parent), "tasks": per_task}
    Path(args.report).write_text(json.dumps(report))
    return 0


def _digest(store: Any) -> tuple[str, int]:
    """SHA-256 over every (column family, key, value) of a task's RocksDB store, and the
    number of entries."""
    from rocksdict import Rdict

    backend = store._backend
    h = hashlib.sha256()
    n = 0
    for name in sorted(Rdict.list_cf(backend.path, backend._options)):
        for key, value in backend.iterate(name, None, None, False):
            for part in (name.encode(), key, value):
                h.update(len(part).to_bytes(8, "big"))
                h.update(part)
            n += 1
    return h.hexdigest(), n


# -- the parent ---------------------------------------------------------------------------------


def rev_parse(rev: str) -> str:
    if rev == "tree":
        return rev
    return subprocess.run(
        ["git", "rev-parse", rev], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()


def snapshot(rev: str, dest: Path, path: str = "lib") -> str:
    """``path`` of git revision ``rev``, extracted under ``dest``; returns its path."""
    archive = subprocess.run(
        ["git", "archive", "--format=tar", rev, path], cwd=ROOT, capture_output=True, check=True
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(dest, filter="data")
    return str(dest / path)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["_restore"]:
        return child_restore(argv[1:])
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ids", type=int, help="records of the base input (~95%% new ids; 1M)")
    p.add_argument("--rounds", type=int, help="rounds of both engines (3)")
    p.add_argument("--base", default="HEAD", help="the git revision to compare with (HEAD)")
    p.add_argument(
        "--new",
        default="tree",
        help="the git revision to measure, or tree: the checkout as it is, others' "
        "uncommitted edits included (default)",
    )
    p.add_argument(
        "--fresh-records",
        type=int,
        default=250_000,
        help="new records before each fresh run (250k: more than lakestate.inprocess.max."
        "records' default, so that the run starts Spark beside its restore)",
    )
    p.add_argument("--quick", action="store_true", help="50k ids, one round")
    p.add_argument("--master", default="local[2]")
    p.add_argument("--keep", action="store_true", help="keep the temporary directory")
    p.add_argument("--json", default=str(DEFAULT_JSON))
    args = p.parse_args(argv)
    args.ids = args.ids or (50_000 if args.quick else 1_000_000)
    args.rounds = args.rounds or (1 if args.quick else 3)
    work = Path(tempfile.mkdtemp(prefix="lakestate-bench-restore-"))
    # The benchmarks of the base revision: their timing hooks name only modules it has.
    snapshot(args.base, work / "bench", "jobs")
    bs = _scheduled(Path(snapshot(args.base, work / "bench", "tests/benchmarks")))
    new_records = args.fresh_records
    sargs = bs.parse_args(
        [
            "--case",
            "e",
            "--state-keys",
            str(args.ids),
            "--new-records",
            str(new_records),
            "--rounds",
            str(2 * args.rounds),
            "--master",
            args.master,
        ]
    )
    import common

    os.environ["LAKESTATE_SHUFFLE_PARTITIONS"] = bs.SHUFFLE_PARTITIONS
    os.environ["LAKESTATE_DRIVER_MEMORY"] = sargs.driver_memory
    os.environ["LAKESTATE_SPARK_CONF"] = json.dumps(
        {"spark.sql.streaming.stateStore.providerClass": common.ROCKSDB_PROVIDER}
    )
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    revisions = {name: rev_parse(rev) for name, rev in (("base", args.base), ("new", args.new))}
    engines = {
        name: str(ROOT / "lib") if rev == "tree" else snapshot(rev, work / name)
        for name, rev in revisions.items()
    }
    os.environ.setdefault("LAKESTATE_IVY_DIR", str(ROOT / ".cache" / "ivy"))
    # The state is built by the base engine (this process's lakestate too: nothing has
    # imported it yet), so that a half-edited checkout cannot break the build.
    sys.path.insert(0, engines["base"])
    os.environ["PYTHONPATH"] = engines["base"]
    results: dict[str, Any] = {
        "args": vars(args),
        "revisions": revisions,
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "load_start": bs.loadavg(),
        "rounds": [],
    }
    out = Path(args.json)
    bench = bs.Bench(sargs, work, {})
    try:
        fx = bench.dedup_fixture()
        results["build"] = bench.build(fx, with_sss=False)
        results["build"].pop("lakestate", None)
        for r in range(args.rounds):
            order = ["base", "new"] if r % 2 == 0 else ["new", "base"]
            round_: dict[str, Any] = {name: {} for name in order}
            # Both engines restore the same state, then each runs once more (new records).
            for name in order:
                os.environ["PYTHONPATH"] = engines[name]
                round_[name]["in_process"] = in_process(bs, fx, work, name)
            for name in order:
                os.environ["PYTHONPATH"] = engines[name]
                round_[name]["fresh_run"] = fresh_run(bs, bench, fx, name, new_records)
            digests = {n: [t["sha256"] for t in round_[n]["in_process"]["tasks"]] for n in order}
            round_["same_store"] = digests["base"] == digests["new"]
            results["rounds"].append(round_)
            bs.log(f"round {r + 1}: restored stores equal: {round_['same_store']}")
    finally:
        os.environ.pop("PYTHONPATH", None)
        bench.stop()
        results["load_end"] = bs.loadavg()
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(results, indent=2, default=str) + "\n")
        if args.keep:
            bs.log(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    report(results)
    return 0 if all(r["same_store"] for r in results["rounds"]) else 1


def in_process(bs: Any, fx: Any, work: Path, name: str) -> dict[str, Any]:
    """Every task restored by a fresh process running engine ``name`` (``_restore``)."""
    state_dir = work / "restore-state"
    shutil.rmtree(state_dir, ignore_errors=True)
    report_path = work / f"restore-{name}.json"
    load = bs.loadavg()
    subprocess.run(
        [
            sys.executable,
            __file__,
            "_restore",
            "--app",
            fx.app_path,
            "--warehouse",
            fx.wh.root,
            "--state-dir",
            str(state_dir),
            "--report",
            str(report_path),
        ],
        cwd=ROOT,
        check=True,
    )
    shutil.rmtree(state_dir, ignore_errors=True)
    out = json.loads(report_path.read_text())
    rows = sum(t["rows"] for t in out["tasks"])
    seconds = sum(t["seconds"] for t in out["tasks"])
    out.update(rows=rows, seconds=round(seconds, 3), rows_per_s=round(rows / seconds), load=load)
    bs.log(f"{name}: in process {rows:,} rows in {seconds:.2f}s (load {load})")
    return out


def fresh_run(bs: Any, bench: Any, fx: Any, name: str, records: int) -> dict[str, Any]:
    """New records, the app's state directory deleted, and ``lakestate run`` (engine
    ``name``) timed with bench_scheduled's hooks."""
    fx.append(records)
    shutil.rmtree(Path(fx.state_dir) / fx.app_name, ignore_errors=True)
    run = bench.commands.lakestate(fx, instrumented=True)
    rows = sum(run.get("restored_rows", {}).values())
    recover = run["phases"]["_recover"]
    out = {
        "rows": rows,
        "recover_s": recover,
        "rows_per_s_of_recover": round(rows / recover) if recover else None,
        "wall_s": run["wall_s"],
        "load_before": run["load_before"],
        "phases": {k: v for k, v in run["phases"].items() if "restore" in k or k == "_recover"},
    }
    bs.log(f"{name}: fresh run {rows:,} rows, recovery {recover:.2f}s (load {run['load_before']})")
    return out


def report(results: dict[str, Any]) -> None:
    print(
        f"\nRestore of the dedup app's ~{results['args']['ids']:,}-record state; target >= "
        f"{TARGET_RESTORE:,} rows/s. base = lib/ of {results['revisions']['base'][:12]}, "
        f"new = {results['revisions']['new'][:12]}"
    )
    print(f"{'round':>5} {'engine':>6} {'in process rows/s':>18} {'fresh run rows/s':>17}  load")
    for i, r in enumerate(results["rounds"], 1):
        for name in ("base", "new"):
            m = r[name]
            print(
                f"{i:>5} {name:>6} {m['in_process']['rows_per_s']:>18,} "
                f"{m['fresh_run']['rows_per_s_of_recover'] or 0:>17,}  "
                f"{m['in_process']['load']} / {m['fresh_run']['load_before']}"
            )
        print(f"{'':>5} restored stores byte-for-byte equal: {r['same_store']}")


if __name__ == "__main__":
    sys.exit(main())
