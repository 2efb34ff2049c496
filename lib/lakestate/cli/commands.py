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
        help="local state directory (default: the instance's; without instances configured: "
        "env LAKESTATE_STATE_DIR, else ./state)",
    )
    p.add_argument(
        "--instance",
        metavar="NAME",
        help="run as this instance of the app (its config's lakestate.instances; default: "
        "the first): process the tasks it owns, bring its warmups and standbys up to date, "
        "report its lags",
    )
    p.add_argument(
        "--wait",
        type=float,
        metavar="SECONDS",
        help="if another run of the app holds this instance's lock, wait up to SECONDS for "
        "it (then process what is new; if it is still running, do nothing and exit 0); "
        "default: the --time-budget, else no wait; 'inf': as long as it takes",
    )
    p.add_argument(
        "--transport",
        choices=("auto", "inprocess", "spark"),
        help="where the batches are read and processed: inprocess (delta-rs, in this "
        "process, no JVM), spark (Spark's workers), auto (in this process when the pending "
        "records are at most lakestate.inprocess.max.records, else Spark); default: the "
        "app's lakestate.transport, else auto",
    )
    p.add_argument(
        "--until-timestamp",
        metavar="MS|ISO",
        help="process each input partition up to its first record stamped at or after this "
        "time (epoch ms, or ISO such as 2026-11-24T10:00:00Z; exclusive), until caught up "
        "to that cut: what a backfill of an interval ending there processes",
    )


def run(args: argparse.Namespace, ctx) -> int:
    from lakestate import run_app
    from lakestate.runtime.cutoff import parse_timestamp

    if args.wait is not None and not args.wait >= 0:
        raise ValueError(f"--wait must be at least 0 seconds, got {args.wait}")
    until = None if args.until_timestamp is None else parse_timestamp(args.until_timestamp)
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
        lock_wait_s=args.wait,
        until_timestamp=until,
        say=ctx.say,
        instance=args.instance,
        transport=args.transport,
    )
    if ctx.json_output:
        ctx.print_json(
            {
                "batches": len(result.batches),
                "records": result.records,
                "caught_up": result.caught_up,
                "busy": result.busy,
                "transport": result.transport,
                "per_batch": result.figures,
                "instance": result.instance,
                "warmed": result.warmed,
            }
        )
        return 0
    ctx.say(
        f"ran {len(result.batches)} batch(es), {result.records} records"
        + (", caught up" if result.caught_up else "")
        + (", another run was active" if result.busy else "")
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
    p.add_argument(
        "--engine",
        choices=("duckdb", "spark"),
        default="duckdb",
        help="duckdb (default): in this process, no JVM (the query is transpiled from Spark "
        "SQL, with Spark's functions); spark: on Spark, for queries too large for one process",
    )


def sql(args: argparse.Namespace, ctx) -> int:
    """Print the query's rows: a tab-separated table (NULL for nulls), or with ``--json``
    one JSON object per row."""
    from lakestate.read.result import print_result

    result = query(ctx, args.query, args.batch, args.limit, args.engine)
    print_result(result, ctx.print, json_lines=ctx.json_output)
    return 0


def query(ctx, text: str, batch: int | None = None, limit: int | None = None, engine="duckdb"):
    """Run Spark SQL ``text`` over the warehouse's views on ``engine`` (``duckdb``, in
    process; ``spark``); a ``lakestate.read.result.Result`` of at most ``limit`` rows."""
    if engine != "spark":
        from lakestate.read.duckdb_engine import sql as duckdb_sql

        return duckdb_sql(ctx.warehouse, text, batch, limit)
    from pyspark.errors import PySparkException

    from lakestate.read.result import Result
    from lakestate.read.spark_engine import sql as spark_sql

    try:
        df = spark_sql(ctx.spark, ctx.warehouse, text, batch)
        rows = (df if limit is None else df.limit(max(limit, 0))).collect()
    except PySparkException as e:  # Spark's analysis and parse errors: the query's fault
        raise ValueError(str(e).strip().splitlines()[0]) from None
    return Result(list(df.columns), [tuple(r) for r in rows])


def describe_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "name",
        help="an app's module (jobs/demo.py), an app's name (defined by a module in ./jobs), "
        "or a topic",
    )


