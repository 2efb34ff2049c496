"""Kafka's record cache (KIP-63; sized by ``statestore.cache.max.bytes``, KIP-770): the
updates a cached store's processor forwards are held back and coalesced per key until the
task commits, or until the cache is full.

One ``RecordCache`` per task, one named cache per cached node (Kafka: a ``ThreadCache``
holding a ``NamedCache`` per store). The stores themselves are written through as before;
the cache holds what would be forwarded: per key, the newest update and the old value as
it was before the key's first update since the last flush (Kafka reads that old value
from the store under the cache, which is the same value). So a cached node forwards its
store's old value, None only where the store lacked the key: with no store under it, the
cache knows from that alone whether downstream holds a key. As in Kafka:

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
from typing import Any, NamedTuple

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
    """About the bytes Kafka's serdes would give ``value``: a string's characters (bytes,
    their length), 8 for a number (a long or double), else its JSON text's length."""
    kind = type(value)
    if kind is str or kind is bytes:
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


class CacheMark(NamedTuple):
    """Where a ``RecordCache`` stood at a ``snapshot``: its undo log's length, its size
    and its eviction count."""

    log_length: int
    size: int
    evictions: int


class _Named:
    """One node's cache: entries ``slot -> (latest record, first old value, size, write
    number)`` in least-recently-written-first order (so in write-number order), and its
    dirty slots in order of last update (so in write-number order too)."""

    __slots__ = ("entries", "dirty", "size")

    def __init__(self) -> None:
        self.entries: OrderedDict[Hashable, tuple[Record, Any, int, int]] = OrderedDict()
        self.dirty: dict[Hashable, None] = {}
        self.size = 0

    def reorder(self) -> None:
        """Entries and dirty slots back in write-number order (after an undo put entries
        back at the end), and the size recounted."""
        entries = sorted(self.entries.items(), key=lambda item: item[1][3])
        self.entries = OrderedDict(entries)
        dirty = self.dirty
        self.dirty = {slot: None for slot, _entry in entries if slot in dirty}
        self.size = sum(entry[2] for _slot, entry in entries)


