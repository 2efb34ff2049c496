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
        ctx.print("metrics (each task's last batch; windowed aggregations and suppress keep running totals):")
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
    p.add_argument(
        "--app",
        choices=("demo", "clicks", "orders"),
        default="demo",
        help="demo: per-user counts (jobs/demo.py); clicks: per-user clicks a minute, final "
        "results only, and rate-limited alerts (jobs/clicks.py: windows and suppression); "
        "orders: orders enriched with the customer's tier at the order's time (jobs/orders.py: "
        "a versioned table)",
    )


def demo(args: argparse.Namespace, ctx) -> int:
    """Generate sample input, run the app's DAG through Airflow (``dags test``) on local
    Spark, then print its sinks and SQL queries over its state tables."""
    from lakestate.app import load_module
    from lakestate.io import logtable

    module = load_module(REPO / "jobs" / f"{args.app}.py")
    if args.app == "orders":
        return _demo_orders(args, ctx, module)
    spark = ctx.spark
    logtable.create_topic(ctx.warehouse, module.INPUT_TOPIC, 2)
    start = logtable.end_offsets(spark, ctx.warehouse, module.INPUT_TOPIC)
    seed = sum(start.values())
    if args.app == "clicks":
        start_ms = module.START_MS
        if seed:
            # Go on after the clicks already there: clicks at the same times again would
            # all be late (their windows closed), and dropped.
            newest = (
                logtable.read_topic(spark, ctx.warehouse, module.INPUT_TOPIC)
                .agg({"timestamp": "max"})
                .first()[0]
            )
            start_ms = max(start_ms, -(-newest // 60_000) * 60_000)
        sample = module.sample_clicks(args.records, seed=seed, start_ms=start_ms)
    else:
        sample = module.sample_events(args.records, seed=seed)
    records = [{"key": k, "value": v, "timestamp": t} for k, v, t in sample]
    logtable.append_records(spark, ctx.warehouse, module.INPUT_TOPIC, records)
    ctx.print(f"demo: produced {len(records)} sample events to topic {module.INPUT_TOPIC!r}")
    ctx.close()  # the DAG's Spark job runs in its own process
    _run_dag(ctx, f"lakestate_{module.app.name}")
    if args.app == "clicks":
        _show_clicks(ctx, module)
    else:
        _show_counts(ctx, module)
    return 0


def _demo_orders(args: argparse.Namespace, ctx, orders) -> int:
    """The orders demo: on a first run, sample customers' tier history, which the DAG loads
    into the versioned table; then sample orders (some late), which the DAG joins with it."""
    from lakestate.io import logtable

    spark, wh = ctx.spark, ctx.warehouse
    customers = 20
    for topic in (orders.CUSTOMERS_TOPIC, orders.INPUT_TOPIC):
        logtable.create_topic(wh, topic, 2)
    if not sum(logtable.end_offsets(spark, wh, orders.CUSTOMERS_TOPIC).values()):
        history = [
            {"key": k, "value": v, "timestamp": t} for k, v, t in orders.sample_customers(customers)
        ]
        logtable.append_records(spark, wh, orders.CUSTOMERS_TOPIC, history)
        ctx.print(
            f"demo: produced {len(history)} tier changes of {customers} customers to topic "
            f"{orders.CUSTOMERS_TOPIC!r} (some out of order)"
        )
        ctx.close()
        _run_dag(ctx, f"lakestate_{orders.app.name}")
        spark = ctx.spark
    first = sum(logtable.end_offsets(spark, wh, orders.INPUT_TOPIC).values())
    records = [
        {"key": k, "value": v, "timestamp": t}
        for k, v, t in orders.sample_orders(args.records, customers, seed=first, first=first)
    ]
    logtable.append_records(spark, wh, orders.INPUT_TOPIC, records)
    ctx.print(
        f"demo: produced {len(records)} orders to topic {orders.INPUT_TOPIC!r} "
        "(one in ten up to an hour late)"
    )
    ctx.close()
    _run_dag(ctx, f"lakestate_{orders.app.name}")
    _show_orders(ctx, orders)
    return 0


def _run_dag(ctx, dag_id: str) -> None:
    """``airflow dags test DAG_ID`` until caught up, its batches printed, its log in
    airflow_home/; raises if the run failed."""
    from lakestate.errors import StreamsException

    env = dict(os.environ, LAKESTATE_WAREHOUSE=ctx.warehouse.root)
    log_path = REPO / "airflow_home" / f"{dag_id.removeprefix('lakestate_')}-dag-test.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    ctx.print(
        f"demo: running DAG {dag_id} through Airflow (dags test) on local Spark; "
        f"its log: {log_path}"
    )
    with open(log_path, "w") as log:
        proc = subprocess.run(
            [
                str(REPO / "scripts" / "airflow.sh"),
                "dags",
                "test",
                dag_id,
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


def _show_counts(ctx, demo_module) -> None:
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


def _show_clicks(ctx, clicks) -> None:
    """The clicks app's final results, alerts, dropped late records and open windows."""
    from lakestate.engine.inspect import app_pin, format_time, view_name
    from lakestate.engine.inspect import sql as run_sql

    def hhmm(ms) -> str:  # sample clicks span minutes of one day: the time of day, UTC
        return format_time(int(ms))[11:]

    spark, wh = ctx.spark, ctx.warehouse
    final = view_name(clicks.FINAL_TOPIC)
    query = (
        "SELECT get_json_object(key, '$.key') AS user, "
        "CAST(get_json_object(key, '$.window_start') AS BIGINT) AS window_start, value AS clicks "
        f"FROM {final} ORDER BY timestamp DESC, offset DESC LIMIT 10"
    )
    ctx.print(
        f"demo: final results, one per user and minute once its window closed (topic "
        f"{clicks.FINAL_TOPIC!r}), the last 10:"
    )
    ctx.print(f'  lakestate sql "{query}"')
    for row in run_sql(spark, wh, query).collect():
        ctx.print(f"  {row.user}\t{hhmm(row.window_start)}\t{row.clicks} clicks")
    limit = int(clicks.ALERT_INTERVAL.total_seconds() // 60)
    ctx.print(
        f"demo: alerts, at most one per user per {limit} minutes of stream time (topic "
        f"{clicks.ALERT_TOPIC!r}):"
    )
    alerts = run_sql(
        spark,
        wh,
        f"SELECT timestamp, value FROM {view_name(clicks.ALERT_TOPIC)} ORDER BY timestamp",
    )
    for row in alerts.collect():
        alert = json.loads(row.value)
        ctx.print(
            f"  at {hhmm(row.timestamp)}: {alert['user']} clicked {alert['clicks']} times in "
            f"the minute from {hhmm(alert['window_start'])}"
        )
    metrics = [row.metrics for row in app_pin(wh, clicks.app.name).rows.values()]
    late = sum(m.get("late-record-drop-total", 0) for m in metrics)
    lateness = max((m.get("record-lateness-max", 0) for m in metrics), default=0)
    ctx.print(
        f"demo: late records dropped (late-record-drop-total): {late:g}; the one furthest behind "
        f"arrived {lateness / 1000:g} s behind stream time (record-lateness-max)"
    )
    store = view_name(f"{clicks.app.name}__{clicks.FINAL_BUFFER}-store")
    grace = int(clicks.GRACE.total_seconds() * 1000)
    query = (
        "SELECT get_json_object(key, '$.key') AS user, "
        "CAST(get_json_object(key, '$.window_start') AS BIGINT) AS window_start, "
        f"buffer_time + {grace} AS final_at, value AS clicks_so_far FROM {store} "
        "WHERE key IS NOT NULL ORDER BY buffer_time, user"
    )
    ctx.print("demo: windows still open, emitted once their task's stream time passes end + grace:")
    ctx.print(f'  lakestate sql "{query}"')
    for row in run_sql(spark, wh, query).collect():
        ctx.print(
            f"  {row.user}\t{hhmm(row.window_start)}\t{row.clicks_so_far} clicks so far, final "
            f"once stream time reaches {hhmm(row.final_at)}"
        )


def _show_orders(ctx, orders) -> None:
    """The orders app's enriched orders (late ones with a tier other than the customer's
    current one) and SQL over the customers' version history."""
    from lakestate.engine.inspect import format_time, view_name
    from lakestate.engine.inspect import sql as run_sql

    def hhmm(ms) -> str:
        return format_time(int(ms))[11:]

    spark, wh = ctx.spark, ctx.warehouse
    enriched, history = (
        view_name(orders.OUTPUT_TOPIC),
        view_name(f"orders__{orders.CUSTOMERS_STORE}"),
    )
    query = (
        "SELECT get_json_object(o.key, '$') AS customer, "
        "get_json_object(o.value, '$.order') AS order_id, o.timestamp, "
        "get_json_object(o.value, '$.tier') AS tier, h.value AS tier_now "
        f"FROM {enriched} o JOIN {history} h ON h.key = o.key AND h.valid_to IS NULL "
        "WHERE get_json_object(o.value, '$.tier') <> get_json_object(h.value, '$') "
        "ORDER BY o.timestamp DESC LIMIT 10"
    )
    ctx.print(
        f"demo: orders joined with the tier valid at their time, not the customer's tier now "
        f"(topic {orders.OUTPUT_TOPIC!r}), the last 10:"
    )
    ctx.print(f'  lakestate sql "{query}"')
    for row in run_sql(spark, wh, query).collect():
        ctx.print(
            f"  {row.order_id} at {hhmm(row.timestamp)}: {row.customer} was {row.tier} "
            f"(now {json.loads(row.tier_now)})"
        )
    customer = run_sql(
        spark,
        wh,
        f"SELECT key FROM {history} GROUP BY key ORDER BY count(*) DESC, key LIMIT 1",
    ).first()
    if customer is None:
        return
    query = (
        f"SELECT value AS tier, valid_from, valid_to FROM {history} "
        f"WHERE key = '{customer.key}' ORDER BY valid_from"
    )
    ctx.print(
        f"demo: the tier history of {json.loads(customer.key)} (the versioned store's SQL view):"
    )
    ctx.print(f'  lakestate sql "{query}"')
    for row in run_sql(spark, wh, query).collect():
        until = "now" if row.valid_to is None else hhmm(row.valid_to)
        tier = "deleted" if row.tier is None else json.loads(row.tier)
        ctx.print(f"  {tier}\tfrom {hhmm(row.valid_from)} until {until}")
