"""Kafka's record cache (KIP-63; sized by ``statestore.cache.max.bytes``, KIP-770): the
updates a cached store's processor forwards are held back and coalesced per key until the
task commits, or until the cache is full.

One ``RecordCache`` per task, one named cache per cached node (Kafka: a ``ThreadCache``
holding a ``NamedCache`` per store). The stores themselves are written through as before;
the cache holds what would be forwarded: per key, the newest update and the old value as
it was before the key's first update since the last flush (Kafka reads that old value
from the store under the cache, which is the same value). As in Kafka:

- an entry's size is its key and new value (about their serialized bytes: a string's
  characters, 8 for a number, else JSON text) plus a fixed overhead; a put
  that takes the total above the budget evicts the put-into cache's least recently
  written entries until the total fits (or that cache is empty);
- evicting a dirty entry flushes its whole named cache: the evicted entry first, then
  every other dirty entry in the order of their last update; flushed entries stay, clean,
  and count against the budget until evicted (a clean eviction forwards nothing);
- a flushed key whose newest value is a delete leaves the cache; a key created and deleted
  between two flushes (new and old value both absent) is not forwarded at all.

Recency here is that of writes: reads of the store (a join looking up a table) do not
refresh an entry, as they do in Kafka, whose sizes are those of serialized bytes; so the
moment of an eviction may differ from Kafka's, never what a flush forwards.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from typing import Any

from lakestate.records import Change, Record, Windowed
from lakestate.state.serde import json_text

#: Config keys (Kafka's): the cache's size in bytes; 0 (lakestate's default) forwards
#: every update. The older name is read when the new one is not set (KIP-770).
CACHE_MAX_BYTES = "statestore.cache.max.bytes"
CACHE_MAX_BYTES_OLD = "cache.max.bytes.buffering"
#: Bytes counted per entry beside its key and value (Kafka's entry bookkeeping: dirty flag,
#: offset, timestamp, partition).
ENTRY_OVERHEAD_BYTES = 21


def cache_max_bytes(config: Any) -> int:
    """The cache budget an app's config asks for (0: no cache)."""
    value = config.get(CACHE_MAX_BYTES)
    if value is None:
        value = config.get(CACHE_MAX_BYTES_OLD, 0)
    size = int(value)
    if size < 0:
        raise ValueError(f"{CACHE_MAX_BYTES} must be >= 0, got {size}")
    return size


def _size(value: Any) -> int:
    """About the bytes Kafka's serdes would give ``value``: a string's characters, 8 for a
    number (a long or double), else its JSON text's length."""
    kind = type(value)
    if kind is str:
        return len(value)
    if kind is int or kind is float:
        return 8
    if value is None:
        return 0
    if kind is Windowed:  # the windowed key serde: the key, then the window start
        return _size(value.key) + 8
    text = json_text(value)
    return len(repr(value) if text is None else text)


def _slot(key: Any) -> Hashable:
    """The key as a dict key: itself when hashable, else its JSON text."""
    try:
        hash(key)
        return key
    except TypeError:
        return ("json", json_text(key) or repr(key))


class _Named:
    """One node's cache: entries ``slot -> (latest record, first old value, size)`` in
    least-recently-written-first order, and its dirty slots in order of last update."""

    __slots__ = ("entries", "dirty", "size")

    def __init__(self) -> None:
        self.entries: OrderedDict[Hashable, tuple[Record, Any, int]] = OrderedDict()
        self.dirty: dict[Hashable, None] = {}
        self.size = 0

    def copy(self) -> _Named:
        other = _Named()
        other.entries, other.dirty, other.size = (
            OrderedDict(self.entries),
            dict(self.dirty),
            self.size,
        )
        return other


