"""Joins: stream-table, stream-global-table and table-table (primary key), as Kafka's
KStreamKTableJoinProcessor and KTableKTable{Inner,Left,Right,Outer}Join.

Stream-table (and stream-global-table): each stream record looks up the table at the
time of the record when the table is versioned (KIP-914: ``get(key, as_of=timestamp)``),
at its latest value otherwise. The table side only updates its store: a table update
never triggers output. As in Kafka 4: a record with a null value is dropped, and so is a
null join key in an inner join (metric ``dropped-records``); a left join forwards a record
whose key is null with a None table value, but drops (and counts) a keyed record whose
global-table key selector returns null. A lookup beyond the versioned store's history retention
finds nothing unless the key's latest version was already valid then (the store's rule),
and "nothing" is handled as any other miss: an inner join drops the record, a left join
forwards it with None (KIP-914).

Table-table: one processor per side, each reading the other side's store (latest value)
when its own side changes; the result's timestamp is the larger of the two rows'. Old
values are always computed (lakestate's tables always forward ``Change(new, old)``). An
update from a versioned side that is not its key's latest version (``Change.is_latest``
False) produces no result (KIP-914), counted in ``dropped-records`` as Kafka counts it;
an out-of-order update from an unversioned side joins as any other.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

from lakestate.processors.api import Processor
from lakestate.processors.chunk import Chunk
from lakestate.processors.metrics import DROPPED_RECORDS
from lakestate.records import Change, Record
from lakestate.state.constants import PUT_RETURN_CODE_NOT_PUT, PUT_RETURN_CODE_VALID_TO_UNDEFINED
from lakestate.state.versioned import VersionedKeyValueStore

DROPPED = DROPPED_RECORDS
_DROP = object()  # a record that joins nothing (its drop already counted)

Joiner = Callable[[Any, Any], Any]
# Which processor a table-table join side runs (Kafka's class names): a left join's left side
# is "left", its right side "right" (the left row survives a right-side delete).
TableJoinHow = Literal["inner", "left", "right", "outer"]


def table_row(store: Any, key: Any) -> tuple[Any, int] | None:
    """(value, timestamp) of ``key``'s current row in a table's store (the latest version
    of a versioned store), or None when the key has none."""
    if isinstance(store, VersionedKeyValueStore):
        found = store.get(key)
    else:
        found = store.get_with_timestamp(key)
    if found is None or found.value is None:
        return None
    return found.value, found.timestamp


class StreamTableJoin(Processor):
    """``stream.join(table)`` / ``left_join``; with ``key_selector``, a join with a global
    table on ``key_selector(key, value)`` (Kafka's KStreamGlobalKTableJoin)."""

    chunked = True

    def __init__(
        self,
        store_name: str,
        joiner: Joiner,
        left: bool,
        versioned: bool,
        key_selector: Callable[[Any, Any], Any] | None = None,
    ) -> None:
        self.store_name = store_name
        self.joiner = joiner
        self.left = left
        self.versioned = versioned
        self.key_selector = key_selector

    def init(self, context: Any) -> None:
        super().init(context)
        self.store = context.get_state_store(self.store_name)
        if self.versioned and not isinstance(self.store, VersionedKeyValueStore):
            raise TypeError(f"store {self.store_name!r} of a versioned table is not versioned")

    def process(self, record: Record) -> None:
        # One record needs no chunk around it: the same _join, forwarded at once.
        result = self._join(record)
        if result is not None:
            self.context.forward(result)

    def process_chunk(self, chunk: Chunk) -> Chunk:
        # The table's store is written by the table's own input, never by this chain: each
        # record's lookup sees what it would see one by one, so a versioned table's lookups
        # are read together.
        if self.versioned and hasattr(self.store, "get_many_as_of"):
            return self._versioned_chunk(chunk)
        joined, at = [], []
        join = self._join
        for record, position in zip(chunk.records, chunk.at, strict=True):
            result = join(record)
            if result is not None:
                joined.append(result)
                at.append(position)
        return chunk.with_records(joined, at)

    def _versioned_chunk(self, chunk: Chunk) -> Chunk:
        keys = [self._join_key(record) for record in chunk.records]
        lookups = [
            (key, record.timestamp)
            for key, record in zip(keys, chunk.records, strict=True)
            if key is not _DROP and key is not None
        ]
        found = iter(self.store.get_many_as_of(lookups))
        joined, at = [], []
        for key, record, position in zip(keys, chunk.records, chunk.at, strict=True):
            if key is _DROP:
                continue
            version = None if key is None else next(found)
            result = self._joined(record, None if version is None else version.value)
            if result is not None:
                joined.append(result)
                at.append(position)
        return chunk.with_records(joined, at)

    def _join(self, record: Record) -> Record | None:
        """The joined record, or None when the record yields none."""
        key = self._join_key(record)
        if key is _DROP:
            return None
        return self._joined(record, None if key is None else self._lookup(key, record.timestamp))

    def _join_key(self, record: Record) -> Any:
        """The table key ``record`` looks up (None: a left join's null key, no lookup), or
        ``_DROP`` (counted) for a record that joins nothing."""
        # A null value is "no record" in a key-value model, and None is what a left join
        # passes for a missing table row: Kafka drops such records rather than be ambiguous.
        if record.value is None:
            self.context.metric(DROPPED)
            return _DROP
        key = (
            record.key if self.key_selector is None else self.key_selector(record.key, record.value)
        )
        # Kafka's KStreamKTableJoinProcessor: a null join key is dropped, except by a left
        # join of a record whose own key is null (so a global table's key selector that
        # returns null for a keyed record drops it, left join or not).
        if key is None and not (self.left and record.key is None):
            self.context.metric(DROPPED)
            return _DROP
        return key

    def _joined(self, record: Record, table_value: Any) -> Record | None:
        if table_value is None and not self.left:
            return None
        return record.with_value(self.joiner(record.value, table_value))

    def _lookup(self, key: Any, timestamp: int) -> Any:
        if self.versioned:
            found = self.store.get(key, timestamp)
            return None if found is None else found.value
        found = self.store.get_with_timestamp(key)
        return None if found is None else found.value


class TableTableJoin(Processor):
    """One side of ``this.join/left_join/outer_join(other)``: joins each change of its side
    with the other side's current row. ``joiner`` takes (this side's value, other side's
    value): the DSL passes the right side a reversed joiner."""

    def __init__(
        self, other_store: str, joiner: Joiner, how: TableJoinHow, versioned: bool
    ) -> None:
        self.other_store = other_store
        self.joiner = joiner
        self.how = how
        self.versioned = versioned  # this side's table is versioned: skip out-of-order changes

    def init(self, context: Any) -> None:
        super().init(context)
        self.other = context.get_state_store(self.other_store)

    def process(self, record: Record) -> None:
        if record.key is None:
            self.context.metric(DROPPED)
            return
        change: Change = record.value
        is_latest = change.is_latest
        if self.versioned and not is_latest:
            # KIP-914: an older version of a key does not change the latest join result.
            self.context.metric(DROPPED)
            return
        other = table_row(self.other, record.key)
        other_value = None if other is None else other[0]
        new, old = change.new_value, change.old_value
        how = self.how
        if other is None:
            if how in ("inner", "right"):
                return
            if new is None and old is None:
                return
        # Kafka's left join takes max(ts, -1) for a missing row: the record's own timestamp.
        timestamp = record.timestamp if other is None else max(record.timestamp, other[1])
        joiner = self.joiner
        if how == "right":
            # This side is a left join's right side: the left row stays, joined with None.
            new_result = joiner(new, other_value)
            old_result = joiner(old, other_value)
        elif how == "outer":
            new_result = (
                joiner(new, other_value) if (new is not None or other is not None) else None
            )
            old_result = (
                joiner(old, other_value) if (old is not None or other is not None) else None
            )
        else:
            new_result = None if new is None else joiner(new, other_value)
            old_result = None if old is None else joiner(old, other_value)
        self.context.forward(
            Record(record.key, Change(new_result, old_result, is_latest), timestamp, record.headers)
        )


class TableJoinMerge(Processor):
    """Where both sides' results meet (Kafka's KTableKTableJoinMerger): the join's table.
    Materialized, it keeps each result in its store; a versioned store decides
    ``is_latest`` and refuses (drops) a result beyond its history retention."""

    def __init__(self, store_name: str | None) -> None:
        self.store_name = store_name

    def init(self, context: Any) -> None:
        super().init(context)
        self.store = context.get_state_store(self.store_name) if self.store_name else None

    def process(self, record: Record) -> None:
        store = self.store
        if store is None:
            self.context.forward(record)
            return
        change: Change = record.value
        if isinstance(store, VersionedKeyValueStore):
            code = store.put(record.key, change.new_value, record.timestamp)
            if code == PUT_RETURN_CODE_NOT_PUT:
                self.context.metric(DROPPED)  # beyond history retention, as Kafka counts it
                return
            is_latest = code == PUT_RETURN_CODE_VALID_TO_UNDEFINED
        else:
            store.put(record.key, change.new_value, record.timestamp)
            is_latest = True
        self.context.forward(
            record.with_value(Change(change.new_value, change.old_value, is_latest))
        )


class TableMaterialize(Processor):
    """Keeps an unmaterialized table's rows in a store, so that a join can read them (Kafka
    computes them on demand through value getters; a store gives the same rows)."""

    def __init__(self, store_name: str) -> None:
        self.store_name = store_name

    def init(self, context: Any) -> None:
        super().init(context)
        self.store = context.get_state_store(self.store_name)

    def process(self, record: Record) -> None:
        if record.key is None:
            return
        change: Change = record.value
        if not change.is_latest:
            return  # an older version never replaces the current row
        self.store.put(record.key, change.new_value, record.timestamp)
