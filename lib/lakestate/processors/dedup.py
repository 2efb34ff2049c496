"""Deduplication (KIP-655): ``deduplicate_by_key``, ``deduplicate_by_key_value``, ``deduplicate``.

Per task, a ``DedupStore`` keeps for each deduplication id the timestamp and offset of the
last record forwarded. With ``interval`` I and stream time T (the current record included),
each record is handled so:

1. Entries older than T - I (ts < T - I) are purged, by a range scan of the time index.
2. A record with a null id (null key for ``deduplicate_by_key``, null key or null id for
   ``deduplicate_by_key_value``, null id for ``deduplicate``) is forwarded, never
   deduplicated, and not stored.
3. If the store's entry for the id was read at this record's offset of this record's topic,
   the record is being processed again (at-least-once replay): it is forwarded again. A
   record without an offset (no record metadata) is never taken for a replay.
4. If the store holds an entry for the id with ``|entry.ts - ts| <= I`` (both ends
   inclusive), the record is a duplicate: it is dropped and the store is not touched.
5. Otherwise the record is forwarded. It is stored only if it is not late: a record older
   than T - I would be purged at once, so it is forwarded (no duplicate was found in the
   store) but not stored.

Records are processed in offset order, so of two duplicates the first one (least offset)
is forwarded.

Metrics (task-level, through ``context.metric``; ``driver.metrics()`` sums them over tasks):

- ``dedup-records-forwarded``: records forwarded (null ids, late records and replays included)
- ``dedup-duplicates-dropped``: duplicates dropped
- ``dedup-late-records-forwarded``: late records forwarded (not stored)
- ``dedup-store-size``: ids held by the node's dedup store, a value of the store's scope
  (the count the store maintains beside its entries: one read, no scan), set when the task
  opens and after each chunk's inserts and purges

The first three are counts of the node (they add up over batches), the last a value of the
store (``lakestate.processors.metrics``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from lakestate.processors.api import Processor
from lakestate.processors.chunk import Chunk
from lakestate.records import Record
from lakestate.state.dedup import DedupEntry, source_tag

RECORDS_FORWARDED = "dedup-records-forwarded"
DUPLICATES_DROPPED = "dedup-duplicates-dropped"
LATE_RECORDS_FORWARDED = "dedup-late-records-forwarded"
STORE_SIZE = "dedup-store-size"

# ``deduplicate`` repartitions by id: the record travels keyed by its id, with its original
# key and value in the value, {"k": key, "v": value}. A record with a null id cannot be keyed
# by it (a repartition sink drops null keys), so it travels keyed by its original key (or,
# if that is null too, by NO_ID_PARTITION_KEY) and is marked {"k", "v", "no_id": true}.
WRAPPED_KEY = "k"
WRAPPED_VALUE = "v"
NO_ID = "no_id"
NO_ID_PARTITION_KEY = 0

_SKIP = object()  # dedup_id() result: forward without deduplication


class Deduplicate(Processor):
    """The deduplication step; subclasses say what the id is and what is forwarded."""

    chunked = True

    def __init__(self, store_name: str, interval_ms: int) -> None:
        self.store_name = store_name
        self.interval_ms = interval_ms

    def init(self, context) -> None:
        super().init(context)
        self.store = context.get_state_store(self.store_name)
        self.store.ensure_index()
        self.context.set_metric(STORE_SIZE, self.store.size(), store=self.store_name)
        self._tags: dict[str, int] = {}  # topic -> source_tag(topic)
        # What the last chunk stores: id key -> (ts, offset, source); the entries its ids
        # held before (read in process_chunk, so put_many need not read them again); the
        # cutoff it purges.
        self._pending: dict[bytes, tuple[int, int, int]] = {}
        self._pending_held: dict[bytes, DedupEntry | None] = {}
        self._pending_cutoff: int | None = None

    def dedup_id(self, record: Record) -> Any:
        """The record's deduplication id, or ``_SKIP`` to forward it as it is."""
        raise NotImplementedError

    def output(self, record: Record) -> Record:
        """What is forwarded for ``record``."""
        return record

    def dedup_ids(self, records: list[Record]) -> list[Any]:
        """``[dedup_id(r) for r in records]``: each record's id, or ``_SKIP``."""
        dedup_id = self.dedup_id
        return [dedup_id(record) for record in records]

    def process_chunk(self, chunk: Chunk) -> Chunk:
        """KIP-655 for each record in turn, with the store's reads and writes kept in a
        dict until ``finish_chunk``: an entry older than a record's cutoff (its stream time
        minus the interval) counts as purged, and the purge runs once, at the last record's
        cutoff, which removes the same entries as purging at every record would (cutoffs
        only grow). A record without a topic (no metadata) has no source or offset. The
        checks are ``_verdict``'s, inlined (an entry is ``(ts, offset, source)``)."""
        interval = self.interval_ms
        offsets, stream_times, positions = chunk.offsets, chunk.stream_times, chunk.at
        topic = chunk.topic
        source = None if topic is None else self._tags.get(topic)
        if source is None and topic is not None:
            source = self._tags[topic] = source_tag(topic)
        records = chunk.records
        id_keys, held = self._held(records)  # held: id key -> stored entry (None: none)
        seen: dict[bytes, Any] = dict(held)  # id key -> entry as of this record
        stored: dict[bytes, tuple[int, int, int]] = {}
        out: list[Record] = []
        at: list[int] = []
        dropped = late = 0
        cutoff = None
        for record, id_key, p in zip(records, id_keys, positions, strict=True):
            cutoff = stream_times[p] - interval
            if id_key is None:
                out.append(record)
                at.append(p)
                continue
            offset = offsets[p]
            entry = seen[id_key]
            timestamp = record.timestamp
            if entry is not None and entry[0] >= cutoff:  # else purged by now: new
                if offset is not None and entry[1] == offset and entry[2] == source:
                    out.append(record)  # processed again: forwarded, store untouched
                    at.append(p)
                    continue
                if abs(entry[0] - timestamp) <= interval:
                    dropped += 1  # a duplicate
                    continue
            out.append(record)
            at.append(p)
            if timestamp < cutoff:
                late += 1
                continue
            seen[id_key] = stored[id_key] = (timestamp, offset, source)
        self._pending, self._pending_held, self._pending_cutoff = stored, held, cutoff
        self._count(len(out), dropped, late)
        if type(self).output is not Deduplicate.output:
            out = list(map(self.output, out))
        return chunk.with_records(out, at)

    def _count(self, forwarded: int, dropped: int, late: int) -> None:
        context = self.context
        if forwarded:
            context.metric(RECORDS_FORWARDED, forwarded)
        if dropped:
            context.metric(DUPLICATES_DROPPED, dropped)
        if late:
            context.metric(LATE_RECORDS_FORWARDED, late)

    def _held(
        self, records: list[Record]
    ) -> tuple[list[bytes | None], dict[bytes, DedupEntry | None]]:
        """Each record's id key (None: forwarded without deduplication), and the entry
        the store holds for each id of the chunk (None: none), read in one multi-get."""
        ids = self.dedup_ids(records)
        wanted = [i for i in ids if i is not _SKIP]
        id_keys: list[Any] = self.store.id_keys(wanted)
        if len(wanted) < len(ids):
            encoded = iter(id_keys)
            id_keys = [None if i is _SKIP else next(encoded) for i in ids]
        distinct = list(dict.fromkeys(k for k in id_keys if k is not None))
        return id_keys, dict(zip(distinct, self.store.get_many_by_key(distinct), strict=True))

    def finish_chunk(self) -> None:
        store = self.store
        pending, self._pending = self._pending, {}
        held, self._pending_held = self._pending_held, {}
        cutoff, self._pending_cutoff = self._pending_cutoff, None
        added = (
            store.put_many(((k, *entry) for k, entry in pending.items()), held) if pending else 0
        )
        if cutoff is not None:
            added -= store.purge_expired(cutoff)
        if added:
            self.context.set_metric(STORE_SIZE, store.size(), store=self.store_name)


