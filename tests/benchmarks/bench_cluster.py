"""The demo count's backlog on a Spark standalone cluster, one worker against two.

The workers have one core each, the executors own the stores (docs/architecture.md, "State
on Spark's executors"); where the time goes: docs/benchmarks.md, session 23.

    python tests/benchmarks/bench_cluster.py [--records N] [--partitions P] [--repeat R]
        [--order 1,2] [--trace] [--keep]

Writes N demo events (10,000 users, P partitions) into a local warehouse once, then for each
cluster size (``--order``), R times interleaved, starts the cluster
(``tests/integration/spark_cluster.py``: master and workers from pyspark's ``spark-class``),
copies the warehouse and runs the demo app over it from empty state in a fresh driver
process (``run_app(master=spark://..., transport='spark')``, until caught up; this tree's
``lib`` on the driver's and the executors' Python path). Prints, per run, the driver's wall
seconds and the sum of its batches' seconds (a first batch waits for Spark's start, so
this includes it), records/s of each, the load average before and after, and the run's
phases (``cluster_trace.py``): the start (from the driver process's start until Spark's
session is up), the processing job and the writes + commit, with the CPU seconds each
process used in each; then the two-worker / one-worker ratio of the batches' records/s
(the issue's target: at least 1.6), of each phase, and the runs' CPU seconds (two cores
cannot run the two-worker run in less than half of its CPU seconds). ``--trace`` adds each
run's driver steps, its executors' Python steps, Spark's timeline of its jobs and tasks
(the event log) and each process's CPU seconds; ``--keep`` keeps the directories (the
executors' logs, the event logs).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "lib"))
sys.path.insert(0, str(REPO / "tests" / "integration"))

import cluster_trace  # noqa: E402 - beside this script

HERE = Path(__file__).resolve().parent
#: The driver's and the executors' Python path: this tree's lakestate (the venv's editable
#: install may point at another checkout).
TREE_PATH = os.pathsep.join([str(REPO / "lib"), os.environ.get("PYTHONPATH", "")]).rstrip(
    os.pathsep
)
APP = str(REPO / "jobs" / "demo.py")
CHUNK = 200_000


def build(warehouse: Path, records: int, partitions: int) -> None:
    """The demo app's input: ``records`` sample events of 10,000 users."""
    from lakestate.app import load_module
    from lakestate.io import topics
    from lakestate.warehouse import Warehouse

    demo = load_module(REPO / "jobs" / "demo.py")
    topic = topics.topic(Warehouse(warehouse), demo.INPUT_TOPIC)
    topic.create(partitions)
    chunk = []
    for key, value, ts in demo.sample_events(records, users=10_000):
        chunk.append({"key": key, "value": value, "timestamp": ts})
        if len(chunk) == CHUNK:
            topic.append(chunk)
            chunk = []
    if chunk:
        topic.append(chunk)


