"""KTable (a changelog read as a table) and GlobalKTable."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from lakestate.dsl.arguments import check_function
from lakestate.dsl.builder import VERSIONED, GraphBuilder, table_store_spec
from lakestate.dsl.consumed import Grouped, grouped_of
from lakestate.dsl.materialized import Materialized
from lakestate.errors import TopologyException
from lakestate.processors.table import (
    TableFilter,
    TableMapValues,
    TableRepartitionMap,
    TableToStream,
)
from lakestate.serdes import DEFAULT_SERDES, JSON, TopicSerdes

if TYPE_CHECKING:
    from lakestate.dsl.grouped import KGroupedTable
    from lakestate.dsl.kstream import KStream
    from lakestate.dsl.suppressed import Suppressed


class KTable:
    """A table: the latest value per key. Updates flow downstream as changes (new, old)."""

    def __init__(
        self,
        graph: GraphBuilder,
        node: str,
        store_name: str | None,
        window_grace_ms: int | None = None,
        versioned: bool = False,
        serdes: TopicSerdes = DEFAULT_SERDES,
    ) -> None:
        self._graph = graph
        self._node = node
        self._store_name = store_name
        self._window_grace_ms = window_grace_ms
        self._versioned = versioned
        # The key and value serdes known downstream (Kafka's KTableImpl's; Json: none):
        # its store's for a source table, to_table, an aggregation or a materialized
        # result; filter and suppress keep them, map_values and an unmaterialized join the
        # key serde; a windowed table knows its value serde only (windowed.windowed_serdes);
        # to_stream passes them on (see KStream.serdes).
        self.serdes = serdes

    @property
    def is_versioned(self) -> bool:
        """Whether this table is versioned (KIP-914): materialized ``as_versioned`` here or
        upstream, with only unmaterialized ``filter``/``filter_not``/``map_values`` in
        between. Its changes carry ``Change.is_latest``; aggregations and table-table joins
        skip out-of-order ones, ``filter`` forwards every tombstone, ``suppress`` is refused.
        Defined on the upstream topology only, as Kafka does: aggregations, joins,
        ``suppress`` and ``to_stream().to_table()`` give unversioned tables (unless
        ``to_table`` is materialized versioned)."""
        return self._versioned

    @property
    def node_name(self) -> str:
        return self._node

    @property
    def window_grace_ms(self) -> int | None:
        """For a windowed table (keys are ``Windowed``): its windows' grace period in ms,
        which ``suppress(until_window_closes)`` waits for; None for other tables."""
        return self._window_grace_ms

    @property
    def query_store_name(self) -> str | None:
        """The store holding this table's rows, if it is materialized."""
        return self._store_name

    def _materialized_child(
        self,
        prefix: str,
        materialized: Materialized | None,
        factory_of: Callable[[str | None], Any],
        fn: Any,
        operator: str,
        signature: str,
        keeps_value_serde: bool = True,
    ) -> KTable:
        name = self._graph.new_name(prefix)
        check_function(fn, name, f"KTable.{operator}", signature)
        store = None
        # Without its own store the result inherits versioned-ness; with one, the store says.
        versioned = self._versioned
        serdes = TopicSerdes(self.serdes.key, self.serdes.value if keeps_value_serde else JSON)
        if materialized is not None:
            store = self._graph.store_name(materialized, f"{prefix}STATE-STORE-")
            # Kafka's doFilter/doMapValues: the store takes the Materialized serdes, else
            # the ones the result knows; the result knows its store's.
            spec = table_store_spec(store, materialized, serdes)
            self._graph.add_store(spec, name)
            versioned = spec.kind == VERSIONED
            serdes = spec.serdes
        self._graph.add_processor(name, self._node, factory_of(store), [store] if store else [])
        return KTable(self._graph, name, store, versioned=versioned, serdes=serdes)

    def filter(
        self, predicate: Callable[[Any, Any], bool], materialized: Materialized | None = None
    ) -> KTable:
        """Rows for which ``predicate(key, value)`` is false become deletes downstream."""
        versioned = self._versioned
        return self._materialized_child(
            "KTABLE-FILTER-",
            materialized,
            lambda s: lambda: TableFilter(predicate, False, s, versioned),
            predicate,
            "filter",
            "predicate(key, value)",
        )

    def filter_not(
        self, predicate: Callable[[Any, Any], bool], materialized: Materialized | None = None
    ) -> KTable:
        versioned = self._versioned
        return self._materialized_child(
            "KTABLE-FILTER-",
            materialized,
            lambda s: lambda: TableFilter(predicate, True, s, versioned),
            predicate,
            "filter_not",
            "predicate(key, value)",
        )

    def map_values(
        self, mapper: Callable[[Any], Any], materialized: Materialized | None = None
    ) -> KTable:
        """Each row's value becomes ``mapper(value)``; deletes stay deletes."""
        return self._materialized_child(
            "KTABLE-MAPVALUES-",
            materialized,
            lambda s: lambda: TableMapValues(mapper, s),
            mapper,
            "map_values",
            "mapper(value)",
            keeps_value_serde=False,
        )

    def to_stream(self) -> KStream:
        """The table's updates as a stream (a delete is a record with a null value)."""
        from lakestate.dsl.kstream import KStream

        name = self._graph.new_name("KTABLE-TOSTREAM-")
        self._graph.add_processor(name, self._node, TableToStream)
        return KStream(self._graph, name, repartition_required=False, serdes=self.serdes)

    def suppress(self, suppressed: Suppressed) -> KTable:
        """Holds back updates as ``suppressed`` says (KIP-328): final window results
        (``Suppressed.until_window_closes``, windowed tables only) or at most one update per
        key per time limit (``Suppressed.until_time_limit``). The result is not
        materialized; see dsl/suppressed.py and processors/suppress.py."""
        from lakestate.dsl.suppressed import add_suppression

        spec = self._graph.stores.get(self._store_name) if self._store_name else None
        # A versioned table may have no store of its own (an unmaterialized filter of one).
        kind = VERSIONED if self._versioned else (None if spec is None else spec.kind)
        name = add_suppression(
            self._graph, self._node, suppressed, self._window_grace_ms, kind, self.serdes
        )
        # Kafka's KTableImpl.suppress: the result keeps this table's key and value serdes.
        grace = self._window_grace_ms
        return KTable(self._graph, name, None, window_grace_ms=grace, serdes=self.serdes)

    def join(self, other: KTable, *args: Any, materialized: Materialized | None = None) -> KTable:
        """``join(other, joiner)``: primary-key inner join, a row for each key both tables
        hold, ``joiner(this_value, other_value)``, updated when either side changes (its
        timestamp the larger of the two rows'); an out-of-order update of a versioned side
        gives no new result (KIP-914).

        ``join(other, foreign_key_extractor, joiner)``: foreign-key join (KIP-213), each row
        joined with the row of ``other`` whose key is ``foreign_key_extractor(value)``;
        changing or deleting a row's foreign key retracts its old result, an answer for a
        row that changed since is dropped (see dsl/fk_join.py). ``materialized`` (also
        the last positional argument) keeps the result in a queryable store."""
        return self._join(other, args, materialized, "inner")

    def left_join(
        self, other: KTable, *args: Any, materialized: Materialized | None = None
    ) -> KTable:
        """Like ``join``, with a row for every row of this table (``other_value`` None)."""
        return self._join(other, args, materialized, "left")

    def _join(
        self, other: KTable, args: tuple, materialized: Materialized | None, how: str
    ) -> KTable:
        from lakestate.dsl.fk_join import foreign_key_join
        from lakestate.dsl.joins import table_table_join

        if args and isinstance(args[-1], Materialized):
            if materialized is not None:
                raise TopologyException("KTable join: materialized given twice")
            args, materialized = args[:-1], args[-1]
        if len(args) == 1:
            return table_table_join(self, other, args[0], how, materialized)
        if len(args) == 2:
            return foreign_key_join(self, other, args[0], args[1], how == "left", materialized)
        raise TopologyException(
            "KTable join takes (other, joiner) or (other, foreign_key_extractor, joiner), "
            f"then materialized; got {len(args)} arguments after the table"
        )

    def outer_join(
        self,
        other: KTable,
        joiner: Callable[[Any, Any], Any],
        materialized: Materialized | None = None,
    ) -> KTable:
        """Like ``join``, with a row for every key of either table (the missing side None)."""
        from lakestate.dsl.joins import table_table_join

        return table_table_join(self, other, joiner, "outer", materialized)

    def group_by(
        self, selector: Callable[[Any, Any], tuple[Any, Any]], grouped: Grouped | None = None
    ) -> KGroupedTable:
        """Re-groups rows by ``selector(key, value) -> (new_key, new_value)``, for an
        aggregation that subtracts a row's old value and adds its new one. On a versioned
        table, out-of-order updates are not aggregated (KIP-914). ``grouped``: the
        repartition topic's name and key serde and the store's default serdes (the
        selecting node takes the Grouped name, as in Kafka)."""
        from lakestate.dsl.grouped import KGroupedTable

        grouped = grouped_of(grouped, "KTable.group_by")
        name = grouped.name or self._graph.new_name("KTABLE-SELECT-")
        check_function(selector, name, "KTable.group_by", "selector(key, value)")
        versioned = self._versioned
        self._graph.add_processor(
            name, self._node, lambda: TableRepartitionMap(selector, versioned)
        )
        return KGroupedTable(self._graph, name, grouped)


@dataclass(frozen=True)
class GlobalKTable:
    """A table replicated whole to every task, kept in a global store."""

    topic: str
    query_store_name: str
