"""``Deduplicated`` (KIP-655): names a deduplication's store, and the DSL wiring of the
three deduplication operators (``KStream.deduplicate_by_key`` / ``_by_key_value`` /
``deduplicate``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from lakestate.dsl.arguments import check_function, duration_ms
from lakestate.dsl.builder import GraphBuilder
from lakestate.dsl.materialized import Materialized
from lakestate.dsl.names import check_store_name
from lakestate.errors import TopologyException
from lakestate.processors.dedup import (
    DeduplicateByKey,
    DeduplicateByKeyValue,
    DeduplicateRepartitioned,
    DeduplicationIdSelect,
)
from lakestate.topology.graph import StoreSpec

DEDUP = "dedup"
PROCESSOR_PREFIX = "KSTREAM-DEDUPLICATE-"
STORE_PREFIX = "KSTREAM-DEDUPLICATE-STATE-STORE-"


@dataclass(frozen=True)
class Deduplicated:
    """Names a deduplication: ``Deduplicated.as_("seen-orders")``.

    The name is the name of the deduplication store, hence of its Delta state table
    (columns ``dedup_id, ts, offset``), and ``<name>-repartition`` names the repartition
    topic when the operation repartitions. Without a name, a generated one
    (``KSTREAM-DEDUPLICATE-STATE-STORE-0000000001``) is used.
    """

    name: str | None = None

    @staticmethod
    def as_(name: str) -> Deduplicated:
        return Deduplicated(_check_name(name))

    def with_name(self, name: str) -> Deduplicated:
        return Deduplicated(_check_name(name))

    @property
    def store_name(self) -> str | None:
        return self.name


def _check_name(name: Any) -> str:
    return check_store_name(name, "Deduplicated")


BY_KEY = "by_key"
BY_KEY_VALUE = "by_key_value"
BY_ID = "by_id"
OPERATORS = {
    BY_KEY: "KStream.deduplicate_by_key",
    BY_KEY_VALUE: "KStream.deduplicate_by_key_value",
    BY_ID: "KStream.deduplicate",
}


def add_deduplication(
    graph: GraphBuilder,
    parent: str,
    repartition_required: bool,
    how: str,
    interval: timedelta,
    deduplicated: Deduplicated | None,
    id_selector: Callable[[Any, Any], Any] | None = None,
) -> tuple[str, bool]:
    """Add a deduplication after node ``parent``; returns the new node's name and whether
    its output needs a repartition before a stateful operation by key."""
    # deduplicate's key selection comes first, so nodes are numbered in graph order.
    select = graph.new_name("KSTREAM-KEY-SELECT-") if how == BY_ID else None
    name = graph.new_name(PROCESSOR_PREFIX)
    if how != BY_KEY:
        check_function(id_selector, name, OPERATORS[how], "id_selector(key, value)")
    interval_ms = duration_ms(interval, "interval", f"node {name}: {OPERATORS[how]}")
    if deduplicated is not None and not isinstance(deduplicated, Deduplicated):
        raise TopologyException(
            f"node {name}: deduplicated must be a Deduplicated, got {deduplicated!r}"
        )
    store = graph.store_name(
        Materialized(deduplicated.store_name) if deduplicated is not None else None,
        STORE_PREFIX,
    )
    topic = f"{store}-repartition"
    if how == BY_ID:
        # Records with the same id must meet in one task: repartition by id, always.
        graph.add_processor(select, parent, lambda: DeduplicationIdSelect(id_selector))
        parent = graph.repartition(select, topic)

        def factory() -> DeduplicateRepartitioned:
            return DeduplicateRepartitioned(store, interval_ms)

    else:
        # By key, like an aggregation: repartition only after a key change.
        if repartition_required:
            parent = graph.repartition(parent, topic)
        if how == BY_KEY:

            def factory() -> DeduplicateByKey:
                return DeduplicateByKey(store, interval_ms)

        else:

            def factory() -> DeduplicateByKeyValue:
                return DeduplicateByKeyValue(store, interval_ms, id_selector)

    graph.add_store(StoreSpec(store, DEDUP), name)
    graph.add_processor(name, parent, factory, [store])
    # deduplicate's output keeps the original keys but is partitioned by id.
    return name, how == BY_ID
