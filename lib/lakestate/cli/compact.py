"""``lakestate compact``: an app's changelogs rewritten as one row per live key up to
each task's last complete batch (``lakestate.ops.compaction``). No Spark."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from lakestate.cli.app_arg import app_name

if TYPE_CHECKING:
    from lakestate.cli.main import Context


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("app", help="the app's name (or its module, e.g. jobs/demo.py)")
    p.add_argument("--store", metavar="NAME", help="compact this store only (default: all)")


def run(args: argparse.Namespace, ctx: Context) -> int:
    """Compact the app's changelogs through each task's last complete batch; safe while
    its batches run. No Spark."""
    from lakestate.ops.compaction import compact as compact_app

    name = app_name(args.app)
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
