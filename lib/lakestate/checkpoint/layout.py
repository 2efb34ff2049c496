"""Where an app's records and state live: its topics, tasks and tables in the warehouse."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from lakestate.app import App
from lakestate.checkpoint import changelog, progress, recorded_layout
from lakestate.checkpoint.recorded_layout import RecordedLayout
from lakestate.errors import StreamsException
from lakestate.io import deltasink, deltasource, topics
from lakestate.io.kafka import KafkaCluster, KafkaTopic
from lakestate.processors.exception_handlers import DEAD_LETTER_QUEUE_TOPIC, ExceptionHandlers
from lakestate.task_id import TaskId
from lakestate.topology import copartition
from lakestate.topology.graph import SubTopology, internal_topic_name
from lakestate.warehouse import Warehouse


@dataclass(frozen=True)
class AppLayout:
    """The app's sub-topologies resolved against the warehouse.

    ``inputs``: sub-topology -> its input topics (real names) in input order.
    ``task_counts``: sub-topology -> number of tasks (the most partitions of its inputs).
    ``outputs``: every topic the app writes -> its partition count.
    ``global_topics``: the global tables' topics, which every task reads whole.
    ``cluster``: the Kafka cluster of the app's config (``bootstrap.servers``), holding
    ``kafka_topics``: its source, global and sink topics (repartition topics, changelogs
    and the dead-letter topic stay in the warehouse).
    ``kinds``: the kind of each of its warehouse topics (``topics.kind_of``, asked once
    here rather than at every use; a topic not in it is asked then).
    """

    app: App
    warehouse: Warehouse
    inputs: dict[int, list[str]]
    task_counts: dict[int, int]
    outputs: dict[str, int]
    partitions: dict[str, int]  # every topic the app reads or writes -> partition count
    global_topics: tuple[str, ...] = ()
    cluster: KafkaCluster | None = None
    kafka_topics: frozenset[str] = frozenset()
    kinds: Mapping[str, str] = field(default_factory=dict)

    @property
    def progress_path(self) -> str:
        return self.warehouse.progress_path(self.app.name)

    def changelog_path(self, store: str) -> str:
        return self.warehouse.changelog_path(self.app.name, store)

    def topic(self, name: str) -> topics.Topic:
        """One of the app's topics (its partition count as the layout read it)."""
        if name not in self.kafka_topics:
            kind = self.kinds.get(name) or topics.kind_of(self.warehouse, name)
            return topics.KINDS[kind].topic(self.warehouse, name, self.partitions.get(name))
        serdes = self.app.topology.serdes_of(name)
        return topics.topic(self.warehouse, name, self.partitions.get(name), self.cluster, serdes)

    def tasks(self) -> list[TaskId]:
        return [
            TaskId(sub, p) for sub in sorted(self.task_counts) for p in range(self.task_counts[sub])
        ]

    def stores_of(self, sub: int) -> tuple[str, ...]:
        return self.app.topology.subtopologies[sub].stores

    def tables_of(self, sub: int) -> list[str]:
        """Every table a task of ``sub`` may write: its output topics (the dead-letter
        topic included) and changelogs."""
        sinks = self.app.topology.subtopologies[sub]
        topics = list(sinks.sink_topics) + [
            internal_topic_name(self.app.name, s) for s in sinks.repartition_sinks
        ]
        dead_letters = ExceptionHandlers.from_config(
            self.app.config, self.app.name
        ).dead_letter_topic
        if dead_letters is not None and dead_letters not in topics:
            topics.append(dead_letters)
        return [self.warehouse.topic_path(t) for t in topics] + [
            self.changelog_path(s) for s in self.stores_of(sub)
        ]


def ensure_layout(app: App, warehouse: Warehouse) -> AppLayout:
    """Resolve topics and tasks; create the app's repartition and sink topics, changelog
    tables and progress table if they do not exist yet. Everything goes through delta-rs:
    no JVM."""
    check_format(warehouse, app.name)
    for source in app.topology.delta_sources().values():
        deltasource.declare(warehouse, source)  # fixed on the first run, checked after
    for sink in app.topology.delta_sinks().values():
        deltasink.declare(warehouse, sink)
    dead_letters = _dead_letter_topic_name(app)  # refused before anything is created
    topology = app.topology
    found = _TopicsFound(app, warehouse)
    # A join's sides must be co-partitioned (Kafka's CopartitionedTopicsEnforcer): checked
    # on the input topics before anything is created or committed.
    found.check_copartitioned_inputs()
    for sub in _writers_first(topology.subtopologies):
        found.add_inputs(sub)
        found.ensure_outputs(sub)
    for group in found.groups:  # a repartition topic made earlier with another count, too
        copartition.check(group, found.partitions, found.real)
    global_topics = tuple(g.topic for g in topology.global_tables)
    for topic in global_topics:
        what = f"the topic {topic!r} of a global table"
        found.partitions[topic] = _read_topic(app, found.resolve(topic), warehouse, what)
    if dead_letters is not None:
        _ensure_dead_letter_topic(warehouse, dead_letters, found.task_counts)
        count = topics.topic(warehouse, dead_letters).partitions()
        found.outputs[dead_letters] = found.partitions[dead_letters] = count
    for name, spec in topology.stores.items():
        if not spec.is_global:
            changelog.ensure_table(warehouse.changelog_path(app.name, name), name, spec.kind)
    progress.ensure_table(warehouse.progress_path(app.name), app.name)
    recorded = RecordedLayout(
        {s: tuple(ts) for s, ts in found.inputs.items()},
        {sub.id: tuple(sub.stores) for sub in topology.subtopologies},
        global_topics,
        {
            name: (spec.serdes.key.name, spec.serdes.value.name)
            for name, spec in topology.stores.items()
            if not spec.serdes.is_json
        },
    )
    recorded_layout.record(warehouse.layout_path(app.name), recorded)
    return AppLayout(
        app,
        warehouse,
        found.inputs,
        found.task_counts,
        found.outputs,
        found.partitions,
        global_topics,
        found.cluster,
        found.kafka_topics,
        {t: topics.kind_of(warehouse, t) for t in found.partitions if t not in found.kafka_topics},
    )


