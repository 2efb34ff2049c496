"""Cogrouped streams (KIP-150): several grouped streams aggregated into one table.

``grouped.cogroup(aggregator)`` starts a ``CogroupedKStream``; ``.cogroup(other, aggregator)``
adds another grouped stream with its own aggregator; ``.aggregate(initializer)`` (or
``.windowed_by(windows).aggregate(...)``) builds the table. The wiring is Kafka's
(CogroupedStreamAggregateBuilder): each input has its own aggregate node
(``COGROUPKSTREAM-AGGREGATE-``), all sharing one store, and their updates meet in one
``COGROUPKSTREAM-MERGE-`` node, the resulting table. An input whose key changed is
repartitioned first (through ``<store>-repartition``); the store puts every input in one
sub-topology, so they must be co-partitioned (checked when a run starts).

As in Kafka, each input's node keeps its own observed stream time (a windowed input's
late records are judged by its own records' times), while the store's retention follows
every input's writes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from lakestate.dsl.arguments import check_function
from lakestate.dsl.builder import TIMESTAMPED_KEY_VALUE, GraphBuilder
from lakestate.dsl.ktable import KTable
from lakestate.dsl.materialized import Materialized, store_serdes
from lakestate.dsl.windowed import SESSION, WINDOW, windowed_serdes
from lakestate.dsl.windows import SessionWindows, SlidingWindows, TimeWindows
from lakestate.errors import TopologyException
from lakestate.processors.aggregate import StreamAggregate
from lakestate.processors.sliding_window_aggregate import SlidingWindowedAggregate
from lakestate.processors.stateless import PassThrough
from lakestate.processors.windowed_aggregate import (
    SessionWindowedAggregate,
    TimeWindowedAggregate,
)
from lakestate.serdes import TopicSerdes
from lakestate.topology.graph import StoreSpec

if TYPE_CHECKING:
    from lakestate.dsl.grouped import KGroupedStream

AGGREGATE_NAME = "COGROUPKSTREAM-AGGREGATE-"
MERGE_NAME = "COGROUPKSTREAM-MERGE-"
AGGREGATOR = "aggregator(key, value, agg)"

# (store name, node name, the input's aggregator) -> the input's processor factory
FactoryOf = Callable[[str, str, Callable[[Any, Any, Any], Any]], Callable[[], Any]]


class CogroupedKStream:
    """Grouped streams to be aggregated together, each with its aggregator (Kafka's
    ``CogroupedKStream``). Cogrouping the same grouped stream again replaces its
    aggregator, as in Kafka."""

    def __init__(self, graph: GraphBuilder) -> None:
        self._graph = graph
        # grouped stream's node -> (grouped stream, aggregator), in the order added
        self._inputs: dict[int, tuple[KGroupedStream, Callable[[Any, Any, Any], Any]]] = {}

    def cogroup(
        self, grouped: KGroupedStream, aggregator: Callable[[Any, Any, Any], Any]
    ) -> CogroupedKStream:
        """Adds ``grouped``: each of its records is folded in by
        ``agg = aggregator(key, value, agg)``."""
        from lakestate.dsl.grouped import KGroupedStream

        if not isinstance(grouped, KGroupedStream) or grouped._graph is not self._graph:
            raise TopologyException(
                f"cogroup() takes a KGroupedStream of the same StreamsBuilder, got {grouped!r}"
            )
        check_function(aggregator, "cogroup", "CogroupedKStream.cogroup", AGGREGATOR)
        self._inputs[id(grouped)] = (grouped, aggregator)
        return self

    def aggregate(
        self, initializer: Callable[[], Any], materialized: Materialized | None = None
    ) -> KTable:
        """Per key: from ``initializer()``, each input's records folded in by its
        aggregator. Records with a null key or value are dropped, as in ``aggregate``."""
        return build_cogroup(
            self._graph,
            list(self._inputs.values()),
            initializer,
            materialized,
            TIMESTAMPED_KEY_VALUE,
            lambda store, node, agg: lambda: StreamAggregate(store, initializer, agg),
        )

    def windowed_by(
        self, windows: TimeWindows | SlidingWindows | SessionWindows
    ) -> TimeWindowedCogroupedKStream | SessionWindowedCogroupedKStream:
        """The cogroup aggregated per key and window: ``TimeWindows``, ``SlidingWindows``
        or ``SessionWindows`` (then ``aggregate`` takes a session merger too)."""
        if isinstance(windows, TimeWindows | SlidingWindows):
            return TimeWindowedCogroupedKStream(self, windows)
        if isinstance(windows, SessionWindows):
            return SessionWindowedCogroupedKStream(self, windows)
        raise TopologyException(
            "CogroupedKStream.windowed_by takes TimeWindows, SlidingWindows or SessionWindows, "
            f"got {type(windows).__name__}"
        )


class TimeWindowedCogroupedKStream:
    """A cogroup in time windows (tumbling, hopping) or sliding windows (KIP-450)."""

    def __init__(self, cogrouped: CogroupedKStream, windows: TimeWindows | SlidingWindows):
        self._cogrouped = cogrouped
        self._windows = windows

    def aggregate(
        self, initializer: Callable[[], Any], materialized: Materialized | None = None
    ) -> KTable:
        """Per key and window: from ``initializer()``, each input's records folded in by
        its aggregator. The result is a windowed table."""
        windows = self._windows
        sliding = isinstance(windows, SlidingWindows)

        def factory_of(store: str, node: str, agg: Callable) -> Callable[[], Any]:
            if sliding:
                return lambda: SlidingWindowedAggregate(
                    store, windows, initializer, agg, state_key=node
                )
            return lambda: TimeWindowedAggregate(store, windows, initializer, agg, state_key=node)

        inputs = list(self._cogrouped._inputs.values())
        graph = self._cogrouped._graph
        return build_cogroup(graph, inputs, initializer, materialized, WINDOW, factory_of, windows)


class SessionWindowedCogroupedKStream:
    """A cogroup in session windows."""

    def __init__(self, cogrouped: CogroupedKStream, windows: SessionWindows) -> None:
        self._cogrouped = cogrouped
        self._windows = windows

    def aggregate(
        self,
        initializer: Callable[[], Any],
        merger: Callable[[Any, Any, Any], Any],
        materialized: Materialized | None = None,
    ) -> KTable:
        """Per key and session: from ``initializer()``, each input's records folded in by
        its aggregator; ``merger(key, agg1, agg2)`` combines sessions a record joins."""
        check_function(merger, "cogroup", "SessionWindowedCogroupedKStream", "merger(key, a, b)")
        windows = self._windows
        graph = self._cogrouped._graph
        return build_cogroup(
            graph,
            list(self._cogrouped._inputs.values()),
            initializer,
            materialized,
            SESSION,
            lambda store, node, agg: (
                lambda: SessionWindowedAggregate(
                    store, windows, initializer, agg, merger, state_key=node
                )
            ),
            windows,
        )


def build_cogroup(
    graph: GraphBuilder,
    inputs: list[tuple[KGroupedStream, Callable[[Any, Any, Any], Any]]],
    initializer: Callable[[], Any],
    materialized: Materialized | None,
    kind: str,
    factory_of: FactoryOf,
    windows: TimeWindows | SlidingWindows | SessionWindows | None = None,
) -> KTable:
    """Kafka's CogroupedStreamAggregateBuilder: the store, each input's (repartitioned)
    aggregate node on it, and the merge node that is the table."""
    from lakestate.dsl.grouped import check_unversioned

    check_function(initializer, "cogroup", "CogroupedKStream.aggregate", "initializer()")
    store = graph.store_name(materialized, f"{AGGREGATE_NAME}STATE-STORE-")
    check_unversioned(materialized, store)
    if materialized is not None and materialized.retention_ms is not None:
        raise ValueError(
            "CogroupedKStream.aggregate: Materialized.with_retention is not supported for a "
            "cogroup yet; drop it (the shared store keeps each window until it closes)"
        )
    if not inputs:
        raise TopologyException("CogroupedKStream.aggregate: no grouped stream was cogrouped")
    parents, unnamed = [], 0
    for grouped, _ in inputs:
        parent = grouped._node
        if grouped._repartition_required:
            # Kafka's: the topic <Grouped name or store>-repartition, with the grouped
            # stream's serdes (its Grouped's, else the ones it carried). Kafka fails on a
            # second unnamed one (the same topic); here it gets a topic of its own.
            name = grouped._grouped.name
            if name is None:
                name = store if unnamed == 0 else f"{store}-{unnamed}"
                unnamed += 1
            topic = f"{name}-repartition"
            named = grouped._grouped.name is not None
            parent = graph.repartition(parent, topic, named=named, serdes=grouped._grouped.serdes)
        parents.append(parent)
    nodes = [graph.new_name(AGGREGATE_NAME) for _ in inputs]
    # Kafka's: the store takes the Materialized serdes only (a cogroup knows no key or value
    # serde of its own); without them it stays Json.
    given = materialized is not None and materialized.has_serdes
    serdes = store_serdes(materialized) if given else TopicSerdes()
    # The first node materializes the store; the others share it (Kafka's "stateCreated").
    graph.add_store(StoreSpec(store, kind, serdes=serdes), nodes[0])
    for name, parent, (_, aggregator) in zip(nodes, parents, inputs, strict=True):
        graph.add_processor(name, parent, factory_of(store, name, aggregator), [store])
    merge = graph.new_name(MERGE_NAME)
    graph.add_processor(merge, nodes[0], PassThrough, other_parents=tuple(nodes[1:]))
    for parent in parents[1:]:
        graph.copartition_groups.append(
            (nodes[0], graph.source_nodes(parents[0]), graph.source_nodes(parent))
        )
    if windows is None:
        return KTable(graph, merge, store, serdes=serdes)
    table_serdes = windowed_serdes(serdes, windows)
    return KTable(graph, merge, store, window_grace_ms=windows.close_after_ms, serdes=table_serdes)
