"""Benchmark of moving a task with ~1M keys in state to a new instance (issue 17, item 8):
with warmups (KIP-441: the new instance restores the store while the old owner keeps
committing; the active moves once it caught up) versus without (the active moves at
once, as a pre-KIP-441 assignor moves it, and the new owner restores before it
processes). The figure is the longest time the task goes without a committed batch.

Run from the repository root::

    .venv/bin/python tests/benchmarks/bench_warmup.py            # 1M keys
    .venv/bin/python tests/benchmarks/bench_warmup.py --quick    # 100k keys: a check

The app (``apps/warmup_bench.py``) counts records per key in a key-value store over a
topic of two partitions: tasks 0_0 and 0_1. The task the assignor moves when instance
``b`` joins ``a`` (asked of ``lakestate.assign`` itself) gets ``--keys`` distinct keys
(1M), the other 1,000; produced through lakestate's delta-rs path
(``Topic.append``) and processed by instance ``a`` alone into its store (not
timed). That state is copied for every scenario.

A **tick** is what the app's DAG does per scheduled run: new records (``--tick-records``
on the moved task, 10k, and 100 on the other), then ``lakestate rebalance``, then each
instance's ``lakestate run APP --instance NAME --until-caught-up``, all instances at once,
each a fresh process (``python -m lakestate.cli``; the runs through a wrapper of the CLI,
``_cli``, that times ``recovery.restore`` and ``recovery.warm`` and nothing else). Ticks
start every ``--interval`` seconds, or at once when the last one ran longer (the DAG's
``max_active_runs=1``, no catch-up); interval 0: back to back, the fastest cadence. Per
cadence, both scenarios start from the same copied state, with ``--steady-ticks`` ticks
of ``a`` alone (the normal batch interval: the median time between the moved task's
consecutive committed batches, from its progress rows' ``at_ms``), then:

- **with warmups**: ``b`` is added to the app's config (``BENCH_WARMUP_INSTANCES``, read by
  the app); the ticks go on: the rebalance gives ``b`` a warmup, ``b``'s runs restore the
  store from Delta while ``a`` commits, and a later rebalance moves the active to ``b``
  once its lag is within ``acceptable.recovery.lag``.
- **without warmups**: the same config change, but the tick's rebalance is replaced by a
  generation written directly (``assign.history.write_generation`` and the ownership
  fence, ``ownership.write_fence``): the active goes to ``b``, which holds no state, at
  once. The ticks after it rebalance as usual (``b``, caught up by then, keeps the task).

Each scenario ends once ``b`` has committed ``--after`` batches of the task. Printed: the
normal batch interval, each scenario's longest gap across the move (from the config change
to ``b``'s first batch of the task; the gaps after it are printed as ``b``'s settled
intervals) and its ratio to the interval, the rate of ``b``'s restore (rows/s, timed inside
its run), every batch's gap, and the load averages.
Target: the longest gap with warmups no longer than one normal batch interval (met when
it is within the longest steady-state interval; its ratio to the median is printed too).
The script reports, never asserts. Results: ``tests/benchmarks/results/warmup.json``.

The engine is lib/ as committed at HEAD (``--engine head``, the default: extracted and
put first on ``PYTHONPATH``, so that others' uncommitted edits in a shared checkout are
not measured) or the checkout as it is (``--engine tree``).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common import log  # tests/benchmarks/common.py (first on sys.path)

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
DEFAULT_JSON = HERE / "results" / "warmup.json"
APP_PATH = str(HERE / "apps" / "warmup_bench.py")
INSTANCES_ENV = "BENCH_WARMUP_INSTANCES"  # apps/warmup_bench.py reads its instances there
LIGHT_KEYS = 1_000
LIGHT_TICK_RECORDS = 100
PRODUCE_CHUNK = 100_000
TARGET_RATIO = 1.0  # longest gap with warmups / normal batch interval, at most


def loadavg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


# -- children (fresh processes) -----------------------------------------------------------------


def child_cli(argv: list[str]) -> int:
    """``_cli --events FILE -- ARGS``: the lakestate CLI (``lakestate.cli.main(ARGS)``) with
    ``recovery.restore`` and ``recovery.warm`` timed (start, seconds, rows) into FILE."""
    p = argparse.ArgumentParser(prog="bench_warmup.py _cli")
    p.add_argument("--events", required=True)
    p.add_argument("cli", nargs=argparse.REMAINDER)
    args = p.parse_args(argv)
    cli = args.cli[1:] if args.cli[:1] == ["--"] else args.cli
    from lakestate.restore import recovery

    events: list[dict[str, Any]] = []

    def timed(name: str) -> None:
        fn = getattr(recovery, name)

        def wrapper(*a: Any, **k: Any) -> Any:
            start = time.time()
            rows = fn(*a, **k)
            events.append({"fn": name, "start": start, "s": time.time() - start, "rows": rows})
            return rows

        setattr(recovery, name, wrapper)

    timed("restore")
    timed("warm")
    from lakestate.cli import main as lakestate_main

    try:
        return lakestate_main(cli)
    finally:
        Path(args.events).write_text(json.dumps(events))


def child_move(argv: list[str]) -> int:
    """``_move``: what a pre-KIP-441 assignor does: the next generation with ``--task``'s
    active on ``--to`` at once (no warmups), put in force by the ownership fence."""
    p = argparse.ArgumentParser(prog="bench_warmup.py _move")
    p.add_argument("--warehouse", required=True)
    p.add_argument("--task", required=True)
    p.add_argument("--to", required=True)
    args = p.parse_args(argv)
    from lakestate.app import load_app
    from lakestate.assign import Assignment, history
    from lakestate.scaleout import ownership
    from lakestate.scaleout.instances import instances_of
    from lakestate.task_id import TaskId
    from lakestate.warehouse import Warehouse

    app = load_app(APP_PATH)
    wh = Warehouse(args.warehouse)
    task = TaskId.parse(args.task)
    latest = history.latest(wh, app.name)
    active = dict(latest.assignment.active)
    active[task] = args.to
    moved = Assignment(active=active)
    number = history.write_generation(wh, app.name, moved, instances_of(app), "requested")
    ownership.write_fence(wh.progress_path(app.name), app.name, {task: number}, number)
    print(json.dumps({"generation": number, "active": {str(t): i for t, i in active.items()}}))
    return 0


# -- the parent ---------------------------------------------------------------------------------


class Producer:
    """The app's input, through ``Topic.append`` (delta-rs): keys ``k<i>`` on
    the moved task's partition, ``l<i>`` on the other's; each tick's keys drawn from the
    same seeded generator, so every scenario gets the same records."""

    def __init__(self, wh: Any, heavy: int, light: int, keys: int, seed: int) -> None:
        self.wh = wh
        self.heavy, self.light, self.keys = heavy, light, keys
        self.rng = random.Random(seed)

    def _append(self, records: list[dict[str, Any]]) -> None:
        from lakestate.io import topics

        sys.path.insert(0, str(HERE / "apps"))
        import warmup_bench

        for start in range(0, len(records), PRODUCE_CHUNK):
            chunk = records[start : start + PRODUCE_CHUNK]
            topics.topic(self.wh, warmup_bench.INPUT_TOPIC).append(chunk)

    def base(self) -> None:
        """Every key once: ``keys`` on the moved task's partition, LIGHT_KEYS on the other."""
        for start in range(0, self.keys, PRODUCE_CHUNK):
            end = min(self.keys, start + PRODUCE_CHUNK)
            self._append(
                [{"key": f"k{i}", "value": 1, "partition": self.heavy} for i in range(start, end)]
            )
        self._append(
            [{"key": f"l{i}", "value": 1, "partition": self.light} for i in range(LIGHT_KEYS)]
        )

    def tick(self, n: int) -> None:
        records = [
            {"key": f"k{self.rng.randrange(self.keys)}", "value": 1, "partition": self.heavy}
            for _ in range(n)
        ]
        records += [
            {"key": f"l{self.rng.randrange(LIGHT_KEYS)}", "value": 1, "partition": self.light}
            for _ in range(LIGHT_TICK_RECORDS)
        ]
        self._append(records)


