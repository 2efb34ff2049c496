"""StreamsBuilder: the entry point of the DSL."""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from lakestate.delta_sink import DeltaSink
from lakestate.delta_source import DeltaSource
from lakestate.dsl.consumed import Consumed, serdes_of
from lakestate.dsl.materialized import Materialized, store_serdes
from lakestate.errors import TopologyException
from lakestate.processors.api import Processor
from lakestate.processors.stateless import ChangeDecodingSource, DecodingSource, PassThrough, Sink
from lakestate.processors.table import TableSource
from lakestate.serdes import DEFAULT_SERDES, TopicSerdes
from lakestate.topology.build import build_topology
from lakestate.topology.graph import (
    PROCESSOR,
    SINK,
    SOURCE,
    GlobalTableSpec,
    Node,
    StoreSpec,
    Topology,
)

if TYPE_CHECKING:
    from lakestate.dsl.kstream import KStream
    from lakestate.dsl.ktable import GlobalKTable, KTable
    from lakestate.dsl.stores import StoreBuilder

TIMESTAMPED_KEY_VALUE = "timestamped_key_value"
VERSIONED = "versioned"


def table_store_spec(
    store: str, materialized: Materialized | None, topic_serdes: TopicSerdes = DEFAULT_SERDES
) -> StoreSpec:
    """The store materializing a table: versioned (KIP-889) when ``materialized`` was made
    with ``Materialized.as_versioned``, else a timestamped key-value store. Its serdes:
    ``materialized``'s, else ``topic_serdes`` (the source topic's, as Kafka's table)."""
    serdes = store_serdes(materialized, topic_serdes.key, topic_serdes.value)
    if materialized is not None and materialized.is_versioned:
        return StoreSpec(store, VERSIONED, materialized.store_options(), serdes=serdes)
    return StoreSpec(store, TIMESTAMPED_KEY_VALUE, serdes=serdes)


def check_topic(topic: Any, node: str) -> None:
    if not isinstance(topic, str) or not topic.strip():
        raise TopologyException(f"node {node}: topic must be a non-empty string, got {topic!r}")


def _source_topic(topic: Any, node: str) -> tuple[str, DeltaSource | None]:
    """A source's topic name, and its Delta table when it is a ``DeltaSource``."""
    if isinstance(topic, DeltaSource):
        return topic.name, topic
    check_topic(topic, node)
    return topic, None


def _kafka_order(materialized: Any, consumed: Any) -> tuple[Any, Any]:
    """``(materialized, consumed)``, also when a Consumed was passed second, where Kafka's
    ``table(topic, consumed, materialized)`` has it."""
    if isinstance(materialized, Consumed):
        return consumed, materialized
    return materialized, consumed