def describe(args: argparse.Namespace, ctx) -> int:
    """Describe an app (its topology, tasks, topics, stores and config) or a topic; with
    ``--json`` as one JSON document. No Spark."""
    from lakestate.read import describe as about

    app = about.find_app(args.name)
    if app is None:
        from lakestate.io import logtable

        if not logtable.topic_exists(None, ctx.warehouse, args.name):
            raise ValueError(
                f"{args.name!r} is neither an app module, an app defined in ./jobs, nor a "
                f"topic of {ctx.warehouse.root}"
            )
        found = about.describe_topic(ctx.warehouse, args.name)
        if ctx.json_output:
            ctx.print(json.dumps(found, ensure_ascii=False))
        else:
            _print_topic(ctx, found)
        return 0
    found = about.describe_app(ctx.warehouse, app)
    if ctx.json_output:
        ctx.print(json.dumps(found, ensure_ascii=False))
        return 0
    ctx.print(f"app {found['app']} (warehouse {found['warehouse']})")
    ctx.print("config:")
    width = max(len(k) for k in found["config"])
    for key, c in found["config"].items():
        shown = "-" if c["value"] is None else c["value"]
        ctx.print(f"  {key.ljust(width)}  {shown}" + (" (default)" if c["default"] else ""))
    ctx.print(found["topology"])
    ctx.print("tasks (sub-topology_partition: the partitions it reads):")
    for t in found["tasks"]:
        reads = ", ".join(t["reads"])
        if t["global_reads"]:
            reads += "; every partition of " + ", ".join(t["global_reads"])
        ctx.print(f"  {t['task']}  {reads}")
    unresolved = [s["id"] for s in found["subtopologies"] if s["tasks"] is None]
    if unresolved:
        ctx.print(
            "  sub-topolog"
            + ("ies " if len(unresolved) > 1 else "y ")
            + ", ".join(map(str, unresolved))
            + ": tasks unknown until its input topics exist"
        )
    ctx.print("topics:")
    lines = [("topic", "role", "partitions", "end offsets", "records", "SQL view")]
    for t in found["topics"]:
        ends = " ".join(f"{p}:{e}" for p, e in t["end_offsets"].items())
        lines.append(
            (
                t["topic"],
                t["role"],
                "-" if t["partitions"] is None else str(t["partitions"]),
                ends or ("(not created yet)" if not t["exists"] else "-"),
                str(t["records"]),
                t["sql_view"],
            )
        )
    _print_columns(ctx, lines)
    ctx.print("stores:")
    lines = [("store", "kind", "sub-topology", "SQL views", "changelog")]
    for s in found["stores"]:
        if s["global"]:
            lines.append((s["store"], s["kind"], "global", "-", "- (its topic is its record)"))
            continue
        changelog = s["changelog"] + ("" if s["changelog_exists"] else " (not created yet)")
        views = f"{s['sql_view']}, {s['changelog_view']}"
        lines.append((s["store"], s["kind"], str(s["subtopology"]), views, changelog))
    _print_columns(ctx, lines)
    ctx.print(f"progress: {found['progress']}")
    return 0


def _print_topic(ctx, t: dict) -> None:
    ends = " ".join(f"{p}:{e}" for p, e in t["end_offsets"].items())
    ctx.print(f"topic {t['topic']} ({t['path']})")
    ctx.print(f"  partitions: {t['partitions']}")
    ctx.print(f"  end offsets: {ends}")
    ctx.print(f"  records: {t['records']}")
    ctx.print(f"  SQL view: {t['sql_view']}")


def _print_columns(ctx, lines: list[tuple[str, ...]]) -> None:
    widths = [max(len(line[i]) for line in lines) for i in range(len(lines[0]))]
    for line in lines:
        ctx.print(
            ("  " + "  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True))).rstrip()
        )


def status_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "app",
        help="the app's module, e.g. jobs/demo.py (every sub-topology), or its name (the "
        "sub-topologies its progress rows name)",
    )
    p.add_argument("--state-dir", metavar="DIR", help="local state directory of this instance")


