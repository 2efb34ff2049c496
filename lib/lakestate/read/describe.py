"""What a person needs to know about an app, or a topic, read from its module and the
warehouse without Spark (``lakestate describe``): its sub-topologies and processors, its
tasks and what each reads, its topics with partition counts and end offsets, its stores
with their kind, SQL views and changelogs, and the config that decides how it runs.

Nothing is created: a topic the app has not made yet (a sink, a repartition topic before
the app's first run) is listed as missing, and its tasks are counted as the first run
would (a repartition topic gets as many partitions as the sub-topology writing it has
tasks). Every description is a JSON-able dict (``--json`` prints it as it is).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lakestate.app import App, load_app
from lakestate.io import delta_commits, logtable
from lakestate.read.views import CHANGELOG_SUFFIX, view_name
from lakestate.runtime.transport import (
    AUTO,
    DEFAULT_MAX_RECORDS,
    MAX_RECORDS_CONFIG,
    TRANSPORT_CONFIG,
)
from lakestate.state import constants
from lakestate.topology.graph import internal_topic_name
from lakestate.warehouse import Warehouse

__all__ = ["describe_app", "describe_topic", "find_app"]

# The config keys that decide how an app runs, with their defaults (None: unset).
_CONFIG_DEFAULTS: dict[str, Any] = {
    constants.PROCESSING_GUARANTEE: constants.EXACTLY_ONCE_V2,
    constants.UNCOMMITTED_MAX_RECORDS: constants.DEFAULT_UNCOMMITTED_MAX_RECORDS,
    constants.UNCOMMITTED_MAX_BYTES: constants.DEFAULT_UNCOMMITTED_MAX_BYTES,
    TRANSPORT_CONFIG: AUTO,
    MAX_RECORDS_CONFIG: DEFAULT_MAX_RECORDS,
    "processing.exception.handler": "log_and_fail",
    "deserialization.exception.handler": "log_and_fail",
    "errors.dead.letter.queue.topic.name": None,
}


def find_app(name: str, jobs: str | Path = "jobs") -> App | None:
    """The app ``name`` names: a module path (``jobs/demo.py``), or an app name defined by
    a module in ``jobs`` (``jobs/<name>.py`` first); None when no module defines it."""
    if name.endswith(".py") or "/" in name:
        return load_app(name)
    folder = Path(jobs)
    if not folder.is_dir():
        return None
    candidates = [folder / f"{name}.py"] + sorted(folder.glob("*.py"))
    for path in dict.fromkeys(c for c in candidates if c.is_file()):
        try:
            app = load_app(path)
        except Exception:  # not an app module; the one asked for is elsewhere
            continue
        if app.name == name:
            return app
    return None


def describe_topic(warehouse: Warehouse, topic: str) -> dict[str, Any]:
    """A topic's table, partition count, end offsets and record count (the sum of the end
    offsets: offsets are dense from 0). ValueError if it does not exist."""
    if not logtable.topic_exists(None, warehouse, topic):
        raise ValueError(f"topic {topic!r} does not exist in {warehouse.root}")
    n = logtable.partitions(None, warehouse, topic)
    ends = logtable.end_offsets_of(warehouse, topic, n)
    return {
        "topic": topic,
        "path": warehouse.topic_path(topic),
        "partitions": n,
        "end_offsets": {str(p): e for p, e in sorted(ends.items())},
        "records": sum(ends.values()),
        "sql_view": view_name(topic),
    }


def _topic(warehouse: Warehouse, topic: str, role: str) -> dict[str, Any]:
    if logtable.topic_exists(None, warehouse, topic):
        return {"role": role, "exists": True, **describe_topic(warehouse, topic)}
    return {
        "topic": topic,
        "role": role,
        "exists": False,
        "path": warehouse.topic_path(topic),
        "partitions": None,
        "end_offsets": {},
        "records": 0,
        "sql_view": view_name(topic),
    }


def describe_app(warehouse: Warehouse, app: App) -> dict[str, Any]:
    """The description of ``app`` (see the module's docstring)."""
    topology, name = app.topology, app.name
    roles: dict[str, str] = {}
    for sub in topology.subtopologies:
        for t in sub.source_topics:
            roles.setdefault(t, "source")
        for s in sub.repartition_sinks + sub.repartition_sources:
            roles[internal_topic_name(name, s)] = "repartition"
        for t in sub.sink_topics:
            roles.setdefault(t, "sink")
    for g in topology.global_tables:
        roles[g.topic] = "global"
    dead_letters = app.config.get("errors.dead.letter.queue.topic.name")
    if dead_letters:
        roles.setdefault(dead_letters, "dead letters")
    topics = {t: _topic(warehouse, t, role) for t, role in roles.items()}

    # Tasks as a run resolves them: per sub-topology, writers first, the most partitions of
    # its inputs; a repartition topic not made yet gets its writer's task count.
    writers = {
        internal_topic_name(name, s): sub.id
        for sub in topology.subtopologies
        for s in sub.repartition_sinks
    }
    inputs = {
        sub.id: list(sub.source_topics)
        + [internal_topic_name(name, s) for s in sub.repartition_sources]
        for sub in topology.subtopologies
    }

    def partitions(topic: str, counts: dict[int, int]) -> int | None:
        known = topics[topic]["partitions"]
        return known if known is not None else counts.get(writers.get(topic, -1))

    task_counts: dict[int, int] = {}
    changed = True
    while changed:  # a sub-topology's count may wait for its repartition topics' writers
        changed = False
        for sub in topology.subtopologies:
            found = [partitions(t, task_counts) for t in inputs[sub.id]]
            if sub.id not in task_counts and found and None not in found:
                task_counts[sub.id] = max(found)
                changed = True
    global_topics = [g.topic for g in topology.global_tables]
    tasks = []
    for sub in topology.subtopologies:
        for p in range(task_counts.get(sub.id, 0)):
            tasks.append(
                {
                    "task": f"{sub.id}_{p}",
                    "subtopology": sub.id,
                    "partition": p,
                    "reads": [f"{t}[{p}]" for t in inputs[sub.id]],
                    "global_reads": global_topics,
                }
            )

    stores = []
    for store, spec in topology.stores.items():
        sub = next((s.id for s in topology.subtopologies if store in s.stores), None)
        entry: dict[str, Any] = {
            "store": store,
            "kind": spec.kind,
            "subtopology": sub,
            "global": spec.is_global,
            "options": dict(spec.options),
        }
        if not spec.is_global:  # a global store's record is its topic; no changelog
            path = warehouse.changelog_path(name, store)
            entry.update(
                sql_view=view_name(f"{name}__{store}"),
                changelog_view=view_name(f"{name}__{store}") + CHANGELOG_SUFFIX,
                changelog=path,
                changelog_exists=delta_commits.table_exists(path),
            )
        stores.append(entry)

    config = {
        key: {"value": app.config.get(key, default), "default": key not in app.config}
        for key, default in _CONFIG_DEFAULTS.items()
    }
    for key, value in sorted(app.config.items()):
        config.setdefault(key, {"value": value, "default": False})
    return {
        "app": name,
        "warehouse": warehouse.root,
        "progress": warehouse.progress_path(name),
        "config": config,
        "topology": topology.describe(),
        "subtopologies": [
            {
                "id": sub.id,
                "nodes": [
                    {
                        "name": n,
                        "kind": topology.nodes[n].kind,
                        "description": topology.nodes[n].describe(),
                        "children": list(topology.nodes[n].children),
                    }
                    for n in sub.nodes
                ],
                "reads": inputs[sub.id],
                "writes": list(sub.sink_topics)
                + [internal_topic_name(name, s) for s in sub.repartition_sinks],
                "stores": list(sub.stores),
                "tasks": task_counts.get(sub.id),
            }
            for sub in topology.subtopologies
        ],
        "global_tables": [{"topic": g.topic, "store": g.store} for g in topology.global_tables],
        "tasks": tasks,
        "topics": list(topics.values()),
        "stores": stores,
    }