class DeduplicateByKey(Deduplicate):
    """The id is the key; records with a null key are forwarded."""

    def dedup_id(self, record: Record) -> Any:
        return _SKIP if record.key is None else record.key

    def dedup_ids(self, records: list[Record]) -> list[Any]:
        return [_SKIP if r.key is None else r.key for r in records]


class DeduplicateByKeyValue(Deduplicate):
    """The id is ``(key, id_selector(key, value))``; a null key or a null id is forwarded."""

    def __init__(
        self, store_name: str, interval_ms: int, id_selector: Callable[[Any, Any], Any]
    ) -> None:
        super().__init__(store_name, interval_ms)
        self.id_selector = id_selector

    def dedup_id(self, record: Record) -> Any:
        if record.key is None:
            return _SKIP
        selected = self.id_selector(record.key, record.value)
        return _SKIP if selected is None else (record.key, selected)


class DeduplicateRepartitioned(Deduplicate):
    """``deduplicate`` after its repartition: the id is the key; the original key and value
    are restored from the wrapped value, so the forwarded record is the one read."""

    def dedup_id(self, record: Record) -> Any:
        return _SKIP if record.value.get(NO_ID) else record.key

    def output(self, record: Record) -> Record:
        value = record.value
        return Record(value[WRAPPED_KEY], value[WRAPPED_VALUE], record.timestamp, record.headers)


class DeduplicationIdSelect(Processor):
    """Before ``deduplicate``'s repartition: keys each record by its id, the original key
    and value wrapped in the value."""

    chunked = True

    def __init__(self, id_selector: Callable[[Any, Any], Any]) -> None:
        self.id_selector = id_selector

    def process_chunk(self, chunk: Chunk) -> Chunk:
        return chunk.with_records([self._select(r) for r in chunk.records])

    def _select(self, record: Record) -> Record:
        dedup_id = self.id_selector(record.key, record.value)
        wrapped = {WRAPPED_KEY: record.key, WRAPPED_VALUE: record.value}
        if dedup_id is None:
            wrapped[NO_ID] = True
            key = NO_ID_PARTITION_KEY if record.key is None else record.key
            return Record(key, wrapped, record.timestamp, record.headers)
        return Record(dedup_id, wrapped, record.timestamp, record.headers)