# Status's metric columns: per column, the metrics it shows (the first a scope has).
_STATUS_COLUMNS = {
    "forwarded": ("dedup-records-forwarded", "suppression-emit-total", "forward-total"),
    "dropped": ("dropped-records",),
    "duplicates": ("dedup-duplicates-dropped",),
    "late": ("late-record-drop-total", "dedup-late-records-forwarded"),
    "store size": ("dedup-store-size", "suppression-buffer-count-current", "~local-keys"),
}
# A store without a size metric shows the keys of this instance's local store: RocksDB's
# estimate (no scan), a store kind's index entries included; marked "~".
_LOCAL_KEYS = "~local-keys"


def status(args: argparse.Namespace, ctx) -> int:
    """Every task of an app: offsets, lag, stream time, last batch, metrics totals. No
    Spark: the progress rows and end offsets come through delta-rs and the Delta logs."""
    from lakestate import app_status
    from lakestate.checkpoint.task_dir import state_dir_of
    from lakestate.read.status import format_time

    name, topology = args.app, None
    if name.endswith(".py"):
        from lakestate.app import load_app

        loaded = load_app(name)
        name, topology = loaded.name, loaded.topology
    found = app_status(ctx.warehouse, name, state_dir_of(args.state_dir), topology)
    if ctx.json_output:
        ctx.print(json.dumps(found.to_json(), sort_keys=True))
        return 0
    if not found.tasks:
        hint = " (no progress rows: give the app's module)" if topology is None else ""
        ctx.print(f"app {name}: no task found{hint}")
    for sub in found.unresolved:
        ctx.print(f"sub-topology {sub}: no tasks until its input topics exist (a run creates them)")
    if not found.tasks:
        return 0
    newest = max(found.tasks, key=lambda t: t.committed_at_ms or -1)
    dropped = sum(t.metrics.get("task", {}).get("dropped-records", 0) for t in found.tasks)
    subs = len({t.task.subtopology for t in found.tasks})
    ctx.print(
        f"app {name}: {len(found.tasks)} tasks in {subs} sub-topologies, lag "
        f"{sum(t.lag for t in found.tasks)}, dropped-records {dropped:g}; "
        + (
            f"last batch committed at {format_time(newest.committed_at_ms)} UTC (task "
            f"{newest.task}, batch {newest.batch})"
            if newest.committed_at_ms is not None
            else "no committed batch yet"
        )
    )
    header = ("task", "batch", "committed at", "stream time", "input", "committed", "end")
    lines = [(*header, "lag", "local")]
    for t in found.tasks:
        batch = str(t.batch or "-") + (
            f" (+{t.pending_batch} to replay)" if t.pending_batch else ""
        )
        lead = (str(t.task), batch, format_time(t.committed_at_ms), format_time(t.stream_time))
        for i, inp in enumerate(t.inputs or [None]):
            cells = lead if i == 0 else ("",) * len(lead)
            if inp is None:
                lines.append((*cells, "-", "-", "-", "-", "-"))
                continue
            local = "-" if inp.local is None else str(inp.local)
            where = f"{inp.topic}[{inp.partition}]"
            lines.append((*cells, where, str(inp.committed), str(inp.end), str(inp.lag), local))
    _print_table(ctx, lines)
    rows = [
        _metric_row(t, level, scope, named)
        for t in found.tasks
        for level in ("nodes", "stores", "task")
        for scope, named in _scopes(t, level)
    ]
    if rows:
        ctx.print("metrics (totals since each task's first batch):")
        _print_table(ctx, [("task", "operator", *_STATUS_COLUMNS, "other"), *rows])
    if topology is None and not ctx.quiet:
        ctx.print(
            "(sub-topologies that never committed are listed when status is given the app's "
            "module, e.g. jobs/demo.py)"
        )
    return 0


def _scopes(task, level: str) -> list[tuple[str, dict]]:
    metrics = task.metrics
    if level == "task":  # Kafka's task level: shown when no node holds the figures
        named = metrics.get("task") or {}
        return [("(task)", named)] if not metrics.get("nodes") and any(named.values()) else []
    scopes = {scope: dict(named) for scope, named in (metrics.get(level) or {}).items()}
    if level == "stores":
        for store, keys in task.local_store_keys.items():
            scopes.setdefault(store, {})[_LOCAL_KEYS] = keys
    return sorted(scopes.items())