class _TopicsFound:
    """The app's topics as ``ensure_layout`` finds (or creates) them, sub-topology by
    sub-topology: each one's inputs and task count, the topics written and every topic's
    partition count."""

    def __init__(self, app: App, warehouse: Warehouse) -> None:
        self.app = app
        self.warehouse = warehouse
        topology = app.topology
        self.cluster = KafkaCluster.from_config(app.config)
        self.kafka_topics = kafka_topic_names(app)
        self.internal = {s for sub in topology.subtopologies for s in sub.repartition_sources}
        self.fixed = {self.real(s): n for s, n in topology.repartition_partitions().items()}
        self.groups = topology.copartition_groups
        self.inputs: dict[int, list[str]] = {}
        self.task_counts: dict[int, int] = {}
        self.outputs: dict[str, int] = {}
        self.partitions: dict[str, int] = {}

    def resolve(self, name: str) -> topics.Topic:
        cluster = self.cluster if name in self.kafka_topics else None
        return topics.topic(self.warehouse, name, cluster=cluster)

    def real(self, topic: str) -> str:
        """A topic's name in the warehouse (an internal one's prefixed with the app's)."""
        return internal_topic_name(self.app.name, topic) if topic in self.internal else topic

    def check_copartitioned_inputs(self) -> None:
        known = {
            self.real(t): self.resolve(self.real(t)).partitions()
            for g in self.groups
            for t in g.topics
            if self.resolve(self.real(t)).exists()
        }
        for group in self.groups:
            copartition.check(group, known, self.real)
        # The external topics' counts size the repartition topics of their groups, which
        # a writer may create before the sub-topology reading them is resolved (a
        # foreign-key join's subscriptions go to the other table's partitions).
        for group in self.groups:
            for t in group.topics:
                if t not in group.internal and self.real(t) in known:
                    self.partitions[self.real(t)] = known[self.real(t)]

    def add_inputs(self, sub: SubTopology) -> None:
        """The sub-topology's inputs and its task count (the most partitions of them)."""
        names = list(sub.source_topics) + [
            internal_topic_name(self.app.name, s) for s in sub.repartition_sources
        ]
        counts = []
        for topic in names:
            what = f"input topic {topic!r} of sub-topology {sub.id}"
            _create_cycle_input(self.warehouse, topic, self.groups, self.partitions, self.real)
            found = _read_topic(self.app, self.resolve(topic), self.warehouse, what)
            self.partitions[topic] = found
            counts.append(found)
        self.inputs[sub.id] = names
        self.task_counts[sub.id] = max(counts)

    def ensure_outputs(self, sub: SubTopology) -> None:
        """The sub-topology's sinks and repartition topics, created if missing with as many
        partitions as the tasks writing them."""
        for topic in list(sub.sink_topics) + [
            internal_topic_name(self.app.name, s) for s in sub.repartition_sinks
        ]:
            sink = self.resolve(topic)
            if not sink.exists():
                # A repartition topic feeding a join gets the other side's partition count.
                count = self.task_counts[sub.id]
                for group in self.groups:
                    if any(self.real(t) == topic for t in group.topics):
                        external = copartition.external_count(group, self.partitions, self.real)
                        count = external or count
                sink.create(self.fixed.get(topic, count))
            self.outputs[topic] = self.partitions[topic] = sink.partitions()
            if self.fixed.get(topic, self.partitions[topic]) != self.partitions[topic]:
                raise StreamsException(
                    f"app {self.app.name}: repartition topic {topic!r} has "
                    f"{self.partitions[topic]} partitions, but Repartitioned sets "
                    f"{self.fixed[topic]}: a topic keeps its partitions; set its count back, "
                    "or name a new topic with Repartitioned.as_"
                )