class GraphBuilder:
    """Collects nodes and stores as the DSL is called; named like Kafka's (PREFIX-0000000001)."""

    def __init__(self) -> None:
        self.nodes: dict[str, Node] = {}
        self.stores: dict[str, StoreSpec] = {}
        self.store_owners: dict[str, list[str]] = {}
        self.global_tables: list[GlobalTableSpec] = []
        # Per join: (join node, source nodes of one side, of the other); see copartition.py.
        self.copartition_groups: list[tuple[str, list[str], list[str]]] = []
        self._index = 0
        # Stores named by a Materialized with caching disabled (add_store marks their spec).
        self._uncached: set[str] = set()

    def new_name(self, prefix: str) -> str:
        name = f"{prefix}{self._index:010d}"
        self._index += 1
        return name

    def _check_new(self, name: str) -> None:
        """Node names are unique (Kafka: "Processor X is already added")."""
        if name in self.nodes:
            raise TopologyException(
                f"node {name} already exists; give the operator another name "
                "(Named.as_ / Branched.as_ / Repartitioned.as_)"
            )

    def add_source(
        self,
        name: str,
        topics: list[str],
        internal: bool = False,
        carries_changes: bool = False,
        decode: Callable[[Any], Any] | None = None,
        serdes: TopicSerdes = DEFAULT_SERDES,
        delta_source: DeltaSource | None = None,
    ) -> Node:
        """``decode``: turns the topic's values back into their type (see ``add_sink``);
        ``delta_source``: the Delta table the topic is (``builder.stream(DeltaSource)``)."""
        self._check_new(name)
        factory: Callable[[], Processor] = ChangeDecodingSource if carries_changes else PassThrough
        if decode is not None:
            factory = lambda: DecodingSource(decode)  # noqa: E731
        node = Node(
            name,
            SOURCE,
            factory=factory,
            topics=list(topics),
            internal_topic=internal,
            carries_changes=carries_changes,
            serdes=serdes,
            delta_source=delta_source,
        )
        self.nodes[name] = node
        return node

    def add_processor(
        self,
        name: str,
        parent: str,
        factory: Callable[[], Processor],
        stores: list[str] | None = None,
        other_parents: tuple[str, ...] = (),
    ) -> Node:
        """A processor below ``parent`` (and ``other_parents``: a merge has several)."""
        self._check_new(name)
        parents = [parent, *other_parents]
        node = Node(name, PROCESSOR, parents=parents, factory=factory, stores=list(stores or []))
        self.nodes[name] = node
        for p in parents:
            self.nodes[p].children.append(name)
        return node

    def add_sink(
        self,
        name: str,
        parent: str,
        topic: str,
        internal: bool = False,
        carries_changes: bool = False,
        num_partitions: int | None = None,
        encode: Callable[[Any], Any] | None = None,
        keep_null_keys: bool = False,
        serdes: TopicSerdes = DEFAULT_SERDES,
        delta_sink: DeltaSink | None = None,
    ) -> Node:
        """``encode``: writes values of an internal topic's own type as JSON;
        ``keep_null_keys``: an internal topic whose reader takes null keys (partition 0);
        ``delta_sink``: the typed Delta table the topic is (``to(DeltaSink)``)."""
        self._check_new(name)
        drop_null_keys = internal and not keep_null_keys

        def factory() -> Processor:
            return Sink(
                topic,
                drop_null_keys=drop_null_keys,
                encode_changes=carries_changes,
                encode=encode,
                check=delta_sink.check if delta_sink is not None else None,
            )

        node = Node(
            name,
            SINK,
            parents=[parent],
            factory=factory,
            topics=[topic],
            internal_topic=internal,
            carries_changes=carries_changes,
            num_partitions=num_partitions,
            serdes=serdes,
            delta_sink=delta_sink,
        )
        self.nodes[name] = node
        self.nodes[parent].children.append(name)
        return node

    def add_store(self, spec: StoreSpec, owner: str) -> None:
        existing = self.stores.get(spec.name)
        if existing is not None and existing != spec:
            raise TopologyException(
                f"node {owner}: store {spec.name!r} already exists with another layout "
                f"({existing.kind}); choose another name with Materialized.as_()"
            )
        if spec.name in self._uncached:
            spec = replace(spec, caching=False)
        self.stores[spec.name] = spec
        self.store_owners.setdefault(spec.name, []).append(owner)

    def store_name(self, materialized: Materialized | None, prefix: str) -> str:
        """The store's name: ``materialized``'s, else a new one with ``prefix``. (Every
        operator taking a Materialized applies its serdes to its store.)"""
        if materialized is not None and not isinstance(materialized, Materialized):
            raise TopologyException(f"materialized must be a Materialized, got {materialized!r}")
        name = (
            materialized.store_name
            if materialized is not None and materialized.store_name
            else self.new_name(prefix)
        )
        if materialized is not None and not materialized.caching_enabled:
            self._uncached.add(name)
        return name

    def source_nodes(self, node: str) -> list[str]:
        """The source nodes whose records reach ``node`` (what a join co-partitions)."""
        found: list[str] = []
        todo, seen = [node], set()
        while todo:
            name = todo.pop()
            if name in seen:
                continue
            seen.add(name)
            if self.nodes[name].kind == SOURCE:
                found.append(name)
            todo.extend(self.nodes[name].parents)
        return sorted(found)

    def repartition(
        self,
        parent: str,
        topic_suffix: str,
        carries_changes: bool = False,
        num_partitions: int | None = None,
        named: bool = False,
        serdes: TopicSerdes = DEFAULT_SERDES,
        keep_null_keys: bool = False,
    ) -> str:
        """Insert a repartition topic after ``parent``; returns the new source node's name.
        ``named``: its sink and source are ``<topic>-sink`` and ``<topic>-source`` (as
        Kafka names those of a named ``repartition()``), else generated. ``serdes``: the
        topic's (``Grouped.with_``): its sink checks what it writes, its source converts."""
        sink, source = self.new_name("KSTREAM-SINK-"), self.new_name("KSTREAM-SOURCE-")
        if named:
            sink, source = f"{topic_suffix}-sink", f"{topic_suffix}-source"
        self.add_sink(
            sink,
            parent,
            topic_suffix,
            internal=True,
            carries_changes=carries_changes,
            num_partitions=num_partitions,
            serdes=serdes,
            keep_null_keys=keep_null_keys,
        )
        self.add_source(
            source, [topic_suffix], internal=True, carries_changes=carries_changes, serdes=serdes
        )
        return source


