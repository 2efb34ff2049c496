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

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lakestate.app import App, load_app
from lakestate.checkpoint.layout import kafka_topic_names
from lakestate.io import delta_commits, topics
from lakestate.io.kafka import KIND as KAFKA
from lakestate.io.kafka import KafkaCluster, connect
from lakestate.read.views import CHANGELOG_SUFFIX, view_name
from lakestate.runtime import plan
from lakestate.runtime.transport import (
    AUTO,
    DEFAULT_MAX_RECORDS,
    MAX_RECORDS_CONFIG,
    TRANSPORT_CONFIG,
)
from lakestate.state import constants
from lakestate.topology.graph import SubTopology, internal_topic_name
from lakestate.warehouse import Warehouse

__all__ = ["TopicSummary", "app_cluster", "describe_app", "describe_topic", "find_app"]

# The config keys that decide how an app runs, with their defaults (None: unset).
_CONFIG_DEFAULTS: dict[str, Any] = {
    constants.PROCESSING_GUARANTEE: constants.EXACTLY_ONCE_V2,
    constants.UNCOMMITTED_MAX_RECORDS: constants.DEFAULT_UNCOMMITTED_MAX_RECORDS,
    constants.UNCOMMITTED_MAX_BYTES: constants.DEFAULT_UNCOMMITTED_MAX_BYTES,
    TRANSPORT_CONFIG: AUTO,
    MAX_RECORDS_CONFIG: DEFAULT_MAX_RECORDS,
    plan.BATCH_MAX_RECORDS_CONFIG: plan.default_batch_max_records(),
    "processing.exception.handler": "log_and_fail",
    "deserialization.exception.handler": "log_and_fail",
    "errors.dead.letter.queue.topic.name": None,
}


def app_cluster(app: App) -> tuple[KafkaCluster | None, frozenset[str]]:
    """The Kafka cluster of ``app``'s config (``bootstrap.servers``; checked to answer
    within seconds, else ``StreamsException`` naming the setting) and the app's topics
    that are that cluster's; None and none for an app without one."""
    if KafkaCluster.from_config(app.config) is None:
        return None, frozenset()
    return connect(app.config, f"app {app.name}'s bootstrap.servers"), kafka_topic_names(app)


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


@dataclass(frozen=True)
class TopicSummary:
    """A topic as ``describe`` shows it: its kind and location, partition count (None: not
    created yet), end offsets, record count (None for a Kafka topic, whose offsets are not
    dense: commit markers take offsets), SQL view (None for a Kafka topic: ``lakestate
    sql`` reads the warehouse), and for an app's topic its role."""

    topic: str
    kind: str
    location: str
    partitions: int | None
    end_offsets: dict[int, int]
    records: int | None
    sql_view: str | None
    role: str | None = None

    @property
    def exists(self) -> bool:
        return self.partitions is not None

    def to_json(self) -> dict[str, Any]:
        app: dict[str, Any] = (
            {} if self.role is None else {"role": self.role, "exists": self.exists}
        )
        return app | {
            "topic": self.topic,
            "kind": self.kind,
            "path": self.location,
            "partitions": self.partitions,
            "end_offsets": {str(p): e for p, e in sorted(self.end_offsets.items())},
            "records": self.records,
            "sql_view": self.sql_view,
        }


def describe_topic(found: topics.Topic, role: str | None = None) -> TopicSummary:
    """A topic's kind, location, partition count, end offsets and record count (the sum of
    the end offsets where offsets are dense from 0). ``ValueError`` if it does not exist."""
    if not found.exists():
        raise ValueError(f"topic {found.name!r} does not exist")
    about = found.describe()
    kafka = about.kind == KAFKA
    return TopicSummary(
        found.name,
        about.kind,
        about.location,
        about.partitions,
        dict(sorted(about.end_offsets.items())),
        None if kafka else about.records,
        None if kafka else view_name(found.name),
        role,
    )


def _topic(warehouse: Warehouse, found: topics.Topic, role: str) -> TopicSummary:
    if found.exists():
        return describe_topic(found, role)
    kafka = found.kind == KAFKA
    location = found.location if kafka else warehouse.topic_path(found.name)
    view = None if kafka else view_name(found.name)
    return TopicSummary(found.name, found.kind, location, None, {}, 0, view, role)


