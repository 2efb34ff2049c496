"""``lakestate rebalance``: an app's next assignment of tasks to its instances
(``lakestate.scaleout.rebalance``), printed old and new. No Spark."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from lakestate.cli.table import print_table

if TYPE_CHECKING:
    from lakestate.assign.history import Generation
    from lakestate.cli.main import Context
    from lakestate.scaleout.rebalance import RebalanceResult
    from lakestate.task_id import TaskId


def configure(p: argparse.ArgumentParser) -> None:
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


def run(args: argparse.Namespace, ctx: Context) -> int:
    """The app's next assignment generation, when its instances or their lags changed or a
    probing rebalance is due (scaleout/rebalance.py); prints the old and the new assignment
    per task and each instance's lag. No Spark."""
    from lakestate.read.describe import find_app
    from lakestate.scaleout.rebalance import rebalance as rebalance_app

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
    else:
        was = "" if old is None else f", was generation {old.number}"
        ctx.print(f"generation {new.number} ({new.reason}){was}")
    current = result.current
    if current is None:
        return 0
    print_table(ctx.print, _assignment_lines(result, current))
    if current.assignment.probing_rebalance_needed:
        ctx.print(
            "warmups are catching up: a probing rebalance follows (probing.rebalance.interval.ms)"
        )
    return 0


def _assignment_lines(result: RebalanceResult, current: Generation) -> list[tuple[str, ...]]:
    """Per task its active, warmup and standby instances (``before -> after`` where the new
    generation changed them) and each instance's lag on it, after the header."""
    names = list(result.lags)
    # Without a new generation nothing changed: the current one is shown as it is.
    shown_before = result.old if result.new is not None else current
    lines = [("task", "active", "warmup", "standby", *(f"lag {n}" for n in names))]
    for t in sorted(current.assignment.active):
        before, after = _roles(shown_before, t), _roles(current, t)
        lags = [result.lags[n].get(t) for n in names]
        lines.append(
            (
                str(t),
                *(_change(b, a) for b, a in zip(before, after, strict=True)),
                *("-" if lag is None else str(lag) for lag in lags),
            )
        )
    return lines


def _change(before: str, after: str) -> str:
    return after if before == after else f"{before} -> {after}"


def _roles(generation: Generation | None, task: TaskId) -> tuple[str, str, str]:
    """The task's active, warmup and standby instances in ``generation`` ("-": none)."""
    if generation is None or task not in generation.assignment.active:
        return "-", "-", "-"
    a = generation.assignment
    return (
        a.active[task],
        ",".join(sorted(a.warmup.get(task, ()))) or "-",
        ",".join(sorted(a.standby.get(task, ()))) or "-",
    )
