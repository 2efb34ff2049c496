"""Stream aggregations (count, aggregate, reduce) into a timestamped key-value store.

Records with a null key or a null value are dropped (counted in "dropped-records"), as in
Kafka Streams. The result is a table: each update is forwarded as a Change.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from lakestate.processors.api import Processor
from lakestate.records import Change, Record


class StreamAggregate(Processor):
    """``aggregator(key, value, agg)`` folds each record into the key's aggregate.

    For reduce, ``initializer`` is None and the first value becomes the aggregate.
    """

    def __init__(
        self,
        store_name: str,
        initializer: Callable[[], Any] | None,
        aggregator: Callable[[Any, Any, Any], Any],
    ) -> None:
        self.store_name = store_name
        self.initializer = initializer
        self.aggregator = aggregator

    def init(self, context) -> None:
        super().init(context)
        self.store = context.get_state_store(self.store_name)

    def process(self, record: Record) -> None:
        if record.key is None or record.value is None:
            self.context.metric("dropped-records")
            return
        old = self.store.get_with_timestamp(record.key)
        if old is None:
            timestamp = record.timestamp
            if self.initializer is None:
                new_agg = record.value
            else:
                new_agg = self.aggregator(record.key, record.value, self.initializer())
        else:
            timestamp = max(record.timestamp, old.timestamp)
            new_agg = self.aggregator(record.key, record.value, old.value)
        self.store.put(record.key, new_agg, timestamp)
        old_agg = None if old is None else old.value
        self.context.forward(Record(record.key, Change(new_agg, old_agg), timestamp))


def reducer_as_aggregator(reducer: Callable[[Any, Any], Any]) -> Callable[[Any, Any, Any], Any]:
    return lambda _key, value, agg: reducer(agg, value)


def count_aggregator(_key: Any, _value: Any, agg: int) -> int:
    return agg + 1


def count_initializer() -> int:
    return 0
