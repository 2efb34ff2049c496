"""``lakestate status``: every task of an app, its offsets, lag, last batch, stream time
and metrics totals per operator (``lakestate.read.status``). No Spark."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

from lakestate.cli.table import print_table

if TYPE_CHECKING:
    from lakestate.cli.main import Context
    from lakestate.read.status import TaskStatus


def configure(p: argparse.ArgumentParser) -> None:
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


def run(args: argparse.Namespace, ctx: Context) -> int:
    """Every task of an app: offsets, lag, stream time, last batch, metrics totals. No
    Spark: the progress rows and end offsets come through delta-rs and the Delta logs."""
    from lakestate.checkpoint.task_dir import state_dir_of
    from lakestate.read.describe import app_cluster, find_app
    from lakestate.read.status import app_status, check_app

    name, topology = args.app, None
    # The app's module, given or found in ./jobs by its name, says which topics are in a
    # Kafka cluster (its bootstrap.servers); by name, the tasks are those it last ran.
    if name.endswith(".py"):
        from lakestate.app import load_app

        app = load_app(name)
        name, topology = app.name, app.topology
    else:
        app = None if "/" in name else find_app(name)
    check_app(ctx.warehouse, name, topology)
    cluster, kafka_topics = app_cluster(app) if app is not None else (None, frozenset())
    state_dir = state_dir_of(args.state_dir)
    found = app_status(ctx.warehouse, name, state_dir, topology, cluster, kafka_topics)
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
    _print_summary(ctx, name, found.tasks)
    print_table(ctx.print, _task_lines(found.tasks))
    rows = [
        _metric_row(t, level, scope, named)
        for t in found.tasks
        for level in ("nodes", "stores", "task")
        for scope, named in _scopes(t, level)
    ]
    if rows:
        ctx.print("metrics (totals since each task's first batch):")
        print_table(ctx.print, [("task", "operator", *_STATUS_COLUMNS, "other"), *rows])
    return 0


def _print_summary(ctx: Context, name: str, tasks: list[TaskStatus]) -> None:
    """The app's line: its tasks, total lag, dropped records and newest commit."""
    from lakestate.read.status import format_time

    newest = max(tasks, key=lambda t: t.committed_at_ms or -1)
    dropped = sum(t.metrics.get("task", {}).get("dropped-records", 0) for t in tasks)
    subs = len({t.task.subtopology for t in tasks})
    ctx.print(
        f"app {name}: {len(tasks)} tasks in {subs} sub-topologies, lag "
        f"{sum(t.lag for t in tasks)}, dropped-records {dropped:g}; "
        + (
            f"last batch committed at {format_time(newest.committed_at_ms)} UTC (task "
            f"{newest.task}, batch {newest.batch})"
            if newest.committed_at_ms is not None
            else "no committed batch yet"
        )
    )


def _task_lines(tasks: list[TaskStatus]) -> list[tuple[str, ...]]:
    """The tasks table: a line per input partition of each task (the task's cells on its
    first), after the header."""
    from lakestate.read.status import format_time

    header = ("task", "batch", "committed at", "stream time", "input", "committed", "end")
    lines = [(*header, "lag", "local")]
    for t in tasks:
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
    return lines


def _scopes(task: TaskStatus, level: str) -> list[tuple[str, dict]]:
    metrics = task.metrics
    if level == "task":  # Kafka's task level: shown when no node holds the figures
        named = metrics.get("task") or {}
        return [("(task)", named)] if not metrics.get("nodes") and any(named.values()) else []
    scopes = {scope: dict(named) for scope, named in (metrics.get(level) or {}).items()}
    if level == "stores":
        for store, keys in task.local_store_keys.items():
            scopes.setdefault(store, {})[_LOCAL_KEYS] = keys
    return sorted(scopes.items())


def _metric_row(task: TaskStatus, level: str, scope: str, named: dict) -> tuple[str, ...]:
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
