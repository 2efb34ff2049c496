"""KTable operators. Tables forward Change(new_value, old_value) records.

A table aggregation subtracts the old value and adds the new one, so an update to an
upstream row moves its contribution from one group to another.

Versioned tables (KIP-914): a processor writing a versioned store (state/versioned.py)
forwards what the store accepted, flagged ``Change.is_latest`` when it became the key's
latest version (``put`` returned -1); a put beyond history retention (NOT_PUT) is dropped.
Processors given ``versioned_semantics`` (their input table is versioned, decided by the
DSL) apply KIP-914's rules: the filter forwards every tombstone, ``group_by`` skips
out-of-order (not latest) changes so aggregations ignore them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from lakestate.processors.api import Processor
from lakestate.processors.chunk import Chunk
from lakestate.processors.metrics import DROPPED_RECORDS
from lakestate.records import Change, Record
from lakestate.state.constants import PUT_RETURN_CODE_NOT_PUT, PUT_RETURN_CODE_VALID_TO_UNDEFINED
from lakestate.state.versioned import VersionedKeyValueStore


def put_and_change(
    store: Any, record: Record, new_value: Any, old_value: Any, is_latest: bool
) -> Change | None:
    """Put ``new_value`` into ``store`` and return the change to forward, or None to forward
    nothing. A versioned store decides ``is_latest`` (its put returns -1 for the latest
    version, a valid-to for an older one) and refuses puts beyond history retention; an
    unversioned store is offset-ordered, so what it holds is always the latest."""
    if isinstance(store, VersionedKeyValueStore):
        code = store.put(record.key, new_value, record.timestamp)
        if code == PUT_RETURN_CODE_NOT_PUT:
            return None
        return Change(new_value, old_value, code == PUT_RETURN_CODE_VALID_TO_UNDEFINED)
    if store is not None:
        store.put(record.key, new_value, record.timestamp)
        return Change(new_value, old_value)
    return Change(new_value, old_value, is_latest)


class TableSource(Processor):
    """Materializes a topic as a table: the latest value per key; a null value deletes.

    Every accepted record is forwarded as ``Change(value, previous latest value)``, a
    tombstone for a key the table never held too (``Change(None, None)``, as Kafka 4's
    KTableSource does). With a versioned store, a record older than the key's latest
    version goes into the history and is forwarded with ``is_latest=False``; one beyond
    history retention is dropped (metric ``dropped-records``).
    """

    forwards_store_changes = True

    def __init__(self, store_name: str) -> None:
        self.store_name = store_name

    def init(self, context) -> None:
        super().init(context)
        self.store = context.get_state_store(self.store_name)

    def process(self, record: Record) -> None:
        if record.key is None:
            self.context.metric(DROPPED_RECORDS)
            return
        if isinstance(self.store, VersionedKeyValueStore):  # the latest by timestamp
            latest = self.store.get(record.key)
            old_value = None if latest is None else latest.value
        else:
            old_value = self.store.get(record.key)
        change = put_and_change(self.store, record, record.value, old_value, True)
        if change is None:
            self.context.metric(DROPPED_RECORDS)
            return
        self.context.forward(record.with_value(change))


class _MaterializingTableProcessor(Processor):
    """Base of table operators that may keep their result in a store."""

    forwards_store_changes = True

    def __init__(self, store_name: str | None) -> None:
        self.store_name = store_name

    def init(self, context) -> None:
        super().init(context)
        self.store = context.get_state_store(self.store_name) if self.store_name else None

    def emit(self, record: Record, new_value: Any, old_value: Any) -> None:
        if old_value is None and self.store is not None and self.context.cached:
            # Into the record cache, the store's old value (as Kafka's caching store reads
            # it at a flush): an upstream sending none while the row exists (a session
            # put) would hide from the cache that downstream holds the key.
            old_value = self.store.get(record.key)
        change = put_and_change(self.store, record, new_value, old_value, record.value.is_latest)
        if change is None:
            # A versioned store refused it (beyond history retention): Kafka's versioned
            # store counts that in dropped-records.
            self.context.metric(DROPPED_RECORDS)
            return
        self.context.forward(record.with_value(change))


class TableFilter(_MaterializingTableProcessor):
    """Rows failing the predicate become deletes. A delete of a row that was already absent
    downstream is dropped, except on a versioned table (``versioned_semantics``): there an
    out-of-order record may land before it, so every tombstone is part of the history."""

    def __init__(
        self,
        predicate: Callable[[Any, Any], bool],
        negate: bool,
        store_name: str | None,
        versioned_semantics: bool = False,
    ) -> None:
        super().__init__(store_name)
        self.predicate = predicate
        self.negate = negate
        self.versioned_semantics = versioned_semantics

    def _keep(self, key: Any, value: Any) -> Any:
        if value is None:
            return None
        return value if bool(self.predicate(key, value)) != self.negate else None

    def process(self, record: Record) -> None:
        change: Change = record.value
        new_value = self._keep(record.key, change.new_value)
        old_value = self._keep(record.key, change.old_value)
        if new_value is None and old_value is None and not self.versioned_semantics:
            return
        self.emit(record, new_value, old_value)


class TableMapValues(_MaterializingTableProcessor):
    """Maps each row's value (deletes stay deletes). Forwards every change, a delete of an
    absent row too, as Kafka's KTableMapValues does."""

    def __init__(self, mapper: Callable[[Any], Any], store_name: str | None) -> None:
        super().__init__(store_name)
        self.mapper = mapper

    def _map(self, value: Any) -> Any:
        return None if value is None else self.mapper(value)

    def process(self, record: Record) -> None:
        change: Change = record.value
        self.emit(record, self._map(change.new_value), self._map(change.old_value))


