"""The built graph: nodes, stores, sub-topologies.

A Topology is immutable once built. Sub-topologies are the connected parts of the graph
once repartition topics are cut: each runs as its own tasks (one per partition), and a
repartition topic carries records from one sub-topology to the next.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from lakestate.delta_sink import DeltaSink
from lakestate.delta_source import DeltaSource
from lakestate.errors import StreamsException, TopologyException
from lakestate.processors.api import Processor
from lakestate.serdes import DEFAULT_SERDES, TopicSerdes
from lakestate.topology.copartition import CopartitionGroup

SOURCE = "source"
PROCESSOR = "processor"
SINK = "sink"


@dataclass(frozen=True)
class StoreSpec:
    """A state store the topology needs: its name, its kind and the kind's options.

    ``kind`` picks the typed view over the task's transactional store and the layout of its
    Delta state table (e.g. "timestamped_key_value", "versioned", "window", "dedup").
    """

    name: str
    kind: str
    options: dict[str, Any] = field(default_factory=dict)
    is_global: bool = False
    # The store's key and value serdes (Materialized / Grouped, Kafka's defaults): what its
    # SQL view's key and value columns are typed as, and what a put must fit.
    serdes: TopicSerdes = DEFAULT_SERDES
    # False: Materialized.with_caching_disabled(): the record cache (state/record_cache.py)
    # does not hold back what the store's processor forwards.
    caching: bool = True


@dataclass
class Node:
    """One node of the graph. Sources read topics, sinks write one topic."""

    name: str
    kind: str
    parents: list[str] = field(default_factory=list)
    children: list[str] = field(default_factory=list)
    factory: Callable[[], Processor] | None = None
    stores: list[str] = field(default_factory=list)
    topics: list[str] = field(default_factory=list)
    # Repartition topics are internal: their real name is prefixed by the application id.
    internal_topic: bool = False
    # A repartition topic that carries KTable changes (new and old value) instead of values.
    carries_changes: bool = False
    # A repartition sink's topic partition count set with Repartitioned (None: as many as
    # the tasks writing it).
    num_partitions: int | None = None
    # A source's or sink's key and value serdes (Consumed / Produced / Grouped.with_).
    serdes: TopicSerdes = DEFAULT_SERDES
    # A source reading an existing Delta table (``builder.stream(DeltaSource(...))``).
    delta_source: DeltaSource | None = None
    # A sink writing a typed Delta table (``stream.to(DeltaSink(...))``).
    delta_sink: DeltaSink | None = None

    def describe(self) -> str:
        if self.kind == SOURCE:
            return f"Source: {self.name} (topics: {self.topics})"
        if self.kind == SINK:
            return f"Sink: {self.name} (topic: {self.topics[0]})"
        stores = f" (stores: {self.stores})" if self.stores else ""
        return f"Processor: {self.name}{stores}"


@dataclass(frozen=True)
class SubTopology:
    """A connected part of the graph, run as one task per partition."""

    id: int
    nodes: tuple[str, ...]  # in topological order: parents before children
    source_topics: tuple[str, ...]  # external topics it reads
    repartition_sources: tuple[str, ...]  # internal topic suffixes it reads
    sink_topics: tuple[str, ...]
    repartition_sinks: tuple[str, ...]
    stores: tuple[str, ...]


def internal_topic_name(application_id: str, suffix: str) -> str:
    """The real name of a repartition topic: ``<application id>-<suffix>``."""
    return f"{application_id}-{suffix}"


@dataclass(frozen=True)
class GlobalTableSpec:
    """A global table: every task sees the whole topic through a global store."""

    topic: str
    store: str
    source_node: str


class Topology:
    """The built, validated processing graph (see ``StreamsBuilder.build``)."""

    def __init__(
        self,
        nodes: dict[str, Node],
        stores: dict[str, StoreSpec],
        subtopologies: list[SubTopology],
        global_tables: list[GlobalTableSpec],
        copartition_groups: list[CopartitionGroup] | None = None,
    ) -> None:
        self.nodes = nodes
        self.stores = stores
        self.subtopologies = subtopologies
        self.global_tables = global_tables
        # One per join: topics that must have the same partition count (checked at run time).
        self.copartition_groups = list(copartition_groups or [])

    def subtopology_for_topic(self, topic: str, application_id: str) -> SubTopology | None:
        """The sub-topology reading ``topic`` (its real name), if any."""
        for sub in self.subtopologies:
            if topic in sub.source_topics:
                return sub
            if any(
                internal_topic_name(application_id, s) == topic for s in sub.repartition_sources
            ):
                return sub
        return None

    def source_topics(self) -> list[str]:
        """The external input topics, global tables' topics included."""
        topics = [t for sub in self.subtopologies for t in sub.source_topics]
        return topics + [g.topic for g in self.global_tables]

    def delta_sources(self) -> dict[str, DeltaSource]:
        """The Delta tables the topology reads as topics (``builder.stream(DeltaSource)``),
        by topic name; a run declares them in its warehouse. Two different ones under one
        name are a TopologyException."""
        found: dict[str, DeltaSource] = {}
        for node in self.nodes.values():
            source = node.delta_source
            if source is None:
                continue
            if found.setdefault(source.name, source) != source:
                raise TopologyException(
                    f"node {node.name}: Delta source {source.name!r} is given twice, "
                    f"differently ({found[source.name]} and {source}); give it once"
                )
        return found

    def delta_sinks(self) -> dict[str, DeltaSink]:
        """The typed Delta tables the topology writes (``to(DeltaSink)``), by topic name; a
        run declares them in its warehouse. Two different ones under one name, or one that
        is also a plain sink's topic, are a TopologyException."""
        found: dict[str, DeltaSink] = {}
        for node in self.nodes.values():
            sink = node.delta_sink
            if sink is not None and found.setdefault(sink.name, sink) != sink:
                raise TopologyException(
                    f"node {node.name}: Delta sink {sink.name!r} is given twice, "
                    f"differently ({found[sink.name]} and {sink}); give it once"
                )
        for node in self.nodes.values():
            if node.kind == SINK and node.delta_sink is None and node.topics[0] in found:
                raise TopologyException(
                    f"node {node.name}: topic {node.topics[0]!r} is a DeltaSink elsewhere in "
                    "the topology; write to it with the same DeltaSink"
                )
        return found

    def sink_topics(self) -> list[str]:
        return [t for sub in self.subtopologies for t in sub.sink_topics]

    def serdes_of(self, topic: str) -> TopicSerdes:
        """The serdes of external topic ``topic`` (its sources' ``Consumed``, else its
        sinks' ``Produced``; default Json). A topic read or written with two different
        serdes is a StreamsException naming both."""
        found = {
            node.serdes
            for node in self.nodes.values()
            if node.kind in (SOURCE, SINK) and not node.internal_topic and topic in node.topics
        }
        if len(found) > 1:
            raise StreamsException(
                f"topic {topic!r} is read or written with different serdes ("
                + "; ".join(sorted(map(str, found)))
                + "): give every Consumed and Produced of one topic the same serdes"
            )
        return found.pop() if found else DEFAULT_SERDES

    def repartition_partitions(self) -> dict[str, int]:
        """The repartition topics (suffixes) whose partition count the app set with
        ``Repartitioned.with_number_of_partitions``, and that count."""
        return {
            node.topics[0]: node.num_partitions
            for node in self.nodes.values()
            if node.kind == SINK and node.internal_topic and node.num_partitions is not None
        }

    def describe(self) -> str:
        """A readable outline, like Kafka's ``TopologyDescription``."""
        lines = ["Topologies:"]
        for sub in self.subtopologies:
            lines.append(f"  Sub-topology: {sub.id}")
            for name in sub.nodes:
                node = self.nodes[name]
                lines.append(f"    {node.describe()}")
                if node.children:
                    lines.append(f"      --> {', '.join(node.children)}")
        for g in self.global_tables:
            lines.append(f"  Global table: {g.topic} (store: {g.store})")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return self.describe()