def moved_task() -> tuple[Any, Any]:
    """(the task the assignor moves when ``b`` joins ``a``, which owns both, the other):
    asked of ``lakestate.assign`` with ``a`` caught up on both and ``b`` holding nothing."""
    from lakestate.assign import Assignment, AssignorConfig, ClientState, assign
    from lakestate.task_id import TaskId

    tasks = [TaskId(0, 0), TaskId(0, 1)]
    clients = {"a": ClientState({t: 0 for t in tasks}), "b": ClientState({})}
    got = assign(tasks, clients, Assignment(active={t: "a" for t in tasks}), AssignorConfig())
    (heavy,) = [t for t in tasks if "b" in got.warmup.get(t, ())]
    (light,) = [t for t in tasks if t != heavy]
    return heavy, light


class Scenario:
    """One scenario's directory (a copy of the base state), its ticks and their records."""

    def __init__(
        self, name: str, root: Path, base: Path | None, interval: float, env: dict[str, str]
    ) -> None:
        self.name = name
        self.root = root
        if base is not None:  # None: the base itself, being built
            shutil.rmtree(root, ignore_errors=True)
            shutil.copytree(base, root)
        self.wh_root = str(root / "wh")
        self.interval = interval
        self.env = dict(env, LAKESTATE_LOG_DIR=str(root / "cli-logs"))
        self.logs = root / "logs"
        self.logs.mkdir(exist_ok=True)
        self.ticks: list[dict[str, Any]] = []
        self.count = 0
        self.next_start: float | None = None

    def instances(self, names: list[str]) -> str:
        return json.dumps([{"name": n, "state_dir": str(self.root / "state" / n)} for n in names])

    def _cmd(self, cmd: list[str], name: str, names: list[str]) -> subprocess.Popen:
        self.count += 1
        out = open(self.logs / f"{self.count:03d}-{name}.log", "w")  # noqa: SIM115 (closed in _wait)
        env = dict(self.env, **{INSTANCES_ENV: self.instances(names)})
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
        proc.log_file = out  # type: ignore[attr-defined]
        proc.log_path = out.name  # type: ignore[attr-defined]
        return proc

    def _wait(self, proc: subprocess.Popen, what: str) -> str:
        code = proc.wait()
        proc.log_file.close()  # type: ignore[attr-defined]
        text = Path(proc.log_path).read_text(errors="replace")  # type: ignore[attr-defined]
        if code != 0:
            tail = "\n".join(text.splitlines()[-25:])
            raise RuntimeError(f"{self.name}: {what} exited with {code}:\n{tail}")
        return text

    def cli(self, args: list[str], name: str, names: list[str]) -> subprocess.Popen:
        return self._cmd(
            [sys.executable, "-m", "lakestate.cli", "--warehouse", self.wh_root, *args], name, names
        )

    def run(self, instance: str, names: list[str]) -> tuple[subprocess.Popen, Path]:
        events = self.logs / f"events-{self.count + 1:03d}.json"
        cmd = [
            sys.executable,
            __file__,
            "_cli",
            "--events",
            str(events),
            "--",
            "--warehouse",
            self.wh_root,
            "--json",
            "run",
            APP_PATH,
            "--instance",
            instance,
            "--until-caught-up",
        ]
        return self._cmd(cmd, f"run-{instance}", names), events

    def tick(
        self,
        phase: str,
        names: list[str],
        producer: Producer,
        records: int,
        move: tuple[str, str] | None = None,
    ) -> dict[str, Any]:
        """One tick (module docstring): records, the rebalance (``move``: the direct
        generation instead), then every instance's run at once."""
        if self.next_start is not None:
            time.sleep(max(0.0, self.next_start - time.monotonic()))
        started = time.monotonic()
        self.next_start = started + self.interval
        tick: dict[str, Any] = {
            "index": len(self.ticks),
            "phase": phase,
            "start": time.time(),
            "load": loadavg(),
        }
        producer.tick(records)
        t = time.monotonic()
        if move is None:
            out = self._wait(
                self.cli(["--json", "rebalance", APP_PATH], "rebalance", names), "rebalance"
            )
            done = json.loads(out.strip().splitlines()[-1])
            tick["step"] = {
                "kind": "rebalance",
                "reason": done["reason"],
                "changed": done["changed"],
                "generation": (done["new"] or done["old"] or {}).get("generation"),
            }
        else:
            task, to = move
            proc = self._cmd(
                [
                    sys.executable,
                    __file__,
                    "_move",
                    "--warehouse",
                    self.wh_root,
                    "--task",
                    task,
                    "--to",
                    to,
                ],
                "move",
                names,
            )
            done = json.loads(self._wait(proc, "move").strip().splitlines()[-1])
            tick["step"] = {
                "kind": "move",
                "generation": done["generation"],
                "active": done["active"],
            }
        tick["step"]["s"] = round(time.monotonic() - t, 3)
        t = time.monotonic()
        procs = {n: self.run(n, names) for n in names}
        runs = {}
        for n, (proc, events) in procs.items():
            out = self._wait(proc, f"run of {n}")
            result = json.loads(out.strip().splitlines()[-1])
            runs[n] = {
                "pid": proc.pid,
                "batches": result["batches"],
                "records": result["records"],
                "warmed": result.get("warmed"),
                "timed": json.loads(events.read_text()) if events.exists() else [],
            }
        tick["runs_s"] = round(time.monotonic() - t, 3)
        tick["runs"] = runs
        tick["end"] = time.time()
        tick["s"] = round(time.monotonic() - started, 3)
        self.ticks.append(tick)
        restores = [
            f"{n} {e['fn']} {e['rows']:,} rows in {e['s']:.2f}s"
            for n, r in runs.items()
            for e in r["timed"]
            if e["rows"]
        ]
        log(
            f"{self.name} tick {tick['index']} ({phase}): {tick['step']['kind']} "
            f"{tick['step'].get('reason', '')} gen {tick['step']['generation']}, "
            + ", ".join(f"{n} {r['batches']} batch(es)" for n, r in runs.items())
            + (f"; {'; '.join(restores)}" if restores else "")
            + f"; {tick['s']:.2f}s (load {tick['load']})"
        )
        return tick

    def commits(self, task: Any) -> list[dict[str, Any]]:
        """The task's committed batches: batch, at_ms, and the tick and instance whose run
        committed it (by the run id's pid)."""
        from lakestate.io import delta_commits
        from lakestate.warehouse import Warehouse

        sys.path.insert(0, str(HERE / "apps"))
        import warmup_bench

        path = Warehouse(self.wh_root).progress_path(warmup_bench.APP_NAME)
        rows = (
            delta_commits.open_table(path)
            .to_pyarrow_table(columns=["task", "batch_id", "run_id", "at_ms"])
            .to_pylist()
        )
        found = []
        for row in sorted((r for r in rows if r["task"] == str(task)), key=lambda r: r["batch_id"]):
            pid = int(row["run_id"].split("-")[-2])
            where = [
                (tick["index"], name)
                for tick in self.ticks
                for name, run in tick["runs"].items()
                if run["pid"] == pid and tick["start"] * 1000 <= row["at_ms"] <= tick["end"] * 1000
            ]
            tick_index, instance = where[0] if where else (None, None)
            found.append(
                {
                    "batch": row["batch_id"],
                    "at_ms": row["at_ms"],
                    "tick": tick_index,
                    "instance": instance,
                }
            )
        return found


