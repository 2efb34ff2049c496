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
this one (sized so when the run creates them). As in Kafka, the subscription topic's keys
take the other table's key serde, the response topic's and the primary key inside a
subscription this table's, so either table may be keyed by Bytes; the subscription store's
key serde is processors/fk_keys.py's.
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
from lakestate.processors.fk_keys import subscription_store_serdes
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
    _check_other(operator, this, other)
    # The tables' value serdes: what the value hash is taken of, how foreign values travel;
    # this table's key serde: the response topic's keys (Kafka's) and the result's.
    value_serde, foreign_serde, key_serde = this.serdes.value, other.serdes.value, this.serdes.key
    this_store = _table_store(graph, this)
    other_store = _table_store(graph, other)
    receive, subscribed, store = _subscriptions(
        graph, operator, this, other, extractor, joiner, left, other_store
    )
    foreign = graph.new_name(PROCESSOR)
    other_versioned = other.is_versioned
    foreign_join = lambda: ForeignTableJoin(store, other_versioned, foreign_serde)  # noqa: E731
    graph.add_processor(foreign, other.node_name, foreign_join, [store])
    response_topic = f"{graph.new_name(RESPONSE)}-topic"
    response_wire = (SubscriptionResponse.encode, SubscriptionResponse.decode)
    answered = _through(
        graph, receive, response_topic, response_wire, TopicSerdes(key_serde, JSON), other=foreign
    )
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
    spec = table_store_spec(result, materialized, TopicSerdes(key_serde, JSON))
    graph.add_store(spec, output)
    graph.add_processor(output, resolver, lambda: TableSource(result), [result])
    for node, ours, theirs in ((receive, subscribed, other), (resolver, answered, this)):
        groups = (graph.source_nodes(ours), graph.source_nodes(theirs.node_name))
        graph.copartition_groups.append((node, *groups))
    from lakestate.dsl.ktable import KTable

    return KTable(graph, output, result, versioned=spec.kind == VERSIONED, serdes=spec.serdes)


def _subscriptions(
    graph: GraphBuilder,
    operator: str,
    this: KTable,
    other: KTable,
    extractor: Callable[[Any], Any],
    joiner: Callable[[Any, Any], Any],
    left: bool,
    other_store: str,
) -> tuple[str, str, str]:
    """The subscription side: ``SubscriptionSend`` under this table, the subscription topic
    (keyed by the foreign key by the other table's key serde, the primary key in it by
    this table's, as Kafka's), the subscription store (Kafka's combined key when a table is
    keyed by Bytes: fk_keys.py) and ``SubscriptionReceive``. Returns the receiving node,
    the source reading the topic and the store's name."""
    value_serde, key_serde, foreign_key_serde = this.serdes.value, this.serdes.key, other.serdes.key
    this_versioned = this.is_versioned
    send = graph.new_name(REGISTRATION)
    check_function(extractor, send, operator, "foreign_key_extractor(value)")
    check_function(joiner, send, operator, "joiner(value, other_value)")
    send_processor = lambda: SubscriptionSend(extractor, left, this_versioned, value_serde)  # noqa: E731
    graph.add_processor(send, this.node_name, send_processor)
    subscribed = _through(
        graph,
        send,
        f"{send}-topic",
        (lambda s: s.encode(key_serde), lambda raw: Subscription.decode(raw, key_serde)),
        TopicSerdes(foreign_key_serde, JSON),
        keep_null_keys=True,
    )
    store = graph.new_name("KTABLE-FK-JOIN-SUBSCRIPTION-STATE-STORE-")
    receive = graph.new_name(PROCESSOR)
    store_serdes = subscription_store_serdes(foreign_key_serde, key_serde)
    graph.add_store(StoreSpec(store, TIMESTAMPED_KEY_VALUE, serdes=store_serdes), receive)
    foreign_serde = other.serdes.value
    graph.add_processor(
        receive,
        subscribed,
        lambda: SubscriptionReceive(store, other_store, foreign_serde),
        [store, other_store],
    )
    return receive, subscribed, store


def _check_other(operator: str, this: KTable, other: KTable) -> None:
    """``other`` must be a KTable of this builder."""
    from lakestate.dsl.ktable import KTable

    if not isinstance(other, KTable) or other._graph is not this._graph:
        raise TopologyException(f"{operator}: takes a KTable of this builder, got {other!r}")


def _through(
    graph: GraphBuilder,
    parent: str,
    topic: str,
    wire: tuple[Callable[[Any], Any], Callable[[Any], Any]],
    serdes: TopicSerdes,
    keep_null_keys: bool = False,
    other: str | None = None,
) -> str:
    """An internal topic after ``parent`` (and ``other``), its values in the JSON form
    ``wire`` (encode, decode) gives them, its keys by ``serdes``' key serde (Kafka's: the
    foreign key's on the subscription topic, the primary key's on the response topic);
    returns the source node reading it."""
    encode, decode = wire
    sink = graph.new_name("KTABLE-SINK-")
    graph.add_sink(
        sink,
        parent,
        topic,
        internal=True,
        encode=encode,
        keep_null_keys=keep_null_keys,
        serdes=serdes,
    )
    if other is not None:
        graph.nodes[sink].parents.append(other)
        graph.nodes[other].children.append(sink)
    source = graph.new_name("KSTREAM-SOURCE-")
    graph.add_source(source, [topic], internal=True, decode=decode, serdes=serdes)
    return source