class TableToStream(Processor):
    """Forwards each table update as a plain record carrying the new value."""

    chunked = True

    def process_chunk(self, chunk: Chunk) -> Chunk:
        columns = chunk.columns
        if columns is not None and columns.olds is not None:  # changes as columns: drop one
            return chunk.with_columns(columns.new_values())
        return chunk.with_records([r.with_value(r.value.new_value) for r in chunk.records])


class TableRepartitionMap(Processor):
    """``group_by`` on a table: re-keys the old and the new value with ``selector``.

    When both map to the same key they travel as one change; otherwise the old value is
    sent (to be subtracted) before the new one (to be added). On a versioned table
    (``versioned_semantics``) an out-of-order change (``is_latest`` False) is dropped here,
    so the aggregation downstream holds the latest-by-timestamp rows only (KIP-914) and the
    repartition topic needs no flag.
    """

    def __init__(
        self, selector: Callable[[Any, Any], tuple[Any, Any]], versioned_semantics: bool = False
    ) -> None:
        self.selector = selector
        self.versioned_semantics = versioned_semantics

    def _select(self, key: Any, value: Any) -> tuple[Any, Any] | None:
        """The (key, value) pair a row is regrouped by, or None when it is not regrouped:
        no row, or a pair with a null key or value (skipped, as Kafka's
        KTableRepartitionMap skips them, uncounted)."""
        if value is None:
            return None
        pair = self.selector(key, value)
        if not isinstance(pair, tuple) or len(pair) != 2:
            raise TypeError(f"selector must return a (key, value) tuple, got {pair!r}")
        return None if pair[0] is None or pair[1] is None else pair

    def process(self, record: Record) -> None:
        change: Change = record.value
        if self.versioned_semantics and not change.is_latest:
            return
        new = self._select(record.key, change.new_value)
        old = self._select(record.key, change.old_value)
        ts = record.timestamp
        if new is not None and old is not None and new[0] == old[0]:
            self.context.forward(Record(new[0], Change(new[1], old[1]), ts))
            return
        if old is not None:
            self.context.forward(Record(old[0], Change(None, old[1]), ts))
        if new is not None:
            self.context.forward(Record(new[0], Change(new[1], None), ts))


class TableAggregate(Processor):
    """Grouped-table aggregate: ``subtractor`` removes the old value, ``adder`` adds the new.

    For reduce, ``initializer`` is None and the first added value becomes the aggregate.
    """

    forwards_store_changes = True

    def __init__(
        self,
        store_name: str,
        initializer: Callable[[], Any] | None,
        adder: Callable[[Any, Any, Any], Any],
        subtractor: Callable[[Any, Any, Any], Any],
    ) -> None:
        self.store_name = store_name
        self.initializer = initializer
        self.adder = adder
        self.subtractor = subtractor

    def init(self, context) -> None:
        super().init(context)
        self.store = context.get_state_store(self.store_name)

    def process(self, record: Record) -> None:
        if record.key is None:
            self.context.metric(DROPPED_RECORDS)
            return
        change: Change = record.value
        old = self.store.get_with_timestamp(record.key)
        old_agg = None if old is None else old.value
        timestamp = record.timestamp if old is None else max(record.timestamp, old.timestamp)
        agg = old_agg
        if change.old_value is not None and old_agg is not None:
            agg = self.subtractor(record.key, change.old_value, old_agg)
        if change.new_value is not None:
            if agg is None:
                agg = (
                    change.new_value
                    if self.initializer is None
                    else self.adder(record.key, change.new_value, self.initializer())
                )
            else:
                agg = self.adder(record.key, change.new_value, agg)
        self.store.put(record.key, agg, timestamp)
        self.context.forward(Record(record.key, Change(agg, old_agg), timestamp))