def gaps(commits: list[dict[str, Any]], first_move_tick: int) -> dict[str, Any]:
    """The task's gaps between consecutive committed batches: ``steady``, both batches of
    ticks before ``first_move_tick`` (the config change); ``move``, the later batch of a
    tick from the change up to b's first batch (the move itself: a's batches while b warms
    up, then the switch); ``settled``, between b's batches after that."""
    steady, moving, settled = [], [], []
    moved = False
    for before, after in zip(commits, commits[1:], strict=False):
        if before["tick"] is None or after["tick"] is None:
            continue  # the base build's batch
        gap = (after["at_ms"] - before["at_ms"]) / 1000
        if after["tick"] < first_move_tick:
            steady.append(gap)
        elif not moved:
            moving.append(gap)
            moved = after["instance"] == "b"
        else:
            settled.append(gap)
    return {
        "steady_s": [round(g, 3) for g in steady],
        "interval_s": round(statistics.median(steady), 3) if steady else None,
        "longest_steady_s": round(max(steady), 3) if steady else None,
        "move_gaps_s": [round(g, 3) for g in moving],
        "longest_gap_s": round(max(moving), 3) if moving else None,
        "switch_gap_s": round(moving[-1], 3) if moved else None,
        # b owning the task: two instances' runs per tick, not one
        "settled_s": [round(g, 3) for g in settled],
    }