class RecordCache:
    """The record cache of one task: ``max_bytes`` shared by its cached nodes.

    Undo (a chunk that fails is undone): between ``snapshot`` and ``restore``/``release``
    a slot's first change is logged as ``(named, slot, previous entry or None, was
    dirty)``, and a flush's dirty set as ``(named, None, previous dirty dict, None)``;
    undone newest first, each slot ends as its oldest record says. So a chunk costs in
    proportion to the keys it touches, and only an undo touches the whole cache (to put
    entries back in write order)."""

    def __init__(self, max_bytes: int) -> None:
        if max_bytes <= 0:
            raise ValueError("a record cache needs a budget > 0 bytes")
        self.max_bytes = max_bytes
        self.size = 0
        self._named: dict[str, _Named] = {}
        self.evictions = 0
        self._writes = 0  # write numbers: an entry's order, restored by an undo
        self._log: list[tuple[_Named, Any, Any, Any]] | None = None
        self._marks = 0  # snapshots not yet restored or released
        # The write number at the latest snapshot: an entry written after it was logged
        # already (its state before the chunk is in the log), so its changes are not.
        self._base = 0

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
        entries, dirty, limit, log = named.entries, named.dirty, self.max_bytes, self._log
        pop, write, base = entries.pop, self._writes, self._base
        flushes: list[tuple[int, list[Record]]] = []
        for i, record in enumerate(records):
            change: Change = record.value
            key = record.key
            slot = key if type(key) is str or type(key) is int else _slot(key)
            size = _size(key) + _size(change.new_value) + ENTRY_OVERHEAD_BYTES
            held = pop(slot, None)
            was_dirty = dirty.pop(slot, 0) is None  # a dirty slot's value is None
            if log is not None and (held is None or held[3] <= base):
                log.append((named, slot, held, was_dirty))
            if held is None:
                first_old = change.old_value
                grown = size
            else:
                first_old = held[1] if was_dirty else change.old_value
                grown = size - held[2]
            write += 1
            entries[slot] = (record, first_old, size, write)
            named.size += grown
            self.size += grown
            dirty[slot] = None
            if self.size > limit:
                flushed: list[Record] = []
                while self.size > limit and entries:
                    flushed.extend(self._evict(named))
                dirty = named.dirty  # a flush replaced it
                if flushed:
                    flushes.append((i, flushed))
        self._writes = write
        return flushes

    def _evict(self, named: _Named) -> list[Record]:
        """Drop ``named``'s least recently written entry; a dirty one flushes the cache."""
        slot, entry = named.entries.popitem(last=False)
        named.size -= entry[2]
        self.size -= entry[2]
        self.evictions += 1
        was_dirty = named.dirty.pop(slot, 0) is None
        if self._log is not None and entry[3] <= self._base:
            self._log.append((named, slot, entry, was_dirty))
        if not was_dirty:
            return []
        return _emitted([entry]) + self._flush(named)

    def flush(self, name: str) -> list[Record]:
        """Every dirty entry of node ``name``'s cache, in order of last update, as the
        records to forward; they stay cached, clean."""
        named = self._named.get(name)
        return [] if named is None else self._flush(named)

    def _flush(self, named: _Named) -> list[Record]:
        # Clean now (a clean entry's first old value is never read again); a delete leaves
        # the cache once flushed. The dirty dict is replaced, not cleared: the undo log
        # keeps the old one.
        held, dirty, log = named.entries, named.dirty, self._log
        named.dirty = {}
        if log is not None:
            log.append((named, None, dirty, None))
        entries = [held[slot] for slot in dirty]
        for slot, entry in zip(dirty, entries, strict=True):
            if entry[0].value.new_value is None:
                del held[slot]
                named.size -= entry[2]
                self.size -= entry[2]
                if log is not None:
                    log.append((named, slot, entry, False))  # dirty: the dict above has it
        return _emitted(entries)

    def dirty(self) -> bool:
        """True while some update is held back."""
        return any(named.dirty for named in self._named.values())

    def snapshot(self) -> CacheMark:
        """A mark to ``restore`` the cache to (a chunk that fails is undone) or ``release``
        (it succeeded); from here on changes are logged. Marks nest."""
        if self._log is None:
            self._log = []
        self._marks += 1
        self._base = self._writes
        return CacheMark(len(self._log), self.size, self.evictions)

    def restore(self, mark: CacheMark) -> None:
        """The cache as it was at ``mark``: the logged changes since undone, newest first."""
        log = self._log
        assert log is not None, "restore without a snapshot"
        start, self.size, self.evictions = mark
        touched: dict[int, _Named] = {}
        for named, slot, previous, was_dirty in reversed(log[start:]):
            touched[id(named)] = named
            if slot is None:  # a flush: its dirty dict back
                named.dirty = previous
                continue
            named.entries.pop(slot, None)
            named.dirty.pop(slot, None)
            if previous is not None:
                named.entries[slot] = previous
            if was_dirty:
                named.dirty[slot] = None
        del log[start:]
        for named in touched.values():
            named.reorder()
        self.release(mark)

    def release(self, mark: CacheMark) -> None:
        """Done with ``mark`` (its chunk succeeded or was undone): logging stops with the
        outermost one."""
        self._marks -= 1
        if self._marks <= 0:
            self._marks, self._log = 0, None

    def clear(self) -> None:
        """Forget everything (an abort: what was held back is rolled back with the rest)."""
        self.size = 0
        self._named = {}
        self._marks, self._log = 0, None


def _emitted(entries: list[tuple[Record, Any, int, int]]) -> list[Record]:
    """The records a flush forwards: the newest value with the first old value, the newest
    record's timestamp and headers; nothing for a key both absent before and after."""
    out = []
    for record, first_old, _size, _write in entries:
        change = record.value
        new = change.new_value
        if new is None and first_old is None:
            continue
        # One update since the flush (most, with many keys): the record as it came.
        if first_old is change.old_value and change.is_latest:
            out.append(record)
        else:
            out.append(record.with_value(Change(new, first_old)))
    return out
