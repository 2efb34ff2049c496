"""Grouped streams and tables: the aggregations."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from lakestate.dsl.arguments import check_function
from lakestate.dsl.builder import TIMESTAMPED_KEY_VALUE, GraphBuilder
from lakestate.dsl.ktable import KTable
from lakestate.dsl.materialized import Materialized
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
    """A stream grouped by key. Records with a null key or value are not aggregated."""

    def __init__(self, graph: GraphBuilder, node: str, repartition_required: bool) -> None:
        self._graph = graph
        self._node = node
        self._repartition_required = repartition_required

    def _aggregate(
        self,
        initializer: Callable[[], Any] | None,
        aggregator: Callable[[Any, Any, Any], Any],
        materialized: Materialized | None,
        checks: tuple[tuple[Any, str], ...] = (),
        prefix: str = "KSTREAM-AGGREGATE-",
        operator: str = "",
    ) -> KTable:
        # Kafka names reduce nodes and their stores KSTREAM-REDUCE-*.
        name = self._graph.new_name(prefix)
        for fn, signature in checks:
            check_function(fn, name, f"KGroupedStream.{operator}", signature)
        store = self._graph.store_name(materialized, f"{prefix}STATE-STORE-")
        check_unversioned(materialized, name)
        parent = self._node
        if self._repartition_required:
            parent = self._graph.repartition(parent, f"{store}-repartition")
        self._graph.add_store(StoreSpec(store, TIMESTAMPED_KEY_VALUE), name)
        self._graph.add_processor(
            name, parent, lambda: StreamAggregate(store, initializer, aggregator), [store]
        )
        return KTable(self._graph, name, store)

    def windowed_by(
        self, windows: TimeWindows | SlidingWindows | SessionWindows
    ) -> TimeWindowedKStream | SessionWindowedKStream:
        """Aggregate per key and window: ``TimeWindows`` (tumbling, hopping),
        ``SlidingWindows`` (KIP-450) or ``SessionWindows``. The result is a windowed KTable."""
        if isinstance(windows, TimeWindows | SlidingWindows):
            return TimeWindowedKStream(self._graph, self._node, self._repartition_required, windows)
        if isinstance(windows, SessionWindows):
            return SessionWindowedKStream(
                self._graph, self._node, self._repartition_required, windows
            )
        raise TopologyException(
            "windowed_by takes TimeWindows, SlidingWindows or SessionWindows, got "
            f"{type(windows).__name__}"
        )

    def cogroup(self, aggregator: Callable[[Any, Any, Any], Any]) -> CogroupedKStream:
        """Starts a cogroup (KIP-150) with this stream folded in by
        ``aggregator(key, value, agg)``; add more grouped streams with ``.cogroup(other,
        aggregator)``, then ``.aggregate(initializer)`` builds one table of them all."""
        from lakestate.dsl.cogrouped import CogroupedKStream

        return CogroupedKStream(self._graph).cogroup(self, aggregator)

    def count(self, materialized: Materialized | None = None) -> KTable:
        """The number of records per key."""
        return self._aggregate(count_initializer, count_aggregator, materialized)

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
        )


class KGroupedTable:
    """A re-grouped table. Aggregations always read through a repartition topic."""

    def __init__(self, graph: GraphBuilder, node: str) -> None:
        self._graph = graph
        self._node = node

    def _aggregate(
        self,
        initializer: Callable[[], Any] | None,
        adder: Callable[[Any, Any, Any], Any],
        subtractor: Callable[[Any, Any, Any], Any],
        materialized: Materialized | None,
        checks: tuple[tuple[Any, str], ...] = (),
        prefix: str = "KTABLE-AGGREGATE-",
        operator: str = "",
    ) -> KTable:
        # Kafka names a table reduce KTABLE-REDUCE-*; its store stays KTABLE-AGGREGATE-STATE-STORE-*.
        name = self._graph.new_name(prefix)
        for fn, signature in checks:
            check_function(fn, name, f"KGroupedTable.{operator}", signature)
        store = self._graph.store_name(materialized, "KTABLE-AGGREGATE-STATE-STORE-")
        check_unversioned(materialized, name)
        source = self._graph.repartition(self._node, f"{store}-repartition", carries_changes=True)
        self._graph.add_store(StoreSpec(store, TIMESTAMPED_KEY_VALUE), name)
        self._graph.add_processor(
            name, source, lambda: TableAggregate(store, initializer, adder, subtractor), [store]
        )
        return KTable(self._graph, name, store)

    def count(self, materialized: Materialized | None = None) -> KTable:
        """The number of rows per new key."""
        return self._aggregate(
            count_initializer, lambda k, v, agg: agg + 1, lambda k, v, agg: agg - 1, materialized
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
        )