def run_scenario(
    kind: str,
    args: argparse.Namespace,
    interval: float,
    base: Path,
    work: Path,
    env: dict[str, str],
    heavy: Any,
    light: Any,
) -> dict[str, Any]:
    from lakestate.warehouse import Warehouse

    name = f"{kind} (interval {interval:g}s)"
    sc = Scenario(name, work / f"{kind.replace(' ', '-')}-{interval:g}", base, interval, env)
    producer = Producer(
        Warehouse(sc.wh_root), heavy.partition, light.partition, args.keys, args.seed
    )
    load_start = loadavg()
    for _ in range(args.steady_ticks):
        sc.tick("steady", ["a"], producer, args.tick_records)
    first_move = len(sc.ticks)
    moved_at = None
    while True:
        if len(sc.ticks) - first_move >= args.max_ticks:
            log(f"{name}: b has not committed {args.after} batches after {args.max_ticks} ticks")
            break
        move = (
            (str(heavy), "b") if kind == "without warmups" and len(sc.ticks) == first_move else None
        )
        sc.tick("move", ["a", "b"], producer, args.tick_records, move)
        by_b = [c for c in sc.commits(heavy) if c["instance"] == "b"]
        if by_b and moved_at is None:
            moved_at = by_b[0]["tick"]
        if len(by_b) >= args.after:
            break
    commits = sc.commits(heavy)
    result = {
        "kind": kind,
        "interval_setting_s": interval,
        "load_start": load_start,
        "load_end": loadavg(),
        "ticks": sc.ticks,
        "commits": commits,
        "b_active_from_tick": moved_at,
        "ticks_to_move": None if moved_at is None else moved_at - first_move + 1,
        **gaps(commits, first_move),
    }
    restores = [
        e
        for t in sc.ticks[first_move:]
        for e in t["runs"].get("b", {}).get("timed", [])
        if e["fn"] == "restore" and e["rows"]
    ]
    if restores:
        r = restores[0]
        result["restore"] = {
            "rows": r["rows"],
            "s": round(r["s"], 3),
            "rows_per_s": round(r["rows"] / r["s"]),
        }
    if not args.keep:
        shutil.rmtree(sc.root, ignore_errors=True)
    return result


