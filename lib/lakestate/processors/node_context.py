"""The ProcessorContext a task gives each of its nodes (processors/api.py's protocol)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from lakestate.processors.columns import Columns
from lakestate.processors.metrics import NODES, STORES
from lakestate.processors.punctuation import Cancellable
from lakestate.records import Record, RecordMetadata

#: Per node, the records it forwarded downstream (Kafka's processor-node metric of that name).
FORWARD_TOTAL = "forward-total"


class NodeContext:
    """The ProcessorContext one node sees."""

    def __init__(self, task: Any, node: str, children: list[str]) -> None:
        self._task = task
        self._node = node
        self._children = children
        # Set by the task when this node's updates go through its record cache.
        self.cached = False

    @property
    def node(self) -> str:
        """The name of the node this context belongs to."""
        return self._node

    @property
    def task_id(self) -> int:
        return self._task.partition

    @property
    def stream_time(self) -> int:
        return self._task.stream_time

    @property
    def record_metadata(self) -> RecordMetadata | None:
        return self._task.current_metadata

    @property
    def application_id(self) -> str:
        return self._task.application_id

    def forward(self, record: Record, child: str | None = None) -> None:
        if self.cached and child is None:
            for flushed in self._task.cached.put(self._node, record):
                self.forward_now(flushed)
            return
        self.forward_now(record, child)

    def forward_now(self, record: Record, child: str | None = None) -> None:
        """Forward ``record`` past the record cache (what it flushes)."""
        self._task.metrics.add(NODES, self._node, FORWARD_TOTAL)
        targets = self._children if child is None else [child]
        for name in targets:
            self._task.process_at(name, record)

    @property
    def children(self) -> list[str]:
        return list(self._children)

    def schedule(self, interval_ms: int, callback: Any) -> Cancellable:
        return self._task.schedule(self._node, interval_ms, callback)

    def send_many(self, topic: str, records: Sequence[Record]) -> None:
        self._task.send_many(topic, records)

    def send_columns(self, topic: str, columns: Columns) -> None:
        self._task.send_columns(topic, columns)

    def get_state_store(self, name: str) -> Any:
        return self._task.store_view(name)

    def _scope(self, store: str | None) -> tuple[str, str]:
        return (NODES, self._node) if store is None else (STORES, store)

    def metric(self, name: str, delta: float = 1, store: str | None = None) -> None:
        self._task.metrics.add(*self._scope(store), name, delta)

    def set_metric(self, name: str, value: float, store: str | None = None) -> None:
        self._task.metrics.set(*self._scope(store), name, value)

    def get_metric(self, name: str, store: str | None = None) -> float:
        return self._task.metrics.get(*self._scope(store), name)

    def derive_metrics(
        self,
        source: Callable[[Callable[[str], float | None]], Iterable[tuple[str, float, str | None]]],
    ) -> None:
        node = self._node

        def derived(values: dict) -> None:
            def held(name: str) -> float | None:
                return values.get((NODES, node, name))

            for name, value, store in source(held):
                values[(NODES, node, name) if store is None else (STORES, store, name)] = value

        self._task.metrics.derive(derived)

    def processor_metadata(self, key: str) -> int | None:
        return self._task.processor_metadata.get(key)

    def set_processor_metadata(self, key: str, value: int) -> None:
        self._task.processor_metadata[key] = value
