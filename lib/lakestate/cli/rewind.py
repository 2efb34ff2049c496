"""``lakestate rewind``: an app's sinks and state back to an earlier batch
(``lakestate.ops.rewind``), after asking. No Spark."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

from lakestate.cli.app_arg import app_name

if TYPE_CHECKING:
    from lakestate.cli.main import Context


def configure(p: argparse.ArgumentParser) -> None:
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


def run(args: argparse.Namespace, ctx: Context) -> int:
    """Restore an app's tables to an earlier point and record its tasks' offsets there
    (ops/rewind.py); its next run reprocesses from there. Asks first: ``--yes``, or the
    app's name typed at a terminal. No Spark."""
    import sys

    from lakestate.ops.rewind import rewind as rewind_app
    from lakestate.runtime.cutoff import parse_timestamp

    name = app_name(args.app)
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
