"""Windowed streams: a grouped stream cut into time windows (tumbling, hopping or sliding)
or sessions, then aggregated into a windowed KTable (keys ``Windowed(key, Window(start,
end))``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from lakestate.dsl.arguments import check_function
from lakestate.dsl.builder import GraphBuilder
from lakestate.dsl.consumed import Grouped
from lakestate.dsl.ktable import KTable
from lakestate.dsl.materialized import Materialized, aggregate_store_serdes, count_serde
from lakestate.dsl.windows import SessionWindows, SlidingWindows, TimeWindows
from lakestate.processors.aggregate import (
    count_aggregator,
    count_initializer,
    reducer_as_aggregator,
)
from lakestate.processors.sliding_window_aggregate import SlidingWindowedAggregate
from lakestate.processors.windowed_aggregate import (
    SessionWindowedAggregate,
    TimeWindowedAggregate,
)
from lakestate.serdes import (
    JSON,
    JsonSerde,
    Serde,
    SessionWindowedSerde,
    TimeWindowedSerde,
    TopicSerdes,
)
from lakestate.topology.graph import StoreSpec

WINDOW = "window"
SESSION = "session"


class _Windowed:
    # The Grouped of the grouped stream: its repartition topic's name and serdes.
    _grouped: Grouped = Grouped()

    def __init__(self, graph: GraphBuilder, node: str, repartition_required: bool) -> None:
        self._graph = graph
        self._node = node
        self._repartition_required = repartition_required

    def _add(
        self,
        prefix: str,
        materialized: Materialized | None,
        kind: str,
        checks: tuple[tuple[Any, str], ...],
        factory_of: Callable[[str, int | None], Callable[[], Any]],
        close_after_ms: int,
        operator: str,
        value_serde: Serde | None = None,
    ) -> KTable:
        # Kafka names windowed nodes and stores like the unwindowed ones.
        name = self._graph.new_name(prefix)
        retention = _retention(materialized, self._windows, f"{type(self).__name__}.{operator}")
        for fn, signature in checks:
            check_function(fn, name, f"{type(self).__name__}.{operator}", signature)
        store = self._graph.store_name(materialized, f"{prefix}STATE-STORE-")
        parent, grouped = self._node, self._grouped
        if self._repartition_required:
            parent = self._graph.repartition(
                parent,
                f"{grouped.name or store}-repartition",
                named=grouped.name is not None,
                serdes=grouped.serdes,
            )
        # Kafka's rules, as unwindowed: Materialized's, else the Grouped key serde and the
        # operator's value serde (``value_serde``).
        serdes = aggregate_store_serdes(grouped, materialized, value_serde)
        self._graph.add_store(StoreSpec(store, kind, serdes=serdes), name)
        self._graph.add_processor(name, parent, factory_of(store, retention), [store])
        return KTable(
            self._graph,
            name,
            store,
            window_grace_ms=close_after_ms,
            serdes=windowed_serdes(serdes, self._windows),
        )


def windowed_serdes(
    store: TopicSerdes, windows: TimeWindows | SlidingWindows | SessionWindows
) -> TopicSerdes:
    """What a windowed table knows of its keys and values (Kafka's): a windowed serde of
    its store's key serde (the key's bytes, then the window's: ``FullTimeWindowedSerde``
    of the size or time difference, ``SessionWindowedSerde``), none for a Json one, and
    its store's value serde."""
    key: Serde = JSON
    if type(store.key) is not JsonSerde:
        if isinstance(windows, SessionWindows):
            key = SessionWindowedSerde(store.key)
        elif isinstance(windows, SlidingWindows):
            key = TimeWindowedSerde(store.key, windows.time_difference_ms)
        else:
            key = TimeWindowedSerde(store.key, windows.size_ms)
    return TopicSerdes(key, store.value)


def _retention(
    materialized: Materialized | None,
    windows: TimeWindows | SlidingWindows | SessionWindows,
    operator: str,
) -> int | None:
    """The store's retention (``Materialized.with_retention``; None: Kafka's default, the
    time a window closes), checked as Kafka checks it."""
    retention = None if materialized is None else materialized.retention_ms
    if retention is None:
        return None
    if isinstance(windows, SlidingWindows):
        raise ValueError(
            f"{operator}: Materialized.with_retention is not supported for SlidingWindows "
            "yet; drop it (the store keeps each window until it closes)"
        )
    if isinstance(windows, SessionWindows):
        what, least = "inactivity gap", windows.gap_ms + windows.grace_ms
    else:
        what, least = "window size", windows.size_ms + windows.grace_ms
    if retention < least:
        raise ValueError(
            f"{operator}: Materialized.with_retention({retention} ms) is shorter than the "
            f"{what} plus grace ({least} ms): a window would be dropped before it closes; "
            f"give at least {least} ms"
        )
    return retention