def describe_app(warehouse: Warehouse, app: App) -> dict[str, Any]:
    """The description of ``app`` (see the module's docstring)."""
    topology, name = app.topology, app.name
    cluster, kafka_topics = app_cluster(app)
    found = {
        t: _topic(
            warehouse,
            topics.topic(warehouse, t, cluster=cluster if t in kafka_topics else None),
            role,
        ).to_json()
        for t, role in _topic_roles(app).items()
    }
    inputs = {
        sub.id: list(sub.source_topics)
        + [internal_topic_name(name, s) for s in sub.repartition_sources]
        for sub in topology.subtopologies
    }
    task_counts = _task_counts(app, found, inputs)
    return {
        "app": name,
        "warehouse": warehouse.root,
        "progress": warehouse.progress_path(name),
        "config": _config(app),
        "topology": topology.describe(),
        "subtopologies": [
            _subtopology(app, sub, inputs[sub.id], task_counts.get(sub.id))
            for sub in topology.subtopologies
        ],
        "global_tables": [{"topic": g.topic, "store": g.store} for g in topology.global_tables],
        "tasks": _tasks(app, inputs, task_counts),
        "topics": list(found.values()),
        "stores": _stores(warehouse, app),
    }


def _topic_roles(app: App) -> dict[str, str]:
    """Every topic the app reads or writes, with its role: source, repartition, sink,
    global or dead letters."""
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
    return roles


def _task_counts(
    app: App, topics: dict[str, dict[str, Any]], inputs: dict[int, list[str]]
) -> dict[int, int]:
    """Per sub-topology its task count as a run resolves it (absent: unknown until its
    input topics exist): the most partitions of its inputs, writers first; a repartition
    topic not made yet gets its writer's task count."""
    topology = app.topology
    writers = {
        internal_topic_name(app.name, s): sub.id
        for sub in topology.subtopologies
        for s in sub.repartition_sinks
    }
    fixed = {
        internal_topic_name(app.name, s): n for s, n in topology.repartition_partitions().items()
    }

    def partitions(topic: str, counts: dict[int, int]) -> int | None:
        known = topics[topic]["partitions"]
        if known is None:
            known = fixed.get(topic)
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
    return task_counts


def _tasks(
    app: App, inputs: dict[int, list[str]], task_counts: dict[int, int]
) -> list[dict[str, Any]]:
    """Every task: the partition of each input it reads, and the global topics it reads
    whole."""
    global_topics = [g.topic for g in app.topology.global_tables]
    return [
        {
            "task": f"{sub.id}_{p}",
            "subtopology": sub.id,
            "partition": p,
            "reads": [f"{t}[{p}]" for t in inputs[sub.id]],
            "global_reads": global_topics,
        }
        for sub in app.topology.subtopologies
        for p in range(task_counts.get(sub.id, 0))
    ]


def _subtopology(app: App, sub: SubTopology, reads: list[str], tasks: int | None) -> dict[str, Any]:
    """A sub-topology: its nodes, the topics it reads and writes, its stores, its tasks."""
    nodes = app.topology.nodes
    return {
        "id": sub.id,
        "nodes": [
            {
                "name": n,
                "kind": nodes[n].kind,
                "description": nodes[n].describe(),
                "children": list(nodes[n].children),
            }
            for n in sub.nodes
        ],
        "reads": reads,
        "writes": list(sub.sink_topics)
        + [internal_topic_name(app.name, s) for s in sub.repartition_sinks],
        "stores": list(sub.stores),
        "tasks": tasks,
    }


def _stores(warehouse: Warehouse, app: App) -> list[dict[str, Any]]:
    """Every store: its kind, sub-topology, options and serdes (``Serde.name``s); a local
    store also its SQL views and changelog table."""
    topology, name = app.topology, app.name
    stores = []
    for store, spec in topology.stores.items():
        sub = next((s.id for s in topology.subtopologies if store in s.stores), None)
        entry: dict[str, Any] = {
            "store": store,
            "kind": spec.kind,
            "subtopology": sub,
            "global": spec.is_global,
            "options": dict(spec.options),
            "key_serde": spec.serdes.key.name,
            "value_serde": spec.serdes.value.name,
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
    return stores


def _config(app: App) -> dict[str, dict[str, Any]]:
    """The config keys that decide how the app runs (with their defaults when unset), then
    every other key the app sets."""
    config = {
        key: {"value": app.config.get(key, default), "default": key not in app.config}
        for key, default in _CONFIG_DEFAULTS.items()
    }
    for key, value in sorted(app.config.items()):
        config.setdefault(key, {"value": value, "default": False})
    return config
