"""KStream: a record stream."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from lakestate.delta_sink import DeltaSink
from lakestate.dsl.arguments import check_function
from lakestate.dsl.builder import GraphBuilder, check_topic
from lakestate.dsl.consumed import Grouped, Produced, grouped_of, serdes_of
from lakestate.dsl.materialized import Materialized
from lakestate.errors import TopologyException
from lakestate.processors.stateless import (
    Filter,
    FlatMap,
    FlatMapValues,
    Foreach,
    Map,
    MapValues,
    PassThrough,
    Peek,
    SelectKey,
)
from lakestate.serdes import DEFAULT_SERDES, JSON, Serde, TopicSerdes

if TYPE_CHECKING:
    from lakestate.dsl.branched import BranchedKStream, Named
    from lakestate.dsl.deduplicated import Deduplicated
    from lakestate.dsl.grouped import KGroupedStream
    from lakestate.dsl.ktable import GlobalKTable, KTable
    from lakestate.dsl.repartitioned import Repartitioned
    from lakestate.dsl.stream_joins import JoinWindows, StreamJoined


def known(serde: Serde) -> Serde | None:
    """``serde`` as a Grouped takes it: Json (the default) is not given."""
    return None if serde == JSON else serde


class KStream:
    """An unbounded stream of records. Operators return new streams; nothing runs until
    the built topology is run by the test driver or the engine.

    ``repartition_required`` is set after a key change (select_key, map, flat_map,
    group_by, or a merge with a stream that changed its key): the
    next stateful operation then reads the records through a repartition topic, so that
    records with the same new key meet in the same task.

    ``serdes``: the key and value serdes known downstream (Kafka's KStreamImpl keySerde and
    valueSerde; Json: none known, the default): ``Consumed``'s at a source, kept by
    operations that keep the key's or value's type (filter, peek, map_values keeps the key
    serde, select_key the value serde), forgotten by the others (map, flat_map, merge,
    process). ``group_by_key()``, ``group_by()``, ``repartition()``, ``to_table()`` and
    ``to()`` take them where not given, as Kafka's do.
    """

    def __init__(
        self,
        graph: GraphBuilder,
        node: str,
        repartition_required: bool,
        serdes: TopicSerdes = DEFAULT_SERDES,
    ) -> None:
        self._graph = graph
        self._node = node
        self._repartition_required = repartition_required
        self.serdes = serdes

    @property
    def node_name(self) -> str:
        return self._node

    def _then(
        self,
        prefix: str,
        factory_of: Callable[[str], Any],
        key_changing: bool = False,
        fn: Any = None,
        signature: str = "",
        operator: str = "",
        name: str | None = None,
        keeps: tuple[bool, bool] = (True, True),
    ) -> KStream:
        """``keeps``: whether the key serde and the value serde stay known after it."""
        name = name or self._graph.new_name(prefix)
        if signature:
            check_function(fn, name, f"KStream.{operator}", signature)
        self._graph.add_processor(name, self._node, factory_of(name))
        serdes = TopicSerdes(
            self.serdes.key if keeps[0] else JSON, self.serdes.value if keeps[1] else JSON
        )
        return KStream(self._graph, name, self._repartition_required or key_changing, serdes)

    def filter(self, predicate: Callable[[Any, Any], bool]) -> KStream:
        """Keeps the records for which ``predicate(key, value)`` is true."""
        return self._then(
            "KSTREAM-FILTER-",
            lambda _: lambda: Filter(predicate),
            fn=predicate,
            signature="predicate(key, value)",
            operator="filter",
        )

    def filter_not(self, predicate: Callable[[Any, Any], bool]) -> KStream:
        """Drops the records for which ``predicate(key, value)`` is true."""
        return self._then(
            "KSTREAM-FILTER-",
            lambda _: lambda: Filter(predicate, negate=True),
            fn=predicate,
            signature="predicate(key, value)",
            operator="filter_not",
        )

    def map_values(self, mapper: Callable[[Any], Any]) -> KStream:
        """Replaces each value with ``mapper(value)``; keys (and partitioning) stay."""
        return self._then(
            "KSTREAM-MAPVALUES-",
            lambda _: lambda: MapValues(mapper),
            fn=mapper,
            signature="mapper(value)",
            operator="map_values",
            keeps=(True, False),
        )

    def select_key(self, selector: Callable[[Any, Any], Any]) -> KStream:
        """Sets each key to ``selector(key, value)``; a later stateful operation repartitions."""
        return self._then(
            "KSTREAM-KEY-SELECT-",
            lambda _: lambda: SelectKey(selector),
            key_changing=True,
            fn=selector,
            signature="key_selector(key, value)",
            operator="select_key",
            keeps=(False, True),
        )

    def map(self, mapper: Callable[[Any, Any], tuple[Any, Any]]) -> KStream:
        """Replaces each record with ``mapper(key, value) -> (new_key, new_value)``."""
        return self._then(
            "KSTREAM-MAP-",
            lambda _: lambda: Map(mapper),
            key_changing=True,
            fn=mapper,
            signature="mapper(key, value)",
            operator="map",
            keeps=(False, False),
        )

    def flat_map(self, mapper: Callable[[Any, Any], Iterable[tuple[Any, Any]]]) -> KStream:
        """Replaces each record with the records of ``mapper(key, value)``, an iterable of
        (new_key, new_value) tuples (empty: none), each with the record's timestamp; a later
        stateful operation repartitions."""
        return self._then(
            "KSTREAM-FLATMAP-",
            lambda _: lambda: FlatMap(mapper),
            key_changing=True,
            fn=mapper,
            signature="mapper(key, value)",
            operator="flat_map",
            keeps=(False, False),
        )

    def flat_map_values(self, mapper: Callable[[Any], Iterable[Any]]) -> KStream:
        """Replaces each record with one record per value of ``mapper(value)`` (an iterable;
        empty: none), each with the record's key and timestamp."""
        return self._then(
            "KSTREAM-FLATMAPVALUES-",
            lambda _: lambda: FlatMapValues(mapper),
            fn=mapper,
            signature="mapper(value)",
            operator="flat_map_values",
            keeps=(True, False),
        )

    def split(self, named: Named | None = None) -> BranchedKStream:
        """Splits the stream into branches (``.branch(predicate, Branched.as_(name))``...,
        then ``.default_branch()`` or ``.no_default_branch()``, which return the branches by
        name): a record goes to the first branch whose ``predicate(key, value)`` holds.
        ``Named.as_(prefix)`` prefixes the branches' names (see dsl/branched.py)."""
        from lakestate.dsl.branched import BranchedKStream

        return BranchedKStream(self, named)

    def merge(self, other: KStream, named: Named | None = None) -> KStream:
        """Both streams' records as one stream, each record once, in the order they are
        processed. A later stateful operation repartitions when either side changed keys."""
        from lakestate.dsl.branched import Named

        if not isinstance(other, KStream) or other._graph is not self._graph:
            raise TopologyException(
                f"merge() takes a KStream of the same StreamsBuilder, got {other!r}"
            )
        if named is not None and not isinstance(named, Named):
            raise TopologyException(f"merge() takes a Named, got {named!r}")
        name = self._graph.new_name("KSTREAM-MERGE-") if named is None else named.name
        self._graph.add_processor(name, self._node, PassThrough, other_parents=(other._node,))
        required = self._repartition_required or other._repartition_required
        return KStream(self._graph, name, required)

    def foreach(self, action: Callable[[Any, Any], None]) -> None:
        """Calls ``action(key, value)`` for each record (terminal: forwards nothing)."""
        name = self._graph.new_name("KSTREAM-FOREACH-")
        check_function(action, name, "KStream.foreach", "action(key, value)")
        self._graph.add_processor(name, self._node, lambda: Foreach(action))

    def repartition(self, repartitioned: Repartitioned | None = None) -> KStream:
        """The stream through a repartition topic (``<name>-repartition``, see
        ``Repartitioned``): records by their current key's partition. Ends the need to
        repartition before a stateful operation. The topic's serdes: ``repartitioned``'s,
        the value serde else the stream's, the key serde else Json (Kafka's: the stream's
        key serde is not the topic's); after it, Repartitioned's else the stream's."""
        from lakestate.dsl.repartitioned import Repartitioned

        if repartitioned is None:
            repartitioned = Repartitioned()
        if not isinstance(repartitioned, Repartitioned):
            raise TopologyException(f"repartition() takes a Repartitioned, got {repartitioned!r}")
        graph = self._graph
        name = repartitioned.name or graph.new_name("KSTREAM-REPARTITION-")
        topic = name if name.endswith("-repartition") else f"{name}-repartition"
        key = repartitioned.key_serde
        value = repartitioned.value_serde or self.serdes.value
        source = graph.repartition(
            self._node,
            topic,
            num_partitions=repartitioned.number_of_partitions,
            named=repartitioned.name is not None,
            serdes=TopicSerdes(key or JSON, value),
        )
        return KStream(graph, source, False, TopicSerdes(key or self.serdes.key, value))

    def process(
        self, supplier: Callable[[], Any], *store_names: str, named: Named | None = None
    ) -> KStream:
        """Runs a user processor (``lakestate.Processor``; processors/user.py) made by
        ``supplier`` (its class, or a function returning a new instance) per task, with the
        stores ``store_names`` (added with ``builder.add_state_store``) connected. What it
        forwards is the new stream; it may change keys, so a later stateful operation
        repartitions."""
        return self._process(supplier, store_names, named, fixed_key=False)

    def process_values(
        self, supplier: Callable[[], Any], *store_names: str, named: Named | None = None
    ) -> KStream:
        """``process`` for a processor that keeps each record's key (Kafka's
        ``processValues``): forwarding another key while processing a record is an error,
        and no repartition follows."""
        return self._process(supplier, store_names, named, fixed_key=True)

    def _process(
        self, supplier: Any, store_names: tuple[str, ...], named: Named | None, fixed_key: bool
    ) -> KStream:
        from lakestate.dsl.branched import Named
        from lakestate.processors.user import UserProcessorNode, check_supplier

        prefix = "KSTREAM-PROCESSVALUES-" if fixed_key else "KSTREAM-PROCESSOR-"
        if named is not None and not isinstance(named, Named):
            raise TopologyException(f"process: named must be a Named, got {named!r}")
        name = named.name if named is not None else self._graph.new_name(prefix)
        check_supplier(supplier, name)
        for store in store_names:
            if not isinstance(store, str) or store not in self._graph.stores:
                raise TopologyException(
                    f"node {name}: store {store!r} was never added; add it first with "
                    "builder.add_state_store(Stores.key_value_store_builder("
                    f"Stores.persistent_key_value_store({store!r})))"
                )
        stores = tuple(store_names)

        def factory() -> UserProcessorNode:
            return UserProcessorNode(name, supplier, stores, fixed_key)

        self._graph.add_processor(name, self._node, factory, list(stores))
        # Kafka's processValues keeps the key serde; process forgets both.
        serdes = TopicSerdes(self.serdes.key if fixed_key else JSON, JSON)
        return KStream(self._graph, name, self._repartition_required or not fixed_key, serdes)

    def peek(self, action: Callable[[Any, Any], None]) -> KStream:
        """Calls ``action(key, value)`` for each record and forwards it unchanged."""
        return self._then(
            "KSTREAM-PEEK-",
            lambda _: lambda: Peek(action),
            fn=action,
            signature="action(key, value)",
            operator="peek",
        )

    def to(self, topic: str | DeltaSink, produced: Produced | None = None) -> None:
        """Writes the stream to ``topic``; ``produced``: its serdes
        (``Produced.with_(key_serde, value_serde)``: a serde given wins, ``Serdes.Json()``
        too; one not given is the stream's, as in Kafka, else Json). A ``DeltaSink``
        writes it to a Delta table with typed columns (``lakestate.delta_sink``)."""
        name = self._graph.new_name("KSTREAM-SINK-")
        if isinstance(topic, DeltaSink):
            if produced is not None:
                raise TopologyException(
                    f"node {name}: a DeltaSink's columns are typed, it takes no Produced serdes"
                )
            self._graph.add_sink(name, self._node, topic.name, delta_sink=topic)
            return
        check_topic(topic, name)
        serdes_of(produced, Produced, name)  # checks its type
        given = produced or Produced()
        serdes = TopicSerdes(
            given.key_serde or self.serdes.key, given.value_serde or self.serdes.value
        )
        self._graph.add_sink(name, self._node, topic, serdes=serdes)

    def to_table(self, materialized: Materialized | None = None) -> KTable:
        """The stream read as a table (latest value per key, null value deletes); versioned
        (KIP-914) when ``materialized`` is ``Materialized.as_versioned(...)``. The store's
        serdes (and a repartition topic's): ``materialized``'s, else the stream's."""
        from lakestate.dsl.builder import VERSIONED, table_store_spec
        from lakestate.dsl.ktable import KTable
        from lakestate.processors.table import TableSource

        name = self._graph.new_name("KSTREAM-TOTABLE-")
        store = self._graph.store_name(materialized, "KSTREAM-TOTABLE-STATE-STORE-")
        parent = self._node
        spec = table_store_spec(store, materialized, self.serdes)
        if self._repartition_required:
            parent = self._graph.repartition(parent, f"{store}-repartition", serdes=spec.serdes)
        self._graph.add_store(spec, name)
        self._graph.add_processor(name, parent, lambda: TableSource(store), [store])
        versioned = spec.kind == VERSIONED
        return KTable(self._graph, name, store, versioned=versioned, serdes=spec.serdes)

    def deduplicate_by_key(
        self, interval: timedelta, deduplicated: Deduplicated | None = None
    ) -> KStream:
        """Drops records whose key was forwarded within ``interval`` of their timestamp
        (KIP-655). Records with a null key are always forwarded. Repartitions after a key
        change. ``deduplicated=Deduplicated.as_(name)`` names the store."""
        return self._deduplicate("by_key", interval, deduplicated)

    def deduplicate_by_key_value(
        self,
        id_selector: Callable[[Any, Any], Any],
        interval: timedelta,
        deduplicated: Deduplicated | None = None,
    ) -> KStream:
        """Like ``deduplicate_by_key``, on the pair (key, ``id_selector(key, value)``);
        a record with a null key or a null id is always forwarded."""
        return self._deduplicate("by_key_value", interval, deduplicated, id_selector)

    def deduplicate(
        self,
        id_selector: Callable[[Any, Any], Any],
        interval: timedelta,
        deduplicated: Deduplicated | None = None,
    ) -> KStream:
        """Drops records whose id ``id_selector(key, value)`` was forwarded within
        ``interval`` across all partitions: repartitions by id (topic ``<store>-repartition``).
        Forwarded records keep their key and value; a null id is always forwarded."""
        return self._deduplicate("by_id", interval, deduplicated, id_selector)

    def _deduplicate(
        self,
        how: str,
        interval: timedelta,
        deduplicated: Deduplicated | None,
        id_selector: Callable[[Any, Any], Any] | None = None,
    ) -> KStream:
        from lakestate.dsl.deduplicated import add_deduplication

        name, repartition_required = add_deduplication(
            self._graph,
            self._node,
            self._repartition_required,
            how,
            interval,
            deduplicated,
            id_selector,
        )
        return KStream(self._graph, name, repartition_required, self.serdes)

    def join(self, other: KStream | KTable | GlobalKTable, *args: Any) -> KStream:
        """Inner join.

        With a table: ``join(table, joiner[, joined])``, each record joined with the
        table's row for its key, ``joiner(stream_value, table_value)`` (``Joined``: the
        repartition topic's serdes and the join's name); read as of the record's timestamp
        when the table is versioned (KIP-914), its latest row otherwise. Records without a
        row are dropped. With a global table, ``join(global_table, key_selector, joiner)``
        looks up ``key_selector(key, value)``. Records with a null value or join key are
        dropped (metric ``dropped-records``).

        With a stream: ``join(other_stream, joiner, JoinWindows, stream_joined=None)``, each
        pair of records with the same key at most the windows' difference apart, joined as
        ``joiner(value, other_value)`` at the larger timestamp (Kafka's stream-stream join;
        both sides buffered for before + after + grace; null keys and values dropped).

        A key change upstream makes a stream go through a repartition topic first."""
        return self._join(other, args, "inner")

    def left_join(self, other: KStream | KTable | GlobalKTable, *args: Any) -> KStream:
        """Like ``join``, but a record without a partner is joined with None: with a table
        at once (also a null join key, or a lookup beyond a versioned table's history
        retention); with a stream once its window has closed (stream time past its
        timestamp + after + grace), never before, and a null-key record at once."""
        return self._join(other, args, "left")

    def outer_join(
        self,
        other: KStream,
        joiner: Callable[[Any, Any], Any],
        windows: JoinWindows,
        stream_joined: StreamJoined | None = None,
    ) -> KStream:
        """Stream-stream outer join: like ``left_join`` with a stream, and the other side's
        records without a partner are emitted too, as ``joiner(None, other_value)``."""
        from lakestate.dsl.stream_joins import stream_stream_join

        if not isinstance(other, KStream):
            raise TopologyException(
                "outer_join() of a stream takes (other_stream, joiner, JoinWindows); a stream "
                f"has no outer join with {type(other).__name__}"
            )
        return stream_stream_join(self, other, joiner, windows, "outer", stream_joined)

    def _join(self, other: Any, args: tuple[Any, ...], how: str) -> KStream:
        from lakestate.dsl.stream_joins import stream_stream_join

        if isinstance(other, KStream):
            if len(args) not in (2, 3):
                raise TopologyException(
                    "a join with a stream takes (other_stream, joiner, JoinWindows[, StreamJoined])"
                )
            stream_joined = args[2] if len(args) == 3 else None
            return stream_stream_join(self, other, args[0], args[1], how, stream_joined)
        return self._table_join(other, args, how == "left")

    def _table_join(self, other: Any, args: tuple[Any, ...], left: bool) -> KStream:
        from lakestate.dsl.joins import stream_global_table_join, stream_table_join
        from lakestate.dsl.ktable import GlobalKTable

        if isinstance(other, GlobalKTable):
            if len(args) != 2:
                raise TopologyException(
                    "a join with a global table takes (global_table, key_selector, joiner)"
                )
            return stream_global_table_join(self, other, args[0], args[1], left)
        if len(args) not in (1, 2):
            raise TopologyException("a join with a table takes (table, joiner[, Joined])")
        return stream_table_join(self, other, args[0], left, args[1] if len(args) == 2 else None)

    def group_by_key(self, grouped: Grouped | None = None) -> KGroupedStream:
        """Groups by the current key, for an aggregation; ``grouped``: the repartition
        topic's name and serdes (if the key changed before) and the store's default serdes
        (not given: the stream's serdes, as Kafka's ``groupByKey()``)."""
        from lakestate.dsl.grouped import KGroupedStream

        if grouped is None:  # Kafka's Grouped.with(keySerde, valueSerde) of the stream
            carried = Grouped(None, known(self.serdes.key), known(self.serdes.value))
            return KGroupedStream(self._graph, self._node, self._repartition_required, carried)
        grouped = grouped_of(grouped, "group_by_key")
        return KGroupedStream(self._graph, self._node, self._repartition_required, grouped)

    def group_by(
        self, key_selector: Callable[[Any, Any], Any], grouped: Grouped | None = None
    ) -> KGroupedStream:
        """Groups by ``key_selector(key, value)``; the aggregation reads through a repartition
        (``grouped``: its topic's name and serdes, and the store's default serdes; not
        given: the stream's value serde; the key-selecting node takes the Grouped name, as
        in Kafka)."""
        from lakestate.dsl.grouped import KGroupedStream

        if grouped is None:  # Kafka's Grouped.with(null, valueSerde) of the stream
            grouped = Grouped(None, None, known(self.serdes.value))
        grouped = grouped_of(grouped, "group_by")
        keyed = self._then(
            "KSTREAM-KEY-SELECT-",
            lambda _: lambda: SelectKey(key_selector),
            key_changing=True,
            fn=key_selector,
            signature="key_selector(key, value)",
            operator="group_by",
            name=grouped.name,
        )
        return KGroupedStream(self._graph, keyed._node, True, grouped)
