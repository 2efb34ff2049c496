"""``lakestate run``: micro-batches of an app, exactly once, its state in Delta
(``lakestate.run_app``)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from lakestate.cli.main import Context


def configure(p: argparse.ArgumentParser) -> None:
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
        "records are at most lakestate.inprocess.max.records or Spark's master is local, else "
        "Spark); default: the "
        "app's lakestate.transport, else auto",
    )
    p.add_argument(
        "--until-timestamp",
        metavar="MS|ISO",
        help="process each input partition up to its first record stamped at or after this "
        "time (epoch ms, or ISO such as 2026-11-24T10:00:00Z; exclusive), until caught up "
        "to that cut: what a backfill of an interval ending there processes",
    )


def run(args: argparse.Namespace, ctx: Context) -> int:
    from lakestate.runtime.cutoff import parse_timestamp
    from lakestate.scaleout.instance_run import run_app

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
                "dead_letters": result.dead_letters,
                "dead_letter_topic": result.dead_letter_topic,
                # Why the run did nothing, when it did nothing on purpose.
                "skipped": "locked" if result.busy else None,
            }
        )
        return 0
    dead = result.dead_letters
    ctx.say(
        f"ran {len(result.batches)} batch(es), {result.records} records"
        + (", caught up" if result.caught_up else "")
        + (", another run was active" if result.busy else "")
        + (
            f"; {dead} record{'s' if dead != 1 else ''} skipped to dead-letter topic "
            f"{result.dead_letter_topic} (lakestate consume {result.dead_letter_topic})"
            if dead
            else ""
        )
    )
    return 0
