"""The per-batch cost of keeping tasks on their executors (runtime/spark_located.py) against
Spark's plain placement, on a small batch whose tasks do nothing.

    python tests/benchmarks/bench_located.py [--tasks T] [--batches B] [--repeat R] [--cluster]
        [--lib DIR] [--modes located,plain]

Each figure comes from a fresh driver process (Spark started there, two warm-up batches not
counted), R times interleaved (located, plain, located, plain...), with the load average
beside it. ``located``: per batch, the job group set, ``located_tasks`` (the partitions made
through py4j's ``makeRDD`` with each task's preferred executor), a job over them, then
``Placements.learn`` (Spark's status store read for where each task ran); ``plain``: the
same job over ``sc.parallelize`` of the tasks, one partition each. Prints the median
milliseconds of a batch and, for ``located``, of its parts. On ``local[2]`` by default;
``--cluster`` starts a standalone cluster of two one-core workers
(tests/integration/spark_cluster.py) for the runs. ``--lib``: the lakestate to measure
(another tree's ``lib``, say main's, to compare before and after a change).
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "integration"))
if "--lib" not in sys.argv:
    sys.path.insert(0, str(REPO / "lib"))
else:  # another tree's lakestate (say, main's), for a before/after comparison
    sys.path.insert(0, sys.argv[sys.argv.index("--lib") + 1])


def _nothing(rows):
    for row in rows:
        yield len(row)


def child(mode: str, master: str, tasks: int, batches: int) -> dict:
    """One driver's figures: each batch's milliseconds (and the located path's parts)."""
    from lakestate.runtime.spark_located import Placements, located_tasks
    from lakestate.runtime.spark_session import get_spark
    from lakestate.task_id import TaskId

    conf = {"spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1"}
    sc = get_spark(master, app_name=f"bench-located-{mode}", extra_conf=conf).sparkContext
    ids = [TaskId(0, p) for p in range(tasks)]
    placements = Placements()
    parts: dict[str, list[float]] = {"batch": [], "make": [], "job": [], "learn": []}
    for n in range(batches + 2):
        t0 = time.perf_counter()
        if mode == "located":
            group = f"bench-{n}"
            sc.setJobGroup(group, "bench", interruptOnCancel=False)
            rdd = located_tasks(sc, ids, placements)
            t1 = time.perf_counter()
            rdd.mapPartitions(_nothing).collect()
            t2 = time.perf_counter()
            placements.learn(sc, group, ids)
            t3 = time.perf_counter()
            took = {"make": t1 - t0, "job": t2 - t1, "learn": t3 - t2}
        else:
            rows = [bytearray(pickle.dumps(t)) for t in ids]
            sc.parallelize(rows, tasks).mapPartitions(_nothing).collect()
            took = {}
        took["batch"] = time.perf_counter() - t0
        if n >= 2:  # two warm-up batches
            for name, seconds in took.items():
                parts[name].append(seconds * 1000)
    return {
        "mode": mode,
        "moved": placements.moved,
        "executors": len(set(placements.where.values())),
        **{name: statistics.median(v) for name, v in parts.items() if v},
    }


def run_child(mode: str, master: str, tasks: int, batches: int, lib: str) -> dict:
    code = [sys.executable, __file__, "--child", mode, "--master", master, "--lib", lib]
    code += ["--tasks", str(tasks), "--batches", str(batches)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAKESTATE_")}
    proc = subprocess.run(code, capture_output=True, text=True, env=env, timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-3000:])
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=2)
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--cluster", action="store_true")
    parser.add_argument("--lib", default=str(REPO / "lib"), help="lakestate's lib folder")
    parser.add_argument("--modes", default="located,plain", help="which, in this order")
    parser.add_argument("--child", choices=("located", "plain"))
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, args.master, args.tasks, args.batches)))
        return 0
    cluster = None
    if args.cluster:
        from spark_cluster import StandaloneCluster

        cluster = StandaloneCluster(Path(tempfile.mkdtemp(prefix="bench-located-")), {})
        cluster.start(workers=2)
    master = cluster.url if cluster else args.master
    print(f"{args.tasks} tasks, {args.batches} batches per driver, master {master}")
    try:
        for _ in range(args.repeat):
            for mode in args.modes.split(","):
                found = run_child(mode, master, args.tasks, args.batches, args.lib)
                parts = ", ".join(
                    f"{name} {found[name]:.1f}"
                    for name in ("make", "job", "learn")
                    if name in found
                )
                load = " ".join(f"{x:.2f}" for x in os.getloadavg())
                print(
                    f"{mode:8} batch {found['batch']:7.1f} ms (median)"
                    + (
                        f" [{parts}; moved {found['moved']}, on {found['executors']} executors]"
                        if parts
                        else ""
                    )
                    + f"  load {load}",
                    flush=True,
                )
    finally:
        if cluster is not None:
            cluster.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
