"""The joins of the DSL (``KStream.join/left_join``, ``KTable.join/left_join/outer_join``);
the processors are in processors/join.py.

A join reads the table side's store, so the join node and the table's nodes share a store
and ``build()`` puts them in one sub-topology; each join records its two sides' source
nodes for the co-partitioning check (topology/copartition.py). A stream whose key changed
reads through a repartition topic first, as in Kafka (the table is partitioned by its key,
so the stream must be too). Joins with a global table need neither: every task holds the
whole table.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from lakestate.dsl.arguments import check_function
from lakestate.dsl.builder import TIMESTAMPED_KEY_VALUE, VERSIONED, GraphBuilder
from lakestate.dsl.joined import Joined, joined_of
from lakestate.dsl.materialized import Materialized
from lakestate.errors import TopologyException
from lakestate.processors.join import (
    StreamTableJoin,
    TableJoinMerge,
    TableMaterialize,
    TableTableJoin,
)
from lakestate.serdes import JSON, TopicSerdes
from lakestate.topology.graph import StoreSpec

if TYPE_CHECKING:
    from lakestate.dsl.kstream import KStream
    from lakestate.dsl.ktable import GlobalKTable, KTable

Joiner = Callable[[Any, Any], Any]


def _table_store(graph: GraphBuilder, table: KTable) -> str:
    """The store holding ``table``'s rows. A table without one (an unmaterialized filter,
    map_values, join or suppress) gets one now, kept by a node under it: Kafka reads such a
    table through value getters, and a store gives the same rows."""
    store = table.query_store_name
    if store is not None:
        return store
    name = graph.new_name("KTABLE-MATERIALIZE-")
    store = f"{name}-STATE-STORE"
    graph.add_store(StoreSpec(store, TIMESTAMPED_KEY_VALUE), name)
    graph.add_processor(name, table.node_name, lambda: TableMaterialize(store), [store])
    table._store_name = store  # a second join of this table reads the same store
    return store


def stream_table_join(
    stream: KStream, table: KTable, joiner: Joiner, left: bool, joined: Joined | None
) -> KStream:
    """``joined``: the repartition topic's serdes and the join's name (Kafka's Joined)."""
    from lakestate.dsl.kstream import KStream
    from lakestate.dsl.ktable import KTable

    graph: GraphBuilder = stream._graph
    operator = "KStream.left_join" if left else "KStream.join"
    given = joined.name if isinstance(joined, Joined) else None
    name = given or graph.new_name("KSTREAM-JOIN-" if not left else "KSTREAM-LEFTJOIN-")
    joined = joined_of(joined, name)
    check_function(joiner, name, operator, "joiner(stream_value, table_value)")
    if not isinstance(table, KTable):
        raise TopologyException(
            f"node {name}: join() takes a KTable (or a GlobalKTable with a key selector), "
            f"got {table!r}"
        )
    if table._graph is not graph:
        raise TopologyException(f"node {name}: the table belongs to another StreamsBuilder")
    versioned = table.is_versioned
    if versioned and table.query_store_name is None:
        raise TopologyException(
            f"node {name}: a stream joined with a versioned table reads the table as of each "
            "record's timestamp, so the table needs a versioned store: materialize it with "
            "Materialized.as_versioned(name, history_retention)"
        )
    store = _table_store(graph, table)
    if versioned != (graph.stores[store].kind == VERSIONED):
        raise TopologyException(f"node {name}: store {store!r} does not match the table")
    parent = stream.node_name
    # Kafka's repartitionForJoin: Joined's serdes, else the stream's known ones.
    serdes = TopicSerdes(
        joined.key_serde or stream.serdes.key, joined.value_serde or stream.serdes.value
    )
    if stream._repartition_required:
        # The key changed upstream: co-locate the records with the table's rows. A left
        # join's topic carries null-key records, which the join emits joined with None
        # (KIP-962; Kafka 4.4 does, conformance group join-stream_table-rekeyed).
        parent = graph.repartition(
            parent,
            f"{name}-repartition",
            named=given is not None,
            serdes=serdes,
            keep_null_keys=left,
        )
    graph.add_processor(
        name, parent, lambda: StreamTableJoin(store, joiner, left, versioned), [store]
    )
    graph.copartition_groups.append(
        (name, graph.source_nodes(parent), graph.source_nodes(table.node_name))
    )
    # Kafka's stream-table joins keep the key serde; the joiner makes a new value.
    return KStream(graph, name, repartition_required=False, serdes=TopicSerdes(serdes.key, JSON))


def stream_global_table_join(
    stream: KStream,
    table: GlobalKTable,
    key_selector: Callable[[Any, Any], Any],
    joiner: Joiner,
    left: bool,
) -> KStream:
    from lakestate.dsl.kstream import KStream

    graph: GraphBuilder = stream._graph
    name = graph.new_name("KSTREAM-JOIN-" if not left else "KSTREAM-LEFTJOIN-")
    operator = "KStream.left_join" if left else "KStream.join"
    check_function(key_selector, name, operator, "key_selector(key, value)")
    check_function(joiner, name, operator, "joiner(stream_value, table_value)")
    store = table.query_store_name
    if store not in graph.stores or not graph.stores[store].is_global:
        raise TopologyException(f"node {name}: {table!r} is not a global table of this builder")
    graph.add_processor(
        name,
        stream.node_name,
        lambda: StreamTableJoin(store, joiner, left, False, key_selector),
        [store],
    )
    # The stream keeps its partitioning: a later stateful operation still repartitions.
    serdes = TopicSerdes(stream.serdes.key, JSON)
    return KStream(graph, name, stream._repartition_required, serdes)


def table_table_join(
    this: KTable,
    other: KTable,
    joiner: Joiner,
    how: str,
    materialized: Materialized | None,
) -> KTable:
    """``how``: "inner", "left" or "outer" (this is the left side)."""
    from lakestate.dsl.builder import table_store_spec
    from lakestate.dsl.ktable import KTable

    graph: GraphBuilder = this._graph
    prefix = {"inner": "KTABLE-JOIN", "left": "KTABLE-LEFTJOIN", "outer": "KTABLE-OUTERJOIN"}[how]
    this_name = graph.new_name(f"{prefix}THIS-")
    operator = {"inner": "KTable.join", "left": "KTable.left_join", "outer": "KTable.outer_join"}
    check_function(joiner, this_name, operator[how], "joiner(value, other_value)")
    if not isinstance(other, KTable) or other._graph is not graph:
        raise TopologyException(f"node {this_name}: join() takes a KTable of this builder")
    this_store = _table_store(graph, this)
    other_store = _table_store(graph, other)
    other_name = graph.new_name(f"{prefix}OTHER-")

    def reversed_joiner(other_value: Any, this_value: Any) -> Any:
        return joiner(this_value, other_value)

    other_how = {"inner": "inner", "left": "right", "outer": "outer"}[how]
    this_versioned, other_versioned = this.is_versioned, other.is_versioned
    graph.add_processor(
        this_name,
        this.node_name,
        lambda: TableTableJoin(other_store, joiner, how, this_versioned),  # type: ignore[arg-type]
        [other_store],
    )
    graph.add_processor(
        other_name,
        other.node_name,
        lambda: TableTableJoin(this_store, reversed_joiner, other_how, other_versioned),  # type: ignore[arg-type]
        [this_store],
    )
    merge = graph.new_name("KTABLE-MERGE-")
    store = None
    # Kafka's doJoin: the result knows this table's key serde and no value serde, unless
    # materialized: then its store's serdes (Materialized's, the key's else this table's).
    serdes = TopicSerdes(this.serdes.key, JSON)
    if materialized is not None:
        store = graph.store_name(materialized, f"{merge}-STATE-STORE-")
        spec = table_store_spec(store, materialized, serdes)
        graph.add_store(spec, merge)
        serdes = spec.serdes
    graph.add_processor(merge, this_name, lambda: TableJoinMerge(store), [store] if store else [])
    graph.nodes[merge].parents.append(other_name)
    graph.nodes[other_name].children.append(merge)
    graph.copartition_groups.append(
        (this_name, graph.source_nodes(this.node_name), graph.source_nodes(other.node_name))
    )
    # KIP-914: a join's result is versioned only when materialized as versioned.
    versioned = store is not None and graph.stores[store].kind == VERSIONED
    return KTable(graph, merge, store, versioned=versioned, serdes=serdes)
