"""Foreign-key table joins (KIP-213): ``KTable.join/left_join(other, foreign_key_extractor,
joiner, materialized=)``; the processors are in processors/fk_join.py.

The wiring is Kafka's (KTableImpl.doJoinOnForeignKey): this table's changes go out as
subscriptions (``KTABLE-FK-JOIN-SUBSCRIPTION-REGISTRATION-<n>``) through the internal topic
``KTABLE-FK-JOIN-SUBSCRIPTION-REGISTRATION-<n>-topic`` to the foreign key's partition, where
``KTABLE-FK-JOIN-SUBSCRIPTION-PROCESSOR-`` nodes keep them in the subscription store
(``KTABLE-FK-JOIN-SUBSCRIPTION-STATE-STORE-<n>``, key ``(foreign key, primary key)``) and
answer them, and answer again on every change of the other table; the answers come back
through ``KTABLE-FK-JOIN-SUBSCRIPTION-RESPONSE-<n>-topic`` to the primary key's partition,
where ``KTABLE-FK-JOIN-SUBSCRIPTION-RESPONSE-RESOLVER-PROCESSOR-`` joins them with this
table's current row and ``KTABLE-FK-JOIN-OUTPUT-`` is the result table (always kept in a
store: ``KTABLE-FK-JOIN-OUTPUT-STATE-STORE-<n>`` unless ``materialized`` names it). Both
tables are read through their stores (an unmaterialized one gets a store, as joins.py does).
The subscription topic is co-partitioned with the other table, the response topic with
this one (sized so when the run creates them).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from lakestate.dsl.arguments import check_function
from lakestate.dsl.builder import TIMESTAMPED_KEY_VALUE, VERSIONED, GraphBuilder, table_store_spec
from lakestate.dsl.joins import _table_store
from lakestate.dsl.materialized import Materialized
from lakestate.errors import TopologyException
from lakestate.processors.fk_join import (
    ForeignTableJoin,
    ResponseJoin,
    Subscription,
    SubscriptionReceive,
    SubscriptionResponse,
    SubscriptionSend,
)
from lakestate.processors.table import TableSource
from lakestate.serdes import JSON, TopicSerdes
from lakestate.topology.graph import StoreSpec

if TYPE_CHECKING:
    from lakestate.dsl.ktable import KTable

REGISTRATION = "KTABLE-FK-JOIN-SUBSCRIPTION-REGISTRATION-"
PROCESSOR = "KTABLE-FK-JOIN-SUBSCRIPTION-PROCESSOR-"
RESPONSE = "KTABLE-FK-JOIN-SUBSCRIPTION-RESPONSE-"
RESOLVER = "KTABLE-FK-JOIN-SUBSCRIPTION-RESPONSE-RESOLVER-PROCESSOR-"
OUTPUT = "KTABLE-FK-JOIN-OUTPUT-"


def foreign_key_join(
    this: KTable,
    other: KTable,
    extractor: Callable[[Any], Any],
    joiner: Callable[[Any, Any], Any],
    left: bool,
    materialized: Materialized | None,
) -> KTable:
    """``this.join/left_join(other, extractor, joiner)`` on ``extractor(value)``, the key of
    ``other``'s row (see the module docstring)."""
    graph: GraphBuilder = this._graph
    operator = "KTable.left_join" if left else "KTable.join"
    _check_tables(operator, this, other)
    # The tables' value serdes: what the value hash is taken of, how foreign values travel.
    value_serde, foreign_serde = this.serdes.value, other.serdes.value
    this_store = _table_store(graph, this)
    other_store = _table_store(graph, other)
    this_versioned, other_versioned = this.is_versioned, other.is_versioned
    send = graph.new_name(REGISTRATION)
    check_function(extractor, send, operator, "foreign_key_extractor(value)")
    check_function(joiner, send, operator, "joiner(value, other_value)")
    subscriptions_topic = f"{send}-topic"
    send_processor = lambda: SubscriptionSend(extractor, left, this_versioned, value_serde)  # noqa: E731
    graph.add_processor(send, this.node_name, send_processor)
    subscribed = _through(graph, send, subscriptions_topic, Subscription, keep_null_keys=True)
    store = graph.new_name("KTABLE-FK-JOIN-SUBSCRIPTION-STATE-STORE-")
    receive = graph.new_name(PROCESSOR)
    graph.add_store(StoreSpec(store, TIMESTAMPED_KEY_VALUE), receive)
    graph.add_processor(
        receive,
        subscribed,
        lambda: SubscriptionReceive(store, other_store, foreign_serde),
        [store, other_store],
    )
    foreign = graph.new_name(PROCESSOR)
    foreign_join = lambda: ForeignTableJoin(store, other_versioned, foreign_serde)  # noqa: E731
    graph.add_processor(foreign, other.node_name, foreign_join, [store])
    response_topic = f"{graph.new_name(RESPONSE)}-topic"
    answered = _through(graph, receive, response_topic, SubscriptionResponse, other=foreign)
    resolver = graph.new_name(RESOLVER)
    graph.add_processor(
        resolver,
        answered,
        lambda: ResponseJoin(this_store, joiner, left, value_serde, foreign_serde),
        [this_store],
    )
    output = graph.new_name(OUTPUT)
    result = graph.store_name(materialized, f"{OUTPUT}STATE-STORE-")
    # Kafka's: the result's store takes the Materialized serdes, its key's else this
    # table's key serde; the value's is unknown otherwise (the joiner's result).
    spec = table_store_spec(result, materialized, TopicSerdes(this.serdes.key, JSON))
    graph.add_store(spec, output)
    graph.add_processor(output, resolver, lambda: TableSource(result), [result])
    for node, ours, theirs in ((receive, subscribed, other), (resolver, answered, this)):
        groups = (graph.source_nodes(ours), graph.source_nodes(theirs.node_name))
        graph.copartition_groups.append((node, *groups))
    from lakestate.dsl.ktable import KTable

    return KTable(graph, output, result, versioned=spec.kind == VERSIONED, serdes=spec.serdes)