class StreamsBuilder:
    """Builds a topology with the Kafka Streams DSL; ``build()`` returns the Topology."""

    def __init__(self) -> None:
        self._graph = GraphBuilder()

    def stream(
        self, topics: str | list[str] | DeltaSource, consumed: Consumed | None = None
    ) -> KStream:
        """A record stream read from one or more topics, or from an existing Delta table
        other writers append to (``DeltaSource(name, table, key=..., timestamp=...,
        partitions=n)``: each row a record, its columns the value's fields); ``consumed``:
        the topics' serdes (``Consumed.with_(key_serde, value_serde)``; default Json), known
        downstream until an operation changes the key's or value's type (see KStream)."""
        from lakestate.dsl.kstream import KStream

        name = self._graph.new_name("KSTREAM-SOURCE-")
        if isinstance(topics, DeltaSource):
            serdes = serdes_of(consumed, Consumed, name)
            self._graph.add_source(name, [topics.name], serdes=serdes, delta_source=topics)
            return KStream(self._graph, name, repartition_required=False, serdes=serdes)
        if isinstance(topics, str):
            topic_list = [topics]
        elif isinstance(topics, list | tuple):
            topic_list = list(topics)
        else:
            raise TopologyException(
                f"node {name}: topics must be a topic name or a list of names, got {topics!r}"
            )
        if not topic_list:
            raise TopologyException(f"node {name}: stream() needs at least one topic")
        for topic in topic_list:
            check_topic(topic, name)
        serdes = serdes_of(consumed, Consumed, name)
        self._graph.add_source(name, topic_list, serdes=serdes)
        return KStream(self._graph, name, repartition_required=False, serdes=serdes)

    def table(
        self,
        topic: str | DeltaSource,
        materialized: Materialized | Consumed | None = None,
        consumed: Consumed | None = None,
    ) -> KTable:
        """A changelog stream read as a table: the latest value per key (``consumed``: the
        topic's serdes; also taken second, in Kafka's order ``table(topic, consumed,
        materialized)``). With
        ``Materialized.as_versioned(...)`` the table is versioned (KIP-914): its store keeps
        each key's history, and out-of-order records are not updates of the latest value."""
        from lakestate.dsl.ktable import KTable

        source = self._graph.new_name("KSTREAM-SOURCE-")
        topic, delta_source = _source_topic(topic, source)
        materialized, consumed = _kafka_order(materialized, consumed)
        store = self._graph.store_name(materialized, f"{topic}-STATE-STORE-")
        serdes = serdes_of(consumed, Consumed, source)
        self._graph.add_source(source, [topic], serdes=serdes, delta_source=delta_source)
        name = self._graph.new_name("KTABLE-SOURCE-")
        spec = table_store_spec(store, materialized, serdes)
        self._graph.add_store(spec, name)
        self._graph.add_processor(name, source, lambda: TableSource(store), [store])
        return KTable(
            self._graph, name, store, versioned=spec.kind == VERSIONED, serdes=spec.serdes
        )

    def global_table(
        self,
        topic: str | DeltaSource,
        materialized: Materialized | Consumed | None = None,
        consumed: Consumed | None = None,
    ) -> GlobalKTable:
        """A table every task sees whole (not partitioned); read-only to processors.
        ``consumed``: the topic's serdes, as for ``table``; ``materialized``'s serdes, if
        given, the store's (a value they cannot hold fails there)."""
        from lakestate.dsl.ktable import GlobalKTable

        source = self._graph.new_name("KSTREAM-SOURCE-")
        topic, delta_source = _source_topic(topic, source)
        materialized, consumed = _kafka_order(materialized, consumed)
        store = self._graph.store_name(materialized, f"{topic}-STATE-STORE-")
        if materialized is not None and materialized.is_versioned:
            raise TopologyException(
                f"node {source}: a global table cannot be versioned (KIP-914): stream-global "
                "table joins are not timestamp-synchronized; use Materialized.as_(name)"
            )
        serdes = serdes_of(consumed, Consumed, source)
        self._graph.add_source(source, [topic], serdes=serdes, delta_source=delta_source)
        # Kafka's: Materialized's serdes, else the topic's. The source decoded every value
        # with the topic's already, so only Materialized ones are checked at the store, and
        # the topic's are the store's only where the store must convert (Bytes).
        store_spec = StoreSpec(store, TIMESTAMPED_KEY_VALUE, is_global=True)
        if materialized is not None and materialized.has_serdes:
            serdes = store_serdes(materialized, serdes.key, serdes.value)
            store_spec = replace(store_spec, serdes=serdes)
        elif serdes.value.json_form_differs:
            store_spec = replace(store_spec, serdes=serdes)
        self._graph.add_store(store_spec, source)
        self._graph.nodes[source].stores.append(store)
        self._graph.global_tables.append(GlobalTableSpec(topic, store, source))
        return GlobalKTable(topic, store)

    def add_state_store(self, builder: StoreBuilder) -> StreamsBuilder:
        """Add a store for processors (``Stores.key_value_store_builder(...)`` and the
        others); ``KStream.process(supplier, name)`` connects it. Transactional and
        changelogged like every store."""
        from lakestate.dsl.stores import StoreBuilder

        if not isinstance(builder, StoreBuilder):
            raise TopologyException(
                "add_state_store takes a store builder, e.g. Stores.key_value_store_builder("
                f"Stores.persistent_key_value_store(name)); got {builder!r}"
            )
        if builder.name in self._graph.stores:
            raise TopologyException(
                f"add_state_store: store {builder.name!r} was already added; give each store "
                "its own name"
            )
        self._graph.add_store(builder.spec, "add_state_store")
        return self

    def build(self) -> Topology:
        """The validated topology; raises TopologyException naming the offending node."""
        g = self._graph
        # A copy, so that adding to the builder afterwards cannot change a built topology.
        return build_topology(
            copy.deepcopy(g.nodes),
            dict(g.stores),
            copy.deepcopy(g.store_owners),
            list(g.global_tables),
            copy.deepcopy(g.copartition_groups),
        )
