"""Grouped streams and tables: the aggregations."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from lakestate.dsl.arguments import check_function
from lakestate.dsl.builder import TIMESTAMPED_KEY_VALUE, GraphBuilder
from lakestate.dsl.consumed import Grouped
from lakestate.dsl.ktable import KTable
from lakestate.dsl.materialized import Materialized, aggregate_store_serdes, count_serde
from lakestate.dsl.windowed import SessionWindowedKStream, TimeWindowedKStream
from lakestate.dsl.windows import SessionWindows, SlidingWindows, TimeWindows
from lakestate.errors import TopologyException
from lakestate.processors.aggregate import (
    StreamAggregate,
    count_aggregator,
    count_initializer,
    reducer_as_aggregator,
)
from lakestate.processors.table import TableAggregate
from lakestate.serdes import JSON, Serde, TopicSerdes
from lakestate.topology.graph import StoreSpec

if TYPE_CHECKING:
    from lakestate.dsl.cogrouped import CogroupedKStream


def check_unversioned(materialized: Materialized | None, node: str) -> None:
    """Aggregation results are kept in key-value stores: refuse ``as_versioned`` rather than
    silently give an unversioned table."""
    if materialized is not None and materialized.is_versioned:
        raise TopologyException(
            f"node {node}: aggregations cannot be materialized as versioned stores yet; "
            "use Materialized.as_(name)"
        )


class KGroupedStream:
    """A stream grouped by key. Records with a null key or value are not aggregated.
    ``grouped``: the repartition topic's name and serdes (when one is needed) and the
    store's default serdes (the stream's when none was given)."""

    def __init__(
        self,
        graph: GraphBuilder,
        node: str,
        repartition_required: bool,
        grouped: Grouped | None = None,
    ) -> None:
        self._graph = graph
        self._node = node
        self._repartition_required = repartition_required
        self._grouped = grouped or Grouped()

    def _aggregate(
        self,
        initializer: Callable[[], Any] | None,
        aggregator: Callable[[Any, Any, Any], Any],
        materialized: Materialized | None,
        checks: tuple[tuple[Any, str], ...] = (),
        prefix: str = "KSTREAM-AGGREGATE-",
        operator: str = "",
        value_serde: Serde | None = None,
    ) -> KTable:
        # Kafka names reduce nodes and their stores KSTREAM-REDUCE-*.
        name = self._graph.new_name(prefix)
        for fn, signature in checks:
            check_function(fn, name, f"KGroupedStream.{operator}", signature)
        store = self._graph.store_name(materialized, f"{prefix}STATE-STORE-")
        check_unversioned(materialized, name)
        parent, grouped = self._node, self._grouped
        if self._repartition_required:
            topic = f"{grouped.name or store}-repartition"
            parent = self._graph.repartition(
                parent, topic, named=grouped.name is not None, serdes=grouped.serdes
            )
        serdes = aggregate_store_serdes(grouped, materialized, value_serde)
        self._graph.add_store(StoreSpec(store, TIMESTAMPED_KEY_VALUE, serdes=serdes), name)
        self._graph.add_processor(
            name, parent, lambda: StreamAggregate(store, initializer, aggregator), [store]
        )
        return KTable(self._graph, name, store, serdes=serdes)

    def windowed_by(
        self, windows: TimeWindows | SlidingWindows | SessionWindows
    ) -> TimeWindowedKStream | SessionWindowedKStream:
        """Aggregate per key and window: ``TimeWindows`` (tumbling, hopping),
        ``SlidingWindows`` (KIP-450) or ``SessionWindows``. The result is a windowed KTable."""
        windowed: TimeWindowedKStream | SessionWindowedKStream
        if isinstance(windows, TimeWindows | SlidingWindows):
            windowed = TimeWindowedKStream(
                self._graph, self._node, self._repartition_required, windows
            )
        elif isinstance(windows, SessionWindows):
            windowed = SessionWindowedKStream(
                self._graph, self._node, self._repartition_required, windows
            )
        else:
            raise TopologyException(
                "windowed_by takes TimeWindows, SlidingWindows or SessionWindows, got "
                f"{type(windows).__name__}"
            )
        windowed._grouped = self._grouped
        return windowed

    def cogroup(self, aggregator: Callable[[Any, Any, Any], Any]) -> CogroupedKStream:
        """Starts a cogroup (KIP-150) with this stream folded in by
        ``aggregator(key, value, agg)``; add more grouped streams with ``.cogroup(other,
        aggregator)``, then ``.aggregate(initializer)`` builds one table of them all. As
        in Kafka, this stream's Grouped (name and serdes, else the serdes it carried) names
        and types its repartition topic, if it needs one; the store takes the Materialized
        serdes of ``aggregate`` only."""
        from lakestate.dsl.cogrouped import CogroupedKStream

        return CogroupedKStream(self._graph).cogroup(self, aggregator)

    def count(self, materialized: Materialized | None = None) -> KTable:
        """The number of records per key (the store's value serde: Long unless given)."""
        return self._aggregate(
            count_initializer, count_aggregator, materialized, value_serde=count_serde()
        )

    def aggregate(
        self,
        initializer: Callable[[], Any],
        aggregator: Callable[[Any, Any, Any], Any],
        materialized: Materialized | None = None,
    ) -> KTable:
        """Folds each record in: ``agg = aggregator(key, value, agg)``, from ``initializer()``."""
        checks = ((initializer, "initializer()"), (aggregator, "aggregator(key, value, agg)"))
        return self._aggregate(initializer, aggregator, materialized, checks, operator="aggregate")

    def reduce(
        self, reducer: Callable[[Any, Any], Any], materialized: Materialized | None = None
    ) -> KTable:
        """Combines values: the first value per key, then ``reducer(agg, value)``."""
        return self._aggregate(
            None,
            reducer_as_aggregator(reducer),
            materialized,
            ((reducer, "reducer(agg, value)"),),
            prefix="KSTREAM-REDUCE-",
            operator="reduce",
            value_serde=self._grouped.value_serde,
        )


class KGroupedTable:
    """A re-grouped table. Aggregations always read through a repartition topic
    (``grouped``: its name and key serde, and the store's default serdes)."""

    def __init__(self, graph: GraphBuilder, node: str, grouped: Grouped | None = None) -> None:
        self._graph = graph
        self._node = node
        self._grouped = grouped or Grouped()

    def _aggregate(
        self,
        initializer: Callable[[], Any] | None,
        adder: Callable[[Any, Any, Any], Any],
        subtractor: Callable[[Any, Any, Any], Any],
        materialized: Materialized | None,
        checks: tuple[tuple[Any, str], ...] = (),
        prefix: str = "KTABLE-AGGREGATE-",
        operator: str = "",
        value_serde: Serde | None = None,
    ) -> KTable:
        # Kafka names a table reduce KTABLE-REDUCE-*; its store stays KTABLE-AGGREGATE-STATE-STORE-*.
        name = self._graph.new_name(prefix)
        for fn, signature in checks:
            check_function(fn, name, f"KGroupedTable.{operator}", signature)
        store = self._graph.store_name(materialized, "KTABLE-AGGREGATE-STATE-STORE-")
        check_unversioned(materialized, name)
        grouped = self._grouped
        # The topic carries changes (new and old value): its key is checked by the key
        # serde, its values are not (each is a pair).
        source = self._graph.repartition(
            self._node,
            f"{grouped.name or store}-repartition",
            carries_changes=True,
            named=grouped.name is not None,
            serdes=TopicSerdes(grouped.serdes.key, JSON),
        )
        serdes = aggregate_store_serdes(grouped, materialized, value_serde)
        self._graph.add_store(StoreSpec(store, TIMESTAMPED_KEY_VALUE, serdes=serdes), name)
        self._graph.add_processor(
            name, source, lambda: TableAggregate(store, initializer, adder, subtractor), [store]
        )
        return KTable(self._graph, name, store, serdes=serdes)

    def count(self, materialized: Materialized | None = None) -> KTable:
        """The number of rows per new key (the store's value serde: Long unless given)."""
        return self._aggregate(
            count_initializer,
            lambda k, v, agg: agg + 1,
            lambda k, v, agg: agg - 1,
            materialized,
            value_serde=count_serde(),
        )

    def aggregate(
        self,
        initializer: Callable[[], Any],
        adder: Callable[[Any, Any, Any], Any],
        subtractor: Callable[[Any, Any, Any], Any],
        materialized: Materialized | None = None,
    ) -> KTable:
        """``adder(key, new_value, agg)`` for new rows, ``subtractor(key, old_value, agg)``
        for replaced or deleted ones."""
        checks = (
            (initializer, "initializer()"),
            (adder, "adder(key, value, agg)"),
            (subtractor, "subtractor(key, value, agg)"),
        )
        return self._aggregate(
            initializer, adder, subtractor, materialized, checks, operator="aggregate"
        )

    def reduce(
        self,
        adder: Callable[[Any, Any], Any],
        subtractor: Callable[[Any, Any], Any],
        materialized: Materialized | None = None,
    ) -> KTable:
        """``adder(agg, new_value)`` and ``subtractor(agg, old_value)``."""
        return self._aggregate(
            None,
            reducer_as_aggregator(adder),
            reducer_as_aggregator(subtractor),
            materialized,
            ((adder, "adder(agg, value)"), (subtractor, "subtractor(agg, value)")),
            prefix="KTABLE-REDUCE-",
            operator="reduce",
            value_serde=self._grouped.value_serde,
        )
