"""The read-only commands in a fresh process, as a person runs them: `lakestate sql`,
`consume` and `describe` on their default engine (DuckDB / delta-rs, no JVM) against
`--engine spark`, over the demo app's warehouse after a run.

    python tests/benchmarks/bench_cli.py [--records N] [--repeat R] [--keep DIR]

Builds a warehouse (the demo app's sample events, 2 partitions, run until caught up in the
driver), then times each command R times in a fresh `python -m lakestate.cli` process
(wall seconds, the median and the best) and prints the ratio of the default engine's
median to Spark's, with the load average before and after. The target: each read command
under 2 s on the default engine.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

COMMANDS = {
    "sql (store view)": [
        "sql",
        "SELECT key, value AS count FROM demo__event_counts_store ORDER BY value DESC",
    ],
    "sql (topic, JSON)": [
        "sql",
        "SELECT get_json_object(value, '$.user') AS user, count(*) AS n FROM events GROUP BY 1",
    ],
    "consume (100 records)": ["consume", "event-counts", "--max-messages", "100"],
    "consume (whole topic)": ["consume", "event-counts"],
    "describe": ["describe", "jobs/demo.py"],
}
# Commands with a Spark path (describe has none).
SPARK = {"sql (store view)", "sql (topic, JSON)", "consume (100 records)", "consume (whole topic)"}


def build(warehouse: Path, state: Path, records: int) -> None:
    """The demo app's warehouse: sample events, one run until caught up."""
    sys.path.insert(0, str(REPO / "lib"))
    from lakestate import run_app
    from lakestate.app import load_module
    from lakestate.io import topics
    from lakestate.warehouse import Warehouse

    wh = Warehouse(warehouse)
    demo = load_module(REPO / "jobs" / "demo.py")
    topics.topic(wh, demo.INPUT_TOPIC).create(2)
    sample = [{"key": k, "value": v, "timestamp": t} for k, v, t in demo.sample_events(records)]
    topics.topic(wh, demo.INPUT_TOPIC).append(sample)  # through delta-rs: no JVM
    run_app(str(REPO / "jobs" / "demo.py"), warehouse=wh.root, state_dir=str(state),
            until_caught_up=True, say=lambda _: None)


def timed(args: list[str], warehouse: Path) -> tuple[float, float]:
    """Wall seconds of `lakestate ARGS` in a fresh process, and its CPU seconds (user and
    system: less dependent on the machine's load than the wall time; a JVM the process
    starts is not counted, being no child waited for)."""
    env = dict(os.environ, LAKESTATE_WAREHOUSE=str(warehouse), PYTHONPATH=str(REPO / "lib"))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "lakestate.cli", *args], cwd=REPO, env=env,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    took = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"lakestate {' '.join(args)} failed:\n{proc.stderr[-2000:]}")
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    return took, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=10_000, help="sample events (10,000)")
    parser.add_argument("--repeat", type=int, default=3, help="runs per command (3)")
    parser.add_argument("--keep", metavar="DIR", help="build the warehouse in DIR (kept)")
    args = parser.parse_args()
    root = Path(args.keep or tempfile.mkdtemp(prefix="bench_cli_"))
    warehouse = root / "warehouse"
    if not (warehouse / "apps" / "demo").is_dir():
        build(warehouse, root / "state", args.records)
    print(f"warehouse {warehouse} ({args.records} events), load average before "
          f"{os.getloadavg()[0]:.2f}")
    print("wall seconds: median (best) of the runs; CPU: the median run's CPU seconds (the "
          "default engine's process; Spark's JVM would not be counted, so none is shown)")
    print(f"{'command':24} {'default s':>14} {'CPU':>5} {'--engine spark s':>18} {'ratio':>6}")
    for name, command in COMMANDS.items():
        fast = sorted(timed(command, warehouse) for _ in range(args.repeat))
        slow = sorted(
            timed([*command, "--engine", "spark"], warehouse) for _ in range(args.repeat)
        ) if name in SPARK else []
        f = statistics.median_low(fast)
        line = f"{name:24} {f[0]:6.2f} ({fast[0][0]:5.2f}) {f[1]:5.2f} "
        if slow:
            s = statistics.median_low(slow)
            line += f"{s[0]:9.2f} ({slow[0][0]:6.2f}) {f[0] / s[0]:6.3f}"
        else:
            line += f"{'-':>18} {'-':>6}"
        print(line + f"   load {os.getloadavg()[0]:.2f}")
    print(f"load average after {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