def kafka_topic_names(app: App) -> frozenset[str]:
    """The topics of an app with a Kafka cluster that are the cluster's: its sources, its
    global tables' topics and its sinks (as in Kafka Streams, where the app's internal
    topics are its own), its Delta sources and sinks aside; none without a cluster."""
    if KafkaCluster.from_config(app.config) is None:
        return frozenset()
    topology = app.topology
    names = {t for sub in topology.subtopologies for t in sub.source_topics}
    names |= {t for sub in topology.subtopologies for t in sub.sink_topics}
    names |= {g.topic for g in topology.global_tables}
    return frozenset(names - set(topology.delta_sources()) - set(topology.delta_sinks()))


def _dead_letter_topic_name(app: App) -> str | None:
    """The app's dead-letter topic (processors/exception_handlers.py); None when no handler
    continues. An unknown handler, or a dead-letter topic the app reads, is refused."""
    try:
        topic = ExceptionHandlers.from_config(app.config, app.name).dead_letter_topic
    except StreamsException as exc:
        raise StreamsException(f"app {app.name}: {exc}") from None
    if topic is None:
        return None
    topology = app.topology
    read = {t for sub in topology.subtopologies for t in sub.source_topics}
    read |= {
        internal_topic_name(app.name, t)
        for sub in topology.subtopologies
        for t in sub.repartition_sources
    }
    read |= {g.topic for g in topology.global_tables}
    if topic in read:
        raise StreamsException(
            f"app {app.name}: the dead-letter topic {topic!r} "
            f"({DEAD_LETTER_QUEUE_TOPIC}) is one of the app's inputs; name another topic"
        )
    return topic


def _ensure_dead_letter_topic(
    warehouse: Warehouse, topic: str, task_counts: dict[int, int]
) -> None:
    """Create the dead-letter topic if missing, with as many partitions as the app's widest
    sub-topology has tasks. It is one more sink of every task: committed in step 3 with the
    task's txn like the others."""
    dead_letters = topics.topic(warehouse, topic)
    if dead_letters.exists():
        dead_letters.check_columns()
    else:
        dead_letters.create(max(task_counts.values(), default=1))


def _create_cycle_input(
    warehouse: Warehouse,
    topic: str,
    groups: list[copartition.CopartitionGroup],
    partitions: dict[str, int],
    real: Callable[[str], str],
) -> None:
    """Create an internal input topic not written yet because its writer comes later (a
    cycle of sub-topologies: a foreign-key join's subscriptions and responses), with the
    partition count of the external topics it is co-partitioned with, when they tell."""
    created = topics.topic(warehouse, topic)
    if created.exists():
        return
    for group in groups:
        if any(real(t) == topic for t in group.topics if t in group.internal):
            count = copartition.external_count(group, partitions, real)
            if count is not None:
                created.create(count)
                return


def _writers_first(subtopologies: list[SubTopology]) -> list[SubTopology]:
    """Sub-topologies ordered so that each comes after those writing its repartition
    topics (a join's sub-topology may have a lower id than the one repartitioning its
    stream), so each input exists when its readers are resolved."""
    writers = {t: sub.id for sub in subtopologies for t in sub.repartition_sinks}
    by_id = {sub.id: sub for sub in subtopologies}
    ordered: list[SubTopology] = []
    done: set[int] = set()

    def visit(sub: SubTopology, path: set[int]) -> None:
        if sub.id in done or sub.id in path:
            return
        for topic in sub.repartition_sources:
            if topic in writers:
                visit(by_id[writers[topic]], path | {sub.id})
        done.add(sub.id)
        ordered.append(sub)

    for sub in subtopologies:
        visit(sub, set())
    return ordered


def check_format(warehouse: Warehouse, app: str) -> None:
    """Refuse an app folder in lakestate's first state format: reading it as this format
    would silently miss its state."""
    old = warehouse.old_format_path(app)
    if warehouse.is_local and os.path.isdir(os.path.join(old, "_delta_log")):
        raise StreamsException(
            f"app {app}: {warehouse.app_path(app)} holds state in lakestate's first format "
            f"(a batch log at {old} and MERGE-written state tables), which this version does "
            f"not read. Convert it once with `lakestate convert {app}` (its state and "
            "committed offsets become format 2; the old tables are kept aside), or rebuild "
            f"state from the topics: move {warehouse.app_path(app)} away and rerun the app "
            "(it reprocesses every input from offset 0, so its sinks get every record again)."
        )


def end_offsets(layout: AppLayout, topic: str) -> dict[int, int]:
    """End offsets of one of the app's topics (no Spark job)."""
    return layout.topic(topic).end_offsets()


def _read_topic(app: App, found: topics.Topic, warehouse: Warehouse, what: str) -> int:
    """The partition count of a topic the app reads (``what`` names it in errors), which
    must exist with a topic's columns."""
    if not found.exists():
        if isinstance(found, KafkaTopic):
            raise StreamsException(
                f"app {app.name}: {what} does not exist in the Kafka cluster "
                f"{found.cluster.bootstrap_servers} (the app's bootstrap.servers); create it "
                f"there (kafka-topics.sh --create --topic {found.name}), or point "
                "bootstrap.servers at the cluster that has it"
            )
        raise StreamsException(
            f"app {app.name}: {what} does not exist in {warehouse.root}; "
            f"create it with `lakestate produce {found.name} FILE`"
        )
    found.check_columns()
    return found.partitions()
