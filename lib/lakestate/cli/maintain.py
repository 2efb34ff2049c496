"""``lakestate maintain``: compaction, OPTIMIZE and VACUUM of an app's tables
(``lakestate.ops.maintenance``). No Spark."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from lakestate.cli.app_arg import app_name

if TYPE_CHECKING:
    from lakestate.cli.main import Context


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("app", help="the app's name (or its module, e.g. jobs/demo.py)")
    p.add_argument(
        "--retention-hours",
        type=int,
        default=168,
        metavar="N",
        help="VACUUM keeps what the table versions of the last N hours need (time travel); "
        "at least 1, default 168 (7 days)",
    )


def run(args: argparse.Namespace, ctx: Context) -> int:
    """Compaction, OPTIMIZE and VACUUM of the app's tables (what its maintenance DAG
    does); safe while its batches run. No Spark."""
    from datetime import timedelta

    from lakestate.ops import maintenance

    name = app_name(args.app)
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
