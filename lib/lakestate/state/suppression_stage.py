"""A suppression buffer's changes of one chunk, held apart until the chunk is done.

A chunked suppress node (processors/suppress.py) takes a chunk's records one after another
against a ``StagedBuffer``: puts and evictions as ``SuppressionBuffer.put`` and
``evict_while`` make them, seen by the staged reads, while the buffer, its mirror and the
transaction stay as they were. ``apply`` (the node's ``finish_chunk``) then writes the
chunk's outcome at once: the last value of every entry, index and stats key the records
wrote, so the transaction holds what the same records taken one by one leave in it. A chunk
that fails is dropped unapplied: nothing of it was written (processors/api.py's rule).

In memory mode only (the buffer's mirror serves every read). Evictions take the oldest
entry, so the mirror's entries that a chunk evicts are the first of its order: a position
in that order and a heap of the entries the chunk added make the staged order.
"""

from __future__ import annotations

from collections.abc import Callable
from heapq import heappop, heappush
from typing import Any

from lakestate.errors import InvalidStateStoreException
from lakestate.records import Windowed
from lakestate.state.keys import decode_key, encode_key
from lakestate.state.serde import encode_value
from lakestate.state.suppression_buffer import (
    ENTRY_PREFIX,
    STATS_KEY,
    BufferedRecord,
    SuppressionBuffer,
    _Entry,
    _index_key,
)

__all__ = ["StagedBuffer"]

_ABSENT = object()
_SAME = frozenset((str, int))


class StagedBuffer:
    """Staged changes over an in-memory ``SuppressionBuffer`` (see the module docstring):
    ``put``, ``evict_while``, ``num_records``, ``buffer_size``, ``min_buffer_time`` as the
    buffer's, then ``apply`` once."""

    def __init__(self, buffer: SuppressionBuffer) -> None:
        state = buffer._current()
        if state.entries is None:
            raise InvalidStateStoreException(
                f"suppression buffer {buffer.name!r}: only an in-memory buffer is staged"
            )
        self._buffer = buffer
        self._state = state
        self._base_pos = 0  # the mirror's order[:_base_pos] was evicted by the chunk
        # (buffer time, raw key) put by the chunk, a heap: its first is the oldest.
        self._added: list[tuple[int, bytes]] = []
        self._entries: dict[bytes, _Entry | None] = {}  # None: evicted
        self._writes: dict[bytes, bytes | None] = {}  # the last value written, by key
        self._keys: dict[bytes, Any] = {}  # raw key -> key put, when decoding gives it back
        self.count = state.stats["count"]
        self.size = state.stats["size"]

    def _get(self, raw_key: bytes) -> _Entry | None:
        entry = self._entries.get(raw_key, _ABSENT)
        return self._state.entries.get(raw_key) if entry is _ABSENT else entry

    def num_records(self) -> int:
        return self.count

    def buffer_size(self) -> int:
        return self.size

    def _first(self) -> tuple[int, bytes] | None:
        order, pos = self._state.order, self._base_pos
        base = order[pos] if pos < len(order) else None
        if self._added and (base is None or self._added[0] < base):
            return self._added[0]
        return base

    def min_buffer_time(self) -> int | None:
        first = self._first()
        return None if first is None else first[0]

    def put(
        self,
        buffer_time: int,
        key: Any,
        value: Any,
        old_value: Any,
        timestamp: int,
        headers: dict[str, Any] | None = None,
    ) -> None:
        """``SuppressionBuffer.put``, staged."""
        value, old_value = self._buffer._held_update(key, value, old_value)
        raw_key = ENTRY_PREFIX + encode_key(key)
        old = self._get(raw_key)
        if old is not None:
            buffer_time, prior = old.buffer_time, old.prior
        else:
            prior = old_value
        raw = _entry_bytes(buffer_time, timestamp, value, prior, headers)
        entry = _Entry(buffer_time, timestamp, value, prior, headers, len(raw_key) + len(raw))
        self._writes[raw_key] = raw
        if old is None:
            self._writes[_index_key(buffer_time, raw_key[1:])] = b""
            heappush(self._added, (buffer_time, raw_key))
            self.count += 1
            self.size += entry.size
        else:
            self.size += entry.size - old.size
        self._entries[raw_key] = entry
        if type(key) in _SAME or (type(key) is Windowed and type(key.key) in _SAME):
            self._keys[raw_key] = key  # decodes to an equal object of its type

    def evict_through(self, expiry: int, callback: Callable[[BufferedRecord], None]) -> int:
        """``evict_while`` the oldest buffer time is ``<= expiry``."""
        evicted = 0
        while True:
            first = self._first()
            if first is None or first[0] > expiry:
                return evicted
            self._evict(first, callback)
            evicted += 1

    def evict_while(
        self, predicate: Callable[[], bool], callback: Callable[[BufferedRecord], None]
    ) -> int:
        """``SuppressionBuffer.evict_while``, staged."""
        evicted = 0
        while predicate():
            first = self._first()
            if first is None:
                break
            self._evict(first, callback)
            evicted += 1
        return evicted

    def _evict(self, first: tuple[int, bytes], callback: Callable[[BufferedRecord], None]) -> None:
        buffer_time, raw_key = first
        entry = self._get(raw_key)
        if entry is None:  # cannot happen: every index entry has its entry
            raise InvalidStateStoreException(
                f"suppression buffer {self._buffer.name!r}: index entry without entry"
            )
        if self._added and self._added[0] == first:
            heappop(self._added)
        else:
            self._base_pos += 1
        self._entries[raw_key] = None
        self._writes[raw_key] = None
        self._writes[_index_key(buffer_time, raw_key[1:])] = None
        self.count -= 1
        self.size -= entry.size
        # The key as stored (decoded), as the buffer gives it: encoding is canonical.
        key = self._keys.get(raw_key, _ABSENT)
        key = decode_key(raw_key[1:]) if key is _ABSENT else key
        callback(self._buffer._record_of(key, entry))

    def apply(self) -> None:
        """Write the chunk's outcome to the transaction and the mirror (once)."""
        buffer, state = self._buffer, self._state
        if buffer._current() is not state:
            raise InvalidStateStoreException(
                f"suppression buffer {buffer.name!r}: the transaction changed under a chunk"
            )
        stats = {"count": self.count, "size": self.size}
        writes = list(self._writes.items())
        writes.append((STATS_KEY, encode_value(stats)))
        buffer._write(state, writes)
        entries, order = state.entries, state.order
        if self._base_pos:
            del order[: self._base_pos]
        for raw_key, entry in self._entries.items():
            if entry is None:
                entries.pop(raw_key, None)
            else:
                entries[raw_key] = entry
        order.update(self._added)
        state.stats.update(stats)


def _entry_bytes(buffer_time: int, ts: int, value: Any, prior: Any, headers: Any) -> bytes:
    """``encode_value([buffer_time, ts, value, prior, headers])``; for int values and no
    headers (a count's updates) formatted directly: the same JSON."""
    if (
        headers is None
        and type(value) is int
        and (prior is None or type(prior) is int)
        and type(buffer_time) is int
        and type(ts) is int
    ):
        if prior is None:
            return b"[%d,%d,%d,null,null]" % (buffer_time, ts, value)
        return b"[%d,%d,%d,%d,null]" % (buffer_time, ts, value, prior)
    return encode_value([buffer_time, ts, value, prior, headers])
