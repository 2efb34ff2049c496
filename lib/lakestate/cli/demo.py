"""``lakestate demo`` (run by scripts/main.sh): sample events produced to a demo app's
topics, the app's DAG run through Airflow, its results printed (``demo_printers``).

Not part of the library's runtime: nothing but the CLI's command table imports this module,
and its printers load only when the demo runs."""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from lakestate.cli.main import Context
    from lakestate.io.topics import Topic

REPO = Path(__file__).resolve().parents[3]


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--records", type=int, default=1000, help="sample events to generate")
    p.add_argument(
        "--app",
        choices=("demo", "clicks", "orders"),
        default="demo",
        help="demo: per-user counts (jobs/demo.py); clicks: per-user clicks a minute, final "
        "results only, and rate-limited alerts (jobs/clicks.py: windows and suppression); "
        "orders: orders enriched with the customer's tier at the order's time (jobs/orders.py: "
        "a versioned table)",
    )
    p.add_argument(
        "--spark",
        action="store_true",
        help="run the DAG's runs on the Spark transport (its Param transport: spark; Spark's "
        "master: the DAGs' spark_default connection, local[*] from scripts/airflow.sh); "
        "default: each run chooses (auto: in process with a local master or up to "
        "lakestate.inprocess.max.records pending records, else Spark)",
    )


def run(args: argparse.Namespace, ctx: Context) -> int:
    """Generate sample input, run the app's DAG through Airflow (``dags test``; with
    ``--spark`` its runs on the Spark transport), then print its sinks and SQL queries over
    its state tables."""
    from lakestate.app import load_module
    from lakestate.cli import demo_printers
    from lakestate.io import topics

    module = load_module(REPO / "jobs" / f"{args.app}.py")
    if args.app == "orders":
        return _demo_orders(args, ctx, module)
    topic = topics.topic(ctx.warehouse, module.INPUT_TOPIC)
    topic.create(2)
    start = topic.end_offsets()
    seed = sum(start.values())
    if args.app == "clicks":
        start_ms = module.START_MS
        if seed:
            # Go on after the clicks already there: clicks at the same times again would
            # all be late (their windows closed), and dropped.
            newest = _newest_timestamp(topic)
            start_ms = max(start_ms, -(-newest // 60_000) * 60_000)
        sample = module.sample_clicks(args.records, seed=seed, start_ms=start_ms)
    else:
        sample = module.sample_events(args.records, seed=seed)
    records = [{"key": k, "value": v, "timestamp": t} for k, v, t in sample]
    topic.append(records)
    ctx.print(f"demo: produced {len(records)} sample events to topic {module.INPUT_TOPIC!r}")
    ctx.close()  # the DAG's Spark job runs in its own process
    _run_dag(ctx, f"lakestate_{module.app.name}", args.spark)
    if args.app == "clicks":
        demo_printers.show_clicks(ctx, module)
    else:
        demo_printers.show_counts(ctx, module)
    return 0


def _newest_timestamp(topic: Topic) -> int:
    """The newest record timestamp of a non-empty ``topic``, read as Arrow (no JVM: the
    demo starts no Spark of its own; the DAG's runs start theirs)."""
    import pyarrow.compute as pc

    return max(pc.max(part["timestamp"]).as_py() or 0 for part in topic.read_partitions())


def _demo_orders(args: argparse.Namespace, ctx: Context, orders) -> int:
    """The orders demo: on a first run, sample customers' tier history, which the DAG loads
    into the versioned table; then sample orders (some late), which the DAG joins with it."""
    from lakestate.cli import demo_printers
    from lakestate.io import topics

    wh = ctx.warehouse
    customers = 20
    customer_topic = topics.topic(wh, orders.CUSTOMERS_TOPIC)
    order_topic = topics.topic(wh, orders.INPUT_TOPIC)
    for topic in (customer_topic, order_topic):
        topic.create(2)
    if not sum(customer_topic.end_offsets().values()):
        history = [
            {"key": k, "value": v, "timestamp": t} for k, v, t in orders.sample_customers(customers)
        ]
        customer_topic.append(history)
        ctx.print(
            f"demo: produced {len(history)} tier changes of {customers} customers to topic "
            f"{orders.CUSTOMERS_TOPIC!r} (some out of order)"
        )
        ctx.close()
        _run_dag(ctx, f"lakestate_{orders.app.name}", args.spark)
    first = sum(order_topic.end_offsets().values())
    records = [
        {"key": k, "value": v, "timestamp": t}
        for k, v, t in orders.sample_orders(args.records, customers, seed=first, first=first)
    ]
    order_topic.append(records)
    ctx.print(
        f"demo: produced {len(records)} orders to topic {orders.INPUT_TOPIC!r} "
        "(one in ten up to an hour late)"
    )
    ctx.close()
    _run_dag(ctx, f"lakestate_{orders.app.name}", args.spark)
    demo_printers.show_orders(ctx, orders)
    return 0


def _run_dag(ctx: Context, dag_id: str, spark: bool = False) -> None:
    """``airflow dags test DAG_ID`` until caught up (``spark``: with Param ``transport``
    spark), each run's transport and batches printed, its log in the Airflow home; raises if
    the run failed."""
    from lakestate.errors import StreamsException

    env = dict(os.environ, LAKESTATE_WAREHOUSE=ctx.warehouse.root)
    home = Path(os.environ.get("AIRFLOW_HOME") or REPO / "airflow_home")
    log_path = home / f"{dag_id.removeprefix('lakestate_')}-dag-test.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    conf = {"until_caught_up": True, **({"transport": "spark"} if spark else {})}
    how = "on the Spark transport (--spark)" if spark else "each run choosing its transport"
    ctx.print(f"demo: running DAG {dag_id} through Airflow (dags test), {how}; its log: {log_path}")
    with open(log_path, "w") as log:
        proc = subprocess.run(
            [str(REPO / "scripts" / "airflow.sh"), "dags", "test", dag_id, "-c", json.dumps(conf)],
            env=env,
            cwd=REPO,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    text = log_path.read_text()
    for line in run_lines(text):
        ctx.print(f"  {line}")
    if proc.returncode != 0 or "state=success" not in text:
        raise StreamsException(f"the demo DAG run failed; see {log_path}")


#: What ``run_lines`` picks from a ``dags test`` log: a task's start, its command's Spark
#: master, a run's transport line (the runner's first: which transport and why), its batches
#: and its end.
_TASK_START = re.compile(r"\[DAG TEST\] starting task_id=(\S+)")
_MASTER = re.compile(r"running .* -m lakestate\.cli --master (\S+) run ")
_RUN_LINE = re.compile(
    r"transport: in .*?\)(?= \[|$)|batch [\d_:, ]+: \d+ records, \d+ output records, "
    r"(?:\d+ skipped to dead-letter topic \S+, )?[\d.]+s|caught up: no new input"
)


def run_lines(log: str) -> list[str]:
    """The lines the demo prints of a ``dags test`` log: per run task, in the order they
    ran, ``TASK: transport: ... (why)`` (and the Spark master of a run in Spark) then its
    batches."""
    out: list[str] = []
    task, master = "?", None
    for line in log.splitlines():
        if started := _TASK_START.search(line):
            task, master = started.group(1), None
        elif command := _MASTER.search(line):
            master = command.group(1)
        elif found := _RUN_LINE.search(line):
            said = found.group(0)
            if not said.startswith("transport: "):
                out.append(f"  {said}")
            elif said.startswith("transport: in Spark") and master:
                out.append(f"{task}: {said}, master {master}")
            else:
                out.append(f"{task}: {said}")
    return out