def drive(
    url: str, warehouse: Path, state: Path, cluster, trace_dir: Path, bare: bool = False
) -> dict:
    """One run of the demo app on the cluster at ``url``, its driver a fresh process, its
    processes' CPU sampled and Spark's event log written into ``trace_dir``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAKESTATE_")}
    conf = {
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.executor.memory": "1g",
        **cluster_trace.event_log_conf(trace_dir),
    }
    env["LAKESTATE_SPARK_CONF"] = json.dumps(conf)
    env["PYTHONPATH"] = TREE_PATH
    code = (
        f"import sys; sys.path.insert(0, {str(HERE)!r}); import cluster_trace; "
        "cluster_trace.instrument(); "
        + ("cluster_trace.bare_context(); " if bare else "")
        + "from lakestate import run_app; "
        f"run_app({APP!r}, warehouse={str(warehouse)!r}, state_dir={str(state)!r}, "
        f"until_caught_up=True, master={url!r}, transport='spark')"
    )
    workers = {str(w.work_dir): w.name for w in cluster.workers}
    pids = [cluster.master.pid, *(w.process.pid for w in cluster.workers)]
    sampler = cluster_trace.CpuSampler(pids, workers)
    started = time.perf_counter()
    t0 = time.time()
    sampler.start()
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    sampler.add_root(proc.pid)
    stdout, stderr = proc.communicate(timeout=3600)
    wall = time.perf_counter() - started
    sampler.stop()
    if proc.returncode != 0:
        raise RuntimeError(stdout[-2000:] + stderr[-4000:])
    batches = [float(s) for s in re.findall(r", ([0-9.]+)s$", stdout, re.MULTILINE)]
    records = sum(int(n) for n in re.findall(r": (\d+) records,", stdout))
    trace = [
        "driver steps (s after the driver process started):",
        *cluster_trace.steps(stdout, t0),
        "executor steps:",
        *cluster_trace.executor_steps({w.name: w.work_dir for w in cluster.workers}, t0),
        "Spark's timeline:",
        *cluster_trace.timeline(trace_dir, t0),
        "CPU seconds per process:",
        *sampler.report(t0),
    ]
    windows, phases = [], {}  # the run's phases (seconds) and their CPU, printed every run
    for name, what in (
        ("SparkStarter.__call__", "start"),
        ("on_driver", "processing"),
        ("commit_batch", "writes+commit"),
    ):
        window = cluster_trace.step_window(stdout, name)
        if window:
            windows += sampler.window(*window, what)
            # the start: from the driver process's start until Spark's session is up
            phases[what] = window[1] - (t0 if what == "start" else window[0])
    return {
        "wall_s": wall,
        "batch_s": sum(batches),
        "batches": len(batches),
        "records": records,
        "trace": trace,
        "windows": windows,
        "phases": phases,
        "cpu_s": sampler.total(),
    }


def _compare(runs: dict[int, list[dict]]) -> None:
    """The two-worker / one-worker ratios: of the batches, the whole run and each phase
    (the best run of each size), and the runs' CPU seconds."""
    best = {w: min(r["batch_s"] for r in rs) for w, rs in runs.items()}
    best_wall = {w: min(r["wall_s"] for r in rs) for w, rs in runs.items()}
    print(
        f"two workers / one, records/s of the batches: {best[1] / best[2]:.2f}x (target 1.6x); "
        f"of the whole driver run: {best_wall[1] / best_wall[2]:.2f}x"
    )
    for phase in runs[1][0]["phases"]:
        took = {w: min(r["phases"].get(phase, 0) for r in rs) for w, rs in runs.items()}
        if took[2]:
            print(f"  {phase}: {took[1]:.1f}s against {took[2]:.1f}s ({took[1] / took[2]:.2f}x)")
    cpu = {w: min(r["cpu_s"] for r in rs) for w, rs in runs.items()}
    print(
        f"  CPU seconds of the run's processes: one worker {cpu[1]:.1f}, two {cpu[2]:.1f}: two "
        f"workers cannot take less than {cpu[2] / 2:.1f}s on two cores"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument(
        "--trace",
        action="store_true",
        help="print each run's driver steps, Spark's timeline and each process's CPU seconds",
    )
    parser.add_argument(
        "--bare-context",
        action="store_true",
        help="start a SparkContext without a SparkSession (all the executor-owned path uses)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the runs' directories (logs)")
    parser.add_argument(
        "--order", default="2,1", help="the cluster sizes, in the order each repeat runs them"
    )
    args = parser.parse_args(argv)
    from spark_cluster import StandaloneCluster

    load_before = os.getloadavg()
    root = Path(tempfile.mkdtemp(prefix="bench-cluster-"))
    template = root / "template"
    t = time.perf_counter()
    build(template, args.records, args.partitions)
    print(
        f"input: {args.records} records, {args.partitions} partitions "
        f"({time.perf_counter() - t:.1f}s to write)"
    )
    runs: dict[int, list[dict]] = {1: [], 2: []}
    for n in range(args.repeat):
        for workers in [int(w) for w in args.order.split(",")]:
            cluster = StandaloneCluster(root / f"cluster-{workers}-{n}", {"PYTHONPATH": TREE_PATH})
            cluster.root.mkdir(parents=True)
            cluster.start(workers=workers)
            try:
                warehouse = root / f"wh-{workers}-{n}"
                shutil.copytree(template, warehouse)
                load = os.getloadavg()[0]
                trace_dir = root / f"events-{workers}-{n}"
                run = drive(
                    cluster.url,
                    warehouse,
                    root / f"state-{workers}-{n}",
                    cluster,
                    trace_dir,
                    args.bare_context,
                )
                run["load"] = (load, os.getloadavg()[0])
            finally:
                cluster.stop()
            runs[workers].append(run)
            print(
                f"{workers} worker(s): {run['records']} records in {run['batches']} batches, "
                f"driver {run['wall_s']:.1f}s ({run['records'] / run['wall_s']:,.0f}/s), "
                f"batches {run['batch_s']:.1f}s ({run['records'] / run['batch_s']:,.0f}/s), "
                f"load {run['load'][0]:.1f} -> {run['load'][1]:.1f}; "
                + ", ".join(f"{k} {v:.1f}s" for k, v in run["phases"].items())
                + f"; the run's processes {run['cpu_s']:.1f} CPU s"
            )
            print("\n".join((run["trace"] if args.trace else []) + run["windows"]))
            shutil.rmtree(warehouse, ignore_errors=True)
    if runs[1] and runs[2]:
        _compare(runs)
    print(f"load average before {load_before[0]:.1f}, after {os.getloadavg()[0]:.1f}")
    if args.keep:
        print(f"kept: {root}")
    else:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
