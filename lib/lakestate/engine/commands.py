"""The engine's CLI commands: ``run``, ``sql``, ``status``, ``compact``, ``maintain`` and
``demo`` (registered in ``lakestate.cli.COMMANDS``)."""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


def run_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("app", help="the app module, e.g. jobs/demo.py")
    p.add_argument("--max-batches", type=int, metavar="N", help="run at most N micro-batches")
    p.add_argument(
        "--max-records", type=int, metavar="N", help="at most N records per task per batch"
    )
    p.add_argument(
        "--until-caught-up", action="store_true", help="run batches until every input is processed"
    )
    p.add_argument(
        "--time-budget",
        type=float,
        metavar="SECONDS",
        help="start no new batch after this many seconds",
    )
    p.add_argument(
        "--tasks",
        metavar="LIST",
        help="the tasks this run owns, e.g. 0_0,0_1 (default: all; runs of disjoint task "
        "sets may run side by side, each with its own --state-dir)",
    )
    p.add_argument(
        "--state-dir",
        metavar="DIR",
        help="local state directory (default: env LAKESTATE_STATE_DIR, else ./state)",
    )


def run(args: argparse.Namespace, ctx) -> int:
    from lakestate.engine.runner import run_app

    result = run_app(
        args.app,
        warehouse=ctx.warehouse.root,
        state_dir=args.state_dir,
        max_batches=args.max_batches,
        max_records=args.max_records,
        until_caught_up=args.until_caught_up,
        time_budget_s=args.time_budget,
        tasks=args.tasks.split(",") if args.tasks else None,
        master=ctx.master,
        say=ctx.print,
    )
    ctx.print(
        f"ran {len(result.batches)} batch(es), {result.records} records"
        + (", caught up" if result.caught_up else "")
    )
    return 0


def sql_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("query", help="Spark SQL; topics and state tables (<app>__<store>) are views")
    p.add_argument(
        "--batch",
        type=int,
        metavar="N",
        help="read the stores of the app the query names as of its batch N (default: the "
        "last complete batch of each task)",
    )
    p.add_argument("--limit", type=int, default=1000, help="rows to print (default 1000)")


def sql(args: argparse.Namespace, ctx) -> int:
    from lakestate.engine.inspect import sql as run_sql

    df = run_sql(ctx.spark, ctx.warehouse, args.query, args.batch)
    ctx.print("\t".join(df.columns))
    for row in df.limit(args.limit).collect():
        ctx.print("\t".join("NULL" if v is None else str(v) for v in row))
    return 0


def status_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("app", help="the app's name (or its module, e.g. jobs/demo.py)")
    p.add_argument("--state-dir", metavar="DIR", help="local state directory of this instance")


def status(args: argparse.Namespace, ctx) -> int:
    from lakestate.engine.inspect import format_time
    from lakestate.engine.inspect import status as app_status
    from lakestate.engine.runner import state_dir_of

    name = args.app
    if name.endswith(".py"):
        from lakestate.app import load_app

        name = load_app(name).name
    pin, rows = app_status(ctx.spark, ctx.warehouse, name, state_dir_of(args.state_dir))
    if not pin.rows:
        ctx.print(f"app {name}: no committed batch yet")
        return 0
    newest = max(pin.rows.values(), key=lambda r: r.at_ms)
    ctx.print(
        f"app {name}: last batch committed at {format_time(newest.at_ms)} UTC "
        f"(task {newest.task}, batch {newest.batch_id}, {newest.records} records)"
    )
    header = (
        "task",
        "batch",
        "topic",
        "partition",
        "committed",
        "end",
        "lag",
        "stream time",
        "local",
    )
    ctx.print("\t".join(header))
    for r in rows:
        ctx.print(
            "\t".join(
                str(v)
                for v in (
                    r.task,
                    r.batch_id,
                    r.topic,
                    r.partition,
                    r.committed_offset,
                    r.end_offset,
                    r.lag,
                    format_time(r.stream_time),
                    "-" if r.local_offset is None else r.local_offset,
                )
            )
        )
    if any(r.metrics for r in pin.rows.values()):
        ctx.print("metrics of each task's last batch:")
        for task, row in sorted(pin.rows.items()):
            shown = ", ".join(f"{k}={v:g}" for k, v in sorted(row.metrics.items()))
            ctx.print(f"  {task} (batch {row.batch_id}): {shown}")
    return 0


def convert_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("app", help="the app module, e.g. jobs/demo.py")


def convert(args: argparse.Namespace, ctx) -> int:
    from lakestate.app import load_app
    from lakestate.engine.convert import convert as convert_app

    convert_app(ctx.spark, ctx.warehouse, load_app(args.app), say=ctx.print)
    return 0


def compact_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("app", help="the app's name (or its module, e.g. jobs/demo.py)")
    p.add_argument("--store", metavar="NAME", help="compact this store only (default: all)")


