"""Stream aggregations (count, aggregate, reduce) into a timestamped key-value store.

Records with a null key or a null value are dropped (counted in "dropped-records"), as in
Kafka Streams. The result is a table: each update is forwarded as a Change.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from lakestate.processors import columnar_count
from lakestate.processors.api import Processor
from lakestate.processors.chunk import Chunk
from lakestate.processors.metrics import DROPPED_RECORDS
from lakestate.records import Change, Record
from lakestate.state.keys import encode_key
from lakestate.state.serde import decode_value, encode_value

# Aggregates of these types are immutable: a chunk keeps them as they are between records.
# Others are kept encoded and decoded for each use, as the store would give them.
_KEPT_AS_IS = frozenset((int, str, bool, bytes, type(None)))


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
        # The built-in count: a chunk of it is counted on columns (columnar_count.py).
        self._is_count = initializer is count_initializer and aggregator is count_aggregator

    chunked = True
    forwards_store_changes = True

    def init(self, context) -> None:
        super().init(context)
        self.store = context.get_state_store(self.store_name)
        self._pending: list[tuple[bytes, bytes | None]] = []

    def _fold(self, record: Record, old_agg: Any, old_ts: int | None) -> tuple[Any, int]:
        """The key's new aggregate and its timestamp, from its old one (None: none)."""
        if old_agg is None:
            if self.initializer is None:
                return record.value, record.timestamp
            return self.aggregator(record.key, record.value, self.initializer()), record.timestamp
        return self.aggregator(record.key, record.value, old_agg), max(record.timestamp, old_ts)

    def process_chunk(self, chunk: Chunk) -> Chunk:
        if self._is_count and len(chunk.records) >= columnar_count.MIN_RECORDS:
            counted = columnar_count.count_chunk(self.store, chunk.records, chunk.at)
            if counted is not None:
                out, at, self._pending, dropped = counted
                if dropped:
                    self.context.metric(DROPPED_RECORDS, dropped)
                return chunk.with_columns(out, at)
        return self._process_records(chunk)

    def _process_records(self, chunk: Chunk) -> Chunk:
        """The chunk record by record (any aggregator)."""
        store, fold = self.store, self._fold
        # key -> (key, aggregate or its JSON, aggregate is encoded, timestamp); a None
        # aggregate is a deleted key.
        latest: dict[Any, tuple] = {}
        out: list[Record] = []
        at: list[int] = []
        dropped = 0
        for i, record in enumerate(chunk.records):
            key, value = record.key, record.value
            if key is None or value is None:
                dropped += 1
                continue
            slot = key if type(key) is str or type(key) is int else encode_key(key)
            entry = latest.get(slot)
            if entry is None:
                old = store.get_with_timestamp(key)
                old_agg, old_ts = (None, None) if old is None else old
            else:
                old_agg = decode_value(entry[1]) if entry[2] else entry[1]
                old_ts = None if old_agg is None else entry[3]
            new_agg, timestamp = fold(record, old_agg, old_ts)
            if type(new_agg) in _KEPT_AS_IS:
                latest[slot] = (key, new_agg, False, timestamp)
            else:  # encoded now: a value the store cannot take fails at its record
                latest[slot] = (key, encode_value(new_agg), True, timestamp)
            out.append(Record(key, Change(new_agg, old_agg), timestamp))
            at.append(chunk.at[i])
        self._pending = [
            store.encode_json_entry(key, agg, ts) if encoded else store.encode_entry(key, agg, ts)
            for key, agg, encoded, ts in latest.values()
        ]
        if dropped:
            self.context.metric(DROPPED_RECORDS, dropped)
        return chunk.with_records(out, at)

    def finish_chunk(self) -> None:
        pending, self._pending = self._pending, []
        if pending:
            self.store.put_encoded(pending)


def reducer_as_aggregator(reducer: Callable[[Any, Any], Any]) -> Callable[[Any, Any, Any], Any]:
    return lambda _key, value, agg: reducer(agg, value)


def count_aggregator(_key: Any, _value: Any, agg: int) -> int:
    return agg + 1


def count_initializer() -> int:
    return 0