def build_base(
    args: argparse.Namespace, base: Path, env: dict[str, str], heavy: Any, light: Any
) -> dict[str, Any]:
    """The state every scenario starts from: ``--keys`` keys processed by ``a`` alone."""
    from lakestate.io import logtable
    from lakestate.warehouse import Warehouse

    sys.path.insert(0, str(HERE / "apps"))
    import warmup_bench

    wh = Warehouse(str(base / "wh"))
    logtable.create_topic(wh, warmup_bench.INPUT_TOPIC, warmup_bench.PARTITIONS)
    t = time.monotonic()
    Producer(wh, heavy.partition, light.partition, args.keys, args.seed).base()
    produced = time.monotonic() - t
    log(f"produced {args.keys + LIGHT_KEYS:,} records in {produced:.1f}s")
    sc = Scenario("build", base, None, 0.0, env)
    t = time.monotonic()
    sc._wait(sc.cli(["rebalance", APP_PATH], "rebalance", ["a"]), "rebalance")
    proc, _ = sc.run("a", ["a"])
    sc._wait(proc, "the build run of a")
    built = time.monotonic() - t
    log(f"a processed them in {built:.1f}s")
    return {"produce_s": round(produced, 3), "process_s": round(built, 3)}


def engine(args: argparse.Namespace, work: Path) -> tuple[str, str]:
    """(lib/ to run, the revision): HEAD's extracted, or the checkout's."""
    if args.engine == "tree":
        return str(ROOT / "lib"), "tree"
    import io
    import tarfile

    rev = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()
    archive = subprocess.run(
        ["git", "archive", "--format=tar", rev, "lib"], cwd=ROOT, capture_output=True, check=True
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(work / "engine", filter="data")
    return str(work / "engine" / "lib"), rev


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--keys", type=int, help="keys in the moved task's state (1M; --quick 100k)")
    p.add_argument(
        "--tick-records",
        type=int,
        default=10_000,
        help="new records of the moved task per tick (10k)",
    )
    p.add_argument(
        "--interval",
        type=float,
        action="append",
        help="seconds between tick starts; repeat for several cadences (default: 0, "
        "back to back, and 30; --quick: 0)",
    )
    p.add_argument(
        "--steady-ticks", type=int, help="ticks of a alone before the move (5; --quick 3)"
    )
    p.add_argument(
        "--after", type=int, help="batches b commits before a scenario ends (3; --quick 1)"
    )
    p.add_argument("--max-ticks", type=int, default=10, help="ticks after the change at most (10)")
    p.add_argument("--seed", type=int, default=17)
    p.add_argument("--engine", choices=("head", "tree"), default="head")
    p.add_argument(
        "--quick", action="store_true", help="100k keys, back to back, 3 steady ticks, 1 batch of b"
    )
    p.add_argument("--keep", action="store_true", help="keep the temporary directory")
    p.add_argument("--json", default=str(DEFAULT_JSON))
    args = p.parse_args(argv)
    args.keys = args.keys or (100_000 if args.quick else 1_000_000)
    args.interval = args.interval or ([0.0] if args.quick else [0.0, 30.0])
    args.steady_ticks = args.steady_ticks or (3 if args.quick else 5)
    args.after = args.after or (1 if args.quick else 3)
    return args


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["_cli"]:
        return child_cli(argv[1:])
    if argv[:1] == ["_move"]:
        return child_move(argv[1:])
    args = parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="lakestate-bench-warmup-"))
    lib, revision = engine(args, work)
    sys.path.insert(0, lib)
    env = dict(os.environ, PYTHONPATH=lib)
    heavy, light = moved_task()
    results: dict[str, Any] = {
        "args": vars(args),
        "engine": revision,
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "load_start": loadavg(),
        "moved_task": str(heavy),
        "scenarios": [],
    }
    out = Path(args.json)
    try:
        base = work / "base"
        results["build"] = build_base(args, base, env, heavy, light)
        for i, interval in enumerate(args.interval):
            kinds = ["with warmups", "without warmups"]
            for kind in kinds if i % 2 == 0 else kinds[::-1]:
                results["scenarios"].append(
                    run_scenario(kind, args, interval, base, work, env, heavy, light)
                )
    finally:
        results["load_end"] = loadavg()
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(results, indent=2, default=str) + "\n")
        if args.keep:
            log(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    report(results)
    return 0


def verdict(gap: float | None, longest_steady: float | None) -> str:
    if gap is None or longest_steady is None:
        return "n/a"
    return "met" if gap <= longest_steady else "not met"


def report(results: dict[str, Any]) -> None:
    a = results["args"]
    print(
        f"\nMoving task {results['moved_task']} ({a['keys']:,} keys in state, {a['tick_records']:,} "
        f"new records per tick) to a new instance; engine {results['engine'][:12]}"
    )
    print(
        f"{'cadence':>10} {'scenario':>16} {'interval s':>10} {'(longest)':>9} "
        f"{'longest gap s':>13} {'ratio':>6} {'excess s':>8} {'ticks':>5} "
        f"{'restore rows/s':>14}  load"
    )
    by_interval: dict[float, dict[str, Any]] = {}
    for s in results["scenarios"]:
        by_interval.setdefault(s["interval_setting_s"], {})[s["kind"]] = s
        gap, interval = s["longest_gap_s"], s["interval_s"]
        ratio = gap / interval if gap and interval else 0
        excess = gap - interval if gap and interval else 0
        cadence = (
            "back2back" if not s["interval_setting_s"] else f"every {s['interval_setting_s']:g}s"
        )
        restore = s.get("restore", {}).get("rows_per_s")
        print(
            f"{cadence:>10} {s['kind']:>16} {interval or 0:>10.2f} "
            f"{s['longest_steady_s'] or 0:>9.2f} {gap or 0:>13.2f} {ratio:>6.2f} {excess:>8.2f} "
            f"{s['ticks_to_move'] or '-':>5} {restore or 0:>14,}  "
            f"{s['load_start']} -> {s['load_end']}"
        )
    for s in results["scenarios"]:
        commits = [c for c in s["commits"] if c["tick"] is not None]
        steps = ", ".join(
            f"{c['instance']}@{c['tick']} +{(c['at_ms'] - p['at_ms']) / 1000:.2f}s"
            for p, c in zip(commits, commits[1:], strict=False)
        )
        settled = s.get("settled_s") or []
        after = f"; b's intervals once settled: {settled}" if settled else ""
        print(
            f"  {s['kind']}, interval {s['interval_setting_s']:g}: batches (instance@tick "
            f"+gap): {steps}{after}"
        )
    for interval, kinds in by_interval.items():
        w, wo = kinds.get("with warmups"), kinds.get("without warmups")
        if not (w and wo):
            continue
        cadence = "back to back" if not interval else f"every {interval:g}s"
        print(
            f"{cadence}: longest gap with warmups {w['longest_gap_s']}s vs without "
            f"{wo['longest_gap_s']}s (normal interval {w['interval_s']}s, longest "
            f"{w['longest_steady_s']}s); target (with warmups <= one normal batch interval): "
            f"{verdict(w['longest_gap_s'], w['longest_steady_s'])}"
        )


if __name__ == "__main__":
    sys.exit(main())