def compact(args: argparse.Namespace, ctx) -> int:
    """Compact the app's changelogs through each task's last complete batch; safe while
    its batches run. No Spark."""
    from lakestate.engine.compaction import compact as compact_app

    name = args.app
    if name.endswith(".py"):
        from lakestate.app import load_app

        name = load_app(name).name
    result = compact_app(ctx.warehouse, name, args.store, say=ctx.print)
    done = result.committed
    ctx.print(
        f"app {name}: compacted {len(done)} of {len(result.tasks)} store task(s), "
        f"{sum(t.rows_before for t in done)} rows -> {sum(t.rows_after for t in done)}"
    )
    return 0


def maintain_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("app", help="the app's name (or its module, e.g. jobs/demo.py)")
    p.add_argument(
        "--retention-hours",
        type=int,
        default=168,
        metavar="N",
        help="VACUUM keeps what the table versions of the last N hours need (time travel); "
        "at least 1, default 168 (7 days)",
    )


def maintain(args: argparse.Namespace, ctx) -> int:
    """Compaction, OPTIMIZE and VACUUM of the app's tables (what its maintenance DAG
    does); safe while its batches run. No Spark."""
    from datetime import timedelta

    from lakestate.engine import maintenance

    name = args.app
    if name.endswith(".py"):
        from lakestate.app import load_app

        name = load_app(name).name
    retention = timedelta(hours=args.retention_hours)
    optimized, vacuumed = maintenance.maintain(ctx.warehouse, name, retention, say=ctx.print)
    ctx.print(
        f"app {name}: {len(optimized)} table(s), "
        f"{sum(t.files_before for t in optimized)} -> {sum(t.files_after for t in optimized)} "
        f"files, {sum(len(t.deleted) for t in vacuumed)} file(s) vacuumed"
    )
    return 0


def demo_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--records", type=int, default=1000, help="sample events to generate")


def demo(args: argparse.Namespace, ctx) -> int:
    """Generate sample input, run the demo app's DAG through Airflow (``dags test``) on local
    Spark, then print the sink and an SQL query over its state table."""
    from lakestate.app import load_module
    from lakestate.errors import StreamsException
    from lakestate.io import logtable

    demo_module = load_module(REPO / "jobs" / "demo.py")
    spark = ctx.spark
    logtable.create_topic(spark, ctx.warehouse, demo_module.INPUT_TOPIC, 2)
    start = logtable.end_offsets(spark, ctx.warehouse, demo_module.INPUT_TOPIC)
    seed = sum(start.values())
    records = [
        {"key": k, "value": v, "timestamp": t}
        for k, v, t in demo_module.sample_events(args.records, seed=seed)
    ]
    logtable.append_records(spark, ctx.warehouse, demo_module.INPUT_TOPIC, records)
    ctx.print(f"demo: produced {len(records)} sample events to topic {demo_module.INPUT_TOPIC!r}")
    ctx.close()  # the DAG's Spark job runs in its own process
    env = dict(os.environ, LAKESTATE_WAREHOUSE=ctx.warehouse.root)
    log_path = REPO / "airflow_home" / "demo-dag-test.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    ctx.print(
        "demo: running DAG lakestate_demo through Airflow (dags test) on local Spark; "
        f"its log: {log_path}"
    )
    with open(log_path, "w") as log:
        proc = subprocess.run(
            [
                str(REPO / "scripts" / "airflow.sh"),
                "dags",
                "test",
                "lakestate_demo",
                "-c",
                json.dumps({"until_caught_up": True}),
            ],
            env=env,
            cwd=REPO,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    text = log_path.read_text()
    for line in text.splitlines():
        found = re.search(
            r"batch [\d_:, ]+: \d+ records, \d+ output records, [\d.]+s|caught up: no new input",
            line,
        )
        if found:
            ctx.print(f"  {found.group(0)}")
    if proc.returncode != 0 or "state=success" not in text:
        raise StreamsException(f"the demo DAG run failed; see {log_path}")
    from lakestate.engine.inspect import sql as run_sql
    from lakestate.engine.inspect import view_name

    spark = ctx.spark
    ctx.print(f"demo: the last 10 records of topic {demo_module.OUTPUT_TOPIC!r}:")
    out = run_sql(
        spark,
        ctx.warehouse,
        f"SELECT partition, offset, key, value FROM "
        f"{view_name(demo_module.OUTPUT_TOPIC)} ORDER BY timestamp DESC, offset DESC "
        "LIMIT 10",
    )
    for row in out.collect():
        ctx.print(f"  partition {row.partition} offset {row.offset}: {row.key} -> {row.value}")
    view = view_name(f"{demo_module.app.name}__{demo_module.STORE}")
    query = f"SELECT key, value AS count, task FROM {view} ORDER BY key"
    ctx.print(f'demo: lakestate sql "{query}"')
    for row in run_sql(spark, ctx.warehouse, query).collect():
        ctx.print(f"  {row['key']}\t{row['count']}\t(task {row['task']})")
    return 0