class RecordCache:
    """The record cache of one task: ``max_bytes`` shared by its cached nodes."""

    def __init__(self, max_bytes: int) -> None:
        if max_bytes <= 0:
            raise ValueError("a record cache needs a budget > 0 bytes")
        self.max_bytes = max_bytes
        self.size = 0
        self._named: dict[str, _Named] = {}
        self.evictions = 0

    def put(self, name: str, record: Record) -> list[Record]:
        """Hold ``record`` (a ``Change`` forwarded by node ``name``) back; returns what an
        eviction this put caused flushes (usually nothing), to forward now in order."""
        flushed = self.put_many(name, [record])
        return flushed[0][1] if flushed else []

    def put_many(self, name: str, records: list[Record]) -> list[tuple[int, list[Record]]]:
        """``put`` of each of ``records`` in turn; returns, for each whose put flushed
        something, its index and what was flushed."""
        named = self._named.get(name)
        if named is None:
            named = self._named[name] = _Named()
        entries, dirty, limit = named.entries, named.dirty, self.max_bytes
        pop, dirty_pop = entries.pop, dirty.pop
        flushes: list[tuple[int, list[Record]]] = []
        for i, record in enumerate(records):
            change: Change = record.value
            key = record.key
            slot = key if type(key) is str or type(key) is int else _slot(key)
            size = _size(key) + _size(change.new_value) + ENTRY_OVERHEAD_BYTES
            held = pop(slot, None)
            if held is None:
                first_old = change.old_value
                grown = size
            else:
                first_old = held[1] if slot in dirty else change.old_value
                grown = size - held[2]
            entries[slot] = (record, first_old, size)
            named.size += grown
            self.size += grown
            dirty_pop(slot, None)
            dirty[slot] = None
            if self.size > limit:
                flushed: list[Record] = []
                while self.size > limit and entries:
                    flushed.extend(self._evict(named))
                if flushed:
                    flushes.append((i, flushed))
        return flushes

    def _evict(self, named: _Named) -> list[Record]:
        """Drop ``named``'s least recently written entry; a dirty one flushes the cache."""
        slot, entry = named.entries.popitem(last=False)
        named.size -= entry[2]
        self.size -= entry[2]
        self.evictions += 1
        if slot not in named.dirty:
            return []
        del named.dirty[slot]
        return _emitted([entry]) + self._flush(named)

    def flush(self, name: str) -> list[Record]:
        """Every dirty entry of node ``name``'s cache, in order of last update, as the
        records to forward; they stay cached, clean."""
        named = self._named.get(name)
        return [] if named is None else self._flush(named)

    def _flush(self, named: _Named) -> list[Record]:
        # Clean now (a clean entry's first old value is never read again); a delete leaves
        # the cache once flushed.
        held = named.entries
        entries = [held[slot] for slot in named.dirty]
        for slot in named.dirty:
            record, _first_old, size = held[slot]
            if record.value.new_value is None:
                del held[slot]
                named.size -= size
                self.size -= size
        named.dirty.clear()
        return _emitted(entries)

    def dirty(self) -> bool:
        """True while some update is held back."""
        return any(named.dirty for named in self._named.values())

    def snapshot(self) -> tuple[int, dict[str, _Named]]:
        """The cache as it stands, for ``restore`` (a chunk that fails is undone)."""
        return self.size, {name: named.copy() for name, named in self._named.items()}

    def restore(self, snapshot: tuple[int, dict[str, _Named]]) -> None:
        self.size, self._named = snapshot[0], snapshot[1]

    def clear(self) -> None:
        """Forget everything (an abort: what was held back is rolled back with the rest)."""
        self.size = 0
        self._named = {}


def _emitted(entries: list[tuple[Record, Any, int]]) -> list[Record]:
    """The records a flush forwards: the newest value with the first old value, the newest
    record's timestamp and headers; nothing for a key both absent before and after."""
    out = []
    for record, first_old, _size in entries:
        new = record.value.new_value
        if new is None and first_old is None:
            continue
        out.append(record.with_value(Change(new, first_old)))
    return out