class TimeWindowedKStream(_Windowed):
    """A grouped stream in time windows: tumbling or hopping (``TimeWindows``) or sliding
    (``SlidingWindows``, KIP-450), as Kafka's ``TimeWindowedKStream``."""

    def __init__(
        self,
        graph: GraphBuilder,
        node: str,
        repartition_required: bool,
        windows: TimeWindows | SlidingWindows,
    ) -> None:
        super().__init__(graph, node, repartition_required)
        self._windows = windows

    def _aggregate(
        self,
        initializer: Callable[[], Any] | None,
        aggregator: Callable[[Any, Any, Any], Any],
        materialized: Materialized | None,
        checks: tuple[tuple[Any, str], ...] = (),
        prefix: str = "KSTREAM-AGGREGATE-",
        operator: str = "count",
        value_serde: Serde | None = None,
    ) -> KTable:
        windows = self._windows
        processor = (
            SlidingWindowedAggregate
            if isinstance(windows, SlidingWindows)
            else TimeWindowedAggregate
        )
        return self._add(
            prefix,
            materialized,
            WINDOW,
            checks,
            lambda store, retention: (
                lambda: processor(
                    store,
                    windows,
                    initializer,
                    aggregator,
                    *(() if retention is None else (retention,)),
                )
            ),
            windows.close_after_ms,
            operator,
            value_serde,
        )

    def count(self, materialized: Materialized | None = None) -> KTable:
        """The number of records per key and window (null values count in time windows,
        not in sliding windows, as in Kafka); the store's value serde: Long unless given."""
        return self._aggregate(
            count_initializer, count_aggregator, materialized, value_serde=count_serde()
        )

    def aggregate(
        self,
        initializer: Callable[[], Any],
        aggregator: Callable[[Any, Any, Any], Any],
        materialized: Materialized | None = None,
    ) -> KTable:
        """Per key and window: ``agg = aggregator(key, value, agg)``, from ``initializer()``."""
        checks = ((initializer, "initializer()"), (aggregator, "aggregator(key, value, agg)"))
        return self._aggregate(initializer, aggregator, materialized, checks, operator="aggregate")

    def reduce(
        self, reducer: Callable[[Any, Any], Any], materialized: Materialized | None = None
    ) -> KTable:
        """Per key and window: the first value, then ``reducer(agg, value)``."""
        return self._aggregate(
            None,
            reducer_as_aggregator(reducer),
            materialized,
            ((reducer, "reducer(agg, value)"),),
            prefix="KSTREAM-REDUCE-",
            operator="reduce",
            value_serde=self._grouped.value_serde,
        )


class SessionWindowedKStream(_Windowed):
    """A grouped stream in session windows."""

    def __init__(
        self, graph: GraphBuilder, node: str, repartition_required: bool, windows: SessionWindows
    ) -> None:
        super().__init__(graph, node, repartition_required)
        self._windows = windows

    def _aggregate(
        self,
        initializer: Callable[[], Any] | None,
        aggregator: Callable[[Any, Any, Any], Any],
        merger: Callable[[Any, Any, Any], Any],
        materialized: Materialized | None,
        checks: tuple[tuple[Any, str], ...] = (),
        prefix: str = "KSTREAM-AGGREGATE-",
        operator: str = "count",
        value_serde: Serde | None = None,
    ) -> KTable:
        windows = self._windows
        return self._add(
            prefix,
            materialized,
            SESSION,
            checks,
            lambda store, retention: (
                lambda: SessionWindowedAggregate(
                    store, windows, initializer, aggregator, merger, retention
                )
            ),
            windows.close_after_ms,
            operator,
            value_serde,
        )

    def count(self, materialized: Materialized | None = None) -> KTable:
        """The number of records per key and session (the store's value serde: Long
        unless given)."""
        return self._aggregate(
            count_initializer,
            count_aggregator,
            lambda _k, a, b: a + b,
            materialized,
            value_serde=count_serde(),
        )

    def aggregate(
        self,
        initializer: Callable[[], Any],
        aggregator: Callable[[Any, Any, Any], Any],
        merger: Callable[[Any, Any, Any], Any],
        materialized: Materialized | None = None,
    ) -> KTable:
        """Per key and session: ``aggregator(key, value, agg)`` from ``initializer()``;
        ``merger(key, agg1, agg2)`` combines two sessions that a record joins."""
        checks = (
            (initializer, "initializer()"),
            (aggregator, "aggregator(key, value, agg)"),
            (merger, "merger(key, agg1, agg2)"),
        )
        return self._aggregate(
            initializer, aggregator, merger, materialized, checks, operator="aggregate"
        )

    def reduce(
        self, reducer: Callable[[Any, Any], Any], materialized: Materialized | None = None
    ) -> KTable:
        """Per key and session: the first value, then ``reducer(agg, value)``; merged
        sessions are reduced together, older first."""
        return self._aggregate(
            None,
            reducer_as_aggregator(reducer),
            lambda _k, a, b: reducer(a, b),
            materialized,
            ((reducer, "reducer(agg, value)"),),
            prefix="KSTREAM-REDUCE-",
            operator="reduce",
            value_serde=self._grouped.value_serde,
        )
