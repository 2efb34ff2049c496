"""``lakestate describe``: an app's sub-topologies, tasks, topics, stores and config, or a
topic's partitions and end offsets (``lakestate.read.describe``). No Spark."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

from lakestate.cli import kafka_arg
from lakestate.cli.table import print_table
from lakestate.serdes import JSON

JSON_NAME = JSON.name

if TYPE_CHECKING:
    from lakestate.cli.main import Context
    from lakestate.read.describe import TopicSummary


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "name",
        help="an app's module (jobs/demo.py), an app's name (defined by a module in ./jobs), "
        "or a topic",
    )
    kafka_arg.configure(p)


def run(args: argparse.Namespace, ctx: Context) -> int:
    """Describe an app (its topology, tasks, topics, stores and config) or a topic; with
    ``--json`` as one JSON document. No Spark."""
    from lakestate.read import describe as about

    app = None if args.bootstrap_servers else about.find_app(args.name)
    if app is None:
        topic = kafka_arg.topic_of(args, ctx, args.name)
        if not topic.exists():
            raise ValueError(
                f"{args.name!r} is neither an app module, an app defined in ./jobs, nor a "
                f"topic of {kafka_arg.where(args, ctx)}"
                if args.bootstrap_servers is None
                else f"topic {args.name!r} does not exist in {kafka_arg.where(args, ctx)}"
            )
        summary = about.describe_topic(topic)
        if ctx.json_output:
            ctx.print(json.dumps(summary.to_json(), ensure_ascii=False))
        else:
            _print_topic(ctx, summary)
        return 0
    found = about.describe_app(ctx.warehouse, app)
    if ctx.json_output:
        ctx.print(json.dumps(found, ensure_ascii=False))
        return 0
    ctx.print(f"app {found['app']} (warehouse {found['warehouse']})")
    _print_config(ctx, found["config"])
    ctx.print(found["topology"])
    _print_tasks(ctx, found)
    ctx.print("topics:")
    print_table(ctx.print, _topic_lines(found["topics"]), indent="  ")
    ctx.print("stores:")
    print_table(ctx.print, _store_lines(found["stores"]), indent="  ")
    ctx.print(f"progress: {found['progress']}")
    return 0


def _print_config(ctx: Context, config: dict) -> None:
    ctx.print("config:")
    width = max(len(k) for k in config)
    for key, c in config.items():
        shown = "-" if c["value"] is None else c["value"]
        ctx.print(f"  {key.ljust(width)}  {shown}" + (" (default)" if c["default"] else ""))


def _print_tasks(ctx: Context, found: dict) -> None:
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


def _topic_lines(topics: list[dict]) -> list[tuple[str, ...]]:
    lines = [("topic", "role", "partitions", "end offsets", "records", "SQL view")]
    for t in topics:
        ends = " ".join(f"{p}:{e}" for p, e in t["end_offsets"].items())
        lines.append(
            (
                t["topic"] + (" (Kafka)" if t["kind"] == "kafka" else ""),
                t["role"],
                "-" if t["partitions"] is None else str(t["partitions"]),
                ends or ("(not created yet)" if not t["exists"] else "-"),
                "-" if t["records"] is None else str(t["records"]),
                t["sql_view"] or "-",
            )
        )
    return lines


def _store_lines(stores: list[dict]) -> list[tuple[str, ...]]:
    lines = [("store", "kind", "sub-topology", "SQL views", "changelog")]
    for s in stores:
        if s["global"]:
            lines.append((s["store"], s["kind"], "global", "-", "- (its topic is its record)"))
            continue
        changelog = s["changelog"] + ("" if s["changelog_exists"] else " (not created yet)")
        views = f"{s['sql_view']}, {s['changelog_view']}"
        kind = s["kind"]
        if (s["key_serde"], s["value_serde"]) != (JSON_NAME, JSON_NAME):  # typed views
            kind += f" (key {s['key_serde']}, value {s['value_serde']})"
        lines.append((s["store"], kind, str(s["subtopology"]), views, changelog))
    return lines


def _print_topic(ctx: Context, t: TopicSummary) -> None:
    ends = " ".join(f"{p}:{e}" for p, e in t.end_offsets.items())
    ctx.print(f"topic {t.topic} ({t.location})")
    ctx.print(f"  partitions: {t.partitions}")
    ctx.print(f"  end offsets: {ends}")
    if t.records is not None:
        ctx.print(f"  records: {t.records}")
    if t.sql_view is not None:
        ctx.print(f"  SQL view: {t.sql_view}")