def _metric_row(task, level: str, scope: str, named: dict) -> tuple[str, ...]:
    shown: set[str] = set()
    cells = []
    for names in _STATUS_COLUMNS.values():
        name = next((n for n in names if n in named), None)
        mark = "~" if name == _LOCAL_KEYS else ""
        cells.append("-" if name is None else f"{mark}{named[name]:g}")
        if name is not None:
            # A column's figures are one figure by other names (a dedup node's forward-total
            # is its dedup-records-forwarded): the one shown stands for all.
            shown.update(names)
    other = ", ".join(
        f"{k}={v:g}" for k, v in sorted(named.items()) if k not in shown and k != _LOCAL_KEYS
    )
    label = f"{scope} (store)" if level == "stores" else scope
    return (str(task.task), label, *cells, other or "-")


def _print_table(ctx, lines: list[tuple[str, ...]]) -> None:
    widths = [max(len(line[i]) for line in lines) for i in range(len(lines[0]))]
    for line in lines:
        ctx.print("  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip())


def convert_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("app", help="the app module, e.g. jobs/demo.py")


def convert(args: argparse.Namespace, ctx) -> int:
    from lakestate.app import load_app
    from lakestate.ops.convert import convert as convert_app

    convert_app(ctx.spark, ctx.warehouse, load_app(args.app), say=ctx.print)
    return 0


def compact_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("app", help="the app's name (or its module, e.g. jobs/demo.py)")
    p.add_argument("--store", metavar="NAME", help="compact this store only (default: all)")


def compact(args: argparse.Namespace, ctx) -> int:
    """Compact the app's changelogs through each task's last complete batch; safe while
    its batches run. No Spark."""
    from lakestate import compact as compact_app

    name = args.app
    if name.endswith(".py"):
        from lakestate.app import load_app

        name = load_app(name).name
    result = compact_app(ctx.warehouse, name, args.store, say=ctx.say)
    done = result.committed
    if ctx.json_output:
        ctx.print_json(
            {
                "app": name,
                "store_tasks": len(result.tasks),
                "compacted": len(done),
                "rows_before": sum(t.rows_before for t in done),
                "rows_after": sum(t.rows_after for t in done),
            }
        )
        return 0
    ctx.say(
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

    from lakestate.ops import maintenance

    name = args.app
    if name.endswith(".py"):
        from lakestate.app import load_app

        name = load_app(name).name
    retention = timedelta(hours=args.retention_hours)
    optimized, vacuumed = maintenance.maintain(ctx.warehouse, name, retention, say=ctx.say)
    if ctx.json_output:
        ctx.print_json(
            {
                "app": name,
                "tables": len(optimized),
                "files_before": sum(t.files_before for t in optimized),
                "files_after": sum(t.files_after for t in optimized),
                "files_vacuumed": sum(len(t.deleted) for t in vacuumed),
            }
        )
        return 0
    ctx.say(
        f"app {name}: {len(optimized)} table(s), "
        f"{sum(t.files_before for t in optimized)} -> {sum(t.files_after for t in optimized)} "
        f"files, {sum(len(t.deleted) for t in vacuumed)} file(s) vacuumed"
    )
    return 0


def rewind_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("app", help="the app's name (or its module, e.g. jobs/demo.py)")
    target = p.add_mutually_exclusive_group(required=True)
    target.add_argument(
        "--to-batch",
        type=int,
        metavar="N",
        help="back to the latest point of the app's history at which no task is past its "
        "batch N (0: before the first batch)",
    )
    target.add_argument(
        "--before-time",
        metavar="MS|ISO",
        help="back to the latest point at which no task's stream time has reached this time "
        "(epoch ms, or ISO such as 2026-11-24T10:00:00Z): the batch before an interval",
    )
    target.add_argument(
        "--resume", action="store_true", help="complete a rewind that was interrupted"
    )
    p.add_argument(
        "--yes", action="store_true", help="do it without asking (else type the app's name)"
    )
    p.add_argument(
        "--state-dir",
        metavar="DIR",
        help="local state directory of this instance, whose lock of the app the rewind holds "
        "(default: env LAKESTATE_STATE_DIR, else ./state)",
    )


def rewind(args: argparse.Namespace, ctx) -> int:
    """Restore an app's tables to an earlier point and record its tasks' offsets there
    (ops/rewind.py); its next run reprocesses from there. Asks first: ``--yes``, or the
    app's name typed at a terminal. No Spark."""
    import sys

    from lakestate import rewind as rewind_app
    from lakestate.runtime.cutoff import parse_timestamp

    name = args.app
    if name.endswith(".py"):
        from lakestate.app import load_app

        name = load_app(name).name
    quiet = getattr(ctx, "quiet", False) or getattr(ctx, "json_output", False)
    say = getattr(ctx, "say", None) or (lambda text: None if quiet else ctx.print(text))

    def confirm(plan) -> bool:
        for line in plan.describe():
            say(line)
        if args.yes:
            return True
        if not sys.stdin.isatty() or getattr(ctx, "json_output", False):
            raise ValueError(
                f"rewinding app {name} changes its sinks and state: confirm with --yes "
                "(or run it at a terminal and type the app's name)"
            )
        answer = input(f"type the app's name ({name}) to rewind it, anything else to stop: ")
        return answer.strip() == name

    result = rewind_app(
        ctx.warehouse,
        name,
        to_batch=args.to_batch,
        before_stream_time=None if args.before_time is None else parse_timestamp(args.before_time),
        resume=args.resume,
        state_dir=args.state_dir,
        confirm=confirm,
        say=say,
    )
    if getattr(ctx, "json_output", False):
        ctx.print(
            json.dumps(
                {
                    "app": name,
                    "noop": result.noop,
                    "declined": result.declined,
                    "plan": None if result.plan is None else result.plan.to_json(),
                    "resumed": None if result.resumed is None else result.resumed.to_json(),
                }
            )
        )
    if result.declined:
        ctx.stderr.write(f"lakestate rewind: app {name} not rewound: not confirmed\n")
        return 1
    return 0


def rebalance_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "app",
        help="the app's module (jobs/demo.py) or its name (defined by a module in ./jobs): its "
        "config names the instances",
    )
    p.add_argument(
        "--force",
        action="store_true",
        help="compute the next generation even when nothing changed (it is written only if "
        "it differs)",
    )


def rebalance(args: argparse.Namespace, ctx) -> int:
    """The app's next assignment generation, when its instances or their lags changed or a
    probing rebalance is due (scaleout/rebalance.py); prints the old and the new assignment
    per task and each instance's lag. No Spark."""
    from lakestate import rebalance as rebalance_app
    from lakestate.read.describe import find_app
    from lakestate.scaleout.rebalance import NO_CHANGE

    app = find_app(args.app)
    if app is None:
        raise ValueError(
            f"{args.app!r} is neither an app module nor an app defined in ./jobs: rebalance "
            "needs the app's module (its config names the instances)"
        )
    result = rebalance_app(app, ctx.warehouse, force=args.force, say=ctx.say)
    if ctx.json_output:
        ctx.print_json(result.to_json())
        return 0
    old, new = result.old, result.new
    if new is None:
        where = "no generation yet" if old is None else f"generation {old.number} stays"
        ctx.print(f"no change ({where})")
        if result.reason != NO_CHANGE:
            ctx.say(f"computed ({result.reason}): the same assignment, nothing written")
    else:
        was = "" if old is None else f", was generation {old.number}"
        ctx.print(f"generation {new.number} ({new.reason}){was}")
    current = result.current
    if current is None:
        return 0
    names = list(result.lags)

    def cell(before: str, after: str) -> str:
        return after if before == after else f"{before} -> {after}"

    def roles(g, t) -> tuple[str, str, str]:
        if g is None or t not in g.assignment.active:
            return "-", "-", "-"
        a = g.assignment
        return (
            a.active[t],
            ",".join(sorted(a.warmup.get(t, ()))) or "-",
            ",".join(sorted(a.standby.get(t, ()))) or "-",
        )

    lines = [("task", "active", "warmup", "standby", *(f"lag {n}" for n in names))]
    for t in sorted(current.assignment.active):
        before, after = roles(old if new is not None else current, t), roles(current, t)
        lags = [result.lags[n].get(t) for n in names]
        lines.append(
            (
                str(t),
                *(cell(b, a) for b, a in zip(before, after, strict=True)),
                *("-" if lag is None else str(lag) for lag in lags),
            )
        )
    _print_table(ctx, lines)
    if current.assignment.probing_rebalance_needed:
        ctx.print(
            "warmups are catching up: a probing rebalance follows (probing.rebalance.interval.ms)"
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


def _show_counts(ctx, demo_module, engine: str = "duckdb") -> None:
    from lakestate.read.views import view_name

    ctx.print(f"demo: the last 10 records of topic {demo_module.OUTPUT_TOPIC!r}:")
    out = query(
        ctx,
        f"SELECT partition, offset, key, value FROM "
        f"{view_name(demo_module.OUTPUT_TOPIC)} ORDER BY timestamp DESC, offset DESC "
        "LIMIT 10",
        engine=engine,
    )
    for row in out.dicts():
        ctx.print(
            f"  partition {row['partition']} offset {row['offset']}: {row['key']} -> {row['value']}"
        )
    view = view_name(f"{demo_module.app.name}__{demo_module.STORE}")
    text = f"SELECT key, value AS count, task FROM {view} ORDER BY key"
    ctx.print(f'demo: lakestate sql "{text}"')
    for row in query(ctx, text, engine=engine).dicts():
        ctx.print(f"  {row['key']}\t{row['count']}\t(task {row['task']})")


def _show_clicks(ctx, clicks, engine: str = "duckdb") -> None:
    """The clicks app's final results, alerts, dropped late records and open windows."""
    from lakestate.read.views import app_pin, format_time, view_name

    def hhmm(ms) -> str:  # sample clicks span minutes of one day: the time of day, UTC
        return format_time(int(ms))[11:]

    wh = ctx.warehouse
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
    for row in _rows(ctx, query, engine):
        ctx.print(f"  {row.user}\t{hhmm(row.window_start)}\t{row.clicks} clicks")
    limit = int(clicks.ALERT_INTERVAL.total_seconds() // 60)
    ctx.print(
        f"demo: alerts, at most one per user per {limit} minutes of stream time (topic "
        f"{clicks.ALERT_TOPIC!r}):"
    )
    alerts = _rows(
        ctx,
        f"SELECT timestamp, value FROM {view_name(clicks.ALERT_TOPIC)} ORDER BY timestamp",
        engine,
    )
    for row in alerts:
        alert = json.loads(row.value)
        ctx.print(
            f"  at {hhmm(row.timestamp)}: {alert['user']} clicked {alert['clicks']} times in "
            f"the minute from {hhmm(alert['window_start'])}"
        )
    from lakestate.processors.metrics import flat

    metrics = [flat(row.metrics) for row in app_pin(wh, clicks.app.name).rows.values()]
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
    for row in _rows(ctx, query, engine):
        ctx.print(
            f"  {row.user}\t{hhmm(row.window_start)}\t{row.clicks_so_far} clicks so far, final "
            f"once stream time reaches {hhmm(row.final_at)}"
        )


def _show_orders(ctx, orders, engine: str = "duckdb") -> None:
    """The orders app's enriched orders (late ones with a tier other than the customer's
    current one) and SQL over the customers' version history."""
    from lakestate.read.views import format_time, view_name

    def hhmm(ms) -> str:
        return format_time(int(ms))[11:]

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
    for row in _rows(ctx, query, engine):
        ctx.print(
            f"  {row.order_id} at {hhmm(row.timestamp)}: {row.customer} was {row.tier} "
            f"(now {json.loads(row.tier_now)})"
        )
    customers = _rows(
        ctx, f"SELECT key FROM {history} GROUP BY key ORDER BY count(*) DESC, key LIMIT 1", engine
    )
    if not customers:
        return
    customer = customers[0]
    query = (
        f"SELECT value AS tier, valid_from, valid_to FROM {history} "
        f"WHERE key = '{customer.key}' ORDER BY valid_from"
    )
    ctx.print(
        f"demo: the tier history of {json.loads(customer.key)} (the versioned store's SQL view):"
    )
    ctx.print(f'  lakestate sql "{query}"')
    for row in _rows(ctx, query, engine):
        until = "now" if row.valid_to is None else hhmm(row.valid_to)
        tier = "deleted" if row.tier is None else json.loads(row.tier)
        ctx.print(f"  {tier}\tfrom {hhmm(row.valid_from)} until {until}")


def _rows(ctx, text: str, engine: str = "duckdb") -> list:
    """The rows of a demo's query, by attribute (the default engine: no JVM)."""
    from types import SimpleNamespace

    return [SimpleNamespace(**row) for row in query(ctx, text, engine=engine).dicts()]