def _check_tables(operator: str, this: KTable, other: KTable) -> None:
    """``other`` must be a KTable of this builder. Refuse tables whose key serde is Bytes:
    the subscription and response topics and the subscription store carry the primary
    and foreign keys as JSON, with no Bytes seam (Kafka's would take them; not done).
    Bytes values are fine."""
    from lakestate.dsl.ktable import KTable

    if not isinstance(other, KTable) or other._graph is not this._graph:
        raise TopologyException(f"{operator}: takes a KTable of this builder, got {other!r}")
    for which, table in (("this", this), ("the other", other)):
        if table.serdes.key.json_form_differs:
            raise TopologyException(
                f"{operator}: a foreign-key join cannot take {which} table's keys with key "
                f"serde {table.serdes.key.name} (its subscriptions carry keys as JSON): key "
                "the table by text first (e.g. a table of select_key(lambda k, v: k.hex()))"
            )


def _through(
    graph: GraphBuilder,
    parent: str,
    topic: str,
    wire: type[Subscription] | type[SubscriptionResponse],
    keep_null_keys: bool = False,
    other: str | None = None,
) -> str:
    """An internal topic after ``parent`` (and ``other``), its values in ``wire``'s JSON
    form; returns the source node reading it."""
    sink = graph.new_name("KTABLE-SINK-")
    graph.add_sink(
        sink, parent, topic, internal=True, encode=wire.encode, keep_null_keys=keep_null_keys
    )
    if other is not None:
        graph.nodes[sink].parents.append(other)
        graph.nodes[other].children.append(sink)
    source = graph.new_name("KSTREAM-SOURCE-")
    graph.add_source(source, [topic], internal=True, decode=wire.decode)
    return source
